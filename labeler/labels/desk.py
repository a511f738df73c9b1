"""The lead's actions on one item and the flag inbox.

A lead can send an item back to its annotators (re-queue), send it to the Adjudication page, or
discard it with a reason; and resolve each flag: edit the question text (the text it replaces is
kept in ``question_edits``, so the original stays retrievable), discard the item, or unflag it
with a note the annotator sees when the item comes back to them. Every action is for leads only
(``by``, the signed-in account; ``None`` is the local operator), runs in one short transaction and
leaves one ``audit_events`` row (``labeler audit``).

- **Re-queue**: the chosen annotators' status goes back to ``in_progress`` (their grades and
  answers stay) and the item comes back to each of them first (the ``requeued`` table, as after an
  ingest grows a pool); their grades count again once they submit.
- **Discard** (the lead's, for the whole item): every annotator's status becomes ``discarded`` with
  the lead's reason, the item leaves the queue and the golden set; ``queries.discarded_at`` keeps it
  out of the queue until a lead **restores** it: then each annotator gets back the status they had
  before the discard (kept in the discard's audit row; one who had not submitted, skipped or
  discarded it themselves gets it back first in their queue) and the item returns to the queue.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlite_utils

from .. import db as store
from .. import privacy
from ..accounts.manage import local_operator, require
from ..core.names import check_name
from ..core.times import When, stamp
from ..errors import LabelError
from .common import event, query_row
from .queue import sync_queue

FLAG_ACTIONS = ("edit", "discard", "unflag")


def _lead(by: str | None) -> str:
    return by if by is not None else local_operator()


def _text(db: sqlite_utils.Database, value: str | None, what: str, *, required: bool = False) -> str | None:
    """A lead's text, checked, and redacted like an ingest when the setting ``redact`` is on."""
    if value is not None and not isinstance(value, str):
        raise LabelError(f"{what} must be text, got {type(value).__name__}")
    value = value.strip() if value else None
    if required and not value:
        raise LabelError(f"{what} is empty; say why in a few words")
    return privacy.redact_typed(db, {"text": value})["text"] if value else None


def _live(conn, query_pk: int) -> str:
    query_id = query_row(conn, query_pk)[1]
    if conn.execute("SELECT discarded_at FROM queries WHERE pk = ?", [query_pk]).fetchone()[0] is not None:
        raise LabelError(f"query {query_id} was discarded by a lead; it cannot go back to the queue")
    return query_id


def _requeue(conn, query_pk: int, names: list[str], at: str) -> dict[str, str]:
    """Send the item back to ``names``; return their previous statuses."""
    old = dict(conn.execute("SELECT annotator, status FROM query_labels WHERE query_pk = ? AND annotator IN "
                            "(SELECT value FROM json_each(?))", [query_pk, store.dumps(names)]).fetchall())
    for name in names:
        conn.execute("UPDATE query_labels SET status = 'in_progress', status_at = ?, updated_at = ? "
                     "WHERE query_pk = ? AND annotator = ? AND status != 'in_progress'", [at, at, query_pk, name])
        # ingest_id NULL: the lead sent it back, no ingest added chunks (no "new chunk" badges)
        conn.execute("INSERT INTO requeued (query_pk, annotator, ingest_id, created_at) VALUES (?, ?, NULL, ?) "
                     "ON CONFLICT (query_pk, annotator) DO UPDATE SET ingest_id = NULL, "
                     "created_at = excluded.created_at", [query_pk, name, at])
    return old


