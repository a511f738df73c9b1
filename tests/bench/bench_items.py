"""Benchmark: the Items page and `labeler items` at 100k items with 2 annotators each.

The database: ``--items`` logged queries of 5 chunks; alice and bob each have a label row on every
item (submitted with grades on all 5 chunks, except 1% flagged by alice with a reason and 2%
skipped by bob); a third of the overlapped pairs disagree, some enough to conflict.

Measured (median of ``--rounds``):
- AppTest: the Items page's first render (the lead opens it) and a filter change (status =
  flagged; a text search; conflict = yes; annotator bob + status skipped), each a full rerun;
  ``conflict_first_in_process``: the conflict filter's first use in the process (nothing cached);
- the library call ``labels.list_items`` for the same filters (``conflict_first_call``: the first
  conflict filter of a process, which finds every conflict in SQL; later calls reuse it);
- baseline in the same run: raw sqlite3 ``COUNT(*)`` + ``SELECT ... LIMIT 50`` of the first page
  of queries (no filter), and an AppTest rerun of the same page with nothing changed;
- ``labeler items --flagged --json`` as a subprocess (wall time, Python start included), against
  ``labeler --version`` (the start alone).
Prints one JSON document; ``ratios`` divides each figure by its baseline from the same run (the raw
SQLite page for the library, the unchanged rerun for AppTest, ``--version`` for the CLI).

    PYTHONPATH=. python tests/bench/bench_items.py [--items 100000] [--rounds 5] [--db KEEP.db]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
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


def build(path: Path, n: int, seed: int = 5) -> None:
    rng = random.Random(seed)
    log = path.with_suffix(".jsonl")
    with open(log, "w") as f:
        for i in range(n):
            f.write(json.dumps({"query_id": f"q{i}", "question": f"question {i} about invoices and plans {rng.random()}",
                                "timestamp": f"2026-0{1 + i % 9}-{1 + i % 28:02d}T10:00:00Z",
                                "retrieved": [{"id": f"d{rng.randrange(20000)}-{r}", "score": 1 - r / 10,
                                               "text": f"chunk text {r}"} for r in range(5)]}) + "\n")
    db = labeler.connect(path)
    labeler.ingest_logs(db, log)
    labels.add_annotator(db, "lena", "lead")
    labels.add_annotator(db, "alice")
    labels.add_annotator(db, "bob")
    labeler.set_setting(db, "overlap_fraction", 1.0)
    labels.sync_queue(db)
    at = labeler.db.now()
    pks = [r[0] for r in db.execute("SELECT pk FROM queries ORDER BY pk")]
    flagged = set(rng.sample(pks, n // 100))
    skipped = set(rng.sample(pks, n // 50))
    rows, grades = [], []
    for who in ("alice", "bob"):
        for p in pks:
            status = ("flagged" if who == "alice" and p in flagged else
                      "skipped" if who == "bob" and p in skipped else "submitted")
            rows.append((p, who, status, "the question is unclear" if status == "flagged" else None, at, at,
                         at if status == "submitted" else None, at))
    conn = db.conn
    with labeler.db.transaction(db):
        conn.executemany("INSERT INTO query_labels (query_pk, annotator, status, flag_reason, seconds, created_at, "
                         "updated_at, submitted_at, status_at) VALUES (?, ?, ?, ?, 30, ?, ?, ?, ?)", rows)
        conn.executemany("INSERT INTO assignments (query_pk, annotator, state, updated_at) VALUES (?, ?, ?, ?)",
                         [(r[0], r[1], "released" if r[2] == "skipped" else "done", at) for r in rows])
        for p, doc_pk, rank in conn.execute("SELECT query_pk, doc_pk, rank FROM retrievals").fetchall():
            a = 2 if rank == 1 else 0
            b = a if rng.random() < 0.67 else rng.choice([0, 1, 3])
            grades += [(p, doc_pk, "alice", a, at, at), (p, doc_pk, "bob", b, at, at)]
        conn.executemany("INSERT OR IGNORE INTO relevance_labels (query_pk, doc_pk, annotator, grade, created_at, "
                         "updated_at) VALUES (?, ?, ?, ?, ?, ?)", grades)
        conn.execute("UPDATE queue SET taken = 2, done = 2")
    conn.execute("ANALYZE")
    db.conn.close()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)  # ms: a raw SQLite page is well under 0.1 ms


def apptest(path: Path, rounds: int) -> dict:
    from streamlit.testing.v1 import AppTest

    os.environ["LABELER_DB"] = str(path)
    os.environ["LABELER_WARM_METRICS"] = "0"
    out: dict[str, list[float]] = {k: [] for k in ("first_render", "rerun_unchanged", "status_flagged", "search",
                                                   "conflict", "annotator_status")}
    first_conflict = None
    for round_ in range(rounds):
        at = AppTest.from_file(APP, default_timeout=120)
        at.session_state[state.ANNOTATOR] = "lena"
        at.run()
        at.switch_page("views/items.py")
        out["first_render"].append(timed(at.run))
        assert not at.exception, at.exception
        out["rerun_unchanged"].append(timed(at.run))
        out["status_flagged"].append(timed(at.selectbox(key="items_status").set_value("flagged").run))
        at.selectbox(key="items_status").set_value("any").run()
        out["search"].append(timed(at.text_input(key="items_search").set_value("question 4242 ").run))
        at.text_input(key="items_search").set_value("").run()
        if round_ == 0:  # the conflict filter's first use in this process (nothing cached)
            labels.items._CONFLICTS.clear()
            first_conflict = timed(at.selectbox(key="items_conflict").set_value("yes").run)
            at.selectbox(key="items_conflict").set_value("any").run()
        out["conflict"].append(timed(at.selectbox(key="items_conflict").set_value("yes").run))
        at.selectbox(key="items_conflict").set_value("any").run()
        at.selectbox(key="items_annotator").set_value("bob").run()
        out["annotator_status"].append(timed(at.selectbox(key="items_status").set_value("skipped").run))
        assert not at.exception, at.exception
    return {**{k: median(v) for k, v in out.items()}, "conflict_first_in_process": round(first_conflict, 1)}


def library(path: Path, rounds: int) -> dict:
    db = labeler.connect(path, migrate=False)
    labels.items._CONFLICTS.clear()
    first_conflict = timed(lambda: labels.list_items(db, conflict=True))  # consolidates every grade once
    cases = {"all": {}, "flagged": {"flagged": True}, "search": {"search": "question 4242 "},
             "conflict": {"conflict": True}, "annotator_status": {"annotator": "bob", "status": "skipped"},
             "date_range": {"since": "2026-03-01T00:00:00Z", "until": "2026-04-01T00:00:00Z"},
             "last_page": {"page": 2000}}
    out = {}
    for name, filters in cases.items():
        out[name] = median([timed(lambda f=filters: labels.list_items(db, page_size=50, **f)) for _ in range(rounds)])
    out["conflict_first_call"] = round(first_conflict, 1)
    out["total_conflict"] = labels.list_items(db, conflict=True).total
    return out


def raw_baseline(path: Path, rounds: int) -> float:
    conn = sqlite3.connect(path)

    def page() -> None:
        conn.execute("SELECT count(*) FROM queries").fetchone()
        conn.execute("SELECT pk, query_id, question, origin, occurrences, first_seen FROM queries ORDER BY pk "
                     "LIMIT 50").fetchall()

    return median([timed(page) for _ in range(rounds)])


def cli(path: Path, rounds: int) -> dict:
    def run(*args: str) -> float:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "labeler", "--db", str(path), *args], capture_output=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True)
        assert done.stdout
        return (time.perf_counter() - start) * 1000

    flagged = [run("items", "--flagged", "--json") for _ in range(rounds)]
    start_only = [run("--version") for _ in range(rounds)]
    return {"items_flagged_json_ms": median(flagged), "labeler_version_ms": median(start_only)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--db", type=Path, help="Keep the built database here (built only when missing).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or Path(tmp) / "items.db"
        start = time.perf_counter()
        if not path.exists():
            build(path, args.items)
        built = time.perf_counter() - start
        raw = raw_baseline(path, args.rounds * 4)
        lib, app, shell = library(path, args.rounds), apptest(path, args.rounds), cli(path, args.rounds)
        result = {"items": args.items, "annotators_per_item": 2, "build_s": round(built, 1),
                  "baseline_raw_sqlite_page_ms": raw, "library_ms": lib, "apptest_ms": app, "cli_ms": shell,
                  # ratios to the baselines of this run (tests/bench/check.py holds budgets on these)
                  "ratios": {
                      "library_all_to_raw_sqlite_page": round(lib["all"] / raw, 2),
                      "library_conflict_to_raw_sqlite_page": round(lib["conflict"] / raw, 2),
                      "apptest_filter_to_unchanged_rerun": round(app["status_flagged"] / app["rerun_unchanged"], 2),
                      "apptest_first_render_to_unchanged_rerun": round(app["first_render"] / app["rerun_unchanged"], 2),
                      "cli_items_to_labeler_version": round(shell["items_flagged_json_ms"]
                                                            / shell["labeler_version_ms"], 2)}}
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
