"""Estimates over all the traffic the routing rules saw, from the routed queries that were labeled
(``labeler.labels.routing``): each labeled query weighs ``1 / inclusion probability``.

- **Horvitz-Thompson** (``routed_mean`` with ``population``): ``sum(y_i / pi_i) / N`` over the
  labeled queries, N = the queries the rules decided. Unbiased whenever every query of the traffic
  had a recorded probability above 0 and every routed query is labeled: signals (probability 1)
  and the rest (the rate in effect) are then two strata each sampled with a known probability.
- **Hajek** (``routed_mean`` without ``population``): ``sum(y_i / pi_i) / sum(1 / pi_i)``, the ratio
  form (nearly unbiased; exact when every probability is equal) for when N is not known.

The naive mean of the labeled set is biased as soon as signals are routed always and the rest at a
rate: the unhappy queries are over-represented by ``1 / rate``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sqlite_utils

from ..labels.routing import inclusion_probs
from .ppi import EstimateError


def routed_mean(values: Any, pi: Any, population: int | None = None) -> float:
    """The mean over the traffic from the labeled ``values`` and their inclusion probabilities
    ``pi`` (Horvitz-Thompson when ``population`` is given, else Hajek); see the module doc."""
    y, p = np.asarray(values, dtype=float), np.asarray(pi, dtype=float)
    if y.shape != p.shape:
        raise EstimateError(f"{y.size} values but {p.size} inclusion probabilities; give one per labeled query")
    if y.size == 0:
        raise EstimateError("no labeled routed query yet; label from the queue first")
    if not ((p > 0) & (p <= 1)).all():
        raise EstimateError("an inclusion probability is outside (0, 1]; routing records them above 0")
    w = 1.0 / p
    if population is not None:
        if population < y.size:
            raise EstimateError(f"population {population} is smaller than the {y.size} labeled queries")
        return float((w * y).sum() / population)
    return float((w * y).sum() / w.sum())


def routing_weights(db: sqlite_utils.Database, pks: Any) -> np.ndarray:
    """``1 / pi`` of each query in ``pks`` (1 for a query routing did not decide)."""
    found = inclusion_probs(db, [int(p) for p in pks])
    return np.array([1.0 / found.get(int(p), 1.0) for p in pks], dtype=float)
