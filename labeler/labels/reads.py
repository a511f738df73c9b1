"""What an annotator sees: one item with their own labels (blind to everyone else's), and their history."""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlite_utils

from .. import db as store
from ..core.names import check_name
from ..errors import LabelError
from .pool import Source, merge, pool_depth

_POOL_SQL = ("SELECT r.retriever, r.rank, r.doc_pk, d.doc_id, r.score, d.title, d.text FROM retrievals r "
             f"JOIN documents d ON d.pk = r.doc_pk WHERE r.query_pk = ? AND {store.visible('r')}")

_HISTORY_STATUSES = "('submitted', 'skipped', 'flagged', 'discarded')"


@dataclass
class Chunk:
    """A chunk on an item.

    ``position``: its place in the pool (1, 2, ...; None for a chunk added from search).
    ``rank``/``score``: the retriever's, shown only when one retriever logged the query (else None,
    and always None for a chunk added from search). ``sources``: every retriever that returned it
    with its rank and score, only when the lead turned ``show_sources`` on (else empty: labeling is
    blind). ``new``: the item came back to the annotator after an ingest added chunks, and this is
    one of them (not graded when it came back).
    """

    doc_pk: int
    doc_id: str
    title: str | None
    text: str | None
    rank: int | None = None
    score: float | None = None
    grade: int | None = None
    position: int | None = None
    sources: list[Source] = field(default_factory=list)
    new: bool = False


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
    blind: bool = False
    requeued: bool = False

    @property
    def ungraded(self) -> int:
        """How many pool chunks this annotator has not graded yet."""
        return sum(c.grade is None for c in self.chunks)

    @property
    def new_chunks(self) -> int:
        """How many chunks an ingest added since the annotator submitted (0 unless ``requeued``)."""
        return sum(c.new for c in self.chunks)


@dataclass
class HistoryEntry:
    query_pk: int
    query_id: str
    question: str
    status: str
    status_at: str | None
    seconds: float


def get_item(db: sqlite_utils.Database, query_pk: int, annotator: str, *,
             retriever: str | None = None) -> Item:
    """The item for display: question, production answer, the query's pool (``labels.pool``: every
    retriever's top ``pool_depth`` chunks, each once, interleaved) and the chunks this annotator
    added, each with this annotator's grade only, and their query fields.

    Blind: with several retrievers a chunk carries neither its retrievers nor rank or score unless
    the setting ``show_sources`` is on (``Item.blind`` says which). With one retriever the chunks
    carry its rank and score. ``retriever``: show only that retriever's ranking (no pool).
    """
    annotator = check_name(annotator)
    row = db.execute("SELECT pk, query_id, question, occurrences, answer, origin FROM queries WHERE pk = ?",
                     [query_pk]).fetchone()
    if row is None:
        raise LabelError(f"query pk {query_pk!r} does not exist; take one from next_item() or history()")
    item = Item(*row, annotator=annotator)
    settings = store.get_settings(db)
    rows = db.execute(_POOL_SQL, [query_pk]).fetchall()
    if retriever is not None:
        rows = [r for r in rows if r[0] == retriever]
    pooled = merge(item.query_id, [r[:5] for r in rows], pool_depth(settings))
    docs = {r[2]: (r[3], *r[5:]) for r in rows}
    graded = {doc_pk: (grade, created) for doc_pk, grade, created in db.execute(
        "SELECT doc_pk, grade, created_at FROM relevance_labels WHERE query_pk = ? AND annotator = ?",
        [query_pk, annotator])}
    grades = {doc_pk: g for doc_pk, (g, _) in graded.items()}
    back = db.execute("SELECT created_at FROM requeued WHERE query_pk = ? AND annotator = ? "
                      "AND ingest_id IS NOT NULL", [query_pk, annotator]).fetchone()
    item.requeued = back is not None  # (a lead's re-queue has no ingest: no chunk is new)
    # new: not graded when the item came back (so the badge stays on a chunk once graded)
    new = set() if back is None else {pk for pk, (_, created) in graded.items() if created >= back[0]}
    single = len({r[0] for r in rows}) == 1
    item.blind = not single and not settings.get("show_sources")
    for position, p in enumerate(pooled, 1):
        doc_id, title, text = docs[p.doc_pk]
        grade = grades.pop(p.doc_pk, None)
        chunk = Chunk(p.doc_pk, doc_id, title, text, grade=grade,
                      position=position, new=item.requeued and (grade is None or p.doc_pk in new))
        if single:
            chunk.rank, chunk.score = p.sources[0].rank, p.sources[0].score
        if not item.blind:
            chunk.sources = list(p.sources)
        item.chunks.append(chunk)
    # what is left of the annotator's grades: chunks they added from search (oldest first)
    if grades:
        item.extra = [Chunk(doc_pk, doc_id, title, text, grade=grade) for
                      doc_pk, doc_id, title, text, grade in db.execute(
            "SELECT d.pk, d.doc_id, d.title, d.text, l.grade FROM relevance_labels l "
            "JOIN documents d ON d.pk = l.doc_pk WHERE l.query_pk = ? AND l.annotator = ? "
            "ORDER BY l.created_at, d.pk", [query_pk, annotator]) if doc_pk in grades]
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


def item_exists(db: sqlite_utils.Database, query_pk: int) -> bool:
    """Whether query ``query_pk`` is still stored (a lead may have removed it: ``labeler.ingest.undo``)."""
    return db.execute("SELECT 1 FROM queries WHERE pk = ?", [query_pk]).fetchone() is not None
