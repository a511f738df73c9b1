"""Listing ingests and undoing one; removing single bad queries.

What an ingest brought, and so what its undo removes (every row an ingest writes carries its
``ingest_id``, see ``staging``):

- **Queries** it created, unless another ingest logged them too (that ingest has log lines or a
  retriever's ranking of its own for the query): such a query stays and passes to that ingest.
- **Rankings** (``query_versions`` and their ``retrievals``) it added, also to queries that were
  already there. A ranking it created that another ingest logged again line for line (same
  question, retriever and chunks, without a query id) stays and passes to that ingest.
- **Occurrences**: the log lines it added are removed and the query's ``occurrences`` go down by
  as many. ``first_seen`` / ``last_seen`` / ``answer`` of a query that stays are left as they are
  (the times of single lines are not stored).
- **Documents** it created, unless anything else still uses them (another ranking, a grade, an
  adjudication, a judge label or suggestion, a synthetic question's seed): those stay and pass to
  an ingest that uses them. Text an ingest filled into a document that existed before stays.
- The search index forgets the removed documents in the same transaction; the queue, leases,
  re-queues and grade streams of removed queries go with them, so no one is handed a removed item.

Labels: when a query to be removed has human labels (a status, a grade or an adjudication), the undo
is refused with one line naming the queries, unless ``force=True``, which removes those labels
(and their ``label_events`` history: a removed query's number may be given to a new query later)
together with the queries; the audit event counts what was removed. Judge labels, tags and
suggestions of removed queries are removed without asking (they are derived and can be rerun).

Undoing writes in short transactions, so annotators' saves never wait long (the longest about
0.15 s at 100k queries; ``tests/bench/bench_undo.py``), leads only:

1. one transaction marks the ingest ``undoing`` (stored as state ``staging`` with ``undone_at``
   set): from then on readers hide its rows as they hide a running ingest's (``db.visible``), and
   a new ingest waits for the undo;
2. the plan is read from one snapshot without the write lock (temp tables); with labels and
   without ``force`` the undo is refused and the mark taken back;
3. one transaction hands over to other ingests what they logged too, lowers the occurrences of the
   queries that stay and drops this ingest's log lines;
4. the rows go in chunks (a few hundred queries with everything naming them, a few thousand
   rankings or documents per transaction), then the search index forgets the documents;
5. one transaction marks the ingest undone and writes the audit event.

If the process is killed half-way, the ingest stays ``undoing`` (``labeler ingest list``) with
its remaining rows hidden, and ``labeler ingest undo ID`` again finishes it: each step is planned
from what is left (a labeled query left over needs ``--force`` again). Labels someone saved on a
hidden item while the undo ran go with it. A second undo of an undone ingest changes nothing and
says it was already undone. An ingest that only repeated rows already stored (an identical
re-ingest) brought nothing, so its undo removes nothing. ``remove_queries`` (a few queries) is one
transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlite_utils

from .. import db as store
from .. import owners
from ..accounts.manage import audit, local_operator, require
from ..errors import LabelerError
from .staging import mine, mine_lock
from .undo_result import UndoResult
from .undo_steps import hand_over, query_tables, remove_in_chunks, snapshot

SHOWN = 5  # labeled queries named in a refusal
UNDOABLE = ("logs", "corpus")  # kinds of ingest whose rows carry its id (a golden import's do not)


class UndoRefused(LabelerError):
    """The rows to remove have human labels and ``force`` was not given."""

    def __init__(self, message: str, labeled: list[str]):
        super().__init__(message)
        self.labeled = labeled


# --- listing -----------------------------------------------------------------------------------

@dataclass
class IngestInfo:
    """One ingest as ``labeler ingest list`` shows it."""

    id: int
    kind: str
    path: str
    sha256: str
    format: str
    created_at: str
    finished_at: str | None
    by: str | None
    state: str  # running, done, undoing (an undo under way or interrupted) or undone
    queries: int  # queries it created (a corpus ingest creates none)
    retrievals: int
    documents: int  # documents it created
    skipped: int
    counts: dict[str, Any] = field(default_factory=dict)  # everything the ingest reported
    undone_at: str | None = None
    undone_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_ingests(db: sqlite_utils.Database) -> list[IngestInfo]:
    """Every ingest, oldest first, with who ran it (from the audit trail), its state and counts."""
    rows = db.execute(
        "SELECT i.id, i.kind, i.path, i.sha256, i.format, i.created_at, i.finished_at, "
        "(SELECT a.actor FROM audit_events a WHERE a.action = 'ingest_' || i.kind AND a.target = i.path "
        " AND a.at >= coalesce(i.finished_at, i.created_at) ORDER BY a.at LIMIT 1), "
        "i.state, i.counts, i.undone_at, i.undone_by FROM ingests i ORDER BY i.id").fetchall()
    out = []
    for (ingest_id, kind, path, sha, fmt, created, finished, by, state, counts, undone_at, undone_by) in rows:
        c = store.loads(counts) or {}
        shown = ("undoing" if undone_at and state == "staging" else "undone" if undone_at else
                 "running" if state == "staging" else "done")
        out.append(IngestInfo(
            ingest_id, kind, path, sha, fmt, created, finished, by, shown,
            queries=0 if kind == "corpus" else int(c.get("new", 0)), retrievals=int(c.get("retrievals", 0)),
            documents=int(c.get("documents_new", 0)), skipped=int(c.get("skipped", 0)), counts=c,
            undone_at=undone_at, undone_by=undone_by))
    return out


def ingest_id_of(db: sqlite_utils.Database, path: str) -> int | None:
    """The id of the latest ingest that stored ``path`` as its file's name (``ingests.path``), if any."""
    row = db.execute("SELECT max(id) FROM ingests WHERE path = ?", [path]).fetchone()
    return row[0] if row else None


