"""Benchmark labeler.llm.batch: 200k judge requests through the Batch API of the fake server; prints JSON.

Run: ``python tests/bench/bench_batch.py [--n 200000]``. The server runs in its own process
(``tests/fake_openai.py``), so its files and its answering do not count in this process's memory.
Measured, each timed:

1. build + upload: the tasks come from a generator; ``submit`` writes the lines to the database in
   parts of 50,000 (so 200k = 4 full batches; ``--max-lines 40000`` gives the issue's 5), streams
   each file to the server and creates the batches.
2. collect + store: the server answers every line (``POST /_batches/{id}/advance``, not timed), then
   ``collect`` streams the output files and stores every validated answer in ``llm_calls``.
3. the direct path's storing of the same results in the same run: what the direct runner does per
   answer (``call_row`` + ``store_call``, one transaction each) into a fresh database, timed on the
   writes only. Target: collect + store within 1.5x of it.
Peak RSS (``ru_maxrss`` of this process) after each phase: target < 500 MB.

Then the cost of a 1M-pair judge run, direct vs batch, from the measured tokens per request at the
gpt-4o-mini list price in ``labeler.llm.PRICES`` (USD 0.15 input / 0.60 output per 1M tokens,
OpenAI's pricing page as of mid 2025; the Batch API is half of it).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pydantic

from labeler import llm
from labeler.db import connect, transaction
from labeler.llm import batch
from labeler.llm.cache import call_row, store_call

FAKE_SERVER = Path(__file__).resolve().parents[1] / "fake_openai.py"
CHUNK = ("To rotate an API token open Settings, then API, then Tokens, and press Rotate next to the token. "
         "The old token keeps working for 24 hours so that running jobs can finish; after that every request "
         "that uses it is refused with HTTP 401. Admins can rotate any token of their workspace. ")


class Relevance(pydantic.BaseModel):
    rationale: str
    relevance_grade: Literal[0, 1, 2, 3]


batch.register_owner(batch.BatchOwner("bench", lambda db, run_id: Relevance, lambda db, config, run_id: None))


def tasks(n: int) -> Iterator[llm.Task]:
    for i in range(n):
        yield llm.Task(key=f"{i}:0", schema=Relevance, messages=[
            {"role": "system", "content": "You grade how well a chunk answers a question, on a 0-3 scale."},
            {"role": "user", "content": f"Question:\n<<<\nhow do I rotate token {i}?\n>>>\n\nChunk:\n<<<\n{CHUNK}\n>>>"}])


def rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def advance(url: str, batch_id: str, status: str) -> None:
    request = urllib.request.Request(url.removesuffix("/v1") + f"/_batches/{batch_id}/advance",
                                     data=json.dumps({"status": status}).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=3600) as response:
        response.read()


def direct_store(source, target) -> float:
    """Store every ok row of ``source`` into ``target`` as the direct runner does; seconds of writing."""
    config = llm.LLMConfig(model="gpt-4o-mini")
    spent = 0.0
    cursor = source.execute("SELECT hash, request, response, parsed, prompt_tokens, completion_tokens FROM llm_calls")
    while rows := cursor.fetchmany(2_000):
        ready = [(h, json.loads(req), json.loads(resp), Relevance.model_validate_json(parsed), pt, ct)
                 for h, req, resp, parsed, pt, ct in rows]
        started = time.perf_counter()
        for h, request, raw, model, pt, ct in ready:
            store_call(target, call_row(h, config, request, model=model, error=None, raw=raw, prompt_tokens=pt,
                                    completion_tokens=ct, requests=1, cost=config.cost(pt, ct)))
        spent += time.perf_counter() - started
    return spent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--max-lines", type=int, default=batch.MAX_LINES)
    args = parser.parse_args()
    process = subprocess.Popen([sys.executable, str(FAKE_SERVER), "--port", "0"], stdout=subprocess.PIPE, text=True)
    url = json.loads(process.stdout.readline())["url"]
    out: dict = {"n": args.n}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = connect(Path(tmp) / "batch.db")
            config = llm.LLMConfig(base_url=url, api_key="bench", model="gpt-4o-mini", timeout_s=600)
            started = time.perf_counter()
            sub = batch.submit(db, config, tasks(args.n), owner="bench", run_id=1, max_lines=args.max_lines)
            out["build_upload_s"] = round(time.perf_counter() - started, 2)
            out["batches"] = len(sub.batches)
            out["lines_sent"] = sub.sent
            out["input_mb"] = round(sum(b.bytes for b in sub.batches) / 2**20, 1)
            out["rss_mb_after_submit"] = rss_mb()
            started = time.perf_counter()
            for b in sub.batches:
                advance(url, b.batch_id, "completed")
            out["server_answering_s"] = round(time.perf_counter() - started, 2)
            started = time.perf_counter()
            result = batch.collect(db, config)
            out["collect_store_s"] = round(time.perf_counter() - started, 2)
            out["collected_ok"] = result.ok
            out["collected_failed"] = result.failed
            out["rss_mb_after_collect"] = rss_mb()
            pt, ct, cost, _ = batch.run_spend(db, "bench", 1)
            target = connect(Path(tmp) / "direct.db")
            with transaction(target):
                pass
            out["direct_store_s"] = round(direct_store(db, target), 2)
            out["collect_vs_direct_store"] = round(out["collect_store_s"] / out["direct_store_s"], 2)
            out["rss_mb_peak"] = rss_mb()
            per_in, per_out = pt / max(result.ok, 1), ct / max(result.ok, 1)
            direct_price, batch_price = config.prices(), config.batch_prices()
            million = 1_000_000
            out["one_million_pairs"] = {
                "assumed_price": "gpt-4o-mini USD 0.15 in / 0.60 out per 1M tokens (OpenAI pricing, mid 2025); "
                                 "Batch API at half price",
                "tokens_per_request": {"input": round(per_in, 1), "output": round(per_out, 1)},
                "direct_usd": round(million * (per_in * direct_price[0] + per_out * direct_price[1]) / 1e6, 2),
                "batch_usd": round(million * (per_in * batch_price[0] + per_out * batch_price[1]) / 1e6, 2),
                "direct_wall_h_at_16_concurrent_1s_each": round(million / 16 / 3600, 1),
                "batch_wall": "within the 24 h completion window (20 batches of 50,000 run in parallel), plus local "
                              f"build+upload ~{round(out['build_upload_s'] * million / args.n / 60, 1)} min and "
                              f"collect ~{round(out['collect_store_s'] * million / args.n / 60, 1)} min",
            }
            db.close()
            target.close()
    finally:
        process.terminate()
        process.wait(10)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
