"""Label writes: grades, query-level fields, time spent and status, each saved at once with an audit event.

Every write runs in one short ``BEGIN IMMEDIATE`` transaction, renews the annotator's lease and
appends one ``label_events`` row per field whose value changed (who, when, old, new). Current
values live in ``relevance_labels`` / ``query_labels``; history is never deleted. Text an annotator
types is redacted like an ingest (``privacy.redact_typed``) while the setting ``redact`` is on.

Writing needs a slot: an annotator may always edit items they finished (history), renews a lease
they hold, and otherwise takes a free slot; when the item already has all the annotators it
needs (e.g. their lease expired and it went to someone else) the write raises ``ItemTakenError``
and nothing is written. Time (``add_seconds``) and skipping never need a slot.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from .. import db as store
from .. import privacy
from ..accounts.manage import ensure_annotator
from ..core.names import STATUSES, check_name
from ..core.times import When, stamp
from ..errors import LabelError
from .common import check_doc, check_grade, event, query_row
from .pool import pool_depth, query_pool
from .queue import claim, recount

QUERY_FIELDS = ("expected_answer", "answer_faithful", "answer_relevant", "notes", "flag_reason")
JUDGMENT_FIELDS = ("answer_faithful", "answer_relevant")
JUDGMENTS = ("yes", "partly", "no")


@dataclass
class LabelWrite:
    conn: sqlite3.Connection
    annotator: str
    at: str
    settings: dict[str, Any]


@contextlib.contextmanager
def label_write(db: sqlite_utils.Database, query_pk: int, annotator: str, now: When,
             *, strict: bool = True) -> Iterator[LabelWrite]:
    annotator = check_name(annotator)
    at = stamp(now)
    settings = store.get_settings(db)
    with store.transaction(db):
        conn = db.conn
        query_row(conn, query_pk)
        ensure_annotator(conn, annotator, at)
        claim(conn, query_pk, annotator, at, settings, strict=strict)
        conn.execute("INSERT INTO query_labels (query_pk, annotator, created_at, updated_at) "
                     "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING", [query_pk, annotator, at, at])
        yield LabelWrite(conn, annotator, at, settings)
        conn.execute("UPDATE query_labels SET updated_at = ? WHERE query_pk = ? AND annotator = ?",
                     [at, query_pk, annotator])


def _grade(w: LabelWrite, query_pk: int, doc_pk: int) -> int | None:
    row = w.conn.execute("SELECT grade FROM relevance_labels WHERE query_pk = ? AND doc_pk = ? "
                         "AND annotator = ?", [query_pk, doc_pk, w.annotator]).fetchone()
    return row[0] if row else None


def put_grade(w: LabelWrite, query_pk: int, doc_pk: int, grade: int) -> int | None:
    old = _grade(w, query_pk, doc_pk)
    if old != grade:
        w.conn.execute(
            "INSERT INTO relevance_labels (query_pk, doc_pk, annotator, grade, origin, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, 'human', ?, ?) ON CONFLICT (query_pk, doc_pk, annotator) DO UPDATE SET "
            "grade = excluded.grade, origin = 'human', updated_at = excluded.updated_at",
            [query_pk, doc_pk, w.annotator, grade, w.at, w.at])
        event(w.conn, w.at, w.annotator, query_pk, doc_pk, "grade", old, grade)
    return old


def set_grade(db: sqlite_utils.Database, query_pk: int, doc_pk: int, annotator: str, grade: int,
              *, now: When = None) -> int | None:
    """Store ``annotator``'s grade (0..max of ``grade_names``) of a chunk for a query; return the old one.

    The chunk need not be one the retriever returned: grading any corpus chunk is how a relevant
    chunk the retriever missed is added to the item.
    """
    with label_write(db, query_pk, annotator, now) as w:
        check_doc(w.conn, doc_pk)
        return put_grade(w, query_pk, doc_pk, check_grade(grade, w.settings))


def clear_grade(db: sqlite_utils.Database, query_pk: int, doc_pk: int, annotator: str,
                *, now: When = None) -> int | None:
    """Remove ``annotator``'s grade of the chunk (the event keeps the old value); return it."""
    with label_write(db, query_pk, annotator, now) as w:
        return drop_grade(w, query_pk, doc_pk)


