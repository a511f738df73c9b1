"""The all-traffic report when routing sampled the traffic (``labeler.labels.routing``): the labels of
routed queries weigh 1 / their probability of being labeled (:mod:`labeler.estimate.routed`).

- ``routed`` design (:func:`routed_report`): the active-inference estimator with known inclusion
  probabilities (:func:`labeler.estimate.ppi.active_ratio`): the mean over all the judged traffic of
  the judge's value plus (human - judge) / probability on the labeled queries. Labels used: the
  routed queries', and among the queries routing never decided (file ingests, syncs before the
  rules) those drawn by the random queue (a uniform sample of them, probability = their labeled share).
- ``stratified`` design under routing (:func:`routed_stratified_report`): per topic of the current
  model the Hajek-form difference estimator (:func:`labeler.estimate.routed.weighted_stratified_ratio`),
  topics weighted by their share of the judged queries; the queries routing never decided may carry
  labels of the random or the stratified queue.

Beside the estimate: the plain mean of the labeled set (``human_only``, biased: the unhappy
queries routed always are over-represented) and the human-only estimate weighted by 1 / probability
(``human_weighted``), so the bias is visible. Other probability designs (the active draw) are left
out and counted; a class of queued queries without any label makes the estimate refuse, naming it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import sqlite_utils

from . import designs as dz
from .ppi import Z95, EstimateError, active_ratio, human_mean
from .result import AllTraffic, design_notes, human_columns, judge_agreement, metric_entry
from .routed import RoutedSample, decisions, hajek_ratio, routed_sample, weighted_stratified_ratio
from .stratified import population_strata
from .traffic import JudgedTraffic, human_values

ROUTED_HINT = "--design routed"


def refuse_other_designs(db: sqlite_utils.Database, judged: JudgedTraffic, design: str) -> None:
    """Under routing, the uniform and active designs would read the queue's labels as drawn from all
    the traffic, which routing left partly out of the queue: refuse, naming the design that weighs."""
    reason, routed, _ = decisions(db, judged.pks)
    decided = reason != None  # noqa: E711 - elementwise
    raise EstimateError(f"routing sampled this traffic ({int(decided.sum())} of the {judged.pks.size} judged queries "
                        f"were decided by the routing rules, {int((decided & ~routed).sum())} left out of the queue), "
                        f"so the {design} design cannot read its labels as drawn from all of it; estimate with "
                        f"{ROUTED_HINT} (each label weighs 1 / its inclusion probability)")


def _handed_out(db: sqlite_utils.Database, sample: RoutedSample) -> dict[str, Any]:
    """Skipped / discarded among the routed queries the queue handed out."""
    handed = np.fromiter((r[0] for r in db.execute("SELECT query_pk FROM queue_designs")), dtype=np.int64)
    return dz.outcomes_among(db, handed[np.isin(handed, sample.pks[sample.routed])])


def _weighted_more(est, half_width: float, key: str) -> dict[str, Any]:
    """Labels for a +-half_width interval: the weighted variance falls about as 1 / labels."""
    target = (half_width / Z95) ** 2
    total = int(math.ceil(est.n * est.se ** 2 / target - 1e-9)) if est.se > 0 else est.n
    return {"half_width": est.half_width, key: total, "more_needed": max(0, total - est.n),
            "uniform_total": None, "active_total": None, "active_saves": None}


def routed_report(db: sqlite_utils.Database, judged: JudgedTraffic, labeled: np.ndarray, d: dz.Designs,
                  specs: list[str], by_design: dict[str, int], half_width: float, golden: Any) -> AllTraffic:
    """The ``routed`` design's report (see the module doc)."""
    reason, _, _ = decisions(db, judged.pks)
    undecided = (reason == None)[np.searchsorted(judged.pks, labeled)]  # noqa: E711 - elementwise
    used = labeled[(d.design == "routed") | ((d.design == "random") & undecided)]
    if used.size < 2:
        raise EstimateError(f"{used.size} labeled query was routed (or drawn at random among the queries routing "
                            "never decided); the routed design needs at least 2: label from the queue")
    sample = routed_sample(db, judged.pks, used)
    hv, hr = human_values(db, judged, used, specs, golden)
    rows = np.searchsorted(judged.pks, used)
    jrel = judged.relevant.astype(float)
    metrics, estimates, more = {}, {}, {}
    for s in specs:
        a, b = human_columns(judged.pks.size, rows, hv, hr, s)
        est = active_ratio(a, judged.numerators(s), b, jrel, sample.pi, sample.xi)
        estimates[s] = est
        metrics[s] = metric_entry(est, human_mean(hv[s][hr]), judged.judge_mean(s),
                                  hajek_ratio(a[rows], b[rows], sample.pi[rows]))
        more[s] = _weighted_more(est, half_width, "routed_total")
    return AllTraffic(int(judged.pks.size), int(used.size), judged.run_id, "routed", judged.retriever, metrics,
                      estimates, by_design, int(labeled.size - used.size), _handed_out(db, sample),
                      judge_agreement(db, judged, labeled, golden), more,
                      design_notes(judged, labeled, used) + sample.notes, drawn=sample.to_dict())


