"""Prediction-powered estimates of a mean over all traffic from a judge's values on every query and
human values on a sample of them.

Three estimators, all vectorised (no loop over queries), all returning an :class:`Estimate`:

- :func:`ppi_mean`: PPI++ (Angelopoulos, Duchi, Zrnic 2023) for a uniform random labeled sample:
  ``lam * mean(Yhat_unlabeled) + mean(Y - lam * Yhat)`` with the power-tuned ``lam`` clipped to
  [0, 1] and the normal 95% interval; the same numbers as ``ppi_py.ppi_mean_ci`` (tested to 1e-9).
- :func:`ppi_ratio`: ``E[a] / E[b]`` with numerator and denominator estimated together (the mean of
  a metric over the queries that have a relevant chunk: ``a = metric * r``, ``b = r``), as the
  estimating equation ``E[a - theta b] = 0`` with one ``lam`` tuned for it and a delta-method
  interval; with every ``b = 1`` it is exactly :func:`ppi_mean`.
- :func:`stratified_ratio`: PPI++ within each stratum (a uniform sample in each), combined with
  the strata's population shares ``W_h = N_h / N``: ``theta = sum W_h A_h / sum W_h B_h`` (``A_h``,
  ``B_h``: the stratum's PPI means of ``a`` and ``b``), ``lam`` tuned per stratum, variance
  ``sum W_h^2 var_h`` of the linearised ``a - theta b`` over the denominator squared (delta
  method); with one stratum it is exactly :func:`ppi_ratio`.
- :func:`active_mean` / :func:`active_ratio`: active inference (Zrnic and Candes 2024) for labels
  drawn with known inclusion probabilities ``pi``: the mean over all N of
  ``g + (Y - g) * xi / pi`` with ``g = lam * Yhat + beta * covariate`` (``xi`` = drawn and
  labeled; the covariate predicts the judge's error, e.g. the uncertainty the draw used), its
  variance from the N terms; ``lam`` and ``beta`` are tuned to minimise it (``lam = 1, beta = 0`` is
  the plain estimator of the paper; any fixed values keep it unbiased because E[xi / pi] = 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import LabelerError

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


class EstimateError(LabelerError, ValueError):
    """Inputs an estimate cannot be computed from; the message says the fix."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its standard error, normal interval and power-tuning ``lam``.
    ``effective_n``: labels a human-only mean would need for the same standard error."""

    estimate: float
    se: float
    ci_low: float
    ci_high: float
    lam: float
    n: int
    N: int
    effective_n: float | None = None

    @property
    def half_width(self) -> float:
        return self.ci_high - self.estimate


def z_of(confidence: float) -> float:
    """The normal quantile of a two-sided ``confidence`` interval."""
    if confidence == 0.95:
        return Z95
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2))


def _floats(name: str, values: np.ndarray, minimum: int) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size < minimum:
        raise EstimateError(f"{name} has {arr.size} value(s); an estimate needs at least {minimum}")
    if not np.isfinite(arr).all():
        raise EstimateError(f"{name} holds NaN or infinite values; give finite numbers")
    return arr


def _labeled(y: np.ndarray, yhat: np.ndarray, yhat_unlabeled: np.ndarray) -> tuple[np.ndarray, ...]:
    y = _floats("Y (human values)", y, 2)
    yhat = _floats("Yhat (judge values on the labeled)", yhat, 2)
    unl = _floats("Yhat_unlabeled (judge values on the unlabeled)", yhat_unlabeled, 1)
    if y.size != yhat.size:
        raise EstimateError(f"Y has {y.size} values but Yhat {yhat.size}; give one judge value per labeled query")
    return y, yhat, unl


def _tuned_lam(z: np.ndarray, zhat: np.ndarray, zhat_unlabeled: np.ndarray) -> float:
    """PPI++'s lam for one estimating function: cov(z, zhat) / ((1 + n/N) var(zhat over all)),
    clipped to [0, 1] (the same formula as ppi_py's ``_calc_lam_glm`` in one dimension)."""
    n, big_n = z.size, zhat_unlabeled.size
    cov = float(np.mean((z - z.mean()) * (zhat - zhat.mean())))
    var = float(np.var(np.concatenate([zhat, zhat_unlabeled]), ddof=1))
    if not var > 0:
        return 0.0  # the judge says the same everywhere: it cannot help
    return float(np.clip(cov / ((1 + n / big_n) * var), 0.0, 1.0))


def ppi_mean(y: np.ndarray, yhat: np.ndarray, yhat_unlabeled: np.ndarray, *, lam: float | None = None,
             confidence: float = 0.95) -> Estimate:
    """PPI++ mean of ``y`` with the judge's ``yhat`` (labeled) and ``yhat_unlabeled`` (the rest of
    the traffic). ``lam`` None = power-tuned; 1 = plain PPI; 0 = the human-only mean."""
    return ppi_ratio(y, yhat, yhat_unlabeled, None, None, None, lam=lam, confidence=confidence)


def ppi_ratio(a: np.ndarray, ahat: np.ndarray, ahat_unlabeled: np.ndarray, b: np.ndarray | None,
              bhat: np.ndarray | None, bhat_unlabeled: np.ndarray | None, *, lam: float | None = None,
              confidence: float = 0.95) -> Estimate:
    """PPI++ estimate of ``E[a] / E[b]`` (``b`` None = 1, a plain mean).

    Solves ``lam * mean(ahat_u - theta bhat_u) + mean((a - theta b) - lam (ahat - theta bhat)) = 0``;
    ``lam`` tuned on the linearised function ``a - theta b`` at the ``lam = 1`` solution; the
    standard error is the delta method's (the function's PPI variance over the denominator squared).
    """
    a, ahat, au = _labeled(a, ahat, ahat_unlabeled)
    n, big_n = a.size, au.size
    if b is None:
        b, bhat, bu = np.ones(n), np.ones(n), np.ones(big_n)
    else:
        b, bhat, bu = _labeled(b, bhat, bhat_unlabeled)
        if b.size != n or bu.size != big_n:
            raise EstimateError("numerator and denominator arrays must have the same lengths")

    def solve(lam_: float) -> tuple[float, float]:
        num = lam_ * au.mean() + (a - lam_ * ahat).mean()
        den = lam_ * bu.mean() + (b - lam_ * bhat).mean()
        if not den > 0:
            raise EstimateError("the denominator's estimate is not positive (no query has a relevant chunk)")
        return num / den, den

    if lam is None:
        theta1, _ = solve(1.0)
        lam = _tuned_lam(a - theta1 * b, ahat - theta1 * bhat, au - theta1 * bu)
    elif not 0 <= lam <= 1:
        raise EstimateError(f"lam={lam!r} must be from 0 to 1 (None tunes it)")
    theta, den = solve(float(lam))
    imputed = np.std(lam * (au - theta * bu)) / math.sqrt(big_n)
    rectifier = np.std((a - theta * b) - lam * (ahat - theta * bhat)) / math.sqrt(n)
    se = float(math.sqrt(imputed ** 2 + rectifier ** 2) / den)
    human_sd = float(np.std(a - theta * b, ddof=1) / den) if n > 1 else float("nan")
    half = z_of(confidence) * se
    return Estimate(float(theta), se, float(theta - half), float(theta + half), float(lam), n, n + big_n,
                    effective_n(human_sd, se, n))


Stratum = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None]


