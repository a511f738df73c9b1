"""An ingest never blocks other writers for long and shows nothing before its final commit.

Staged rows are invisible to every reader (stats, queue, Label page, reports, judge candidates)
until the ingest commits; a strict error or a killed ingest leaves nothing visible and the next
ingest cleans up; a second connection never waits long for the write lock during an ingest; a
killed CLI ingest takes its parsing child with it; a busy database is retried, then one line.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import labeler
from labeler import db as store
from labeler import labels as L
from labeler.errors import DatabaseBusyError, IngestError
from labeler.ingest import staging

CLI = "import sys; from labeler.cli import cli; cli(sys.argv[1:])"


def make_log(path: Path, n: int, *, start: int = 0, seed: int = 1, chunks: int = 10) -> Path:
    """``n`` logged queries ``r{start}..`` with ``chunks`` chunks each from a pool of 20k ids."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(start, start + n):
            ids = rng.sample(range(20_000), chunks)
            f.write(json.dumps({"request_id": f"r{i}", "question": f"question number {i}?",
                                "answer": f"answer {i}", "timestamp": f"2026-11-{1 + i % 28:02d}T00:00:00Z",
                                "retrieved": [{"id": f"doc-{d}", "score": round(1 - j / 20, 3)}
                                              for j, d in enumerate(ids)]}) + "\n")
    return path


