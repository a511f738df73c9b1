"""The report: metrics per query and aggregated, segments, judged@k, the curve, the worst queries,
how many more labels a tight CI needs, and the diagnosis."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sqlite_utils

from .. import db as store
from ..core.times import When, stamp
from ..estimate.weighted import labeled_weighted
from ..metrics.evaluate import n_without_relevant as count_without_relevant
from ..metrics.registry import parse_metric
from .diagnosis import Diagnosis, Thresholds, diagnose
from .load import (
    REPORTS,
    answer_judgments,
    check_origin,
    data_token,
    json_ints,
    loaded_inputs,
    resolve_retriever,
    retrievers,
)
from .specs import (
    DEFAULT_KS,
    HALF_WIDTH,
    JUDGED_MINIMUM,
    ORIGINS,
    Z95,
    ReportError,
    expand_specs,
    judged_warning,
)
from .state import Measured


@dataclass
class Report:
    """Metrics of one retriever on the golden set.

    ``metrics``: {spec: {"mean", "ci_low", "ci_high", "n"}} (95% percentile bootstrap,
    ``n_resamples`` resamples seeded with ``seed``). ``judged``: {"judged@k": {"mean", "n"}} for
    every cutoff in the specs (10 without one): the share of the top k that carries a human label.
    ``per_query``: one row per labeled query (query_pk, query_id, origin, one column per spec and
    judged@k, n_relevant, n_retrieved), NaN where a query has no relevant chunk.
    ``answers``: counts of the answer-faithfulness judgments (yes/partly/no) on the same queries.
    ``n_not_run``: labeled queries left out because the retriever never ran them (see
    :func:`logged_queries`); not part of ``n_queries``. ``weighted``: when routing sampled the live
    traffic, how the labeled set was drawn and each metric weighted by 1 / inclusion probability
    (:func:`labeler.estimate.weighted.labeled_weighted`), else None.
    """

    n_queries: int
    n_without_relevant: int
    threshold: int
    retriever: str
    specs: list[str]
    metrics: dict[str, dict]
    judged: dict[str, dict]
    per_query: pd.DataFrame = field(repr=False)
    filters: dict[str, Any] = field(default_factory=dict)
    n_resamples: int = 1000
    seed: int = 0
    answers: dict[str, int] = field(default_factory=dict)
    n_not_run: int = 0
    weighted: dict[str, Any] | None = None
    _measured: Measured = field(default=None, repr=False, compare=False)
    _mask: np.ndarray | None = field(default=None, repr=False, compare=False)
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The ``labeler metrics --json`` document: n_queries, n_without_relevant, threshold,
        retriever, metrics (one key per spec, spelled as the spec), judged ({"judged@k": mean share
        of the top k with a consolidated label} for the report's cutoffs, None without queries); when
        routing sampled the live traffic, ``weighted`` (see :attr:`weighted`)."""
        out = {"n_queries": self.n_queries, "n_without_relevant": self.n_without_relevant,
               "threshold": self.threshold, "retriever": self.retriever,
               "metrics": {s: dict(self.metrics[s]) for s in self.specs},
               "judged": {s: v["mean"] for s, v in self.judged.items()}}
        if self.weighted is not None:
            out["weighted"] = self.weighted
        return out

    def judged_warnings(self, minimum: float = JUDGED_MINIMUM) -> list[str]:
        """One line per judged@k below ``minimum``: the metrics then count unjudged chunks as
        irrelevant (label the pool, or read them as lower bounds)."""
        return [judged_warning(self.retriever, spec, v["mean"], minimum) for spec, v in self.judged.items()
                if v["mean"] is not None and v["mean"] < minimum]

    def per_query_records(self) -> list[dict[str, Any]]:
        """``{"query_id", "metric", "value"}`` for every query (by query_id) and spec; value None
        where the query has no relevant chunk."""
        pq = self.per_query.sort_values("query_id", kind="stable")
        out = []
        for row in pq[["query_id", *self.specs]].itertuples(index=False):
            for spec, value in zip(self.specs, row[1:], strict=True):
                out.append({"query_id": row[0], "metric": spec,
                            "value": None if value != value else float(value)})
        return out

    def write_per_query(self, path: str | Path) -> int:
        """Write :meth:`per_query_records` as JSONL to ``path``; return the number of lines."""
        records = self.per_query_records()
        try:
            with open(path, "w", encoding="utf-8") as f:
                for r in records:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
        except OSError as e:
            raise ReportError(f"cannot write {path}: {e.strerror}") from None
        return len(records)

    @property
    def faithfulness(self) -> float | None:
        """Share of judged production answers that are faithful (yes = 1, partly = 0.5), or None."""
        n = sum(self.answers.values())
        return None if n == 0 else (self.answers.get("yes", 0) + 0.5 * self.answers.get("partly", 0)) / n

    def segments(self, by: str = "origin") -> dict[str, dict[str, Any]]:
        """The report per value of a per-query column (origin by default): {value: {"n_queries",
        "n_without_relevant", "metrics"}}, CIs resampled within each segment."""
        key = ("segments", by)
        if key not in self._memo:
            if by not in self.per_query.columns:
                raise ReportError(f"cannot segment by {by!r}; use one of: origin")
            out = {}
            values = self.per_query[by]
            order = [o for o in ORIGINS if (values == o).any()] + sorted(set(values) - set(ORIGINS))
            for value in order:
                part = self.per_query.loc[values == value, [*self.specs, "n_relevant", "n_retrieved"]]
                out[value] = {"n_queries": len(part), "n_without_relevant": count_without_relevant(part),
                              "metrics": self._measured.aggregate(list(self.specs), value, seed=self.seed,
                                                                  n_resamples=self.n_resamples)}
            self._memo[key] = out
        return self._memo[key]

    def more_needed(self, half_width: float = HALF_WIDTH) -> dict[str, dict[str, Any]]:
        """Per spec: n, the per-query standard deviation ``sd``, the current normal-approximation
        half-width 1.96·sd/√n, and ``more_needed`` = ceil((1.96·sd / half_width)² − n) (0 when
        already reached; None with fewer than 2 values)."""
        if not half_width > 0:
            raise ReportError(f"half_width must be positive, e.g. 0.05; got {half_width!r}")
        out = {}
        for spec in self.specs:
            values = self.per_query[spec].to_numpy(dtype=float)
            values = values[~np.isnan(values)]
            n = int(values.size)
            if n < 2:
                out[spec] = {"n": n, "sd": None, "half_width": None, "more_needed": None}
                continue
            sd = float(values.std(ddof=1))
            needed = (Z95 * sd / half_width) ** 2 - n
            out[spec] = {"n": n, "sd": sd, "half_width": Z95 * sd / math.sqrt(n),
                         "more_needed": max(0, math.ceil(needed - 1e-9))}
        return out

    def histogram(self, spec: str, bins: int = 20) -> pd.DataFrame:
        """Counts of per-query values of ``spec`` in ``bins`` equal bins over [0, 1] (queries without a
        relevant chunk left out): columns start, end, queries."""
        if spec not in self.per_query.columns:
            raise ReportError(f"the report has no metric {spec!r}; it has: {', '.join(self.specs)}")
        values = self.per_query[spec].to_numpy(dtype=float)
        counts, edges = np.histogram(values[~np.isnan(values)], bins=bins, range=(0.0, 1.0))
        return pd.DataFrame({"start": edges[:-1], "end": edges[1:], "queries": counts})

    def extra_values(self, specs: Sequence[str]) -> pd.DataFrame:
        """Per-query values of extra specs on the same run and labels (no CIs), memoized."""
        return self._measured.frame(list(specs), self._mask)[list(dict.fromkeys(specs))].reset_index(drop=True)

    def curve(self, names: Sequence[str] = ("recall", "precision", "ndcg"),
              ks: Sequence[int] | None = None) -> pd.DataFrame:
        """Mean of each metric at each cutoff with its 95% bootstrap CI: columns metric, k, mean,
        ci_low, ci_high, n (long form, for a chart; None where no query has a relevant chunk).
        ``ks`` defaults to 1, 2, 3, 5, 10, 20 up to the deepest logged rank, plus the specs' cutoffs."""
        if ks is None:
            deepest = int(self.per_query["n_retrieved"].max()) if len(self.per_query) else 10
            cut = {parse_metric(s).k for s in self.specs} - {None}
            ks = sorted({k for k in (1, 2, 3, 5, 10, 20) if k <= max(deepest, 1)} | cut)
        specs = [f"{name}@{k}" for name in names for k in ks]
        for s in specs:
            parse_metric(s)
        rows = []
        if len(self.per_query):
            stats = self.aggregate(specs)
            for name in names:
                for k in ks:
                    v = stats[f"{name}@{k}"]
                    rows.append({"metric": name, "k": int(k), "mean": v["mean"], "ci_low": v["ci_low"],
                                 "ci_high": v["ci_high"], "n": int(v["n"])})
        return pd.DataFrame(rows, columns=["metric", "k", "mean", "ci_low", "ci_high", "n"])

    def aggregate(self, specs: Sequence[str], confidence: float = 0.95) -> dict[str, dict]:
        """Mean, 95% CI and n of any specs on the report's queries (same seed and resamples as the
        tiles): {spec: {"mean", "ci_low", "ci_high", "n"}}."""
        return self._measured.aggregate(list(dict.fromkeys(specs)), self.filters.get("origin"), seed=self.seed,
                                        n_resamples=self.n_resamples, confidence=confidence)

    def diagnosis(self, thresholds: Thresholds | None = None) -> Diagnosis:
        """Follow the decision tree (low recall@k -> retrieval; good recall but low MRR or nDCG@k ->
        ranking; good retrieval but low answer faithfulness -> generation; else healthy), stating a
        verdict only where the 95% CI is on one side of the threshold: see
        :mod:`labeler.report.diagnosis`."""
        return diagnose(self, thresholds)


