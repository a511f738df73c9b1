"""Benchmark labeler.llm against the fake OpenAI server (200 ms per request); prints one JSON document.

Run: ``python tests/bench/bench_llm.py [--n 1000] [--latency 0.2]``. The server runs in its own
process (``tests/fake_openai.py``), so client and server do not share a GIL. Measured:

1. ``n`` requests at concurrency 16, and the sequential baseline (concurrency 1) in the same run.
   Sequential ``n`` x 200 ms would take ``n`` / 5 seconds, so it is timed on a sample of ``n`` / 10
   distinct requests and extrapolated linearly (target speedup >= 12x).
2. The same ``n`` again: all from the cache (target 0 requests, < 2 s).
3. ``n`` other requests with 20% injected faults of every kind, a quarter of them permanent: items
   stored, failed (with reasons) and lost (target 0), then a rerun that retries only the failures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Literal

import pydantic

from labeler import llm
from labeler.db import connect

FAKE_SERVER = Path(__file__).resolve().parents[1] / "fake_openai.py"


class Judgment(pydantic.BaseModel):
    grade: Literal[0, 1, 2, 3]
    rationale: str
    quotes: list[str]


def make_tasks(n: int, prefix: str) -> list[llm.Task]:
    return [llm.Task(key=f"{prefix}-{i}", schema=Judgment, messages=[
        {"role": "system", "content": "Grade the chunk for the question on a 0-3 scale."},
        {"role": "user", "content": f"{prefix} question {i}: how do I rotate the API token?\n\nChunk: ..."},
    ]) for i in range(n)]


class Server:
    """tests/fake_openai.py in a subprocess."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen([sys.executable, str(FAKE_SERVER), "--port", "0", *args],
                                        stdout=subprocess.PIPE, text=True)
        self.url = json.loads(self.process.stdout.readline())["url"]

    def stats(self) -> dict:
        with urllib.request.urlopen(self.url.removesuffix("/v1") + "/_stats") as response:
            return json.load(response)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def timed_run(db, config: llm.LLMConfig, tasks: list[llm.Task]) -> tuple[llm.RunSummary, float]:
    start = time.perf_counter()
    summary = llm.run_tasks(db, config, tasks)
    return summary, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    n, sample = args.n, max(1, args.n // 10)
    tmp = Path(tempfile.mkdtemp(prefix="bench_llm_"))
    out: dict = {"requests": n, "latency_s": args.latency}

    server = Server("--latency", str(args.latency))
    try:
        config = llm.LLMConfig(base_url=server.url, api_key="sk-bench", model="gpt-4o-mini",
                               concurrency=args.concurrency)
        db = connect(tmp / "speed.db")
        tasks = make_tasks(n, "speed")
        summary, concurrent_s = timed_run(db, config, tasks)
        out["concurrent"] = {"concurrency": args.concurrency, "seconds": round(concurrent_s, 2),
                             "requests_made": summary.requests_made, "done": summary.done,
                             "failed": len(summary.failed), "requests_per_s": round(n / concurrent_s, 1),
                             "ideal_seconds": round(n * args.latency / args.concurrency, 2)}

        sequential = llm.LLMConfig(base_url=server.url, api_key="sk-bench", model="gpt-4o-mini", concurrency=1)
        seq_summary, sample_s = timed_run(connect(tmp / "sequential.db"), sequential, make_tasks(sample, "seq"))
        extrapolated = sample_s * n / sample
        out["sequential"] = {
            "concurrency": 1, "measured_requests": sample, "measured_seconds": round(sample_s, 2),
            "done": seq_summary.done, "extrapolated_seconds": round(extrapolated, 1),
            "method": f"timed on {sample} distinct requests, extrapolated linearly to {n} "
                      f"(sequential {n} x {args.latency * 1000:g} ms would take ~{n * args.latency:g} s)"}
        speedup = extrapolated / concurrent_s
        out["speedup"] = {"ratio": round(speedup, 1), "target": 12, "ok": speedup >= 12}

        before = server.stats()["total"]
        cached, cached_s = timed_run(db, config, tasks)
        server_requests = server.stats()["total"] - before
        out["cache"] = {"seconds": round(cached_s, 3), "cached": cached.cached,
                        "requests_made": cached.requests_made, "server_requests": server_requests,
                        "target": "0 requests, < 2 s", "ok": server_requests == 0 and cached_s < 2}
    finally:
        server.close()

    server = Server("--latency", str(args.latency), "--fault-rate", "0.2", "--fault-seed", "11",
                    "--permanent-fraction", "0.25", "--retry-after", "1", "--hang", "3")
    try:
        config = llm.LLMConfig(base_url=server.url, api_key="sk-bench", model="gpt-4o-mini",
                               concurrency=args.concurrency, timeout_s=1, max_retries=5,
                               backoff_base_s=0.1, backoff_max_s=2)
        db = connect(tmp / "faults.db")
        tasks = make_tasks(n, "faults")
        summary, faults_s = timed_run(db, config, tasks)
        stats = server.stats()
        rows = {r["hash"]: r for r in db["llm_calls"].rows}
        stored = failed = lost = invalid_ok = 0
        for task in tasks:
            row = rows.get(summary.hashes[task.key])
            if row is None:
                lost += 1
            elif row["status"] == "ok":
                stored += 1
                try:
                    Judgment.model_validate_json(row["parsed"])
                except pydantic.ValidationError:
                    invalid_ok += 1
            else:
                failed += 1
        reasons = Counter(reason.split(":")[0].split(" (")[0] for _, reason in summary.failed)
        rerun, rerun_s = timed_run(db, config, tasks)
        out["faults"] = {
            "fault_rate": 0.2, "permanent_fraction": 0.25, "seconds": round(faults_s, 2),
            "server_outcomes": stats["by_outcome"], "requests_received": stats["total"],
            "stored": stored, "failed": failed, "lost": lost, "invalid_rows_stored_as_ok": invalid_ok,
            "failed_reasons": dict(reasons),
            "summary_matches_db": (summary.done, len(summary.failed)) == (stored, failed),
            "rerun": {"seconds": round(rerun_s, 2), "cached": rerun.cached, "requests_made": rerun.requests_made,
                      "recovered": rerun.done, "still_failed": len(rerun.failed)},
            "target": "lost = 0", "ok": lost == 0 and invalid_ok == 0,
        }
    finally:
        server.close()
    out["ok"] = all(out[part]["ok"] for part in ("speedup", "cache", "faults"))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
