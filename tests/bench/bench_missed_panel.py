"""Benchmark: what one "Possibly missed" panel costs on bench_capacity's corpus.

Builds the database ``bench_capacity.py`` serves (``--items`` logged queries x 8 chunks of about 190
characters drawn from 40 words: most chunks share most words, so every word's posting list is
long), grades ``--panels`` items at random (seeded) as one annotator and runs ``search_missed`` for
each, as the Label page does once an item is graded. Reports the postings the panel's BM25 queries
read (the sum of their words' document frequencies: exact, the same on every machine), their
count, and the CPU per panel (this machine only). Prints one JSON document.

    PYTHONPATH=. python tests/bench/bench_missed_panel.py [--items 4000] [--panels 40]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

import bench_capacity  # noqa: E402

import labeler  # noqa: E402
import labeler.labels as labels  # noqa: E402
from labeler.search import fts, latent, missed  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=4000)
    ap.add_argument("--panels", type=int, default=40)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "capacity.db"
        bench_capacity.build(path, args.items, 8, 0, args.seed)
        db = labeler.connect(path)
        latent.warm(db)  # the app fits it in the background at start
        rng = random.Random(args.seed)
        pks = [r[0] for r in db.execute("SELECT pk FROM queries ORDER BY pk LIMIT ?", [args.panels])]
        for pk in pks:
            for (doc,) in db.execute("SELECT doc_pk FROM retrievals WHERE query_pk = ? ORDER BY rank", [pk]).fetchall():
                labels.set_grade(db, pk, doc, "annotator", rng.randrange(4))
        postings: list[int] = []
        real = missed.bm25

        def counted(db_, terms, k=10, *, exclude=()):
            df = fts.document_frequencies(db_, fts.stems(db_, terms).values())
            postings.append(sum(df.values()))
            return real(db_, terms, k, exclude=exclude)

        missed.search_missed(db, pks[0], 10, annotator="annotator")  # caches of the connection
        per_panel, cpu = [], []
        missed.bm25 = counted
        try:
            for pk in pks:
                postings.clear()
                started = time.process_time()
                missed.search_missed(db, pk, 10, annotator="annotator")
                cpu.append(time.process_time() - started)
                per_panel.append((sum(postings), len(postings)))
        finally:
            missed.bm25 = real
        db.conn.close()
    print(json.dumps({
        "benchmark": "missed_panel", "items": args.items, "panels": len(per_panel),
        "postings_per_panel": round(statistics.mean(p for p, _ in per_panel)),
        "postings_per_panel_max": max(p for p, _ in per_panel),
        "bm25_queries_per_panel": round(statistics.mean(n for _, n in per_panel), 2),
        "cpu_ms_per_panel_p50": round(statistics.median(cpu) * 1000, 1),
    }, indent=2))


if __name__ == "__main__":
    main()
