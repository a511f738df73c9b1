"""Sampling designs of the labeling queue: what the all-traffic estimates need to know about how the
human-labeled queries were chosen.

- **Recording.** Every query the queue hands out gets one ``queue_designs`` row, the first time
  (``labeler.labels.designs``): the design it was drawn under (the queue order: ``random``, ``oldest``,
  ``lowest_score``, ``frequent``, ``signals_first``, ``active`` or ``stratified``), its inclusion
  probability when the design has one (``active``; ``random`` is an equal-probability sample whose
  probability is n/N), and the seed; ``stratified`` also its stratum (topic) and topic model.
  A labeled query without a row was not handed out by the queue: opened by hand or imported (both
  leave the same traces, so they are reported together). This module reads those rows back.
- **Routed live queries** (``labeler.labels.routing``): when the routing rules sampled (a rate below 1),
  a labeled query they routed is ``routed``, whatever order handed it out: the routed set is an
  unequal-probability sample (signals always, a rate for the rest) with a recorded probability per
  query, so the estimates weigh it by 1 / probability (``labeler.estimate.routed``,
  ``labeler.estimate.routed_report``) and never read it as uniform.
- **Probability samples.** ``random``, ``active``, ``stratified`` (uniform within each topic) and
  ``routed`` (known unequal probabilities) are; the other orders pick by a property
  of the query, so a mean over what they picked says nothing about the rest of the traffic.
- **Active draws** (``labeler.estimate.active``): inclusion probabilities proportional to the judge's
  uncertainty, drawn with a seeded generator and stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlite_utils

from .. import db as store
from ..labels.routing import inclusion_probs

PROBABILITY_DESIGNS = ("random", "active", "stratified", "routed")
NOT_PROBABILITY = {"oldest": "queue order oldest first", "lowest_score": "queue order lowest score",
                   "frequent": "queue order most frequent", "signals_first": "queue order signals first",
                   "active-undrawn": "outside the active draw",
                   "not-drawn": "not handed out by the queue (opened by hand or imported)"}


# --- what the labeled queries were drawn under ---------------------------------------------------------------

@dataclass
class Designs:
    """For the labeled queries ``pks`` (sorted): ``design`` per query (see the module doc) and the
    active inclusion probability and draw (NaN / -1 when none); under ``stratified`` the topic model
    the strata came from (-1 when none)."""

    pks: np.ndarray
    design: np.ndarray
    pi: np.ndarray
    draw_id: np.ndarray
    topic_model: np.ndarray | None = None

    def counts(self) -> dict[str, int]:
        names, counts = np.unique(self.design.astype(str), return_counts=True)
        return {str(n): int(c) for n, c in zip(names, counts, strict=True)}


def labeled_designs(db: sqlite_utils.Database, pks: np.ndarray) -> Designs:
    """The design each of the labeled queries ``pks`` (sorted) was drawn under."""
    packed = store.dumps([int(p) for p in pks])
    rows = {int(r[0]): r[1:] for r in db.execute(
        "SELECT query_pk, design, inclusion_prob, draw_id, topic_model FROM queue_designs WHERE query_pk IN "
        "(SELECT value FROM json_each(?))", [packed])}
    design = np.empty(pks.size, dtype=object)
    pi = np.full(pks.size, np.nan)
    draw = np.full(pks.size, -1, dtype=np.int64)
    model = np.full(pks.size, -1, dtype=np.int64)
    for i, pk in enumerate(pks.tolist()):
        row = rows.get(pk)
        if row is None:
            design[i] = "not-drawn"
        else:
            design[i] = row[0]
            if row[1] is not None:
                pi[i] = row[1]
            if row[2] is not None:
                draw[i] = row[2]
            if row[3] is not None:
                model[i] = row[3]
    # routing that sampled (a probability below 1) made the routed queries an unequal-probability
    # sample of the live traffic: whatever order the queue handed them out in, they are not uniform
    routed = inclusion_probs(db, pks.tolist())
    if routed and db.execute("SELECT 1 FROM routing_decisions WHERE inclusion_prob < 1 LIMIT 1").fetchone():
        for i, pk in enumerate(pks.tolist()):
            if pk in routed:
                design[i] = "routed"
    return Designs(pks, design, pi, draw, model)


def outcomes(db: sqlite_utils.Database, design: str, pks: np.ndarray) -> dict[str, Any]:
    """Among the traffic queries ``pks`` handed out under ``design``: how many, and how many were
    skipped or discarded by every annotator who had them (missing not at random), with shares."""
    handed_pks = np.fromiter((r[0] for r in db.execute("SELECT query_pk FROM queue_designs WHERE design = ?",
                                                       [design])), dtype=np.int64)
    return outcomes_among(db, handed_pks[np.isin(handed_pks, pks)])


def outcomes_among(db: sqlite_utils.Database, handed_pks: np.ndarray) -> dict[str, Any]:
    """:func:`outcomes` of the handed-out queries ``handed_pks``."""
    status = {"submitted": set(), "skipped": set(), "discarded": set()}
    for pk, st in db.execute("SELECT query_pk, status FROM query_labels WHERE status IN "
                             "('submitted', 'skipped', 'discarded')"):
        status[st].add(pk)
    open_ = [p for p in handed_pks.tolist() if p not in status["submitted"]]
    handed = int(handed_pks.size)
    skipped = sum(p in status["skipped"] for p in open_)
    discarded = sum(p in status["discarded"] for p in open_)
    share = (lambda k: None if handed == 0 else k / handed)  # noqa: E731
    return {"handed_out": int(handed), "skipped": int(skipped), "skipped_share": share(skipped),
            "discarded": int(discarded), "discarded_share": share(discarded)}


# --- the active draw ---------------------------------------------------------------------------------------
