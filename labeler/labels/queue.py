"""The labeling queue: which query an annotator labels next, leases, and the overlap targets.

Every labelable query has one row in the ``queue`` table: its ``sort_key`` for the configured
``queue_order``, how many annotators it ``needed`` (1, or ``overlap_annotators`` for the overlap
share), how many hold or finished it (``taken``) and how many finished it (``done``). The partial
index ``queue_open`` contains only rows with ``taken < needed``, so ``next_item`` reads the first
open row in order and never walks past labeled items: it costs the same at 20 or 100k queries.

Rules:

- **Who can get an item**: an annotator never gets an item they submitted, skipped, flagged or
  discarded, and only while ``taken < needed``; a lease (``assignments`` row in state ``leased``)
  holds a slot until it expires (``lease_minutes``, default 15, renewed by every write) and is
  reclaimed by the next ``next_item`` call after expiry. So two annotators hold the same item only
  when its target is 2 or more.
- **Resume**: an annotator who holds a lease gets that item back from ``next_item``.
- **Re-queue**: an item an annotator submitted whose pool an ingest grew (``requeued`` table,
  see ``labels.pool.requeue_after_ingest``) comes back to them before new items, until they
  submit it again (or set any other status); their old grades stay.
- **Order** (``queue_order``): the sort keys, and how the ``active`` and ``stratified`` orders
  pick and record a hand-out, are in ``labeler.labels.orders``; ties by query pk.
- **Planning** (what is queued, the overlap share and its targets, the sync after an ingest):
  ``labeler.labels.queue_plan``.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import sqlite_utils

from .. import db as store
from ..accounts.manage import ensure_annotator
from ..core.names import check_name
from ..core.times import When, stamp
from ..errors import ItemTakenError, LabelError
from . import orders
from .common import lease_until, query_row

# re-exported: the orders lived here before ``labels.orders``
from .orders import ORDERS, UNSCORED, score_retriever, seeded_hash, signal_tiers  # noqa: F401
from .queue_plan import QueueSync, queue_fingerprint, queue_params, sync_planned, sync_queue  # noqa: F401 - sync_queue, QueueSync re-exported


def recount(conn: sqlite3.Connection, query_pk: int) -> None:
    """Recompute an item's ``taken``/``done`` from its assignments (robust to any state change)."""
    conn.execute(
        "UPDATE queue SET "
        "taken = (SELECT count(*) FROM assignments a WHERE a.query_pk = ?1 AND a.state IN ('leased', 'done')), "
        "done = (SELECT count(*) FROM assignments a WHERE a.query_pk = ?1 AND a.state = 'done') "
        "WHERE query_pk = ?1", [query_pk])


def _lease(conn: sqlite3.Connection, query_pk: int, annotator: str, at: str, until: str) -> None:
    conn.execute(
        "INSERT INTO assignments (query_pk, annotator, state, lease_expires, updated_at) "
        "VALUES (?, ?, 'leased', ?, ?) ON CONFLICT (query_pk, annotator) DO UPDATE SET "
        "state = 'leased', lease_expires = excluded.lease_expires, updated_at = excluded.updated_at",
        [query_pk, annotator, until, at])
    recount(conn, query_pk)


def _reclaim_expired(conn: sqlite3.Connection, at: str) -> None:
    expired = conn.execute("SELECT query_pk, annotator FROM assignments "
                           "WHERE state = 'leased' AND lease_expires < ?", [at]).fetchall()
    for query_pk, annotator in expired:
        conn.execute("UPDATE assignments SET state = 'released', updated_at = ? "
                     "WHERE query_pk = ? AND annotator = ?", [at, query_pk, annotator])
        recount(conn, query_pk)


_NEXT_SQL = """
SELECT u.query_pk FROM queue u
WHERE u.taken < u.needed
  AND NOT EXISTS (SELECT 1 FROM assignments a
                  WHERE a.query_pk = u.query_pk AND a.annotator = ?1 AND a.state = 'done')
  AND NOT EXISTS (SELECT 1 FROM query_labels l
                  WHERE l.query_pk = u.query_pk AND l.annotator = ?1 AND l.status != 'in_progress')
ORDER BY u.sort_key, u.query_pk
LIMIT 1
"""


def next_item(db: sqlite_utils.Database, annotator: str, *, now: When = None) -> int | None:
    """The pk of the query ``annotator`` should label now, leased to them; ``None`` when done.

    Returns the item they already hold when they hold one (resume after a reload or crash);
    otherwise reclaims expired leases and leases the first open item in queue order that they
    have not submitted, skipped, flagged or discarded. ``now`` overrides the clock (tests).
    """
    annotator = check_name(annotator)
    at = stamp(now)
    settings = store.get_settings(db)
    params = queue_params(settings)
    until = lease_until(at, settings)
    conn = db.conn
    sync_queue(db)  # outside the lease's transaction: a big batch of new items goes in short ones
    with store.transaction(db):
        ensure_annotator(conn, annotator, at)
        sync_planned(conn, params)  # only what arrived in between
        held = conn.execute("SELECT query_pk FROM assignments WHERE annotator = ? AND state = 'leased' "
                            "ORDER BY lease_expires DESC LIMIT 1", [annotator]).fetchone()
        if held:
            # still 'leased' means no one reclaimed it, so its slot is still this annotator's
            conn.execute("UPDATE assignments SET lease_expires = ?, updated_at = ? "
                         "WHERE query_pk = ? AND annotator = ?", [until, at, held[0], annotator])
            return held[0]
        # an item they submitted whose pool an ingest grew comes back first (no lease: it is theirs)
        back = conn.execute("SELECT query_pk FROM requeued WHERE annotator = ? ORDER BY created_at, query_pk "
                            "LIMIT 1", [annotator]).fetchone()
        if back:
            return back[0]
        _reclaim_expired(conn, at)
        picked = orders.pick(conn, annotator, settings, params["order"], _NEXT_SQL,
                             lambda: queue_fingerprint(conn, params))
        if picked is None:
            return None
        _lease(conn, picked[0], annotator, at, until)
        orders.record_handout(conn, picked[0], annotator, settings, at, params["order"], picked[1])
        return picked[0]


