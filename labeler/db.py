"""The SQLite store: opening a database (its schema migrations live in ``labeler.schema``), taking
the write lock, settings, and the small query helpers.

This is the only module that writes SQL by hand (besides the bulk loader in ``ingest``, which
talks to the staging tables it owns). Every connection runs in WAL mode with foreign keys on and a
busy timeout, may be used from Streamlit's threads, and starts transactions explicitly with
``BEGIN IMMEDIATE`` so that read-then-write sequences never fail with "database is locked".

Queries and documents carry an integer surrogate key (``pk``) next to their public string id;
every other table references those integers, so metrics can join and rank on integers.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: no turnstile (see Turnstile)
    fcntl = None  # type: ignore[assignment]


def _import_sqlite_utils() -> None:
    """Import sqlite-utils without pandas when nothing imported pandas yet: sqlite-utils imports it
    only to map ``pandas.Timestamp`` values when it creates tables from Python values, which
    labeler never does, and the import is a third of every CLI start (and makes the ingest's
    parsing process slower to fork). Code that needs pandas imports it normally afterwards."""
    if "pandas" in sys.modules or "sqlite_utils" in sys.modules or threading.active_count() > 1:
        return  # (with other threads running, one of them could be importing pandas right now)
    sys.modules["pandas"] = None  # type: ignore[assignment]  # `import pandas` raises ImportError
    try:
        import sqlite_utils  # noqa: F401
    finally:
        del sys.modules["pandas"]


_import_sqlite_utils()

import sqlite_utils  # noqa: E402

from .errors import DatabaseBusyError, DatabaseError  # noqa: E402
from .schema import migrations  # noqa: E402

BUSY_TIMEOUT_MS = 5000
# how long a write waits in all for the write lock (SQLite's busy handler waits BUSY_TIMEOUT_MS per
# attempt; transaction() tries again until this much time has passed) before the user sees a message
BUSY_WAIT_S = 30.0
POLL_MAX_S = 0.002  # a waiting writer tries the lock at least this often (for its first 5 s)
TURN_SUFFIX = "-turn"  # the turnstile's lock file, next to the database (see Turnstile)
BULK_YIELD_MAX_S = 1.0  # longest a bulk writer lets waiting writers go first, per transaction



def now() -> str:
    """The current UTC time as ISO 8601 with microseconds (sortable as text)."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def connect(path: str | Path = "labeler.db", *, migrate: bool = True, create: bool = True) -> sqlite_utils.Database:
    """Open (creating if needed) the labeler database at ``path`` and bring its schema up to date.

    ``create=False`` opens only a database that exists (``DatabaseError`` otherwise): for readers,
    so that a mistyped path is an error instead of a new, empty database that reads as zeros.
    ``":memory:"`` gives a private in-memory database (handy in tests). The connection may be
    shared across threads (Streamlit runs each session in its own thread); each write goes
    through ``transaction()`` which takes the write lock up front.
    """
    path_str = str(path)
    if path_str != ":memory:":
        p = Path(path_str)
        if not create and not p.exists():
            raise DatabaseError(f"no database at {path_str}; run labeler ingest or labeler demo first")
        if not p.parent.exists():
            raise DatabaseError(
                f"cannot create database {path_str}: folder {p.parent} does not exist "
                "(create it first or pass another --db)"
            )
        if p.is_dir():
            raise DatabaseError(f"cannot open database {path_str}: it is a folder, not a file")
    try:
        conn = sqlite3.connect(path_str, check_same_thread=False, isolation_level=None,
                               timeout=BUSY_TIMEOUT_MS / 1000)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if path_str != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.DatabaseError as e:
        raise DatabaseError(f"cannot open database {path_str}: {e}") from None
    db = sqlite_utils.Database(conn)
    if migrate:
        try:
            pending = migrations.pending(db)
            if pending:
                with transaction(db):
                    migrations.ensure_migrations_table(db)
                    for m in migrations.pending(db):
                        m.fn(db)
                        migrations._record_applied(db, m.name)
        except sqlite3.DatabaseError as e:
            raise DatabaseError(f"cannot open database {path_str}: {e}") from None
    return db


class Abandoned(Exception):
    """The reads in an ``abandon_when`` block stopped because nobody wants their answer any more.
    Not a ``LabelerError``: nothing went wrong, and there is nothing to tell the user."""


