"""Estimates over all the traffic the routing rules saw, from the routed queries that were labeled
(``labeler.labels.routing``): each labeled query weighs ``1 / inclusion probability``.

- **Horvitz-Thompson** (``routed_mean`` with ``population``): ``sum(y_i / pi_i) / N`` over the
  labeled queries, N = the queries the rules decided. Unbiased whenever every query of the traffic
  had a recorded probability above 0 and every routed query is labeled: signals (probability 1)
  and the rest (the rate in effect) are then two strata each sampled with a known probability.
- **Hajek** (``routed_mean`` without ``population``; :func:`hajek_ratio` for a metric's ratio with
  its CI): ``sum(y_i / pi_i) / sum(1 / pi_i)``, the ratio form (nearly unbiased; exact when every
  probability is equal) for when N is not known.
- **Labeled so far.** Routed queries wait in the queue until someone labels them, so the labeled
  set is a second draw: within each *class* of routed queries (same reason, same recorded
  probability; within a topic too under the stratified design) the labeled share ``m / R`` is
  known, and a labeled query's probability of being in the labeled set is ``p x m / R``
  (:func:`routed_sample`). This assumes the queue hands out a class's queries in an order that does
  not depend on their metric (queue order random does; oldest first does if quality does not drift
  within the backlog). Queries that came without routing (a file ingest, a sync before the rules)
  form one more class, of probability 1, whose labels must come from the random queue.
- **Variance.** Routing step 4 is Poisson sampling (an independent hash per query), so the Hajek
  variance is the linearised ``sum((1 - pi) / pi^2 e_i^2) / (sum b_i / pi_i)^2`` with
  ``e_i = a_i - theta b_i`` (a query routed with probability 1 adds nothing). With a judge over all
  traffic, :func:`weighted_stratified_ratio` is the difference estimator in Hajek form within each
  stratum: the judge's mean over the stratum plus the weighted mean of (human - lam judge).

The naive mean of the labeled set is biased as soon as signals are routed always and the rest at a
rate: the unhappy queries are over-represented by ``1 / rate``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import sqlite_utils

from ..core.cache import LRU, data_token
from ..labels.routing import inclusion_probs
from .ppi import Estimate, EstimateError, StratifiedParts, effective_n, z_of

QUEUED = "queued"  # the class of the queries routing never decided (they were all queued)
_HOW = {"signal": "by a negative signal", "new-topic": "as a new topic", "quota": "by a topic quota",
        "sampled": "sampled", QUEUED: "drawn at random from the queries that came without routing"}
SYNC_HINT = "labeler sync"


def routed_mean(values: Any, pi: Any, population: int | None = None) -> float:
    """The mean over the traffic from the labeled ``values`` and their inclusion probabilities
    ``pi`` (Horvitz-Thompson when ``population`` is given, else Hajek); see the module doc."""
    y, p = np.asarray(values, dtype=float), np.asarray(pi, dtype=float)
    if y.shape != p.shape:
        raise EstimateError(f"{y.size} values but {p.size} inclusion probabilities; give one per labeled query")
    if y.size == 0:
        raise EstimateError("no labeled routed query yet; label from the queue first")
    if not ((p > 0) & (p <= 1)).all():
        raise EstimateError("an inclusion probability is outside (0, 1]; routing records them above 0")
    w = 1.0 / p
    if population is not None:
        if population < y.size:
            raise EstimateError(f"population {population} is smaller than the {y.size} labeled queries")
        return float((w * y).sum() / population)
    return float((w * y).sum() / w.sum())


def routing_weights(db: sqlite_utils.Database, pks: Any) -> np.ndarray:
    """``1 / pi`` of each query in ``pks`` (1 for a query routing did not decide)."""
    found = inclusion_probs(db, [int(p) for p in pks])
    return np.array([1.0 / found.get(int(p), 1.0) for p in pks], dtype=float)


# --- the design: what routing decided and what was labeled ---------------------------------------------------

_REASONS = ("signal", "new-topic", "quota", "sampled", "not-sampled", "pending")


_DECIDED = LRU(2)


def _read_decisions(db: sqlite_utils.Database) -> tuple[np.ndarray, ...]:
    """Every decision as arrays sorted by query pk: (pk, routed, probability, reason code). One scan
    handed over as one text per column that numpy parses (as :func:`labeler.estimate.traffic.int_columns`)."""
    code = "CASE reason " + " ".join(f"WHEN '{r}' THEN {i}" for i, r in enumerate(_REASONS)) + " ELSE -1 END"
    # %!.17g: the probability's text reads back as the same double
    row = db.execute(f"SELECT group_concat(query_pk), group_concat(routed), group_concat(printf('%!.17g', "
                     f"inclusion_prob)), group_concat({code}) FROM routing_decisions").fetchone()
    if row is None or row[0] is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), np.zeros(0), np.zeros(0, dtype=np.int64)
    pk, routed, prob, codes = (np.fromstring(text, dtype=float, sep=",") for text in row)
    order = np.argsort(pk, kind="stable")
    out = (pk[order].astype(np.int64), routed[order] > 0, prob[order], codes[order].astype(np.int64))
    for a in out:
        a.flags.writeable = False
    return out


def decisions(db: sqlite_utils.Database, pks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the sorted ``pks``: (reason, None where routing did not decide the query; routed; the
    recorded probability, 1 where not decided). The table is read once per state of the database
    file (kept while nothing is committed: a report asks several times)."""
    reason = np.full(pks.size, None, dtype=object)
    routed = np.zeros(pks.size, dtype=bool)
    prob = np.ones(pks.size)
    token = data_token(db)
    at_pk, was_routed, p, codes = _DECIDED.get(token, lambda: _read_decisions(db))
    if at_pk.size == 0 or pks.size == 0:
        return reason, routed, prob
    at = np.minimum(np.searchsorted(at_pk, pks), at_pk.size - 1)
    hit = at_pk[at] == pks
    idx = at[hit]
    names = np.array([*_REASONS, "unknown"], dtype=object)
    reason[hit] = names[codes[idx]]
    routed[hit] = was_routed[idx]
    prob[hit] = p[idx]
    return reason, routed, prob


