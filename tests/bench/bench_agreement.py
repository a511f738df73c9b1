"""Benchmark the agreement statistics and the Judge page on 100k judged pairs; prints one JSON document.

1. The dashboard's statistics (``labeler.agreement.ordinal_agreement``: exact agreement, kappa
   unweighted / linear / quadratic / collapsed, Krippendorff's ordinal alpha, Spearman, precision,
   recall, F1, bias, over/under grading, confusion matrix) with 1,000 bootstrap resamples,
   vectorised, against a plain loop of library calls (sklearn ``cohen_kappa_score`` x4,
   ``precision_recall_fscore_support``, ``confusion_matrix``, scipy ``spearmanr``,
   ``krippendorff.alpha``, numpy for bias) over **the same resample indices**
   (``agreement.resample_indices``). The loop costs ~0.3 s per resample at 100k pairs, so it is
   timed on the first ``--loop-resamples`` resamples and extrapolated linearly to 1,000; on those
   the values of both are compared (max absolute difference). Target: >= 10x.
   The same with the page's bootstrap over queries (10k queries x 10 pairs; ``by_query``).
2. The Judge page (AppTest) on a database with 100k judged pairs (10k queries x 10 chunks, 10% of
   them graded by two annotators), written with raw executemany: the first render in a fresh
   process (imports, agreement with 1,000 resamples, gate, confusion matrix heatmap, disagreement
   browser; nothing cached), a rerun (cached until a label or run changes), and a render after
   clearing the cache (everything recomputed, modules already imported). Target: < 2 s.

Run: ``PYTHONPATH=. python tests/bench/bench_agreement.py [--pairs 100000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path

import krippendorff
import numpy as np
from scipy.stats import spearmanr
from sklearn.metrics import cohen_kappa_score, confusion_matrix, precision_recall_fscore_support

import labeler
from labeler import agreement

LEVELS = [0, 1, 2, 3]
NOW = "2026-11-30T12:00:00.000000Z"
DEPTH = 10


def make_pairs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Human grades and a judge that is right ~60% of the time, one off otherwise, sometimes two."""
    rng = np.random.default_rng(seed)
    human = rng.choice(4, n, p=[0.4, 0.25, 0.2, 0.15])
    noise = rng.choice([-2, -1, 0, 1, 2], n, p=[0.03, 0.17, 0.6, 0.17, 0.03])
    return human, np.clip(human + noise, 0, 3)


def library_stats(h: np.ndarray, j: np.ndarray) -> dict[str, float]:
    """Every scalar statistic of the dashboard, one library call each (the plain way)."""
    p, r, f, _ = precision_recall_fscore_support(h >= 2, j >= 2, average="binary", zero_division=np.nan)
    confusion_matrix(h, j, labels=LEVELS)
    return {
        "exact_agreement": float(np.mean(h == j)),
        "cohen_kappa": cohen_kappa_score(h, j, labels=LEVELS),
        "kappa_linear": cohen_kappa_score(h, j, labels=LEVELS, weights="linear"),
        "kappa_quadratic": cohen_kappa_score(h, j, labels=LEVELS, weights="quadratic"),
        "kappa_collapsed": cohen_kappa_score(h >= 2, j >= 2),
        "krippendorff_alpha": krippendorff.alpha(reliability_data=np.vstack([h, j]).astype(float),
                                                 level_of_measurement="ordinal", value_domain=LEVELS),
        "spearman_rho": spearmanr(h, j).statistic,
        "precision": p, "recall": r, "f1": f,
        "bias": float(np.mean(j - h)), "over_grading": float(np.mean(j > h)), "under_grading": float(np.mean(j < h)),
    }


