"""Benchmark: ``next_item`` at 100k items, 99% labeled (the queue's open index at work), against
the bare indexed read of the first open queue row in the same database. Prints one JSON document.

The test of the same setup (tests/test_labels.py) checks the behaviour and the query plan; the
time lives here, where a loaded machine cannot fail a test.

    PYTHONPATH=. python tests/bench/bench_next_item.py [--items 100000] [--rounds 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from labeler import db as store
from labeler import labels as L


def build(db, n: int) -> None:
    """``n`` queries, 99% submitted in queue order (overlapped items by two annotators)."""
    with store.transaction(db):
        db.execute("WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < ?) "
                   "INSERT INTO queries (pk, query_id, question, norm_question, created_at) "
                   "SELECT n, 'q' || n, 'question ' || n, 'question ' || n, '2026-01-01' FROM i", [n])
    L.sync_queue(db)
    with store.transaction(db):
        db.execute("CREATE TEMP TABLE ordered AS SELECT query_pk, needed, "
                   "row_number() OVER (ORDER BY sort_key, query_pk) AS i FROM queue")
        for j in range(2):
            db.execute("INSERT INTO assignments (query_pk, annotator, state, updated_at) "
                       "SELECT query_pk, 'a' || ((i + ?) % 8), 'done', '2026' FROM ordered "
                       "WHERE i <= ? AND needed > ?", [j, int(n * 0.99), j])
            db.execute("INSERT INTO query_labels (query_pk, annotator, status, created_at, updated_at) "
                       "SELECT query_pk, 'a' || ((i + ?) % 8), 'submitted', '2026', '2026' FROM ordered "
                       "WHERE i <= ? AND needed > ?", [j, int(n * 0.99), j])
        db.execute("UPDATE queue SET taken = (SELECT count(*) FROM assignments a "
                   "WHERE a.query_pk = queue.query_pk), done = (SELECT count(*) FROM assignments a "
                   "WHERE a.query_pk = queue.query_pk)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    db = store.connect(":memory:")
    build(db, args.items)
    bare, times = [], []
    for k in range(args.rounds):
        started = time.perf_counter()
        db.execute("SELECT query_pk FROM queue u WHERE u.taken < u.needed ORDER BY sort_key, query_pk "
                   "LIMIT 1").fetchone()
        bare.append(time.perf_counter() - started)
        annotator = f"a{k % 8}"
        started = time.perf_counter()
        pk = L.next_item(db, annotator)
        times.append(time.perf_counter() - started)
        L.set_status(db, pk, annotator, "submitted")
    p50, bare_p50 = statistics.median(times), statistics.median(bare)
    print(json.dumps({"benchmark": "next-item", "items": args.items, "rounds": args.rounds,
                      "next_item_p50_ms": round(p50 * 1000, 3), "bare_read_p50_ms": round(bare_p50 * 1000, 3),
                      "ratio_to_bare_read": round(p50 / bare_p50, 1), "target_p50_ms": 5.0}, indent=2))


if __name__ == "__main__":
    main()