def requeue_item(db: sqlite_utils.Database, query_pk: int, annotators: list[str] | None = None, *,
                 by: str | None = None, now: When = None) -> list[str]:
    """Send the item back to ``annotators`` (default: everyone who has a label on it); return
    their names. Each must have a label row on the item (they opened it)."""
    require(db, by, "lead", "re-queueing an item")
    at = stamp(now)
    with store.transaction(db):
        conn = db.conn
        query_id = _live(conn, query_pk)
        have = [r[0] for r in conn.execute("SELECT annotator FROM query_labels WHERE query_pk = ? "
                                           "ORDER BY annotator", [query_pk])]
        names = have if annotators is None else [check_name(a) for a in annotators]
        missing = [n for n in names if n not in have]
        if missing:
            raise LabelError(f"{', '.join(missing)} never opened query {query_id}; re-queue it for one of: "
                             f"{', '.join(have) or '(nobody has labeled it yet)'}")
        if not names:
            raise LabelError(f"nobody has labeled query {query_id} yet: there is no one to send it back to")
        old = _requeue(conn, query_pk, names, at)
        event(conn, at, _lead(by), query_pk, None, "item_requeue", store.dumps(old), store.dumps(names))
    return names


def request_adjudication(db: sqlite_utils.Database, query_pk: int, *, note: str | None = None,
                         by: str | None = None, now: When = None) -> bool:
    """Put the item on the Adjudication page (with every graded chunk, conflicting or not); False
    when it was there already."""
    require(db, by, "lead", "sending an item to adjudication")
    note = _text(db, note, "the note")
    at = stamp(now)
    with store.transaction(db):
        conn = db.conn
        query_row(conn, query_pk)
        added = conn.execute("INSERT OR IGNORE INTO adjudication_requests (query_pk, lead, note, created_at) "
                             "VALUES (?, ?, ?, ?)", [query_pk, _lead(by), note, at]).rowcount > 0
        if added:
            event(conn, at, _lead(by), query_pk, None, "item_adjudicate", None, note or "")
    return added


def _discard(conn, query_pk: int, reason: str, at: str, lead: str) -> dict[str, str]:
    """Discard the item; its statuses before go to an ``item_discard`` audit row (``restore_item``)."""
    old = dict(conn.execute("SELECT annotator, status FROM query_labels WHERE query_pk = ?", [query_pk]).fetchall())
    event(conn, at, lead, query_pk, None, "item_discard", store.dumps(old), reason)
    conn.execute("UPDATE queries SET discarded_at = ?, discard_reason = ? WHERE pk = ?", [at, reason, query_pk])
    conn.execute("UPDATE query_labels SET status = 'discarded', status_at = ?, status_reason = ?, updated_at = ? "
                 "WHERE query_pk = ? AND status != 'discarded'", [at, reason, at, query_pk])
    conn.execute("DELETE FROM requeued WHERE query_pk = ?", [query_pk])
    conn.execute("UPDATE assignments SET state = 'released', lease_expires = NULL, updated_at = ? "
                 "WHERE query_pk = ? AND state = 'leased'", [at, query_pk])
    if conn.execute("DELETE FROM queue WHERE query_pk = ?", [query_pk]).rowcount:
        conn.execute("UPDATE queue_meta SET value = CAST((SELECT count(*) FROM queue) AS TEXT) WHERE key = 'items'")
    return old


def discard_item(db: sqlite_utils.Database, query_pk: int, reason: str, *, by: str | None = None,
                 now: When = None) -> None:
    """Discard the whole item with ``reason`` (required): see the module doc."""
    require(db, by, "lead", "discarding an item")
    reason = _text(db, reason, "the reason to discard", required=True)
    at = stamp(now)
    with store.transaction(db):
        conn = db.conn
        _live(conn, query_pk)
        _discard(conn, query_pk, reason, at, _lead(by))


