"""Benchmark: the queue's sync after an ingest, against the full plan on the same database.

Builds ``--queries`` queries with a synced queue (10% overlap for 2 annotators), then ``--arrive``
more queries, as an ingest of a live log brings them, and copies the file. On one copy
``labels.sync_queue`` adds the arrivals (the path an annotator's next item takes after each
ingest); on the other ``sync_queue(force=True)`` plans every query again (what every sync after
an ingest did before). Both end with the same queue (checked). Reports wall and CPU seconds of
each and their ratios (arrivals / full plan): ratios, as CI machines differ. Prints one JSON document.

    PYTHONPATH=. python tests/bench/bench_queue_sync.py [--queries 200000] [--arrive 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import labeler  # noqa: E402
import labeler.labels as labels  # noqa: E402
from labeler import db as store  # noqa: E402


def add_queries(db, first: int, n: int) -> None:
    with store.transaction(db):
        db.execute("WITH RECURSIVE i(n) AS (SELECT ?1 UNION ALL SELECT n + 1 FROM i WHERE n < ?1 + ?2 - 1) "
                   "INSERT INTO queries (pk, query_id, question, norm_question, created_at) "
                   "SELECT n, 'q' || n, 'question ' || n, 'question ' || n, '2026-01-01' FROM i", [first, n])


def timed(path: Path, force: bool) -> tuple[float, float, tuple]:
    db = labeler.connect(path, migrate=False)
    wall, cpu = time.perf_counter(), time.process_time()
    done = labels.sync_queue(db, force=force)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    queue = db.execute("SELECT count(*), total(overlap), total(needed), total(sort_key % 1000003) FROM queue").fetchone()
    db.conn.close()
    if done.added + done.retargeted == 0 and not force:
        raise SystemExit("the arrivals were not synced")
    return wall, cpu, queue


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=200_000)
    ap.add_argument("--arrive", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    out: dict = {"benchmark": "queue_sync", "queries": args.queries, "arrive": args.arrive, "runs": []}
    with tempfile.TemporaryDirectory() as d:
        base = Path(d) / "base.db"
        db = labeler.connect(base)
        labeler.set_setting(db, "overlap_fraction", 0.1)
        add_queries(db, 1, args.queries)
        labels.sync_queue(db)
        add_queries(db, args.queries + 1, args.arrive)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.conn.close()
        for _ in range(args.repeats):
            runs = {}
            for name, force in (("arrivals", False), ("full_plan", True)):
                copy = Path(d) / f"{name}.db"
                shutil.copy(base, copy)
                runs[name] = timed(copy, force)
                copy.unlink()
            if runs["arrivals"][2] != runs["full_plan"][2]:
                raise SystemExit(f"the two syncs left different queues: {runs}")
            out["runs"].append({name: {"wall_s": round(w, 4), "cpu_s": round(c, 4)} for name, (w, c, _) in runs.items()})
    for kind in ("wall_s", "cpu_s"):
        out[f"ratio_{kind[:-2]}"] = round(statistics.median(
            r["arrivals"][kind] / r["full_plan"][kind] for r in out["runs"]), 3)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
