"""The all-traffic share of faithful / relevant production answers: a faithfulness or answer-relevance
judge run over all traffic (``labeler judge run --judge faithfulness.v1 --on all``), corrected by the
answer judgments annotators gave on the queries drawn at random (PPI++ mean, uniform design). When
routing sampled the traffic, the routed queries' judgments weigh 1 / their inclusion probability
instead (active-inference mean with known probabilities, as :mod:`labeler.estimate.routed_report`).

A query's value is its verdict as a share: yes 1, partly 0.5, no 0 (the humans': the mean over the
annotators who submitted one). The traffic is the logged queries the run graded; queries whose call
failed are left out of it whether labeled or not (the same rule for every query).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sqlite_utils

from ..judge.registry import ANSWER_FIELDS, VERDICTS
from . import designs as dz
from .ppi import EstimateError, active_mean, human_mean, ppi_mean
from .routed import decisions, hajek_ratio, routed_sample, routing_sampled

NAMES = {"faithfulness": "faithful_answers", "answer_relevance": "relevant_answers"}


def _newest_run(db: sqlite_utils.Database, kind: str) -> int | None:
    row = db.execute("SELECT id FROM judge_runs WHERE kind = ? AND on_set = 'all' AND status != 'failed' "
                     "ORDER BY id DESC LIMIT 1", [kind]).fetchone()
    return None if row is None else int(row[0])


def answer_estimates(db: sqlite_utils.Database) -> dict[str, dict[str, Any]]:
    """``{name: entry}`` for each answer kind with a run over all traffic and at least 2 human
    judgments drawn at random (or routed, under routing); the entry has the shape of the retrieval
    metrics' plus ``judge_run``."""
    out: dict[str, dict[str, Any]] = {}
    for kind, name in NAMES.items():
        run_id = _newest_run(db, kind)
        if run_id is None:
            continue
        judged = np.array(db.execute(
            "SELECT j.query_pk, j.grade FROM judge_labels j JOIN queries q ON q.pk = j.query_pk WHERE j.run_id = ? "
            "AND j.status = 'ok' AND j.grade IS NOT NULL AND q.origin = 'log' ORDER BY 1", [run_id]).fetchall(),
            dtype=float).reshape(-1, 2)
        if judged.shape[0] < 3:
            continue
        pks, yhat = judged[:, 0].astype(np.int64), judged[:, 1] / (len(VERDICTS) - 1)
        column = ANSWER_FIELDS[kind]  # a fixed column name
        share = {v: i / (len(VERDICTS) - 1) for i, v in enumerate(VERDICTS)}
        votes: dict[int, list[float]] = {}
        for pk, verdict in db.execute(f"SELECT query_pk, {column} FROM query_labels WHERE status = 'submitted' "
                                      f"AND {column} IS NOT NULL"):
            votes.setdefault(int(pk), []).append(share[verdict])
        labeled = np.intersect1d(np.array(sorted(votes), dtype=np.int64), pks)
        d = dz.labeled_designs(db, labeled)
        if routing_sampled(db, pks) or (d.design == "routed").any():
            entry = _routed(db, pks, yhat, labeled, d, votes)
        else:
            entry = _uniform(pks, yhat, labeled, d, votes)
        if entry is not None:
            out[name] = {**entry, "judge_only": {"mean": float(yhat.mean())}, "judge_run": run_id,
                         "population": int(pks.size)}
    return out


def _uniform(pks: np.ndarray, yhat: np.ndarray, labeled: np.ndarray, d: dz.Designs,
             votes: dict[int, list[float]]) -> dict[str, Any] | None:
    used = labeled[d.design == "random"]
    if used.size < 2:
        return None
    rows = np.searchsorted(pks, used)
    rest = np.ones(pks.size, dtype=bool)
    rest[rows] = False
    y = np.array([np.mean(votes[int(p)]) for p in used])
    try:
        est = ppi_mean(y, yhat[rows], yhat[rest])
    except EstimateError:
        return None
    return _share(est, y, used.size)


def _routed(db: sqlite_utils.Database, pks: np.ndarray, yhat: np.ndarray, labeled: np.ndarray, d: dz.Designs,
            votes: dict[int, list[float]]) -> dict[str, Any] | None:
    reason, _, _ = decisions(db, labeled)
    used = labeled[(d.design == "routed") | ((d.design == "random") & (reason == None))]  # noqa: E711
    if used.size < 2:
        return None
    rows = np.searchsorted(pks, used)
    y = np.array([np.mean(votes[int(p)]) for p in used])
    full = np.zeros(pks.size)
    full[rows] = y
    try:
        sample = routed_sample(db, pks, used)
        est = active_mean(full, yhat, sample.pi, sample.xi)
        weighted = hajek_ratio(y, None, sample.pi[rows])
    except EstimateError:
        return None
    return {**_share(est, y, used.size),
            "human_weighted": {"mean": weighted.estimate, "ci_low": weighted.ci_low, "ci_high": weighted.ci_high}}


def _share(est: Any, y: np.ndarray, n: int) -> dict[str, Any]:
    """An estimated share as the reports give it, with the labeled answers' own mean beside it."""
    h = human_mean(y)
    return {"estimate": est.estimate, "ci_low": est.ci_low, "ci_high": est.ci_high, "lambda": est.lam,
            "effective_n": est.effective_n,
            "human_only": {"mean": h["mean"], "ci_low": h["ci_low"], "ci_high": h["ci_high"]},
            "n_labeled": int(n)}