def retrieval_report(
    db: sqlite_utils.Database,
    specs: Sequence[str] | None = None,
    *,
    ks: Sequence[int] = DEFAULT_KS,
    retriever: str | None = None,
    origin: str | None = None,
    annotator: str | None = None,
    since: When = None,
    until: When = None,
    n_resamples: int = 1000,
    seed: int = 0,
    reuse: bool = False,
) -> Report:
    """Every metric in ``specs`` for ``retriever`` over the golden set, per query and aggregated.

    ``specs``: metric specs (``recall@5``, ``mrr``, ``ndcg@10``...); a bare name that needs a
    cutoff is expanded with ``ks`` (see :func:`expand_specs`); default recall and ndcg at 1, 3, 5,
    10, and mrr. Filters: ``origin`` of the query, ``annotator`` (only that person's submitted
    grades), ``since``/``until`` (submission time, inclusive/exclusive). The relevance threshold is
    the project's setting. Labeled queries the retriever never ran are left out (``n_not_run``).
    ``retriever``: whose logged ranking; None = the default retriever (the only one, else
    ``production``; several others raise RetrieverError naming them, as does one that logged nothing).
    ``reuse=True`` keeps what was read from a database file in memory and
    reuses it while nothing was committed to the file (the app); the result is the same.
    """
    specs = expand_specs(specs, ks)
    origin = check_origin(origin)
    retriever = resolve_retriever(db, retriever, reuse=reuse)
    threshold = int(store.get_setting(db, "threshold"))
    token = data_token(db) if reuse else None
    filters = {"retriever": retriever, "origin": origin, "annotator": annotator,
               "since": None if since is None else stamp(since), "until": None if until is None else stamp(until)}
    key = None if token is None else (token, tuple(specs), threshold, n_resamples, seed,
                                      *sorted(filters.items()))

    def build() -> Report:
        loaded = loaded_inputs(db, token, retriever, annotator, since, until)
        queries, ran = loaded.queries, loaded.runs[retriever][1]
        measured = loaded.measure(retriever, threshold)
        if origin is not None:
            queries = queries[queries["origin"] == origin]
        labeled = len(queries)
        mask = measured.mask(origin)
        cutoffs = sorted({parse_metric(s).k for s in specs} - {None}) or [10]
        judged_specs = [f"judged@{k}" for k in cutoffs]
        extra = [s for s in judged_specs if s not in specs]
        values = measured.frame([*specs, *extra], mask)
        per_q = pd.concat([pd.DataFrame({"query_pk": values.index.to_numpy(np.int64),
                                         "query_id": queries.set_index("query_pk")["query_id"]
                                         .reindex(values.index).to_numpy(),
                                         "origin": measured.origin if mask is None else measured.origin[mask]}),
                           values.reset_index(drop=True)], axis=1)
        metrics = measured.aggregate(list(specs), origin, seed=seed, n_resamples=n_resamples)
        judged = {s: {"mean": float(values[s].mean()) if values[s].notna().any() else None,
                      "n": int(values[s].notna().sum())} for s in judged_specs}
        answers = answer_judgments(db, "answer_faithful", origin=origin, annotator=annotator, since=since,
                                    until=until)
        n_ran = int(np.isin(queries["query_pk"].to_numpy(np.int64), ran).sum())
        return Report(n_queries=len(values), n_without_relevant=count_without_relevant(values), threshold=threshold,
                      retriever=retriever, specs=list(specs), metrics=metrics, judged=judged, per_query=per_q,
                      filters=filters, n_resamples=n_resamples, seed=seed, answers=answers,
                      n_not_run=labeled - n_ran, weighted=labeled_weighted(db, per_q, specs),
                      _measured=measured, _mask=mask)

    return REPORTS.get(key, build)


