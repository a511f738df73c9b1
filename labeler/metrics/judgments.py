"""What every measure reads: the run joined to the qrels (``RankedJudgments``, built by
``join_run_qrels`` from integer or string keys), the checks of those inputs, and ``rank_by_score``
(trec_eval's ranking: score descending, ties by doc id descending as strings)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from ..errors import LabelerError

COUNT_COLUMNS = ("n_relevant", "n_retrieved")


class MetricError(LabelerError, ValueError):
    """A metric spec, run, qrels table or option that cannot be evaluated; the message says the fix."""


@dataclass(frozen=True)
class RankedJudgments:
    """The run joined to the qrels, as handed to every metric function.

    Row arrays (``qidx``, ``rank``, ``grade``, ``judged``, ``relevant``) have one entry per retrieved
    doc of a judged query, sorted by (query, rank); ``qidx`` is the query's position in the sorted
    query list, ``grade`` is 0 for unjudged docs. ``qrels_qidx``/``qrels_grade`` hold every judged
    pair. ``n_relevant`` counts grade >= threshold per query.
    """

    n_queries: int
    threshold: int
    qidx: np.ndarray
    rank: np.ndarray
    grade: np.ndarray
    judged: np.ndarray
    n_relevant: np.ndarray
    n_retrieved: np.ndarray
    qrels_qidx: np.ndarray
    qrels_grade: np.ndarray

    @cached_property
    def relevant(self) -> np.ndarray:
        """Row array: grade >= threshold."""
        return self.grade >= self.threshold

    def sum_top(self, values: np.ndarray, k: int | None) -> np.ndarray:
        """Per-query sum of a row array over ranks <= k (every row when k is None)."""
        weights = values if k is None else np.where(self.rank <= k, values, 0)
        return np.bincount(self.qidx, weights=weights, minlength=self.n_queries)

    @cached_property
    def first_relevant_rank(self) -> np.ndarray:
        """Rank of each query's first relevant doc; inf when none was retrieved."""
        rel_q, rel_rank = self.qidx[self.relevant], self.rank[self.relevant]
        first = np.diff(rel_q, prepend=-1) != 0  # rows are sorted, so a group's first row wins
        out = np.full(self.n_queries, np.inf)
        out[rel_q[first]] = rel_rank[first]
        return out

    @cached_property
    def precision_at_relevant(self) -> np.ndarray:
        """Row array: precision at the row's rank for relevant rows, 0 elsewhere (the terms of AP)."""
        rel_q = self.qidx[self.relevant]
        pos = np.arange(rel_q.size)
        starts = np.maximum.accumulate(np.where(np.diff(rel_q, prepend=-1) != 0, pos, 0))
        out = np.zeros(self.rank.size)
        out[self.relevant] = (pos - starts + 1) / self.rank[self.relevant]
        return out

    @cached_property
    def discount(self) -> np.ndarray:
        """Row array 1 / log2(rank + 1), trec_eval's DCG discount."""
        return 1.0 / np.log2(self.rank + 1.0)

    @cached_property
    def _grade_counts(self) -> tuple[np.ndarray, np.ndarray]:
        top = int(self.qrels_grade.max()) if self.qrels_grade.size else 0
        if top <= 32:  # the usual small scale: grades index the count matrix directly
            cell = self.qrels_qidx * (top + 1) + self.qrels_grade
            counts = np.bincount(cell, minlength=self.n_queries * (top + 1)).reshape(self.n_queries, top + 1)
            return np.arange(1, top + 1), counts[:, 1:]
        positive = self.qrels_grade > 0
        levels = np.unique(self.qrels_grade[positive])
        cell = self.qrels_qidx[positive] * levels.size + np.searchsorted(levels, self.qrels_grade[positive])
        counts = np.bincount(cell, minlength=self.n_queries * levels.size)
        return levels, counts.reshape(self.n_queries, levels.size)

    def ideal_dcg(self, k: int, gain: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """Per-query DCG@k (k required) of the ideal ranking: every judged grade > 0, highest first."""
        levels, counts = self._grade_counts
        prefix = np.r_[0.0, np.cumsum(1.0 / np.log2(np.arange(2, k + 2)))]  # prefix[p] = discounts 1..p
        start = np.zeros(self.n_queries, dtype=np.int64)
        total = np.zeros(self.n_queries)
        # Looping over grade levels (a handful), not queries: each level fills the next positions.
        for j in range(levels.size - 1, -1, -1):
            end = start + counts[:, j]
            total += gain(levels[j : j + 1])[0] * (prefix[np.minimum(end, k)] - prefix[np.minimum(start, k)])
            start = end
        return total


def _check_columns(df: pd.DataFrame, what: str, columns: Sequence[str]) -> None:
    if not isinstance(df, pd.DataFrame):
        raise MetricError(f"{what} must be a pandas DataFrame with columns {', '.join(columns)}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise MetricError(f"{what} lacks column(s) {', '.join(missing)}; it needs {', '.join(columns)}")
    for c in columns:
        if df[c].isna().any():
            raise MetricError(f"{what}.{c} has missing values; drop those rows first")


def _whole(series: pd.Series, what: str, minimum: int) -> np.ndarray:
    values = series.to_numpy()
    if values.size == 0:  # an empty column built without rows has dtype object
        return values.astype(np.int64)
    if values.dtype.kind not in "iuf" or (values.dtype.kind == "f" and not np.all(values == np.round(values))):
        raise MetricError(f"{what} must hold whole numbers; convert it with .astype(int)")
    values = values.astype(np.int64)
    if values.size and values.min() < minimum:
        raise MetricError(f"{what} must be >= {minimum}; found {values.min()}")
    return values


def _same_kind(run: pd.Series, qrels: pd.Series, column: str) -> None:
    # int ids in one table and strings in the other would silently match nothing.
    if run.size and qrels.size and pd.api.types.is_numeric_dtype(run) != pd.api.types.is_numeric_dtype(qrels):
        raise MetricError(
            f"run.{column} is {run.dtype} but qrels.{column} is {qrels.dtype}; use the same id type in both"
        )


def _doc_codes(qrels_doc: pd.Series, run_doc: pd.Series, n_queries: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Doc ids as small non-negative ints shared by both tables, and their range (query * range + doc
    must fit in int64)."""
    if qrels_doc.dtype.kind in "iu" and run_doc.dtype.kind in "iu" and qrels_doc.size:
        q, r = qrels_doc.to_numpy(np.int64), run_doc.to_numpy(np.int64)
        low = min(q.min(), r.min()) if r.size else q.min()
        high = max(q.max(), r.max()) if r.size else q.max()
        if (int(high) - int(low) + 1) * max(n_queries, 1) < 1 << 62:  # surrogate keys need no hashing
            return q - low, r - low, int(high) - int(low) + 1
    codes, uniques = pd.factorize(pd.concat([qrels_doc, run_doc], ignore_index=True))
    return codes[: qrels_doc.size].astype(np.int64), codes[qrels_doc.size :].astype(np.int64), max(len(uniques), 1)


def join_run_qrels(run: pd.DataFrame, qrels: pd.DataFrame, *, threshold: int = 2) -> tuple[pd.Index, RankedJudgments]:
    """Join a run (query, doc, rank) to qrels (query, doc, grade): the sorted judged queries and the
    :class:`RankedJudgments` that metric functions read. Validates both tables (see :func:`per_query`)."""
    if isinstance(threshold, bool) or not isinstance(threshold, int | np.integer) or threshold < 1:
        raise MetricError(f"threshold must be a whole number >= 1 (grade 0 is irrelevant); got {threshold!r}")
    _check_columns(run, "run", ("query", "doc", "rank"))
    _check_columns(qrels, "qrels", ("query", "doc", "grade"))
    _same_kind(run["query"], qrels["query"], "query")
    _same_kind(run["doc"], qrels["doc"], "doc")
    grade = _whole(qrels["grade"], "qrels.grade", 0)
    rank = _whole(run["rank"], "run.rank", 1)
    try:
        qrels_qidx, queries = pd.factorize(qrels["query"], sort=True)
    except TypeError as e:
        raise MetricError(f"qrels.query mixes id types that cannot be sorted ({e}); use one type") from e
    queries = pd.Index(queries, name="query")
    n_q = len(queries)
    run_qidx = queries.get_indexer(run["query"])
    keep = run_qidx >= 0  # queries only in the run have nothing to be measured against
    run_qidx, rank = run_qidx[keep].astype(np.int64), rank[keep]
    qrels_doc, run_doc, n_docs = _doc_codes(qrels["doc"], run["doc"][keep], n_q)

    # Rows sorted by (query, rank); runs usually arrive sorted, so check before paying for a sort.
    max_rank = int(rank.max()) + 1 if rank.size else 1
    if n_q * max_rank < 1 << 62:
        order_key = run_qidx * max_rank + rank
        order = None if np.all(order_key[1:] > order_key[:-1]) else np.argsort(order_key, kind="stable")
    else:
        order = np.lexsort((rank, run_qidx))
    if order is not None:
        run_qidx, rank, run_doc = run_qidx[order], rank[order], run_doc[order]
    same = np.flatnonzero((run_qidx[1:] == run_qidx[:-1]) & (rank[1:] == rank[:-1]))
    if same.size:
        raise MetricError(
            f"run has two docs at rank {rank[same[0]]} for query {queries[run_qidx[same[0]]]!r}; "
            "ranks must be unique per query (use rank_by_score to break ties)"
        )

    # Grade lookup by a combined (query, doc) key in the sorted qrels: a binary search, no hashing.
    qrels_key = qrels_qidx.astype(np.int64) * n_docs + qrels_doc
    qrels_order = None if np.all(qrels_key[1:] > qrels_key[:-1]) else np.argsort(qrels_key, kind="stable")
    sorted_key = qrels_key if qrels_order is None else qrels_key[qrels_order]
    sorted_grade = grade if qrels_order is None else grade[qrels_order]
    dup = np.flatnonzero(sorted_key[1:] == sorted_key[:-1])
    if dup.size:
        row = dup[0] if qrels_order is None else qrels_order[dup[0]]
        raise MetricError(
            f"qrels has {dup.size} duplicate (query, doc) pair(s), e.g. ({qrels['query'].iloc[row]!r}, "
            f"{qrels['doc'].iloc[row]!r}); keep one grade per pair"
        )
    run_key = run_qidx * n_docs + run_doc
    pos = np.minimum(np.searchsorted(sorted_key, run_key), max(sorted_key.size - 1, 0))
    judged = sorted_key[pos] == run_key if sorted_key.size else np.zeros(run_key.size, dtype=bool)
    if np.any(np.bincount(pos[judged], minlength=1) > 1):
        raise MetricError("run lists the same judged doc twice for one query; keep each doc once per query")
    run_grade = np.where(judged, sorted_grade[pos] if sorted_grade.size else 0, 0)

    qrels_qidx = qrels_qidx.astype(np.int64)
    judgments = RankedJudgments(
        n_queries=n_q,
        threshold=int(threshold),
        qidx=run_qidx,
        rank=rank,
        grade=run_grade,
        judged=judged,
        n_relevant=np.bincount(qrels_qidx, weights=grade >= threshold, minlength=n_q).astype(np.int64),
        n_retrieved=np.bincount(run_qidx, minlength=n_q).astype(np.int64),
        qrels_qidx=qrels_qidx,
        qrels_grade=grade,
    )
    return queries, judgments


def rank_by_score(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` (columns query, doc, score) with a ``rank`` column: 1 for the highest score
    within each query, ties broken by doc id descending compared as strings, as trec_eval does (so
    doc 9 ranks above doc 10). Rows keep their order; an existing ``rank`` column is replaced.
    """
    _check_columns(df, "df", ("query", "doc", "score"))
    try:
        score = df["score"].to_numpy(dtype=float)
    except (TypeError, ValueError) as e:
        raise MetricError(f"df.score must be numeric ({e}); convert it with .astype(float)") from e
    query = pd.factorize(df["query"])[0]
    order = np.lexsort((-score, query))
    query, score = query[order], score[order]
    tied = (query[1:] == query[:-1]) & (score[1:] == score[:-1])
    if tied.any():
        # Only rows that share a score need their doc ids as strings: converting all is the slow part.
        rows = np.flatnonzero(np.r_[tied, False] | np.r_[False, tied])
        run_id = np.cumsum(np.r_[True, ~tied])[rows]  # one id per stretch of equal (query, score)
        docs = df["doc"].to_numpy()[order[rows]].astype(str)
        within = np.lexsort((docs, -run_id))[::-1]  # run_id ascending, doc descending
        order[rows] = order[rows[within]]
    position = np.arange(order.size)
    starts = np.maximum.accumulate(np.where(np.diff(query, prepend=-1) != 0, position, 0))
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = position - starts + 1
    return df.assign(rank=rank)
