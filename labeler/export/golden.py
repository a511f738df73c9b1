"""What an export writes: the queries that count and their judged pairs, read once."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import sqlite_utils

from .. import db as store
from ..errors import LabelerError
from ..holdout import split_column
from ..labels.consolidate import golden_labels
from ..report.load import logged_queries
from ..report.specs import ORIGINS
from ..retrievers import RetrieverError, default_retriever, logged_retrievers


class ExportError(LabelerError):
    """An export that cannot be written (unknown format, bad path or filter, ids a format cannot hold)."""


def column_lists(df: pd.DataFrame, *names: str) -> list[list[Any]]:
    """Columns as Python lists: iterating pandas' Arrow-backed strings one by one is slow."""
    return [df[n].tolist() for n in names]


# --- what is exported ------------------------------------------------------------------------------

@dataclass
class GoldenSet:
    """The exported queries and their judged pairs, read once and shared by every format.

    ``queries``: one row per query (sorted by query_id): query_pk, query_id, question, origin,
    answer (production), expected_answer, answer_faithful, answer_relevant, annotators (list),
    conflict. ``pairs``: one row per judged (query, chunk) sorted by query_id then doc_id:
    query_pk, query_id, doc_pk, doc_id, grade, n_annotators, conflict, adjudicated, rank, score
    (``retriever``'s rank and score, NaN if it did not return the chunk). ``retriever``: the named
    retriever, else the default one (None when none can be chosen and the format embeds no single
    ranking). ``run``: its ranking of the exported queries (query_pk, query_id, rank, doc_pk,
    doc_id, score; empty without one). ``ran``: the exported queries it ran (the others are left
    out of its run file and metrics). ``run_names``: the retrievers whose rankings a format that
    writes one run per retriever (trec) writes: the named one, else every one that logged
    rankings; :meth:`run_of` reads each.
    """

    threshold: int
    retriever: str | None
    filters: dict[str, Any]
    queries: pd.DataFrame
    pairs: pd.DataFrame
    run: pd.DataFrame
    ran: set[int]
    db: sqlite_utils.Database = field(repr=False)
    run_names: list[str] = field(default_factory=list)
    _runs: dict[str, tuple[pd.DataFrame, set[int]]] = field(default_factory=dict, repr=False)

    def run_of(self, retriever: str) -> tuple[pd.DataFrame, set[int]]:
        """(ranking, queries it ran) of ``retriever`` over the exported queries, as ``run``/``ran``."""
        if retriever == self.retriever:
            return self.run, self.ran
        if retriever not in self._runs:
            self._runs[retriever] = _read_run(self.db, self.queries, retriever)
        return self._runs[retriever]

    def relevant(self) -> pd.DataFrame:
        """Pairs with grade >= threshold, per query highest grade first, then doc_id."""
        rel = self.pairs[self.pairs["grade"] >= self.threshold]
        return rel.sort_values(["query_id", "grade", "doc_id"], ascending=[True, False, True], kind="stable")

    def texts(self, doc_pks: Iterable[int]) -> dict[int, tuple[str | None, str | None]]:
        """{doc_pk: (title, text)} for the given chunks."""
        return {pk: (title, text) for pk, title, text in self.db.execute(
            "SELECT pk, title, text FROM documents WHERE pk IN (SELECT value FROM json_each(?))",
            [json.dumps(sorted({int(p) for p in doc_pks}))])}

    def counts(self) -> dict[str, Any]:
        return _counts(self.queries, self.pairs, self.threshold, self.ran)


def _counts(queries: pd.DataFrame, pairs: pd.DataFrame, threshold: int, ran: set[int]) -> dict[str, Any]:
    rel = pairs["grade"] >= threshold
    has_rel = set(pairs.loc[rel, "query_pk"])
    return {
        "queries": len(queries),
        "queries_by_origin": {o: int((queries["origin"] == o).sum()) for o in ORIGINS},
        "queries_without_relevant": int(sum(pk not in has_rel for pk in queries["query_pk"])),
        "judged_pairs": len(pairs),
        "relevant_pairs": int(rel.sum()),
        "conflicts": int(pairs.loc[pairs["conflict"], "query_pk"].nunique()),
        "queries_not_run": int(len(queries) - len(ran)),
    }


