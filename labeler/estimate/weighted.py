"""The labeled report's weighted figures (``labeler metrics``, the Metrics page's tiles): when routing
sampled the live traffic, the plain mean of the labeled set over-weights what the rules route always
(negative signals), so beside it each metric is estimated over the live traffic the rules decided,
without a judge: the Hajek ratio of the labeled routed queries weighted by 1 / their probability of
being labeled (:func:`labeler.estimate.routed.hajek_ratio`, :func:`labeler.estimate.routed.routed_sample`).
Labeled queries that did not come through routing (file ingests, synthetic, imported) are left out of
it and counted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import sqlite_utils

from .ppi import EstimateError
from .routed import decided_pks, decisions, hajek_ratio, routed_sample


def labeled_weighted(db: sqlite_utils.Database, per_query: pd.DataFrame, specs: Sequence[str]) -> dict[str, Any] | None:
    """None unless routing decided a query with a probability below 1; else ``{"text", "population"
    (the live queries the rules decided), "n_labeled" (the labeled routed queries used), "left_out"
    (labeled queries routing did not route), "classes", "metrics": {spec: {"mean", "ci_low",
    "ci_high", "n"}}, "notes", "error"}``. ``per_query``: the report's per-query frame (query_pk
    and one column per spec, NaN without a relevant chunk). ``error`` (metrics empty) says why no
    weighted figure can be given yet, and the fix."""
    if db.execute("SELECT 1 FROM routing_decisions WHERE inclusion_prob < 1 AND reason != 'pending' "
                  "LIMIT 1").fetchone() is None:
        return None
    population = decided_pks(db)
    pks = per_query["query_pk"].to_numpy(np.int64)
    order = np.argsort(pks, kind="stable")
    pks = pks[order]
    reason, routed, _ = decisions(db, pks)
    used = pks[(reason != None) & routed & (reason != "pending")]  # noqa: E711 - elementwise
    out: dict[str, Any] = {"text": None, "population": int(population.size), "n_labeled": int(used.size),
                           "left_out": int(pks.size - used.size), "classes": [], "metrics": {}, "notes": [],
                           "error": None}
    if out["left_out"]:
        out["notes"].append(f"{out['left_out']} labeled querie(s) did not come through routing (file ingests, "
                            "synthetic or imported questions, syncs before the rules): left out of the weighted figures")
    try:
        sample = routed_sample(db, population, used)
    except EstimateError as e:
        out["error"] = str(e)
        out["text"] = "routed live queries: the weighted figures wait (see why below)"
        return out
    out["text"], out["classes"] = sample.describe(), sample.classes
    out["notes"] += sample.notes
    rows = np.searchsorted(population, used)
    pi = sample.pi[rows]
    take = np.searchsorted(pks, used)
    for spec in specs:
        values = per_query[spec].to_numpy(dtype=float)[order][take]
        has = ~np.isnan(values)
        try:
            est = hajek_ratio(np.where(has, values, 0.0), has.astype(float), pi)
        except EstimateError:
            out["metrics"][spec] = {"mean": None, "ci_low": None, "ci_high": None, "n": int(has.sum())}
            continue
        out["metrics"][spec] = {"mean": est.estimate, "ci_low": est.ci_low, "ci_high": est.ci_high,
                                "n": int(has.sum())}
    return out
