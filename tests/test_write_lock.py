"""Who gets SQLite's write lock next: an annotator's write that waits goes before a bulk writer's
next transaction (``db.Turnstile``), whatever the bulk writer's gaps; nobody waits forever."""

from __future__ import annotations

import threading
import time

import labeler
from labeler import db as store


def _bulk_loop(path, stop: threading.Event, commits: list[int], hold_s: float, started: threading.Event) -> None:
    """Back-to-back transactions with no pause between them: the worst case for a waiting writer."""
    db = labeler.connect(path, migrate=False)
    with store.bulk_writes(db):
        while not stop.is_set():
            with store.transaction(db):
                db.execute("INSERT INTO settings (key, value) VALUES ('bulk', '0') "
                           "ON CONFLICT (key) DO UPDATE SET value = value + 1")
                started.set()
                time.sleep(hold_s)  # the lock is held; the GIL is not
            commits.append(1)
    db.conn.close()


def test_a_waiting_write_goes_before_the_bulk_writers_next_transaction(tmp_path):
    path = tmp_path / "lock.db"
    labeler.connect(path).conn.close()
    stop, started, commits = threading.Event(), threading.Event(), []
    bulk = threading.Thread(target=_bulk_loop, args=(path, stop, commits, 0.03, started))
    bulk.start()
    try:
        assert started.wait(10)
        annotator = labeler.connect(path, migrate=False)
        overtaken = []
        for _ in range(20):
            before = len(commits)
            with store.transaction(annotator):
                # the bulk transactions that committed while this write waited: the one that held
                # the lock when it asked, at most (without the turnstile: several in a row)
                overtaken.append(len(commits) - before)
                annotator.execute("INSERT INTO settings (key, value) VALUES ('mine', '0') "
                                  "ON CONFLICT (key) DO UPDATE SET value = value + 1")
            time.sleep(0.005)
        assert max(overtaken) <= 1, overtaken
        assert len(commits) >= 10  # the bulk writer kept going meanwhile
    finally:
        stop.set()
        bulk.join(30)
    assert not bulk.is_alive()


def test_a_bulk_writer_goes_ahead_when_someone_waits_too_long(tmp_path, monkeypatch):
    """A writer that waits behind a long transaction of a third connection holds the turnstile
    all along: the bulk writer lets it go first for BULK_YIELD_MAX_S, then queues for the lock as
    anyone does. Every writer gets in; none is refused."""
    monkeypatch.setattr(store, "BULK_YIELD_MAX_S", 0.2)
    path = tmp_path / "lock.db"
    labeler.connect(path).conn.close()
    long_writer = labeler.connect(path, migrate=False)
    store.begin(long_writer.conn)  # a lead's long write, say
    got: dict[str, float] = {}
    start = time.monotonic()

    def write(name: str, bulk: bool) -> None:
        db = labeler.connect(path, migrate=False)
        with store.bulk_writes(db) if bulk else _nothing(), store.transaction(db):
            got[name] = time.monotonic() - start

    waiter = threading.Thread(target=write, args=("annotator", False))
    waiter.start()
    time.sleep(0.1)  # the annotator is waiting, holding the turnstile
    bulk = threading.Thread(target=write, args=("ingest", True))
    bulk.start()
    time.sleep(0.6)  # past BULK_YIELD_MAX_S: the ingest now polls the lock like the annotator
    assert got == {}
    long_writer.conn.execute("COMMIT")
    waiter.join(10)
    bulk.join(10)
    assert set(got) == {"annotator", "ingest"}


def test_in_memory_databases_have_no_turnstile_file(tmp_path):
    db = labeler.connect(":memory:")
    with store.bulk_writes(db), store.transaction(db):
        db.execute("INSERT INTO settings (key, value) VALUES ('x', '1')")
    assert list(tmp_path.iterdir()) == []


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_an_ingest_pauses_between_its_transactions_only_where_writers_cannot_line_up(tmp_path, monkeypatch):
    """With the turnstile a waiting writer goes first anyway (above: no pause at all); without it
    (no flock: Windows), the ingest's pause after each transaction is the waiting writers' way in."""
    from labeler.ingest import staging

    pauses = []
    monkeypatch.setattr(staging.time, "sleep", pauses.append)
    for flock in (True, False):
        if not flock:
            monkeypatch.setattr(store, "fcntl", None)
        db = labeler.connect(tmp_path / f"{flock}.db")
        claimed = staging.claim(db, "logs", "a.jsonl", "jsonl")
        for _ in range(3):
            with claimed.write():
                db.execute("INSERT INTO settings (key, value) VALUES ('x', '1') "
                           "ON CONFLICT (key) DO UPDATE SET value = value + 1")
        staging.release(claimed)
        assert pauses == ([] if flock else [store.POLL_MAX_S] * 3)
