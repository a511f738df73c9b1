"""Retrieval metrics over graded relevance labels: per-query values equal to trec_eval's, their
aggregation with seeded bootstrap confidence intervals, and a paired randomization test. A metric is a
function registered under a name (with aliases) and parsed from a spec such as ``ndcg@10``; the
built-ins are registered the same way as extensions. Everything is vectorised over queries with
numpy, so 100k queries cost a fraction of a second.

The package by job: ``judgments`` (the run joined to the qrels, ``rank_by_score``), ``registry``
(names, aliases, specs), ``measures`` (one kernel per metric, the formula in its docstring),
``evaluate`` (per-query values), ``bootstrap`` (aggregation with seeded confidence intervals) and
``significance`` (the paired randomization test). Everything public is importable from here.
"""

from .bootstrap import aggregate, bootstrap_keys, interval, resample_sums, resample_weights
from .evaluate import n_without_relevant, per_query
from .judgments import COUNT_COLUMNS, MetricError, RankedJudgments, join_run_qrels, rank_by_score
from .registry import ALIASES, METRICS, Metric, MetricDef, MetricFn, parse_metric, register_metric
from .significance import EXACT_MAX, paired_test

__all__ = [
    "ALIASES", "COUNT_COLUMNS", "EXACT_MAX", "METRICS", "Metric", "MetricDef", "MetricError", "MetricFn",
    "RankedJudgments", "aggregate", "bootstrap_keys", "interval", "join_run_qrels", "n_without_relevant",
    "paired_test", "per_query", "parse_metric", "rank_by_score", "register_metric", "resample_sums",
    "resample_weights",
]