def claim(conn: sqlite3.Connection, query_pk: int, annotator: str, at: str, settings: dict[str, Any],
          *, strict: bool = True) -> str | None:
    """Make sure ``annotator`` may write to the item and renew their lease; return the assignment state.

    A finished item (``done``) may always be edited. A held lease is renewed. Otherwise a free slot
    is leased; with no free slot ``strict`` raises ItemTakenError and non-strict returns None.
    """
    row = conn.execute("SELECT state FROM assignments WHERE query_pk = ? AND annotator = ?",
                       [query_pk, annotator]).fetchone()
    state = row[0] if row else None
    until = lease_until(at, settings)
    if state == "done":
        return state
    if state == "leased":
        conn.execute("UPDATE assignments SET lease_expires = ?, updated_at = ? "
                     "WHERE query_pk = ? AND annotator = ?", [until, at, query_pk, annotator])
        return state
    if not strict:
        return None
    sync_planned(conn, queue_params(settings))
    slot = conn.execute("SELECT needed, taken FROM queue WHERE query_pk = ?", [query_pk]).fetchone()
    if slot is None:
        _, query_id, origin, review = query_row(conn, query_pk)
        hint = (" (synthetic questions are labeled once accepted in review)"
                if origin == "synthetic" and review != "accepted" else "")
        raise LabelError(f"query {query_id} is not in the labeling queue{hint}")
    if slot[1] >= slot[0]:
        _, query_id, *_ = query_row(conn, query_pk)
        raise ItemTakenError(
            f"query {query_id} already has the {slot[0]} annotator(s) it needs (your lease may have "
            "expired and the item gone to someone else); take the next item")
    _lease(conn, query_pk, annotator, at, until)
    return "leased"


def renew_lease(db: sqlite_utils.Database, query_pk: int, annotator: str, *, now: When = None) -> str:
    """Extend ``annotator``'s lease on the item by ``lease_minutes``; return the new expiry.

    Re-leases an item whose lease was reclaimed if a slot is still free, else raises
    ItemTakenError. A finished item needs no lease: its state is left alone.
    """
    annotator = check_name(annotator)
    at = stamp(now)
    settings = store.get_settings(db)
    with store.transaction(db):
        query_row(db.conn, query_pk)
        ensure_annotator(db.conn, annotator, at)
        claim(db.conn, query_pk, annotator, at, settings)
    return lease_until(at, settings)


def release(db: sqlite_utils.Database, query_pk: int, annotator: str, *, now: When = None) -> bool:
    """Give up ``annotator``'s lease on the item (labels stay); True if they held one."""
    annotator = check_name(annotator)
    at = stamp(now)
    with store.transaction(db):
        query_row(db.conn, query_pk)
        cur = db.conn.execute("UPDATE assignments SET state = 'released', updated_at = ? "
                              "WHERE query_pk = ? AND annotator = ? AND state = 'leased'",
                              [at, query_pk, annotator])
        if cur.rowcount:
            recount(db.conn, query_pk)
        return cur.rowcount > 0


def queue_counts(db: sqlite_utils.Database, *, now: When = None) -> dict[str, int]:
    """Queued items by state, for ``labeler queue``.

    ``open`` + ``leased`` + ``done`` == ``items``: done = its target of annotators finished it
    (submitted, flagged or discarded); leased = not done and someone holds an unexpired lease;
    open = the rest. ``open_slots`` = annotator-items still to do (sum of target - finished).
    ``overlap`` = items with a target above 1. ``submitted``/``skipped``/``flagged``/``discarded`` =
    items with at least one annotator in that status. ``requeued`` = items sent back to annotators
    who had submitted them (an ingest added chunks to their pool, or a lead re-queued them),
    ``requeued_slots`` = those (item, annotator) pairs. ``pending_review`` = synthetic queries not yet accepted (not queued).
    """
    sync_queue(db)
    at = stamp(now)
    row = db.execute(
        "SELECT count(*), "
        "coalesce(sum(u.done >= u.needed), 0), "
        "coalesce(sum(u.done < u.needed AND EXISTS (SELECT 1 FROM assignments a WHERE a.query_pk = u.query_pk "
        "  AND a.state = 'leased' AND a.lease_expires >= ?)), 0), "
        "coalesce(sum(max(u.needed - u.done, 0)), 0), coalesce(sum(u.needed > 1), 0) FROM queue u",
        [at]).fetchone()
    items, done, leased, slots, overlap = row
    counts = {"items": items, "open": items - done - leased, "leased": leased, "done": done,
              "open_slots": slots, "overlap": overlap}
    for status in ("submitted", "skipped", "flagged", "discarded"):
        counts[status] = db.execute(
            "SELECT count(DISTINCT query_pk) FROM query_labels WHERE status = ?", [status]).fetchone()[0]
    counts["requeued"], counts["requeued_slots"] = db.execute(
        "SELECT count(DISTINCT query_pk), count(*) FROM requeued").fetchone()
    counts["pending_review"] = db.execute(
        "SELECT count(*) FROM queries WHERE origin = 'synthetic' "
        "AND coalesce(review_state, '') != 'accepted'").fetchone()[0]
    return counts