def routed_stratified_report(db: sqlite_utils.Database, judged: JudgedTraffic, labeled: np.ndarray, d: dz.Designs,
                             specs: list[str], by_design: dict[str, int], half_width: float,
                             golden: Any) -> AllTraffic:
    """The ``stratified`` design's report when routing sampled the traffic (see the module doc)."""
    model, stratum = population_strata(db, judged.pks)
    if model is None:
        raise EstimateError(f"the stratified design needs topics; build them (`labeler topics build`) or estimate "
                            f"with {ROUTED_HINT}")
    reason, _, _ = decisions(db, judged.pks)
    undecided = (reason == None)[np.searchsorted(judged.pks, labeled)]  # noqa: E711 - elementwise
    mine = (d.design == "routed") | (np.isin(d.design, ("random", "stratified")) & undecided)
    queued_strat = mine & (d.design == "stratified")
    if queued_strat.any() and d.topic_model is not None and set(d.topic_model[queued_strat].tolist()) != {model}:
        raise EstimateError(f"labels of the stratified queue were drawn under another topic model than the current "
                            f"one ({model}): its topics are other strata; estimate with {ROUTED_HINT}")
    used = labeled[mine]
    if used.size == 0:
        raise EstimateError("no labeled query was routed; label from the queue, then estimate")
    sample = routed_sample(db, judged.pks, used, strata=stratum)
    names, sizes = np.unique(stratum, return_counts=True)
    short = [(int(h), int(n), int((sample.xi & (stratum == h)).sum())) for h, n in zip(names, sizes, strict=True)
             if (sample.xi & (stratum == h)).sum() < 2]
    if short:
        which = "; ".join(f"topic {h}: {n} judged, {k} labeled" for h, n, k in short)
        raise EstimateError(f"every topic needs 2 labels for the stratified estimate ({which}); keep labeling, or "
                            f"estimate with {ROUTED_HINT}")
    hv, hr = human_values(db, judged, used, specs, golden)
    rows = np.searchsorted(judged.pks, used)
    jrel = judged.relevant.astype(float)
    inside = [stratum == h for h in names]
    metrics, estimates, more = {}, {}, {}
    parts = None
    for s in specs:
        a, b = human_columns(judged.pks.size, rows, hv, hr, s)
        jall = judged.numerators(s)
        est, parts = weighted_stratified_ratio([(a[m], jall[m], b[m], jrel[m], sample.pi[m], sample.xi[m])
                                                for m in inside])
        human, _ = weighted_stratified_ratio([(a[m], None, b[m], None, sample.pi[m], sample.xi[m]) for m in inside],
                                             lam=0.0)
        estimates[s] = est
        metrics[s] = metric_entry(est, human_mean(hv[s][hr]), judged.judge_mean(s), human)
        more[s] = _weighted_more(est, half_width, "stratified_total")
    strata_rows = [{"stratum": int(h), "judged": int(n), "labeled": int(k), "weight": w}
                   for h, n, k, w in zip(names, sizes, parts.n, parts.weights, strict=True)]
    return AllTraffic(int(judged.pks.size), int(used.size), judged.run_id, "stratified", judged.retriever, metrics,
                      estimates, by_design, int(labeled.size - used.size), _handed_out(db, sample),
                      judge_agreement(db, judged, labeled, golden), more,
                      design_notes(judged, labeled, used) + sample.notes, strata_rows, drawn=sample.to_dict())