def restore_item(db: sqlite_utils.Database, query_pk: int, *, by: str | None = None,
                 now: When = None) -> dict[str, str]:
    """Undo a lead's discard (see the module doc); return each annotator's status now."""
    require(db, by, "lead", "restoring a discarded item")
    at = stamp(now)
    with store.transaction(db):
        conn = db.conn
        query_id = query_row(conn, query_pk)[1]
        if conn.execute("SELECT discarded_at FROM queries WHERE pk = ?", [query_pk]).fetchone()[0] is None:
            raise LabelError(f"query {query_id} is not discarded: there is nothing to restore")
        row = conn.execute("SELECT old FROM label_events WHERE query_pk = ? AND field = 'item_discard' "
                           "ORDER BY id DESC LIMIT 1", [query_pk]).fetchone()
        before: dict[str, str] = store.loads(row[0]) if row and row[0] else {}
        now_discarded = [r[0] for r in conn.execute("SELECT annotator FROM query_labels WHERE query_pk = ? AND "
                                                     "status = 'discarded' ORDER BY annotator", [query_pk])]
        back = {name: before.get(name, "in_progress") for name in now_discarded}
        for name, status in back.items():
            if status in ("submitted", "skipped", "discarded"):  # their own decision before the lead's
                conn.execute("UPDATE query_labels SET status = ?, status_at = ?, status_reason = NULL, updated_at = ? "
                             "WHERE query_pk = ? AND annotator = ? AND status = 'discarded'",
                             [status, at, at, query_pk, name])
        again = [n for n, s in back.items() if s not in ("submitted", "skipped", "discarded")]
        conn.execute("UPDATE query_labels SET status_reason = NULL WHERE query_pk = ? AND annotator IN "
                     "(SELECT value FROM json_each(?))", [query_pk, store.dumps(again)])
        _requeue(conn, query_pk, again, at)
        conn.execute("UPDATE queries SET discarded_at = NULL, discard_reason = NULL WHERE pk = ?", [query_pk])
        event(conn, at, _lead(by), query_pk, None, "item_restore", None, store.dumps(back))
        statuses = dict(conn.execute("SELECT annotator, status FROM query_labels WHERE query_pk = ? "
                                     "ORDER BY annotator", [query_pk]).fetchall())
    sync_queue(db, force=True)  # the queue's change check cannot see an item come back
    return statuses


# --- question edits -------------------------------------------------------------------------

@dataclass
class QuestionEdit:
    """One change of a question's text by a lead; the first edit's ``old`` is the original."""

    old: str
    new: str
    lead: str
    note: str | None
    at: str


