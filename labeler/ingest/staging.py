"""An ingest's life in the database, so that it never blocks other writers for long.

1. **Claim**: one ingest at a time. The ingest inserts its ``ingests`` row in state ``staging``
   with its owner (``labeler.owners``). An ingest that finds another one staging waits for it;
   one whose owner is gone (killed) is cleaned up first (``discard``), and changes left over by an
   ingest killed after its final commit are finished (``roll_forward``).
2. **Stage**: rows are written in short transactions (``Staging.write``), each timed; the caller
   sizes its batches so that a transaction holds the write lock for about ``LOCK_TARGET_S``.
   Every row carries the ingest's id and is hidden from readers (``db.visible``) while the ingest
   is staging. Changes to rows that were already visible wait in ``ingest_occurrences`` and
   ``ingest_texts``.
3. **Publish**: one short transaction sets the state to ``done`` (every staged row appears at
   once) and applies the waiting changes, in further short transactions when there are many;
   then submitted queries whose pool the ingest grew go back to their annotators
   (``labels.pool.requeue_after_ingest``, read without a lock, written in short transactions).
4. **Discard**: on an error (a strict-mode problem, a crash in this process) the staged rows are
   deleted, again in short transactions, and the ``ingests`` row goes: the database is as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import sqlite_utils

from .. import db as store
from .. import owners
from ..errors import IngestError
from ..labels.pool import requeue_after_ingest

LOCK_TARGET_S = 0.05  # aim of one write transaction's lock hold; batches adapt to it (an annotator waits one at most)
WAIT_FOR_INGEST_S = 15 * 60.0  # how long an ingest waits for another one to finish
CHECKPOINT_EVERY_S = 0.5  # checkpoint the WAL after this much write time (the connection's own are off)
CHUNK = 5000  # rows per clean-up or apply transaction (each a few ms)
KEY_RUN = 32_000  # staged queries whose question keys go into query_keys in one sorted run
LOCK_LOG_ENV = "LABELER_LOCK_LOG"  # a file to append each ingest's lock holds to (benchmarks)

mine: set[int] = set()  # ingests this process is running (its staging rows are not orphans)
mine_lock = threading.Lock()


@dataclass
class Staging:
    """A claimed ingest: its id and the lock hold of every write transaction so far."""

    db: sqlite_utils.Database
    id: int
    kind: str
    holds: list[float] = field(default_factory=list)
    unchecked: float = 0.0  # seconds of writes since the last checkpoint
    checkpoints: Checkpointer | None = None  # started by the first checkpoint the ingest asks for
    gaps: bool | None = None  # pause after each transaction: only where writers cannot line up (Turnstile)
    keyed_from: int = 0  # the first query pk that may be this ingest's and have no query_keys row yet
    keys_unchecked: bool = False  # foreign keys are off on the connection (``write``)
    in_run: bool = False  # inside ``run``: foreign keys stay off between transactions

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite_utils.Database]:
        """One short write transaction of this ingest; its lock hold is recorded. Foreign keys are
        not checked: the keys come from the database itself."""
        conn = self.db.conn
        if not self.keys_unchecked:
            conn.execute("PRAGMA foreign_keys = OFF")
            self.keys_unchecked = True
        try:
            store.begin(conn)
            start = time.perf_counter()
            try:
                yield self.db
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            self.holds.append(time.perf_counter() - start)
        finally:
            if not self.in_run:
                self.check_keys()
        self.unchecked += self.holds[-1]
        if self.unchecked > CHECKPOINT_EVERY_S:
            # copy the WAL into the database now, outside the lock (a checkpoint never blocks
            # writers), rather than leaving a big one to the next annotator's commit; in a thread
            # of its own, where the file has one (half a checkpoint's time is the disk's)
            if self.checkpoints is None:
                self.checkpoints = Checkpointer(self.db)
            self.checkpoints.request()
            self.unchecked = 0.0
        # without the turnstile (Windows, a read-only folder), a gap before this ingest's next
        # transaction, longer than the interval at which waiting writers poll the lock (db.begin),
        # so that they get in between; with it, a waiting writer holds the turnstile and the next
        # transaction waits for it anyway (the gaps were 2 ms a transaction: 2 s of a 1M-record ingest)
        if self.gaps is None:
            self.gaps = not store.Turnstile.available(conn)
        if self.gaps:
            time.sleep(store.POLL_MAX_S)

    def check_keys(self) -> None:
        """Foreign keys checked again on the connection (after ``write``)."""
        if self.keys_unchecked:
            self.db.conn.execute("PRAGMA foreign_keys = ON")
            self.keys_unchecked = False

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        """A run of ``write`` transactions with no other writes on the connection between them:
        foreign keys stay off from the first to the end of the block. Setting the pragma makes
        SQLite expire every statement the connection has prepared, so switching it off and on
        around each transaction compiled the ingest's many-row inserts afresh in every one
        (100k records: the writer used 5.3-5.7 s of CPU that way, 3.7-4.5 s this way)."""
        self.in_run = True
        try:
            yield
        finally:
            self.in_run = False
            self.check_keys()

    def key_run(self, upto: int) -> None:
        """``key_queries(upto)`` once ``KEY_RUN`` queries wait for their keys."""
        if upto - self.keyed_from >= KEY_RUN:
            self.key_queries(upto)

    def key_queries(self, upto: int | None = None) -> None:
        """Add the question keys of this ingest's staged queries with pks from ``keyed_from`` up to
        ``upto`` (None: all) to ``query_keys``, sorted, in transactions of up to ``KEY_RUN`` rows.
        The keys are random: inserted with their rows, each short transaction touched most of
        the key pages and wrote them again; a sorted run touches each page once. The ingest
        calls this every ``KEY_RUN`` queries and ``publish`` for the rest, before they become
        visible (until then nothing looks them up: they are hidden)."""
        end = upto if upto is not None else self.db.execute(
            "SELECT coalesce(max(pk), 0) + 1 FROM queries").fetchone()[0]
        while self.keyed_from < end:
            stop = min(end, self.keyed_from + KEY_RUN)
            with self.write():
                self.db.execute(
                    "INSERT OR IGNORE INTO query_keys (norm_key, query_pk) SELECT norm_key, pk FROM queries "
                    "WHERE pk >= ? AND pk < ? AND ingest_id = ? AND norm_key IS NOT NULL ORDER BY norm_key, pk",
                    [self.keyed_from, stop, self.id])
            self.keyed_from = stop

    def log_holds(self) -> None:
        path = os.environ.get(LOCK_LOG_ENV)
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"ingest": self.id, "kind": self.kind, "holds": self.holds}) + "\n")


class Checkpointer:
    """Checkpoints the WAL (``PASSIVE``: it never waits for a reader or a writer) on a connection
    of its own, in a thread of its own, so the ingest writes on while the checkpoint waits for
    the disk: half of its time at 100k records is fsync. A request made while one runs is done
    once it ends. An in-memory database is checkpointed in place (it has no WAL: a no-op)."""

    def __init__(self, db: sqlite_utils.Database):
        self.db = db
        self.path = next((file for _, name, file in db.execute("PRAGMA database_list") if name == "main"), "")
        self.wanted = threading.Event()
        self.stopping = False
        self.thread: threading.Thread | None = None

    def request(self) -> None:
        if not self.path:
            self.db.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            return
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="labeler-checkpoint", daemon=True)
            self.thread.start()
        self.wanted.set()

    def _run(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            while True:
                self.wanted.wait()
                self.wanted.clear()
                if self.stopping:
                    return
                with contextlib.suppress(sqlite3.Error):  # a checkpoint left undone: the next one does it
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            conn.close()

    def close(self) -> None:
        """End the thread (after the checkpoint it is in, if any)."""
        if self.thread is not None:
            self.stopping = True
            self.wanted.set()
            self.thread.join()
            self.thread = None


def claim(db: sqlite_utils.Database, kind: str, shown: str, fmt: str) -> Staging:
    """Start an ingest: wait for one that is running, clean up after a killed one, then insert
    this one's ``ingests`` row in state ``staging``."""
    deadline = time.monotonic() + WAIT_FOR_INGEST_S
    while True:
        roll_forward(db)
        with store.transaction(db):
            staging = db.execute("SELECT id, path, owner, created_at, undone_at FROM ingests "
                                 "WHERE state = 'staging'").fetchall()
            # an undo that was interrupted (``undoing``: undone_at set) is never discarded: its rows
            # stay hidden, and this ingest need not wait, until `labeler ingest undo` is run again
            staging = [r for r in staging if r[4] is None or not _orphan(r[0], r[2])]
            orphans = [r[0] for r in staging if r[4] is None and _orphan(r[0], r[2])]
            if not staging:
                now = store.now()
                ingest_id = db.execute(
                    "INSERT INTO ingests (kind, path, sha256, format, counts, created_at, state, owner, first_query_pk) "
                    "VALUES (?, ?, '', ?, '{}', ?, 'staging', ?, (SELECT coalesce(max(pk), 0) + 1 FROM queries))",
                    [kind, shown, fmt, now, owners.current()]).lastrowid
                with mine_lock:
                    mine.add(ingest_id)
                first = db.execute("SELECT first_query_pk FROM ingests WHERE id = ?", [ingest_id]).fetchone()[0]
                return Staging(db, ingest_id, kind, keyed_from=first)
        for ingest_id in orphans:
            discard(db, ingest_id)
        if len(orphans) < len(staging):
            if time.monotonic() > deadline:
                other = next(r for r in staging if r[0] not in orphans)
                raise IngestError(f"another ingest ({other[1]}, started {other[3][:19]}) is still running; "
                                  "try again when it has finished")
            time.sleep(0.2)


