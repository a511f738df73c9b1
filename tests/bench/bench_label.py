"""Benchmark: Label page latency at 20 items vs 100k items (99% labeled), in AppTest and in the browser.

AppTest: time from a grade click to the rerun finished, and from submit to the next item shown.
Browser (Debian chromium + Playwright against `streamlit run`): time from pressing Enter (submit)
to the next question visible. Prints one JSON document.

    python tests/bench/bench_label.py [--items 100000] [--rounds 30] [--no-browser]
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
from labeler.app import state  # noqa: E402

APP = str(ROOT / "labeler" / "app" / "streamlit_app.py")


def build(path: Path, n: int, labeled_share: float, seed: int = 3) -> None:
    rng = random.Random(seed)
    log = path.with_suffix(".jsonl")
    with open(log, "w") as f:
        for i in range(n):
            f.write(json.dumps({"query_id": f"q{i}", "question": f"question {i} about invoices and plans",
                                "retrieved": [{"id": f"d{rng.randrange(5000)}-{r}", "score": 1 - r / 10,
                                               "text": f"chunk text {r} " * 20} for r in range(5)]}) + "\n")
    db = labeler.connect(path)
    labeler.ingest_logs(db, log)
    labeler.set_setting(db, "overlap_fraction", 0.0)
    labels.sync_queue(db)
    k = int(n * labeled_share)
    if k:
        at = labeler.db.now()
        pks = [r[0] for r in db.execute("SELECT pk FROM queries ORDER BY pk LIMIT ?", [k])]
        conn = db.conn
        with labeler.db.transaction(db):
            conn.execute("INSERT OR IGNORE INTO annotators (name, role, created_at) VALUES ('old', 'annotator', ?)", [at])
            conn.executemany("INSERT INTO assignments (query_pk, annotator, state, updated_at) VALUES (?, 'old', 'done', ?)",
                             [(p, at) for p in pks])
            conn.executemany("INSERT INTO query_labels (query_pk, annotator, status, seconds, created_at, updated_at, "
                             "submitted_at, status_at) VALUES (?, 'old', 'submitted', ?, ?, ?, ?, ?)",
                             [(p, 20 + p % 40, at, at, at, at) for p in pks])
            conn.execute("INSERT INTO relevance_labels (query_pk, doc_pk, annotator, grade, created_at, updated_at) "
                         "SELECT r.query_pk, r.doc_pk, 'old', (r.rank = 1) * 2, ?, ? FROM retrievals r "
                         "WHERE r.query_pk <= ?", [at, at, max(pks)])
            conn.execute("UPDATE queue SET taken = 1, done = 1 WHERE query_pk <= ?", [max(pks)])
    db.conn.execute("ANALYZE")


def apptest_latency(path: Path, rounds: int) -> dict:
    import os

    from streamlit.testing.v1 import AppTest

    os.environ["LABELER_DB"] = str(path)
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[state.ANNOTATOR] = "alice"
    at.run()
    grade_ms, submit_ms = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        at.button(key="kbd_2").click().run()
        grade_ms.append((time.perf_counter() - t) * 1000)
        at.button(key="kbd_rest").click().run()
        before = at.session_state[state.CURRENT]
        t = time.perf_counter()
        at.button(key="kbd_submit").click().run()
        submit_ms.append((time.perf_counter() - t) * 1000)
        assert at.session_state[state.CURRENT] != before and not at.exception
    return {"grade_p50_ms": round(statistics.median(grade_ms), 1), "submit_p50_ms": round(statistics.median(submit_ms), 1),
            "grade_p90_ms": round(sorted(grade_ms)[int(0.9 * len(grade_ms))], 1),
            "submit_p90_ms": round(sorted(submit_ms)[int(0.9 * len(submit_ms))], 1), "rounds": rounds}


def browser_latency(path: Path, rounds: int) -> dict:
    from playwright.sync_api import sync_playwright

    from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, AppServer

    server = AppServer(path)
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = b.new_page()
            page.set_default_timeout(30_000)
            page.goto(server.url + "/?annotator=bob")
            page.get_by_text("retrieved chunks graded").wait_for()
            times = []
            for _ in range(rounds):
                page.evaluate("() => document.activeElement && document.activeElement.blur()")
                page.keyboard.press("Z")
                page.get_by_text("5 of 5 retrieved chunks graded").wait_for()
                qid = page.get_by_text("Query q").first.inner_text().split()[1]
                t = time.perf_counter()
                page.keyboard.press("Enter")
                page.wait_for_function(
                    "(q) => { const e = [...document.querySelectorAll('[data-testid=stCaptionContainer]')]"
                    ".find(x => x.innerText.startsWith('Query ')); return e && !e.innerText.startsWith('Query ' + q + ' ') }",
                    arg=qid)
                page.get_by_text("0 of 5 retrieved chunks graded").wait_for()
                times.append((time.perf_counter() - t) * 1000)
            b.close()
    finally:
        server.stop()
    return {"submit_to_next_question_p50_ms": round(statistics.median(times), 1),
            "submit_to_next_question_max_ms": round(max(times), 1), "rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    out: dict = {"benchmark": "label"}
    with tempfile.TemporaryDirectory() as d:
        small, large = Path(d) / "small.db", Path(d) / "large.db"
        build(small, 20 + args.rounds * 2, 0.0)
        t = time.perf_counter()
        build(large, args.items, 0.99)
        out["build_large_s"] = round(time.perf_counter() - t, 1)
        out["small"] = {"items": 20 + args.rounds * 2, **apptest_latency(small, args.rounds)}
        out["large"] = {"items": args.items, "labeled": 0.99, **apptest_latency(large, args.rounds)}
        out["ratio_grade"] = round(out["large"]["grade_p50_ms"] / out["small"]["grade_p50_ms"], 2)
        out["ratio_submit"] = round(out["large"]["submit_p50_ms"] / out["small"]["submit_p50_ms"], 2)
        out["targets"] = {"ratio": 1.5, "p50_ms_at_large": 100}
        if not args.no_browser:
            out["browser_large"] = browser_latency(large, min(args.rounds, 10))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
