"""The pool of a query: the chunks an annotator grades, the union of what every retriever logged.

As TREC builds its judgment pools: each retriever's ranking is cut at the pool depth (project
setting ``pool_depth``, default 10 per retriever) and the cut rankings are merged, each chunk once
(by chunk pk). The order is a deterministic round-robin: round 1 takes every retriever's first
chunk, round 2 their second, and so on; within a round the retrievers come in an order shuffled
by a seed derived from the query id (so no retriever's chunks always sit on top), and a chunk
already placed by an earlier retriever or round is not repeated (it keeps its first place and
lists every retriever that returned it). A retriever's ranking is read in rank order, ties by
chunk id (the store's key allows no equal ranks, so this only makes the function total); ranks
with gaps count by position, so the depth is "the retriever's first ``pool_depth`` chunks".

A grade belongs to (query, chunk, annotator), never to a retriever: one grade counts for every
retriever that returned the chunk.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

from .. import db as store
from ..accounts.settings import set_setting
from ..errors import LabelError

DEFAULT_POOL_DEPTH = 10


@dataclass(frozen=True)
class Source:
    """One retriever's placement of a pooled chunk."""

    retriever: str
    rank: int
    score: float | None


@dataclass
class PoolChunk:
    """A chunk of the pool, with every retriever that returned it (in the round-robin's order)."""

    doc_pk: int
    sources: list[Source] = field(default_factory=list)


def pool_depth(settings: dict[str, Any]) -> int:
    """The ``pool_depth`` setting, checked (a whole number >= 1)."""
    depth = settings.get("pool_depth", DEFAULT_POOL_DEPTH)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise LabelError(f"setting pool_depth={depth!r} must be a whole number >= 1 (e.g. 10)")
    return depth


def _order_key(query_id: str, retriever: str) -> bytes:
    return hashlib.blake2b(f"pool\x1f{query_id}\x1f{retriever}".encode(), digest_size=8).digest()


def retriever_order(query_id: str, retrievers: list[str]) -> list[str]:
    """The retrievers in the round-robin order of ``query_id`` (a seeded shuffle, the same every time)."""
    return sorted(retrievers, key=lambda r: (_order_key(query_id, r), r))


def merge(query_id: str, rows: list[tuple[str, int, int, str, float | None]], depth: int) -> list[PoolChunk]:
    """The pool from ``rows`` of (retriever, rank, doc_pk, doc_id, score); see the module doc. Pure."""
    rankings: dict[str, list[tuple[int, str, int, float | None]]] = {}
    for retriever, rank, doc_pk, doc_id, score in rows:
        rankings.setdefault(retriever, []).append((rank, doc_id, doc_pk, score))
    for ranking in rankings.values():
        ranking.sort(key=lambda x: (x[0], x[1]))
        del ranking[depth:]
    order = retriever_order(query_id, list(rankings))
    pooled: dict[int, PoolChunk] = {}
    for position in range(max((len(r) for r in rankings.values()), default=0)):
        for retriever in order:
            ranking = rankings[retriever]
            if position < len(ranking):
                rank, _, doc_pk, score = ranking[position]
                pooled.setdefault(doc_pk, PoolChunk(doc_pk)).sources.append(Source(retriever, rank, score))
    return list(pooled.values())


_ROWS_SQL = (f"SELECT r.retriever, r.rank, r.doc_pk, d.doc_id, r.score FROM retrievals r "
             f"JOIN documents d ON d.pk = r.doc_pk WHERE r.query_pk = ? AND {store.visible('r')}")


def query_pool(conn: Any, query_pk: int, query_id: str, depth: int, *,
               retriever: str | None = None) -> list[PoolChunk]:
    """The pool of one query, read with ``conn`` (a connection or database, inside a transaction or
    not); ``retriever``: that retriever's ranking only."""
    rows = conn.execute(_ROWS_SQL, [query_pk]).fetchall()
    if retriever is not None:
        rows = [r for r in rows if r[0] == retriever]
    return merge(query_id, rows, depth)