def decided_pks(db: sqlite_utils.Database) -> np.ndarray:
    """The queries routing decided (not waiting for their decision), sorted."""
    at_pk, _, _, codes = _DECIDED.get(data_token(db), lambda: _read_decisions(db))
    return at_pk[codes != _REASONS.index("pending")]


def routing_sampled(db: sqlite_utils.Database, pks: np.ndarray) -> bool:
    """Whether routing decided any of ``pks`` with a probability below 1 (so the queue saw an
    unequal-probability sample of them)."""
    if db.execute("SELECT 1 FROM routing_decisions WHERE inclusion_prob < 1 LIMIT 1").fetchone() is None:
        return False
    reason, _, prob = decisions(db, pks)
    return bool(((reason != None) & (prob < 1)).any())  # noqa: E711 - elementwise


@dataclass
class RoutedSample:
    """The routing design over a population (``pks`` sorted): per query whether routing decided it
    and routed it, its recorded probability (1 if not decided), whether its label is used (``xi``) and ``pi``:
    its probability of being in the labeled set (recorded probability x its class's labeled share;
    the recorded probability for the unlabeled). ``classes``: per class of queued queries its
    reason, probability, stratum, queries and labels (the description's numbers)."""

    pks: np.ndarray
    decided: np.ndarray
    routed: np.ndarray
    prob: np.ndarray
    xi: np.ndarray
    pi: np.ndarray
    classes: list[dict[str, Any]]
    not_routed: int
    notes: list[str] = field(default_factory=list)

    @property
    def n_labeled(self) -> int:
        return int(self.xi.sum())

    def describe(self) -> str:
        """One line: how the labeled set was drawn, e.g. ``routed: 120 by a negative signal (p=1),
        380 by a 5% rate (p=0.05); 9500 not routed (left out of the queue); weighted by 1/p``."""
        merged: dict[tuple[str, float], list[int]] = {}
        for c in self.classes:
            got = merged.setdefault((c["reason"], c["probability"]), [0, 0])
            got[0] += c["labeled"]
            got[1] += c["queries"]
        parts, queued = [], None
        for (reason, p), (labeled, queries) in sorted(merged.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
            of = "" if labeled == queries else f" of {queries}"
            if reason == QUEUED:
                queued = f"{labeled}{of} {_HOW[QUEUED]}"
            elif reason == "sampled":
                parts.append(f"{labeled}{of} by a {100 * p:.3g}% rate (p={p:g})")
            else:
                parts.append(f"{labeled}{of} {_HOW.get(reason, reason)} (p={p:g})")
        line = "routed: " + (", ".join(parts) or "none labeled")
        if queued:
            line += f"; {queued}"
        line += f"; {self.not_routed} not routed (left out of the queue)" if self.not_routed else ""
        partial = any(c["labeled"] < c["queries"] for c in self.classes)
        return line + ("; weighted by 1/(p x the labeled share of its group)" if partial else "; weighted by 1/p")

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.describe(), "population": int(self.pks.size), "decided": int(self.decided.sum()),
                "not_routed": self.not_routed, "n_labeled": self.n_labeled, "classes": self.classes}