def ids_json(values: Iterable[int]) -> str:
    return json.dumps(sorted({int(v) for v in values}))


def _latest(rows: list[tuple], column: int) -> Any:
    """The value of ``column`` from the most recently submitted row that has one (ties by annotator)."""
    for row in sorted(rows, key=lambda r: (r[5] or "", r[1]), reverse=True):
        if row[column] not in (None, ""):
            return row[column]
    return None


def _read_run(db: sqlite_utils.Database, queries: pd.DataFrame, retriever: str | None
              ) -> tuple[pd.DataFrame, set[int]]:
    """``retriever``'s ranking of ``queries`` (query_pk, query_id, rank, doc_pk, doc_id, score) and the
    queries it ran (empty for None)."""
    keep = set(queries["query_pk"].tolist())
    run = pd.DataFrame(db.execute(
        "SELECT r.query_pk, r.rank, r.doc_pk, d.doc_id, r.score FROM retrievals r JOIN documents d ON d.pk = r.doc_pk "
        f"WHERE r.query_pk IN (SELECT value FROM json_each(?)) AND r.retriever = ? AND {store.visible('r')} "
        "ORDER BY r.query_pk, r.rank",
        [ids_json(keep), retriever]).fetchall(), columns=["query_pk", "rank", "doc_pk", "doc_id", "score"])
    qid = dict(zip(*column_lists(queries, "query_pk", "query_id"), strict=True))
    run.insert(1, "query_id", run["query_pk"].map(qid))
    run = run.sort_values(["query_id", "rank"], kind="stable").reset_index(drop=True)
    ran = set() if retriever is None else set(logged_queries(db, retriever, keep).tolist())
    return run, ran


def _choose(db: sqlite_utils.Database, retriever: str | None, required: bool) -> tuple[str | None, list[str]]:
    """(the retriever whose ranking is embedded, the retrievers whose runs are written)."""
    names = logged_retrievers(db)
    if retriever is not None or (required and names):
        chosen = default_retriever(db, retriever, known=names)  # RetrieverError: one line naming them
        return chosen, [chosen] if retriever is not None else names
    try:
        return default_retriever(db, None, known=names), names
    except RetrieverError:
        return None, names  # nothing embeds a single ranking: no default is needed


def _check_filters(origin: str | None, min_annotators: Any) -> None:
    if origin is not None and origin not in ORIGINS:
        raise ExportError(f"origin {origin!r} is unknown; use one of: {', '.join(ORIGINS)}")
    if isinstance(min_annotators, bool) or not isinstance(min_annotators, int) or min_annotators < 1:
        raise ExportError(f"min_annotators must be a whole number >= 1; got {min_annotators!r}")