# --- undo --------------------------------------------------------------------------------------

def undo_ingest(db: sqlite_utils.Database, ingest_id: int, *, force: bool = False, by: str | None = None,
                dry_run: bool = False) -> UndoResult:
    """Remove what ingest ``ingest_id`` brought (see the module doc) in short transactions; leads
    only (``by``, the signed-in account; ``None`` is the local operator). Raises ``UndoRefused``
    when queries to remove have labels and ``force`` is false. ``dry_run`` counts without writing
    (and does not refuse: ``labeled_queries`` names the labeled ones). Undoing an ingest whose
    undo was interrupted (state ``undoing``) finishes it."""
    require(db, by, "lead", f"undoing ingest {ingest_id}")
    conn = db.conn
    row = conn.execute("SELECT state, undone_at, path, kind FROM ingests WHERE id = ?", [ingest_id]).fetchone()
    if row is None:
        raise LabelerError(f"there is no ingest {ingest_id}; `labeler ingest list` shows the ingests")
    state, undone_at, path, kind = row
    if undone_at is not None and state == "done":
        return UndoResult(ingest_id, already_undone=True, dry_run=dry_run)
    if kind not in UNDOABLE:
        raise LabelerError(f"ingest {ingest_id} ({path}) is a {kind} import, whose rows do not record it, so it "
                           "cannot be undone; remove its queries with `labeler queries remove`")
    resuming = undone_at is not None  # an undo that was interrupted: this one finishes it
    if state == "staging" and not resuming:
        raise LabelerError(f"ingest {ingest_id} ({path}) is still running; undo it once it has finished")
    if dry_run:
        with snapshot(conn):  # (a consistent count without the write lock; nothing is written)
            _temp_tables(conn)
            result = UndoResult(ingest_id, dry_run=True)
            _plan_ingest(conn, ingest_id, result)
            _drop_temp(conn)
        return result
    if not resuming and not _mark_undoing(db, ingest_id, by):
        return UndoResult(ingest_id, already_undone=True)
    with mine_lock:
        mine.add(ingest_id)  # (another thread's ingest must not take it for an orphan)
    try:
        return _finish(db, ingest_id, path, force=force, by=by, fresh=not resuming)
    finally:
        with mine_lock:
            mine.discard(ingest_id)


