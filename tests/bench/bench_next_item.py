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
from tests.test_labels import labeled_queue  # the test's setup: 99% of the items submitted


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    db = store.connect(":memory:")
    labeled_queue(db, args.items)
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
