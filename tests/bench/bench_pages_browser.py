"""Benchmark page switches in a real browser on a database with 100k labeled queries.

Builds the Metrics benchmark's database once (``bench_metrics_page.build_db``: N submitted queries x
20 production retrievals, ~90% graded, cached by size in the temp folder), serves it with
``streamlit run`` on a free 127.0.0.1 port, signs in as its lead in Debian chromium (Playwright) and
clicks through the sidebar: Label -> Data -> Metrics -> Label, ``--rounds`` times.
Each click is timed until the new page's main content is drawn:

- ``drawn_ms``: until the page's title and its main element are on screen, from this run (not
  stale): Data and Metrics their first tile, Label its item or buttons;
- ``..._done_ms``: until the whole script run is finished (nothing stale, no "Running" widget).

The baseline, measured in the same run, is the switch to the Label page, which on this database
(everything labeled) draws "Nothing left" and two buttons: what any page switch costs, Streamlit's
round trip plus the sign-in check, the sidebar and one queue lookup. Figures are medians over
the rounds after the first (the first visit is reported apart: it meets a server that has just
started), as ratios to the baseline too. ``--load`` runs that many extra processes that write
labels in a loop while measuring (other annotators' writes: each one makes the pages read again).

Run: ``PYTHONPATH=. python tests/bench/bench_pages_browser.py [--queries 100000] [--rounds 6]``;
prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from bench_metrics_page import build_db  # noqa: E402

APP = ROOT / "labeler" / "app" / "streamlit_app.py"
CHROMIUM = os.environ.get("LABELER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]

# a page is drawn when its title and its main element are on screen and belong to this run
_DRAWN = """([title, selector]) => {
  const main = document.querySelector('[data-testid="stMain"]');
  if (!main) return false;
  if (title !== null) {  // the Label page shows an item's question, not a title, when it has one
    const h1 = [...main.querySelectorAll('h1')].find(h => h.textContent.trim() === title);
    if (!h1 || h1.closest('[data-stale="true"]')) return false;
  }
  return [...main.querySelectorAll(selector)].some(e => !e.closest('[data-stale="true"]'));
}"""
_DONE = """() => !document.querySelector('[data-stale="true"]')
  && !document.querySelector('[data-testid="stStatusWidget"] [data-testid="stStatusWidgetRunningIcon"]')
  && !document.querySelector('[data-testid="stStatusWidget"] button')"""

PAGES = {  # nav link text -> (title, selector of its main element)
    "Data": ("Data", '[data-testid="stMetric"]'),
    "Metrics": ("Metrics", '[data-testid="stMetric"]'),
    "Label": (None, '[data-testid="stButton"], .lb-plain, iframe'),  # the item, or "Nothing left" and its button
}
ORDER = ["Data", "Metrics", "Label"]
BASELINE = "Label"

_WRITER = """
import random, sys, time
import labeler, labeler.labels as labels
db = labeler.connect(sys.argv[1], migrate=False)
rows = db.execute("SELECT query_pk, doc_pk, grade FROM relevance_labels WHERE annotator = 'bench' "
                  "ORDER BY random() LIMIT 2000").fetchall()
rng = random.Random(int(sys.argv[2]))
while True:
    q, d, g = rng.choice(rows)
    labels.set_grade(db, q, d, 'bench', 3 - g)
    labels.set_grade(db, q, d, 'bench', g)
    time.sleep(rng.uniform(0.3, 0.8))  # a key every 300-800 ms, as a person grades
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(db_path: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true",
           "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]
    env = dict(os.environ, LABELER_DB=str(db_path), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=db_path.parent)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"streamlit exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=1):
                return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("streamlit did not become healthy in 60 s")


def switch(page, link: str) -> tuple[float, float]:
    """Click the sidebar link ``link``; (ms until its main content is drawn, ms until the run is done)."""
    target = page.locator('[data-testid="stSidebarNav"] a', has_text=link).first
    start = time.perf_counter()
    target.click()
    page.wait_for_function(_DRAWN, arg=list(PAGES[link]), polling="raf", timeout=120_000)
    drawn = (time.perf_counter() - start) * 1000
    page.wait_for_function(_DONE, polling="raf", timeout=120_000)
    done = (time.perf_counter() - start) * 1000
    return drawn, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--load", type=int, default=0, help="processes writing labels while measuring")
    args = parser.parse_args()
    path = Path(tempfile.gettempdir()) / f"labeler-bench-metrics-{args.queries}.db"
    build_s = 0.0
    if not path.exists():
        start = time.perf_counter()
        build_db(path.with_suffix(".tmp"), args.queries).rename(path)
        build_s = time.perf_counter() - start

    from playwright.sync_api import sync_playwright

    proc, url = serve(path, path.with_suffix(".bench-pages.log"))
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(i)],
                                env=dict(os.environ, PYTHONPATH=str(ROOT))) for i in range(args.load)]
    times: dict[str, list[tuple[float, float]]] = {p: [] for p in ORDER}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(120_000)
            page.goto(url)
            page.get_by_label("Your name").fill("bench")
            page.get_by_role("button", name="Start labeling").click()
            page.get_by_role("button", name="Sign out").wait_for()
            page.wait_for_function(_DRAWN, arg=list(PAGES["Label"]), polling="raf")
            page.wait_for_function(_DONE, polling="raf")
            for _ in range(args.rounds):
                for link in ORDER:
                    times[link].append(switch(page, link))
            browser.close()
    finally:
        for w in writers:
            w.kill()
            w.wait()
        proc.terminate()
        proc.wait(10)

    def med(values: list[float]) -> float:
        return round(statistics.median(values), 1)

    later = {p: v[1:] or v for p, v in times.items()}
    base = med([d for d, _ in later[BASELINE]])
    out: dict[str, object] = {"n_queries": args.queries, "rounds": args.rounds, "load_writers": args.load,
                              "build_db_s": round(build_s, 1), "baseline": f"switch to {BASELINE}",
                              "baseline_drawn_ms": base}
    for link in ORDER:
        drawn = [d for d, _ in later[link]]
        out[link.lower()] = {
            "first_visit_drawn_ms": round(times[link][0][0], 1), "drawn_ms": med(drawn),
            "drawn_max_ms": round(max(drawn), 1), "done_ms": med([d for _, d in later[link]]),
            "drawn_ratio_to_baseline": round(med(drawn) / base, 2)}
    out["target_drawn_ms"] = 1000
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    random.seed(0)
    main()