def _mark_undoing(db: sqlite_utils.Database, ingest_id: int, by: str | None) -> bool:
    """Step 1, one short transaction: the ingest becomes ``undoing`` (stored as state ``staging``
    with ``undone_at`` set), so readers hide its rows (``db.visible``) and other ingests wait for
    the undo (``staging.claim``). False when another undo got there first."""
    with store.transaction(db):
        return db.conn.execute(
            "UPDATE ingests SET state = 'staging', undone_at = ?, undone_by = ?, owner = ? "
            "WHERE id = ? AND undone_at IS NULL AND state = 'done'",
            [store.now(), by if by is not None else local_operator(), owners.current(),
             ingest_id]).rowcount > 0


def _finish(db: sqlite_utils.Database, ingest_id: int, path: str, *, force: bool, by: str | None,
            fresh: bool) -> UndoResult:
    """Steps 2-5 of an undo marked ``undoing``: plan (reads only), refuse or hand over, delete in
    chunks, then mark it undone. Each step can be run again after a kill: the plan is made from
    what is left."""
    conn = db.conn
    result = UndoResult(ingest_id)
    with snapshot(conn):
        _temp_tables(conn)
        kept, handed = _plan_ingest(conn, ingest_id, result)
    if result.labeled_queries and not force:
        _drop_temp(conn)
        if fresh:  # nothing was removed yet: the ingest is back as it was
            with store.transaction(db):
                conn.execute("UPDATE ingests SET state = 'done', undone_at = NULL, undone_by = NULL WHERE id = ?",
                             [ingest_id])
        _check_labels(conn, result, force=False, dry_run=False,
                      what=f"ingest {ingest_id} ({path})" + ("" if fresh else " (an unfinished undo)"))
    lines = hand_over(db, ingest_id, kept, handed)
    remove_in_chunks(db, result, lines)
    with store.transaction(db):
        for table in ("ingest_occurrences", "ingest_texts", "requeued"):  # (small: applied at publish)
            conn.execute(f"DELETE FROM {table} WHERE ingest_id = ?", [ingest_id])
        at = store.now()
        conn.execute("UPDATE ingests SET state = 'done', undone_at = ?, undone_by = ? WHERE id = ?",
                     [at, by if by is not None else local_operator(), ingest_id])
        # the queue plans again at its next sync (its item count and overlap targets changed)
        conn.execute("DELETE FROM queue_meta WHERE key = 'fingerprint'")
        audit(conn, at, by, "ingest_undo", f"{ingest_id} {path}", _detail(result))
    _drop_temp(conn)
    return result


def remove_queries(db: sqlite_utils.Database, query_ids: Iterable[str], *, force: bool = False,
                   by: str | None = None, dry_run: bool = False) -> UndoResult:
    """Remove single queries (by their public ids) with their rankings, log lines and the documents
    nothing else uses (corpus documents stay), in one transaction; leads only. The same label rule
    as ``undo_ingest``: refused when any has labels, unless ``force``."""
    ids = list(dict.fromkeys(str(q) for q in query_ids))
    if not ids:
        raise LabelerError("name at least one query id to remove (e.g. labeler queries remove q-1234)")
    require(db, by, "lead", "removing queries")
    conn = db.conn
    # foreign keys are not checked row by row: children are deleted first, and the checks would scan
    # tables without an index on the key (log_lines, retrievals by document) once per deleted row
    with store.transaction(db, check_foreign_keys=False):
        _temp_tables(conn)
        conn.executemany("INSERT OR IGNORE INTO temp.undo_queries (pk) SELECT pk FROM queries WHERE query_id = ?",
                         [(q,) for q in ids])
        found = {r[0] for r in conn.execute(
            "SELECT q.query_id FROM queries q JOIN temp.undo_queries u ON u.pk = q.pk")}
        missing = [q for q in ids if q not in found]
        if missing:
            _drop_temp(conn)
            raise LabelerError(f"unknown query id(s): {_names(missing)}; nothing was removed "
                               "(check the ids: `labeler export --format jsonl -o -` lists them)")
        result = UndoResult(None, dry_run=dry_run)
        conn.execute("INSERT OR IGNORE INTO temp.undo_versions (query_pk, retriever) "
                     "SELECT v.query_pk, v.retriever FROM query_versions v JOIN temp.undo_queries u ON u.pk = v.query_pk")
        # their documents that no corpus file brought; _remove keeps the ones something else uses
        conn.execute("INSERT OR IGNORE INTO temp.undo_docs (pk) SELECT DISTINCT r.doc_pk FROM retrievals r "
                     "JOIN temp.undo_queries u ON u.pk = r.query_pk JOIN documents d ON d.pk = r.doc_pk "
                     "WHERE d.in_corpus = 0")
        _count(conn, result, None)
        _check_labels(conn, result, force=force, dry_run=dry_run, what="these queries")
        if dry_run:
            _drop_temp(conn)
            return result
        _remove(conn, result)
        audit(conn, store.now(), by, "queries_remove", _names(ids), _detail(result))
        _drop_temp(conn)
    return result


