"""Benchmark the all-traffic report: 100k traffic queries x 10 judged chunks (1M judge grades) and
1,000 human-labeled queries drawn from the random queue, 9 metrics with PPI++ CIs.

Builds (once, cached by size in the temp folder) a database in the real schema with raw executemany:
N logged queries x 10 production retrievals, a relevance judge run over all of them (``on_set =
'all'``; the judge's grade is the true one shifted up by one on 30% of the pairs), and 1,000 queries
labeled with the true grades, recorded as handed out by the random queue. Then times, in one process:

- ``baseline_sqlite_read_judge_rows_s``: SQLite alone handing Python the 1M judge rows (the floor
  of a first load, measured in the same run: the machine's load changes every figure);
- ``first_load_s``: ``all_traffic_report`` with nothing in memory (reads 1M judge grades, the
  rankings, the labels; per-query metrics of every query; 9 estimates);
- ``report_warm_s``: the same call again (the judge's part is kept while the run, the ingests and
  the settings are unchanged; the human part is read again);
- ``report_after_label_s``: the call after one label changed through another connection;
- ``estimator_s`` vs ``ppi_py_s``: the 9 estimates alone (labeler.estimate.ppi.ppi_mean) against
  ``ppi_py.ppi_mean_ci`` on the same arrays;
- ``page_rerun_after_label_s``: an AppTest rerun of the Metrics page (the whole page, with the
  all-traffic section) after one new label;
- the weighted path (issue 27), on a copy of the database (SQLite's backup; the cached file is
  never changed) with routing decisions for every query (the labeled ones routed, a tenth by a
  signal with probability 1, the rest by a 1% rate; the others not routed at 1%): ``routed_report_warm_s`` (``all_traffic_report``
  under the routed design, second call) against ``report_warm_s``; ``routed_estimator_s`` (the 9
  active-inference estimates with the recorded probabilities and the 9 Hajek ones) against
  ``ratio_estimator_s`` (the 9 uniform PPI++ ratios, as the uniform report computes them);
  ``labeled_weighted_s``: the labeled report's weighted figures alone (reading the decisions,
  the labeled shares, 9 Hajek ratios).

The ``..._ratio_...`` fields divide a time by its baseline from the same run (the report's first
load and its reload after a label by the SQLite read; the estimator by ppi_py): ratios, not
seconds, are what a budget can hold on another machine.

Run: ``PYTHONPATH=. python tests/bench/bench_ppi.py [--queries 100000]``; prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np

import labeler

DEPTH = 10
LABELED = 1000
NOW = "2026-11-30T12:00:00.000000Z"


def build_db(path: Path, n_queries: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    n_docs = max(1000, n_queries * 3)
    db = labeler.connect(path)
    conn: sqlite3.Connection = db.conn
    query = np.repeat(np.arange(1, n_queries + 1), DEPTH)
    rank = np.tile(np.arange(1, DEPTH + 1), n_queries)
    doc = (rng.integers(0, n_docs, n_queries).repeat(DEPTH) + np.tile(np.arange(DEPTH), n_queries) * 7919) % n_docs + 1
    score = np.round(1.0 - rank / 40.0, 4)
    grade = rng.choice(4, query.size, p=[0.45, 0.25, 0.2, 0.1])
    judge = np.minimum(grade + (rng.random(query.size) < 0.3), 3)
    labeled = np.sort(rng.choice(np.arange(1, n_queries + 1), LABELED, replace=False))
    is_labeled = np.isin(query, labeled)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO documents (pk, doc_id, text, created_at) VALUES (?, ?, ?, ?)",
                     ((d, f"doc-{d}", f"text of chunk {d}", NOW) for d in range(1, n_docs + 1)))
    conn.executemany("INSERT INTO queries (pk, query_id, question, norm_question, origin, created_at) "
                     "VALUES (?, ?, ?, ?, 'log', ?)",
                     ((q, f"q{q}", f"question {q}", f"question {q}", NOW) for q in range(1, n_queries + 1)))
    conn.executemany("INSERT INTO retrievals (query_pk, retriever, rank, doc_pk, score) VALUES (?, 'production', ?, ?, ?)",
                     zip(query.tolist(), rank.tolist(), doc.tolist(), score.tolist(), strict=True))
    conn.execute("INSERT INTO judge_runs (id, judge, kind, rubric, rubric_hash, rubric_text, model, params, on_set, "
                 "status, items, done, created_at, finished_at) VALUES (1, 'relevance.v1', 'relevance', "
                 "'relevance.v1/r1', 'h', 'text', 'bench', '{}', 'all', 'done', ?, ?, ?, ?)",
                 [query.size, query.size, NOW, NOW])
    conn.executemany("INSERT INTO judge_labels (run_id, query_pk, doc_pk, status, grade, updated_at) "
                     "VALUES (1, ?, ?, 'ok', ?, ?)",
                     ((q, d, g, NOW) for q, d, g in zip(query.tolist(), doc.tolist(), judge.tolist(), strict=True)))
    conn.executemany("INSERT INTO relevance_labels (query_pk, doc_pk, annotator, grade, origin, created_at, "
                     "updated_at) VALUES (?, ?, 'bench', ?, 'human', ?, ?)",
                     ((q, d, g, NOW, NOW) for q, d, g in zip(query[is_labeled].tolist(), doc[is_labeled].tolist(),
                                                              grade[is_labeled].tolist(), strict=True)))
    conn.executemany("INSERT INTO query_labels (query_pk, annotator, status, created_at, updated_at, submitted_at) "
                     "VALUES (?, 'bench', 'submitted', ?, ?, ?)", ((int(q), NOW, NOW, NOW) for q in labeled))
    conn.executemany("INSERT INTO assignments (query_pk, annotator, state, updated_at) VALUES (?, 'bench', 'done', ?)",
                     ((int(q), NOW) for q in labeled))
    conn.executemany("INSERT INTO queue_designs (query_pk, design, seed, annotator, handed_at) "
                     "VALUES (?, 'random', '7', 'bench', ?)", ((int(q), NOW) for q in labeled))
    conn.execute("INSERT INTO annotators (name, role, created_at) VALUES ('bench', 'lead', ?)", [NOW])
    conn.execute("COMMIT")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.close()
    return path


def _timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def _relabel(path: Path, i: int) -> None:
    """Change one grade of a labeled query through another connection (as another annotator would)."""
    from labeler import labels

    other = labeler.connect(path)
    pk, doc = other.execute("SELECT query_pk, doc_pk FROM relevance_labels ORDER BY query_pk LIMIT 1").fetchone()
    labels.set_grade(other, pk, doc, "bench", i % 4)
    other.close()


def _routing_rows(db, labeled: np.ndarray, pks: np.ndarray) -> None:
    """Routing decisions for every query: the labeled ones routed (every tenth by a signal, p = 1;
    the rest by a 1% rate), the others not routed at 1%."""
    signal = set(labeled[::10].tolist())
    chosen = set(labeled.tolist())
    rows = [(int(q), int(q in chosen), 1.0 if q in signal else 0.01,
             "signal" if q in signal else "sampled" if q in chosen else "not-sampled", NOW[:10], None, 0, NOW, None)
            for q in pks.tolist()]
    with db.conn:
        db.conn.executemany("INSERT INTO routing_decisions (query_pk, routed, inclusion_prob, reason, day, topic, "
                            "seed, decided_at, ingest_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def _weighted_path(db, judged, labeled, hv, hr, rows, rest) -> dict[str, float]:
    """Time the weighted path against the unweighted one in this run (see the module doc); ``db``
    is a copy that gets the routing decisions."""
    from labeler.estimate import ppi, traffic
    from labeler.estimate.report import all_traffic_report
    from labeler.estimate.routed import hajek_ratio, routed_sample
    from labeler.estimate.weighted import labeled_weighted
    from labeler.report import retrieval_report

    b, bh, bu = hr.astype(float), judged.relevant[rows].astype(float), judged.relevant[rest].astype(float)
    jrel = judged.relevant.astype(float)
    nums = {s: (np.where(hr, np.nan_to_num(hv[s]), 0.0), judged.numerators(s)) for s in traffic.DEFAULT_SPECS}
    ratio_s, _ = _timed(lambda: [ppi.ppi_ratio(a, j[rows], j[rest], b, bh, bu) for a, j in nums.values()])
    _routing_rows(db, labeled, judged.pks)
    sample = routed_sample(db, judged.pks, labeled)

    def weighted() -> None:
        for a, j in nums.values():
            full_a, full_b = np.zeros(j.size), np.zeros(j.size)
            full_a[rows], full_b[rows] = a, b
            ppi.active_ratio(full_a, j, full_b, jrel, sample.pi, sample.xi)
            hajek_ratio(a, b, sample.pi[rows])

    est_s, _ = _timed(weighted)
    rep = all_traffic_report(db, 1)
    if rep.design != "routed":
        raise SystemExit(f"the routed design was not chosen: {rep.design}")
    routed_s, _ = _timed(lambda: all_traffic_report(db, 1))
    per_query = retrieval_report(db, list(traffic.DEFAULT_SPECS), n_resamples=10).per_query
    lw_s, lw = _timed(lambda: labeled_weighted(db, per_query, traffic.DEFAULT_SPECS))
    if lw is None or lw["error"]:
        raise SystemExit(f"no weighted figures: {lw}")
    return {"ratio_estimator_s": round(ratio_s, 4), "routed_estimator_s": round(est_s, 4),
            "routed_estimator_ratio_to_uniform": round(est_s / ratio_s, 2),
            "routed_report_warm_s": round(routed_s, 3), "labeled_weighted_s": round(lw_s, 4),
            "routed_ndcg@10": {k: rep.metrics["ndcg@10"][k] for k in ("estimate", "ci_low", "ci_high")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=100_000)
    args = parser.parse_args()
    path = Path(tempfile.gettempdir()) / f"labeler-bench-ppi-{args.queries}.db"
    build_s = 0.0
    if not path.exists():
        build_s, _ = _timed(lambda: build_db(path.with_suffix(".tmp"), args.queries).rename(path))

    from labeler import report as reports
    from labeler.estimate import ppi, traffic
    from labeler.estimate.report import all_traffic_report

    db = labeler.connect(path)
    # the baseline: SQLite alone handing Python the run's 1M (query, chunk, grade) rows, no work on them
    raw_s, _ = _timed(lambda: sum(1 for _ in db.execute("SELECT query_pk, doc_pk, grade FROM judge_labels "
                                                         "WHERE run_id = 1")))
    first_s, rep = _timed(lambda: all_traffic_report(db, 1))
    warm_s, _ = _timed(lambda: all_traffic_report(db, 1))
    _relabel(path, 1)
    after_s, _ = _timed(lambda: all_traffic_report(db, 1))

    # the estimator alone against ppi_py on the same arrays
    import ppi_py

    judged = traffic.judged_traffic(db, 1)
    labeled = traffic.submitted_pks(db, judged.pks)
    hv, hr = traffic.human_values(db, judged, labeled, list(traffic.DEFAULT_SPECS))
    rows = np.searchsorted(judged.pks, labeled)
    rest = np.ones(judged.pks.size, dtype=bool)
    rest[rows] = False
    arrays = []
    for s in traffic.DEFAULT_SPECS:
        a = np.where(hr, np.nan_to_num(hv[s]), 0.0)
        j = np.where(judged.relevant, np.nan_to_num(judged.values[s]), 0.0)
        arrays.append((a, j[rows], j[rest]))
    ours_s, ours = _timed(lambda: [ppi.ppi_mean(*x) for x in arrays])
    ref_s, ref = _timed(lambda: [ppi_py.ppi_mean_ci(*x, alpha=0.05) for x in arrays])
    max_diff = max(max(abs(o.ci_low - float(np.ravel(r[0])[0])), abs(o.ci_high - float(np.ravel(r[1])[0])))
                   for o, r in zip(ours, ref, strict=True))

    from streamlit.testing.v1 import AppTest

    from labeler.app import state

    os.environ["LABELER_DB"] = str(path)
    os.environ["LABELER_WARM_METRICS"] = "0"
    app = str(Path(labeler.__file__).parent / "app" / "streamlit_app.py")
    at = AppTest.from_file(app, default_timeout=600)
    at.session_state[state.ANNOTATOR] = "bench"
    at.switch_page("views/metrics.py")
    page_first_s, _ = _timed(at.run)
    if at.exception:
        raise SystemExit(f"page failed: {at.exception}")
    rerun_s, _ = _timed(at.run)
    times = []
    for i in range(3):
        _relabel(path, i + 2)
        t, _ = _timed(at.run)
        times.append(t)
    shown = any("judge-only (biased)" in d.value.columns for d in at.dataframe)
    reports.clear_cache()
    with tempfile.TemporaryDirectory() as folder:
        copy = sqlite3.connect(Path(folder) / "routed.db")
        db.conn.backup(copy)
        copy.close()
        routed_db = labeler.connect(Path(folder) / "routed.db")
        weighted = _weighted_path(routed_db, judged, labeled, hv, hr, rows, rest)
        routed_db.close()
    out = {
        "queries": args.queries, "judge_grades": int(judged.run.shape[0]), "labeled": int(labeled.size),
        "metrics": len(traffic.DEFAULT_SPECS), "build_s": round(build_s, 2),
        "baseline_sqlite_read_judge_rows_s": round(raw_s, 3), "first_load_s": round(first_s, 3), "report_warm_s": round(warm_s, 3),
        "report_after_label_s": round(after_s, 3),
        "estimator_s": round(ours_s, 4), "ppi_py_s": round(ref_s, 4), "ppi_py_max_ci_diff": max_diff,
        "page_first_s": round(page_first_s, 3), "page_rerun_s": round(rerun_s, 3),
        "page_rerun_after_label_s": round(float(np.median(times)), 3), "section_shown": shown,
        "recall@5": rep.metrics["recall@5"], "effective_n_ndcg@10": rep.metrics["ndcg@10"]["effective_n"],
        # ratios to baselines measured above in this run: comparable across machines (tests/bench/check.py)
        "first_load_ratio_to_sqlite_read": round(first_s / raw_s, 2),
        "report_after_label_ratio_to_sqlite_read": round(after_s / raw_s, 2),
        "estimator_ratio_to_ppi_py": round(ours_s / ref_s, 3),
        **weighted,
        "report_warm_ratio_routed_to_uniform": round(weighted["routed_report_warm_s"] / warm_s, 2),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
