"""The all-traffic report's record and the pieces every design's estimate shares: the entry of one
metric, the run's agreement with the humans on the labeled chunks, the notes, and the numerators of
the ratio estimates. ``estimate.report`` (uniform, active) and ``estimate.stratified`` build on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sqlite_utils

from .. import db as store
from .ppi import Estimate
from .traffic import JudgedTraffic


@dataclass
class AllTraffic:
    """The all-traffic report; :meth:`to_dict` is the ``--json`` document."""

    population: int
    n_labeled: int
    judge_run: int
    design: str
    retriever: str
    metrics: dict[str, dict[str, Any]]
    estimates: dict[str, Estimate]
    labeled_by_design: dict[str, int]
    ignored: int
    handed_out: dict[str, Any]
    agreement: dict[str, Any]
    more_labels: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    strata: list[dict[str, Any]] = field(default_factory=list)
    drawn: dict[str, Any] | None = None  # routing: how the labeled set was drawn (RoutedSample.to_dict)

    def to_dict(self) -> dict[str, Any]:
        """``{"population", "n_labeled", "judge_run", "design", "metrics": {spec: {"estimate",
        "ci_low", "ci_high", "lambda", "effective_n", "human_only": {"mean", "ci_low", "ci_high"},
        "judge_only": {"mean"}}}}``, then what else the report knows: the retriever, the labels by
        design and those left out, skipped/discarded hand-outs, the run's agreement with the humans
        on the labeled chunks, the labels needed for a +-0.05 interval, and notes; under the
        stratified design ``strata``: per topic its judged queries, labels and weight. When routing
        sampled the traffic, ``how_drawn`` (the sentence and the classes of routed queries with their
        probabilities and labels) and per metric ``human_weighted``: the human-only estimate weighted by
        1 / inclusion probability (``human_only`` is then the plain mean of the labeled set, biased)."""
        extra = {"strata": self.strata} if self.design == "stratified" else {}
        if self.drawn is not None:
            extra["how_drawn"] = self.drawn
        return {**extra, "population": self.population, "n_labeled": self.n_labeled, "judge_run": self.judge_run,
                "design": self.design, "metrics": self.metrics, "retriever": self.retriever,
                "labeled_by_design": self.labeled_by_design, "labels_left_out": self.ignored,
                "handed_out": self.handed_out, "agreement": self.agreement, "more_labels": self.more_labels,
                "notes": self.notes}


def judge_agreement(db: sqlite_utils.Database, judged: JudgedTraffic, labeled: np.ndarray, golden: Any) -> dict[str, Any]:
    """The run's grades against the consolidated human grades (``golden``: query, doc, grade) on the
    labeled queries' judged chunks."""
    if labeled.size == 0:
        return {"pairs": 0, "exact": None, "kappa_relevant": None}
    rows = db.execute("SELECT query_pk, doc_pk, grade FROM judge_labels WHERE run_id = ? AND status = 'ok' AND "
                      "grade IS NOT NULL AND query_pk IN (SELECT value FROM json_each(?))",
                      [judged.run_id, store.dumps([int(p) for p in labeled])]).fetchall()
    if not rows or not len(golden):
        return {"pairs": 0, "exact": None, "kappa_relevant": None}
    j = np.array(rows, dtype=np.int64)
    gkey = golden["query"].to_numpy(np.int64) * (1 << 32) + golden["doc"].to_numpy(np.int64)
    jkey = j[:, 0] * (1 << 32) + j[:, 1]
    order = np.argsort(gkey)
    pos = np.minimum(np.searchsorted(gkey[order], jkey), gkey.size - 1)
    hit = gkey[order][pos] == jkey
    human = golden["grade"].to_numpy(np.int64)[order][pos[hit]]
    judge = j[hit, 2]
    if human.size == 0:
        return {"pairs": 0, "exact": None, "kappa_relevant": None}
    h, g = human >= judged.threshold, judge >= judged.threshold
    p_o = float(np.mean(h == g))
    p_e = float(h.mean() * g.mean() + (1 - h.mean()) * (1 - g.mean()))
    kappa = None if p_e >= 1 else (p_o - p_e) / (1 - p_e)
    return {"pairs": int(human.size), "exact": float(np.mean(human == judge)), "kappa_relevant": kappa}


def human_numerators(values: dict[str, np.ndarray], relevant: np.ndarray, spec: str) -> np.ndarray:
    return np.where(relevant, np.nan_to_num(values[spec]), 0.0)


def human_columns(size: int, at: np.ndarray, values: dict[str, np.ndarray], relevant: np.ndarray,
                  spec: str) -> tuple[np.ndarray, np.ndarray]:
    """The humans' numerators of ``spec`` and their relevance, put at ``at`` (positions or a mask) in
    two columns of ``size`` rows (0 where no human labeled): the estimators' ``a`` and ``b``."""
    a = np.zeros(size)
    b = np.zeros(size)
    a[at] = human_numerators(values, relevant, spec)
    b[at] = relevant
    return a, b


def metric_entry(est: Estimate, human: dict[str, Any], judge_mean: float | None,
                 weighted: Estimate | None = None) -> dict[str, Any]:
    out = {"estimate": est.estimate, "ci_low": est.ci_low, "ci_high": est.ci_high, "lambda": est.lam,
           "effective_n": est.effective_n,
           "human_only": {"mean": human["mean"], "ci_low": human["ci_low"], "ci_high": human["ci_high"]},
           "judge_only": {"mean": judge_mean}}
    if weighted is not None:
        out["human_weighted"] = {"mean": weighted.estimate, "ci_low": weighted.ci_low, "ci_high": weighted.ci_high}
    return out


def design_notes(judged: JudgedTraffic, labeled: np.ndarray, used: np.ndarray) -> list[str]:
    notes = []
    if judged.n_failed:
        notes.append(f"{judged.n_failed} judged chunk(s) have no grade (failed or pending calls) and count as "
                     "unjudged; resume the run to grade them")
    if labeled.size > used.size:
        notes.append(f"{labeled.size - used.size} labeled querie(s) outside the design are left out")
    return notes
