"""Grade streams: the Label page's grading widget sends each item's grades as an ordered stream of
events, numbered 1, 2, 3, ... per stream; ``apply_grade_events`` applies each event exactly once.

A stream is (query, annotator, client id): the widget makes up a client id per page load and keeps
the events the server has not acknowledged, so it can send them again after a lost answer, a
reload, a dropped connection or a server restart. ``grade_streams`` keeps the highest applied
sequence number of every stream: an event at or below it is a replay and is skipped; an event past
a gap waits until the missing ones arrive (events are applied in order, never around a hole).
Applied events go through the same write path as ``set_grade`` (lease and slot rules, one
``label_events`` row per change), in short ``BEGIN IMMEDIATE`` transactions (at most
``EVENTS_PER_TRANSACTION`` events or ``HOLD_TARGET_S`` of lock each, however long the outbox)
together with the new sequence number, so a crash applies a part and its number, or neither.

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
import time
from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

from ..core.names import check_name
from ..core.times import When
from ..errors import LabelerError, LabelError
from .common import check_doc, check_grade, event
from .queue import next_item, sync_queue
from .writes import LabelWrite, drop_grade, label_write, pool_ungraded, put_grade, put_status

_CLIENT = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
# Bounds of one write transaction of a stream: a 50k-event outbox (a long offline session, "rest
# are 0" over a large pool) must not hold the lock that every other annotator's grade waits for.
EVENTS_PER_TRANSACTION = 250
HOLD_TARGET_S = 0.04


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
    # with lease_next: the item leased next, in the transaction that applied the submit (None:
    # nothing left), or why none could be (next_error); leased says whether it was tried
    leased: bool = False
    next_item: int | None = None
    next_error: str | None = None


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


def _ungraded(w: LabelWrite, query_pk: int) -> int | None:
    """Pool position of the first pool chunk the annotator has not graded, or None."""
    missing = pool_ungraded(w.conn, query_pk, w.annotator, w.settings)
    return missing[0][0] if missing else None


def _apply(w: LabelWrite, query_pk: int, e: GradeEvent) -> None:
    """Apply one event; LabelError (before anything is written) when it cannot be applied."""
    if e.submit:
        rank = _ungraded(w, query_pk)
        if rank is not None:
            raise LabelError(f"cannot submit: chunk #{rank} has no grade yet")
        put_status(w, query_pk, "submitted", None)
        return
    check_doc(w.conn, e.doc_pk)
    if e.accept:
        row = w.conn.execute("SELECT grade, run_id FROM suggestions WHERE query_pk = ? AND doc_pk = ?",
                             [query_pk, e.doc_pk]).fetchone()
        if row is None:
            raise LabelError(f"the judge has no suggestion for chunk pk {e.doc_pk}")
        grade, run_id = check_grade(row[0], w.settings), row[1]
        if put_grade(w, query_pk, e.doc_pk, grade) != grade:
            w.conn.execute("UPDATE relevance_labels SET origin = 'suggestion' WHERE query_pk = ? AND doc_pk = ? "
                           "AND annotator = ?", [query_pk, e.doc_pk, w.annotator])
            event(w.conn, w.at, w.annotator, query_pk, e.doc_pk, "origin", "human",
                  f"suggestion of judge run {run_id}")
    elif e.grade is None:
        drop_grade(w, query_pk, e.doc_pk)
    else:
        put_grade(w, query_pk, e.doc_pk, check_grade(e.grade, w.settings))


def apply_grade_events(db: sqlite_utils.Database, query_pk: int, annotator: str, client_id: str,
                       events: list[dict[str, Any]] | list[GradeEvent], *, now: When = None,
                       per_transaction: int = EVENTS_PER_TRANSACTION, lease_next: bool = False) -> StreamResult:
    """Apply the events of one stream that were not applied yet, in sequence order; return the
    stream's acknowledged sequence number and what was done.

    Events at or below the stored number are skipped (replays); the rest are applied from the next
    number on and stop at the first gap. An event that cannot be applied (a chunk that does not
    exist, a grade off the scale, a submit while a chunk has no grade, an accept without a
    suggestion) is acknowledged and listed in ``rejected``, so one bad event never blocks the
    stream. A call with nothing new writes nothing (no lease is taken).

    However many events come, each write transaction applies at most ``per_transaction`` of them
    and stops early once it has held the write lock for ``HOLD_TARGET_S``, so that other annotators'
    writes get in between; the stored sequence number commits with the events it covers, so a
    crash between transactions leaves the stream acknowledged exactly as far as it was applied
    (the widget sends the rest again, and nothing is applied twice). A submit is applied in its
    place in the sequence, after every grade before it. When the item has gone to someone else,
    ``ItemTakenError`` is raised, as ``set_grade`` does, and that transaction writes nothing (the
    events of earlier transactions of the call stay applied and acknowledged in the store).

    ``lease_next=True``: the transaction that applies a submit also leases the annotator's next
    item (``queue.next_item``), so that after Enter the annotator waits for the write lock once,
    not twice (behind an ingest, each wait can be one of its transactions); the result says which
    item (``next_item``, ``leased``), or why none (``next_error``: the submit stays applied).
    """
    annotator = check_name(annotator)
    client_id = check_client(client_id)
    if isinstance(per_transaction, bool) or not isinstance(per_transaction, int) or per_transaction < 1:
        raise LabelError(f"per_transaction {per_transaction!r} must be a whole number from 1")
    parsed: dict[int, GradeEvent] = {}
    for raw in events:
        e = parse_event(raw)
        parsed.setdefault(e.seq, e)
    ordered = [parsed[s] for s in sorted(parsed)]
    result = StreamResult(_acked(db.conn, query_pk, annotator, client_id))
    pending = [e for e in ordered if e.seq > result.acked]
    if lease_next and any(e.submit for e in pending):
        try:  # new items join the queue outside the lock, as next_item does
            sync_queue(db)
        except LabelerError:
            pass  # the lease says why, after the submit is applied
    while pending:
        more = _apply_some(db, query_pk, annotator, client_id, pending, result, now, per_transaction,
                           lease_next)
        pending = [e for e in pending if e.seq > result.acked]
        if not more:
            break
    return result


def _apply_some(db: sqlite_utils.Database, query_pk: int, annotator: str, client_id: str,
                pending: list[GradeEvent], result: StreamResult, now: When, limit: int,
                lease_next: bool = False) -> bool:
    """One write transaction of ``apply_grade_events``: the next events in order, up to ``limit``
    or ``HOLD_TARGET_S``; ``result`` is updated only once they are committed. True when it stopped
    at a bound with events still to apply (not at a gap or the end)."""
    applied: list[int] = []
    rejected: list[tuple[int, str]] = []
    submitted = bounded = False
    waiting = 0
    with label_write(db, query_pk, annotator, now) as w:
        started = time.perf_counter()
        # read again under the write lock: another thread of the same session may have applied some
        stored = acked = _acked(w.conn, query_pk, annotator, client_id)
        for e in pending:
            if e.seq <= acked:
                continue
            if bounded:
                break
            if e.seq > acked + 1:
                waiting = sum(x.seq > acked for x in pending)
                break
            try:
                _apply(w, query_pk, e)
                applied.append(e.seq)
                submitted = submitted or e.submit
            except LabelError as err:
                rejected.append((e.seq, str(err)))
            acked = e.seq
            bounded = len(applied) + len(rejected) >= limit or time.perf_counter() - started >= HOLD_TARGET_S
        if acked > stored:
            w.conn.execute(
                "INSERT INTO grade_streams (query_pk, annotator, client_id, seq, updated_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (query_pk, annotator, client_id) DO UPDATE SET seq = excluded.seq, "
                "updated_at = excluded.updated_at", [query_pk, annotator, client_id, acked, w.at])
        leased, nxt, why = False, None, None
        if submitted and lease_next:
            leased = True
            try:  # a savepoint: when it fails, the submit stays applied
                nxt = next_item(db, annotator, now=now)
            except LabelerError as err:
                why = str(err)
    if leased:
        result.leased, result.next_item, result.next_error = True, nxt, why
    result.acked = max(result.acked, acked)
    result.applied += applied
    result.rejected += rejected
    result.submitted = result.submitted or submitted
    result.waiting = waiting
    return bounded and any(e.seq > acked for e in pending)
