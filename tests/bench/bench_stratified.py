"""Benchmark: ``next_item`` (take + submit) under queue order stratified against order random on the
same database, N logged questions of 10 planted topics (topics built with k=10), measured in
alternating blocks. Prints one JSON document.

    PYTHONPATH=. python tests/bench/bench_stratified.py [--queries 20000] [--rounds 200]
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import labeler  # noqa: E402
import labeler.labels as labels  # noqa: E402
from labeler import db as store  # noqa: E402
from labeler.ingest import ingest_logs  # noqa: E402
from labeler.topics import build_topics  # noqa: E402
from tests import planted  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    rng = random.Random(0)
    names = list(planted.TOPICS)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.jsonl"
        with open(log, "w") as f:
            for i in range(args.queries):
                t = rng.choices(names, weights=range(1, len(names) + 1))[0]
                f.write(json.dumps({"query_id": f"b{i:07d}", "question": " ".join(rng.sample(planted.TOPICS[t], 4)),
                                    "retrieved": [{"id": f"{t}-{j}", "text": f"{t} chunk {j}"} for j in range(3)]})
                        + "\n")
        db = store.connect(Path(tmp) / "b.db")
        labeler.set_setting(db, "overlap_fraction", 0)
        ingest_logs(db, log)
        t0 = time.perf_counter()
        build_topics(db, k=len(names), seed=0)
        build_s = time.perf_counter() - t0
        times: dict[str, list[float]] = {"random": [], "stratified": []}
        for block in range(args.rounds // 20):
            for order in ("random", "stratified"):
                labeler.set_setting(db, "queue_order", order)
                labels.next_item(db, "warm")  # the re-key after an order change is not what is measured
                labels.set_status(db, labels.next_item(db, "warm"), "warm", "submitted")
                for _ in range(20):
                    t = time.perf_counter()
                    pk = labels.next_item(db, f"a{block}")
                    labels.set_status(db, pk, f"a{block}", "submitted")
                    times[order].append(time.perf_counter() - t)
        p50 = {k: statistics.median(v) * 1000 for k, v in times.items()}
        print(json.dumps({"queries": args.queries, "topics_build_s": round(build_s, 2),
                          "take_submit_p50_ms": {k: round(v, 2) for k, v in p50.items()},
                          "ratio_stratified_to_random": round(p50["stratified"] / p50["random"], 2)}))


if __name__ == "__main__":
    main()
