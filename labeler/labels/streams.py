"""Grade streams: the Label page's grading widget sends each item's grades as an ordered stream of
events, numbered 1, 2, 3, ... per stream; ``apply_grade_events`` applies each event exactly once.

A stream is (query, annotator, client id): the widget makes up a client id per page load and keeps
the events the server has not acknowledged, so it can send them again after a lost answer, a
reload, a dropped connection or a server restart. ``grade_streams`` keeps the highest applied
sequence number of every stream: an event at or below it is a replay and is skipped; an event past
a gap waits until the missing ones arrive (events are applied in order, never around a hole).
Applied events go through the same write path as ``set_grade`` (lease and slot rules, one
``label_events`` row per change), in one short ``BEGIN IMMEDIATE`` transaction per call together
with the new sequence number, so a crash applies a batch and its number, or neither.

Events (plain dicts, as the widget sends them):

- ``{"seq": 4, "doc_pk": 12, "grade": 2}``: grade the chunk (``"grade": None`` clears it);
- ``{"seq": 5, "doc_pk": 12, "grade": 3, "accept": True}``: take the calibrated judge's suggestion
  for the chunk (stored with ``origin='suggestion'``, as ``judge.accept_suggestion`` does);
- ``{"seq": 6, "submit": True}``: submit the item (refused while a chunk of the pool has no grade).

"Rest are 0" is expanded by the widget into one grade event per ungraded chunk of the pool. An optional
``"at"`` (the client's clock) is accepted and ignored: the stored times are the server's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

from ..errors import LabelError
from ._common import When, check_doc, check_grade, check_name, event
from .writes import _drop_grade, _put_grade, _put_status, _Write, _writing, pool_ungraded

_CLIENT = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


@dataclass(frozen=True)
class GradeEvent:
    """One event of a stream: a grade (``grade`` None clears it), an accepted suggestion, or submit."""

    seq: int
    doc_pk: int | None = None
    grade: int | None = None
    accept: bool = False
    submit: bool = False


@dataclass
class StreamResult:
    """What one call did: ``acked`` is the stream's highest applied sequence number (send it back to
    the widget); ``applied`` the sequence numbers applied by this call; ``rejected`` the ones that
    were acknowledged without being applied, with the reason (e.g. a submit with ungraded chunks);
    ``waiting`` how many events wait behind a gap; ``submitted`` whether this call submitted."""

    acked: int
    applied: list[int] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)
    waiting: int = 0
    submitted: bool = False


def check_client(client_id: Any) -> str:
    if not isinstance(client_id, str) or not _CLIENT.match(client_id):
        raise LabelError(f"client id {client_id!r} must be 1 to 64 letters, digits or _.:- "
                         "(the grading widget makes one up per page load)")
    return client_id


def parse_event(raw: Any) -> GradeEvent:
    """A ``GradeEvent`` from the widget's dict; LabelError when it has no usable sequence number."""
    if isinstance(raw, GradeEvent):
        return raw
    if not isinstance(raw, dict):
        raise LabelError(f"grade event {raw!r} must be an object with a 'seq'")
    seq = raw.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise LabelError(f"grade event {raw!r}: 'seq' must be an integer from 1")
    return GradeEvent(seq=seq, doc_pk=raw.get("doc_pk"), grade=raw.get("grade"),
                      accept=bool(raw.get("accept")), submit=bool(raw.get("submit")))


def stream_acks(db: sqlite_utils.Database, query_pk: int, annotator: str) -> dict[str, int]:
    """The highest applied sequence number of each of ``annotator``'s streams on the item, by client id."""
    return dict(db.execute("SELECT client_id, seq FROM grade_streams WHERE query_pk = ? AND annotator = ?",
                           [query_pk, check_name(annotator)]).fetchall())


def _acked(conn: Any, query_pk: int, annotator: str, client_id: str) -> int:
    row = conn.execute("SELECT seq FROM grade_streams WHERE query_pk = ? AND annotator = ? AND client_id = ?",
                       [query_pk, annotator, client_id]).fetchone()
    return row[0] if row else 0


