"""Planning the labeling queue: which queries are queued, in what order, and which need overlap.

Rules (the leasing rules are in ``labeler.labels.queue``):

- **Overlap**: ``k = floor(overlap_fraction * N + 0.5)`` of the N queued items need
  ``overlap_annotators`` annotators, the rest one. The first build picks the k items with the
  smallest seeded hash of their ``query_id`` (``queue_seed``); later syncs (new queries, another
  ``overlap_fraction``) keep the chosen items and add or drop items in hash order to keep exactly
  k, so the choice stays the k smallest hashes as long as the set only grows. A new
  ``queue_seed`` re-picks from scratch. A target never drops below the annotators already holding
  the item.
- **What is queued**: logged and imported queries; synthetic queries only once their
  ``review_state`` is ``accepted``; never a query a lead discarded (``labels.desk``), nor a live
  query the routing rules left out (``labels.routing``). ``sync_queue`` adds what is missing; ``next_item``,
  ``progress`` and ``queue_counts`` call it, and it only does work when the queries, an ingest,
  the accepted synthetic set or a queue setting changed since the last sync.
"""

from __future__ import annotations

import sqlite3
from typing import Any, NamedTuple

import sqlite_utils

from .. import db as store
from ..errors import LabelError
from . import orders, routing
from .orders import ORDERS, seeded_hash


class QueueSync(NamedTuple):
    """What one ``sync_queue`` call changed (all zero when the queue was up to date)."""

    added: int = 0
    removed: int = 0
    rekeyed: int = 0
    retargeted: int = 0


def queue_params(settings: dict[str, Any]) -> dict[str, Any]:
    order = settings.get("queue_order")
    if order not in ORDERS:
        raise LabelError(f"setting queue_order={order!r} is unknown; use one of: {', '.join(ORDERS)}")
    fraction = settings.get("overlap_fraction")
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 <= fraction <= 1:
        raise LabelError(f"setting overlap_fraction={fraction!r} must be a number from 0 to 1 (e.g. 0.1)")
    annotators = settings.get("overlap_annotators")
    if isinstance(annotators, bool) or not isinstance(annotators, int) or annotators < 1:
        raise LabelError(f"setting overlap_annotators={annotators!r} must be a whole number >= 1 (e.g. 2)")
    return {"order": order, "seed": settings.get("queue_seed"), "fraction": fraction,
            "annotators": annotators}


def queue_fingerprint(conn: sqlite3.Connection, params: dict[str, Any]) -> str:
    # queries of an ingest still being written are not queued (nor counted here) until it commits
    row = conn.execute(
        "SELECT (SELECT max(pk) FROM queries WHERE pk < (SELECT coalesce(min(first_query_pk), 1e18) FROM ingests "
        " WHERE state = 'staging')), (SELECT max(id) FROM ingests WHERE state = 'done'), "
        "(SELECT count(*) || ':' || total(pk) FROM queries "
        " WHERE origin = 'synthetic' AND review_state = 'accepted')").fetchone()
    return store.dumps([list(row), params, *orders.fingerprint_extra(conn, params["order"]),
                        *routing.fingerprint(conn)])


def _meta(conn: sqlite3.Connection, key: str) -> Any:
    row = conn.execute("SELECT value FROM queue_meta WHERE key = ?", [key]).fetchone()
    return store.loads(row[0]) if row else None


def _set_meta(conn: sqlite3.Connection, key: str, value: Any) -> None:
    conn.execute("INSERT INTO queue_meta (key, value) VALUES (?, ?) "
                 "ON CONFLICT (key) DO UPDATE SET value = excluded.value", [key, store.dumps(value)])


