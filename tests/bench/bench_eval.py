"""Benchmark ``labeler eval``: 1,000 golden questions through a pipeline with 50 ms latency, concurrent
(8) versus sequential in the same run, and the gate's randomization test with 10,000 permutations.

Run: ``PYTHONPATH=. python tests/bench/bench_eval.py [--questions N] [--sample N] [--full]``; prints one
JSON document. The pipeline is the real TF-IDF retriever over CISI (``tests/pipelines.py``) plus a
sleep of ``--latency`` seconds. The sequential time is measured on a ``--sample`` of the questions
and extrapolated linearly (``--full`` runs all of them sequentially instead).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from labeler import metrics
from labeler.harness import compare, evaluate, load_baseline, load_golden
from tests import cisi, pipelines


def write_golden(path: Path, n: int) -> Path:
    """``n`` questions cycling over the judged CISI queries (distinct query ids, grade 2)."""
    judged = sorted(cisi.qrels(), key=int)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            q = judged[i % len(judged)]
            ids = sorted(cisi.qrels()[q], key=int)
            f.write(json.dumps({"query_id": f"b{i:05d}-cisi-{q}", "question": cisi.queries()[q],
                                "relevant_ids": ids, "relevance": dict.fromkeys(ids, 2)}) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--sample", type=int, default=200, help="questions timed sequentially")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--permutations", type=int, default=10000)
    parser.add_argument("--full", action="store_true", help="run every question sequentially too")
    args = parser.parse_args()
    pipelines.LATENCY = args.latency
    pipelines.search(cisi.queries()["1"])  # build the TF-IDF index outside the timings
    pipelines.search(cisi.queries()["1"], half=True)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        golden_path = write_golden(root / "golden.jsonl", args.questions)
        t = time.perf_counter()
        golden = load_golden(golden_path)
        load_seconds = time.perf_counter() - t

        concurrent = evaluate(golden, pipeline=pipelines.slow, k=5, concurrency=args.concurrency,
                              save_baseline=root / "baseline.json")
        conc_seconds = concurrent.report["timings"]["run_seconds"]

        n_seq = args.questions if args.full else min(args.sample, args.questions)
        sample_path = write_golden(root / "sample.jsonl", n_seq)
        sequential = evaluate(sample_path, pipeline=pipelines.slow, k=5, concurrency=1)
        seq_measured = sequential.report["timings"]["run_seconds"]
        seq_seconds = seq_measured * args.questions / n_seq

        # the gate: the degraded retriever's per-question values against the baseline
        degraded = evaluate(golden, pipeline=pipelines.degraded, k=5, concurrency=args.concurrency)
        per_q = degraded.per_query
        baseline = load_baseline(root / "baseline.json")
        current = per_q["recall@5"].to_numpy(dtype=float)
        base = np.array([q["values"]["recall@5"] for q in baseline.questions], dtype=float)
        metrics.paired_test(current, base, n_resamples=100)  # warm up
        t = time.perf_counter()
        p = metrics.paired_test(current, base, n_resamples=args.permutations, seed=0)
        test_seconds = time.perf_counter() - t
        t = time.perf_counter()
        comparison = compare(per_q, golden, baseline, {"recall@5": 0.02, "mrr": 0.02},
                             n_permutations=args.permutations)
        gate_seconds = time.perf_counter() - t

    print(json.dumps({
        "questions": args.questions,
        "pipeline": f"TF-IDF over CISI + {args.latency * 1000:.0f} ms latency",
        "golden_load_seconds": round(load_seconds, 4),
        "concurrency": args.concurrency,
        "concurrent_seconds": round(conc_seconds, 3),
        "concurrent_questions_per_second": round(args.questions / conc_seconds, 1),
        "sequential_seconds": round(seq_seconds, 3),
        "sequential_measured_on": n_seq,
        "sequential_extrapolated": n_seq != args.questions,
        "speedup": round(seq_seconds / conc_seconds, 2),
        "speedup_target": 6,
        "latency_p50_concurrent": round(concurrent.report["timings"]["latency_seconds"]["p50"], 4),
        "score_seconds": round(concurrent.report["timings"]["score_seconds"], 4),
        "randomization_test": {"permutations": args.permutations, "pairs": int(np.sum(~np.isnan(current))),
                               "seconds": round(test_seconds, 4), "p_value": p, "target_seconds": 1.0},
        "gate_compare_seconds_5_metrics": round(gate_seconds, 4),
        "gate_failed": comparison.failed,
        "errors": concurrent.report["counts"]["errors"] + concurrent.report["counts"]["timeouts"],
    }, indent=2))


if __name__ == "__main__":
    main()