def cli_ingest(db_path: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CLI, "--db", str(db_path), "ingest", "logs", str(log), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def raw_count(db_path: Path, table: str) -> int:
    conn = sqlite3.connect(db_path, timeout=10)
    try:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0
    finally:
        conn.close()


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def visible_state(db) -> dict:
    stats = labeler.stats(db)
    return {k: stats[k] for k in ("queries", "documents", "retrievals", "retrievers", "occurrences", "ingests")}


def test_staged_rows_are_invisible_until_the_final_commit(tmp_path):
    db_path = tmp_path / "t.db"
    db = labeler.connect(db_path)
    first = make_log(tmp_path / "a.jsonl", 20, chunks=3)
    labeler.ingest_logs(db, first)
    line = {"question": "no id here", "retrieved": [{"id": "doc-1", "score": 1.0}]}
    labeler.ingest_logs(db, _write(tmp_path / "n.jsonl", [line]))
    pk = L.next_item(db, "ann")
    reader = labeler.connect(db_path)
    before = visible_state(db)
    before_queue = raw_count(db_path, "queue")
    # the second file: r0 again from another retriever, the line without id again at another time
    # (one more occurrence of a stored query), then enough new queries for several batches
    records = [{"request_id": "r0", "retriever": "bm25", "question": "question number 0?", "answer": "answer 0",
                "retrieved": [{"id": "doc-7", "score": 3.0}]},
               {**line, "timestamp": "2026-12-01"}]
    second = _write(tmp_path / "b.jsonl", records)
    with open(second, "a", encoding="utf-8") as f:
        f.write(make_log(tmp_path / "more.jsonl", 5000, start=100).read_text())
    seen: list[dict] = []

    def during(done: int, total: int) -> None:
        if done >= total:
            return
        assert raw_count(db_path, "queries") > before["queries"]  # rows were written, staged
        seen.append(visible_state(reader))
        assert L.sync_queue(reader).added == 0
        assert L.next_item(reader, "other") is not None  # an old item, never a staged one
        assert [c.doc_pk for c in L.get_item(reader, pk, "ann", retriever="bm25").chunks] == []
        assert "bm25" not in labeler.stats(reader)["retrievers"]

    result = labeler.ingest_logs(db, second, progress=during)
    assert seen and all(s == before for s in seen)
    assert (result.new, result.merged) == (5000, 2)
    after = visible_state(reader)
    assert after["queries"] == before["queries"] + 5000
    assert after["occurrences"] == before["occurrences"] + 5001
    assert after["ingests"] == before["ingests"] + 1 and "bm25" in after["retrievers"]
    assert len(L.get_item(reader, pk, "ann", retriever="bm25").chunks) in (0, 1)
    # the ingest added its queries to the queue in use (next_item above planned it)
    assert L.sync_queue(reader) == L.QueueSync()
    assert raw_count(db_path, "queue") == before_queue + 5000


def test_an_ingests_question_keys_go_in_sorted_runs_and_are_all_there_when_its_rows_appear(tmp_path, monkeypatch):
    """A log ingest's staged queries get their question keys (``query_keys``) in runs of KEY_RUN,
    not with each short transaction; every key is there when the rows become visible, and a
    lookup by text finds them."""
    from labeler.ingest.validate import NORM_MATCH, norm_params, question_columns

    monkeypatch.setattr(staging, "KEY_RUN", 3000)  # more than a batch (2,000): some batches leave keys waiting
    db_path = tmp_path / "t.db"
    db = labeler.connect(db_path)
    labeler.ingest_logs(db, make_log(tmp_path / "a.jsonl", 30))
    log = make_log(tmp_path / "b.jsonl", 5000, start=100)
    with open(log, "a", encoding="utf-8") as f:  # and records without an id
        f.write(json.dumps({"question": "  No ID  Here? ", "retrieved": [{"id": "doc-1", "score": 1.0}]}) + "\n")
    lags: list[tuple[int, int]] = []

    def during(done: int, total: int) -> None:
        if done < total:
            lags.append((raw_count(db_path, "queries") - 30, raw_count(db_path, "query_keys") - 30))

    assert labeler.ingest_logs(db, log, progress=during).new == 5001
    assert lags and all(0 <= staged - keyed for staged, keyed in lags)
    assert any(keyed > 0 for _, keyed in lags) and any(staged - keyed > 0 for staged, keyed in lags)
    # (the writer makes the question's columns of a record with an id; the parser those of one without)
    rows = db.execute("SELECT question, norm_question, norm_key FROM queries").fetchall()
    assert all((norm, key) == question_columns(q) for q, norm, key in rows)
    keys = set(db.execute("SELECT pk, norm_key FROM queries").fetchall())
    assert set(db.execute("SELECT query_pk, norm_key FROM query_keys").fetchall()) == keys and len(keys) == 5031
    found = db.execute(f"SELECT query_id FROM queries WHERE {NORM_MATCH}",
                       norm_params(["question number 4321?"])).fetchall()
    assert found == [("r4321",)]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_a_strict_error_after_many_staged_batches_leaves_the_database_as_it_was(tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "KEY_RUN", 1000)  # runs of question keys were written, then taken back
    db = labeler.connect(tmp_path / "t.db")
    labeler.ingest_logs(db, make_log(tmp_path / "a.jsonl", 50))
    before = list(db.conn.iterdump())
    log = make_log(tmp_path / "b.jsonl", 6000, start=1000)
    with open(log, "a", encoding="utf-8") as f:
        f.write('{"question": "", "retrieved": []}\n')
    with pytest.raises(IngestError, match=r"b.jsonl:6001: question: is empty"):
        labeler.ingest_logs(db, log)
    assert list(db.conn.iterdump()) == before


def test_a_killed_cli_ingest_leaves_nothing_visible_and_the_next_one_cleans_up(tmp_path):
    db_path = tmp_path / "t.db"
    db = labeler.connect(db_path)
    labeler.ingest_logs(db, make_log(tmp_path / "old.jsonl", 30))
    before = visible_state(db)
    log = make_log(tmp_path / "big.jsonl", 60_000, start=1000)  # 30 MB: parsed in a forked child
    proc = cli_ingest(db_path, log)
    wait_for(lambda: raw_count(db_path, "queries") > 30 + 5000, 120, "some batches to be staged")
    children = _children(proc.pid)  # the forked parser (none on a one-core machine)
    assert children or (os.cpu_count() or 1) == 1
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    wait_for(lambda: not any(Path(f"/proc/{c}").exists() and _state(c) != "Z" for c in children), 30,
             "the parsing child to exit with its parent")
    assert visible_state(labeler.connect(db_path)) == before  # staged rows exist but nothing shows
    assert raw_count(db_path, "queries") > 30
    L.sync_queue(db)
    assert db.execute("SELECT count(*) FROM queue").fetchone()[0] == 30

    result = labeler.ingest_logs(db, log)  # cleans up after the killed one, then ingests
    assert (result.new, result.unchanged) == (60_000, 0)
    assert raw_count(db_path, "queries") == 60_030
    assert db.execute("SELECT count(*) FROM ingests WHERE state = 'staging'").fetchone()[0] == 0
    assert visible_state(db)["ingests"] == before["ingests"] + 1
    assert db.execute("SELECT count(*) FROM retrievals").fetchone()[0] == 600_300


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out.extend(int(c) for c in text)
    return out


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat[stat.rindex(")") + 2]


def test_a_second_connection_never_waits_long_for_the_lock_during_an_ingest(tmp_path):
    db_path = tmp_path / "t.db"
    labeler.connect(db_path).close()
    log = make_log(tmp_path / "big.jsonl", 40_000)
    proc = cli_ingest(db_path, log)
    conn = store.connect(db_path).conn
    waits = []
    while proc.poll() is None:
        waits.append(store.begin(conn, wait=5.0))  # raises DatabaseBusyError after 5 s
        conn.execute("COMMIT")
        time.sleep(0.005)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert json.loads(out)["new"] == 40_000
    waits.sort()
    report = {"attempts": len(waits), "max_wait_s": round(waits[-1], 3),
              "p99_wait_s": round(waits[int(len(waits) * 0.99)], 3)}
    print("lock waits during a 40k ingest:", report)
    assert len(waits) > 50
    # never near the 5 s busy timeout, with a margin a loaded machine keeps (the figure itself,
    # about 0.1 s on a quiet machine, is bench_ingest.py's probe_max_wait_s)
    assert report["max_wait_s"] < 2.5, report


def test_a_busy_database_is_retried_then_reported_in_one_line(tmp_path):
    db_path = tmp_path / "t.db"
    db = labeler.connect(db_path)
    labeler.ingest_logs(db, make_log(tmp_path / "a.jsonl", 3, chunks=2))
    pk = L.next_item(db, "ann")
    doc = L.get_item(db, pk, "ann").chunks[0].doc_pk
    holder = store.connect(db_path)
    holder.conn.execute("BEGIN IMMEDIATE")
    released = threading.Event()

    def release() -> None:
        holder.conn.execute("COMMIT")
        released.set()

    threading.Timer(1.0, release).start()  # another writer holds the lock for 1 s
    start = time.monotonic()
    L.set_grade(db, pk, doc, "ann", 2)  # waits for the lock, then writes
    assert released.is_set() and time.monotonic() - start >= 0.9
    assert L.get_item(db, pk, "ann").chunks[0].grade == 2

    holder.conn.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(DatabaseBusyError, match=r"^the database is busy: .*try again$"):
            with store.transaction(db, wait=0.3):
                pass
    finally:
        holder.conn.execute("COMMIT")


def test_a_second_ingest_waits_for_the_first(tmp_path):
    db_path = tmp_path / "t.db"
    db = labeler.connect(db_path)
    proc = cli_ingest(db_path, make_log(tmp_path / "a.jsonl", 30_000))
    wait_for(lambda: raw_count(db_path, "queries") > 0, 60, "the first ingest to stage rows")
    result = labeler.ingest_logs(db, make_log(tmp_path / "b.jsonl", 100, start=50_000))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert result.new == 100 and json.loads(out)["new"] == 30_000
    assert labeler.stats(db)["queries"] == 30_100
    (first_done, second_started), = db.execute(
        "SELECT a.finished_at, b.created_at FROM ingests a, ingests b WHERE a.path LIKE '%a.jsonl' "
        "AND b.path LIKE '%b.jsonl'").fetchall()
    assert first_done <= second_started  # the second one began only when the first had committed


def test_an_orphaned_staging_row_of_this_process_is_cleaned_up(tmp_path):
    db = labeler.connect(tmp_path / "t.db")
    claimed = staging.claim(db, "logs", "x.jsonl", "jsonl")
    staging.release(claimed)  # as if its clean-up had failed
    result = labeler.ingest_logs(db, make_log(tmp_path / "a.jsonl", 10))
    assert result.new == 10
    assert db.execute("SELECT count(*) FROM ingests").fetchone()[0] == 1


def test_changes_left_by_an_ingest_killed_after_its_final_commit_are_finished_by_the_next(tmp_path):
    db = labeler.connect(tmp_path / "t.db")
    line = {"question": "asked again", "retrieved": [{"id": "d1"}], "timestamp": "2026-01-05"}
    labeler.ingest_logs(db, _write(tmp_path / "a.jsonl", [line]))
    pk = db.execute("SELECT pk FROM queries").fetchone()[0]
    # as a killed process leaves it: committed (state done), one more occurrence not yet applied
    claimed = staging.claim(db, "logs", "b.jsonl", "jsonl")
    with store.transaction(db):
        db.execute("INSERT INTO ingest_occurrences VALUES (?, ?, 2, '2026-01-01', '2026-01-09', NULL)",
                   [claimed.id, pk])
        db.execute("UPDATE ingests SET state = 'done' WHERE id = ?", [claimed.id])
    staging.release(claimed)
    labeler.ingest_logs(db, _write(tmp_path / "c.jsonl", [{"question": "other", "retrieved": [{"id": "d2"}]}]))
    assert db.execute("SELECT occurrences, first_seen, last_seen FROM queries WHERE pk = ?", [pk]).fetchone() == (
        3, "2026-01-01", "2026-01-09")
    assert db.execute("SELECT count(*) FROM ingest_occurrences").fetchone()[0] == 0


def test_checkpoints_run_beside_the_ingest_and_end_with_it(tmp_path, monkeypatch):
    """The WAL is checkpointed during an ingest by a thread on its own connection; the WAL does not
    keep every page of the ingest, and no thread outlives the ingest (a next ingest may fork)."""
    monkeypatch.setattr(staging, "CHECKPOINT_EVERY_S", 0.0)  # after every transaction
    started, sizes = [], []
    original = staging.Checkpointer.request
    db_path = tmp_path / "t.db"

    def request(self):
        original(self)
        started.append(self.thread)
        sizes.append(os.path.getsize(db_path))  # the database file itself, without its WAL

    monkeypatch.setattr(staging.Checkpointer, "request", request)
    db = labeler.connect(db_path)
    before = os.path.getsize(db_path)
    result = labeler.ingest_logs(db, make_log(tmp_path / "a.jsonl", 3000))
    assert result.new == 3000
    assert started and all(t is not None and t.name == "labeler-checkpoint" for t in started)
    assert not any(t.is_alive() for t in started)
    assert not [t for t in threading.enumerate() if t.name == "labeler-checkpoint"]
    # the pages went from the WAL into the database file while the ingest wrote (the connection's
    # own checkpoints are off until it ends)
    assert max(sizes) > before + 500_000, (before, sizes[-5:])


def test_an_in_memory_ingest_checkpoints_in_place(monkeypatch, tmp_path):
    monkeypatch.setattr(staging, "CHECKPOINT_EVERY_S", 0.0)
    db = labeler.connect(":memory:")
    assert labeler.ingest_logs(db, make_log(tmp_path / "a.jsonl", 500)).new == 500
    assert not [t for t in threading.enumerate() if t.name == "labeler-checkpoint"]


def test_while_the_parser_is_behind_the_file_is_hashed(tmp_path, monkeypatch):
    """A forked ingest fills its waits for the parsing process by hashing the file a block at a
    time; the stored hash is the file's, and the search index is not touched before the final
    commit (a strict error must leave the database exactly as it was: test_ingest)."""
    import hashlib

    from labeler.ingest import batches, logs

    path = make_log(tmp_path / "a.jsonl", 6000)
    steps = []

    class CountedHash(logs.FileHash):
        BLOCK = 1 << 14  # many steps, for a small file

        at_end = False

        def step(self):
            if not self.at_end:
                steps.append(self.done)
            return super().step()

        def hexdigest(self):
            self.at_end = True
            return super().hexdigest()

    redact, parent = batches.redact_batch, os.getpid()

    def redact_slowly(redactor, recs, stored=None):  # a parser slower than the writer, in the child only
        slow = {"question number 2500?", "question number 4500?"}.intersection(rec["question"] for rec in recs)
        if os.getpid() != parent and slow:
            time.sleep(0.3)
        return redact(redactor, recs, stored)

    monkeypatch.setattr(logs, "FileHash", CountedHash)
    monkeypatch.setattr(batches, "redact_batch", redact_slowly)
    db = labeler.connect(tmp_path / "t.db")
    assert labeler.ingest_logs(db, path, parallel=True).new == 6000
    assert len(steps) > path.stat().st_size // CountedHash.BLOCK // 2  # most of it while waiting, not at the end
    assert db.execute("SELECT sha256 FROM ingests").fetchone()[0] == hashlib.sha256(path.read_bytes()).hexdigest()


def _bytes_written() -> int:
    with open("/proc/self/io") as f:  # every write() of this process, its checkpoint thread's too
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="Linux reports a process's writes in /proc")
def test_an_ingest_writes_its_pages_a_few_times_not_once_a_statement(tmp_path, monkeypatch):
    """An ingest writes each page to the WAL once a transaction that changes it, and the
    checkpoint copies it once: a few times the database's size in all (40 transactions of 500
    rows here, each checkpointed), the question keys once a run of KEY_RUN queries (sorted, so
    each run writes each key page once). Statements of many rows with the default conflict handling
    kept every page they changed in a statement journal too, a temporary file: 18x the
    database's size here, 17x for a 100k-query ingest (the questions' keys and first-seen dates
    land all over their indexes)."""
    from labeler.ingest import logs

    # transactions of a fixed size, each checkpointed: the bytes written do not depend on the machine's speed
    monkeypatch.setattr(logs._Sizer, "take", lambda self, remaining: min(500, remaining))
    monkeypatch.setattr(staging, "CHECKPOINT_EVERY_S", 0.0)
    db_path = tmp_path / "t.db"
    db = labeler.connect(db_path)
    log = make_log(tmp_path / "a.jsonl", 20_000)
    before = _bytes_written()
    assert labeler.ingest_logs(db, log).new == 20_000
    written = _bytes_written() - before
    db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = os.path.getsize(db_path)
    # 4.5x; 5.2x with the question keys indexed with their rows (each transaction wrote most of the
    # key pages again); 18x with statement journals
    assert written < 4.8 * size, (written, size)