def bench_statistics(n: int, n_resamples: int, loop_resamples: int) -> dict:
    human, judge = make_pairs(n)
    vector_times = []
    for _ in range(3):  # best of three: the machine is shared
        t = time.perf_counter()
        stats = agreement.ordinal_agreement(human, judge, levels=4, threshold=2, n_resamples=n_resamples, seed=0)
        vector_times.append(time.perf_counter() - t)
    t = time.perf_counter()
    arrays = agreement.ordinal_arrays(human, judge, levels=4, threshold=2, n_resamples=n_resamples, seed=0).arrays
    arrays_s = time.perf_counter() - t

    # The same resamples: the first rows of the same index matrix.
    idx = []
    for block in agreement.resample_indices(n, n_resamples, seed=0):
        idx.append(block)
        if sum(len(b) for b in idx) >= loop_resamples:
            break
    idx = np.vstack(idx)[:loop_resamples]
    t = time.perf_counter()
    looped = [library_stats(human[i], judge[i]) for i in idx]
    loop_s = time.perf_counter() - t
    per_resample = loop_s / loop_resamples
    point = library_stats(human, judge)
    max_diff = max(abs(looped[r][name] - arrays[name][r + 1]) for r in range(loop_resamples) for name in point)
    max_diff_point = max(abs(point[name] - stats[name].value) for name in point)
    vector_s = min(vector_times)
    loop_total = per_resample * (n_resamples + 1)

    # The Judge page's bootstrap: whole queries (DEPTH pairs each) are resampled; the loop expands
    # each drawn query to its pairs and calls the libraries, on the same drawn queries.
    query = np.arange(n) // DEPTH
    t = time.perf_counter()
    by_query = agreement.ordinal_arrays(human, judge, levels=4, threshold=2, n_resamples=n_resamples, seed=0,
                                        clusters=query).arrays
    by_query_s = time.perf_counter() - t
    drawn = next(agreement.resample_indices(n // DEPTH, n_resamples, seed=0))[:loop_resamples]
    t = time.perf_counter()
    looped_q = []
    for row in drawn:
        rows = (row[:, None] * DEPTH + np.arange(DEPTH)).ravel()
        looped_q.append(library_stats(human[rows], judge[rows]))
    loop_q_total = (time.perf_counter() - t) / len(drawn) * (n_resamples + 1)
    max_diff_q = max(abs(looped_q[r][name] - by_query[name][r + 1]) for r in range(len(drawn)) for name in point)
    return {
        "pairs": n, "n_resamples": n_resamples,
        "vectorised_s": round(vector_s, 3),
        "vectorised_arrays_only_s": round(arrays_s, 3),
        "library_loop_resamples_timed": loop_resamples,
        "library_loop_per_resample_s": round(per_resample, 4),
        "library_loop_extrapolated_s": round(loop_total, 1),
        "speedup": round(loop_total / vector_s, 1),
        "max_abs_diff_on_same_resamples": float(max_diff),
        "max_abs_diff_point_values": float(max_diff_point),
        "statistics": len(point) + 1,
        "by_query": {"queries": n // DEPTH, "vectorised_s": round(by_query_s, 3),
                     "library_loop_extrapolated_s": round(loop_q_total, 1),
                     "speedup": round(loop_q_total / by_query_s, 1),
                     "max_abs_diff_on_same_resamples": float(max_diff_q)},
        "kappa": round(stats["cohen_kappa"].value, 4),
        "kappa_ci": [round(stats["cohen_kappa"].ci_low, 4), round(stats["cohen_kappa"].ci_high, 4)],
        "note": "the library loop is timed on the first resamples of the same index matrix and extrapolated "
                "linearly to n_resamples + 1 (the sample itself); values compared on those resamples",
    }


def build_db(path: Path, n_pairs: int, seed: int = 1) -> None:
    """100k judged pairs in the real schema: queries x DEPTH chunks, graded by 'ann' (10% also by
    'bob'), all submitted, and one finished relevance.v1 run that judged every pair."""
    rng = np.random.default_rng(seed)
    n_queries = n_pairs // DEPTH
    db = labeler.connect(path)
    conn: sqlite3.Connection = db.conn
    human, judge = make_pairs(n_queries * DEPTH, seed)
    query = np.repeat(np.arange(1, n_queries + 1), DEPTH)
    rank = np.tile(np.arange(1, DEPTH + 1), n_queries)
    doc = np.arange(1, query.size + 1)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO documents (pk, doc_id, text, created_at) VALUES (?, ?, ?, ?)",
                     ((d, f"doc-{d}", f"text of chunk {d} about topic {d % 97}", NOW) for d in doc.tolist()))
    conn.executemany("INSERT INTO queries (pk, query_id, question, norm_question, answer, created_at) "
                     "VALUES (?, ?, ?, ?, ?, ?)",
                     ((q, f"q{q}", f"question {q}?", f"question {q}?", f"answer {q}", NOW)
                      for q in range(1, n_queries + 1)))
    conn.executemany("INSERT INTO retrievals (query_pk, retriever, rank, doc_pk, score) VALUES (?, 'production', ?, ?, ?)",
                     zip(query.tolist(), rank.tolist(), doc.tolist(), (1 - rank / 20).tolist(), strict=True))
    conn.executemany("INSERT INTO relevance_labels (query_pk, doc_pk, annotator, grade, origin, created_at, updated_at) "
                     "VALUES (?, ?, 'ann', ?, 'human', ?, ?)",
                     ((q, d, g, NOW, NOW) for q, d, g in zip(query.tolist(), doc.tolist(), human.tolist(), strict=True)))
    overlap = query <= n_queries // 10
    bob = np.where(rng.random(query.size) < 0.85, human, np.clip(human + rng.choice([-1, 1], query.size), 0, 3))
    conn.executemany("INSERT INTO relevance_labels (query_pk, doc_pk, annotator, grade, origin, created_at, updated_at) "
                     "VALUES (?, ?, 'bob', ?, 'human', ?, ?)",
                     ((q, d, g, NOW, NOW) for q, d, g in zip(query[overlap].tolist(), doc[overlap].tolist(),
                                                               bob[overlap].tolist(), strict=True)))
    for who, last in (("ann", n_queries), ("bob", n_queries // 10)):
        conn.executemany("INSERT INTO query_labels (query_pk, annotator, status, created_at, updated_at, submitted_at) "
                         "VALUES (?, ?, 'submitted', ?, ?, ?)", ((q, who, NOW, NOW, NOW) for q in range(1, last + 1)))
    conn.execute("INSERT INTO annotators (name, role, created_at) VALUES ('ann', 'lead', ?), ('bob', 'annotator', ?)",
                 [NOW, NOW])
    from labeler import judge as judges

    params = {"seed": 0, "limit": None, "max_chunks": 10, "scale": {
        "grade_names": labeler.get_settings(db)["grade_names"], "grade_help": None, "threshold": 2}}
    conn.execute("INSERT INTO judge_runs (id, judge, kind, rubric, rubric_hash, rubric_text, model, temperature, params, "
                 "on_set, status, items, done, created_at, finished_at) VALUES (1, 'relevance.v1', 'relevance', "
                 "'relevance.v1/r1', 'bench', ?, 'bench-model', 0, ?, 'labeled', 'done', ?, ?, ?, ?)",
                 [judges.RELEVANCE_RUBRIC_V1, json.dumps(params), query.size, query.size, NOW, NOW])
    conn.executemany("INSERT INTO judge_labels (run_id, query_pk, doc_pk, status, grade, score, rationale, updated_at) "
                     "VALUES (1, ?, ?, 'ok', ?, ?, ?, ?)",
                     ((q, d, g, float(g), f"grade {g} because", NOW)
                      for q, d, g in zip(query.tolist(), doc.tolist(), judge.tolist(), strict=True)))
    conn.execute("COMMIT")
    conn.execute("PRAGMA foreign_keys = ON")
    db.close()


def bench_page(n_pairs: int) -> dict:
    from streamlit.testing.v1 import AppTest

    folder = Path(tempfile.gettempdir()) / "labeler-bench-agreement"
    folder.mkdir(exist_ok=True)
    path = folder / f"judged-{n_pairs}.db"
    if path.exists():
        path.unlink()
    t = time.perf_counter()
    build_db(path, n_pairs)
    build_s = time.perf_counter() - t
    os.environ["LABELER_DB"] = str(path)
    app = str(Path(labeler.__file__).parent / "app" / "streamlit_app.py")
    at = AppTest.from_file(app, default_timeout=120)
    at.session_state["annotator"] = "ann"
    at.run()  # the Label page (the default) first; not timed
    at.switch_page("views/judge.py")
    t = time.perf_counter()
    at.run()
    first = time.perf_counter() - t
    assert not at.exception, at.exception
    t = time.perf_counter()
    at.run()
    rerun = time.perf_counter() - t
    assert not at.exception, at.exception
    import streamlit as st

    st.cache_data.clear()  # everything computed again, but the modules are imported now
    t = time.perf_counter()
    at.run()
    cold_cache = time.perf_counter() - t
    assert not at.exception, at.exception
    table = next(df.value for df in at.dataframe if "judge vs humans" in df.value.columns).set_index("statistic")
    return {"pairs": n_pairs, "build_db_s": round(build_s, 1), "page_first_render_s": round(first, 3),
            "page_rerun_s": round(rerun, 3), "page_cache_cleared_s": round(cold_cache, 3), "target_s": 2.0,
            "page_kappa": round(float(table.loc["cohen_kappa", "judge vs humans"]), 4),
            "page_ceiling_kappa": round(float(table.loc["cohen_kappa", "human-human (ceiling)"]), 4),
            "page_n": int(table.loc["cohen_kappa", "n"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--loop-resamples", type=int, default=20)
    parser.add_argument("--no-page", action="store_true")
    args = parser.parse_args()
    out = {"statistics": bench_statistics(args.pairs, args.resamples, args.loop_resamples)}
    if not args.no_page:
        out["judge_page"] = bench_page(args.pairs)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
