"""Benchmark: `ingest undo` of a large ingest and of a small one on top of a large database.

Builds a database with a base ingest of N logged queries x 10 chunks (text-less chunk ids from a
pool of 50k, so many chunks are shared) and a second ingest of M queries, then times, each in its
own copy: undoing the second (small) ingest, undoing the base (large) ingest, and as the baseline
measured in the same run, the ingest of the small file itself. An undo writes in short transactions: ``*_longest_lock_s``
is the longest of them (from BEGIN IMMEDIATE to the end of COMMIT), ``*_transactions`` how many there were. Prints one JSON document.

    python tests/bench/bench_undo.py [--queries 100000] [--small 10000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

import labeler
import labeler.db as store
from labeler.ingest.undo import undo_ingest


def make_log(path: Path, n: int, prefix: str, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            ids = rng.sample(range(50_000), 10)
            f.write(json.dumps({"query_id": f"{prefix}{i}", "question": f"question {prefix} {i}",
                                "retrieved": [{"id": f"c{c}", "text": f"chunk {c} words {c % 97}",
                                               "score": 1 - r / 10} for r, c in enumerate(ids)]}) + "\n")


class LockHolds:
    """Times every outermost write transaction (``labeler.db.transaction``, which every write of
    an undo goes through), from taking the lock to the end of its COMMIT. (A connection trace
    callback would slow the deletes down: it sees every trigger's statement.)"""

    def __init__(self) -> None:
        self.holds: list[float] = []
        self.inner = store.transaction
        store.transaction = self.transaction

    @contextlib.contextmanager
    def transaction(self, db, **options):
        outer = not db.conn.in_transaction
        with self.inner(db, **options):
            start = time.perf_counter()
            yield db
        if outer:
            self.holds.append(time.perf_counter() - start)

    def close(self) -> None:
        store.transaction = self.inner


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=100_000)
    ap.add_argument("--small", type=int, default=10_000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    base_log, small_log = tmp / "base.jsonl", tmp / "small.jsonl"
    make_log(base_log, args.queries, "b", 1)
    make_log(small_log, args.small, "s", 2)
    base = tmp / "base.db"
    db = labeler.connect(base)
    labeler.ingest_logs(db, base_log, parallel=False)
    db.close()
    shutil.copy(base, tmp / "small-ingest.db")
    db = labeler.connect(tmp / "small-ingest.db")
    t = time.perf_counter()
    labeler.ingest_logs(db, small_log, parallel=False)
    ingest_small_s = time.perf_counter() - t
    db.close()
    out = {"queries": args.queries, "small": args.small, "ingest_small_s": round(ingest_small_s, 3)}
    for name, ingest_id in (("undo_small", 2), ("undo_base", 1)):
        copy = tmp / f"{name}.db"
        shutil.copy(tmp / "small-ingest.db", copy)
        db = labeler.connect(copy)
        holds = LockHolds()
        t = time.perf_counter()
        result = undo_ingest(db, ingest_id)
        out[f"{name}_s"] = round(time.perf_counter() - t, 3)
        out[f"{name}_longest_lock_s"] = round(max(holds.holds), 3)
        out[f"{name}_transactions"] = len(holds.holds)
        holds.close()
        out[f"{name}_removed"] = {"queries": result.queries_removed, "retrievals": result.retrievals_removed,
                                  "documents": result.documents_removed, "documents_kept": result.documents_kept}
        db.close()
    out["undo_small_vs_ingest_small"] = round(out["undo_small_s"] / ingest_small_s, 2)
    shutil.rmtree(tmp)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
