"""Active draws: each traffic query a judge run covered gets an inclusion probability ``pi``
proportional to the judge's uncertainty about it, floored at 0.05 x the mean and scaled to the label
budget; ``xi ~ Bernoulli(pi)`` with a seeded generator; all of it is stored (``active_draws``,
``active_draw_items``). With queue order ``active`` the queue hands out the drawn queries (in a seeded
random order, ``labeler.labels.designs``) and nothing else.

The uncertainty model: the judge's error on a query's metric comes from chunks whose grade sits one
step either side of the relevance threshold (one grade of error flips relevance there), so the
expected squared error of the judge's nDCG@10 is modelled as ``c0 + c1 * border`` (``border`` = how
many such grades the query has), fitted by least squares on the queries already labeled at random
(20 or more), else ``0.01 + border`` up to scale; the uncertainty is its square root.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlite_utils

from .. import db as store
from ..accounts.manage import require
from .designs import PROBABILITY_DESIGNS, labeled_designs
from .ppi import EstimateError

ACTIVE_METRIC = "ndcg@10"
FLOOR = 0.05  # pi_min = FLOOR x mean(pi)
MIN_FIT = 20  # labeled queries needed to fit the uncertainty model


@dataclass
class ActiveDraw:
    """A stored active draw: ``population`` traffic queries, ``drawn`` of them to label (expected
    ``budget``), and ``label_ratio``: the labels active needs per label uniform needs for the same
    CI width under the uncertainty model, ``(mean u)^2 / mean(u^2)`` (1 = no saving)."""

    id: int
    judge_run: int
    seed: int
    budget: float
    population: int
    drawn: int
    fitted_on: int
    label_ratio: float
    min_pi: float
    max_pi: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def uncertainty(border: np.ndarray, judge_values: np.ndarray, human_values: np.ndarray | None = None,
                human_rows: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """The judge's uncertainty per query (see the module doc) and how many labels it was fitted on.
    ``human_values`` are aligned with ``human_rows`` (positions in ``border``); NaN values (no
    relevant chunk) count as 0, as in the estimates' numerators."""
    x = border.astype(float)
    prior = 0.01 + x
    if human_values is None or human_rows is None or human_rows.size < MIN_FIT:
        return np.sqrt(prior), 0
    err2 = (np.nan_to_num(human_values) - np.nan_to_num(judge_values[human_rows])) ** 2
    design = np.column_stack([np.ones(human_rows.size), x[human_rows]])
    coef, *_ = np.linalg.lstsq(design, err2, rcond=None)
    fitted = coef[0] + coef[1] * x
    top = float(fitted.max()) if fitted.size else 0.0
    if not top > 0:
        return np.sqrt(prior), 0
    return np.sqrt(np.maximum(fitted, 0.01 * top)), int(human_rows.size)


def inclusion_probabilities(u: np.ndarray, budget: float) -> np.ndarray:
    """``pi`` proportional to ``u``, summing to ``budget``, floored at FLOOR x mean, capped at 1."""
    big_n = u.size
    if not 0 < budget <= big_n:
        raise EstimateError(f"label budget {budget!r} must be above 0 and at most the {big_n} traffic queries")
    u = np.maximum(np.asarray(u, dtype=float), 1e-12)
    pi = budget * u / u.sum()
    for _ in range(50):  # floor and cap, then rescale the free part to the budget
        pi = np.clip(pi, FLOOR * budget / big_n, 1.0)
        total = pi.sum()
        if abs(total - budget) < 1e-9 * budget:
            break
        free = (pi > FLOOR * budget / big_n) & (pi < 1.0)
        if not free.any():
            break
        pi[free] *= (budget - pi[~free].sum()) / pi[free].sum()
    return np.clip(pi, FLOOR * budget / big_n, 1.0)


