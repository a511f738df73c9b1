"""Retrieval reports on the golden set: the numbers of the Metrics page and ``labeler metrics``.

A report reads a retriever's logged ranking (``retrievals``, integer keys) and the consolidated
human labels (:func:`labeler.labels.golden_labels`) from the database and hands them to
:mod:`labeler.metrics`, which does all the maths (trec_eval-identical per-query values, seeded
bootstrap CIs, the paired test). On top it adds what a team asks next: segments by origin, judged@k,
the metric-vs-k curve, the worst queries, how many more labeled queries a CI half-width of 0.05
needs, a paired comparison of two retrievers, and a diagnosis that follows the RAG-evaluation
decision tree (retrieval, then ranking, then generation), states the thresholds it used, and gives a
verdict only where a 95% CI lies on one side of its threshold (else how many more labels would tell).

Which queries count: those with at least one consolidated label (submitted, non-discarded);
synthetic questions only once accepted in review. A query without any relevant chunk (grade >=
the threshold) is left out of the means and counted in ``n_without_relevant``; a labeled query the
retriever never ran is left out too (``n_not_run``).

Which retriever: the one named, else the default one (:mod:`labeler.retrievers`: the only one,
else ``production``, else a one-line error naming them); never one that logged nothing.

Modules: ``specs`` (spec expansion, constants), ``load`` (the small SQL helpers and the reuse of
loaded inputs while the database is unchanged), ``core`` (:class:`Report`,
:func:`retrieval_report`, the worst queries), ``diagnosis`` (the decision tree and its CI rule), ``compare`` (two retrievers, paired test).
"""

from .compare import Comparison, compare_retrievers
from .core import (
    PAGE_FAMILIES,
    Report,
    curve_families,
    prepare,
    retrieval_report,
    worst_queries,
    worst_ties,
)
from .diagnosis import NO_ANSWERS, Check, Diagnosis, Thresholds, more_to_decide
from .load import clear_cache, data_token, logged_queries, resolve_retriever, retrievers
from .specs import (
    DEFAULT_KS,
    DEFAULT_METRICS,
    HALF_WIDTH,
    JUDGED_MINIMUM,
    ORIGINS,
    Z95,
    ReportError,
    expand_specs,
    judged_warning,
)

__all__ = [
    "DEFAULT_KS",
    "DEFAULT_METRICS",
    "HALF_WIDTH",
    "JUDGED_MINIMUM",
    "NO_ANSWERS",
    "PAGE_FAMILIES",
    "ORIGINS",
    "Z95",
    "Check",
    "Comparison",
    "Diagnosis",
    "Report",
    "ReportError",
    "Thresholds",
    "clear_cache",
    "compare_retrievers",
    "curve_families",
    "data_token",
    "expand_specs",
    "judged_warning",
    "logged_queries",
    "more_to_decide",
    "prepare",
    "resolve_retriever",
    "retrieval_report",
    "retrievers",
    "worst_queries",
    "worst_ties",
]