def _chosen(db: sqlite_utils.Database, origin: str | None, min_annotators: int,
            include_unreviewed_synthetic: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the exported queries, unsorted, without their split; the golden labels they are among)."""
    golden = golden_labels(db, origin=origin)
    pks = set(golden["query_pk"].tolist())
    if include_unreviewed_synthetic:
        pks |= {r[0] for r in db.execute(
            "SELECT pk FROM queries WHERE origin = 'synthetic' AND coalesce(review_state, 'pending') = 'pending' "
            "AND (?1 IS NULL OR origin = ?1)", [origin])}
    meta = db.execute(
        "SELECT pk, query_id, question, origin, answer, review_state, meta FROM queries "
        "WHERE pk IN (SELECT value FROM json_each(?))", [ids_json(pks)]).fetchall()
    submitted: dict[int, list[tuple]] = {}
    for row in db.execute(
            "SELECT query_pk, annotator, expected_answer, answer_faithful, answer_relevant, submitted_at "
            "FROM query_labels WHERE status = 'submitted' AND query_pk IN (SELECT value FROM json_each(?))",
            [ids_json(pks)]):
        submitted.setdefault(row[0], []).append(row)
    rows = []
    for pk, query_id, question, q_origin, answer, review_state, q_meta in meta:
        if q_origin == "synthetic" and review_state != "accepted":
            if not (include_unreviewed_synthetic and (review_state or "pending") == "pending"):
                continue
        labels = submitted.get(pk, [])
        if len(labels) < min_annotators and not (q_origin == "synthetic" and review_state != "accepted"):
            continue
        expected = _latest(labels, 2)
        if expected is None and q_origin == "synthetic":
            expected = (store.loads(q_meta) or {}).get("expected_answer")
        rows.append({"query_pk": pk, "query_id": query_id, "question": question, "origin": q_origin,
                     "answer": answer, "expected_answer": expected, "answer_faithful": _latest(labels, 3),
                     "answer_relevant": _latest(labels, 4), "annotators": sorted(r[1] for r in labels)})
    queries = pd.DataFrame(rows, columns=["query_pk", "query_id", "question", "origin", "answer", "expected_answer",
                                          "answer_faithful", "answer_relevant", "annotators"])
    return queries, golden


def golden_counts(db: sqlite_utils.Database, *, origin: str | None = None, min_annotators: int = 1,
                  include_unreviewed_synthetic: bool = False) -> dict[str, Any]:
    """``golden_set(db, ...).counts()`` with the same filters, without reading what only the files
    need (rankings, chunk ids, sorted order): a fifth of the time at 100k queries."""
    _check_filters(origin, min_annotators)
    retriever, _ = _choose(db, None, False)
    threshold = int(store.get_setting(db, "threshold"))
    queries, golden = _chosen(db, origin, min_annotators, include_unreviewed_synthetic)
    keep = set(queries["query_pk"].tolist())
    ran = set() if retriever is None else set(logged_queries(db, retriever, keep).tolist())
    return _counts(queries, golden[golden["query_pk"].isin(keep)], threshold, ran)


def golden_set(db: sqlite_utils.Database, *, origin: str | None = None, min_annotators: int = 1,
               include_unreviewed_synthetic: bool = False, retriever: str | None = None,
               required: bool = False) -> GoldenSet:
    """Read what an export writes; see :class:`GoldenSet`.

    Queries: those with consolidated labels, of ``origin`` if given, submitted by at least
    ``min_annotators`` annotators; synthetic questions only once accepted in review unless
    ``include_unreviewed_synthetic`` (then pending ones are included too, with whatever human labels
    they have and their proposed expected answer; rejected ones never are).

    ``retriever``: whose ranking is embedded (one that logged nothing raises RetrieverError); None =
    the default retriever. ``required``: the caller embeds one ranking (ragas, csv), so several
    retrievers without a default raise RetrieverError; otherwise ``retriever`` is then None.
    """
    _check_filters(origin, min_annotators)
    retriever, run_names = _choose(db, retriever, required)
    threshold = int(store.get_setting(db, "threshold"))
    queries, golden = _chosen(db, origin, min_annotators, include_unreviewed_synthetic)
    queries = queries.sort_values("query_id", kind="stable").reset_index(drop=True)
    queries["split"] = split_column(db, queries["query_id"].tolist())  # dev / holdout (labeler split)
    keep = set(queries["query_pk"].tolist())
    pairs = golden[golden["query_pk"].isin(keep)].copy()
    doc_ids = dict(db.execute("SELECT pk, doc_id FROM documents WHERE pk IN (SELECT value FROM json_each(?))",
                              [ids_json(pairs["doc_pk"])]).fetchall())
    run, ran = _read_run(db, queries, retriever)
    qid = dict(zip(*column_lists(queries, "query_pk", "query_id"), strict=True))
    pairs["query_id"] = pairs["query_pk"].map(qid)
    pairs["doc_id"] = pairs["doc_pk"].map(doc_ids)
    pairs = pairs.merge(run[["query_pk", "doc_pk", "rank", "score"]], on=["query_pk", "doc_pk"], how="left")
    pairs = pairs.sort_values(["query_id", "doc_id"], kind="stable").reset_index(drop=True)
    pairs = pairs[["query_pk", "query_id", "doc_pk", "doc_id", "grade", "n_annotators", "conflict", "adjudicated",
                   "rank", "score"]]
    conflicted = set(pairs.loc[pairs["conflict"], "query_pk"].tolist())
    queries["conflict"] = queries["query_pk"].isin(conflicted)
    filters = {"origin": origin, "min_annotators": min_annotators,
               "include_unreviewed_synthetic": bool(include_unreviewed_synthetic), "retriever": retriever}
    return GoldenSet(threshold, retriever, filters, queries, pairs, run, ran, db, run_names)