def _group(reason: str, prob: float) -> str:
    """A class of queued queries in words, for a refusal."""
    if reason == QUEUED:
        return "queries that came without routing (file ingests, syncs before the rules)"
    if reason == "sampled":
        return f"queries routed by a {100 * prob:.3g}% rate"
    return f"queries routed {_HOW.get(reason, reason)}"


def routed_sample(db: sqlite_utils.Database, pks: np.ndarray, used: np.ndarray, *,
                  strata: np.ndarray | None = None) -> RoutedSample:
    """The routing design over the population ``pks`` (sorted) with the labels of ``used`` (sorted;
    routed queries, or queries routing never decided that were labeled from the random queue); see
    the module doc. ``strata``: per query its stratum (the classes are then per stratum too).
    Raises EstimateError with the fix when the design cannot speak for part of the population."""
    reason, routed, prob = decisions(db, pks)
    decided = reason != None  # noqa: E711 - elementwise
    pending = int((reason == "pending").sum())
    if pending:
        raise EstimateError(f"{pending} traffic queries wait for their routing decision (a sync stopped before "
                            f"deciding them); run `{SYNC_HINT}` to decide them, then estimate")
    never = int((decided & ~routed & (prob <= 0)).sum())
    if never:
        raise EstimateError(f"{never} traffic queries were decided at rate 0 (routing could never pick them), so no "
                            "estimate can speak for them; route the rest with a rate above 0 (`labeler route set "
                            "--rate 0.01`)")
    xi = np.isin(pks, used)
    queued = ~decided | routed
    if (xi & ~queued).any():
        raise EstimateError("a used label belongs to a query routing left out of the queue; leave it out")
    group = np.where(decided, reason, QUEUED)
    frame = pd.DataFrame({"stratum": -1 if strata is None else strata, "reason": group, "prob": prob, "xi": xi})
    frame = frame[queued]
    table = frame.groupby(["stratum", "reason", "prob"], sort=True)["xi"].agg(["size", "sum"]).reset_index()
    share = table["sum"] / table["size"]
    empty = table[table["sum"] == 0]
    if len(empty):
        which = "; ".join(f"{int(r['size'])} {_group(str(r['reason']), float(r['prob']))}"
                          + ("" if strata is None else f" in topic {int(r['stratum'])}")
                          for _, r in empty.iterrows())
        fix = ("label some in queue order random" if (empty["reason"] == QUEUED).any()
               else "label some of them from the queue")
        raise EstimateError(f"part of the traffic has no label to speak for it ({which}); {fix}, then estimate")
    key = pd.MultiIndex.from_frame(table[["stratum", "reason", "prob"]])
    at = key.get_indexer(pd.MultiIndex.from_arrays([frame["stratum"], frame["reason"], frame["prob"]]))
    pi = prob.copy()
    rows = np.flatnonzero(queued)
    pi[rows] = np.where(frame["xi"].to_numpy(), prob[rows] * share.to_numpy()[at], prob[rows])
    classes = [{"reason": str(r["reason"]), "probability": float(r["prob"]),
                **({} if strata is None else {"stratum": int(r["stratum"])}),
                "queries": int(r["size"]), "labeled": int(r["sum"])} for _, r in table.iterrows()]
    waiting = sum(c["queries"] - c["labeled"] for c in classes if c["reason"] != QUEUED)
    notes = [f"{waiting} routed querie(s) have no submitted label yet: each labeled one also stands for them "
             "(weight 1/(p x the labeled share of its group)), which assumes the queue hands them out in an order "
             "unrelated to their metric (queue order random)"] if waiting else []
    return RoutedSample(pks, decided, routed, prob, xi, pi, classes, int((decided & ~routed).sum()), notes)


