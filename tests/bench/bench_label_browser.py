"""Benchmark: Enter -> next item on screen, in a real browser (Debian chromium + Playwright against
`streamlit run`), as a ratio to a bare Streamlit round trip measured in the same run.

Measured in the page: from the Enter keydown's timestamp (a window capture listener, which runs
before the widget's) to the next animation frame after the grading widget shows another item
(its ``data-item`` changes; the question is drawn above it in the same run, so it is on screen
too). The baseline is the same measurement on a trivial page: one st.components.v2 widget whose
Enter sends a state value, whose callback bumps a counter, and whose rerun draws the new number;
it is Streamlit's own floor for a key -> server -> screen round trip on this machine.

``--load``: the same while two more annotators label in their own browsers (a key every 300-800 ms,
Enter after the last chunk) and ``labeler ingest logs`` of fresh files runs in a loop: "three
annotators labeling and an ingest running". Prints one JSON document.

    PYTHONPATH=. python tests/bench/bench_label_browser.py [--items 20000] [--rounds 30] [--load]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.bench_label import build, pct  # noqa: E402
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, AppServer, sign_in_by_name  # noqa: E402

TARGETS = {"quiet_p50_ms": 150, "quiet_p95_ms": 300, "load_p95_ms": 500}

# in the page: Enter's timestamp, then the first frame after `selector` shows another data-item
_PROBE = """(selector) => {
  window.__next = []; let t0 = null, from = null;
  window.addEventListener('keydown', (e) => {
    if (e.key !== 'Enter') return;
    const g = document.querySelector(selector);
    t0 = e.timeStamp; from = g ? g.dataset.item : null;
  }, true);
  new MutationObserver(() => {
    const g = document.querySelector(selector);
    if (t0 === null || !g || g.dataset.item === from) return;
    const start = t0; t0 = null;
    requestAnimationFrame(() => window.__next.push(performance.now() - start));
  }).observe(document.body, {attributes: true, subtree: true, childList: true, attributeFilter: ['data-item']});
}"""

_ECHO_JS = """
let setter = null, sent = 0;
document.addEventListener('keydown', (e) => { if (e.key === 'Enter' && setter) { sent += 1; setter('hit', sent); } });
export default function ({ data, parentElement, setStateValue }) {
  setter = setStateValue;
  let box = parentElement.querySelector('.echo');
  if (!box) { box = document.createElement('div'); box.className = 'echo'; parentElement.append(box); }
  box.dataset.item = String(data.n);
  box.textContent = 'item ' + data.n;
}
"""

_ECHO_APP = f'''import streamlit as st

st.session_state.setdefault("n", 0)


def bump():
    st.session_state.n += 1


echo = st.components.v2.component("bench_echo", js={_ECHO_JS!r}, isolate_styles=False)
st.title("Echo")
echo(key="echo", data={{"n": st.session_state.n}}, on_hit_change=bump)
'''


def _echo_server(folder: Path) -> subprocess.Popen:
    app = folder / "echo_app.py"
    app.write_text(_ECHO_APP)
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(app), "--server.headless", "true",
                             "--server.address", "127.0.0.1", "--server.port", str(port),
                             "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder)
    proc.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return proc


def _wait_healthy(url: str) -> None:
    import urllib.request

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not become healthy in 60 s")


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def echo_latency(browser, url: str, rounds: int) -> list[float]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(60_000)
    page.goto(url)
    page.locator(".echo").wait_for()
    page.evaluate(_PROBE, ".echo")
    for i in range(rounds):
        page.keyboard.press("Enter")
        page.wait_for_function("(n) => window.__next.length >= n", arg=i + 1, polling="raf")
        page.wait_for_timeout(150)  # let the rerun's tail finish, as the label rounds do
    out = page.evaluate("window.__next")
    page.close()
    return out


STALL_MS = 30_000


def label_latency(browser, url: str, rounds: int, name: str, stalls: list[int] | None = None) -> list[float]:
    """Enter -> next item, ``rounds`` times. A round whose next item is not on screen after
    STALL_MS is counted in ``stalls`` (then the page is reloaded) instead of ending the run."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(60_000)
    sign_in_by_name(page, url, name)
    page.locator(".lb-grader .lb-chunk").first.wait_for()
    page.evaluate(_PROBE, ".lb-grader")
    out: list[float] = []
    for _ in range(rounds):
        page.keyboard.type("3z", delay=30)  # grade the item: the first chunk 3, the rest 0
        page.wait_for_function("() => document.querySelector('.lb-save').textContent === 'saved'", polling="raf")
        page.wait_for_timeout(150)  # an annotator reads before pressing Enter
        page.keyboard.press("Enter")
        try:
            page.wait_for_function("() => window.__next.length >= 1", polling="raf", timeout=STALL_MS)
            out += page.evaluate("window.__next.splice(0)")
        except Exception:  # noqa: BLE001 - a stalled round is counted, not fatal
            if stalls is None:
                raise
            stalls.append(1)
            page.reload()
            page.locator(".lb-grader .lb-chunk").first.wait_for()
            page.evaluate(_PROBE, ".lb-grader")
    page.close()
    return out