def pool(db: sqlite_utils.Database, query_pk: int, *, depth: int | None = None) -> list[PoolChunk]:
    """The pool of the query (pk) in display order: every retriever's top ``depth`` chunks (default:
    the ``pool_depth`` setting), each chunk once. Chunks added by search are not in it (see
    ``get_item``'s ``extra``)."""
    row = db.execute("SELECT query_id FROM queries WHERE pk = ?", [query_pk]).fetchone()
    if row is None:
        raise LabelError(f"query pk {query_pk!r} does not exist; take one from next_item() or history()")
    if depth is None:
        depth = pool_depth(store.get_settings(db))
    return query_pool(db, query_pk, row[0], depth)


_NEW_CHUNKS_SQL = """
SELECT DISTINCT n.query_pk, l.annotator FROM (
    SELECT r.query_pk, r.doc_pk, r.ingest_id,
           row_number() OVER (PARTITION BY r.query_pk, r.retriever ORDER BY r.rank) AS position
    FROM retrievals r WHERE r.query_pk IN (
        SELECT v.query_pk FROM query_versions v WHERE v.ingest_id = ?1 AND EXISTS (
            SELECT 1 FROM query_labels s WHERE s.query_pk = v.query_pk AND s.status = 'submitted'))
) n
JOIN query_labels l ON l.query_pk = n.query_pk AND l.status = 'submitted'
WHERE n.ingest_id = ?1 AND n.position <= ?2
  AND NOT EXISTS (SELECT 1 FROM relevance_labels g
                  WHERE g.query_pk = n.query_pk AND g.doc_pk = n.doc_pk AND g.annotator = l.annotator)
ORDER BY n.query_pk, l.annotator
"""

REQUEUE_CHUNK = 5000  # requeued rows written per transaction


def requeue_after_ingest(db: sqlite_utils.Database, ingest_id: int, *,
                         write: Callable[[], AbstractContextManager[Any]] | None = None) -> int:
    """Send back to the annotators who submitted them the queries to whose pool the committed
    ingest ``ingest_id`` added chunks they have not graded (another retriever's ranking, or new
    chunks within the pool depth); return how many (query, annotator) items went back.

    Their grades stay; ``next_item`` hands them the item again (before new items), ``get_item``
    marks the ungraded chunks ``new``, and submitting (or any other status) finishes it again.
    The candidates are read without a lock and written in short transactions (``write``, a
    context manager factory; default ``db.transaction``), so annotators never wait behind an ingest.
    """
    depth = pool_depth(store.get_settings(db))
    pairs = db.execute(_NEW_CHUNKS_SQL, [ingest_id, depth]).fetchall()
    at = store.now()
    for start in range(0, len(pairs), REQUEUE_CHUNK):
        with (write() if write is not None else store.transaction(db)):
            db.conn.executemany(
                "INSERT INTO requeued (query_pk, annotator, ingest_id, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (query_pk, annotator) DO UPDATE SET ingest_id = excluded.ingest_id",
                [(q, a, ingest_id, at) for q, a in pairs[start:start + REQUEUE_CHUNK]])
    return len(pairs)


def set_pool_settings(db: sqlite_utils.Database, *, pool_depth: int | None = None,
                      show_sources: bool | None = None, by: str | None = None) -> None:
    """Change the pool's settings (leads only, ``by`` as in ``accounts.settings.set_setting``): ``pool_depth``
    (chunks per retriever, a whole number >= 1) and ``show_sources`` (whether annotators see which
    retriever returned a chunk, at which rank and score; off = blind labeling)."""
    if pool_depth is not None and (isinstance(pool_depth, bool) or not isinstance(pool_depth, int)
                                   or not 1 <= pool_depth <= 1000):
        raise LabelError(f"pool depth {pool_depth!r} must be a whole number from 1 to 1000 (e.g. 10)")
    if show_sources is not None and not isinstance(show_sources, bool):
        raise LabelError(f"show sources {show_sources!r} must be true or false")
    for key, value in (("pool_depth", pool_depth), ("show_sources", show_sources)):
        if value is not None:
            set_setting(db, key, value, by=by)