def _orphan(ingest_id: int, owner: str | None) -> bool:
    """A staging ingest nobody is running: its process is gone, or it is this process's and not
    among the ingests this process runs (an earlier clean-up that could not finish)."""
    if not owners.alive(owner):
        return True
    with mine_lock:
        return owners.is_me(owner) and ingest_id not in mine


def release(staging: Staging) -> None:
    staging.check_keys()
    if staging.checkpoints is not None:
        staging.checkpoints.close()
    with mine_lock:
        mine.discard(staging.id)


def publish(staging: Staging, sha256: str, counts: dict) -> None:
    """The final commit: the staged rows become visible together, with the ingest's counts; then
    the changes to rows that were already visible are applied (in short transactions)."""
    db = staging.db
    with staging.run():
        staging.key_queries()
        with staging.write():
            db.execute("UPDATE ingests SET state = 'done', sha256 = ?, counts = ?, finished_at = ? WHERE id = ?",
                       [sha256, store.dumps(counts), store.now(), staging.id])
            more = _apply(db, staging.id)
        while more:
            with staging.write():
                more = _apply(db, staging.id)
        index_search(db, staging.write)
        # queries whose pool grew go back to the annotators who submitted them (short writes too)
        requeue_after_ingest(db, staging.id, write=staging.write)