# --- the parts -----------------------------------------------------------------------------------

_TEMP = {
    "undo_queries": "pk INTEGER PRIMARY KEY",  # queries to remove
    "undo_versions": "query_pk INTEGER, retriever TEXT, PRIMARY KEY (query_pk, retriever)",  # rankings to remove
    "undo_docs": "pk INTEGER PRIMARY KEY",  # documents to remove unless still used
    "undo_used": "pk INTEGER PRIMARY KEY",  # of those, the ones still used
    # per query an ingest touched: its log lines, the first other ingest with lines, with any trace
    "undo_lines": "query_pk INTEGER PRIMARY KEY, mine INTEGER, other_lines INTEGER, other INTEGER",
}


def _temp_tables(conn) -> None:
    for name, columns in _TEMP.items():
        conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name} ({columns})")
        conn.execute(f"DELETE FROM temp.{name}")


def _drop_temp(conn) -> None:
    for name in _TEMP:
        conn.execute(f"DELETE FROM temp.{name}")


def _plan_ingest(conn, ingest_id: int, result: UndoResult) -> tuple[list, list]:
    """Fill the temp tables with what ingest ``ingest_id`` alone brought and count it (reads and
    temp tables only: no write lock); return the queries and rankings to hand over to other
    ingests (``hand_over``). Every step is one pass over a table (log lines have no index by query)."""
    # per query: this ingest's log lines, and the first other ingest with log lines / any trace
    conn.execute("INSERT INTO temp.undo_lines (query_pk) SELECT query_pk FROM log_lines WHERE ingest_id = ?1 "
                 "UNION SELECT query_pk FROM query_versions WHERE ingest_id = ?1 "
                 "UNION SELECT pk FROM queries WHERE ingest_id = ?1", [ingest_id])
    conn.execute("UPDATE temp.undo_lines SET mine = x.mine, other_lines = x.other_lines, other = x.other FROM ("
                 "SELECT query_pk, total(ingest_id = ?1) AS mine, "
                 "min(CASE WHEN ingest_id != ?1 AND line THEN ingest_id END) AS other_lines, "
                 "min(CASE WHEN ingest_id != ?1 THEN ingest_id END) AS other FROM ("
                 "SELECT query_pk, ingest_id, 1 AS line FROM log_lines WHERE query_pk IN "
                 "(SELECT query_pk FROM temp.undo_lines) UNION ALL "
                 "SELECT v.query_pk, v.ingest_id, 0 FROM temp.undo_lines t CROSS JOIN query_versions v "
                 "ON v.query_pk = t.query_pk) GROUP BY query_pk) x WHERE x.query_pk = undo_lines.query_pk",
                 [ingest_id])
    created = conn.execute("SELECT q.pk, l.other FROM queries q LEFT JOIN temp.undo_lines l ON l.query_pk = q.pk "
                           "WHERE q.ingest_id = ?", [ingest_id]).fetchall()
    removed = [(pk,) for pk, other in created if other is None]
    kept = [(other, pk) for pk, other in created if other is not None]
    conn.executemany("INSERT INTO temp.undo_queries (pk) VALUES (?)", removed)
    result.queries_kept = len(kept)
    # rankings this ingest created: removed, unless another ingest logged the same lines again
    versions = conn.execute(
        "SELECT v.query_pk, v.retriever, l.other_lines FROM query_versions v LEFT JOIN temp.undo_lines l "
        "ON l.query_pk = v.query_pk WHERE v.ingest_id = ? AND v.query_pk NOT IN (SELECT pk FROM temp.undo_queries)",
        [ingest_id]).fetchall()
    handed = [(other, pk, retriever) for pk, retriever, other in versions if other is not None]
    conn.executemany("INSERT INTO temp.undo_versions (query_pk, retriever) VALUES (?, ?)",
                     [(pk, r) for pk, r, other in versions if other is None])
    conn.execute("INSERT INTO temp.undo_versions (query_pk, retriever) SELECT v.query_pk, v.retriever "
                 "FROM query_versions v JOIN temp.undo_queries u ON u.pk = v.query_pk")
    conn.execute("INSERT OR IGNORE INTO temp.undo_docs (pk) SELECT pk FROM documents WHERE ingest_id = ?",
                 [ingest_id])
    _count(conn, result, ingest_id)
    return kept, handed


