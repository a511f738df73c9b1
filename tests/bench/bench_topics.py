"""Benchmark: `labeler topics build` on N logged questions (default 100k), in a subprocess so that its
peak RSS is its own, next to the same build on N/4 questions in the same run: time should grow
about linearly and peak memory stay flat (the clustering is fitted on a sample of at most 50k
questions and the rest is assigned in batches). Questions: 20 planted topics of 25 words each, a
template, 3 topic words and 2 words from a shared pool of 20,000, so the vocabulary is realistic;
k and the purity of the topics against the planted ones are reported. Also times `labeler
coverage` and `labeler drift` on a 10k-question file. Prints one JSON document.

    PYTHONPATH=. python tests/bench/bench_topics.py [--questions 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

TEMPLATES = ["how do i fix {a} with {b} {x}", "why is my {a} {b} not working {x}", "can i change the {a} for {b} {c}",
             "where is the {a} {b} setting {x} {y}", "{a} {b} {c} question {y}", "help with {a} and {b} {x}"]


def make_log(path: Path, n: int, seed: int, prefix: str) -> None:
    rng = random.Random(seed)
    topics = [[f"t{t}word{w}" for w in range(25)] for t in range(20)]
    pool = [f"pool{i}" for i in range(20_000)]
    with open(path, "w") as f:
        for i in range(n):
            topic = rng.randrange(len(topics))
            words = rng.sample(topics[topic], 3)
            q = rng.choice(TEMPLATES).format(a=words[0], b=words[1], c=words[2], x=rng.choice(pool), y=rng.choice(pool))
            f.write(json.dumps({"query_id": f"{prefix}{i}", "question": q, "topic": topic,
                                "retrieved": [{"id": f"d{rng.randrange(50_000)}", "score": 0.5}]}) + "\n")


def purity(db: Path) -> float:
    """Share of the logged questions whose topic's majority planted topic is their own."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT json_extract(q.meta, '$.topic'), t.topic FROM query_topics t "
                            "JOIN queries q ON q.pk = t.query_pk WHERE q.origin = 'log'").fetchall()
    votes: dict[int, Counter] = {}
    for planted, found in rows:
        votes.setdefault(found, Counter())[planted] += 1
    return sum(c.most_common(1)[0][1] for c in votes.values()) / max(len(rows), 1)


def run(args: list[str], env: dict[str, str]) -> tuple[float, float, str, float]:
    """(seconds, peak RSS in MiB of the child, stdout, CPU seconds of the child) of one CLI call;
    CPU seconds are the steadier figure on a shared machine."""
    code = ("import resource, sys, time; from labeler.cli import cli; t = time.perf_counter()\n"
            "try:\n    cli.main(sys.argv[1:], standalone_mode=False)\nfinally:\n"
            "    u = resource.getrusage(resource.RUSAGE_SELF)\n"
            "    print(json.dumps({'seconds': time.perf_counter() - t, 'cpu_seconds': u.ru_utime + u.ru_stime, "
            "'rss_mib': u.ru_maxrss / 1024}), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", "import json\n" + code, *args], env=env, capture_output=True,
                         text=True, check=True)
    stats = json.loads(out.stderr.strip().splitlines()[-1])
    return stats["seconds"], stats["rss_mib"], out.stdout, stats["cpu_seconds"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=100_000)
    a = parser.parse_args()
    env = dict(os.environ, LABELER_WARM_METRICS="0")
    result: dict = {"questions": a.questions}
    with tempfile.TemporaryDirectory() as tmp:
        for label, n in (("small", a.questions // 4), ("large", a.questions)):
            log, db = Path(tmp) / f"{label}.jsonl", Path(tmp) / f"{label}.db"
            make_log(log, n, seed=1, prefix="q")
            subprocess.run([sys.executable, "-m", "labeler", "--db", str(db), "ingest", "logs", str(log)], env=env,
                           check=True, capture_output=True)
            started = time.perf_counter()
            seconds, rss, out, cpu = run(["--db", str(db), "topics", "build", "--seed", "1", "--json"], env)
            summary = json.loads(out)
            result[label] = {"questions": n, "build_seconds": round(seconds, 2),
                             "build_cpu_seconds": round(cpu, 2),
                             "wall_seconds": round(time.perf_counter() - started, 2), "peak_rss_mib": round(rss),
                             "k": summary["k"], "purity": round(purity(db), 3)}
            if label == "large":
                cov_s, _, _, _ = run(["--db", str(db), "coverage", "--json"], env)
                new = Path(tmp) / "new.jsonl"
                make_log(new, 10_000, seed=2, prefix="n")
                drift_s, drift_rss, _, _ = run(["--db", str(db), "drift", str(new), "--json"], env)
                result["large"].update(coverage_seconds=round(cov_s, 2), drift_10k_seconds=round(drift_s, 2),
                                       drift_peak_rss_mib=round(drift_rss))
    small, large = result["small"], result["large"]
    result["time_ratio_large_vs_small"] = round(large["build_seconds"] / small["build_seconds"], 2)
    result["rss_ratio_large_vs_small"] = round(large["peak_rss_mib"] / small["peak_rss_mib"], 2)
    result["under_60s"] = large["build_seconds"] < 60
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
