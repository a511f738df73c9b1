"""Metric specs of a report and the module's constants."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..errors import LabelerError
from ..metrics.registry import ALIASES, METRICS, parse_metric

DEFAULT_KS: tuple[int, ...] = (1, 3, 5, 10)
DEFAULT_METRICS: tuple[str, ...] = ("recall", "ndcg", "mrr")
ORIGINS: tuple[str, ...] = ("log", "synthetic", "import")
HALF_WIDTH = 0.05
JUDGED_MINIMUM = 0.9  # judged@k below it: the metrics count many unjudged chunks as irrelevant
Z95 = 1.96


class ReportError(LabelerError, ValueError):
    """A report option that cannot be used (unknown retriever or origin, bad cutoffs)."""


# --- specs -------------------------------------------------------------------------------------

def expand_specs(metrics: Iterable[str] | None = None, ks: Iterable[int] = DEFAULT_KS) -> list[str]:
    """Metric specs for a report: a bare name that needs a cutoff (``recall``) becomes one spec per
    k (``recall@1``, ``recall@3``...); ``recall@7``, ``mrr`` and ``ap`` stay as given. Default
    metrics: recall, ndcg, mrr. Repeats are dropped (first kept). Raises MetricError/ReportError."""
    cutoffs = []
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise ReportError(f"cutoff k={k!r} must be a positive whole number, e.g. --k 1,3,5,10")
        if int(k) not in cutoffs:
            cutoffs.append(int(k))
    out: list[str] = []
    for spec in DEFAULT_METRICS if metrics is None else metrics:
        spec = spec.strip() if isinstance(spec, str) else spec
        if isinstance(spec, str) and "@" not in spec and spec.lower() in {**ALIASES, **dict.fromkeys(METRICS)}:
            name = spec.lower()
            if METRICS[ALIASES.get(name, name)].needs_k:
                if not cutoffs:
                    raise ReportError(f"metric {spec!r} needs a cutoff: give --k, e.g. --k 5,10")
                out += [f"{spec}@{k}" for k in cutoffs]
                continue
        out.append(parse_metric(spec).spec)
    if not out:
        raise ReportError("no metric to compute; give e.g. --metric recall@5")
    return list(dict.fromkeys(out))


def judged_warning(retriever: str, spec: str, value: float, minimum: float = JUDGED_MINIMUM) -> str:
    """The warning line for a retriever whose judged@k is below ``minimum``."""
    return (f"{retriever}: {spec} = {value:.2f} < {minimum}: its metrics count the unjudged chunks in its top k "
            "as irrelevant (label its pool, or read its numbers as lower bounds)")