def _edit(conn, query_pk: int, question: str, lead: str, note: str | None, at: str) -> str:
    old = conn.execute("SELECT question FROM queries WHERE pk = ?", [query_pk]).fetchone()[0]
    if old != question:
        # norm_question stays the logged text's: re-ingesting the same log still finds this query
        conn.execute("UPDATE queries SET question = ? WHERE pk = ?", [question, query_pk])
        conn.execute("INSERT INTO question_edits (query_pk, old, new, lead, note, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                     [query_pk, old, question, lead, note, at])
    return old


def edit_question(db: sqlite_utils.Database, query_pk: int, question: str, *, note: str | None = None,
                  by: str | None = None, now: When = None) -> str:
    """Replace the question's text (a typo, a leaked secret, an unclear phrasing); return the old
    text, which stays in ``question_history``. Annotators' labels stay."""
    require(db, by, "lead", "editing a question")
    question = _text(db, question, "the question", required=True)
    note = _text(db, note, "the note")
    at = stamp(now)
    with store.transaction(db):
        conn = db.conn
        query_row(conn, query_pk)
        old = _edit(conn, query_pk, question, _lead(by), note, at)
        if old != question:
            event(conn, at, _lead(by), query_pk, None, "question", old, question)
    return old


def question_history(db: sqlite_utils.Database, query_pk: int) -> list[QuestionEdit]:
    """Every edit of the question's text, oldest first (empty when it was never edited)."""
    return [QuestionEdit(*r) for r in db.execute(
        "SELECT old, new, lead, note, created_at FROM question_edits WHERE query_pk = ? ORDER BY id", [query_pk])]


def original_question(db: sqlite_utils.Database, query_pk: int) -> str:
    """The question as it was first stored (before any lead's edit)."""
    query_row(db.conn, query_pk)
    edits = question_history(db, query_pk)
    if edits:
        return edits[0].old
    return db.execute("SELECT question FROM queries WHERE pk = ?", [query_pk]).fetchone()[0]


# --- the flag inbox -------------------------------------------------------------------------

@dataclass
class FlagEntry:
    """An item an annotator flagged, waiting for the lead."""

    query_pk: int
    query_id: str
    question: str
    annotator: str
    reason: str | None
    at: str | None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def flag_count(db: sqlite_utils.Database, *, by: str | None = None) -> int:
    """How many (item, annotator) flags wait for the lead."""
    require(db, by, "lead", "reading the flag inbox")
    return db.execute("SELECT count(*) FROM query_labels WHERE status = 'flagged'").fetchone()[0]


def flagged_items(db: sqlite_utils.Database, *, by: str | None = None, limit: int = 500) -> list[FlagEntry]:
    """The flags waiting for the lead, oldest first: item, who flagged it, why and when."""
    require(db, by, "lead", "reading the flag inbox")
    return [FlagEntry(*r) for r in db.execute(
        "SELECT l.query_pk, q.query_id, q.question, l.annotator, l.flag_reason, coalesce(l.status_at, l.updated_at) "
        "FROM query_labels l JOIN queries q ON q.pk = l.query_pk WHERE l.status = 'flagged' "
        "ORDER BY coalesce(l.status_at, l.updated_at), l.query_pk, l.annotator LIMIT ?", [int(limit)])]


def resolve_flag(db: sqlite_utils.Database, query_pk: int, annotator: str, action: str, *,
                 question: str | None = None, note: str | None = None, by: str | None = None,
                 now: When = None) -> None:
    """Resolve ``annotator``'s flag on the item:

    - ``edit``: replace the question with ``question`` (the old text is kept, see
      ``question_history``) and send the item back to the annotator, with ``note`` if given;
    - ``discard``: discard the whole item (``note`` is the reason; default: the flag's reason);
    - ``unflag``: send the item back to the annotator with ``note`` (required), which they see
      when it comes back.
    """
    require(db, by, "lead", "resolving a flag")
    if action not in FLAG_ACTIONS:
        raise LabelError(f"action {action!r} is unknown; use one of: {', '.join(FLAG_ACTIONS)}")
    annotator = check_name(annotator)
    note = _text(db, note, "the note", required=action == "unflag")
    if action == "edit":
        question = _text(db, question, "the new question", required=True)
    at = stamp(now)
    lead = _lead(by)
    with store.transaction(db):
        conn = db.conn
        query_id = _live(conn, query_pk)
        row = conn.execute("SELECT flag_reason FROM query_labels WHERE query_pk = ? AND annotator = ? "
                           "AND status = 'flagged'", [query_pk, annotator]).fetchone()
        if row is None:
            raise LabelError(f"{annotator} has no open flag on query {query_id} (resolved already?); "
                             "see the flag inbox")
        detail: dict = {"annotator": annotator, "action": action, "note": note}
        if action == "edit":
            detail["old"] = _edit(conn, query_pk, question, lead, note, at)
            _requeue(conn, query_pk, [annotator], at)
        elif action == "unflag":
            _requeue(conn, query_pk, [annotator], at)
        else:
            _discard(conn, query_pk, note or row[0] or "flagged", at, lead)
        done = {"edit": "edited", "discard": "discarded", "unflag": "unflagged"}[action]
        conn.execute("INSERT INTO flag_resolutions (query_pk, annotator, flag_reason, action, note, lead, created_at) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)", [query_pk, annotator, row[0], done, note, lead, at])
        event(conn, at, _lead(by), query_pk, None, "flag_resolve", row[0], store.dumps(detail))


@dataclass
class LeadNote:
    """How a lead resolved one of the annotator's flags on an item."""

    action: str  # edited, discarded, unflagged
    note: str | None
    flag_reason: str | None
    lead: str
    at: str


def lead_notes(db: sqlite_utils.Database, query_pk: int, annotator: str) -> list[LeadNote]:
    """The lead's answers to ``annotator``'s flags on the item, newest first (what they see on it)."""
    return [LeadNote(*r) for r in db.execute(
        "SELECT action, note, flag_reason, lead, created_at FROM flag_resolutions WHERE query_pk = ? "
        "AND annotator = ? ORDER BY id DESC", [query_pk, check_name(annotator)])]