PAGE_FAMILIES = ("recall", "ndcg", "mrr")  # what the Metrics page opens with


def curve_families(families: Sequence[str]) -> list[str]:
    """The metric families of the metric-vs-k curve: those with a cutoff (recall when none has)."""
    return [f for f in families if f not in ("mrr", "ap")] or ["recall"]


def prepare(db: sqlite_utils.Database, families: Sequence[str] = PAGE_FAMILIES, *, ks: Sequence[int] = DEFAULT_KS,
            retriever: str | None = None) -> Report:
    """Compute and keep in memory (``reuse=True``) the report the Metrics page opens with, with its
    segments, curve and diagnosis: run in the background when the app starts, so that the first
    visit to the page finds the numbers ready instead of reading every label. ``retriever``: None =
    the default retriever. Returns the report."""
    retrievers(db, reuse=True)  # the page's retriever list
    rep = retrieval_report(db, list(families), ks=sorted(ks), retriever=retriever, reuse=True)
    rep.segments("origin")
    rep.curve(names=curve_families(families))
    rep.diagnosis()
    return rep


def worst_queries(db: sqlite_utils.Database, report: Report, spec: str | None = None, *,
                  limit: int = 20) -> pd.DataFrame:
    """The ``limit`` queries with the lowest ``spec`` (default: the report's first spec), lowest
    first; queries without a relevant chunk are left out. Ties are broken by how far the relevant
    chunks sit: the first relevant rank, deepest first (no relevant chunk retrieved at all comes
    first), then the count of relevant chunks missing from the top k (k = the spec's cutoff, the
    whole logged ranking for specs without one), most first; then query_id. Columns query_pk,
    query_id, origin, question, value, first_relevant_rank (None: none retrieved), missing_relevant,
    k (the cutoff missing_relevant counts from), n_relevant, n_retrieved. :func:`worst_ties` says when the list cuts through a tie."""
    spec = spec or report.specs[0]
    if spec not in report.per_query.columns:
        raise ReportError(f"the report has no metric {spec!r}; it has: {', '.join(report.specs)}")
    values = report.per_query[spec].to_numpy(dtype=float)
    keep = ~np.isnan(values)
    if keep.sum() > limit:
        # partial selection first: sorting 100k rows on every rerun is the slow part; every query
        # tied with the cut stays in, the tie-breakers decide among them
        cut = np.partition(values[keep], limit - 1)[limit - 1]
        keep &= values <= cut + _TIE
    pq = report.per_query[keep]
    k = parse_metric(spec).k or max(1, int(report.per_query["n_retrieved"].max()))
    depth = report.extra_values(["mrr", f"recall@{k}"])[keep]
    mrr = depth["mrr"].to_numpy(dtype=float)
    with np.errstate(divide="ignore"):
        first = np.where(mrr > 0, np.round(1.0 / mrr), np.inf)
    n_relevant = pq["n_relevant"].to_numpy(dtype=float)
    missing = np.round(n_relevant * (1.0 - depth[f"recall@{k}"].to_numpy(dtype=float))).astype(np.int64)
    order = pd.DataFrame({"value": np.round(pq[spec].to_numpy(dtype=float), 12), "first": -first,
                          "missing": -missing, "query_id": pq["query_id"].to_numpy()})
    rows = order.sort_values(["value", "first", "missing", "query_id"], kind="stable").index[:limit]
    pos = order.index.get_indexer(rows)
    pq = pq.iloc[pos]
    questions = dict(db.execute("SELECT pk, question FROM queries WHERE pk IN (SELECT value FROM json_each(?))",
                                [json_ints(pq["query_pk"])]).fetchall())
    return pd.DataFrame({"query_pk": pq["query_pk"].to_numpy(), "query_id": pq["query_id"].to_numpy(),
                         "origin": pq["origin"].to_numpy(), "question": [questions.get(int(p)) for p in pq["query_pk"]],
                         "value": pq[spec].to_numpy(dtype=float),
                         "first_relevant_rank": pd.Series([None if np.isinf(f) else int(f) for f in first[pos]], dtype=object),
                         "missing_relevant": missing[pos], "k": k, "n_relevant": pq["n_relevant"].to_numpy(),
                         "n_retrieved": pq["n_retrieved"].to_numpy()})


_TIE = 1e-12  # per-query values closer than this count as tied


def worst_ties(report: Report, spec: str, worst: pd.DataFrame) -> str | None:
    """"12 queries at 0.000, showing 10" when the worst-queries list ``worst`` (of ``spec``) stops
    inside a group of tied values, so the list does not look like an order it is not; else None."""
    if worst.empty:
        return None
    last = float(worst["value"].iloc[-1])
    values = report.per_query[spec].to_numpy(dtype=float)
    tied = int((np.abs(values[~np.isnan(values)] - last) <= _TIE).sum())
    shown = int((np.abs(worst["value"].to_numpy(dtype=float) - last) <= _TIE).sum())
    if tied <= shown:
        return None
    return f"{tied:,} queries at {last:.3f}, showing {shown}"
