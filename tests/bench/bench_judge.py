"""Benchmark ``labeler judge align`` and ``labeler judge stress`` against the fake OpenAI server;
prints one JSON document. 35-60 s on a 2-core machine shared with other work.

Run: ``python tests/bench/bench_judge.py [--queries 120] [--latency 0.05] [--concurrency 16]``.

The database: ``--queries`` logged queries of three chunks of three sentences each (360 pairs by
default), every pair graded by one annotator through labeler's own calls (ingest, ``set_grade``,
``set_status``: the test suite's ``build``), the grades skewed as retrieval's are (about 45%
irrelevant), and a locked split (20% holdout, seed 7). The server is ``tests/fake_openai.py``'s
``FakeOpenAI`` in a process of its own (this script with ``--serve``, so client and server do not
share a GIL), ``--latency`` seconds per request, answering as the judge the request's model names:
``learner`` (accuracy rises with correct graded examples in the prompt), ``random-SEED`` (grades at
random, each seed another judge), ``gullible`` (obeys an instruction planted in the chunk) and
``robust`` (grades what the chunk says); the random judges answer without the latency (their
trials count registrations, not seconds). Every figure but the seconds and their ratios is a
deterministic function of the seeds (the fake judges draw from hashes of the prompt, the bootstrap
is seeded): the same on every machine.

1. ``align.learner``: ``align_judge(..., shots=4, candidates=3, revisions=1, seed=0)`` with the
   learning judge: each candidate's validation kappa and paired difference; for the winner the
   current and new version's kappa on validation and on the holdout, the paired difference with its
   95% CI and the corrected CI the decision reads (``decision_ci_low``), whether it registered, the
   requests it sent, and the requests the same alignment run again sends (``rerun_requests``).
   ``align.random``: the same alignment with a random judge, seeds 0..4 (``--random-seeds``), each
   from the built-in rubric: how many registered, and each trial's best decision lower bound.
2. ``stress``: for the gullible and the robust judge, a calibration run on 160 labeled pairs (the
   gate needs 150; both judges grade unperturbed chunks as the humans did, so it passes), then
   ``stress_judge(..., n=100, seed=0)`` on dev grade-0 pairs: the planted-instruction rate with its
   95% Wilson CI, whether the CI lies wholly above or below the gate's 5%, and the gate's verdict
   on the calibration run before and after the stress test.
3. ``overhead``: the learning judge's alignment and each stress test, timed (wall) against the
   direct LLM path measured right after each in the same run: the very requests each
   sent (read back from ``llm_calls``), sent again by a plain ``openai.AsyncOpenAI`` client with
   the same concurrency (a semaphore, as ``labeler.llm``'s runner has) to the same server with the
   same latency, nothing validated or stored. The server does not cache, so a repeated request
   costs it what the first did. ``stress_ratio`` is the lower of the two stress tests' ratios (a
   burst of load from elsewhere lands on one, a slower stress test shows in both). Lazy imports
   (scipy.stats) are made before anything is timed: a once-per-process cost, not the work's.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import openai  # noqa: E402

from labeler import db as store  # noqa: E402
from labeler import judge, llm  # noqa: E402
from labeler.holdout import set_split  # noqa: E402
from labeler.judge.align import align_judge  # noqa: E402
from labeler.judge.stress import stress_judge  # noqa: E402
from labeler.llm.structured import strict_schema  # noqa: E402

JUDGES = ("learner", "random", "gullible", "robust")
GATE_LIMIT = 0.05  # the gate's default max_planted_rate
STRESS_PAIRS = 100  # 0 of 100 has a Wilson upper bound of 3.7%, below the gate's 5%
CALIBRATION_PAIRS = 160  # the gate needs 150


# --- the labeled database ---------------------------------------------------------------------------------

def human_grade(i: int, j: int) -> int:
    """A skewed, seeded grade: about 45% 0, 25% 1, 18% 2, 12% 3."""
    u = int(hashlib.blake2b(f"grade|{i}|{j}".encode(), digest_size=4).hexdigest(), 16) / 2 ** 32
    return 0 if u < 0.45 else 1 if u < 0.70 else 2 if u < 0.88 else 3


def records(n: int, chunks: int = 3) -> list[dict[str, Any]]:
    """``n`` logged queries, each with ``chunks`` chunks of three sentences (so a planted sentence goes
    inside the passage and reversing it changes it)."""
    topics = ["billing", "tokens", "exports", "webhooks", "quotas", "single sign-on", "audit logs"]
    return [{"query_id": f"b{i:04d}", "question": f"How do I configure {topics[i % 7]} for workspace {i}?",
             "answer": f"Open the settings of workspace {i}.", "timestamp": f"2026-01-{1 + i % 28:02d}T00:00:00Z",
             "retrieved": [{"id": f"b{i:04d}-c{j}", "score": 0.9 - j / 10,
                            "text": f"Workspace {i} keeps its {topics[(i + j) % 7]} settings on page {j + 2}. "
                                    f"Changes there apply to every member within {5 + j} minutes. "
                                    f"Note {i}-{j}: older plans may show a different menu."}
                           for j in range(chunks)]}
            for i in range(n)]


def build_db(path: Path, queries: int) -> dict[tuple[str, str], int]:
    from tests.conftest import log_writer, tiny_ingester
    from tests.test_judge import build

    db = store.connect(path)
    _, truth = build(db, tiny_ingester(log_writer(path.parent)), n=queries, overlap=0,
                     records=records(queries), grade=human_grade)
    set_split(db, 0.2, seed=7)
    db.close()
    return truth


# --- the server (``--serve``: runs in its own process) ----------------------------------------------------

def serve(truth_file: str, latency: float, batch_auto: str | None = None) -> None:
    import signal
    import threading

    from tests.fake_openai import (
        FakeOpenAI,
        default_responder,
        example_learning_responder,
        gullible_responder,
        random_responder,
        robust_responder,
    )

    truth = {(q, c): g for q, c, g in json.loads(Path(truth_file).read_text())}
    by_model = {"learner": example_learning_responder(truth), "gullible": gullible_responder(truth),
                "robust": robust_responder(truth)}

    def respond(request: dict[str, Any]) -> dict[str, Any] | str:
        model = str(request.get("model"))
        if model.startswith("random"):  # random-0, random-1...: each a judge of its own
            return random_responder(salt=model)(request)
        return by_model.get(model, default_responder)(request)

    class Server(FakeOpenAI):
        def complete(self, request: dict[str, Any], *, wait: bool) -> Any:
            # the random judges' trials count registrations, not seconds: answered without the latency
            untimed = str(request.get("model")).startswith("random")
            return super().complete(request, wait=wait and not untimed)

    server = Server(latency=latency, responder=respond, batch_auto=batch_auto).start()
    print(json.dumps({"url": server.url}), flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    server.stop()


class Server:
    def __init__(self, truth: dict[tuple[str, str], int], folder: Path, latency: float) -> None:
        truth_file = folder / "truth.json"
        truth_file.write_text(json.dumps([[q, c, g] for (q, c), g in truth.items()]))
        self.process = subprocess.Popen([sys.executable, __file__, "--serve", str(truth_file), "--latency",
                                         str(latency)], stdout=subprocess.PIPE, text=True)
        self.url = json.loads(self.process.stdout.readline())["url"]

    def total(self) -> int:
        with urllib.request.urlopen(self.url.removesuffix("/v1") + "/_stats") as response:
            return int(json.load(response)["total"])

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


# --- the direct LLM path: the same requests through a plain client -----------------------------------------

def call_hashes(db) -> set[str]:
    return {h for (h,) in db.execute("SELECT hash FROM llm_calls")}


def sent_requests(db, hashes: set[str]) -> list[dict[str, Any]]:
    """The keyword arguments of the requests stored under ``hashes`` in ``llm_calls``, rebuilt as
    ``labeler.llm.structured.request_body`` builds them in json_schema mode."""
    bodies = []
    for h, raw, n in db.execute("SELECT hash, request, requests FROM llm_calls ORDER BY rowid"):
        if h not in hashes:
            continue
        if n != 1:  # a retry: the two sides would not send the same number of requests
            raise SystemExit(f"request {h[:12]} was sent {n} times (a retry); the baseline replays each request once")
        r = json.loads(raw)
        if r.get("mode") != "json_schema" or r.get("repair"):
            raise SystemExit(f"unexpected request record (mode {r.get('mode')}, repair): the baseline replays "
                             "json_schema requests only")
        bodies.append({"model": r["model"], "messages": r["messages"], **r["params"],
                       "response_format": {"type": "json_schema", "json_schema": {
                           "name": r["schema_name"], "schema": strict_schema(r["schema"], r["schema"]),
                           "strict": True}}})
    return bodies


async def _direct(url: str, bodies: list[dict[str, Any]], concurrency: int) -> int:
    client = openai.AsyncOpenAI(api_key="sk-bench", base_url=url, max_retries=0, timeout=60)
    semaphore = asyncio.Semaphore(concurrency)
    answered = 0

    async def one(body: dict[str, Any]) -> None:
        nonlocal answered
        async with semaphore:
            completion = await client.chat.completions.create(**body)
            answered += bool(completion.choices[0].message.content)

    try:
        await asyncio.gather(*(one(b) for b in bodies))
    finally:
        await client.close()
    return answered


def direct(server: Server, bodies: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    before = server.total()
    started = time.perf_counter()
    answered = asyncio.run(_direct(server.url, bodies, concurrency))
    seconds = time.perf_counter() - started
    return {"requests": server.total() - before, "answered": answered, "seconds": round(seconds, 3)}


# --- the measurements -------------------------------------------------------------------------------------

def stat(s: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(s[k], 4) if isinstance(s.get(k), float) else s.get(k)) for k in ("value", "ci_low", "ci_high")}


def timed(server: Server, fn, *args, **kwargs) -> tuple[Any, float, int]:
    before = server.total()
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started, server.total() - before


def overhead(db, server: Server, concurrency: int, fn, *args, **kwargs) -> tuple[Any, dict[str, Any]]:
    """``fn(*args, **kwargs)`` timed, then the requests it sent timed on the direct path."""
    known = call_hashes(db)
    result, seconds, requests = timed(server, fn, *args, **kwargs)
    baseline = direct(server, sent_requests(db, call_hashes(db) - known), concurrency)
    return result, {"seconds": round(seconds, 3), "requests": requests, "direct": baseline,
                    "ratio": round(seconds / baseline["seconds"], 3)}


def align_figures(db, server: Server, args: argparse.Namespace) -> dict[str, Any]:
    config = llm.LLMConfig(base_url=server.url, api_key="sk-bench", model="learner", concurrency=args.concurrency)
    result, spent = overhead(db, server, args.concurrency, align_judge, db, config, "relevance.v1", shots=4,
                             candidates=3, revisions=1, seed=0)
    winner = next((c for c in result.candidates if c.name == result.winner), None)
    out: dict[str, Any] = {
        "pairs": {"selection": result.selection["pairs"], "validation": result.validation["pairs"],
                  "holdout": (result.holdout or {}).get("n")},
        "candidates": {c.name: {"kappa": stat(c.statistics["cohen_kappa"]),
                                "difference": stat(c.difference["cohen_kappa"]),
                                "decision_ci_low": round(c.decision["cohen_kappa"]["ci_low"], 4)}
                       for c in result.candidates},
        "confidence": round(result.confidence, 4), "winner": result.winner, "registered": int(bool(result.registered)),
        "requests": spent["requests"], "overhead": spent}
    if winner is not None:
        hold = result.holdout
        out["validation"] = {"current_kappa": stat(winner.current["cohen_kappa"]),
                             "new_kappa": stat(winner.statistics["cohen_kappa"]),
                             "difference": stat(winner.difference["cohen_kappa"]),
                             "decision_ci_low": round(winner.decision["cohen_kappa"]["ci_low"], 4)}
        out["holdout"] = {"current_kappa": stat(hold["current"]["cohen_kappa"]),
                          "new_kappa": stat(hold["winner"]["cohen_kappa"]),
                          "difference": stat(hold["difference"]["cohen_kappa"]), "looks": result.holdout_looks}
    _, _, out["rerun_requests"] = timed(server, align_judge, db, config, "relevance.v1/r1", shots=4, candidates=3,
                                        revisions=1, seed=0)
    return out


def random_figures(db, server: Server, args: argparse.Namespace) -> dict[str, Any]:
    """Independent trials: each seed is another random judge (model ``random-SEED``, so nothing is
    shared through the cache) aligned from the built-in rubric version with that seed."""
    trials = []
    for seed in range(args.random_seeds):
        config = llm.LLMConfig(base_url=server.url, api_key="sk-bench", model=f"random-{seed}",
                               concurrency=args.concurrency)
        result, seconds, requests = timed(server, align_judge, db, config, "relevance.v1/r1", shots=4, candidates=3,
                                          revisions=1, seed=seed)
        trials.append({"seed": seed, "registered": result.registered,
                       "best_decision_ci_low": round(max(c.decision["cohen_kappa"]["ci_low"]
                                                         for c in result.candidates), 4),
                       "requests": requests, "seconds": round(seconds, 3)})
    return {"seeds": args.random_seeds, "registered": sum(t["registered"] is not None for t in trials),
            "best_decision_ci_low": max(t["best_decision_ci_low"] for t in trials), "trials": trials}


def stress_figures(db, server: Server, args: argparse.Namespace, model: str) -> dict[str, Any]:
    config = llm.LLMConfig(base_url=server.url, api_key="sk-bench", model=model, concurrency=args.concurrency)
    calibration = judge.run_judge(db, config, "relevance.v1", on="labeled", limit=CALIBRATION_PAIRS)
    gate_before = judge.gate(db, calibration.id).passed
    result, spent = overhead(db, server, args.concurrency, stress_judge, db, config, "relevance.v1",
                             n=STRESS_PAIRS, seed=0)
    planted = result.perturbations["planted_instruction"]
    gate_after = judge.gate(db, calibration.id)
    return {"pairs": result.pairs,
            "planted": {"n": planted.n, "rose": planted.rose, "rate": round(planted.rate, 4),
                        "ci_low": round(planted.ci_low, 4), "ci_high": round(planted.ci_high, 4)},
            "others_rose": {k: p.rose for k, p in result.perturbations.items() if k != "planted_instruction"},
            "ci_above_limit": int(planted.ci_low > GATE_LIMIT), "ci_below_limit": int(planted.ci_high < GATE_LIMIT),
            "stress_passed": int(bool(result.passed)), "gate_passed_before": int(gate_before),
            "gate_passed": int(gate_after.passed), "gate_reason": gate_after.reasons[-1], "overhead": spent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=120, help="logged queries, 3 graded chunks each")
    parser.add_argument("--latency", type=float, default=0.05, help="the server's seconds per request")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--random-seeds", type=int, default=5)
    parser.add_argument("--serve", metavar="TRUTH", help=argparse.SUPPRESS)  # the server process
    parser.add_argument("--batch-auto", help=argparse.SUPPRESS)  # with --serve: complete batches at once
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.latency, args.batch_auto)
        return
    import scipy.stats  # noqa: F401  (stress's Wilson interval imports it lazily: ~1 s, once per process)

    started = time.perf_counter()
    out: dict[str, Any] = {"queries": args.queries, "latency_s": args.latency, "concurrency": args.concurrency}
    with tempfile.TemporaryDirectory(prefix="bench_judge_") as tmp:
        folder = Path(tmp)
        truth = build_db(folder / "labeled.db", args.queries)
        out["labeled_pairs"] = len(truth)
        out["build_s"] = round(time.perf_counter() - started, 2)
        server = Server(truth, folder, args.latency)
        try:
            db = store.connect(folder / "labeled.db")
            out["align"] = {"learner": align_figures(db, server, args), "random": random_figures(db, server, args)}
            out["stress"] = {m: stress_figures(db, server, args, m) for m in ("gullible", "robust")}
            db.close()
        finally:
            server.close()
    # stress: the lower of the two tests' ratios, each against its own replay. A burst of load from
    # elsewhere on a shared machine lands on one of them; a slower stress test shows in both.
    out["overhead"] = {"align_ratio": out["align"]["learner"]["overhead"]["ratio"],
                       "stress_ratio": min(out["stress"][m]["overhead"]["ratio"] for m in ("gullible", "robust"))}
    out["total_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