def sync_queue(db: sqlite_utils.Database, *, force: bool = False, if_planned: bool = False) -> QueueSync:
    """Bring the queue up to date with the queries and the queue settings; see the module doc.

    Cheap (a few index lookups) when nothing changed; ``force=True`` rebuilds regardless (e.g.
    after changing a synthetic query's review state in a way the change check cannot see).
    ``if_planned=True`` does nothing while no queue was ever planned (an ingest keeps a queue
    in use current; the first ``next_item`` plans a new one).
    """
    conn = db.conn
    if if_planned and _meta(conn, "fingerprint") is None:
        return QueueSync()
    params = queue_params(store.get_settings(db))
    fingerprint = queue_fingerprint(conn, params)
    if not force and _meta(conn, "fingerprint") == fingerprint:
        return QueueSync()
    # planned outside the write lock and written in short transactions (a big ingest can bring
    # 100k new items: one long transaction would make every annotator's write wait behind it)
    prev = _meta(conn, "params") or {}
    arrived = None if force else _arrivals(conn, params, fingerprint)
    if arrived is not None:
        return _sync_arrivals(db, params, fingerprint, arrived)
    added, rekey, removed = _plan(conn, params)
    for start in range(0, max(len(added), len(rekey)), SYNC_CHUNK):
        with store.transaction(db):
            conn.executemany("INSERT OR IGNORE INTO queue (query_pk, sort_key, overlap_key) VALUES (?, ?, ?)",
                             added[start:start + SYNC_CHUNK])
            conn.executemany("UPDATE queue SET sort_key = ?, overlap_key = ? WHERE query_pk = ?",
                             rekey[start:start + SYNC_CHUNK])
    restart = not ("seed" in prev and prev["seed"] == params["seed"])
    gone_pks = {pk for (pk,) in removed}
    # the overlap targets too are worked out before taking the lock (reading 100k rows takes a while)
    targets = [c for c in _retarget_changes(conn, params, restart=restart) if c[2] not in gone_pks] \
        if not removed else None
    for start in range(0, len(targets or ()), SYNC_CHUNK):
        with store.transaction(db):
            _apply_targets(conn, targets[start:start + SYNC_CHUNK])
    items = conn.execute("SELECT count(*) FROM queue").fetchone()[0]
    with store.transaction(db):
        if not force and _meta(conn, "fingerprint") == fingerprint:
            return QueueSync(len(added), 0, len(rekey), 0)  # another process finished it meanwhile
        if (queue_fingerprint(conn, params) != fingerprint or (_meta(conn, "params") or {}) != prev
                or conn.execute("SELECT count(*) FROM queue").fetchone()[0] != items):
            return sync_planned(conn, params, force=True)  # changed meanwhile: plan again under the lock
        # only unstarted items leave the queue
        gone = sum(conn.execute("DELETE FROM queue WHERE query_pk = ? AND taken = 0", r).rowcount for r in removed)
        retargeted = len(targets) if targets is not None else _retarget(conn, params, restart=restart)
        _set_meta(conn, "items", items - gone)
        _set_meta(conn, "params", params)
        _set_meta(conn, "fingerprint", fingerprint)
    return QueueSync(len(added), gone, len(rekey), retargeted)


SYNC_CHUNK = 5000  # queue rows added per transaction when many arrive at once


def _arrivals(conn: sqlite3.Connection, params: dict[str, Any], fingerprint: str) -> list[tuple] | None:
    """The queue rows of the queries that arrived since the last sync, when nothing else changed
    that the queue depends on (the settings, the accepted synthetic set, what re-keys the order)
    and the order's key of a query depends on its id alone (``random``); else None (plan it all).
    After each ingest of a live log the full plan reads every query and queue row: 2.1 s of CPU at
    500k queries, paid by the next annotator's Enter; this reads the new ones (reads only)."""
    before, now = store.loads(_meta(conn, "fingerprint")), store.loads(fingerprint)
    if params["order"] != "random" or before is None or (_meta(conn, "params") or {}) != params:
        return None
    (max_before, _, synthetic_before), (max_now, _, synthetic_now) = before[0], now[0]
    if before[1:] != now[1:] or synthetic_before != synthetic_now or max_before is None \
            or max_now is None or max_now < max_before:
        return None
    seed = params["seed"]
    return [(pk, seeded_hash(seed, "order", query_id), seeded_hash(seed, "overlap", query_id))
            for pk, query_id in conn.execute(
                "SELECT q.pk, q.query_id FROM queries q WHERE q.pk > ? AND (q.origin != 'synthetic' "
                "OR q.review_state = 'accepted') AND q.discarded_at IS NULL AND " + store.visible("q")
                + " AND " + routing.LEFT_OUT_SQL + " AND NOT EXISTS (SELECT 1 FROM queue u WHERE u.query_pk = q.pk)", [max_before])]


