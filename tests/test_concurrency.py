"""Annotator processes labeling one database file at the same time, and a process killed mid-run.

Each worker process opens its own connection and loops next_item -> set_grade for every chunk ->
set_status submitted, appending what it did (after each call returned) to its own file with one
``write`` per line. Afterwards the files are the ground truth the database must contain.
``LABELER_CONCURRENCY_SECONDS`` sets how long the workers run (default 30).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path

from labeler import db as store
from labeler import labels as L
from tests.conftest import tiny_records

WORKERS = 8
SECONDS = float(os.environ.get("LABELER_CONCURRENCY_SECONDS", "30"))
SPAWN = multiprocessing.get_context("spawn")


def _grade_for(annotator: str, query_pk: int, doc_pk: int) -> int:
    return (query_pk * 7 + doc_pk * 3 + sum(map(ord, annotator))) % 4


def label_worker(db_path: str, annotator: str, out_path: str, seconds: float, ready=None,
                 ready_after: int = 0, start=None) -> None:
    """Label until the queue is empty or ``seconds`` pass; log every completed call to ``out_path``.

    ``start`` (a Barrier) lines the workers up so they all begin at once; ``ready`` (an Event) is
    set after ``ready_after`` grades were written."""
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def record(**fields) -> None:
        os.write(fd, (json.dumps(fields) + "\n").encode())

    written = 0
    try:
        db = store.connect(db_path)
        if start is not None:
            start.wait(60)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            pk = L.next_item(db, annotator)
            if pk is None:
                record(kind="empty")
                break
            record(kind="handed", pk=pk)
            for chunk in L.get_item(db, pk, annotator).chunks:
                grade = _grade_for(annotator, pk, chunk.doc_pk)
                L.set_grade(db, pk, chunk.doc_pk, annotator, grade)
                record(kind="grade", pk=pk, doc=chunk.doc_pk, grade=grade)
                written += 1
                if ready is not None and written == ready_after:
                    ready.set()
            L.set_status(db, pk, annotator, "submitted")
            record(kind="submitted", pk=pk)
    except Exception as e:  # the test asserts there are none; keep the message for the report
        record(kind="error", error=f"{type(e).__name__}: {e}")
    finally:
        os.close(fd)


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    lines = path.read_text().split("\n")
    return [json.loads(line) for line in lines[:-1]]  # the last piece is "" or a line cut by a kill


def _make_db(db_path: Path, ingest_tiny, n: int) -> None:
    db = store.connect(db_path)
    ingest_tiny(db, records=tiny_records(n, 3))
    store.set_setting(db, "overlap_fraction", 0.2)
    store.set_setting(db, "overlap_annotators", 3)
    L.sync_queue(db)
    db.close()


def _run_workers(db_path: Path, tmp_path: Path, seconds: float) -> dict[str, list[dict]]:
    names = [f"annotator{i}" for i in range(WORKERS)]
    outs = {name: tmp_path / f"{name}.jsonl" for name in names}
    start = SPAWN.Barrier(WORKERS)
    procs = [SPAWN.Process(target=label_worker,
                           args=(str(db_path), name, str(outs[name]), seconds, None, 0, start))
             for name in names]
    for p in procs:
        p.start()
    for p in procs:
        p.join(seconds + 120)
    assert [p.exitcode for p in procs] == [0] * WORKERS
    return {name: _read(path) for name, path in outs.items()}


def _check(db_path: Path, records: dict[str, list[dict]]) -> dict[int, set[str]]:
    """Assert the rules against what the workers reported; return who submitted each item."""
    errors = [r["error"] for rs in records.values() for r in rs if r["kind"] == "error"]
    assert not [e for e in errors if "locked" in e], errors
    assert errors == []
    db = store.connect(db_path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = {(q, d, a): g for q, d, a, g in db.execute(
        "SELECT query_pk, doc_pk, annotator, grade FROM relevance_labels")}
    submitted = {(q, a) for q, a in db.execute(
        "SELECT query_pk, annotator FROM query_labels WHERE status = 'submitted'")}
    needed = dict(db.execute("SELECT query_pk, needed FROM queue").fetchall())
    handed: dict[int, set[str]] = defaultdict(set)
    grades = 0
    for name, rs in records.items():
        mine = [r["pk"] for r in rs if r["kind"] == "handed"]
        assert len(mine) == len(set(mine)), f"{name} got an item twice"
        for r in rs:
            if r["kind"] == "handed":
                handed[r["pk"]].add(name)
            elif r["kind"] == "grade":
                grades += 1
                assert stored.get((r["pk"], r["doc"], name)) == r["grade"], f"lost label {r}"
            elif r["kind"] == "submitted":
                assert (r["pk"], name) in submitted, f"lost submit {r}"
    assert len(stored) == grades  # nothing stored that no worker reported
    assert db.execute("SELECT count(*) FROM label_events WHERE field = 'grade'").fetchone()[0] == grades
    # no item handed to, or submitted by, more annotators than its target
    assert all(len(who) <= needed[pk] for pk, who in handed.items())
    per_item: dict[int, set[str]] = defaultdict(set)
    for q, a in submitted:
        per_item[q].add(a)
    assert all(len(who) <= needed[q] for q, who in per_item.items())
    db.close()
    return {q: who for q, who in per_item.items()}


def test_eight_annotators_label_concurrently(db_path, tmp_path, ingest_tiny):
    # more items than 8 workers finish in SECONDS, so they contend for the whole duration
    _make_db(db_path, ingest_tiny, int(max(300, 500 * SECONDS)))
    per_item = _check(db_path, _run_workers(db_path, tmp_path, SECONDS))
    assert len({a for who in per_item.values() for a in who}) == WORKERS  # all really worked


def test_eight_annotators_drain_the_queue_exactly(db_path, tmp_path, ingest_tiny):
    _make_db(db_path, ingest_tiny, 300)
    records = _run_workers(db_path, tmp_path, 600)
    assert all(rs[-1]["kind"] == "empty" for rs in records.values())
    per_item = _check(db_path, records)
    db = store.connect(db_path)
    needed = dict(db.execute("SELECT query_pk, needed FROM queue").fetchall())
    assert {q: len(who) for q, who in per_item.items()} == needed  # each item got exactly its target
    assert Counter(needed.values()) == {1: 240, 3: 60}
    assert L.queue_counts(db)["open_slots"] == 0


def test_killed_annotator_loses_nothing(db_path, tmp_path, ingest_tiny):
    _make_db(db_path, ingest_tiny, 400)
    out = tmp_path / "killed.jsonl"
    ready = SPAWN.Event()
    proc = SPAWN.Process(target=label_worker, args=(str(db_path), "kim", str(out), 600, ready, 60))
    proc.start()
    assert ready.wait(120), "the worker never wrote 60 labels"
    os.kill(proc.pid, signal.SIGKILL)  # in the middle of labeling
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL

    records = _read(out)
    db = store.connect(db_path)  # reopen as after a crash
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    graded = [r for r in records if r["kind"] == "grade"]
    assert len(graded) >= 60
    for r in graded:
        row = db.execute("SELECT grade FROM relevance_labels WHERE query_pk = ? AND doc_pk = ? "
                         "AND annotator = 'kim'", [r["pk"], r["doc"]]).fetchone()
        assert row == (r["grade"],), f"lost label {r}"
    for r in records:
        if r["kind"] == "submitted":
            assert L.get_item(db, r["pk"], "kim").status == "submitted"
    last_pk = [r["pk"] for r in records if r["kind"] == "handed"][-1]
    state = db.execute("SELECT state FROM assignments WHERE query_pk = ? AND annotator = 'kim'",
                       [last_pk]).fetchone()[0]
    if state == "leased":
        # the annotator resumes the item they were on, with the grades they gave
        assert L.next_item(db, "kim") == last_pk
        item = {c.doc_pk: c.grade for c in L.get_item(db, last_pk, "kim").chunks}
        assert all(item[r["doc"]] == r["grade"] for r in graded if r["pk"] == last_pk)