def draw_active(db: sqlite_utils.Database, judge_run: int | None, *, budget: float | None = None, seed: int = 0,
                retriever: str | None = None, by: str | None = None) -> ActiveDraw:
    """Draw the queries to label next with probabilities from the judge's uncertainty (module doc)
    over the traffic ``judge_run`` covered (a relevance run ``--on all``), store the draw and return
    it. ``budget``: expected labels (default the ``label_budget`` setting). Leads only (``by``)."""
    from .traffic import human_values, judged_traffic, submitted_pks

    require(db, by, "lead", "drawing the active sample")
    budget = float(store.get_setting(db, "label_budget") or 100) if budget is None else float(budget)
    judged = judged_traffic(db, judge_run, [ACTIVE_METRIC], retriever=retriever)
    labeled = submitted_pks(db, judged.pks)
    designs = labeled_designs(db, labeled)
    random_pks = labeled[np.isin(designs.design, PROBABILITY_DESIGNS)]
    values, relevant = human_values(db, judged, random_pks, [ACTIVE_METRIC])
    rows = np.searchsorted(judged.pks, random_pks)
    human = np.where(relevant, values[ACTIVE_METRIC], 0.0)
    judge_vals = np.where(judged.relevant, judged.values[ACTIVE_METRIC], 0.0)
    u, fitted_on = uncertainty(judged.border, judge_vals, human, rows)
    budget = min(budget, float(judged.pks.size))
    pi = inclusion_probabilities(u, budget)
    xi = np.random.default_rng(seed).uniform(size=pi.size) < pi
    ratio = float(u.mean() ** 2 / np.mean(u ** 2))
    params = {"metric": ACTIVE_METRIC, "floor": FLOOR, "model": "c0 + c1 * border", "fitted_on": fitted_on}
    with store.transaction(db):
        cur = db.execute("INSERT INTO active_draws (judge_run, retriever, metric, budget, seed, population, drawn, "
                         "params, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         [judged.run_id, judged.retriever, ACTIVE_METRIC, budget, seed, int(pi.size), int(xi.sum()),
                          store.dumps(params), by, store.now()])
        draw_id = cur.lastrowid
        db.conn.executemany("INSERT INTO active_draw_items (draw_id, query_pk, uncertainty, inclusion_prob, drawn) "
                            "VALUES (?, ?, ?, ?, ?)",
                            zip([draw_id] * pi.size, judged.pks.tolist(), u.tolist(), pi.tolist(),
                                xi.astype(int).tolist(), strict=True))
    return ActiveDraw(draw_id, judged.run_id, seed, budget, int(pi.size), int(xi.sum()), fitted_on, ratio,
                      float(pi.min()), float(pi.max()))


def draw_items(db: sqlite_utils.Database, draw_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(pks sorted, pi, drawn, uncertainty) of a stored draw."""
    flat = db.execute("SELECT query_pk, inclusion_prob, drawn, uncertainty FROM active_draw_items WHERE draw_id = ? "
                      "ORDER BY query_pk", [draw_id]).fetchall()
    if not flat:
        raise EstimateError(f"active draw {draw_id} does not exist; `labeler queue --order active` makes one")
    arr = np.array(flat, dtype=float)
    return arr[:, 0].astype(np.int64), arr[:, 1], arr[:, 2].astype(bool), arr[:, 3]


def draw_newest(db: sqlite_utils.Database, *, budget: float | None = None, seed: int = 0,
                by: str | None = None) -> ActiveDraw:
    """:func:`draw_active` over the newest relevance run over all traffic (the Settings page)."""
    row = db.execute("SELECT id FROM judge_runs WHERE kind = 'relevance' AND on_set = 'all' AND status != 'failed' "
                     "ORDER BY id DESC LIMIT 1").fetchone()
    if row is None:
        from .traffic import ALL_TRAFFIC_HINT

        raise EstimateError(f"the active order needs a judge run over all traffic; make one with `{ALL_TRAFFIC_HINT}`")
    return draw_active(db, int(row[0]), budget=budget, seed=seed, by=by)