def _count(conn, result: UndoResult, ingest_id: int | None) -> None:
    one = lambda sql, params=(): conn.execute(sql, params).fetchone()[0]  # noqa: E731
    result.queries_removed = one("SELECT count(*) FROM temp.undo_queries")
    result.retrievals_removed = one("SELECT count(*) FROM temp.undo_versions v CROSS JOIN retrievals r "
                                    "ON r.query_pk = v.query_pk AND r.retriever = v.retriever")
    if ingest_id is None:
        result.log_lines_removed = one("SELECT count(*) FROM log_lines l JOIN temp.undo_queries u ON u.pk = l.query_pk")
    else:
        result.log_lines_removed = one("SELECT count(*) FROM log_lines WHERE ingest_id = ? OR query_pk IN "
                                       "(SELECT pk FROM temp.undo_queries)", [ingest_id])
    result.removed_ids = [r[0] for r in conn.execute(
        "SELECT q.query_id FROM temp.undo_queries u CROSS JOIN queries q ON q.pk = u.pk ORDER BY u.pk LIMIT 1000")]
    result.labeled_queries = [r[0] for r in conn.execute(
        "SELECT q.query_id FROM temp.undo_queries u CROSS JOIN queries q ON q.pk = u.pk WHERE "
        "EXISTS (SELECT 1 FROM query_labels l WHERE l.query_pk = q.pk) OR "
        "EXISTS (SELECT 1 FROM relevance_labels l WHERE l.query_pk = q.pk) OR "
        "EXISTS (SELECT 1 FROM adjudications a WHERE a.query_pk = q.pk) ORDER BY u.pk")]
    used = _mark_used(conn)
    total = one("SELECT count(*) FROM temp.undo_docs")
    result.documents_kept = used
    result.documents_removed = total - used


_DOC_USERS = ("relevance_labels", "adjudications", "suggestions", "judge_labels", "judge_tags")


def _mark_used(conn) -> int:
    """Fill ``temp.undo_used`` with the candidate documents that a row that stays still uses (not
    a removed query's, not a removed ranking's); one pass over each table. Returns how many."""
    conn.execute("DELETE FROM temp.undo_used")
    conn.execute("INSERT OR IGNORE INTO temp.undo_used (pk) SELECT r.doc_pk FROM retrievals r "
                 "WHERE r.doc_pk IN (SELECT pk FROM temp.undo_docs) AND NOT EXISTS (SELECT 1 FROM "
                 "temp.undo_versions v WHERE v.query_pk = r.query_pk AND v.retriever = r.retriever)")
    for table in _DOC_USERS:
        conn.execute(f"INSERT OR IGNORE INTO temp.undo_used (pk) SELECT x.doc_pk FROM {table} x "
                     "WHERE x.doc_pk IN (SELECT pk FROM temp.undo_docs) "
                     "AND x.query_pk NOT IN (SELECT pk FROM temp.undo_queries)")
    conn.execute("INSERT OR IGNORE INTO temp.undo_used (pk) SELECT d.pk FROM documents d JOIN temp.undo_docs u "
                 "ON u.pk = d.pk WHERE d.doc_id IN (SELECT s.value FROM queries q, json_each(q.seed_doc_ids) s "
                 "WHERE q.origin = 'synthetic' AND q.seed_doc_ids IS NOT NULL "
                 "AND q.pk NOT IN (SELECT pk FROM temp.undo_queries))")
    return conn.execute("SELECT count(*) FROM temp.undo_used").fetchone()[0]