@dataclass(frozen=True)
class StratifiedParts:
    """What :func:`stratified_ratio` found besides the estimate: per stratum the weight ``W_h``, the
    labels ``n_h`` and ``lam_h``; and the variance's two parts at the estimate (the judge's, over
    the unlabeled, and the correction's, over the labels), already divided by the denominator squared."""

    weights: tuple[float, ...]
    n: tuple[int, ...]
    lams: tuple[float, ...]
    var_imputed: float
    var_rectifier: float


def stratified_ratio(strata: list[Stratum], *, lam: float | None = None,
                     confidence: float = 0.95) -> tuple[Estimate, StratifiedParts]:
    """Stratified PPI++ estimate of ``E[a] / E[b]`` over the union of the strata (see the module
    doc). Each stratum is ``(a, ahat, ahat_unlabeled, b, bhat, bhat_unlabeled)`` as in
    :func:`ppi_ratio` (``b`` None = 1) and needs at least 2 labels; a stratum labeled in full has no
    unlabeled part (its ``lam`` is 0). ``lam`` None = tuned per stratum; 0 = the stratified
    human-only estimate. No finite-population correction (as in :func:`ppi_ratio`)."""
    if not strata:
        raise EstimateError("a stratified estimate needs at least one stratum")
    parts = []
    for a, ahat, au, b, bhat, bu in strata:
        a = _floats("Y (human values)", a, 2)
        ahat = _floats("Yhat (judge values on the labeled)", ahat, 2)
        au = np.asarray(au, dtype=float).ravel()
        if a.size != ahat.size:
            raise EstimateError(f"Y has {a.size} values but Yhat {ahat.size}; give one judge value per labeled query")
        if b is None:
            b, bhat, bu = np.ones(a.size), np.ones(a.size), np.ones(au.size)
        else:
            b, bhat, bu = (np.asarray(x, dtype=float).ravel() for x in (b, bhat, bu))
            if b.size != a.size or bhat.size != a.size or bu.size != au.size:
                raise EstimateError("numerator and denominator arrays must have the same lengths")
        if not (np.isfinite(au).all() and np.isfinite(b).all() and np.isfinite(bhat).all() and np.isfinite(bu).all()):
            raise EstimateError("a stratum holds NaN or infinite values; give finite numbers")
        parts.append((a, ahat, au, b, bhat, bu))
    if lam is not None and not 0 <= lam <= 1:
        raise EstimateError(f"lam={lam!r} must be from 0 to 1 (None tunes it)")
    sizes = np.array([p[0].size + p[2].size for p in parts], dtype=float)
    w = sizes / sizes.sum()

    def means(lams: list[float]) -> tuple[float, float]:
        num = den = 0.0
        for wh, lh, (a, ahat, au, b, bhat, bu) in zip(w, lams, parts, strict=True):
            num += wh * ((lh * au.mean() if au.size else 0.0) + (a - lh * ahat).mean())
            den += wh * ((lh * bu.mean() if bu.size else 0.0) + (b - lh * bhat).mean())
        if not den > 0:
            raise EstimateError("the denominator's estimate is not positive (no query has a relevant chunk)")
        return num / den, den

    if lam is None:
        theta1, _ = means([1.0 if p[2].size else 0.0 for p in parts])
        lams = [_tuned_lam(a - theta1 * b, ahat - theta1 * bhat, au - theta1 * bu) if au.size else 0.0
                for a, ahat, au, b, bhat, bu in parts]
    else:
        lams = [float(lam) if p[2].size else 0.0 for p in parts]
    theta, den = means(lams)
    var_imp = var_rect = var_human = 0.0
    for wh, lh, (a, ahat, au, b, bhat, bu) in zip(w, lams, parts, strict=True):
        if au.size:
            var_imp += wh ** 2 * float(np.var(lh * (au - theta * bu))) / au.size
        var_rect += wh ** 2 * float(np.var((a - theta * b) - lh * (ahat - theta * bhat))) / a.size
        var_human += wh ** 2 * float(np.var(a - theta * b, ddof=1)) / a.size
    var_imp, var_rect, var_human = var_imp / den ** 2, var_rect / den ** 2, var_human / den ** 2
    se = math.sqrt(var_imp + var_rect)
    n = int(sum(p[0].size for p in parts))
    half = z_of(confidence) * se
    eff = effective_n(math.sqrt(var_human * n), se, n)
    est = Estimate(float(theta), float(se), float(theta - half), float(theta + half),
                   float(np.dot(w, lams)), n, int(sizes.sum()), eff)
    return est, StratifiedParts(tuple(float(x) for x in w), tuple(int(p[0].size) for p in parts),
                                tuple(float(x) for x in lams), var_imp, var_rect)