def drop_grade(w: LabelWrite, query_pk: int, doc_pk: int) -> int | None:
    old = _grade(w, query_pk, doc_pk)
    if old is not None:
        w.conn.execute("DELETE FROM relevance_labels WHERE query_pk = ? AND doc_pk = ? AND annotator = ?",
                       [query_pk, doc_pk, w.annotator])
        event(w.conn, w.at, w.annotator, query_pk, doc_pk, "grade", old, None)
    return old


def set_rest_zero(db: sqlite_utils.Database, query_pk: int, annotator: str, retriever: str | None = None,
                  *, now: When = None) -> int:
    """Grade 0 every chunk of the item's pool (what ``get_item`` shows: every retriever's top
    ``pool_depth``) that ``annotator`` has not graded; return how many. ``retriever``: only that
    retriever's chunks."""
    with label_write(db, query_pk, annotator, now) as w:
        ungraded = pool_ungraded(w.conn, query_pk, w.annotator, w.settings, retriever=retriever)
        for _, doc_pk in ungraded:
            put_grade(w, query_pk, doc_pk, 0)
        return len(ungraded)


def pool_ungraded(conn: sqlite3.Connection, query_pk: int, annotator: str, settings: dict[str, Any],
                  *, retriever: str | None = None) -> list[tuple[int, int]]:
    """(position, doc_pk) of the pool chunks ``annotator`` has not graded, in pool order."""
    query_id = query_row(conn, query_pk)[1]
    chunks = query_pool(conn, query_pk, query_id, pool_depth(settings), retriever=retriever)
    graded = {r[0] for r in conn.execute("SELECT doc_pk FROM relevance_labels WHERE query_pk = ? "
                                         "AND annotator = ?", [query_pk, annotator])}
    return [(i, c.doc_pk) for i, c in enumerate(chunks, 1) if c.doc_pk not in graded]


def _field_value(name: str, value: Any) -> str | None:
    if name not in QUERY_FIELDS:
        raise LabelError(f"unknown query field {name!r}; use one of: {', '.join(QUERY_FIELDS)}")
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise LabelError(f"{name} must be text, got {type(value).__name__}")
    if name in JUDGMENT_FIELDS and value not in JUDGMENTS:
        raise LabelError(f"{name}={value!r} is not allowed; use one of: {', '.join(JUDGMENTS)} (or None)")
    return value


def _put_fields(w: LabelWrite, query_pk: int, values: dict[str, str | None]) -> list[str]:
    cols = ", ".join(values)
    old = w.conn.execute(f"SELECT {cols} FROM query_labels WHERE query_pk = ? AND annotator = ?",
                         [query_pk, w.annotator]).fetchone()
    changed = [name for name, before in zip(values, old, strict=True) if before != values[name]]
    for name, before in zip(values, old, strict=True):
        if name in changed:
            # column names come from the fixed QUERY_FIELDS/status columns, never from input
            w.conn.execute(f"UPDATE query_labels SET {name} = ? WHERE query_pk = ? AND annotator = ?",
                           [values[name], query_pk, w.annotator])
            event(w.conn, w.at, w.annotator, query_pk, None, name, before, values[name])
    return changed


def set_query_fields(db: sqlite_utils.Database, query_pk: int, annotator: str, *, now: When = None,
                     **fields: str | None) -> list[str]:
    """Set query-level fields of ``annotator``'s label; return the names that changed.

    Fields: ``expected_answer``, ``notes``, ``flag_reason`` (text; empty text means None) and the
    answer judgments ``answer_faithful`` / ``answer_relevant`` (``"yes"``, ``"partly"``, ``"no"`` or
    None).
    """
    values = privacy.redact_typed(db, {name: _field_value(name, value) for name, value in fields.items()})
    with label_write(db, query_pk, annotator, now) as w:
        return _put_fields(w, query_pk, values) if values else []


