"""The lead's list of items: every query with its annotators' statuses, a page at a time, and one
item with every annotator's grades side by side (leads are not blind).

``list_items`` filters in SQL and reads only the requested page (``LIMIT``/``OFFSET`` in query pk
order, the queries table's primary key), so the cost of a page does not grow with the project;
the summary columns (statuses, consolidated relevant count, conflict, judge agreement, pool size)
are computed for the page's rows only. The consolidation follows ``labels.consolidate``: the
grades of annotators who submitted, one grade -> that grade, several -> the adjudicated grade or
the median rounded half up; a conflict is a spread of 2 or more, or grades on both sides of the
relevance threshold, that no adjudication settled.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlite_utils

from .. import db as store
from ..accounts.manage import require
from ..core.names import check_name
from ..core.times import When, stamp
from ..errors import LabelError
from .pool import merge, pool_depth
from .reads import Chunk

ITEM_STATUSES = ("unlabeled", "in_progress", "submitted", "skipped", "flagged", "discarded")
ORIGINS = ("log", "synthetic", "import")
MAX_PAGE_SIZE = 1000


@dataclass
class AnnotatorStatus:
    """One annotator's status on an item and when it last changed."""

    annotator: str
    status: str
    at: str | None
    reason: str | None = None  # the flag reason, or the reason given with a skip or discard


@dataclass
class ItemRow:
    """One query on the Items page / in ``labeler items``."""

    query_pk: int
    query_id: str
    question: str
    origin: str
    occurrences: int
    first_seen: str | None
    retrievers: list[str] = field(default_factory=list)
    pool_size: int = 0
    annotators: list[AnnotatorStatus] = field(default_factory=list)
    relevant: int | None = None  # consolidated relevant chunks; None until someone submitted
    conflict: bool = False
    judge_agreement: float | None = None  # None when no relevance judge run judged this query
    discarded: bool = False  # a lead discarded the item
    discard_reason: str | None = None
    adjudication_requested: bool = False

    @property
    def statuses(self) -> str:
        """The annotators' statuses as one line, e.g. ``alice submitted 2026-01-02 10:00``."""
        return "; ".join(f"{a.annotator} {a.status.replace('_', ' ')}" + (f" {a.at[:16].replace('T', ' ')}"
                                                                         if a.at else "")
                         for a in self.annotators)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["statuses"] = self.statuses
        return out


@dataclass
class ItemsPage:
    """One page of ``list_items``: its rows, how many items match the filters in all, and where."""

    rows: list[ItemRow]
    total: int
    page: int
    page_size: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.page_size))

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "page": self.page, "page_size": self.page_size, "pages": self.pages,
                "items": [r.to_dict() for r in self.rows]}


def _in_list(values: list[Any]) -> str:
    return store.dumps(list(values))


def _filters(db: sqlite_utils.Database, *, status: str | None, annotator: str | None, origin: str | None,
             retriever: str | None, flagged: bool | None, conflict: bool | None, search: str | None,
             since: When, until: When) -> tuple[list[str], list[Any]]:
    # (rows of an ingest still being written are hidden; with none under way the test is skipped)
    staging = db.execute("SELECT 1 FROM ingests WHERE state = 'staging' LIMIT 1").fetchone()
    where = [store.visible("q") if staging else "1"]
    params: list[Any] = []
    if status is not None and status not in ITEM_STATUSES:
        raise LabelError(f"status {status!r} is unknown; use one of: {', '.join(ITEM_STATUSES)}")
    who = check_name(annotator) if annotator is not None else None
    if status == "unlabeled":
        if who is None:
            where.append("q.pk NOT IN (SELECT query_pk FROM query_labels)")
        else:
            where.append("q.pk NOT IN (SELECT query_pk FROM query_labels WHERE annotator = ?)")
            params.append(who)
    elif status is not None and who is not None:
        where.append("q.pk IN (SELECT query_pk FROM query_labels WHERE annotator = ? AND status = ?)")
        params += [who, status]
    elif status is not None:
        where.append("q.pk IN (SELECT query_pk FROM query_labels WHERE status = ?)")
        params.append(status)
    elif who is not None:
        where.append("q.pk IN (SELECT query_pk FROM query_labels WHERE annotator = ?)")
        params.append(who)
    if origin is not None:
        if origin not in ORIGINS:
            raise LabelError(f"origin {origin!r} is unknown; use one of: {', '.join(ORIGINS)}")
        where.append("q.origin = ?")
        params.append(origin)
    if retriever is not None:
        # query_versions names every logged (query, retriever); synthetic questions have no version rows
        where.append("q.pk IN (SELECT query_pk FROM query_versions WHERE retriever = ? UNION SELECT s.pk FROM "
                     "queries s WHERE s.origin = 'synthetic' AND EXISTS (SELECT 1 FROM retrievals r "
                     "WHERE r.query_pk = s.pk AND r.retriever = ?))")
        params += [retriever, retriever]
    if flagged is not None:
        where.append("q.pk " + ("" if flagged else "NOT ") + "IN (SELECT query_pk FROM query_labels "
                     "WHERE status = 'flagged')")
    if conflict is not None:
        where.append("q.pk " + ("" if conflict else "NOT ") + "IN (SELECT value FROM json_each(?))")
        params.append(_in_list(conflicting_items(db)))
    if search is not None and search.strip():
        escaped = search.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.append("q.question LIKE ? ESCAPE '\\'")
        params.append(f"%{escaped}%")
    if since is not None:
        where.append("q.first_seen >= ?")
        params.append(stamp(since))
    if until is not None:
        where.append("q.first_seen < ?")
        params.append(stamp(until))
    return where, params