ABANDON_CHECK_EVERY = 20_000  # SQLite virtual machine steps between two checks (well under 1 ms)


@contextlib.contextmanager
def abandon_when(db: sqlite_utils.Database, unwanted: Callable[[], bool]) -> Iterator[None]:
    """Reads in the block stop soon after ``unwanted()`` turns true, with ``Abandoned`` (SQLite's
    progress handler interrupts the statement running). For long reads only (a search of the
    whole corpus, say) whose caller has gone on: e.g. a page run that a newer run replaced, which
    would otherwise finish its search on a core the newer run needs. Never around writes."""
    conn = db.conn
    conn.set_progress_handler(lambda: 1 if unwanted() else 0, ABANDON_CHECK_EVERY)
    try:
        yield
    except sqlite3.OperationalError as e:
        if "interrupted" in str(e) and unwanted():
            raise Abandoned() from None
        raise
    finally:
        conn.set_progress_handler(None, 0)


def is_busy(error: BaseException) -> bool:
    """Whether ``error`` is SQLite's "database is locked" (SQLITE_BUSY), i.e. worth trying again."""
    if not isinstance(error, sqlite3.OperationalError):
        return False
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_BUSY or "database is locked" in str(error)


def begin(conn: sqlite3.Connection, *, wait: float | None = None) -> float:
    """``BEGIN IMMEDIATE``, tried again while the database is busy, for at most ``wait`` seconds
    (default ``BUSY_WAIT_S``); then ``DatabaseBusyError``, a one-line message. Returns how long
    it waited (seconds).

    The lock is polled every ``POLL_MAX_S`` at most rather than through SQLite's busy handler,
    whose sleeps grow to 100 ms: a writer that keeps taking the lock for short transactions (an
    ingest) leaves gaps of a few milliseconds, which a 100 ms sleeper keeps missing. On top of
    that, a connection marked as a bulk writer (``bulk_writes``) lets a waiting writer go first
    (``Turnstile``): the annotator's write waits for the ingest's current transaction at most,
    never for the next ones too."""
    wait = BUSY_WAIT_S if wait is None else wait
    start = time.monotonic()
    pause = 0.0005
    turn = Turnstile(conn, bulk=True) if Turnstile.is_bulk(conn) else None
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        if turn is not None:
            turn.yield_to_waiters()
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return time.monotonic() - start
            except sqlite3.OperationalError as e:
                waited = time.monotonic() - start
                if not is_busy(e):
                    raise
                if waited >= wait:
                    raise DatabaseBusyError(
                        f"the database is busy: another process kept it locked for {waited:.0f} s; "
                        "nothing was lost, try again") from None
                if turn is None:
                    turn = Turnstile(conn, bulk=False)
                if not turn.bulk:
                    turn.wait_in_line()
                time.sleep(min(pause, max(wait - waited, 0.0)))
                pause = min(pause * 1.5, POLL_MAX_S if waited < 5 else 0.02)
    finally:
        if turn is not None:
            turn.leave()
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")


