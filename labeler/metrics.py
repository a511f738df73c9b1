"""Retrieval metrics over graded relevance labels: per-query values equal to trec_eval's, their
aggregation with seeded bootstrap confidence intervals, and a paired randomization test. A metric is a
function registered under a name (with aliases) and parsed from a spec such as ``ndcg@10``; the
built-ins are registered the same way as extensions. Everything is vectorised over queries with
numpy, so 100k queries cost a fraction of a second.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from labeler.errors import LabelerError

COUNT_COLUMNS = ("n_relevant", "n_retrieved")
_CHUNK = 1 << 18  # elements per resampling block: stays in cache and bounds memory whatever n is


class MetricError(LabelerError, ValueError):
    """A metric spec, run, qrels table or option that cannot be evaluated; the message says the fix."""


@dataclass(frozen=True)
class Metric:
    """A parsed metric spec: canonical ``name``, cutoff ``k`` (None = whole list), and ``spec`` as the
    user spelled it (``"P@5"`` stays ``"P@5"``, named ``precision`` with k=5); ``spec`` is the column
    name in :func:`per_query` output."""

    name: str
    k: int | None
    spec: str

    def __str__(self) -> str:
        return self.spec

    @property
    def definition(self) -> MetricDef:
        """The registered :class:`MetricDef` behind ``name``."""
        return METRICS[self.name]


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


MetricFn = Callable[[RankedJudgments, "int | None"], np.ndarray]


@dataclass(frozen=True)
class MetricDef:
    """A registered metric: ``fn(judgments, k)`` returns one float per query (0/0 may give NaN)."""

    name: str
    fn: MetricFn
    aliases: tuple[str, ...]
    needs_k: bool
    nan_without_relevant: bool

    @property
    def description(self) -> str:
        """First line of the function's docstring, for help texts and the README table."""
        return next(iter((self.fn.__doc__ or "").strip().splitlines()), "")


METRICS: dict[str, MetricDef] = {}
ALIASES: dict[str, str] = {}  # alias (lower case) -> canonical name
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def register_metric(
    name: str,
    fn: MetricFn,
    *,
    aliases: Sequence[str] = (),
    needs_k: bool = False,
    nan_without_relevant: bool = True,
) -> MetricDef:
    """Register ``fn`` as metric ``name`` (lower case) and its ``aliases`` (matched case-insensitively).

    ``needs_k``: a spec must give a cutoff (``name@k``); otherwise the cutoff is optional.
    ``nan_without_relevant``: :func:`per_query` sets the value to NaN for queries with no relevant doc.
    Raises MetricError when a name or alias is malformed or already taken.
    """
    names = [name, *(a.lower() for a in aliases)]
    if len(set(names)) < len(names):
        raise MetricError(f"metric {name!r} lists a name twice among {names}; give each name once")
    for n in names:
        if not _NAME.match(n):
            raise MetricError(f"metric name {n!r} is invalid: use lower-case letters, digits and '_'")
        if n in METRICS or n in ALIASES:
            raise MetricError(f"metric name {n!r} is already registered; pick another name")
    definition = MetricDef(name, fn, tuple(aliases), needs_k, nan_without_relevant)
    METRICS[name] = definition
    ALIASES.update({a: name for a in names[1:]})
    return definition


def _known() -> str:
    return ", ".join(
        f"{d.name} ({', '.join(d.aliases)})" if d.aliases else d.name for _, d in sorted(METRICS.items())
    )


