"""The steps of an ingest's undo that write in short transactions (``labeler.ingest.undo``): the
plan's read snapshot, the hand-over to other ingests, and the removal in chunks. Each transaction
holds the write lock for a few hundredths of a second at 100k queries, and each step is planned
from what is left, so a rerun after a kill finishes the job."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import sqlite_utils

from .. import db as store

if TYPE_CHECKING:
    from .undo_result import UndoResult

CHUNK_QUERIES = 500  # removed queries per transaction of an undo (their labels, rankings, log rows)
CHUNK_ROWS = 5000  # rankings or documents per transaction of an undo


@contextlib.contextmanager
def snapshot(conn) -> Iterator[None]:
    """A read transaction: one consistent view of the database for the plan, without the write
    lock (the plan writes temp tables only, which are this connection's)."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def hand_over(db: sqlite_utils.Database, ingest_id: int, kept: list, handed: list) -> dict[int, list]:
    """Hand over to other ingests the rows they logged too, lower the occurrences of the queries
    that stay and drop this ingest's log lines, a few hundred queries per transaction: each
    query's changes commit together, so a rerun after a kill (planned from what is left: its
    log lines are gone) never subtracts twice. Returns the log line keys of the queries to remove,
    by query (``remove_in_chunks`` deletes them by key: log lines have no index by query)."""
    conn = db.conn
    lines: dict[int, list] = {}
    removed = {r[0] for r in conn.execute("SELECT pk FROM temp.undo_queries")}
    for key, pk, line_ingest in conn.execute("SELECT line_key, query_pk, ingest_id FROM log_lines WHERE "
                                             "ingest_id = ? OR query_pk IN (SELECT pk FROM temp.undo_queries)",
                                             [ingest_id]):
        if line_ingest == ingest_id or pk in removed:
            lines.setdefault(pk, []).append((key,))
    kept_by = {pk: (other, pk) for other, pk in kept}
    handed_by: dict[int, list] = {}
    for other, pk, retriever in handed:
        handed_by.setdefault(pk, []).append((other, pk, retriever))
    staying = sorted({pk for pk in lines if pk not in removed} | set(kept_by) | set(handed_by))
    for i in range(0, len(staying), CHUNK_QUERIES):
        part = staying[i:i + CHUNK_QUERIES]
        with _short(db):
            conn.executemany("UPDATE queries SET ingest_id = ? WHERE pk = ?", [kept_by[p] for p in part if p in kept_by])
            versions = [v for p in part for v in handed_by.get(p, [])]
            conn.executemany("UPDATE query_versions SET ingest_id = ?1 WHERE query_pk = ?2 AND retriever = ?3", versions)
            conn.executemany("UPDATE retrievals SET ingest_id = ?1 WHERE query_pk = ?2 AND retriever = ?3", versions)
            # occurrences of the queries that stay: minus this ingest's lines (less those not yet applied)
            conn.execute(
                "UPDATE queries SET occurrences = max(1, occurrences - l.mine + coalesce((SELECT o.occurrences FROM "
                "ingest_occurrences o WHERE o.ingest_id = ?1 AND o.query_pk = queries.pk), 0)) "
                "FROM temp.undo_lines l WHERE l.query_pk = queries.pk AND l.mine > 0 "
                "AND queries.pk IN (SELECT value FROM json_each(?2))", [ingest_id, store.dumps(part)])
            conn.executemany("DELETE FROM log_lines WHERE line_key = ?", [k for p in part for k in lines.get(p, [])])
            conn.execute("DELETE FROM ingest_occurrences WHERE ingest_id = ? AND query_pk IN "
                         "(SELECT value FROM json_each(?))", [ingest_id, store.dumps(part)])
    return {pk: keys for pk, keys in lines.items() if pk in removed}


def remove_in_chunks(db: sqlite_utils.Database, result: UndoResult, lines: dict[int, list]) -> None:
    """``_remove`` for an undo: the same rows, deleted in short transactions (each well under the
    write lock's target), queries first (each with everything naming it), then the rankings it
    added to queries that stay, then the documents; the rows are hidden meanwhile (``undoing``)."""
    conn = db.conn
    tables = [t for t in query_tables(conn) if t != "log_lines"]  # (by key, below: no index by query)
    pks = [r[0] for r in conn.execute("SELECT pk FROM temp.undo_queries ORDER BY pk")]
    labels = 0
    for i in range(0, len(pks), CHUNK_QUERIES):
        part = store.dumps(pks[i:i + CHUNK_QUERIES])
        in_part = "query_pk IN (SELECT value FROM json_each(?))"
        with _short(db):
            for table in ("query_labels", "relevance_labels", "adjudications"):
                labels += conn.execute(f"DELETE FROM {table} WHERE {in_part}", [part]).rowcount
            for table in tables:
                conn.execute(f"DELETE FROM [{table}] WHERE {in_part}", [part])
            conn.executemany("DELETE FROM log_lines WHERE line_key = ?",
                             [k for p in pks[i:i + CHUNK_QUERIES] for k in lines.get(p, [])])
            versions = conn.execute(f"SELECT query_pk, retriever FROM query_versions WHERE {in_part}",
                                    [part]).fetchall()
            conn.executemany("DELETE FROM retrievals WHERE query_pk = ? AND retriever = ?", versions)
            conn.executemany("DELETE FROM query_versions WHERE query_pk = ? AND retriever = ?", versions)
            conn.execute("DELETE FROM queries WHERE pk IN (SELECT value FROM json_each(?))", [part])
    result.labels_removed = labels
    versions = conn.execute("SELECT query_pk, retriever FROM temp.undo_versions WHERE query_pk NOT IN "
                            "(SELECT pk FROM temp.undo_queries)").fetchall()
    for i in range(0, len(versions), CHUNK_ROWS // 10):
        with _short(db):
            conn.executemany("DELETE FROM retrievals WHERE query_pk = ? AND retriever = ?", versions[i:i + CHUNK_ROWS // 10])
            conn.executemany("DELETE FROM query_versions WHERE query_pk = ? AND retriever = ?",
                             versions[i:i + CHUNK_ROWS // 10])
    conn.execute("DELETE FROM temp.undo_docs WHERE pk IN (SELECT pk FROM temp.undo_used)")
    # the ones that stay pass to the first ingest whose rankings use them, or to none (read in one
    # pass over the rankings without the lock: other ingests wait for this undo)
    first = dict(conn.execute("SELECT doc_pk, min(ingest_id) FROM retrievals WHERE doc_pk IN "
                              "(SELECT pk FROM temp.undo_used) GROUP BY doc_pk").fetchall())
    used = [(first.get(r[0]), r[0], result.ingest_id) for r in conn.execute("SELECT pk FROM temp.undo_used")]
    for i in range(0, len(used), CHUNK_ROWS):
        with _short(db):
            conn.executemany("UPDATE documents SET ingest_id = ? WHERE pk = ? AND ingest_id = ?", used[i:i + CHUNK_ROWS])
    docs = [r[0] for r in conn.execute("SELECT pk FROM temp.undo_docs ORDER BY pk")]
    removed = 0
    for i in range(0, len(docs), CHUNK_ROWS):
        part = store.dumps(docs[i:i + CHUNK_ROWS])
        with _short(db):
            for table in ("ingest_texts", "embeddings"):
                conn.execute(f"DELETE FROM {table} WHERE doc_pk IN (SELECT value FROM json_each(?))", [part])
            removed += conn.execute("DELETE FROM documents WHERE pk IN (SELECT value FROM json_each(?))",
                                    [part]).rowcount
    result.documents_removed = removed
    more = True
    while more:  # the search index forgets them (store.index_pending: short transactions too)
        with _short(db):
            more = store.index_pending(conn)


@contextlib.contextmanager
def _short(db: sqlite_utils.Database) -> Iterator[None]:
    """One of an undo's short write transactions (foreign keys unchecked: children go first), a
    bulk write (``db.bulk_writes``: a writer already waiting goes first), then a pause longer than
    a waiting writer's poll, so that annotators' saves get in between."""
    with store.bulk_writes(db), store.transaction(db, check_foreign_keys=False):
        yield
    time.sleep(store.POLL_MAX_S)


#: Tables whose rows of a removed query go another way: the labels (counted first) and the rankings
#: (by primary key).
_SPECIAL = {"query_labels", "relevance_labels", "adjudications", "retrievals", "query_versions"}


def query_tables(conn) -> list[str]:
    """Every table with a ``query_pk`` column but the special ones. Found, not listed: a table
    added later (a queue design, a topic, a flag's resolution) must not keep rows of a removed
    query, whose key a new query may take again (foreign keys are off during the removal)."""
    names = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    return [t for t in names if t not in _SPECIAL
            and any(c[1] == "query_pk" for c in conn.execute(f"PRAGMA table_info([{t}])"))]