class Turnstile:
    """Who writes next when a bulk writer (an ingest, a big queue sync) and others want the lock.

    SQLite's write lock has no queue: a bulk writer that commits and begins again at once keeps
    taking it ahead of an annotator's write that waits, sometimes for several of its transactions
    in a row. The turnstile is a lock file next to the database (``<db>-turn``, ``flock``, so it is
    let go when a process dies): a writer that finds the database busy holds it shared while it
    waits; a bulk writer takes it exclusively before each transaction, so it cannot start its next
    one while anyone waits, and goes ahead anyway after ``BULK_YIELD_MAX_S``. Not on Windows (no
    ``flock``) nor for in-memory databases: there the ingest's pause between transactions stays
    the only gap."""

    _bulk: dict[int, int] = {}  # id(connection) -> nesting depth of bulk_writes
    _lock = threading.Lock()

    def __init__(self, conn: sqlite3.Connection, *, bulk: bool):
        self.bulk = bulk
        self.fd: int | None = None
        self.held = False
        path = ""
        if fcntl is not None:
            row = conn.execute("PRAGMA database_list").fetchone()
            path = (row[2] if row else "") or ""  # "" in memory
        if path:
            try:
                self.fd = os.open(path + TURN_SUFFIX, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:  # a read-only folder: no turnstile, the pauses still leave gaps
                self.fd = None

    @classmethod
    def is_bulk(cls, conn: sqlite3.Connection) -> bool:
        return id(conn) in cls._bulk

    @classmethod
    def available(cls, conn: sqlite3.Connection) -> bool:
        """Whether writers to ``conn``'s database line up here (else a bulk writer's pauses between
        its transactions are the only way in for them)."""
        turn = cls(conn, bulk=True)
        try:
            return turn.fd is not None
        finally:
            turn.leave()

    def wait_in_line(self) -> None:
        """Hold the turnstile shared (once) while this writer waits for the lock."""
        if self.fd is None or self.held:
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a bulk writer holds it for microseconds
            self.held = True
        except OSError:
            pass  # at the next poll

    def yield_to_waiters(self) -> None:
        """Take the turnstile exclusively: wait while any writer waits, up to ``BULK_YIELD_MAX_S``."""
        if self.fd is None:
            return
        deadline = time.monotonic() + BULK_YIELD_MAX_S
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.held = True
                return
            except OSError:
                if time.monotonic() >= deadline:
                    return  # someone has waited long: go ahead anyway rather than stall
                time.sleep(0.0005)

    def leave(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # lets go of the flock
            self.fd = None
        self.held = False


@contextlib.contextmanager
def bulk_writes(db: sqlite_utils.Database) -> Iterator[None]:
    """Mark ``db``'s connection as a bulk writer for the block: each of its transactions waits
    for writers already waiting for the lock (see ``Turnstile``)."""
    key = id(db.conn)
    with Turnstile._lock:
        Turnstile._bulk[key] = Turnstile._bulk.get(key, 0) + 1
    try:
        yield
    finally:
        with Turnstile._lock:
            depth = Turnstile._bulk.pop(key) - 1
            if depth:
                Turnstile._bulk[key] = depth


@contextlib.contextmanager
def transaction(db: sqlite_utils.Database, *, check_foreign_keys: bool = True,
                wait: float | None = None) -> Iterator[sqlite_utils.Database]:
    """A write transaction taken with BEGIN IMMEDIATE (nested calls become savepoints).

    While another connection holds the write lock, taking it is tried again for up to ``wait``
    seconds (default ``BUSY_WAIT_S``), after which ``DatabaseBusyError`` says so in one line:
    a busy database is never a traceback. ``check_foreign_keys=False`` is for bulk loaders whose
    keys come from the database itself: per-row foreign key probes cost more than the inserts.
    """
    conn = db.conn
    if conn.in_transaction:
        with db.atomic():
            yield db
        return
    if not check_foreign_keys:
        conn.execute("PRAGMA foreign_keys = OFF")
    try:
        begin(conn, wait=wait)
        try:
            yield db
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        else:
            conn.execute("COMMIT")
    finally:
        if not check_foreign_keys:
            conn.execute("PRAGMA foreign_keys = ON")


def dumps(value: Any) -> str:
    """JSON as stored in meta columns: compact, keys sorted, unicode kept."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def loads(value: str | None) -> Any:
    return json.loads(value) if value else None


# --- settings -------------------------------------------------------------------------------

DEFAULT_SETTINGS: dict[str, Any] = {
    "grade_names": ["irrelevant", "related", "relevant", "highly relevant"],
    "grade_help": [
        "does not address the question",
        "on topic, but does not help answer the question",
        "partly answers the question",
        "answers the question",
    ],
    "threshold": 2,
    "overlap_fraction": 0.1,
    "overlap_annotators": 2,
    "queue_order": "random",
    "queue_seed": 7,
    "lease_minutes": 15,
    "pool_depth": 10,
    "show_sources": False,
    "guidelines": (
        "Grade every retrieved chunk for how well it helps answer the question.\n\n"
        "- Judge the chunk alone, not the production answer.\n"
        "- If the right chunk is missing, search the corpus and add it.\n"
        "- Write the answer you would expect a good assistant to give, using only the chunks."
    ),
}


def get_setting(db: sqlite_utils.Database, key: str) -> Any:
    row = db.execute("SELECT value FROM settings WHERE key = ?", [key]).fetchone()
    if row is None:
        return DEFAULT_SETTINGS.get(key)
    return json.loads(row[0])


def get_settings(db: sqlite_utils.Database) -> dict[str, Any]:
    values = dict(DEFAULT_SETTINGS)
    for key, value in db.execute("SELECT key, value FROM settings").fetchall():
        values[key] = json.loads(value)
    return values


def put_setting(conn: sqlite3.Connection, key: str, value: Any) -> None:
    """Store one project setting as JSON, inside the caller's transaction. No permission check: a
    change made for a person goes through :func:`labeler.accounts.settings.set_setting`."""
    conn.execute(
        "INSERT INTO settings (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, dumps(value)],
    )


# --- stats ----------------------------------------------------------------------------------

def stats(db: sqlite_utils.Database) -> dict[str, Any]:
    """Counts of what the database holds: documents, queries by origin, retrievals, labels (an
    ingest still being written is not counted until it commits)."""
    one = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
    # the visibility test costs a subquery per row (half a second on 2M retrievals) and is true of
    # every row while no ingest is staging, the usual case: then it is left out
    staging = db.execute("SELECT 1 FROM ingests WHERE state = 'staging' LIMIT 1").fetchone() is not None
    q, d, r = (visible(alias) if staging else "1" for alias in ("q", "d", "r"))
    by_origin = {o: 0 for o in ("log", "synthetic", "import")}
    for origin, n in db.execute(f"SELECT origin, count(*) FROM queries q WHERE {q} GROUP BY origin"):
        by_origin[origin] = n
    labeled = one("SELECT count(DISTINCT query_pk) FROM query_labels WHERE status = 'submitted'")
    total_queries = sum(by_origin.values())
    return {
        "documents": one(f"SELECT count(*) FROM documents d WHERE {d}"),
        "documents_without_text": one(f"SELECT count(*) FROM documents d WHERE text IS NULL AND {d}"),
        "queries": total_queries,
        "queries_by_origin": by_origin,
        "occurrences": one(f"SELECT coalesce(sum(occurrences), 0) FROM queries q WHERE {q}"),
        "retrievals": one(f"SELECT count(*) FROM retrievals r WHERE {r}"),
        # sorted here: ORDER BY makes SQLite build a b-tree of every row first (5x slower)
        "retrievers": sorted(row[0] for row in db.execute(f"SELECT DISTINCT retriever FROM retrievals r WHERE {r}")),
        "relevance_labels": one("SELECT count(*) FROM relevance_labels"),
        "labeled_queries": labeled,
        "unlabeled_queries": total_queries - labeled,
        "ingests": one("SELECT count(*) FROM ingests WHERE state = 'done' AND undone_at IS NULL"),
    }



def visible(alias: str) -> str:
    """SQL condition: the queries, documents or retrievals row aliased ``alias`` is visible, i.e.
    not part of an ingest that is still being written (its rows appear together when it commits)."""
    return f"coalesce({alias}.ingest_id, 0) NOT IN (SELECT id FROM ingests WHERE state = 'staging')"


INDEX_CHUNK = 1000  # documents per index_pending step (about 0.1 s for 100-word chunks here)


def index_pending(conn: sqlite3.Connection, limit: int = INDEX_CHUNK) -> bool:
    """Bring up to ``limit`` changed documents into the search index (the caller holds the write
    lock, in a short transaction); True when more are waiting."""
    last = conn.execute("SELECT max(pk) FROM (SELECT pk FROM documents_fts_pending ORDER BY pk LIMIT ?)",
                        [limit]).fetchone()[0]
    if last is None:
        return False
    conn.execute("INSERT INTO documents_fts (documents_fts, rowid, title, text) SELECT 'delete', pk, old_title, "
                 "old_text FROM documents_fts_pending WHERE pk <= ? AND had_old ORDER BY pk", [last])
    conn.execute("INSERT INTO documents_fts (rowid, title, text) SELECT d.pk, d.title, d.text FROM "
                 "documents_fts_pending p JOIN documents d ON d.pk = p.pk WHERE p.pk <= ? AND d.text IS NOT NULL "
                 "ORDER BY p.pk", [last])
    conn.execute("DELETE FROM documents_fts_pending WHERE pk <= ?", [last])
    return conn.execute("SELECT 1 FROM documents_fts_pending LIMIT 1").fetchone() is not None