# --- estimators -------------------------------------------------------------------------------------------

def hajek_ratio(a: np.ndarray, b: np.ndarray | None, pi: np.ndarray, *, confidence: float = 0.95) -> Estimate:
    """The Hajek estimate of ``E[a] / E[b]`` (``b`` None = 1, a mean) from the labeled queries'
    values and inclusion probabilities ``pi``, with the linearised Poisson-sampling variance (see
    the module doc). ``N`` of the result is the estimated population, ``sum(1 / pi)``."""
    a = np.asarray(a, dtype=float).ravel()
    pi = np.asarray(pi, dtype=float).ravel()
    b = np.ones(a.size) if b is None else np.asarray(b, dtype=float).ravel()
    if not (a.size == b.size == pi.size):
        raise EstimateError(f"{a.size} values but {pi.size} inclusion probabilities; give one per labeled query")
    if a.size < 2:
        raise EstimateError(f"{a.size} labeled routed query; a weighted estimate needs at least 2")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise EstimateError("a labeled query's value is NaN; give finite numbers")
    if not ((pi > 0) & (pi <= 1)).all():
        raise EstimateError("an inclusion probability is outside (0, 1]; routing records them above 0")
    w = 1.0 / pi
    den = float((w * b).sum())
    if not den > 0:
        raise EstimateError("the denominator's estimate is not positive (no query has a relevant chunk)")
    theta = float((w * a).sum() / den)
    e = a - theta * b
    se = math.sqrt(float(((1 - pi) * w ** 2 * e ** 2).sum())) / den
    half = z_of(confidence) * se
    human_sd = float(np.std(e, ddof=1) / b.mean()) if b.mean() > 0 else float("nan")
    return Estimate(theta, se, theta - half, theta + half, 0.0, int(a.size), int(round(w.sum())),
                    effective_n(human_sd, se, int(a.size)))


WeightedStratum = tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray, np.ndarray]


def _hajek(w: np.ndarray, x: np.ndarray) -> float:
    return float((w * x).sum() / w.sum())


def _rect_var(w: np.ndarray, pi: np.ndarray, r: np.ndarray) -> float:
    """The linearised variance of the Hajek mean of ``r`` (labeled values, weights ``w = 1/pi``)."""
    rc = r - _hajek(w, r)
    return float(((1 - pi) * w ** 2 * rc ** 2).sum()) / float(w.sum()) ** 2


