"""Per-query values: each query's value of every requested metric, with the counts the aggregation
needs (``n_relevant``, ``n_retrieved``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from . import measures  # noqa: F401 - registers the built-in measures
from .judgments import COUNT_COLUMNS, MetricError, join_run_qrels
from .registry import METRICS, Metric, known_metrics, parse_metric


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
        raise MetricError(f"unknown metric(s) {', '.join(unknown)}; known metrics: {known_metrics()}")
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
