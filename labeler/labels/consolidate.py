"""Consolidation: one golden grade per (query, chunk) from the human labels, conflicts, adjudication.

Rules (the golden set is built only from these):

- **Which labels count**: the grades of annotators who *submitted* the query. Grades of an
  annotator who skipped, flagged, discarded or has not finished it are ignored. So a query counts
  as soon as one annotator submitted it; a query discarded by someone and submitted by nobody is
  excluded; a query discarded by one annotator and submitted by another counts with the
  submitter's grades only.
- **One grade** -> that grade. **Several** -> the lead's adjudicated grade when there is one,
  else the median, rounded half up (grades 1 and 2 give 2; 0, 1, 3 give 1).
- **Conflict**: the grades differ by 2 or more, or fall on both sides of the relevance
  ``threshold`` (some < threshold <= others), and no adjudication settled it.
- An adjudication also overrides a single annotator's grade (the lead corrected it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlite_utils

from .. import db as store
from ..core.names import check_name
from ..core.times import When, stamp
from ..errors import LabelError, RoleError
from .common import check_doc, check_grade, event, query_row

if TYPE_CHECKING:
    import pandas as pd

ORIGINS = ("log", "synthetic", "import")
GOLDEN_COLUMNS = ["query_pk", "doc_pk", "grade", "n_annotators", "conflict", "adjudicated"]

_SUBMITTED = (
    "SELECT r.query_pk, r.doc_pk, r.annotator, r.grade FROM relevance_labels r "
    "JOIN query_labels l ON l.query_pk = r.query_pk AND l.annotator = r.annotator AND l.status = 'submitted' "
    "JOIN queries q ON q.pk = r.query_pk"
)


def _is_conflict(low: Any, high: Any, threshold: int) -> Any:
    return ((high - low) >= 2) | ((low < threshold) & (high >= threshold))


def golden_labels(db: sqlite_utils.Database, *, origin: str | None = None, annotator: str | None = None,
                  since: When = None, until: When = None, query_pks: Any = None) -> pd.DataFrame:
    """The consolidated golden grades as a DataFrame, one row per (query, chunk), sorted.

    Columns: ``query_pk``, ``doc_pk``, ``grade``, ``n_annotators`` (how many submitted grades),
    ``conflict`` (unresolved disagreement, see the module doc) and ``adjudicated`` (the grade is the
    lead's). Filters: ``origin`` of the query (log/synthetic/import); ``annotator`` = only that
    person's submitted grades, as they gave them (no adjudication applied); ``since`` (inclusive)
    and ``until`` (exclusive) on when each annotator submitted; ``query_pks`` = only these queries
    (to refresh the few that changed).
    """
    import itertools

    import numpy as np
    import pandas as pd

    where, params = [], []
    if origin is not None:
        if origin not in ORIGINS:
            raise LabelError(f"origin {origin!r} is unknown; use one of: {', '.join(ORIGINS)}")
        where.append("q.origin = ?")
        params.append(origin)
    if annotator is not None:
        where.append("r.annotator = ?")
        params.append(check_name(annotator))
    if since is not None:
        where.append("l.submitted_at >= ?")
        params.append(stamp(since))
    if until is not None:
        where.append("l.submitted_at < ?")
        params.append(stamp(until))
    if query_pks is not None:
        where.append("r.query_pk IN (SELECT value FROM json_each(?))")
        params.append(json.dumps([int(p) for p in query_pks]))
    # One packed integer per label (query << 36 | doc << 4 | grade), read in the primary key's
    # (query, doc, annotator) order: CROSS JOIN keeps relevance_labels as the outer loop, so no sort
    # and no tuples. Fits while doc pks stay below 2^32 and query pks below 2^27.
    select = ("SELECT (r.query_pk << 36) | (r.doc_pk << 4) | r.grade FROM relevance_labels r CROSS JOIN "
              "query_labels l ON l.query_pk = r.query_pk AND l.annotator = r.annotator AND l.status = 'submitted'")
    if origin is not None:
        select += " JOIN queries q ON q.pk = r.query_pk"
    sql = select + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY r.query_pk, r.doc_pk"
    packed = np.fromiter(itertools.chain.from_iterable(db.execute(sql, params)), dtype=np.int64)
    if not len(packed):
        return pd.DataFrame({"query_pk": pd.Series(dtype="int64"), "doc_pk": pd.Series(dtype="int64"),
                             "grade": pd.Series(dtype="int64"), "n_annotators": pd.Series(dtype="int64"),
                             "conflict": pd.Series(dtype="bool"), "adjudicated": pd.Series(dtype="bool")})
    flat = np.stack([packed >> 36, (packed >> 4) & 0xFFFFFFFF, packed & 0xF], axis=1)
    q, d, grades = flat[:, 0], flat[:, 1], flat[:, 2]
    first = np.ones(len(q), dtype=bool)
    first[1:] = (q[1:] != q[:-1]) | (d[1:] != d[:-1])
    starts = np.flatnonzero(first)
    count = np.diff(np.append(starts, len(q)))
    low = np.minimum.reduceat(grades, starts)
    high = np.maximum.reduceat(grades, starts)
    grade = grades[starts].copy()
    several = np.flatnonzero(count > 1)
    if several.size:  # the median (rounded half up) only where several annotators graded the pair
        members = np.repeat(several, count[several])
        offsets = np.concatenate([np.arange(starts[i], starts[i] + count[i]) for i in several])
        medians = pd.Series(grades[offsets]).groupby(members).median().to_numpy()
        grade[several] = np.floor(medians + 0.5).astype(np.int64)
    out = pd.DataFrame({
        "query_pk": q[starts], "doc_pk": d[starts], "grade": grade, "n_annotators": count,
        "conflict": np.asarray(_is_conflict(low, high, int(store.get_setting(db, "threshold"))), dtype=bool),
    })
    out["adjudicated"] = False
    if annotator is None:
        adj = pd.DataFrame(db.execute("SELECT query_pk, doc_pk, grade FROM adjudications").fetchall(),
                           columns=["query_pk", "doc_pk", "adjudicated_grade"])
        if not adj.empty:
            out = out.merge(adj, on=["query_pk", "doc_pk"], how="left")
            hit = out["adjudicated_grade"].notna()
            out.loc[hit, "grade"] = out.loc[hit, "adjudicated_grade"].astype("int64")
            out["adjudicated"] = hit
            out["conflict"] = out["conflict"] & ~hit
            out = out.drop(columns="adjudicated_grade")
    out["grade"] = out["grade"].astype("int64")
    out["conflict"] = out["conflict"].astype(bool)
    return out[GOLDEN_COLUMNS]


@dataclass
class ConflictPair:
    """One chunk the annotators disagree on: each annotator's grade side by side."""

    doc_pk: int
    doc_id: str
    title: str | None
    text: str | None
    rank: int | None
    grades: dict[str, int]
    adjudicated: int | None = None


@dataclass
class ConflictItem:
    """A query with at least one conflicting chunk, for the Adjudication page."""

    query_pk: int
    query_id: str
    question: str
    answer: str | None
    pairs: list[ConflictPair] = field(default_factory=list)
    requested: str | None = None  # who sent the item here from the Items page (every graded chunk shows)


def conflicts(db: sqlite_utils.Database, *, include_resolved: bool = False) -> list[ConflictItem]:
    """Queries whose submitted grades conflict (see the module doc), each conflicting chunk with
    every submitter's grade; adjudicated chunks only with ``include_resolved=True``. Items a lead
    sent to adjudication come too, with every chunk someone submitted a grade for."""
    threshold = int(store.get_setting(db, "threshold"))
    pairs = db.execute(
        f"SELECT g.query_pk, g.doc_pk, a.grade FROM ({_SUBMITTED}) g "
        "LEFT JOIN adjudications a ON a.query_pk = g.query_pk AND a.doc_pk = g.doc_pk "
        "GROUP BY g.query_pk, g.doc_pk HAVING count(*) > 1 "
        "AND (max(g.grade) - min(g.grade) >= 2 OR (min(g.grade) < ?1 AND max(g.grade) >= ?1)) "
        "AND (?2 OR a.grade IS NULL) ORDER BY g.query_pk, g.doc_pk",
        [threshold, int(include_resolved)]).fetchall()
    items: dict[int, ConflictItem] = {}
    for query_pk, doc_pk, adjudicated in pairs:
        if query_pk not in items:
            items[query_pk] = ConflictItem(*db.execute(
                "SELECT pk, query_id, question, answer FROM queries WHERE pk = ?", [query_pk]).fetchone())
        doc_id, title, text, rank = db.execute(
            "SELECT d.doc_id, d.title, d.text, (SELECT min(rank) FROM retrievals r WHERE r.query_pk = ? "
            "AND r.doc_pk = d.pk) FROM documents d WHERE d.pk = ?",
            [query_pk, doc_pk]).fetchone()
        grades = dict(db.execute(
            "SELECT g.annotator, g.grade FROM (" + _SUBMITTED + " WHERE r.query_pk = ? AND r.doc_pk = ?) g "
            "ORDER BY g.annotator", [query_pk, doc_pk]).fetchall())
        items[query_pk].pairs.append(ConflictPair(doc_pk, doc_id, title, text, rank, grades, adjudicated))
    # items a lead sent here (labels.desk.request_adjudication): every chunk someone submitted a grade for
    for query_pk, lead in db.execute("SELECT query_pk, lead FROM adjudication_requests ORDER BY created_at, query_pk"):
        known = {p.doc_pk for p in items[query_pk].pairs} if query_pk in items else set()
        pairs = db.execute(
            f"SELECT g.doc_pk, a.grade FROM ({_SUBMITTED} WHERE r.query_pk = ?) g LEFT JOIN adjudications a "
            "ON a.query_pk = g.query_pk AND a.doc_pk = g.doc_pk GROUP BY g.doc_pk HAVING ? OR a.grade IS NULL "
            "ORDER BY g.doc_pk", [query_pk, int(include_resolved)]).fetchall()
        for doc_pk, adjudicated in pairs:
            if doc_pk in known:
                continue
            if query_pk not in items:
                items[query_pk] = ConflictItem(*db.execute(
                    "SELECT pk, query_id, question, answer FROM queries WHERE pk = ?", [query_pk]).fetchone())
            doc_id, title, text, rank = db.execute(
                "SELECT d.doc_id, d.title, d.text, (SELECT min(rank) FROM retrievals r WHERE r.query_pk = ? "
                "AND r.doc_pk = d.pk) FROM documents d WHERE d.pk = ?", [query_pk, doc_pk]).fetchone()
            grades = dict(db.execute(
                "SELECT g.annotator, g.grade FROM (" + _SUBMITTED + " WHERE r.query_pk = ? AND r.doc_pk = ?) g "
                "ORDER BY g.annotator", [query_pk, doc_pk]).fetchall())
            items[query_pk].pairs.append(ConflictPair(doc_pk, doc_id, title, text, rank, grades, adjudicated))
        if query_pk in items:
            items[query_pk].requested = lead
    return list(items.values())


def adjudicate(db: sqlite_utils.Database, query_pk: int, doc_pk: int, grade: int | None, lead: str,
               *, now: When = None) -> int | None:
    """Set the final grade of a (query, chunk) pair; only a lead may. ``grade=None`` removes it.

    Stored in ``adjudications`` with an audit event (field ``adjudication``); returns the previous
    adjudicated grade.
    """
    lead = check_name(lead)
    at = stamp(now)
    settings = store.get_settings(db)
    with store.transaction(db):
        conn = db.conn
        if conn.execute("SELECT role FROM annotators WHERE name = ?", [lead]).fetchone() != ("lead",):
            raise RoleError(f"{lead} is not a lead; only a lead may adjudicate (a lead can change "
                            "roles in Settings)")
        query_row(conn, query_pk)
        check_doc(conn, doc_pk)
        if grade is not None:
            check_grade(grade, settings)
        row = conn.execute("SELECT grade FROM adjudications WHERE query_pk = ? AND doc_pk = ?",
                           [query_pk, doc_pk]).fetchone()
        old = row[0] if row else None
        if old == grade:
            return old
        if grade is None:
            conn.execute("DELETE FROM adjudications WHERE query_pk = ? AND doc_pk = ?", [query_pk, doc_pk])
        else:
            conn.execute(
                "INSERT INTO adjudications (query_pk, doc_pk, grade, lead, created_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (query_pk, doc_pk) DO UPDATE SET grade = excluded.grade, lead = excluded.lead, "
                "created_at = excluded.created_at", [query_pk, doc_pk, grade, lead, at])
        event(conn, at, lead, query_pk, doc_pk, "adjudication", old, grade)
        return old