INDEX_TARGET_S = 0.05  # the lock hold aimed at by each step of index_search


def index_search(db: sqlite_utils.Database, write: Callable[[], contextlib.AbstractContextManager] | None = None) -> None:
    """Bring the documents this ingest (or any writer) changed into the search index, in short
    transactions (``db.index_pending``). The first step takes ``INDEX_CHUNK`` documents; the next
    as many as fill ``INDEX_TARGET_S`` at the pace measured (at most four times more each step):
    short chunks go in thousands at a time, and each step makes FTS5 a segment to merge later
    (50k chunks of 190 characters: 0.38-0.47 s in steps of 1,000, 0.29-0.35 s in steps of 5,000-20,000)."""
    limit = store.INDEX_CHUNK
    more = True
    while more:
        start = time.perf_counter()
        with (write or (lambda: store.transaction(db)))():
            more = store.index_pending(db.conn, limit)
        took = max(time.perf_counter() - start, 1e-3)
        limit = max(100, min(4 * limit, int(limit * INDEX_TARGET_S / took)))


def _apply(db: sqlite_utils.Database, ingest_id: int) -> bool:
    """Apply up to CHUNK waiting changes of a committed ingest (caller holds the lock); True when
    some remain."""
    conn = db.conn
    pks = [r[0] for r in conn.execute("SELECT query_pk FROM ingest_occurrences WHERE ingest_id = ? "
                                      "ORDER BY query_pk LIMIT ?", [ingest_id, CHUNK])]
    if pks:
        last = pks[-1]
        conn.execute(
            "UPDATE queries SET occurrences = queries.occurrences + o.occurrences, "
            "first_seen = CASE WHEN queries.first_seen IS NULL OR o.first_seen < queries.first_seen "
            "THEN o.first_seen ELSE queries.first_seen END, "
            "last_seen = CASE WHEN queries.last_seen IS NULL OR o.last_seen > queries.last_seen "
            "THEN o.last_seen ELSE queries.last_seen END, answer = coalesce(queries.answer, o.answer) "
            "FROM ingest_occurrences o WHERE o.ingest_id = ? AND o.query_pk <= ? AND queries.pk = o.query_pk",
            [ingest_id, last])
        conn.execute("DELETE FROM ingest_occurrences WHERE ingest_id = ? AND query_pk <= ?", [ingest_id, last])
    room = CHUNK - len(pks)
    docs = [r[0] for r in conn.execute("SELECT doc_pk FROM ingest_texts WHERE ingest_id = ? ORDER BY doc_pk "
                                       "LIMIT ?", [ingest_id, room])] if room > 0 else []
    if docs:
        last = docs[-1]
        conn.execute(
            "UPDATE documents SET text = t.text, title = coalesce(documents.title, t.title) "
            "FROM ingest_texts t WHERE t.ingest_id = ? AND t.doc_pk <= ? AND documents.pk = t.doc_pk "
            "AND t.corpus = 0 AND documents.text IS NULL", [ingest_id, last])
        conn.execute(
            "UPDATE documents SET text = t.text, title = coalesce(t.title, documents.title), "
            "source = coalesce(t.source, documents.source), meta = coalesce(t.meta, documents.meta), in_corpus = 1 "
            "FROM ingest_texts t WHERE t.ingest_id = ? AND t.doc_pk <= ? AND documents.pk = t.doc_pk "
            "AND t.corpus = 1", [ingest_id, last])
        conn.execute("DELETE FROM ingest_texts WHERE ingest_id = ? AND doc_pk <= ?", [ingest_id, last])
    return len(pks) + len(docs) >= CHUNK