def parse_metric(spec: str) -> Metric:
    """Parse ``name`` or ``name@k`` (e.g. ``recall@5``, ``P@10``, ``mrr``) into a :class:`Metric`.

    Names and aliases are case-insensitive; k must be a positive integer and is required for metrics
    registered with ``needs_k``. Raises MetricError naming the spec and, for an unknown name, every
    known name and alias.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise MetricError(f"metric spec {spec!r} is empty; write e.g. 'recall@10' or 'mrr'")
    spec = spec.strip()
    raw_name, at, raw_k = spec.partition("@")
    key = raw_name.strip().lower()
    name = key if key in METRICS else ALIASES.get(key)
    if name is None:
        raise MetricError(f"unknown metric {raw_name!r} in {spec!r}; known metrics: {_known()}")
    k = None
    if at:
        if not re.fullmatch(r"\s*\d+\s*", raw_k) or int(raw_k) < 1:
            raise MetricError(f"cutoff in {spec!r} must be a positive integer, e.g. '{raw_name}@10'")
        k = int(raw_k)
    elif METRICS[name].needs_k:
        raise MetricError(f"metric {spec!r} needs a cutoff: write e.g. '{raw_name}@10'")
    return Metric(name, k, spec)


def _recall(r: RankedJudgments, k: int | None) -> np.ndarray:
    """Relevant docs in the top k / all relevant judged docs (trec_eval recall_k)."""
    return r.sum_top(r.relevant, k) / r.n_relevant


def _precision(r: RankedJudgments, k: int | None) -> np.ndarray:
    """Relevant docs in the top k / k, even when fewer than k were retrieved (trec_eval P_k)."""
    return r.sum_top(r.relevant, k) / k


def _hit(r: RankedJudgments, k: int | None) -> np.ndarray:
    """1 if any relevant doc is in the top k, else 0 (trec_eval success_k)."""
    return (r.sum_top(r.relevant, k) > 0).astype(float)


def _mrr(r: RankedJudgments, k: int | None) -> np.ndarray:
    """1 / rank of the first relevant doc, 0 if none was retrieved (trec_eval recip_rank, no cutoff).

    With @k: 0 when the first relevant doc is below rank k.
    """
    first = r.first_relevant_rank
    return np.where(first <= (np.inf if k is None else k), 1.0 / first, 0.0)


def _linear_gain(grade: np.ndarray) -> np.ndarray:
    return grade.astype(float)


def _exp_gain(grade: np.ndarray) -> np.ndarray:
    return np.exp2(grade.astype(float)) - 1.0


def _ndcg(r: RankedJudgments, k: int | None) -> np.ndarray:
    """nDCG@k: DCG of the top k / DCG@k of the ideal ranking (trec_eval ndcg_cut_k).

    DCG = sum of gain / log2(rank + 1) with gain = grade (unjudged = 0). The ideal ranking orders
    every judged doc with grade > 0 by grade, highest first. As in trec_eval, gains ignore the
    threshold: with threshold 2 a grade-1 doc still adds gain 1, to DCG and to the ideal.
    """
    return r.sum_top(_linear_gain(r.grade) * r.discount, k) / r.ideal_dcg(k, _linear_gain)


def _ndcg_exp(r: RankedJudgments, k: int | None) -> np.ndarray:
    """nDCG@k with gain 2^grade - 1 (Burges et al.), otherwise as ndcg; no trec_eval equivalent."""
    return r.sum_top(_exp_gain(r.grade) * r.discount, k) / r.ideal_dcg(k, _exp_gain)


def _ap(r: RankedJudgments, k: int | None) -> np.ndarray:
    """Average precision: sum of precision at each relevant rank <= k / all relevant (trec_eval map, map_cut_k)."""
    return r.sum_top(r.precision_at_relevant, k) / r.n_relevant


def _judged(r: RankedJudgments, k: int | None) -> np.ndarray:
    """Docs in the top k that carry any label (grade 0 included) / the docs in the top k (k, or fewer
    when fewer were retrieved): the share of the retriever's top k that is judged. Defined without
    relevant docs; NaN for a query with nothing retrieved. (ir_measures' Judged@k divides by k.)"""
    shown = np.minimum(r.n_retrieved, k).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(shown > 0, r.sum_top(r.judged, k) / shown, np.nan)


register_metric("recall", _recall, needs_k=True)
register_metric("precision", _precision, aliases=("P",), needs_k=True)
register_metric("hit", _hit, aliases=("success",), needs_k=True)
register_metric("mrr", _mrr, aliases=("recip_rank",))
register_metric("ndcg", _ndcg, aliases=("ndcg_cut",), needs_k=True)
register_metric("ndcg_exp", _ndcg_exp, needs_k=True)
register_metric("ap", _ap, aliases=("map",))
register_metric("judged", _judged, needs_k=True, nan_without_relevant=False)


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


def per_query(
    run: pd.DataFrame, qrels: pd.DataFrame, metrics: Sequence[str | Metric], *, threshold: int = 2
) -> pd.DataFrame:
    """Every metric for every judged query, as trec_eval computes it (with ``-c -l threshold``).

    ``run`` has columns query, doc, rank: rank is the 1-based position, unique per query (ties
    already broken, see :func:`rank_by_score`); a gap in ranks is an empty position. ``qrels`` has
    columns query, doc, grade (whole number >= 0), one row per judged pair, zeros included. Query and
    doc ids may be ints or strings, the same type in both tables. A doc is relevant when its grade
    >= ``threshold``; an unjudged retrieved doc counts as grade 0.

    Returns a DataFrame indexed by query (every query in qrels, sorted; queries only in the run are
    ignored) with one float column per metric, named by its spec as given, then ``n_relevant``
    (grade >= threshold) and ``n_retrieved``. A query in qrels but not in the run scores 0. A query
    without relevant docs gets NaN for every metric except ``judged@k``; :func:`aggregate` skips
    those and :func:`n_without_relevant` counts them.
    """
    parsed = [m if isinstance(m, Metric) else parse_metric(m) for m in metrics]
    specs = [m.spec for m in parsed]
    repeated = sorted({s for s in specs if specs.count(s) > 1} | set(specs) & set(COUNT_COLUMNS))
    if repeated:
        raise MetricError(f"metric spec(s) {', '.join(repeated)} given twice or clash with a count column")
    unknown = [m.spec for m in parsed if m.name not in METRICS]
    if unknown:
        raise MetricError(f"unknown metric(s) {', '.join(unknown)}; known metrics: {_known()}")
    queries, judgments = join_run_qrels(run, qrels, threshold=threshold)
    no_relevant = judgments.n_relevant == 0
    columns: dict[str, np.ndarray] = {}
    with np.errstate(divide="ignore", invalid="ignore"):  # 0/0 for queries that are NaN-ed anyway
        for m in parsed:
            definition = METRICS[m.name]
            values = np.asarray(definition.fn(judgments, m.k), dtype=float)
            if definition.nan_without_relevant:
                values = np.where(no_relevant, np.nan, values)
            columns[m.spec] = values
    columns["n_relevant"] = judgments.n_relevant
    columns["n_retrieved"] = judgments.n_retrieved
    return pd.DataFrame(columns, index=queries)


def n_without_relevant(per_q: pd.DataFrame) -> int:
    """Number of queries in a :func:`per_query` result that have no relevant doc (their metrics are NaN)."""
    if "n_relevant" not in per_q.columns:
        raise MetricError("per_q lacks column n_relevant; pass the DataFrame that per_query returned")
    return int((per_q["n_relevant"] == 0).sum())


_BLOCK_BITS = 10  # resampling weights are drawn for blocks of 1024 consecutive keys


def _poisson_table() -> np.ndarray:
    """Poisson(1) by table lookup: entry j is the inverse CDF at (j + 0.5) / 65536, so a uniform
    16-bit draw gives a Poisson(1) count with every probability within 1/65536 of the exact one."""
    pmf = np.exp(-1.0) / np.cumprod(np.r_[1.0, np.arange(1.0, 20.0)])
    cdf = np.cumsum(pmf)
    u = (np.arange(65536) + 0.5) / 65536
    return np.searchsorted(cdf, u, side="right").astype(np.uint8)


_POISSON = _poisson_table()


def resample_weights(seed: int, block: int, n_resamples: int) -> np.ndarray:
    """The bootstrap weights of keys ``block * 1024 ... block * 1024 + 1023``: an (n_resamples, 1024)
    uint8 array of Poisson(1) counts drawn from ``numpy.random.default_rng([seed, block])``. A key's
    weights depend only on the seed, the key and n_resamples, never on which other keys are present,
    which is what lets a report patch its resampled sums when a few queries change."""
    rng = np.random.default_rng([int(seed), int(block)])
    draws = np.frombuffer(rng.bytes(n_resamples * (2 << _BLOCK_BITS)), dtype=np.uint16)
    return _POISSON[draws].reshape(n_resamples, 1 << _BLOCK_BITS)


def resample_sums(keys: np.ndarray, columns: np.ndarray, *, seed: int = 0, n_resamples: int = 1000) -> np.ndarray:
    """Poisson-bootstrap sums: ``out[b, j] = sum_i w[b, key_i] * columns[i, j]`` with the weights of
    :func:`resample_weights`; shape (n_resamples, columns.shape[1]). ``keys``: distinct whole numbers
    >= 0 (query pks, or positions), one per row of ``columns``. Sums over disjoint sets of keys add
    up to the sum over their union (up to float rounding)."""
    keys = np.asarray(keys, dtype=np.int64)
    columns = np.asarray(columns, dtype=np.float64).reshape(keys.size, -1)
    out = np.zeros((int(n_resamples), columns.shape[1]))
    if keys.size == 0:
        return out
    blocks = keys >> _BLOCK_BITS
    order = np.argsort(blocks, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(blocks[order]) != 0])
    for rows in np.split(order, starts[1:]):
        weights = _key_weights(int(seed), int(blocks[rows[0]]), int(n_resamples), keys[rows] & ((1 << _BLOCK_BITS) - 1))
        out += weights.astype(np.float64) @ columns[rows]
    return out


