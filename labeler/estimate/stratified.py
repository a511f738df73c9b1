"""The all-traffic report under the ``stratified`` design (queue order stratified,
``labeler.labels.strata``): the judged traffic is split by topic, PPI++ runs within each topic on
the labels the stratified queue drew there (a uniform sample of the topic), and the topics are
combined with their shares of the judged queries (:func:`labeler.estimate.ppi.stratified_ratio`).

The weights are the topics' shares of the judged queries (not of the occurrences): the estimand is
the same mean over queries as the uniform design's; the queue's allocation by occurrences only
changes how precise each topic's part is. Every topic with judged queries needs 2 stratified labels,
else the estimate refuses naming the topics short of labels. Strata are the current topic model's;
labels drawn under an older model refuse (rebuilding topics starts a new stratified sample).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import sqlite_utils

from ..labels.strata import UNASSIGNED
from . import designs as dz
from .ppi import Z95, EstimateError, stratified_ratio
from .result import AllTraffic, design_notes, human_columns, judge_agreement, metric_entry
from .traffic import JudgedTraffic, human_values


def population_strata(db: sqlite_utils.Database, pks: np.ndarray) -> tuple[int | None, np.ndarray]:
    """(current topic model, stratum of each query in ``pks``; ``UNASSIGNED`` without a topic)."""
    row = db.execute("SELECT max(id) FROM topic_models").fetchone()
    model = None if row[0] is None else int(row[0])
    out = np.full(pks.size, UNASSIGNED, dtype=np.int64)
    if model is None:
        return None, out
    rows = np.array(db.execute("SELECT query_pk, topic FROM query_topics WHERE model_id = ? ORDER BY query_pk",
                               [model]).fetchall(), dtype=np.int64).reshape(-1, 2)
    at = np.searchsorted(rows[:, 0], pks)
    hit = (at < rows.shape[0]) & (rows[np.minimum(at, max(rows.shape[0] - 1, 0)), 0] == pks) if rows.size else \
        np.zeros(pks.size, dtype=bool)
    out[hit] = rows[at[hit], 1]
    return model, out


def stratified_report(db: sqlite_utils.Database, judged: JudgedTraffic, labeled: np.ndarray, d: dz.Designs,
                      specs: list[str], by_design: dict[str, int], half_width: float, golden: Any) -> AllTraffic:
    """The report from the labels drawn by the stratified queue (see the module doc)."""
    mine = d.design == "stratified"
    used = labeled[mine]
    if used.size == 0:
        raise EstimateError("no labeled query was drawn by the stratified queue; set `labeler queue --order "
                            "stratified` and label from the queue")
    model, stratum = population_strata(db, judged.pks)
    drawn_under = set(d.topic_model[mine].tolist()) if d.topic_model is not None else set()
    if drawn_under != {model if model is not None else -1}:
        old = ", ".join("none" if m == -1 else str(m) for m in sorted(drawn_under))
        raise EstimateError(f"the stratified labels were drawn under topic model {old} but the current one is "
                            f"{model}: its topics are other strata; keep labeling from the stratified queue (a new "
                            "sample) or estimate with --design uniform from labels drawn at random")
    rows = np.searchsorted(judged.pks, used)
    is_used = np.zeros(judged.pks.size, dtype=bool)
    is_used[rows] = True
    names, sizes = np.unique(stratum, return_counts=True)
    short = [(int(h), int(n), int((is_used & (stratum == h)).sum())) for h, n in zip(names, sizes, strict=True)
             if (is_used & (stratum == h)).sum() < 2]
    if short:
        which = "; ".join(f"topic {h}: {n} judged, {k} labeled" for h, n, k in short)
        raise EstimateError(f"every topic needs 2 labels drawn by the stratified queue for the stratified estimate "
                            f"({which}); keep labeling from the queue (order stratified)")
    hv, hr = human_values(db, judged, used, specs, golden)
    jrel = judged.relevant.astype(float)
    metrics, estimates, more = {}, {}, {}
    parts_out = None
    for s in specs:
        a_all, b_all = human_columns(judged.pks.size, rows, hv, hr, s)
        jall = judged.numerators(s)
        strata = []
        for h in names:
            inside = stratum == h
            lab, rest = inside & is_used, inside & ~is_used
            strata.append((a_all[lab], jall[lab], jall[rest], b_all[lab], jrel[lab], jrel[rest]))
        est, parts = stratified_ratio(strata)
        human, _ = stratified_ratio(strata, lam=0.0)
        estimates[s] = est
        metrics[s] = metric_entry(est, {"mean": human.estimate, "ci_low": human.ci_low, "ci_high": human.ci_high},
                            judged.judge_mean(s))
        room = (half_width / Z95) ** 2 - parts.var_imputed
        total = None if room <= 0 else int(math.ceil(est.n * parts.var_rectifier / room - 1e-9))
        more[s] = {"half_width": est.half_width, "stratified_total": total,
                   "more_needed": None if total is None else max(0, total - est.n),
                   "uniform_total": None, "active_total": None, "active_saves": None}
        parts_out = parts
    strata_rows = [{"stratum": int(h), "judged": int(n), "labeled": int(k), "weight": w}
                   for h, n, k, w in zip(names, sizes, parts_out.n, parts_out.weights, strict=True)]
    return AllTraffic(int(judged.pks.size), int(used.size), judged.run_id, "stratified", judged.retriever, metrics,
                      estimates, by_design, int(labeled.size - used.size),
                      dz.outcomes(db, "stratified", judged.pks), judge_agreement(db, judged, labeled, golden), more,
                      design_notes(judged, labeled, used), strata_rows)

