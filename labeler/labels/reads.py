"""What an annotator sees: one item with their own labels (blind to everyone else's), and their history."""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlite_utils

from .. import db as store
from ..errors import LabelError
from ._common import check_name

_HISTORY_STATUSES = "('submitted', 'skipped', 'flagged', 'discarded')"


@dataclass
class Chunk:
    """A chunk on an item: ``rank``/``score`` are None for a chunk the annotator added from search."""

    doc_pk: int
    doc_id: str
    title: str | None
    text: str | None
    rank: int | None = None
    score: float | None = None
    grade: int | None = None


@dataclass
class Item:
    """One query as ``annotator`` sees it: only their own grades and fields, never other people's."""

    query_pk: int
    query_id: str
    question: str
    occurrences: int
    answer: str | None
    origin: str
    annotator: str
    chunks: list[Chunk] = field(default_factory=list)
    extra: list[Chunk] = field(default_factory=list)
    status: str | None = None
    expected_answer: str | None = None
    answer_faithful: str | None = None
    answer_relevant: str | None = None
    notes: str | None = None
    flag_reason: str | None = None
    status_reason: str | None = None
    seconds: float = 0.0
    assignment: str | None = None
    lease_expires: str | None = None

    @property
    def ungraded(self) -> int:
        """How many retrieved chunks this annotator has not graded yet."""
        return sum(c.grade is None for c in self.chunks)


@dataclass
class HistoryEntry:
    query_pk: int
    query_id: str
    question: str
    status: str
    status_at: str | None
    seconds: float


def get_item(db: sqlite_utils.Database, query_pk: int, annotator: str, *,
             retriever: str = "production") -> Item:
    """The item for display: question, production answer, ``retriever``'s ranked chunks and the
    chunks this annotator added, each with this annotator's grade only, and their query fields."""
    annotator = check_name(annotator)
    row = db.execute("SELECT pk, query_id, question, occurrences, answer, origin FROM queries WHERE pk = ?",
                     [query_pk]).fetchone()
    if row is None:
        raise LabelError(f"query pk {query_pk!r} does not exist; take one from next_item() or history()")
    item = Item(*row, annotator=annotator)
    item.chunks = [Chunk(doc_pk, doc_id, title, text, rank, score, grade) for
                   rank, score, doc_pk, doc_id, title, text, grade in db.execute(
        "SELECT r.rank, r.score, d.pk, d.doc_id, d.title, d.text, l.grade FROM retrievals r "
        "JOIN documents d ON d.pk = r.doc_pk LEFT JOIN relevance_labels l ON l.query_pk = r.query_pk "
        f"AND l.doc_pk = r.doc_pk AND l.annotator = ? WHERE r.query_pk = ? AND r.retriever = ? AND {store.visible('r')} "
        "ORDER BY r.rank",
        [annotator, query_pk, retriever])]
    item.extra = [Chunk(doc_pk, doc_id, title, text, grade=grade) for
                  doc_pk, doc_id, title, text, grade in db.execute(
        "SELECT d.pk, d.doc_id, d.title, d.text, l.grade FROM relevance_labels l "
        "JOIN documents d ON d.pk = l.doc_pk WHERE l.query_pk = ? AND l.annotator = ? AND l.doc_pk NOT IN "
        f"(SELECT doc_pk FROM retrievals r WHERE query_pk = ? AND retriever = ? AND {store.visible('r')}) "
        "ORDER BY l.created_at, d.pk",
        [query_pk, annotator, query_pk, retriever])]
    label = db.execute(
        "SELECT status, expected_answer, answer_faithful, answer_relevant, notes, flag_reason, "
        "status_reason, seconds FROM query_labels WHERE query_pk = ? AND annotator = ?",
        [query_pk, annotator]).fetchone()
    if label:
        (item.status, item.expected_answer, item.answer_faithful, item.answer_relevant, item.notes,
         item.flag_reason, item.status_reason, item.seconds) = label
    lease = db.execute("SELECT state, lease_expires FROM assignments WHERE query_pk = ? AND annotator = ?",
                       [query_pk, annotator]).fetchone()
    if lease:
        item.assignment, item.lease_expires = lease
    return item


def history(db: sqlite_utils.Database, annotator: str, limit: int = 50) -> list[HistoryEntry]:
    """``annotator``'s finished items (submitted, skipped, flagged, discarded), last finished first.

    Ordered by when the status last changed, so editing a grade of an old item does not move it.
    """
    annotator = check_name(annotator)
    return [HistoryEntry(*r) for r in db.execute(
        "SELECT l.query_pk, q.query_id, q.question, l.status, l.status_at, l.seconds FROM query_labels l "
        f"JOIN queries q ON q.pk = l.query_pk WHERE l.annotator = ? AND l.status IN {_HISTORY_STATUSES} "
        "ORDER BY l.status_at DESC, l.query_pk DESC LIMIT ?", [annotator, int(limit)])]


def previous_item(db: sqlite_utils.Database, annotator: str, current_pk: int | None) -> int | None:
    """The item ``annotator`` finished before ``current_pk`` ("back"); the last finished one when
    ``current_pk`` is not in their history (e.g. the fresh queue item); None at the start."""
    annotator = check_name(annotator)
    cur = db.execute(f"SELECT status_at FROM query_labels WHERE query_pk = ? AND annotator = ? "
                     f"AND status IN {_HISTORY_STATUSES}", [current_pk, annotator]).fetchone()
    if cur is None:
        row = db.execute(f"SELECT query_pk FROM query_labels WHERE annotator = ? AND status IN "
                         f"{_HISTORY_STATUSES} ORDER BY status_at DESC, query_pk DESC LIMIT 1",
                         [annotator]).fetchone()
    else:
        row = db.execute(
            f"SELECT query_pk FROM query_labels WHERE annotator = ?1 AND status IN {_HISTORY_STATUSES} "
            "AND (status_at < ?2 OR (status_at = ?2 AND query_pk < ?3)) "
            "ORDER BY status_at DESC, query_pk DESC LIMIT 1", [annotator, cur[0], current_pk]).fetchone()
    return row[0] if row else None