_KEY_CACHE_MAX = 1 << 16  # key columns kept (64 MB at 1000 resamples); past it the cache starts over
_key_cache: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}
_key_cache_held = [0]  # key columns in _key_cache
_key_cache_lock = threading.Lock()


def _key_weights(seed: int, block: int, n_resamples: int, offsets: np.ndarray) -> np.ndarray:
    """``resample_weights(seed, block, n_resamples)[:, offsets]``, with the columns of the keys asked
    for kept in memory: drawing a block costs the same whether 1 or 1024 of its keys are present, and
    a report's groups (topics, signals) ask for the same few keys of many blocks on every rerun."""
    cache_key = (seed, n_resamples, block)
    with _key_cache_lock:
        hit = _key_cache.get(cache_key)
    if hit is not None:
        known, cached = hit
        pos = np.minimum(np.searchsorted(known, offsets), known.size - 1)
        if (known[pos] == offsets).all():
            return cached[:, pos]
    full = resample_weights(seed, block, n_resamples)
    known = np.union1d(offsets, hit[0]) if hit is not None else np.unique(offsets)
    with _key_cache_lock:
        old = _key_cache.pop(cache_key, None)
        _key_cache_held[0] -= 0 if old is None else old[0].size
        if _key_cache_held[0] + known.size > _KEY_CACHE_MAX:
            _key_cache.clear()
            _key_cache_held[0] = 0
        if known.size <= _KEY_CACHE_MAX:
            _key_cache[cache_key] = (known, full[:, known])
            _key_cache_held[0] += known.size
    return full[:, offsets]