def _joining(conn: sqlite3.Connection, params: dict[str, Any]) -> tuple[tuple, list[int]] | None:
    """((items, overlap items), the items that join the overlap share): with rows only added since
    the last full plan, the module doc's rule keeps the chosen and adds the smallest overlap hashes
    of the rest up to k, as the full plan does; None when members must leave (settings changed)."""
    counts = conn.execute("SELECT count(*), total(overlap) FROM queue").fetchone()
    k = int(params["fraction"] * counts[0] + 0.5) if params["annotators"] > 1 else 0
    if counts[1] > k:
        return None
    if counts[1] == k:
        return counts, []
    return counts, [pk for (pk,) in conn.execute("SELECT query_pk FROM queue WHERE overlap = 0 "
                                                 "ORDER BY overlap_key, query_pk LIMIT ?", [k - int(counts[1])])]


def _arrived(conn: sqlite3.Connection, params: dict[str, Any], fingerprint: str, joining: list[int],
             added: int) -> QueueSync:
    retargeted = _apply_targets(conn, [(1, params["annotators"], pk) for pk in joining])
    _set_meta(conn, "items", conn.execute("SELECT count(*) FROM queue").fetchone()[0])
    _set_meta(conn, "params", params)
    _set_meta(conn, "fingerprint", fingerprint)
    return QueueSync(added, 0, 0, retargeted)


_ADD = "INSERT OR IGNORE INTO queue (query_pk, sort_key, overlap_key) VALUES (?, ?, ?)"


def _sync_arrivals(db: sqlite_utils.Database, params: dict[str, Any], fingerprint: str,
                   arrived: list[tuple]) -> QueueSync:
    """Add ``arrived`` (see ``_arrivals``) in short transactions, then the overlap share (``_joining``,
    read outside the lock and checked again under it)."""
    conn = db.conn
    for start in range(0, len(arrived), SYNC_CHUNK):
        with store.transaction(db):
            conn.executemany(_ADD, arrived[start:start + SYNC_CHUNK])
    join = _joining(conn, params)
    with store.transaction(db):
        if join is None or queue_fingerprint(conn, params) != fingerprint or \
                conn.execute("SELECT count(*), total(overlap) FROM queue").fetchone() != join[0]:
            return sync_planned(conn, params, force=True)  # changed meanwhile: plan again under the lock
        return _arrived(conn, params, fingerprint, join[1], len(arrived))


def _plan(conn: sqlite3.Connection, params: dict[str, Any]) -> tuple[list, list, list]:
    """(added, rekey, removed): the queue rows to insert, re-key and delete (reads only)."""
    order, seed = params["order"], params["seed"]
    have = {r[0]: r[1:] for r in conn.execute(
        "SELECT query_pk, sort_key, overlap_key, overlap, needed, taken FROM queue")}
    # hashes of queued rows are reused while the seed (and, for sort keys, the order) is unchanged
    prev = _meta(conn, "params") or {}
    reuse_overlap = "seed" in prev and prev["seed"] == seed
    reuse_order = reuse_overlap and order == prev.get("order") == "random"
    wanted: dict[int, tuple[Any, int]] = {}
    score_sql, args, sort_key = orders.sort_keys(conn, order, seed)
    for pk, query_id, seen, occurrences, score, origin in conn.execute(
        f"SELECT q.pk, q.query_id, coalesce(q.first_seen, q.created_at), q.occurrences, {score_sql}, q.origin "
        f"FROM queries q WHERE (q.origin != 'synthetic' OR q.review_state = 'accepted') "
        f"AND q.discarded_at IS NULL AND {store.visible('q')} AND {routing.LEFT_OUT_SQL}", args
    ):
        old = have.get(pk)
        # reuse_order: only under ``random``, whose key depends on the seed and query id alone
        key = old[0] if reuse_order and old else sort_key(pk, query_id, seen, occurrences, score, origin)
        wanted[pk] = (key, old[1] if reuse_overlap and old else seeded_hash(seed, "overlap", query_id))
    added = [(pk, k, ok) for pk, (k, ok) in wanted.items() if pk not in have]
    rekey = [(k, ok, pk) for pk, (k, ok) in wanted.items()
             if pk in have and (have[pk][0], have[pk][1]) != (k, ok)]
    # a query that left the queue (e.g. a synthetic question no longer accepted) goes only if unstarted
    removed = [(pk,) for pk, row in have.items() if pk not in wanted and row[4] == 0]
    return added, rekey, removed


