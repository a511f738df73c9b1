"""Metrics of a report split into groups of queries (topics, signal groups): mean and 95% bootstrap
CI per group, the same Poisson bootstrap as the whole report (``labeler.metrics.aggregate``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..metrics.bootstrap import aggregate
from ..metrics.judgments import COUNT_COLUMNS
from .core import Report

MIN_GROUP = 5  # queries with a relevant chunk a group needs before its metrics are shown


def metrics_by_group(report: Report, group_of: Mapping[int, Any], *, min_n: int = MIN_GROUP) -> dict[Any, dict]:
    """{group: {"n_queries", "n_measured", "metrics"}} over the report's labeled queries, grouped by
    ``group_of`` (query pk -> group; queries it lacks are left out). ``metrics`` is
    {spec: {"mean", "ci_low", "ci_high", "n"}} (seeded as the report), or None when fewer than
    ``min_n`` of the group's queries have a relevant chunk (too few for a useful interval)."""
    pq = report.per_query
    columns = [*report.specs, *COUNT_COLUMNS]
    groups = pq["query_pk"].map(lambda pk: group_of.get(int(pk)))
    out: dict[Any, dict] = {}
    for group in [g for g in dict.fromkeys(groups.tolist()) if g is not None]:
        part = pq.loc[groups == group, ["query_pk", *columns]].set_index("query_pk")
        measured = int((part["n_relevant"] > 0).sum())
        out[group] = {"n_queries": len(part), "n_measured": measured,
                      "metrics": aggregate(part[columns], n_resamples=report.n_resamples, seed=report.seed)
                      if measured >= min_n else None}
    return out