def worker(url: str, name: str, seconds: float, seed: int) -> None:
    """An annotator at human speed, in its own browser (``--worker``; started by ``--load``)."""
    from playwright.sync_api import sync_playwright

    rng = random.Random(seed)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = b.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(60_000)
        sign_in_by_name(page, url, name)
        page.locator(".lb-grader .lb-chunk").first.wait_for()
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            n = page.locator(".lb-grader .lb-chunk").count()
            for _ in range(n):
                page.wait_for_timeout(rng.randint(300, 800))
                page.keyboard.press(str(rng.randrange(4)))
            page.wait_for_timeout(rng.randint(300, 800))
            item = page.locator(".lb-grader").get_attribute("data-item")
            page.keyboard.press("Enter")
            try:
                page.wait_for_function("(old) => document.querySelector('.lb-grader')?.dataset.item !== old",
                                       arg=item, timeout=STALL_MS)
            except Exception:  # noqa: BLE001 - a stalled page is reloaded, as a person would
                page.reload()
                page.locator(".lb-grader .lb-chunk").first.wait_for()
        b.close()


def ingest_loop(db_path: Path, folder: Path, seconds: float) -> subprocess.Popen:
    """``labeler ingest logs`` of fresh 20k-record files, one after the other, for ``seconds``."""
    script = folder / "ingest_loop.py"
    script.write_text(f'''import json, subprocess, sys, time
until = time.monotonic() + {seconds}
k = 0
while time.monotonic() < until:
    path = {str(folder)!r} + f"/load{{k}}.jsonl"
    with open(path, "w") as f:
        for i in range(20000):
            f.write(json.dumps({{"query_id": f"load{{k}}-{{i}}", "question": f"loaded question {{i}} about plans",
                                "retrieved": [{{"id": f"ld{{i % 3000}}-{{r}}", "text": f"loaded chunk {{r}} " * 15}}
                                              for r in range(8)]}}) + "\\n")
    subprocess.run([sys.executable, "-m", "labeler", "--db", {str(db_path)!r}, "ingest", "logs", path],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    k += 1
''')
    # its own session: stopping it stops the `labeler ingest` it runs too (killpg), before the
    # temporary folder goes
    return subprocess.Popen([sys.executable, str(script)], cwd=ROOT, start_new_session=True)


def stats(ms: list[float]) -> dict:
    if not ms:
        return {"n": 0}
    return {"p50_ms": round(statistics.median(ms), 1), "p95_ms": pct(ms, 0.95), "min_ms": round(min(ms), 1),
            "max_ms": round(max(ms), 1), "n": len(ms)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--load", action="store_true", help="also with two more annotators and an ingest running")
    ap.add_argument("--worker", nargs=4, metavar=("URL", "NAME", "SECONDS", "SEED"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        url, name, seconds, seed = args.worker
        worker(url, name, float(seconds), int(seed))
        return
    from playwright.sync_api import sync_playwright

    out: dict = {"benchmark": "label_browser", "items": args.items, "labeled": 0.99, "chunks": 8,
                 "targets": TARGETS}
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        db_path = folder / "label.db"
        t = time.perf_counter()
        build(db_path, args.items, 0.99, chunks=8)
        out["build_s"] = round(time.perf_counter() - t, 1)
        server = AppServer(db_path)
        echo = _echo_server(folder)
        try:
            _wait_healthy(echo.url)  # type: ignore[attr-defined]
            with sync_playwright() as p:
                b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                # a first round of each, not counted: imports, the first page load, the caches
                echo_latency(b, echo.url, 3)
                label_latency(b, server.url, 3, "warmup")
                # baseline and label in alternating blocks, so a shared machine's load falls on both
                base: list[float] = []
                label: list[float] = []
                for block in range(3):
                    base += echo_latency(b, echo.url, max(args.rounds // 3, 5))
                    label += label_latency(b, server.url, max(args.rounds // 3, 5), f"quiet{block}")
                out["baseline_round_trip"] = stats(base)
                out["quiet"] = stats(label)
                out["ratio_quiet_p50"] = round(out["quiet"]["p50_ms"] / out["baseline_round_trip"]["p50_ms"], 2)
                if args.load:
                    seconds = 60.0 + args.rounds * 4.0
                    others = [subprocess.Popen([sys.executable, __file__, "--worker", server.url, f"load{i}",
                                                str(seconds), str(i)], cwd=ROOT) for i in range(2)]
                    ingest = ingest_loop(db_path, folder, seconds)
                    try:
                        time.sleep(15)  # the two browsers sign in and start labeling first
                        stalled: list[int] = []
                        loaded = label_latency(b, server.url, args.rounds, "loaded", stalled)
                        base_loaded = echo_latency(b, echo.url, max(args.rounds // 3, 5))
                    finally:
                        for proc in others:
                            proc.terminate()
                            proc.wait(30)
                        os.killpg(ingest.pid, signal.SIGTERM)
                        ingest.wait(30)
                    out["load"] = {"annotators": 3, "ingest": "labeler ingest logs, 20k records x 8 chunks per file, "
                                                              "in a loop", "stalled_rounds": len(stalled),
                                   "stall_ms": STALL_MS, **stats(loaded)}
                    out["baseline_round_trip_under_load"] = stats(base_loaded)
                    if out["load"]["n"]:
                        out["ratio_load_p95"] = round(out["load"]["p95_ms"] / out["baseline_round_trip"]["p95_ms"], 2)
                b.close()
        finally:
            server.stop()
            echo.terminate()
            echo.wait(10)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