def sync_planned(conn: sqlite3.Connection, params: dict[str, Any], *, force: bool = False) -> QueueSync:
    fingerprint = queue_fingerprint(conn, params)
    if not force and _meta(conn, "fingerprint") == fingerprint:
        return QueueSync()
    arrived = None if force else _arrivals(conn, params, fingerprint)
    if arrived is not None:
        conn.executemany(_ADD, arrived)
        join = _joining(conn, params)
        if join is not None:
            return _arrived(conn, params, fingerprint, join[1], len(arrived))
    prev = _meta(conn, "params") or {}
    reuse_overlap = "seed" in prev and prev["seed"] == params["seed"]
    added, rekey, removed = _plan(conn, params)
    items = conn.execute("SELECT count(*) FROM queue").fetchone()[0]
    conn.executemany("INSERT INTO queue (query_pk, sort_key, overlap_key) VALUES (?, ?, ?)", added)
    conn.executemany("UPDATE queue SET sort_key = ?, overlap_key = ? WHERE query_pk = ?", rekey)
    conn.executemany("DELETE FROM queue WHERE query_pk = ?", removed)
    retargeted = _retarget(conn, params, restart=not reuse_overlap)
    _set_meta(conn, "items", items + len(added) - len(removed))
    _set_meta(conn, "params", params)
    _set_meta(conn, "fingerprint", fingerprint)
    return QueueSync(len(added), len(removed), len(rekey), retargeted)


def _retarget_changes(conn: sqlite3.Connection, params: dict[str, Any], *, restart: bool) -> list[tuple]:
    """The (overlap, needed, query_pk) changes that keep exactly k overlap items (see module doc)."""
    rows = conn.execute("SELECT query_pk, overlap_key, overlap, needed, taken FROM queue "
                        "ORDER BY overlap_key, query_pk").fetchall()
    n_annotators = params["annotators"]
    k = int(params["fraction"] * len(rows) + 0.5) if n_annotators > 1 else 0
    chosen = [] if restart else [r[0] for r in rows if r[2]]
    if len(chosen) > k:
        chosen = chosen[:k]  # rows are in hash order: drop the largest hashes
    elif len(chosen) < k:
        members = set(chosen)
        chosen += [r[0] for r in rows if r[0] not in members][:k - len(chosen)]
    members = set(chosen)
    changes = []
    for pk, _, overlap, needed, taken in rows:
        member = pk in members
        target = max(n_annotators if member else 1, taken)
        if (bool(overlap), needed) != (member, target):
            changes.append((int(member), target, pk))
    return changes


def _apply_targets(conn: sqlite3.Connection, changes: list[tuple]) -> int:
    # never below what is taken: an annotator may have leased the item since the plan was made
    conn.executemany("UPDATE queue SET overlap = ?, needed = max(?, taken) WHERE query_pk = ?", changes)
    return len(changes)


def _retarget(conn: sqlite3.Connection, params: dict[str, Any], *, restart: bool) -> int:
    """Keep exactly k overlap items; return how many targets changed."""
    return _apply_targets(conn, _retarget_changes(conn, params, restart=restart))
