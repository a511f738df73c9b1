"""Two retrievers on the same labeled queries: both means, the paired difference with a bootstrap
CI, a paired randomization p-value, and how much of each one's top k the labels cover (judged@k)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import sqlite_utils

from .. import db as store
from ..core.times import When
from ..metrics.bootstrap import aggregate
from ..metrics.registry import parse_metric
from ..metrics.significance import paired_test
from .load import check_origin, data_token, loaded_inputs, logged_queries, read_run, resolve_retriever
from .specs import DEFAULT_KS, JUDGED_MINIMUM, ReportError, expand_specs, judged_warning


@dataclass
class Comparison:
    """Two retrievers on the same labeled queries: those with consolidated labels that both ran
    (see :func:`logged_queries`), of ``origin`` if given.

    ``metrics``: {spec: {"a", "b" (the two means), "diff" (mean of a - b), "ci_low", "ci_high"
    (95% Poisson-bootstrap CI of the mean difference, ``n_resamples`` resamples seeded with
    ``seed``), "p_value" (two-sided paired sign-flip test: exact over all 2^n flips when n <= 16
    and 2^n <= ``n_permutations``, else ``n_permutations`` seeded flips), "n"}} over the common
    queries that have a relevant chunk (None without any). ``judged``: {retriever: {"judged@k":
    mean}} over all common queries, for every cutoff of the specs (10 without one). ``warnings``:
    a line per retriever and judged@k under 0.9: its metrics count unjudged chunks as irrelevant.
    ``per_query``: the per-query values of both, columns ``spec (a)`` and ``spec (b)``.
    """

    a: str
    b: str
    n_queries: int
    metrics: dict[str, dict[str, Any]]
    per_query: pd.DataFrame = field(repr=False)
    judged: dict[str, dict[str, float | None]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    n_without_relevant: int = 0
    threshold: int = 2
    seed: int = 0
    n_resamples: int = 1000
    n_permutations: int = 10000
    filters: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The ``labeler metrics --compare A,B --json`` document."""
        return {"a": self.a, "b": self.b, "n_queries": self.n_queries, "n_without_relevant": self.n_without_relevant,
                "threshold": self.threshold, "seed": self.seed, "n_resamples": self.n_resamples,
                "n_permutations": self.n_permutations,
                "metrics": {s: dict(v) for s, v in self.metrics.items()},
                "judged": {r: dict(v) for r, v in self.judged.items()}, "warnings": list(self.warnings)}


def compare_retrievers(db: sqlite_utils.Database, a: str, b: str, specs: Sequence[str] | None = None, *,
                       ks: Sequence[int] = DEFAULT_KS, origin: str | None = None, annotator: str | None = None,
                       since: When = None, until: When = None, n_permutations: int = 10000,
                       n_resamples: int = 1000, seed: int = 0, reuse: bool = False) -> Comparison:
    """Compare retrievers ``a`` and ``b`` on every spec with a paired test; see :class:`Comparison`.

    ``specs`` and ``ks`` as in :func:`retrieval_report`; filters too. Both retrievers must have
    logged rankings (RetrieverError names the logged ones otherwise). ``seed`` seeds the bootstrap
    and the sampled sign flips and is recorded in the result. ``reuse`` as in :func:`retrieval_report`."""
    specs = expand_specs(specs, ks)
    if a == b:
        raise ReportError(f"compare two different retrievers; got {a!r} twice")
    origin = check_origin(origin)
    a = resolve_retriever(db, a, reuse=reuse)
    b = resolve_retriever(db, b, reuse=reuse)
    threshold = int(store.get_setting(db, "threshold"))
    loaded = loaded_inputs(db, data_token(db) if reuse else None, a, annotator, since, until)
    if b not in loaded.runs:
        pks = loaded.queries["query_pk"].to_numpy()
        loaded.runs[b] = (read_run(db, b, pks), logged_queries(db, b, pks))
    cutoffs = sorted({parse_metric(s).k for s in specs} - {None}) or [10]
    judged_specs = [f"judged@{k}" for k in cutoffs]
    wanted = list(dict.fromkeys([*specs, *judged_specs]))
    va = loaded.measure(a, threshold).frame(wanted)
    vb = loaded.measure(b, threshold).frame(wanted)
    common = np.intersect1d(va.index.to_numpy(np.int64), vb.index.to_numpy(np.int64))
    if origin is not None:
        queries = loaded.queries
        common = np.intersect1d(common, queries.loc[queries["origin"] == origin, "query_pk"].to_numpy(np.int64))
    va, vb = va.loc[common], vb.loc[common]
    out: dict[str, dict[str, Any]] = {}
    for spec in specs:
        x, y = va[spec].to_numpy(dtype=float), vb[spec].to_numpy(dtype=float)
        ok = ~(np.isnan(x) | np.isnan(y))
        n = int(ok.sum())
        if n == 0:
            out[spec] = {"a": None, "b": None, "diff": None, "ci_low": None, "ci_high": None, "p_value": None, "n": 0}
            continue
        # keyed by query pk: a query's bootstrap weights are those of the single-retriever reports
        diff = pd.DataFrame({"diff": x[ok] - y[ok]}, index=pd.Index(common[ok]))
        ci = aggregate(diff, n_resamples=n_resamples, seed=seed)["diff"]
        out[spec] = {"a": float(x[ok].mean()), "b": float(y[ok].mean()), "diff": ci["mean"],
                     "ci_low": ci["ci_low"], "ci_high": ci["ci_high"],
                     "p_value": paired_test(x, y, n_resamples=n_permutations, seed=seed, exact=True), "n": n}
    judged = {r: {s: float(v[s].mean()) if v[s].notna().any() else None for s in judged_specs}
              for r, v in ((a, va), (b, vb))}
    warnings = [judged_warning(r, s, value) for r, values in judged.items() for s, value in values.items()
                if value is not None and value < JUDGED_MINIMUM]
    per_q = pd.concat([va[specs].add_suffix(f" ({a})"), vb[specs].add_suffix(f" ({b})")], axis=1)
    return Comparison(a, b, len(common), out, per_q, judged=judged, warnings=warnings,
                      n_without_relevant=int((va["n_relevant"] == 0).sum()), threshold=threshold, seed=seed,
                      n_resamples=n_resamples, n_permutations=n_permutations,
                      filters={"origin": origin, "annotator": annotator, "since": since, "until": until})