def roll_forward(db: sqlite_utils.Database) -> None:
    """Finish the waiting changes of ingests that committed but were killed before applying them."""
    pending = [r[0] for r in db.execute(
        "SELECT DISTINCT ingest_id FROM (SELECT ingest_id FROM ingest_occurrences UNION ALL "
        "SELECT ingest_id FROM ingest_texts) WHERE ingest_id IN (SELECT id FROM ingests WHERE state = 'done')")]
    for ingest_id in pending:
        more = True
        while more:
            with store.transaction(db):
                more = _apply(db, ingest_id)
        requeue_after_ingest(db, ingest_id)  # (idempotent) the step publish had not reached either
    index_search(db)  # a publish killed while indexing


def discard(db: sqlite_utils.Database, ingest_id: int) -> None:
    """Delete everything a failed or killed ingest staged, in short transactions, then its row.

    Rows someone started working with meanwhile are kept and made visible instead: a staged query
    that an import gave labels to (matched by its query id), and the documents such rows use."""
    conn = db.conn

    def chunks(sql: str, params: list) -> Iterator[list]:
        rows = conn.execute(sql, params).fetchall()
        for i in range(0, len(rows), CHUNK):
            yield rows[i:i + CHUNK]

    def each(select: str, delete: str) -> None:
        for part in chunks(select, [ingest_id]):
            with store.transaction(db, check_foreign_keys=False):
                conn.executemany(delete, [(*r, ingest_id) for r in part])

    with store.transaction(db, check_foreign_keys=False):
        kept = [r[0] for r in conn.execute(
            "SELECT pk FROM queries q WHERE ingest_id = ? AND (EXISTS (SELECT 1 FROM query_labels l "
            "WHERE l.query_pk = q.pk) OR EXISTS (SELECT 1 FROM relevance_labels l WHERE l.query_pk = q.pk))",
            [ingest_id])]
        for table, column in (("queries", "pk"), ("query_versions", "query_pk"), ("retrievals", "query_pk"),
                              ("log_lines", "query_pk")):
            conn.executemany(f"UPDATE {table} SET ingest_id = NULL WHERE {column} = ? AND ingest_id = ?",
                             [(pk, ingest_id) for pk in kept])
        conn.execute("DELETE FROM ingest_occurrences WHERE ingest_id = ?", [ingest_id])
        conn.execute("DELETE FROM ingest_texts WHERE ingest_id = ?", [ingest_id])
    each("SELECT line_key FROM log_lines WHERE ingest_id = ?",
         "DELETE FROM log_lines WHERE line_key = ? AND ingest_id = ?")
    each("SELECT query_pk, retriever FROM query_versions WHERE ingest_id = ?",
         "DELETE FROM retrievals WHERE query_pk = ? AND retriever = ? AND ingest_id = ?")
    each("SELECT query_pk, retriever FROM query_versions WHERE ingest_id = ?",
         "DELETE FROM query_versions WHERE query_pk = ? AND retriever = ? AND ingest_id = ?")
    each("SELECT pk FROM queries WHERE ingest_id = ?", "DELETE FROM queries WHERE pk = ? AND ingest_id = ?")
    staged_docs = conn.execute("SELECT min(pk) FROM documents WHERE ingest_id = ?", [ingest_id]).fetchone()[0]
    if staged_docs is not None:
        used = {r[0] for r in conn.execute(
            " UNION ".join(f"SELECT doc_pk FROM {t} WHERE doc_pk >= ?1" for t in
                           ("retrievals", "relevance_labels", "adjudications", "suggestions", "judge_labels")),
            [staged_docs])}
        for part in chunks("SELECT pk FROM documents WHERE ingest_id = ?", [ingest_id]):
            with store.transaction(db, check_foreign_keys=False):
                conn.executemany("UPDATE documents SET ingest_id = NULL WHERE pk = ?",
                                 [r for r in part if r[0] in used])
                conn.executemany("DELETE FROM documents WHERE pk = ? AND ingest_id = ?",
                                 [(r[0], ingest_id) for r in part if r[0] not in used])
    index_search(db)  # forget the deleted documents the index holds
    with store.transaction(db):
        conn.execute("DELETE FROM ingests WHERE id = ? AND state = 'staging'", [ingest_id])
    with mine_lock:
        mine.discard(ingest_id)
