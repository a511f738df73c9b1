"""Metrics by outcome signal (the Metrics page's "By signal" section and ``labeler metrics``): the
labeled queries split into "unhappy" and "others" (see :mod:`labeler.signals`), each with its
metrics and bootstrap CIs, plus the signal counts."""

from __future__ import annotations

from typing import Any

import sqlite_utils

from ..signals import signal_counts, signal_groups
from .core import retrieval_report
from .groups import metrics_by_group

__all__ = ["signal_counts", "signal_metrics"]


def signal_metrics(db: sqlite_utils.Database, *, specs: Any = None, retriever: str | None = None,
                   seed: int = 0) -> dict[str, Any]:
    """Metrics of ``retriever`` on the labeled queries split into "unhappy" (see :func:`labeler.signals.unhappy`)
    and "others" (every other labeled query), each with 95% bootstrap CIs (None under 5 measured
    queries), plus the signal counts."""
    report = retrieval_report(db, specs, retriever=retriever, seed=seed, reuse=True)
    pks = [int(p) for p in report.per_query["query_pk"].tolist()]
    groups = signal_groups(db, pks)
    group_of = {pk: "unhappy" if groups.get(pk) == "unhappy" else "others" for pk in pks}
    by_group = metrics_by_group(report, group_of)
    return {"retriever": report.retriever, "specs": report.specs, "counts": signal_counts(db),
            "groups": {g: by_group.get(g, {"n_queries": 0, "n_measured": 0, "metrics": None})
                       for g in ("unhappy", "others")}}