def weighted_stratified_ratio(strata: list[WeightedStratum], *, lam: float | None = None,
                              confidence: float = 0.95) -> tuple[Estimate, StratifiedParts]:
    """``E[a] / E[b]`` over the union of the strata from labels drawn with known probabilities.

    Each stratum is ``(a, ahat, b, bhat, pi, xi)`` over all its N_h queries: human values ``a``,
    ``b`` (read where ``xi``; ``b`` None = 1), the judge's ``ahat``, ``bhat`` (None: no judge, the
    plain Hajek estimate), the inclusion probabilities ``pi`` and ``xi`` = labeled. Within stratum
    h the mean of ``a`` is ``lam_h mean(ahat over N_h) + Hajek mean of (a - lam_h ahat) over the
    labeled`` (likewise ``b``); the strata are combined with ``W_h = N_h / N``. ``lam`` None =
    tuned per stratum for the least variance (clipped to [0, 1]); 0 = human only. The variance is
    ``sum W_h^2 (rectifier_h + imputed_h)`` over the denominator squared: the rectifier's is the
    Poisson-sampling Hajek variance of ``(a - theta b) - lam (ahat - theta bhat)``, the judge's
    ``var(lam (ahat - theta bhat)) / N_h`` as in :func:`labeler.estimate.ppi.stratified_ratio`."""
    if not strata:
        raise EstimateError("a weighted estimate needs at least one stratum")
    if lam is not None and not 0 <= lam <= 1:
        raise EstimateError(f"lam={lam!r} must be from 0 to 1 (None tunes it)")
    parts = []
    for a, ahat, b, bhat, pi, xi in strata:
        xi = np.asarray(xi, dtype=bool).ravel()
        big_n = xi.size
        pi = np.asarray(pi, dtype=float).ravel()
        if int(xi.sum()) < 2:
            raise EstimateError(f"a stratum has {int(xi.sum())} labeled query; a weighted estimate needs 2 in each")
        if pi.size != big_n or np.asarray(a).size != big_n:
            raise EstimateError("a, pi and xi must each have one value per query of the stratum")
        if not ((pi[xi] > 0) & (pi[xi] <= 1)).all():
            raise EstimateError("an inclusion probability is outside (0, 1]; routing records them above 0")
        judge = ahat is not None
        ah = np.asarray(ahat, dtype=float).ravel() if judge else np.zeros(big_n)
        bb = np.ones(big_n) if b is None else np.asarray(b, dtype=float).ravel()
        bh = (np.ones(big_n) if bhat is None or b is None else np.asarray(bhat, dtype=float).ravel()) if judge \
            else np.zeros(big_n)
        aa = np.asarray(a, dtype=float).ravel()
        if not (np.isfinite(aa[xi]).all() and np.isfinite(bb[xi]).all() and np.isfinite(ah).all()
                and np.isfinite(bh).all()):
            raise EstimateError("a stratum holds NaN or infinite values; give finite numbers")
        parts.append((aa[xi], bb[xi], ah, bh, xi, 1.0 / pi[xi], pi[xi], judge))
    sizes = np.array([p[4].size for p in parts], dtype=float)
    weights = sizes / sizes.sum()

    def means(lams: list[float]) -> tuple[float, float]:
        num = den = 0.0
        for wh, lh, (a, b, ah, bh, xi, w, _, _) in zip(weights, lams, parts, strict=True):
            num += wh * (lh * ah.mean() + _hajek(w, a - lh * ah[xi]))
            den += wh * (lh * bh.mean() + _hajek(w, b - lh * bh[xi]))
        if not den > 0:
            raise EstimateError("the denominator's estimate is not positive (no query has a relevant chunk)")
        return num / den, den

    if lam is None:
        theta1, _ = means([1.0 if p[7] else 0.0 for p in parts])
        lams = []
        for a, b, ah, bh, xi, w, pi, judge in parts:
            if not judge:
                lams.append(0.0)
                continue
            z, zh = a - theta1 * b, ah - theta1 * bh
            zc, zhc = z - _hajek(w, z), zh[xi] - _hajek(w, zh[xi])
            scale = float(w.sum()) ** 2
            cov = float(((1 - pi) * w ** 2 * zc * zhc).sum()) / scale
            var = float(((1 - pi) * w ** 2 * zhc ** 2).sum()) / scale + float(np.var(zh)) / zh.size
            lams.append(float(np.clip(cov / var, 0.0, 1.0)) if var > 0 else 0.0)
    else:
        lams = [float(lam) if p[7] else 0.0 for p in parts]
    theta, den = means(lams)
    var_imp = var_rect = var_human = 0.0
    for wh, lh, (a, b, ah, bh, xi, w, pi, _) in zip(weights, lams, parts, strict=True):
        zh = ah - theta * bh
        var_imp += wh ** 2 * float(np.var(lh * zh)) / zh.size
        var_rect += wh ** 2 * _rect_var(w, pi, (a - theta * b) - lh * zh[xi])
        var_human += wh ** 2 * _rect_var(w, pi, a - theta * b)
    var_imp, var_rect, var_human = var_imp / den ** 2, var_rect / den ** 2, var_human / den ** 2
    se = math.sqrt(var_imp + var_rect)
    n = int(sum(int(p[4].sum()) for p in parts))
    half = z_of(confidence) * se
    est = Estimate(float(theta), float(se), float(theta - half), float(theta + half), float(np.dot(weights, lams)),
                   n, int(sizes.sum()), _weighted_effective(var_human, se, n))
    return est, StratifiedParts(tuple(float(x) for x in weights), tuple(int(p[4].sum()) for p in parts),
                                tuple(float(x) for x in lams), var_imp, var_rect)


def _weighted_effective(var_human: float, se: float, n: int) -> float | None:
    """Labels the weighted human-only estimate would need for the standard error ``se``."""
    return effective_n(math.sqrt(var_human * n), se, n)