def add_seconds(db: sqlite_utils.Database, query_pk: int, annotator: str, seconds: float,
                *, now: When = None) -> float:
    """Add time spent on the item (e.g. since the last write); return the total for the item."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds < 86400:
        raise LabelError(f"seconds={seconds!r} must be a number from 0 to 86400")
    with label_write(db, query_pk, annotator, now, strict=False) as w:
        old = w.conn.execute("SELECT seconds FROM query_labels WHERE query_pk = ? AND annotator = ?",
                             [query_pk, w.annotator]).fetchone()[0]
        if seconds:
            w.conn.execute("UPDATE query_labels SET seconds = ? WHERE query_pk = ? AND annotator = ?",
                           [old + seconds, query_pk, w.annotator])
            event(w.conn, w.at, w.annotator, query_pk, None, "seconds", old, old + seconds)
        return old + seconds


def set_status(db: sqlite_utils.Database, query_pk: int, annotator: str, status: str,
               *, reason: str | None = None, now: When = None) -> str:
    """Finish (or reopen the outcome of) ``annotator``'s work on the item; return the previous status.

    - ``submitted``: the labels count toward the golden set; the annotator's slot is done.
    - ``skipped``: releases the slot so someone else may take it; the queue does not offer it to
      this annotator again (history can reopen it).
    - ``flagged``: needs the lead's attention; ``reason`` is required (stored as ``flag_reason``);
      the slot is done, so the item is not handed to anyone else meanwhile.
    - ``discarded``: a bad or unanswerable question; the slot is done; its grades are not used.

    A ``reason`` given with another status is stored as ``status_reason``.
    """
    if status not in STATUSES:
        raise LabelError(f"status {status!r} is unknown; use one of: {', '.join(STATUSES)}")
    reason = privacy.redact_typed(db, {"reason": _field_value("notes", reason)})["reason"]
    with label_write(db, query_pk, annotator, now, strict=status != "skipped") as w:
        return put_status(w, query_pk, status, reason)


def put_status(w: LabelWrite, query_pk: int, status: str, reason: str | None) -> str | None:
    conn = w.conn
    # an item that came back after an ingest added chunks is finished again by any status; skipping
    # it only sets the new chunks aside: the submitted grades stay submitted
    requeued = conn.execute("DELETE FROM requeued WHERE query_pk = ? AND annotator = ?",
                            [query_pk, w.annotator]).rowcount
    old, flag_reason = conn.execute(
        "SELECT status, flag_reason FROM query_labels WHERE query_pk = ? AND annotator = ?",
        [query_pk, w.annotator]).fetchone()
    if requeued and status == "skipped" and old == "submitted":
        return old
    if status == "flagged":
        if reason is None and flag_reason is None:
            raise LabelError("flagging needs a reason: say what is wrong (reason='...')")
        if reason is not None:
            _put_fields(w, query_pk, {"flag_reason": reason})
    elif reason is not None:
        before = conn.execute("SELECT status_reason FROM query_labels WHERE query_pk = ? AND annotator = ?",
                              [query_pk, w.annotator]).fetchone()[0]
        if before != reason:
            conn.execute("UPDATE query_labels SET status_reason = ? WHERE query_pk = ? AND annotator = ?",
                         [reason, query_pk, w.annotator])
            event(conn, w.at, w.annotator, query_pk, None, "status_reason", before, reason)
    if old != status:
        conn.execute(
            "UPDATE query_labels SET status = ?, status_at = ?, "
            "submitted_at = CASE WHEN ? = 'submitted' THEN ? ELSE submitted_at END "
            "WHERE query_pk = ? AND annotator = ?",
            [status, w.at, status, w.at, query_pk, w.annotator])
        event(conn, w.at, w.annotator, query_pk, None, "status", old, status)
    state = "released" if status == "skipped" else "done"
    cur = conn.execute("UPDATE assignments SET state = ?, lease_expires = NULL, updated_at = ? "
                       "WHERE query_pk = ? AND annotator = ?", [state, w.at, query_pk, w.annotator])
    if not cur.rowcount and state == "done":
        conn.execute("INSERT INTO assignments (query_pk, annotator, state, updated_at) "
                     "VALUES (?, ?, 'done', ?)", [query_pk, w.annotator, w.at])
    recount(conn, query_pk)
    return old