def _ungraded(w: _Write, query_pk: int) -> int | None:
    """Pool position of the first pool chunk the annotator has not graded, or None."""
    missing = pool_ungraded(w.conn, query_pk, w.annotator, w.settings)
    return missing[0][0] if missing else None


def _apply(w: _Write, query_pk: int, e: GradeEvent) -> None:
    """Apply one event; LabelError (before anything is written) when it cannot be applied."""
    if e.submit:
        rank = _ungraded(w, query_pk)
        if rank is not None:
            raise LabelError(f"cannot submit: chunk #{rank} has no grade yet")
        _put_status(w, query_pk, "submitted", None)
        return
    check_doc(w.conn, e.doc_pk)
    if e.accept:
        row = w.conn.execute("SELECT grade, run_id FROM suggestions WHERE query_pk = ? AND doc_pk = ?",
                             [query_pk, e.doc_pk]).fetchone()
        if row is None:
            raise LabelError(f"the judge has no suggestion for chunk pk {e.doc_pk}")
        grade, run_id = check_grade(row[0], w.settings), row[1]
        if _put_grade(w, query_pk, e.doc_pk, grade) != grade:
            w.conn.execute("UPDATE relevance_labels SET origin = 'suggestion' WHERE query_pk = ? AND doc_pk = ? "
                           "AND annotator = ?", [query_pk, e.doc_pk, w.annotator])
            event(w.conn, w.at, w.annotator, query_pk, e.doc_pk, "origin", "human",
                  f"suggestion of judge run {run_id}")
    elif e.grade is None:
        _drop_grade(w, query_pk, e.doc_pk)
    else:
        _put_grade(w, query_pk, e.doc_pk, check_grade(e.grade, w.settings))


def apply_grade_events(db: sqlite_utils.Database, query_pk: int, annotator: str, client_id: str,
                       events: list[dict[str, Any]] | list[GradeEvent], *, now: When = None) -> StreamResult:
    """Apply the events of one stream that were not applied yet, in sequence order; return the
    stream's acknowledged sequence number and what was done.

    Events at or below the stored number are skipped (replays); the rest are applied from the next
    number on and stop at the first gap. An event that cannot be applied (a chunk that does not
    exist, a grade off the scale, a submit while a chunk has no grade, an accept without a
    suggestion) is acknowledged and listed in ``rejected``, so one bad event never blocks the
    stream. When the item has gone to someone else nothing is written and ``ItemTakenError`` is
    raised, as ``set_grade`` does. A call with nothing new writes nothing (no lease is taken).
    """
    annotator = check_name(annotator)
    client_id = check_client(client_id)
    parsed: dict[int, GradeEvent] = {}
    for raw in events:
        e = parse_event(raw)
        parsed.setdefault(e.seq, e)
    ordered = [parsed[s] for s in sorted(parsed)]
    acked = _acked(db.conn, query_pk, annotator, client_id)
    if not any(e.seq > acked for e in ordered):
        return StreamResult(acked)
    with _writing(db, query_pk, annotator, now) as w:
        # read again under the write lock: another thread of the same session may have applied some
        acked = _acked(w.conn, query_pk, annotator, client_id)
        result = StreamResult(acked)
        for e in ordered:
            if e.seq <= result.acked:
                continue
            if e.seq > result.acked + 1:
                result.waiting = sum(x.seq > result.acked for x in ordered)
                break
            try:
                _apply(w, query_pk, e)
                result.applied.append(e.seq)
                result.submitted = result.submitted or e.submit
            except LabelError as err:
                result.rejected.append((e.seq, str(err)))
            result.acked = e.seq
        if result.acked > acked:
            w.conn.execute(
                "INSERT INTO grade_streams (query_pk, annotator, client_id, seq, updated_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (query_pk, annotator, client_id) DO UPDATE SET seq = excluded.seq, "
                "updated_at = excluded.updated_at", [query_pk, annotator, client_id, result.acked, w.at])
    return result
