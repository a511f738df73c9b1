"""The all-traffic report: every retrieval metric over all the traffic a judge run covered, from the
judge's values on every query corrected by the human labels of a probability sample of them
(``labeler metrics --all-traffic``, the Metrics page's "Numbers for all traffic").

Validity is checked, not assumed: labels of queries not drawn by a random design (queue order
``oldest``/``lowest_score``/``frequent``, opened by hand, imported) make the estimate refuse with a
one-line reason, unless ``random_only`` restricts it to the queries drawn at random. The design is
``uniform`` (queue order random: PPI++, :func:`labeler.estimate.ppi.ppi_ratio`), ``active`` (the
newest active draw: :func:`labeler.estimate.ppi.active_ratio`) or ``stratified`` (queue order
stratified: PPI++ within each topic, weighted by the topic's share of the judged queries,
:func:`labeler.estimate.ppi.stratified_ratio`) or ``routed`` (routing sampled the live traffic: each
label weighs 1 / its inclusion probability, :mod:`labeler.estimate.routed_report`; under routing
``stratified`` weighs the same way within each topic, and ``uniform`` / ``active`` refuse, since
routing left part of the traffic out of the queue). Labels of the other designs are left out, and
said so. Each metric is a ratio over the queries with a relevant chunk (the human and the judge may
disagree on which those are).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import sqlite_utils

from ..metrics.registry import parse_metric
from . import designs as dz
from .active import draw_items, uncertainty
from .ppi import Z95, Estimate, EstimateError, active_ratio, human_mean, ppi_ratio
from .result import AllTraffic, design_notes, human_columns, human_numerators, judge_agreement, metric_entry
from .routed import routing_sampled
from .routed_report import refuse_other_designs, routed_report, routed_stratified_report
from .traffic import DEFAULT_SPECS, JudgedTraffic, human_golden, human_values, judged_traffic, submitted_pks

HALF_WIDTH = 0.05
DESIGNS = ("uniform", "active", "stratified", "routed")


def _refuse_if_not_probability(d: dz.Designs, random_only: bool) -> None:
    bad = ~np.isin(d.design, dz.PROBABILITY_DESIGNS)
    if bad.any() and not random_only:
        names, counts = np.unique(d.design[bad].astype(str), return_counts=True)
        why = ", ".join(f"{c} {dz.NOT_PROBABILITY.get(str(n), str(n))}" for n, c in zip(names, counts, strict=True))
        raise EstimateError(
            f"the labeled queries are not a probability sample of the traffic ({why}); pass --random-only to "
            f"estimate from the {int((~bad).sum())} drawn at random (queue order random, active or stratified, or "
            "routed with a recorded probability)")


def all_traffic_report(db: sqlite_utils.Database, judge_run: int | None, specs: Sequence[str] | None = None, *,
                       retriever: str | None = None, design: str | None = None, random_only: bool = False,
                       half_width: float = HALF_WIDTH) -> AllTraffic:
    """Every metric in ``specs`` (default recall, P and hit at 5 and 10, MRR, nDCG at 5 and 10) over
    all the traffic relevance run ``judge_run`` (``labeler judge run --on all``) covered, for the
    default ``retriever``: the prediction-powered estimate with its 95% CI, power-tuned ``lambda``
    and effective number of labels; beside it the human-only mean and the judge-only mean (biased).
    When a faithfulness / answer-relevance run over all traffic exists, ``faithful_answers`` /
    ``relevant_answers`` too (:mod:`labeler.estimate.answers`; uniform, labels drawn at random).

    ``design``: ``uniform`` (labels from queue order random), ``active`` (the newest active draw),
    ``stratified`` (labels from queue order stratified; under routing, routed labels weighted within
    each topic), ``routed`` (routed labels weighted by 1 / probability) or None (under routing:
    stratified when stratified labels exist, else routed; otherwise active when labels from the
    active draw exist, else stratified when stratified labels exist, else uniform). ``random_only``: use only labels drawn
    at random (otherwise other labels refuse the estimate, see the module doc). ``half_width``: the
    target of "more labels needed". Raises EstimateError with the reason and the fix.
    """
    specs = list(dict.fromkeys(specs or DEFAULT_SPECS))
    for s in specs:
        parse_metric(s)
    if design is not None and design not in DESIGNS:
        raise EstimateError(f"design {design!r} is unknown; use one of: {', '.join(DESIGNS)}")
    judged = judged_traffic(db, judge_run, specs, retriever=retriever)
    labeled = submitted_pks(db, judged.pks)
    if labeled.size == 0:
        raise EstimateError(f"none of the {judged.pks.size} judged traffic queries has a human label yet; label "
                            "some from the queue (order random or active) first")
    d = dz.labeled_designs(db, labeled)
    _refuse_if_not_probability(d, random_only)
    by_design = d.counts()
    routed = (d.design == "routed").any() or routing_sampled(db, judged.pks)
    if design is None:
        design = "active" if (d.design == "active").any() and not routed else \
            "stratified" if (d.design == "stratified").any() else "routed" if routed else "uniform"
    if routed and design in ("uniform", "active"):
        refuse_other_designs(db, judged, design)
    if design == "routed" and not routed:
        raise EstimateError("routing did not sample this traffic (no routing rule with a rate below 1 decided any "
                            "of it); estimate with --design uniform, active or stratified")
    golden = human_golden(db, labeled)
    if design == "routed":
        rep = routed_report(db, judged, labeled, d, specs, by_design, half_width, golden)
    elif design == "stratified" and routed:
        rep = routed_stratified_report(db, judged, labeled, d, specs, by_design, half_width, golden)
    elif design == "active":
        rep = _active(db, judged, labeled, d, specs, by_design, half_width, golden)
    elif design == "stratified":
        from .stratified import stratified_report

        rep = stratified_report(db, judged, labeled, d, specs, by_design, half_width, golden)
    else:
        rep = _uniform(db, judged, labeled, d, specs, by_design, half_width, golden)
    from .answers import answer_estimates

    rep.metrics.update(answer_estimates(db))  # shares of faithful / relevant answers, when judged
    return rep


def _uniform(db: sqlite_utils.Database, judged: JudgedTraffic, labeled: np.ndarray, d: dz.Designs,
             specs: list[str], by_design: dict[str, int], half_width: float, golden: Any) -> AllTraffic:
    used = labeled[d.design == "random"]
    if used.size < 2:
        raise EstimateError(f"{used.size} query was labeled from the random queue; the uniform estimate needs at "
                            "least 2 (set the queue order to random and label more)")
    hv, hr = human_values(db, judged, used, specs, golden)
    rows = np.searchsorted(judged.pks, used)
    rest = np.ones(judged.pks.size, dtype=bool)
    rest[rows] = False
    b, bh, bu = hr.astype(float), judged.relevant[rows].astype(float), judged.relevant[rest].astype(float)
    metrics, estimates, more = {}, {}, {}
    for s in specs:
        a = human_numerators(hv, hr, s)
        jall = judged.numerators(s)
        u, _ = uncertainty(judged.border, jall, a, rows)  # what an active draw would use for this metric
        ratio = float(u.mean() ** 2 / np.mean(u ** 2))
        est = ppi_ratio(a, jall[rows], jall[rest], b, bh, bu)
        estimates[s] = est
        metrics[s] = metric_entry(est, human_mean(hv[s][hr]), judged.judge_mean(s))
        # variance parts at the estimate: the judge's (over N) and the rectifier's (over n)
        den = est.lam * bu.mean() + (b - est.lam * bh).mean()
        sd_imp = float(np.std(est.lam * (jall[rest] - est.estimate * bu)) / den)
        sd_rect = float(np.std((a - est.estimate * b) - est.lam * (jall[rows] - est.estimate * bh)) / den)
        more[s] = _more_needed(sd_rect, sd_imp, est, half_width, ratio)
    return AllTraffic(int(judged.pks.size), int(used.size), judged.run_id, "uniform", judged.retriever, metrics,
                      estimates, by_design, int(labeled.size - used.size),
                      dz.outcomes(db, "random", judged.pks), judge_agreement(db, judged, labeled, golden), more,
                      design_notes(judged, labeled, used))


def _more_needed(sd_rect: float, sd_imp: float, est: Estimate, half_width: float, ratio: float) -> dict[str, Any]:
    """Labels for a +-half_width interval: uniform solves z^2 (sd_imp^2 / N + sd_rect^2 / n) = h^2;
    active needs about ``ratio`` (the uncertainty model's (mean u)^2 / mean(u^2)) times the labels."""
    room = (half_width / Z95) ** 2 - sd_imp ** 2 / max(est.N, 1)
    if room <= 0:
        return {"half_width": est.half_width, "uniform_total": None, "more_needed": None,
                "active_total": None, "active_saves": None}
    total = int(math.ceil(sd_rect ** 2 / room - 1e-9))
    active = int(math.ceil(total * ratio - 1e-9))
    return {"half_width": est.half_width, "uniform_total": total, "more_needed": max(0, total - est.n),
            "active_total": active, "active_saves": max(0, total - active)}


def _active(db: sqlite_utils.Database, judged: JudgedTraffic, labeled: np.ndarray, d: dz.Designs,
            specs: list[str], by_design: dict[str, int], half_width: float, golden: Any) -> AllTraffic:
    active = d.draw_id[d.design == "active"]
    if active.size == 0:
        raise EstimateError("no labeled query was drawn by an active draw; `labeler queue --order active` draws one")
    draw_id = int(np.bincount(active).argmax())
    pks, pi, drawn, u = draw_items(db, draw_id)
    inside = np.isin(pks, judged.pks)
    pks, pi, drawn, u = pks[inside], pi[inside], drawn[inside], u[inside]
    rows_all = np.searchsorted(judged.pks, pks)
    used = labeled[(d.design == "active") & (d.draw_id == draw_id)]
    xi = np.isin(pks, used) & drawn
    hv, hr = human_values(db, judged, pks[xi], specs, golden)
    ratio = float(u.mean() ** 2 / np.mean(u ** 2))
    metrics, estimates, more = {}, {}, {}
    jr = judged.relevant[rows_all].astype(float)
    for s in specs:
        a, b = human_columns(pks.size, xi, hv, hr, s)
        jall = judged.numerators(s)[rows_all]
        est = active_ratio(a, jall, b, jr, pi, xi, covariate=u)
        estimates[s] = est
        metrics[s] = metric_entry(est, human_mean(hv[s][hr]), judged.judge_mean(s))
        # the active variance falls about as 1 / (expected labels)
        target = (half_width / Z95) ** 2
        total = int(math.ceil(est.n * est.se ** 2 / target - 1e-9)) if est.se > 0 else est.n
        more[s] = {"half_width": est.half_width, "active_total": total, "more_needed": max(0, total - est.n),
                   "uniform_total": int(math.ceil(total / ratio)) if ratio > 0 else None,
                   "active_saves": max(0, int(math.ceil(total / ratio)) - total) if ratio > 0 else None}
    notes = design_notes(judged, labeled, used)
    waiting = int(drawn.sum() - xi.sum())
    if waiting:
        notes.append(f"{waiting} drawn querie(s) have no submitted label yet; until they do, the estimate treats "
                     "them as not drawn (label them: skipping is missing-not-at-random)")
    return AllTraffic(int(pks.size), int(xi.sum()), judged.run_id, "active", judged.retriever, metrics, estimates,
                      by_design, int(labeled.size - used.size), dz.outcomes(db, "active", pks),
                      judge_agreement(db, judged, labeled, golden), more, notes)
