"""Benchmark: how many annotators one ``labeler app`` server holds.

Starts one ``labeler app`` (``python -m labeler --db DB app --headless --port P``) on a SQLite
database built through the public API (``labeler.ingest_logs`` on a generated log of ``--items``
queries x ``--chunks`` chunks, one password account per annotator with ``labeler.accounts.add_user``),
then drives N simulated annotators, each a real Streamlit websocket session (``st_session.py``)
that grades at human speed (a key every 300-800 ms, Enter 8-15 s after the item appeared, seeded).
N rises through ``--levels`` (sessions of one level stay on for the next) until the p95 of
submit -> next item (Enter sent to the next item's widget data received) passes ``--budget-ms``.

Per level: p50/p95 of submit -> next item and of key -> script run finished, the server's CPU
(share of one core, and per session) and RSS from /proc, the load average, and the rows the
sessions wrote (grades and submits counted in the database against what the clients sent, so the
load is real). Then ``py-spy`` samples the server at the largest N (``--profile-s``; skipped when
py-spy is missing) and the report lists where the time goes (functions by own and total samples).
Before the ladder (``--validate``, on by default), one real Chromium tab and one simulated session
grade an item and submit it on the same server, and the report shows what each made the server do
(script runs, messages and bytes per key and per submit): the simulation must cost the same.

Two ways to see past the limit: ``--no-post-script-gc`` serves with Streamlit's full garbage
collection after every script run turned off (``STREAMLIT_RUNNER_POST_SCRIPT_GC=false``, a
Streamlit option: the app's code is the same), and ``--servers K`` starts K app processes on the
one database file, each on its own port, and deals the sessions out round robin (what a proxy
with sticky sessions in front of them does); CPU and RSS are then the sum over the K processes.

Prints one JSON document (each level also goes to stderr as it is measured).

    PYTHONPATH=. python tests/bench/bench_capacity.py [--levels 5,10,15,20,25,30,40] [--window 45]
        [--items 4000] [--chunks 8] [--seed 7] [--no-validate] [--profile-s 15]
        [--no-post-script-gc] [--servers 1] [--keep-going]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

import capacity_browser  # noqa: E402
import capacity_profile  # noqa: E402
from st_session import Annotator  # noqa: E402

import labeler  # noqa: E402
import labeler.accounts as accounts  # noqa: E402

PASSWORD = "capacity-bench-pw"
WORDS = ("invoice plan refund seat admin export api token billing card trial upgrade downgrade team "
         "workspace owner role sso saml audit log webhook limit quota region backup restore delete "
         "archive email domain domain-verify password reset mfa device session timeout").split()


# --- the database ---------------------------------------------------------------------------------

def build(path: Path, items: int, chunks: int, annotators: int, seed: int) -> dict[str, str]:
    """``items`` logged queries with ``chunks`` chunks each (about 190 characters, from a pool shared
    between queries), a lead and ``annotators`` password accounts; returns name -> session token."""
    for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):  # a --workdir used before
        stale.unlink(missing_ok=True)
    rng = random.Random(seed)
    pool = [" ".join(rng.choice(WORDS) for _ in range(26))[:190] for _ in range(items * 2)]
    log = path.with_suffix(".jsonl")
    with open(log, "w") as f:
        for i in range(items):
            docs = rng.sample(range(len(pool)), chunks)
            q = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12)))
            f.write(json.dumps({"query_id": f"q{i}", "question": f"how do I {q}?", "answer": f"You {q}.",
                                "retrieved": [{"id": f"doc{d}", "score": round(1 - r / (chunks + 1), 3),
                                               "text": pool[d]} for r, d in enumerate(docs)]}) + "\n")
    db = labeler.connect(path)
    labeler.ingest_logs(db, log)
    accounts.add_user(db, "lead", "lead", password=PASSWORD)
    tokens = {}
    for k in range(annotators):
        name = f"annotator{k:02d}"
        accounts.add_user(db, name, password=PASSWORD, by="lead")
        tokens[name] = accounts.start_session(db, name)  # what the browser keeps after signing in
    db.conn.close()
    return tokens


def written(path: Path, names: list[str]) -> dict[str, int]:
    """Rows the benchmark's annotators have in the database: grades and submitted items."""
    db = labeler.connect(path)
    marks = ",".join("?" * len(names))
    grades = db.execute(f"SELECT count(*) FROM relevance_labels WHERE annotator IN ({marks})", names).fetchone()[0]
    submits = db.execute(f"SELECT count(*) FROM query_labels WHERE status = 'submitted' AND annotator IN ({marks})",
                         names).fetchone()[0]
    events = db.execute(f"SELECT count(*) FROM label_events WHERE annotator IN ({marks})", names).fetchone()[0]
    db.conn.close()
    return {"grades": grades, "submitted": submits, "label_events": events}


