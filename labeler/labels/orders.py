"""Queue orders: the sort key each queued query gets under ``queue_order``, and how an order picks
and records a hand-out. The queue mechanics (slots, leases, overlap, sync) are in ``labels.queue``.

- **Order** (``queue_order``): ``random`` (seeded hash of the query id), ``oldest`` (first seen,
  as text), ``lowest_score`` (top-1 retrieval score of the default retriever, unscored last), ``frequent``
  (occurrences, descending), ``signals_first`` (unhappy questions first, then other signal-bearing
  ones, then the rest, see ``labeler.signals``; random within each tier), ``active`` (the
  newest active draw's drawn queries in a seeded random order, and nothing else:
  ``labeler.estimate.active``), ``stratified`` (topics filled in proportion to their traffic or
  a lead's targets, random within each topic: ``labeler.labels.strata``); ties by query pk.
- **Design**: every hand-out is recorded with the design it was drawn under and its inclusion
  probability (``labeler.labels.designs.record_handout``), so the all-traffic estimates know
  which labels form a probability sample.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from typing import Any

from ..retrievers import RetrieverError, default_retriever, logged_retrievers
from . import designs, strata

ORDERS = ("random", "oldest", "lowest_score", "frequent", "signals_first", "active", "stratified")
UNSCORED = 1e308

# a query's sort key from (pk, query_id, first seen, occurrences, top score, origin)
SortKey = Callable[[int, str, Any, int, Any, str], Any]


def seeded_hash(seed: Any, stream: str, query_id: str) -> int:
    digest = hashlib.blake2b(f"{seed}\x1f{stream}\x1f{query_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def fingerprint_extra(conn: sqlite3.Connection, order: str) -> list[Any]:
    """What, besides the queries and the queue settings, re-keys the queue under ``order``."""
    extra = [designs.latest_draw(conn)] if order == "active" else []  # a new draw re-keys the queue
    if order == "stratified":
        extra = [strata.fingerprint(conn)]  # a new topic model (or topics for new queries) re-keys it
    return extra


def sort_keys(conn: sqlite3.Connection, order: str, seed: Any) -> tuple[str, list[Any], SortKey]:
    """(score_sql, its parameters, key): the SQL column with a query ``q``'s top score (``NULL``
    unless the order needs it) and the function giving a query's sort key under ``order`` (reads only)."""
    score_sql = ("(SELECT r.score FROM retrievals r WHERE r.query_pk = q.pk AND r.retriever = ?1 "
                 "ORDER BY r.rank LIMIT 1)" if order == "lowest_score" else "NULL")
    tiers = signal_tiers(conn) if order == "signals_first" else {}
    drawn = designs.active_keys(conn) if order == "active" else {}
    topic = strata.query_strata(conn) if order == "stratified" else {}
    args = [score_retriever(conn)] if order == "lowest_score" else []

    def key(pk: int, query_id: str, seen: Any, occurrences: int, score: Any, origin: str) -> Any:
        if order == "random":
            return seeded_hash(seed, "order", query_id)
        if order == "oldest":
            return seen or ""
        if order == "lowest_score":
            return UNSCORED if score is None else score
        if order == "signals_first":
            return (tiers.get(pk, 2) << 61) + (seeded_hash(seed, "order", query_id) >> 2)
        if order == "active":
            return drawn.get(pk, UNSCORED)  # not drawn: last, and next_item does not hand it out
        if order == "stratified":
            return strata.sort_key(topic.get(pk, strata.UNASSIGNED) if origin == "log" else None,
                                   seeded_hash(seed, "order", query_id))
        return -occurrences

    return score_sql, args, key


def signal_tiers(conn: sqlite3.Connection) -> dict[int, int]:
    """{query pk: 0 unhappy, 1 other signal} for ``signals_first`` (queries without one are tier 2)."""
    from ..signals import signal_groups

    return {pk: 0 if g == "unhappy" else 1 for pk, g in signal_groups(conn).items()}  # type: ignore[arg-type]


def score_retriever(conn: sqlite3.Connection) -> str | None:
    """Whose top score orders ``lowest_score``: the default retriever (``labeler.retrievers``), or,
    when several logged rankings and none is the default, the first by name."""
    names = logged_retrievers(conn)
    try:
        return default_retriever(conn, known=names)
    except RetrieverError:
        return names[0] if names else None


def pick(conn: sqlite3.Connection, annotator: str, settings: dict[str, Any], order: str, next_sql: str,
         fingerprint: Callable[[], str]) -> tuple[int, int | None] | None:
    """(query pk, stratum) of the open item ``next_sql`` gives ``annotator`` under ``order``, or
    None: ``stratified`` fills topics by their share, ``active`` hands out drawn queries only."""
    stratum = None
    if order == "stratified":
        found = strata.next_in_order(conn, annotator, settings, next_sql, fingerprint())
        row, stratum = (None, None) if found is None else ((found[0],), found[1])
    else:
        row = conn.execute(next_sql, [annotator]).fetchone()
    if row is None or (order == "active" and not designs.is_drawn(conn, row[0])):
        return None
    return row[0], stratum


def record_handout(conn: sqlite3.Connection, query_pk: int, annotator: str, settings: dict[str, Any],
                   at: str, order: str, stratum: int | None) -> None:
    """Record the design ``query_pk`` was handed out under (``labeler.labels.designs``)."""
    designs.record_handout(conn, query_pk, annotator, settings, at, stratum=stratum,
                           topic_model=strata.model_id(conn) if order == "stratified" else None)