def effective_n(human_sd: float, se: float, n: int) -> float | None:
    """``(human_sd / se)^2``: the labels a human-only mean of per-label spread ``human_sd`` needs
    for the standard error ``se`` (None when unknown)."""
    if not math.isfinite(human_sd):
        return None
    if se <= 0:
        return float(n) if human_sd <= 0 else None
    return float((human_sd / se) ** 2)


def active_mean(y: np.ndarray, yhat: np.ndarray, pi: np.ndarray, xi: np.ndarray, *, lam: float | None = None,
                covariate: np.ndarray | None = None, confidence: float = 0.95) -> Estimate:
    """Active-inference mean over all N queries (arrays of length N; ``y`` is read only where
    ``xi``): ``mean(lam yhat + (y - lam yhat) xi / pi)``, variance ``var(terms) / N``."""
    return active_ratio(y, yhat, None, None, pi, xi, lam=lam, covariate=covariate, confidence=confidence)


def active_ratio(a: np.ndarray, ahat: np.ndarray, b: np.ndarray | None, bhat: np.ndarray | None, pi: np.ndarray,
                 xi: np.ndarray, *, lam: float | None = None, covariate: np.ndarray | None = None,
                 confidence: float = 0.95) -> Estimate:
    """Active-inference estimate of ``E[a] / E[b]`` (``b`` None = 1); arrays over all N queries;
    ``a``/``b`` are read only where ``xi`` (NaN elsewhere is fine). ``covariate``: a per-query
    predictor of the judge's error (e.g. the uncertainty the draw used); the judge's value becomes
    ``lam * ahat + beta * covariate`` with ``beta`` tuned with ``lam`` (None: ``beta = 0``)."""
    ahat = _floats("Yhat (judge values)", ahat, 2)
    big_n = ahat.size
    xi = np.asarray(xi, dtype=bool).ravel()
    pi = _floats("pi (inclusion probabilities)", pi, 2)
    if xi.size != big_n or pi.size != big_n or np.asarray(a).size != big_n:
        raise EstimateError("Y, Yhat, pi and xi must each have one value per traffic query")
    if ((pi <= 0) | (pi > 1)).any():
        raise EstimateError("inclusion probabilities must be in (0, 1]; draw them with a floor above 0")
    n = int(xi.sum())
    if n < 2:
        raise EstimateError(f"{n} drawn query has a human label; an estimate needs at least 2")
    w = np.where(xi, 1.0 / pi, 0.0)
    a = np.where(xi, np.asarray(a, dtype=float).ravel(), 0.0)
    if not np.isfinite(a).all():
        raise EstimateError("a drawn query's human value is NaN; label it or leave it out of the draw")
    ratio = b is not None
    if ratio:
        bhat = _floats("judge denominators", bhat, 2)
        b = np.where(xi, np.asarray(b, dtype=float).ravel(), 0.0)
    else:
        b, bhat = np.ones(big_n), np.ones(big_n)

    cov_x = np.zeros(big_n) if covariate is None else _floats("covariate", covariate, 2)
    if cov_x.size != big_n:
        raise EstimateError("covariate must have one value per traffic query")

    def solve(lam_: float, beta: float = 0.0) -> tuple[float, float, np.ndarray]:
        # terms of the numerator and denominator; ``beta * covariate`` moves the judge's values by
        # their predicted error, which keeps the estimate unbiased (E[1 - w] = 0) and takes the
        # judge's bias out of the weighted corrections
        shift = beta * cov_x
        ta = lam_ * ahat + shift + (a - lam_ * ahat - shift) * w
        tb = lam_ * bhat + (b - lam_ * bhat) * w
        den = tb.mean() if ratio else 1.0
        if not den > 0:
            raise EstimateError("the denominator's estimate is not positive (no query has a relevant chunk)")
        theta = ta.mean() / den
        return theta, den, (ta - theta * tb) if ratio else ta

    beta = 0.0
    if lam is None:
        theta1, _, _ = solve(1.0)
        # terms = A + lam B + beta C with A = z w, B = zhat (1 - w), C = covariate (1 - w): the
        # variance is least at the least-squares coefficients; lam is clipped to [0, 1], beta refitted
        z, zhat = a - theta1 * b, ahat - theta1 * bhat
        big_a, big_b, big_c = z * w, zhat * (1 - w), cov_x * (1 - w)
        cov = np.cov(np.vstack([big_a, big_b, big_c]), bias=True)
        sub = cov[1:, 1:]
        if np.linalg.matrix_rank(sub) == 2:
            lam = float(np.clip(-np.linalg.solve(sub, cov[1:, 0])[0], 0.0, 1.0))
        else:
            lam = 0.0 if not cov[1, 1] > 0 else float(np.clip(-cov[1, 0] / cov[1, 1], 0.0, 1.0))
        if cov[2, 2] > 0:
            beta = float(-(cov[2, 0] + lam * cov[2, 1]) / cov[2, 2])
    elif not 0 <= lam <= 1:
        raise EstimateError(f"lam={lam!r} must be from 0 to 1 (None tunes it)")
    theta, den, psi = solve(float(lam), beta)
    se = float(np.std(psi, ddof=1) / math.sqrt(big_n) / den)
    # a human-only mean of the drawn values: its per-label spread is that of a - theta b
    drawn = xi
    human_sd = float(np.std((a - theta * b)[drawn], ddof=1) / den)
    half = z_of(confidence) * se
    return Estimate(float(theta), se, float(theta - half), float(theta + half), float(lam), n, big_n,
                    effective_n(human_sd, se, n))


def human_mean(y: np.ndarray, *, confidence: float = 0.95) -> dict[str, float | None]:
    """The human-only mean of ``y`` with its normal interval: {"mean", "ci_low", "ci_high", "n"}."""
    y = np.asarray(y, dtype=float).ravel()
    y = y[np.isfinite(y)]
    if y.size == 0:
        return {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
    mean = float(y.mean())
    half = z_of(confidence) * float(y.std(ddof=1)) / math.sqrt(y.size) if y.size > 1 else 0.0
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "n": int(y.size)}


def labels_for_half_width(estimate: Estimate, sd_rectifier: float, sd_imputed: float, half_width: float = 0.05,
                          confidence: float = 0.95) -> int | None:
    """Labels in total a uniform PPI estimate needs for a ``half_width`` interval: solves
    ``z^2 (sd_imputed^2 / N + sd_rectifier^2 / n) = half_width^2`` for n (None if the judge's part
    alone is already wider)."""
    room = (half_width / z_of(confidence)) ** 2 - sd_imputed ** 2 / max(estimate.N, 1)
    if room <= 0:
        return None
    return int(math.ceil(sd_rectifier ** 2 / room - 1e-9))