def list_items(db: sqlite_utils.Database, *, status: str | None = None, annotator: str | None = None,
               origin: str | None = None, retriever: str | None = None, flagged: bool | None = None,
               conflict: bool | None = None, search: str | None = None, since: When = None,
               until: When = None, page: int = 1, page_size: int = 50, by: str | None = None) -> ItemsPage:
    """One page of the items (queries) matching every filter given, in query pk order (the order
    they arrived), with the number of matching items in all. Leads only (``by``, the signed-in
    account; ``None`` is the local operator).

    Filters: ``status`` of any annotator (or of ``annotator`` when given; ``unlabeled`` = no label
    row); ``annotator`` who has a label row on the item; ``origin``; ``retriever`` that logged a
    ranking for it; ``flagged`` / ``conflict`` True or False; ``search``, words that appear in
    the question (case-insensitive for ASCII, as typed: not split into words); ``since``
    (inclusive) and ``until`` (exclusive) on when the question was first seen in the logs
    (queries without a logged time match no date range).
    """
    require(db, by, "lead", "listing the items")
    for name, value, low, high in (("page", page, 1, None), ("page_size", page_size, 1, MAX_PAGE_SIZE)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
            raise LabelError(f"{name}={value!r} must be a whole number from {low}" + (f" to {high}" if high else
                                                                                     " up"))
    where, params = _filters(db, status=status, annotator=annotator, origin=origin, retriever=retriever,
                             flagged=flagged, conflict=conflict, search=search, since=since, until=until)
    condition = " AND ".join(where)
    total = db.execute(f"SELECT count(*) FROM queries q WHERE {condition}", params).fetchone()[0]
    pks = [r[0] for r in db.execute(f"SELECT q.pk FROM queries q WHERE {condition} ORDER BY q.pk "
                                    "LIMIT ? OFFSET ?", [*params, page_size, (page - 1) * page_size])]
    return ItemsPage(item_rows(db, pks), total, page, page_size)


_CONFLICTS: dict[Any, tuple[Any, int, set[int]]] = {}  # database -> (threshold, last event id, pks)
FULL_RECOMPUTE = 20_000  # more changed items than this since the last answer: recompute them all


def conflicting_items(db: sqlite_utils.Database) -> list[int]:
    """The pks of the queries with an unresolved conflict (``golden_labels``' ``conflict``), sorted.

    Found in SQL (``conflict_sql``: one pass over the grades, no consolidation in Python; under a
    second at 100k items of 5 chunks and 2 annotators on a quiet 2-core machine), and
    kept per database and brought up to date from ``label_events``: every grade, status,
    adjudication and lead action appends one naming its query, and only those queries are looked
    at again. A new threshold recomputes everything."""
    key = db.execute("PRAGMA database_list").fetchone()[2]  # the file; "" for an in-memory database
    threshold = store.get_setting(db, "threshold")
    last = db.execute("SELECT coalesce(max(id), 0) FROM label_events").fetchone()[0]
    cached = _CONFLICTS.get(key)
    if cached is not None and cached[0] == threshold and cached[1] == last:
        return sorted(cached[2])
    changed = None
    if cached is not None and cached[0] == threshold and cached[1] < last:
        changed = [r[0] for r in db.execute("SELECT DISTINCT query_pk FROM label_events WHERE id > ? LIMIT ?",
                                            [cached[1], FULL_RECOMPUTE + 1])]
    if changed is None or len(changed) > FULL_RECOMPUTE:
        pks = set(conflict_sql(db, int(threshold)))
    else:
        pks = (cached[2] - set(changed)) | set(conflict_sql(db, int(threshold), changed))
    if key:  # (an in-memory database's connection may be gone and its id reused: never cached)
        _CONFLICTS[key] = (threshold, last, pks)
    return sorted(pks)


def conflict_sql(db: sqlite_utils.Database, threshold: int, query_pks: list[int] | None = None) -> list[int]:
    """The queries (all, or those of ``query_pks``) with a (query, chunk) pair in conflict by
    ``labels.consolidate``'s rule, in SQL: the grades of annotators who submitted differ by 2 or
    more, or fall on both sides of ``threshold``, and no adjudication settled the pair (a single
    grade never conflicts: its lowest and highest are the same)."""
    # One pass over every grade in relevance_labels' primary key order (no sort): a pair whose
    # grades, submitted or not, do not conflict cannot conflict among the submitted ones (fewer
    # grades: a smaller spread), so only the pairs that pass that cheap test are looked up again
    # with the submitted grades and the adjudications (the first test is written first: AND stops there)
    where, params = "", [threshold]
    if query_pks is not None:
        where = "WHERE g.query_pk IN (SELECT value FROM json_each(?2)) "
        params.append(_in_list(int(p) for p in query_pks))
    split = "max({0}) - min({0}) >= 2 OR (min({0}) < ?1 AND max({0}) >= ?1)"
    rows = db.execute(
        f"SELECT g.query_pk FROM relevance_labels g {where}GROUP BY g.query_pk, g.doc_pk "
        f"HAVING ({split.format('g.grade')}) AND (SELECT {split.format('r.grade')} FROM relevance_labels r "
        "CROSS JOIN query_labels l ON l.query_pk = r.query_pk AND l.annotator = r.annotator AND l.status = 'submitted' "
        "WHERE r.query_pk = g.query_pk AND r.doc_pk = g.doc_pk) AND NOT EXISTS (SELECT 1 FROM adjudications a "
        "WHERE a.query_pk = g.query_pk AND a.doc_pk = g.doc_pk)", params)
    return sorted({r[0] for r in rows})


def retriever_names(db: sqlite_utils.Database) -> list[str]:
    """Every retriever that logged a ranking (or that synthetic questions carry), sorted: the
    choices of the Items page's retriever filter (reads ``query_versions``, not every retrieval)."""
    path = db.execute("PRAGMA database_list").fetchone()[2]
    key = (path, *db.execute("SELECT (SELECT max(id) FROM ingests), (SELECT max(pk) FROM queries)").fetchone())
    if path and key in _RETRIEVERS:
        return list(_RETRIEVERS[key])
    names = [r[0] for r in db.execute(
        "SELECT retriever FROM query_versions UNION SELECT r.retriever FROM queries s JOIN retrievals r "
        "ON r.query_pk = s.pk WHERE s.origin = 'synthetic' ORDER BY 1")]
    if path:  # rankings arrive with an ingest or a new (synthetic) query: kept until then
        _RETRIEVERS.clear()
        _RETRIEVERS[key] = names
    return names


_RETRIEVERS: dict[tuple, list[str]] = {}


def _consolidated(grades: list[int], adjudicated: int | None, threshold: int) -> tuple[int, bool]:
    """(grade, conflict) of one (query, chunk) pair, by ``labels.consolidate``'s rules."""
    if adjudicated is not None:
        return adjudicated, False
    ordered = sorted(grades)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    low, high = ordered[0], ordered[-1]
    return int(math.floor(median + 0.5)), len(ordered) > 1 and (high - low >= 2 or low < threshold <= high)


def item_rows(db: sqlite_utils.Database, pks: list[int]) -> list[ItemRow]:
    """The summary rows of the queries ``pks`` (in that order); queries that do not exist are left out."""
    if not pks:
        return []
    settings = store.get_settings(db)
    threshold, depth = int(settings["threshold"]), pool_depth(settings)
    ids = _in_list(pks)
    rows = {r[0]: ItemRow(*r[:6], discarded=r[6] is not None, discard_reason=r[7]) for r in db.execute(
        "SELECT pk, query_id, question, origin, occurrences, first_seen, discarded_at, discard_reason "
        "FROM queries WHERE pk IN (SELECT value FROM json_each(?))", [ids])}
    rankings: dict[int, list[tuple]] = {}
    for row in db.execute("SELECT r.query_pk, r.retriever, r.rank, r.doc_pk, '', r.score FROM retrievals r "
                          f"WHERE r.query_pk IN (SELECT value FROM json_each(?)) AND {store.visible('r')}", [ids]):
        rankings.setdefault(row[0], []).append(row[1:])
    for pk, found in rankings.items():
        if pk in rows:
            rows[pk].retrievers = sorted({r[0] for r in found})
            rows[pk].pool_size = len(merge(rows[pk].query_id, found, depth))
    for pk, annotator, status, at, flag_reason, status_reason in db.execute(
            "SELECT query_pk, annotator, status, coalesce(status_at, updated_at), flag_reason, status_reason "
            "FROM query_labels WHERE query_pk IN (SELECT value FROM json_each(?)) ORDER BY query_pk, annotator",
            [ids]):
        if pk in rows:
            reason = flag_reason if status == "flagged" else status_reason
            rows[pk].annotators.append(AnnotatorStatus(annotator, status, at, reason))
    for (pk,) in db.execute("SELECT query_pk FROM adjudication_requests WHERE query_pk IN "
                            "(SELECT value FROM json_each(?))", [ids]):
        if pk in rows:
            rows[pk].adjudication_requested = True
    golden = consolidated_grades(db, pks, threshold)
    for pk, pairs in golden.items():
        if pk in rows:
            rows[pk].relevant = sum(g >= threshold for g, _ in pairs.values())
            rows[pk].conflict = any(c for _, c in pairs.values())
    for pk, judged in judge_grades(db, pks).items():
        pairs = golden.get(pk, {})
        both = [d for d in judged if d in pairs]
        if both and pk in rows:
            agree = sum((judged[d] >= threshold) == (pairs[d][0] >= threshold) for d in both)
            rows[pk].judge_agreement = round(agree / len(both), 4)
    return [rows[pk] for pk in pks if pk in rows]


def consolidated_grades(db: sqlite_utils.Database, pks: list[int],
                        threshold: int) -> dict[int, dict[int, tuple[int, bool]]]:
    """{query pk: {doc pk: (consolidated grade, conflict)}} for the queries ``pks``."""
    ids = _in_list(pks)
    grades: dict[tuple[int, int], list[int]] = {}
    for pk, doc_pk, grade in db.execute(
            "SELECT r.query_pk, r.doc_pk, r.grade FROM relevance_labels r JOIN query_labels l "
            "ON l.query_pk = r.query_pk AND l.annotator = r.annotator AND l.status = 'submitted' "
            "WHERE r.query_pk IN (SELECT value FROM json_each(?))", [ids]):
        grades.setdefault((pk, doc_pk), []).append(grade)
    adjudicated = {(pk, doc_pk): grade for pk, doc_pk, grade in db.execute(
        "SELECT query_pk, doc_pk, grade FROM adjudications WHERE query_pk IN (SELECT value FROM json_each(?))",
        [ids])}
    out: dict[int, dict[int, tuple[int, bool]]] = {}
    for (pk, doc_pk), values in grades.items():
        out.setdefault(pk, {})[doc_pk] = _consolidated(values, adjudicated.get((pk, doc_pk)), threshold)
    return out


def judge_grades(db: sqlite_utils.Database, pks: list[int]) -> dict[int, dict[int, int]]:
    """{query pk: {doc pk: grade}} from the latest relevance judge run that judged each query."""
    out: dict[int, dict[int, int]] = {}
    latest: dict[int, int] = {}
    for run_id, pk, doc_pk, grade in db.execute(
            "SELECT j.run_id, j.query_pk, j.doc_pk, j.grade FROM judge_labels j JOIN judge_runs r ON r.id = j.run_id "
            "AND r.kind = 'relevance' WHERE j.query_pk IN (SELECT value FROM json_each(?)) AND j.status = 'ok' "
            "AND j.doc_pk != 0 AND j.grade IS NOT NULL ORDER BY j.run_id DESC", [_in_list(pks)]):
        if latest.setdefault(pk, run_id) == run_id:
            out.setdefault(pk, {})[doc_pk] = grade
    return out


# --- one item for the lead --------------------------------------------------------------------

@dataclass
class LeadChunk:
    """A chunk of the item with every annotator's grade (submitted or not), the consolidated grade
    over the submitted ones, the lead's adjudication and the latest judge grade."""

    chunk: Chunk
    grades: dict[str, int] = field(default_factory=dict)
    consolidated: int | None = None
    conflict: bool = False
    adjudicated: int | None = None
    judge: int | None = None


@dataclass
class AnnotatorLabel:
    """One annotator's query-level label of the item."""

    annotator: str
    status: str
    at: str | None
    expected_answer: str | None
    notes: str | None
    flag_reason: str | None
    status_reason: str | None
    seconds: float


@dataclass
class ItemDetail:
    """One item as the lead sees it: the summary row, the production answer, every chunk of the pool
    (and every chunk an annotator added from search) with all grades, and each annotator's label."""

    row: ItemRow
    answer: str | None
    chunks: list[LeadChunk]
    labels: list[AnnotatorLabel]

    @property
    def annotators(self) -> list[str]:
        return [label.annotator for label in self.labels]


def item_detail(db: sqlite_utils.Database, query_pk: int, *, by: str | None = None) -> ItemDetail:
    """The item (query pk) with every annotator's grades side by side; leads only (``by``)."""
    require(db, by, "lead", "opening an item with everyone's grades")
    rows = item_rows(db, [query_pk]) if isinstance(query_pk, int) and not isinstance(query_pk, bool) else []
    if not rows:
        raise LabelError(f"query pk {query_pk!r} does not exist; pick an item from the Items page or "
                         "`labeler items`")
    row = rows[0]
    settings = store.get_settings(db)
    threshold = int(settings["threshold"])
    ranked = db.execute("SELECT r.retriever, r.rank, r.doc_pk, d.doc_id, r.score FROM retrievals r JOIN documents d "
                        f"ON d.pk = r.doc_pk WHERE r.query_pk = ? AND {store.visible('r')}", [query_pk]).fetchall()
    pooled = merge(row.query_id, ranked, pool_depth(settings))
    graded: dict[int, dict[str, int]] = {}
    for doc_pk, annotator, grade in db.execute("SELECT doc_pk, annotator, grade FROM relevance_labels "
                                               "WHERE query_pk = ? ORDER BY annotator", [query_pk]):
        graded.setdefault(doc_pk, {})[annotator] = grade
    order = [p.doc_pk for p in pooled] + sorted(set(graded) - {p.doc_pk for p in pooled})
    docs = {pk: (doc_id, title, text) for pk, doc_id, title, text in db.execute(
        "SELECT pk, doc_id, title, text FROM documents WHERE pk IN (SELECT value FROM json_each(?))",
        [_in_list(order)])}
    golden = consolidated_grades(db, [query_pk], threshold).get(query_pk, {})
    adjudicated = dict(db.execute("SELECT doc_pk, grade FROM adjudications WHERE query_pk = ?", [query_pk]).fetchall())
    judged = judge_grades(db, [query_pk]).get(query_pk, {})
    chunks = []
    for position, doc_pk in enumerate(order, 1):
        in_pool = position <= len(pooled)
        chunk = Chunk(doc_pk, *docs[doc_pk], position=position if in_pool else None,
                      sources=list(pooled[position - 1].sources) if in_pool else [])
        grade, conflict = golden.get(doc_pk, (None, False))
        chunks.append(LeadChunk(chunk, graded.get(doc_pk, {}), grade, conflict, adjudicated.get(doc_pk),
                                judged.get(doc_pk)))
    answer = db.execute("SELECT answer FROM queries WHERE pk = ?", [query_pk]).fetchone()[0]
    labels = [AnnotatorLabel(*r) for r in db.execute(
        "SELECT annotator, status, coalesce(status_at, updated_at), expected_answer, notes, flag_reason, "
        "status_reason, seconds FROM query_labels WHERE query_pk = ? ORDER BY annotator", [query_pk])]
    return ItemDetail(row, answer, chunks, labels)
