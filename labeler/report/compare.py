"""Two retrievers on the same labeled queries, compared with a paired test."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import sqlite_utils

from .. import db as store
from .. import metrics as m
from ..labels._common import When
from .load import _check_origin, _check_retriever, _inputs, _read_run, logged_queries
from .specs import DEFAULT_KS, ReportError, expand_specs


@dataclass
class Comparison:
    """Two retrievers on the same labeled queries (those both ran, see :func:`logged_queries`).

    ``metrics``: {spec: {"a", "b" (means), "diff" (a - b), "p_value", "n"}}: a two-sided paired
    randomization test (:func:`labeler.metrics.paired_test`) over the queries with a relevant chunk.
    """

    a: str
    b: str
    n_queries: int
    metrics: dict[str, dict[str, Any]]
    per_query: pd.DataFrame = field(repr=False)


def compare_retrievers(db: sqlite_utils.Database, a: str, b: str, specs: Sequence[str] | None = None, *,
                       ks: Sequence[int] = DEFAULT_KS, origin: str | None = None, annotator: str | None = None,
                       since: When = None, until: When = None, n_resamples: int = 10000, seed: int = 0) -> Comparison:
    """Compare retrievers ``a`` and ``b`` on every spec with a paired test; see :class:`Comparison`."""
    specs = expand_specs(specs, ks)
    if a == b:
        raise ReportError(f"compare two different retrievers; got {a!r} twice")
    origin = _check_origin(origin)
    _check_retriever(db, a)
    _check_retriever(db, b)
    threshold = int(store.get_setting(db, "threshold"))
    qrels, run_a, queries, ran_a = _inputs(db, None, a, annotator, since, until)
    run_b = _read_run(db, b, queries["query_pk"].to_numpy())
    common = np.intersect1d(ran_a, logged_queries(db, b, queries["query_pk"].to_numpy()))
    if origin is not None:
        common = np.intersect1d(common, queries.loc[queries["origin"] == origin, "query_pk"].to_numpy())
    qrels = qrels[qrels["query"].isin(common)]
    va = m.per_query(run_a[run_a["query"].isin(common)], qrels, specs, threshold=threshold)
    vb = m.per_query(run_b[run_b["query"].isin(common)], qrels, specs, threshold=threshold)
    out = {}
    for spec in specs:
        x, y = va[spec].to_numpy(dtype=float), vb[spec].to_numpy(dtype=float)
        ok = ~(np.isnan(x) | np.isnan(y))
        n = int(ok.sum())
        out[spec] = {"a": float(x[ok].mean()) if n else None, "b": float(y[ok].mean()) if n else None,
                     "diff": float((x[ok] - y[ok]).mean()) if n else None,
                     "p_value": m.paired_test(x, y, n_resamples=n_resamples, seed=seed), "n": n}
    per_q = pd.concat([va[specs].add_suffix(f" ({a})"), vb[specs].add_suffix(f" ({b})")], axis=1)
    return Comparison(a, b, len(va), out, per_q)