# --- the server -------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``labeler app`` on ``db``; ``pid`` is the Streamlit process under the launcher."""

    def __init__(self, db: Path, log: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
        self.proc = subprocess.Popen([sys.executable, "-m", "labeler", "--db", str(db), "app", "--headless",
                                      "--port", str(self.port)], cwd=db.parent, env=env,
                                     stdout=open(log, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"labeler app exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/_stcore/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("labeler app did not become healthy in 90 s")
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        self.pid = int(children[0]) if children else self.proc.pid

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/task"))

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Farm:
    """``k`` app processes on one database file, each on its own port: the sessions are dealt out
    round robin, as a proxy with sticky sessions would spread browsers; figures are summed."""

    def __init__(self, servers: list[Server]) -> None:
        self.servers = servers

    @property
    def pid(self) -> int:
        return self.servers[0].pid  # py-spy looks at the first one

    def url(self, i: int) -> str:
        return self.servers[i % len(self.servers)].url

    def cpu_s(self) -> float:
        return sum(s.cpu_s() for s in self.servers)

    def rss_mb(self) -> float:
        return sum(s.rss_mb() for s in self.servers)

    def threads(self) -> int:
        return sum(s.threads() for s in self.servers)

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


# --- the ladder -------------------------------------------------------------------------------

def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 1)


def level_figures(sessions: list[Annotator], t0: float, t1: float) -> dict[str, Any]:
    """Latencies of the runs sent inside [t0, t1): a submit that never brought an item counts as
    infinitely slow, so a stuck server cannot look fast."""
    submit, key, failed = [], [], 0
    for a in sessions:
        for r in a.stats.runs:
            if not t0 <= r.sent < t1:
                continue
            if r.kind == "submit":
                if r.item_at is None:
                    failed += 1
                    submit.append(float("inf"))
                else:
                    submit.append(r.item_at - r.sent)
            elif r.kind == "key" and r.done is not None:
                key.append(r.done - r.sent)
    finite = [s for s in submit if s != float("inf")]
    return {"submits": len(submit), "submits_without_next_item": failed, "keys": len(key),
            "submit_next_p50_ms": pct(submit, 0.5), "submit_next_p95_ms": pct(submit, 0.95),
            "submit_next_max_ms": round(max(finite) * 1000, 1) if finite else None,
            "key_run_p50_ms": pct(key, 0.5), "key_run_p95_ms": pct(key, 0.95)}


async def ladder(server: Farm, db_path: Path, tokens: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    names = list(tokens)
    sessions: list[Annotator] = []
    tasks: list[asyncio.Task] = []
    levels: list[dict[str, Any]] = []
    base_rss, base_threads = server.rss_mb(), server.threads()
    prev_rss, prev_n = None, 0
    before = written(db_path, names)
    try:
        for n in args.levels:
            if n > len(names):
                break
            joined = time.monotonic()
            new = [Annotator(server.url(len(sessions) + i), tokens[name], random.Random(rng.random()))
                   for i, name in enumerate(names[len(sessions):n])]

            async def join(a: Annotator, delay: float) -> None:
                await asyncio.sleep(delay)  # new tabs open over a few seconds, not in one burst
                await a.connect()
                tasks.append(asyncio.create_task(a.run()))

            sessions += new
            await asyncio.gather(*(join(a, i * args.join_gap) for i, a in enumerate(new)))
            await asyncio.sleep(args.warmup)
            t0, cpu0 = time.monotonic(), server.cpu_s()
            await asyncio.sleep(args.window)
            t1, cpu1 = time.monotonic(), server.cpu_s()
            await asyncio.sleep(1.5)  # the runs sent just before t1 finish
            after = written(db_path, names)
            sent = _sent(sessions)
            cpu_share = (cpu1 - cpu0) / (t1 - t0)
            figures = level_figures(sessions, t0, t1)
            rss = server.rss_mb()
            level = {"annotators": n, **figures,
                     "server_cpu_share_of_one_core": round(cpu_share, 3),
                     "server_cpu_ms_per_session_s": round(cpu_share / n * 1000, 2),
                     # one process runs Python on one core at a time: the sessions that would fill it
                     # (meaningful below saturation; a starved or saturated server does less per session)
                     "sessions_one_core_holds_by_cpu": round(n / cpu_share, 1) if cpu_share else None,
                     "server_cpu_ms_per_submit_cycle": round((cpu1 - cpu0) * 1000 / max(figures["submits"], 1), 1),
                     "server_rss_mb": round(rss, 1),
                     # the first sessions also pay for the pages' imports: per session is the slope from the level before
                     "server_rss_mb_per_added_session": round((rss - prev_rss) / (n - prev_n), 2) if prev_rss else None,
                     "server_threads": server.threads(), "loadavg_1m": os.getloadavg()[0],
                     "join_s": round(t0 - joined - args.warmup, 1),
                     "sent_total": sent, "written_total": after,
                     # grades: one row per (item, chunk, annotator), each graded once; submits: one row per item
                     "grades_stored_share": round((after["grades"] - before["grades"]) / max(sent["grades"], 1), 3),
                     "submits_stored_share": round((after["submitted"] - before["submitted"]) / max(sent["submits"], 1), 3),
                     "client_errors": sum(len(a.stats.errors) for a in sessions)}
            levels.append(level)
            prev_rss, prev_n = rss, n
            print(json.dumps({"level": level}), file=sys.stderr, flush=True)
            over = level["submit_next_p95_ms"] is None or level["submit_next_p95_ms"] > args.budget_ms
            if over and not args.keep_going:
                break
        profile = None
        if args.profile_s > 0:
            # in a thread: the sessions go on labeling (on this event loop) while py-spy samples
            profile = await asyncio.to_thread(capacity_profile.record, server.pid, args.profile_s, Path(args.workdir))
    finally:
        for a in sessions:
            a.stop_at = 0.0
        await asyncio.gather(*tasks, return_exceptions=True)
        for a in sessions:
            await a.close()
    errors = [e for a in sessions for e in a.stats.errors][:10]
    capacity = 0  # the largest N that, with every smaller level, kept p95 within budget
    for level in levels:
        if level["submit_next_p95_ms"] is None or level["submit_next_p95_ms"] > args.budget_ms:
            break
        capacity = level["annotators"]
    return {"levels": levels, "capacity_annotators": capacity, "base_rss_mb": round(base_rss, 1),
            "base_threads": base_threads, "client_errors_first": errors, "profile": profile,
            "largest_n": len(sessions)}


def _sent(sessions: list[Annotator]) -> dict[str, int]:
    return {"grades": sum(a.stats.grades_sent for a in sessions),
            "submits": sum(a.stats.submits_sent for a in sessions)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[5, 10, 15, 20, 25, 30, 40])
    ap.add_argument("--window", type=float, default=45.0, help="seconds measured per level")
    ap.add_argument("--warmup", type=float, default=4.0, help="seconds after the last new session joined")
    ap.add_argument("--join-gap", type=float, default=0.3, help="seconds between two new sessions")
    ap.add_argument("--items", type=int, default=4000)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--budget-ms", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--profile-s", type=float, default=15.0, help="py-spy at the largest N (0: none)")
    ap.add_argument("--no-post-script-gc", dest="post_script_gc", action="store_false",
                    help="serve with STREAMLIT_RUNNER_POST_SCRIPT_GC=false (no full GC after each script run)")
    ap.add_argument("--servers", type=int, default=1, help="app processes on the one database file")
    ap.add_argument("--keep-going", action="store_true", help="run every level, past the budget too")
    ap.add_argument("--no-validate", dest="validate", action="store_false")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-capacity-"))
    work.mkdir(parents=True, exist_ok=True)
    args.workdir = str(work)
    db_path = work / "capacity.db"
    started = time.monotonic()
    tokens = build(db_path, args.items, args.chunks, max(args.levels) + 2, args.seed)
    checks = {name: tokens.pop(name) for name in list(tokens)[-2:]}  # the validation's two tabs
    # Streamlit runs gc.collect(2) after every script run (runner.postScriptGC, on by default);
    # --no-post-script-gc measures the same server without it (a Streamlit option, not app code)
    env = None if args.post_script_gc else {"STREAMLIT_RUNNER_POST_SCRIPT_GC": "false"}
    server = Farm([])
    try:
        for k in range(args.servers):
            server.servers.append(Server(db_path, work / f"server{k}.log", env))
    except BaseException:
        server.stop()
        raise
    out: dict[str, Any] = {"items": args.items, "chunks": args.chunks, "budget_ms": args.budget_ms,
                           "key_gap_s": [0.3, 0.8], "item_s": [8, 15], "seed": args.seed,
                           "window_s": args.window, "post_script_gc": args.post_script_gc, "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
                           "servers": args.servers, "server_pids": [s.pid for s in server.servers]}
    try:
        if args.validate:
            out["validation"] = capacity_browser.validate(server.url(0), *checks.values())
        out.update(asyncio.run(ladder(server, db_path, tokens, args)))
    finally:
        server.stop()
    out["loadavg_end"] = os.getloadavg()
    out["runtime_s"] = round(time.monotonic() - started, 1)
    out["workdir"] = str(work)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