def _check_labels(conn, result: UndoResult, *, force: bool, dry_run: bool, what: str) -> None:
    labeled = result.labeled_queries
    if labeled and not force and not dry_run:
        _drop_temp(conn)
        raise UndoRefused(
            f"{what}: {len(labeled)} of the queries to remove have labels ({_names(labeled)}); "
            "nothing was removed. Pass --force to remove them with their labels", labeled)


def _names(ids: list[str]) -> str:
    shown = ", ".join(ids[:SHOWN])
    return shown + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "")


def _remove(conn, result: UndoResult) -> None:
    """Delete the rows the temp tables name (the caller holds the write lock)."""
    in_queries = "query_pk IN (SELECT pk FROM temp.undo_queries)"
    labels = 0
    for table in ("query_labels", "relevance_labels", "adjudications"):
        labels += conn.execute(f"DELETE FROM {table} WHERE {in_queries}").rowcount
    result.labels_removed = labels
    for table in query_tables(conn):  # every table that names a query, today's and tomorrow's
        conn.execute(f"DELETE FROM [{table}] WHERE {in_queries}")
    # by primary key, ranking by ranking: a scan of every retrieval costs more than the removal
    versions = conn.execute("SELECT query_pk, retriever FROM temp.undo_versions").fetchall()
    conn.executemany("DELETE FROM retrievals WHERE query_pk = ? AND retriever = ?", versions)
    conn.executemany("DELETE FROM query_versions WHERE query_pk = ? AND retriever = ?", versions)
    conn.execute("DELETE FROM queries WHERE pk IN (SELECT pk FROM temp.undo_queries)")
    # documents: the ones still used stay (and pass to an ingest that uses them), the rest go
    # (temp.undo_used was filled by _count, before anything was deleted)
    conn.execute("DELETE FROM temp.undo_docs WHERE pk IN (SELECT pk FROM temp.undo_used)")
    if result.ingest_id is not None:  # the ones that stay pass to the first ingest whose rankings use them
        conn.execute("UPDATE documents SET ingest_id = u.first FROM (SELECT doc_pk, min(ingest_id) AS first "
                     "FROM retrievals WHERE doc_pk IN (SELECT pk FROM temp.undo_used) GROUP BY doc_pk) u "
                     "WHERE documents.pk = u.doc_pk AND documents.ingest_id = ?", [result.ingest_id])
        conn.execute("UPDATE documents SET ingest_id = NULL WHERE ingest_id = ? AND pk IN "
                     "(SELECT pk FROM temp.undo_used)", [result.ingest_id])
    for table in ("ingest_texts", "embeddings"):
        conn.execute(f"DELETE FROM {table} WHERE doc_pk IN (SELECT pk FROM temp.undo_docs)")
    result.documents_removed = conn.execute(
        "DELETE FROM documents WHERE pk IN (SELECT pk FROM temp.undo_docs)").rowcount
    while store.index_pending(conn):  # the search index forgets them now (same transaction)
        pass
    # the queue plans again at its next sync (its item count and overlap targets changed)
    conn.execute("DELETE FROM queue_meta WHERE key = 'fingerprint'")


def _detail(result: UndoResult) -> str:
    d = result.to_dict()
    d["removed_ids"] = d["removed_ids"][:50]
    d["labeled_queries"] = d["labeled_queries"][:50]
    return store.dumps(d)