def bootstrap_keys(index: pd.Index) -> np.ndarray:
    """The resampling key of each row: the index itself when it holds distinct whole numbers >= 0
    (query pks: a query keeps its weights whatever else is in the table), else the row position."""
    if index.dtype.kind in "iu" and index.size and index.min() >= 0 and index.is_unique:
        return index.to_numpy(np.int64)
    return np.arange(index.size, dtype=np.int64)


def interval(sums: np.ndarray, counts: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of resampled means ``sums / counts`` (resamples that drew no query are
    skipped): (low, high), one value per column of ``sums``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        means = sums / counts.reshape(-1, 1)
    means[counts == 0] = np.nan
    q = [(1 - confidence) / 2, (1 + confidence) / 2]
    low, high = np.nanquantile(means, q, axis=0)
    return low, high


def aggregate(
    per_q: pd.DataFrame, *, confidence: float = 0.95, n_resamples: int = 1000, seed: int = 0
) -> dict[str, dict]:
    """Mean and percentile-bootstrap confidence interval of every metric column of ``per_q``.

    Metric columns are all but ``n_relevant`` and ``n_retrieved``. Each gets ``{"mean", "ci_low",
    "ci_high", "n"}`` over its non-NaN values. The bootstrap is the Poisson bootstrap: resample b
    gives each query a weight w[b, query] ~ Poisson(1) (:func:`resample_weights`, seeded by
    ``seed``, keyed by the query: see :func:`bootstrap_keys`) and its mean is the weighted mean;
    the interval is the (1-confidence)/2 and (1+confidence)/2 quantiles of the ``n_resamples``
    means (a resample that drew no query is skipped). As n grows it agrees with resampling n
    queries with replacement; unlike it, a query's weights do not depend on the other queries, so
    a report can update its interval when a few queries change without redrawing everything. A
    column's interval depends only on its own values, their keys, the seed and the options.
    n == 0 gives None for mean and interval; n == 1 gives an interval equal to the value.
    """
    if not 0 < confidence < 1:
        raise MetricError(f"confidence must be between 0 and 1, e.g. 0.95; got {confidence!r}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int | np.integer) or n_resamples < 1:
        raise MetricError(f"n_resamples must be a positive whole number, e.g. 1000; got {n_resamples!r}")
    metric_columns = [c for c in per_q.columns if c not in COUNT_COLUMNS]
    keys = bootstrap_keys(per_q.index)
    result: dict[str, dict] = {}
    # Columns with the same non-NaN rows share a count column (the usual case: all but judged).
    groups: dict[bytes, list] = {}
    for column in metric_columns:
        values = per_q[column].to_numpy(dtype=float)
        mask = ~np.isnan(values)
        groups.setdefault(mask.tobytes(), []).append((column, values, mask))
    matrix, layout = [], []
    for members in groups.values():
        mask = members[0][2]
        layout.append((len(matrix), members))
        matrix.extend(np.where(mask, v, 0.0) for _, v, _ in members)
        matrix.append(mask.astype(float))
    sums = resample_sums(keys, np.column_stack(matrix), seed=int(seed), n_resamples=int(n_resamples)) \
        if matrix and len(keys) else None
    for first, members in layout:
        mask = members[0][2]
        n = int(mask.sum())
        if n > 1:
            low, high = interval(sums[:, first:first + len(members)], sums[:, first + len(members)], confidence)
        for j, (column, values, _) in enumerate(members):
            if n == 0:
                result[column] = {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
                continue
            mean = float(values[mask].mean())
            lo, hi = (mean, mean) if n == 1 else (float(low[j]), float(high[j]))
            result[column] = {"mean": mean, "ci_low": lo, "ci_high": hi, "n": n}
    return {c: result[c] for c in metric_columns}


EXACT_MAX = 16  # most differences for which paired_test may enumerate every sign flip (65,536)


def paired_test(a: np.ndarray, b: np.ndarray, *, n_resamples: int = 10000, seed: int = 0,
                exact: bool = False) -> float:
    """Two-sided paired randomization (sign-flip) test of mean(a - b) = 0; returns the p-value.

    ``a`` and ``b`` are per-query values of two systems on the same queries; pairs where either is NaN
    are dropped. Each resample flips the sign of every difference with probability 1/2 (seeded);
    p = (count of |resampled mean| >= |observed mean| + 1) / (n_resamples + 1). Identical inputs give
    p = 1; no pairs give NaN. ``exact``: when the n pairs have at most :data:`EXACT_MAX` and 2^n <=
    ``n_resamples``, enumerate all 2^n sign assignments instead (the identity included) and return
    the exact p = (count of |flipped mean| >= |observed mean|) / 2^n; no randomness is involved.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise MetricError(f"a and b must be 1-d arrays of the same length; got shapes {a.shape} and {b.shape}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int | np.integer) or n_resamples < 1:
        raise MetricError(f"n_resamples must be a positive whole number, e.g. 10000; got {n_resamples!r}")
    diff = (a - b)[~(np.isnan(a) | np.isnan(b))]
    n = diff.size
    if n == 0:
        return float("nan")
    total = diff.sum()
    observed = abs(total)
    # Sums differ from the observed one by rounding only when the signs change nothing.
    tolerance = 1e-9 * np.abs(diff).sum()
    if exact and n <= EXACT_MAX and 2 ** n <= n_resamples:
        # row i keeps difference j when bit j of i is set: every assignment exactly once
        kept = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(float) @ diff
        return int(np.count_nonzero(np.abs(2 * kept - total) >= observed - tolerance)) / 2 ** n
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK // n)
    count = 0
    for start in range(0, n_resamples, chunk):
        size = min(chunk, n_resamples - start)
        # One random bit per difference (keep = 1, flip = 0): sum = 2 * kept - total.
        bits = rng.integers(0, 256, size=(size, (n + 7) // 8), dtype=np.uint8)
        kept = np.unpackbits(bits, axis=1, count=n).astype(float) @ diff
        count += int(np.count_nonzero(np.abs(2 * kept - total) >= observed - tolerance))
    return (count + 1) / (n_resamples + 1)


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
