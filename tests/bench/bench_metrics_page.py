"""Benchmark the Metrics page and the report behind it on a database with 100k labeled queries.

Builds (once, cached by size in the temp folder) a database in the real schema with raw
executemany: N queries x 20 production retrievals, ~90% of them graded by one annotator plus 0-3
relevant chunks the retriever missed, every query submitted. Then times, in one process:

- ``report_cold_s``: ``retrieval_report`` (recall@1,3,5,10, MRR, nDCG@10 with 1000-resample CIs)
  on a fresh connection with nothing cached: the SQL reads, consolidation, metrics, CIs;
- ``report_warm_s``: the same call again (the loaded run and golden labels are reused while the
  database is unchanged);
- ``page_first_no_warmup_s``: an AppTest render of the Metrics page (CIs, segments, curve,
  histogram, worst queries, diagnosis) with nothing in memory and the background warm-up off;
- ``warmup_in_background_s`` / ``page_first_after_warmup_s``: the app computes the page's
  default report in a background thread when anyone opens any page; how long that takes, and the
  first render of the Metrics page once it is done;
- ``page_rerun_s``: the best of three reruns (a widget change or a refresh while nobody labeled);
- ``page_after_label_s``: the median of three reruns each after one label changed through another
  connection (the changed queries are re-read and patched in, so the change shows).

Run: ``PYTHONPATH=. python tests/bench/bench_metrics_page.py [--queries 100000]``; prints JSON.
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

DEPTH = 20
NOW = "2026-11-30T12:00:00.000000Z"


def build_db(path: Path, n_queries: int, seed: int = 0) -> Path:
    """A labeler database with ``n_queries`` submitted queries, written with raw executemany."""
    rng = np.random.default_rng(seed)
    n_docs = max(1000, n_queries * 5)
    db = labeler.connect(path)
    conn: sqlite3.Connection = db.conn
    query = np.repeat(np.arange(1, n_queries + 1), DEPTH)
    rank = np.tile(np.arange(1, DEPTH + 1), n_queries)
    doc = (rng.integers(0, n_docs, n_queries).repeat(DEPTH)
           + np.tile(np.arange(DEPTH), n_queries) * 7919) % n_docs + 1
    score = np.round(1.0 - rank / 40.0, 4)
    judged = rng.random(query.size) < 0.9
    grade = rng.choice(4, query.size, p=[0.5, 0.2, 0.2, 0.1])
    extra = rng.integers(0, 4, n_queries)
    extra_query = np.repeat(np.arange(1, n_queries + 1), extra)
    extra_doc = (rng.integers(0, n_docs, extra_query.size) + 3 * DEPTH * 7919 + 1) % n_docs + 1
    # a missed doc must not be one the query already retrieved: drop those rare collisions
    retrieved = set(zip(query.tolist(), doc.tolist(), strict=True))
    keep = np.array([(q, d) not in retrieved for q, d in zip(extra_query.tolist(), extra_doc.tolist(),
                                                              strict=True)], dtype=bool)
    extra_query, extra_doc = extra_query[keep], extra_doc[keep]
    extra_pairs = dict.fromkeys(zip(extra_query.tolist(), extra_doc.tolist(), strict=True))
    origin = np.where(rng.random(n_queries) < 0.2, "synthetic", "log")
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO documents (pk, doc_id, text, created_at) VALUES (?, ?, ?, ?)",
                     ((d, f"doc-{d}", f"text of chunk {d}", NOW) for d in range(1, n_docs + 1)))
    conn.executemany(
        "INSERT INTO queries (pk, query_id, question, norm_question, origin, review_state, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        ((q, f"q{q}", f"question {q}", f"question {q}", o, "accepted" if o == "synthetic" else None, NOW)
         for q, o in zip(range(1, n_queries + 1), origin.tolist(), strict=True)))
    conn.executemany("INSERT INTO retrievals (query_pk, retriever, rank, doc_pk, score) "
                     "VALUES (?, 'production', ?, ?, ?)",
                     zip(query.tolist(), rank.tolist(), doc.tolist(), score.tolist(), strict=True))
    labels = [(q, d, int(g)) for q, d, g, j in zip(query.tolist(), doc.tolist(), grade.tolist(),
                                                     judged.tolist(), strict=True) if j]
    labels += [(q, d, int(rng.integers(1, 4))) for q, d in extra_pairs]
    conn.executemany("INSERT INTO relevance_labels (query_pk, doc_pk, annotator, grade, origin, created_at, "
                     "updated_at) VALUES (?, ?, 'bench', ?, 'human', ?, ?)",
                     ((q, d, g, NOW, NOW) for q, d, g in labels))
    conn.executemany("INSERT INTO query_labels (query_pk, annotator, status, created_at, updated_at, "
                     "submitted_at, answer_faithful) VALUES (?, 'bench', 'submitted', ?, ?, ?, ?)",
                     ((q, NOW, NOW, NOW, "yes" if q % 5 else "no") for q in range(1, n_queries + 1)))
    conn.execute("INSERT INTO annotators (name, role, created_at) VALUES ('bench', 'lead', ?)", [NOW])
    conn.execute("COMMIT")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.close()
    return path


def _timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=100_000)
    args = parser.parse_args()
    path = Path(tempfile.gettempdir()) / f"labeler-bench-metrics-{args.queries}.db"
    build_s = 0.0
    if not path.exists():
        build_s, _ = _timed(lambda: build_db(path.with_suffix(".tmp"), args.queries).rename(path))

    from labeler import labels
    from labeler import report as reports

    db = labeler.connect(path)
    golden_s, golden = _timed(lambda: labels.golden_labels(db))
    cold_s, rep = _timed(lambda: reports.retrieval_report(db))  # recall/ndcg@1,3,5,10 + mrr, 1000 resamples
    reports.retrieval_report(db, reuse=True)
    warm_s, _ = _timed(lambda: reports.retrieval_report(db, reuse=True))
    segments_s, _ = _timed(lambda: rep.segments())
    curve_s, _ = _timed(lambda: rep.curve())

    from streamlit.testing.v1 import AppTest

    from labeler.app import state

    app = str(Path(labeler.__file__).parent / "app" / "streamlit_app.py")
    os.environ["LABELER_DB"] = str(path)

    # 1. the page opened with nothing in memory and no warm-up, as right after a server start
    reports.clear_cache()
    os.environ["LABELER_WARM_METRICS"] = "0"
    at = AppTest.from_file(app, default_timeout=600)
    at.session_state["annotator"] = "bench"
    at.switch_page("views/metrics.py")
    first_s, _ = _timed(at.run)
    if at.exception:
        raise SystemExit(f"page failed: {at.exception}")

    # 2. the server computed the page's report in the background when someone opened any page
    reports.clear_cache()
    os.environ["LABELER_WARM_METRICS"] = "1"
    state._warmer.clear()
    at = AppTest.from_file(app, default_timeout=600)
    at.session_state["annotator"] = "bench"
    t = time.perf_counter()
    at.run()  # the Label page; starts the warm-up
    state._warmer(str(path.resolve())).thread.join()
    warmup_s = time.perf_counter() - t
    at.switch_page("views/metrics.py")
    warm_first_s, _ = _timed(at.run)

    reruns = []
    for _ in range(3):
        t, _ = _timed(at.run)
        reruns.append(t)
    tiles = {m.label: m.value for m in at.metric}
    # one label changes through another connection, as another annotator's session would
    # (through the labels API, as the Label page writes: the change is logged in label_events)

    other = labeler.connect(path)
    after = []
    for _ in range(3):
        q, d, g, who = other.execute("SELECT query_pk, doc_pk, grade, annotator FROM relevance_labels "
                                     "ORDER BY random() LIMIT 1").fetchone()
        labels.set_grade(other, q, d, who, 3 - g)
        t, _ = _timed(at.run)
        after.append(t)
        labels.set_grade(other, q, d, who, g)
        at.run()
    print(json.dumps({
        "n_queries": rep.n_queries,
        "golden_labels_rows": len(golden),
        "retrieval_rows": int(len(rep._measured._run)),
        "specs": rep.specs,
        "build_db_s": round(build_s, 2),
        "golden_labels_s": round(golden_s, 3),
        "report_cold_s": round(cold_s, 3),
        "report_warm_s": round(warm_s, 5),
        "segments_s": round(segments_s, 3),
        "curve_s": round(curve_s, 3),
        "page_first_no_warmup_s": round(first_s, 3),
        "warmup_in_background_s": round(warmup_s, 3),
        "page_first_after_warmup_s": round(warm_first_s, 3),
        "page_rerun_s": round(min(reruns), 3),
        "page_rerun_max_s": round(max(reruns), 3),
        "page_after_label_s": round(sorted(after)[1], 3),
        "page_after_label_max_s": round(max(after), 3),
        "page_target_s": 1.0,
        "tiles": {k: tiles[k] for k in list(tiles)[:4]},
    }, indent=2))


if __name__ == "__main__":
    main()
