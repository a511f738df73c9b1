"""Benchmark: the Label page at 20 items vs 100k items (99% labeled), in AppTest and in the browser.

AppTest: time from a grade event sent by the grading widget (its outbox) to the rerun finished,
and from submit to the next item shown.
Browser (Debian chromium + Playwright against `streamlit run`), items of 8 chunks:
- key to visible: from the keydown event to the grade on screen, measured in the page (the
  event's timestamp to the DOM change, and to the next animation frame, which paints it);
- grade to stored: from pressing the key to the grade's label_events row in SQLite, and to the
  widget showing "saved" (acknowledged);
- submit to next question: from pressing Enter to the next item's chunks shown.
Pooled (``--pooled``, AppTest): the same 100k items (99% labeled) logged by three retrievers x 10
chunks, about 20 distinct per query; grade -> rerun and submit -> next item p50 against the single
retriever's (8 chunks) of the same run, measured in alternating blocks (target: within 1.2x).
Prints one JSON document.

    PYTHONPATH=. python tests/bench/bench_label.py [--items 100000] [--rounds 30] [--no-browser] [--pooled]
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


POOL_RETRIEVERS = ("production", "bm25", "dense")


def build(path: Path, n: int, labeled_share: float, seed: int = 3, chunks: int = 5, pooled: bool = False) -> None:
    """``n`` logged queries, ``labeled_share`` of them submitted by another annotator. ``pooled``:
    three retrievers x ``chunks`` chunks per query over 2 * ``chunks`` distinct chunks (each
    retriever's top ``chunks`` overlap the next one's by half), so the pool holds 20 for 10."""
    rng = random.Random(seed)
    log = path.with_suffix(".jsonl")
    with open(log, "w") as f:
        for i in range(n):
            base = {"query_id": f"q{i}", "question": f"question {i} about invoices and plans"}
            if not pooled:
                f.write(json.dumps({**base, "retrieved": [{"id": f"d{rng.randrange(5000)}-{r}", "score": 1 - r / 10,
                                                           "text": f"chunk text {r} " * 20} for r in range(chunks)]}) + "\n")
                continue
            ids = [f"d{rng.randrange(5000)}-{j}" for j in range(2 * chunks)]
            half = chunks // 2
            for k, retriever in enumerate(POOL_RETRIEVERS):
                mine = ids[k * half:k * half + chunks]
                rng.shuffle(mine)
                f.write(json.dumps({**base, "retriever": retriever, "retrieved": [
                    {"id": d, "score": 1 - r / 10, "text": f"chunk text {d} " * 20} for r, d in enumerate(mine)]}) + "\n")
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
            conn.execute("INSERT OR IGNORE INTO relevance_labels (query_pk, doc_pk, annotator, grade, created_at, updated_at) "
                         "SELECT r.query_pk, r.doc_pk, 'old', (r.rank = 1) * 2, ?, ? FROM retrievals r "
                         "WHERE r.query_pk <= ?", [at, at, max(pks)])
            conn.execute("UPDATE queue SET taken = 1, done = 1 WHERE query_pk <= ?", [max(pks)])
    db.conn.execute("ANALYZE")


def pct(values: list[float], q: float) -> float:
    return round(sorted(values)[min(int(q * len(values)), len(values) - 1)], 1)


def apptest_latency(path: Path, rounds: int) -> dict:
    import os

    from streamlit.testing.v1 import AppTest

    from labeler.app.components import grader

    os.environ["LABELER_DB"] = str(path)
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[state.ANNOTATOR] = "alice"
    at.run()
    sent = 0

    def send(events: list[dict]) -> None:
        nonlocal sent
        sent += 1
        item = at.session_state[state.CURRENT]
        at.session_state[grader.KEY] = {"outbox": {"n": sent, "batches": [
            {"client": "bench", "item": item, "events": events}]}}
        at.run()

    grade_ms, submit_ms = [], []
    for _ in range(rounds):
        item = labels.get_item(labeler.connect(path), at.session_state[state.CURRENT], "alice")
        docs = [c.doc_pk for c in item.chunks]
        t = time.perf_counter()
        send([{"seq": 1, "doc_pk": docs[0], "grade": 2}])
        grade_ms.append((time.perf_counter() - t) * 1000)
        send([{"seq": 1 + i, "doc_pk": d, "grade": 0} for i, d in enumerate(docs) if i])
        before = at.session_state[state.CURRENT]
        t = time.perf_counter()
        send([{"seq": len(docs) + 1, "submit": True}])
        submit_ms.append((time.perf_counter() - t) * 1000)
        assert at.session_state[state.CURRENT] != before and not at.exception
    return summary(grade_ms, submit_ms)


def summary(grade_ms: list[float], submit_ms: list[float]) -> dict:
    return {"grade_p50_ms": round(statistics.median(grade_ms), 1), "submit_p50_ms": round(statistics.median(submit_ms), 1),
            "grade_p90_ms": pct(grade_ms, 0.9), "submit_p90_ms": pct(submit_ms, 0.9), "rounds": len(grade_ms),
            "_raw": (grade_ms, submit_ms)}


# In the page: the keydown's timestamp (a window capture listener runs before the widget's), the
# time the grade reached the DOM (a MutationObserver on data-grade) and the next animation frame.
_PROBE = """() => {
  window.__kv = []; let t0 = null;
  window.addEventListener('keydown', (e) => { if (/^[0-9]$/.test(e.key)) t0 = e.timeStamp; }, true);
  new MutationObserver((ms) => {
    if (t0 === null || !ms.some((m) => m.attributeName === 'data-grade')) return;
    const start = t0, dom = performance.now(); t0 = null;
    requestAnimationFrame(() => window.__kv.push([dom - start, performance.now() - start]));
  }).observe(document.body, {attributes: true, subtree: true, attributeFilter: ['data-grade']});
}"""


def browser_latency(path: Path, rounds: int) -> dict:
    import sqlite3

    from playwright.sync_api import sync_playwright

    from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, AppServer, sign_in_by_name

    server = AppServer(path)
    conn = sqlite3.connect(path)

    def events() -> int:
        return conn.execute("SELECT count(*) FROM label_events WHERE field = 'grade'").fetchone()[0]

    stored_ms, saved_ms, submit_ms = [], [], []
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = b.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            sign_in_by_name(page, server.url, "bob")  # no accounts here: a name signs in
            page.locator(".lb-grader .lb-chunk").first.wait_for()
            page.evaluate(_PROBE)
            rng = random.Random(1)
            for _ in range(rounds):
                item = page.locator(".lb-grader").get_attribute("data-item")
                for _ in range(8):
                    before = events()
                    t = time.perf_counter()
                    page.keyboard.press(str(rng.randrange(4)))
                    while events() == before:  # a benchmark may poll with a short sleep
                        time.sleep(0.002)
                    stored_ms.append((time.perf_counter() - t) * 1000)
                    page.wait_for_function("() => document.querySelector('.lb-save').textContent === 'saved'",
                                           polling="raf")
                    saved_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                page.keyboard.press("Enter")
                page.wait_for_function("(old) => { const g = document.querySelector('.lb-grader');"
                                       " return g && g.dataset.item !== old }", arg=item, polling="raf")
                submit_ms.append((time.perf_counter() - t) * 1000)
            visible = page.evaluate("window.__kv")
            # the same keys in bursts (no gap): nothing waits for the server between keys
            page.keyboard.type("01230123", delay=0)
            try:
                page.wait_for_function("(n) => window.__kv.length >= n", arg=len(visible) + 8, timeout=5_000)
            except Exception:  # noqa: BLE001 - reported as the count below
                pass
            burst = len(page.evaluate("window.__kv")) - len(visible)
            b.close()
    finally:
        server.stop()
        conn.close()
    dom, frame = [v[0] for v in visible], [v[1] for v in visible]
    return {"key_to_dom_p50_ms": pct(dom, 0.5), "key_to_dom_p90_ms": pct(dom, 0.9),
            "key_to_visible_frame_p50_ms": pct(frame, 0.5), "key_to_visible_frame_p90_ms": pct(frame, 0.9),
            "grade_to_stored_p50_ms": pct(stored_ms, 0.5), "grade_to_stored_p90_ms": pct(stored_ms, 0.9),
            "grade_to_saved_shown_p50_ms": pct(saved_ms, 0.5), "grade_to_saved_shown_p90_ms": pct(saved_ms, 0.9),
            "submit_to_next_question_p50_ms": pct(submit_ms, 0.5),
            "submit_to_next_question_max_ms": round(max(submit_ms), 1),
            "burst_keys_shown": burst, "keys": len(visible), "rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--pooled", action="store_true",
                    help="also the pooled case: 3 retrievers x 10 chunks (20 distinct) per query")
    args = ap.parse_args()
    out: dict = {"benchmark": "label"}
    with tempfile.TemporaryDirectory() as d:
        small, large = Path(d) / "small.db", Path(d) / "large.db"
        build(small, 20 + args.rounds * 2, 0.0)
        t = time.perf_counter()
        build(large, args.items, 0.99, chunks=8)
        out["build_large_s"] = round(time.perf_counter() - t, 1)
        out["small"] = {"items": 20 + args.rounds * 2, **apptest_latency(small, args.rounds)}
        out["large"] = {"items": args.items, "labeled": 0.99, **apptest_latency(large, args.rounds)}
        out["ratio_grade"] = round(out["large"]["grade_p50_ms"] / out["small"]["grade_p50_ms"], 2)
        out["ratio_submit"] = round(out["large"]["submit_p50_ms"] / out["small"]["submit_p50_ms"], 2)
        if args.pooled:
            pooled = Path(d) / "pooled.db"
            t = time.perf_counter()
            build(pooled, args.items, 0.99, chunks=10, pooled=True)
            out["build_pooled_s"] = round(time.perf_counter() - t, 1)
            db = labeler.connect(pooled)
            distinct = db.execute("SELECT avg(n) FROM (SELECT count(DISTINCT doc_pk) AS n FROM retrievals "
                                  "WHERE query_pk <= 1000 GROUP BY query_pk)").fetchone()[0]
            db.close()
            # the pool against the single retriever in alternating blocks, so that the load of a
            # shared machine falls on both alike (one block after the other differed by 2x here)
            raw: dict[str, tuple[list, list]] = {"single": ([], []), "pooled": ([], [])}
            for _ in range(3):
                for name, db_path in (("single", large), ("pooled", pooled)):
                    g, s_ = apptest_latency(db_path, max(args.rounds // 3, 5))["_raw"]
                    raw[name][0].extend(g)
                    raw[name][1].extend(s_)
            out["single_interleaved"] = {"items": args.items, "chunks": 8, **summary(*raw["single"])}
            out["pooled"] = {"items": args.items, "labeled": 0.99, "retrievers": len(POOL_RETRIEVERS),
                             "chunks_per_retriever": 10, "distinct_per_query": round(distinct, 1),
                             **summary(*raw["pooled"])}
            out["ratio_pooled_grade"] = round(out["pooled"]["grade_p50_ms"] / out["single_interleaved"]["grade_p50_ms"], 2)
            out["ratio_pooled_submit"] = round(out["pooled"]["submit_p50_ms"] / out["single_interleaved"]["submit_p50_ms"], 2)
        out["targets"] = {"ratio": 1.5, "p50_ms_at_large": 100, "key_to_visible_p50_ms": 50, "ratio_pooled": 1.2}
        if not args.no_browser:
            out["browser_large"] = {"items": args.items, "chunks": 8,
                                    **browser_latency(large, min(args.rounds, 10))}
    for part in out.values():
        if isinstance(part, dict):
            part.pop("_raw", None)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