def _keys_trace(conn: sqlite3.Connection) -> list[tuple[bool, str]]:
    """Every statement the connection runs from now on, with whether foreign keys were on."""
    trace: list[tuple[bool, str]] = []
    state = {"on": conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1}

    def seen(sql: str) -> None:
        text = " ".join(sql.split()).upper()
        if text.startswith("PRAGMA FOREIGN_KEYS ="):
            state["on"] = text.endswith("ON")
        trace.append((state["on"], text))

    conn.set_trace_callback(seen)
    return trace


def test_foreign_keys_go_off_once_for_an_ingests_writes_and_are_on_for_everything_else(tmp_path, monkeypatch):
    """The staged writes skip the foreign key probes (their keys come from the database itself),
    but the setting is switched once for the run of transactions, not around each one: SQLite
    expires every prepared statement when it changes, and the many-row inserts were compiled
    afresh in every transaction. The final writes (the audit row) and every later write of the
    connection check foreign keys again, after a success as after a strict error."""
    from labeler.ingest import logs

    monkeypatch.setattr(logs._Sizer, "take", lambda self, remaining: min(500, remaining))
    db = labeler.connect(tmp_path / "t.db")
    trace = _keys_trace(db.conn)
    assert labeler.ingest_logs(db, make_log(tmp_path / "a.jsonl", 6000)).new == 6000
    commits = sum(text == "COMMIT" for _, text in trace)
    switches = [text for _, text in trace if text.startswith("PRAGMA FOREIGN_KEYS =")]
    assert commits >= 12 and len(switches) <= 4, (commits, switches)
    assert any(text.startswith("INSERT OR FAIL INTO RETRIEVALS") and not on for on, text in trace)
    assert all(on for on, text in trace if text.startswith("INSERT INTO AUDIT_EVENTS"))
    assert db.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1

    log = make_log(tmp_path / "b.jsonl", 3000, start=10_000)
    with open(log, "a", encoding="utf-8") as f:
        f.write('{"question": "", "retrieved": []}\n')
    with pytest.raises(IngestError, match="question: is empty"):
        labeler.ingest_logs(db, log)
    assert db.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"doc-{i}", "text": f"text {i}"}) + "\n" for i in range(3000)))
    labeler.ingest_corpus(db, corpus)
    assert db.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert all(on for on, text in trace if text.startswith("INSERT INTO AUDIT_EVENTS"))
