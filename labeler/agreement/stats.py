"""The statistics: every ordinal agreement statistic from confusion matrices, bootstrapped over
the resamples of ``resample``, ROC AUC, and the pairs of annotators behind the human ceiling.
Pure numpy on arrays; see the package doc for the conventions and the undefined cases."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import JudgeError
from .resample import count_tables

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_MIN_N = 10

#: The statistics of an ordinal comparison, in display order, with a one-line description.
STATISTICS: dict[str, str] = {
    "exact_agreement": "share of pairs with the same grade",
    "cohen_kappa": "Cohen's kappa, unweighted",
    "kappa_linear": "Cohen's kappa, linear weights |i - j|",
    "kappa_quadratic": "Cohen's kappa, quadratic weights (i - j)^2",
    "kappa_collapsed": "Cohen's kappa of relevant (grade >= threshold) vs not",
    "krippendorff_alpha": "Krippendorff's alpha, ordinal",
    "spearman_rho": "Spearman's rank correlation (ties get mid-ranks)",
    "precision": "share of the judge's relevant pairs that humans call relevant",
    "recall": "share of the humans' relevant pairs that the judge calls relevant",
    "f1": "harmonic mean of precision and recall",
    "bias": "mean judge grade minus human grade",
    "over_grading": "share of pairs the judge grades higher than humans",
    "under_grading": "share of pairs the judge grades lower than humans",
    "confusion_matrix": "pair counts, rows = human grade, columns = judge grade",
}
ANSWER_STATISTICS: dict[str, str] = {"roc_auc": "ROC AUC of the judge's faithfulness score vs humans' 'yes'"}

#: What people call each statistic: the pages and the CLI's text show these, JSON keeps the raw keys.
DISPLAY_NAMES: dict[str, str] = {
    "exact_agreement": "exact agreement",
    "cohen_kappa": "Cohen's kappa",
    "kappa_linear": "weighted kappa (linear)",
    "kappa_quadratic": "weighted kappa (quadratic)",
    "kappa_collapsed": "kappa, relevant vs not",
    "krippendorff_alpha": "Krippendorff's alpha",
    "spearman_rho": "Spearman's rho",
    "precision": "precision (relevant)",
    "recall": "recall (relevant)",
    "f1": "F1 (relevant)",
    "bias": "bias (judge − human grade)",
    "over_grading": "share graded higher",
    "under_grading": "share graded lower",
    "confusion_matrix": "confusion matrix",
    "roc_auc": "ROC AUC (faithfulness score)",
    "kendall_tau": "Kendall's tau",
}


def display_name(key: str) -> str:
    """The name people read for a statistic's raw key (``cohen_kappa`` -> "Cohen's kappa"); an
    unknown key is returned as it is."""
    return DISPLAY_NAMES.get(key, key)


@dataclass
class Stat:
    """One statistic: ``value`` (None when undefined, then ``reason`` says why), the confidence
    interval, the number of pairs ``n``, and an optional ``note`` (e.g. resamples left out)."""

    value: Any
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    reason: str | None = None
    note: str | None = None

    @property
    def defined(self) -> bool:
        return self.value is not None

    def to_dict(self) -> dict[str, Any]:
        """``{"value", "ci_low", "ci_high", "n"}`` plus ``reason`` / ``note`` when set."""
        out = {"value": self.value, "ci_low": self.ci_low, "ci_high": self.ci_high, "n": self.n}
        if self.reason:
            out["reason"] = self.reason
        if self.note:
            out["note"] = self.note
        return out


def stat_dicts(stats: dict[str, Stat]) -> dict[str, dict[str, Any]]:
    return {name: s.to_dict() for name, s in stats.items()}


# --- statistics from confusion matrices ----------------------------------------------------------

def _ordinal_from_tables(t: np.ndarray, levels: int, threshold: int,
                         t_alpha: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Every ordinal statistic for a stack of confusion matrices ``t`` (m, K, K); NaN = undefined."""
    k = levels
    grades = np.arange(k, dtype=float)
    n = t.sum(axis=(1, 2))
    out: dict[str, np.ndarray] = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        p = t / n[:, None, None]
        rows, cols = p.sum(axis=2), p.sum(axis=1)
        expected = rows[:, :, None] * cols[:, None, :]
        diff = grades[:, None] - grades[None, :]

        def kappa(weight: np.ndarray, observed: np.ndarray, chance: np.ndarray) -> np.ndarray:
            num = (weight * observed).sum(axis=(1, 2))
            den = (weight * chance).sum(axis=(1, 2))
            return np.where(den > 1e-12, 1.0 - num / den, np.nan)

        out["exact_agreement"] = np.trace(p, axis1=1, axis2=2)
        out["cohen_kappa"] = kappa(1.0 - np.eye(k), p, expected)
        out["kappa_linear"] = kappa(np.abs(diff), p, expected)
        out["kappa_quadratic"] = kappa(diff**2, p, expected)

        relevant = (grades >= threshold).astype(float)
        onehot = np.stack([1.0 - relevant, relevant], axis=1)  # (K, 2)
        p2 = np.einsum("ki,mkl,lj->mij", onehot, p, onehot)
        e2 = p2.sum(axis=2)[:, :, None] * p2.sum(axis=1)[:, None, :]
        out["kappa_collapsed"] = kappa(1.0 - np.eye(2), p2, e2)

        tp, fp, fn = p2[:, 1, 1], p2[:, 0, 1], p2[:, 1, 0]
        out["precision"] = np.where(tp + fp > 0, tp / (tp + fp), np.nan)
        out["recall"] = np.where(tp + fn > 0, tp / (tp + fn), np.nan)
        out["f1"] = np.where(tp + fp + fn > 0, 2 * tp / (2 * tp + fp + fn), np.nan)

        out["bias"] = (p * -diff).sum(axis=(1, 2))  # rated - reference = column - row
        out["over_grading"] = np.triu(p, 1).sum(axis=(1, 2))
        out["under_grading"] = np.tril(p, -1).sum(axis=(1, 2))

        # Spearman = Pearson of mid-ranks; with K grades a grade's mid-rank follows from the counts.
        row_n, col_n = t.sum(axis=2), t.sum(axis=1)
        row_rank = np.cumsum(row_n, axis=1) - row_n + (row_n + 1) / 2
        col_rank = np.cumsum(col_n, axis=1) - col_n + (col_n + 1) / 2
        mean = ((n + 1) / 2)[:, None]
        rc, cc = row_rank - mean, col_rank - mean
        cov = np.einsum("mi,mij,mj->m", rc, t, cc)
        var_r, var_c = (row_n * rc**2).sum(axis=1), (col_n * cc**2).sum(axis=1)
        out["spearman_rho"] = np.where((var_r > 1e-9) & (var_c > 1e-9), cov / np.sqrt(var_r * var_c), np.nan)

        out["krippendorff_alpha"] = _alpha_ordinal(t if t_alpha is None else t_alpha)
    return out


def _alpha_ordinal(t: np.ndarray) -> np.ndarray:
    """Krippendorff's ordinal alpha of pairable values from (weighted) pair tables (m, K, K)."""
    o = t + np.transpose(t, (0, 2, 1))  # the coincidence matrix
    n_v = o.sum(axis=2)
    total = n_v.sum(axis=1)
    k = t.shape[1]
    idx = np.arange(k)
    lo, hi = np.minimum.outer(idx, idx), np.maximum.outer(idx, idx)
    cum = np.cumsum(n_v, axis=1)
    # delta(c, k) = (sum of n_g for g from c to k  -  (n_c + n_k) / 2)^2
    between = cum[:, hi] - cum[:, lo] + n_v[:, lo]
    delta = (between - (n_v[:, :, None] + n_v[:, None, :]) / 2) ** 2
    observed = (o * delta).sum(axis=(1, 2))
    expected = (n_v[:, :, None] * n_v[:, None, :] * delta).sum(axis=(1, 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(expected > 1e-12, 1.0 - (total - 1) * observed / expected, np.nan)


def _reasons(t0: np.ndarray, levels: int, threshold: int, min_n: int,
             names: tuple[str, str]) -> dict[str, str | None]:
    """Why each statistic is undefined on the sample's confusion matrix ``t0`` (None = defined)."""
    n = int(round(t0.sum()))
    if n < max(min_n, 1):
        why = "no pairs to compare" if n == 0 else f"only {n} pair(s); at least {min_n} are needed"
        return {name: why for name in STATISTICS if name != "confusion_matrix"}
    ref, rated = names
    rows, cols = t0.sum(axis=1), t0.sum(axis=0)
    used_r, used_c = np.flatnonzero(rows), np.flatnonzero(cols)
    relevant = np.arange(levels) >= threshold
    ref_rel, rated_rel = rows[relevant].sum(), cols[relevant].sum()
    out: dict[str, str | None] = {name: None for name in STATISTICS if name != "confusion_matrix"}
    if used_r.size == 1 and used_c.size == 1 and used_r[0] == used_c[0]:
        why = (f"{ref} and {rated} gave every pair the same grade ({used_r[0]}): expected agreement "
               "is 1, so kappa is 0/0")
        for name in ("cohen_kappa", "kappa_linear", "kappa_quadratic"):
            out[name] = why
        out["krippendorff_alpha"] = f"every rating is {used_r[0]}: no variation, so alpha is 0/0"
    side = {0: "below", n: "at or above"}
    if ref_rel in side and rated_rel == ref_rel:
        out["kappa_collapsed"] = (f"{ref} and {rated} put every pair {side[ref_rel]} the threshold "
                                  f"({threshold}): expected agreement is 1, so kappa is 0/0")
    for who, used in ((ref, used_r), (rated, used_c)):
        if used.size == 1 and out["spearman_rho"] is None:
            out["spearman_rho"] = f"every {who} grade is {used[0]}: no variation, so Spearman's rho is undefined"
    if rated_rel == 0:
        out["precision"] = f"{rated} called no pair relevant, so precision is 0/0"
    if ref_rel == 0:
        out["recall"] = f"{ref} called no pair relevant, so recall is 0/0"
    if rated_rel == 0 and ref_rel == 0:
        out["f1"] = f"neither {ref} nor {rated} called any pair relevant, so F1 is 0/0"
    return out


def _summarise(values: np.ndarray, n: int, reason: str | None, confidence: float) -> Stat:
    """A Stat from a statistic's array: [sample, resample 1, ..., resample R]."""
    value = float(values[0])
    if reason is not None or np.isnan(value):
        return Stat(None, n=n, reason=reason or "undefined on this sample")
    boot = values[1:]
    if boot.size == 0:
        return Stat(value, n=n, note="no resamples: no interval")
    ok = boot[~np.isnan(boot)]
    dropped = boot.size - ok.size
    if ok.size < boot.size / 2:
        return Stat(value, n=n, note=f"{dropped} of {boot.size} resamples undefined: no interval")
    low, high = np.quantile(ok, [(1 - confidence) / 2, (1 + confidence) / 2])
    note = f"{dropped} of {boot.size} resamples undefined and left out" if dropped else None
    return Stat(value, float(low), float(high), n, note=note)


def check_bootstrap(confidence: float, n_resamples: int) -> None:
    if not 0 < confidence < 1:
        raise JudgeError(f"confidence must be between 0 and 1, e.g. 0.95; got {confidence!r}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int | np.integer) or n_resamples < 0:
        raise JudgeError(f"n_resamples must be a whole number >= 0, e.g. 1000; got {n_resamples!r}")


def _grades(values: Any, levels: int, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(arr == np.round(arr))):
        raise JudgeError(f"{what} must hold whole-number grades; convert with .astype(int)")
    arr = arr.astype(np.int64)
    if arr.min() < 0 or arr.max() >= levels:
        raise JudgeError(f"{what} holds grades outside 0..{levels - 1}; check the grade scale (levels={levels})")
    return arr


@dataclass
class OrdinalArrays:
    """The raw material of an ordinal comparison: per statistic, [sample, resamples...]; the
    sample's confusion matrix; n. Two comparisons over the same n and seed share resamples."""

    arrays: dict[str, np.ndarray]
    table: np.ndarray
    n: int


def ordinal_arrays(reference: Any, rated: Any, *, levels: int, threshold: int, n_resamples: int = 1000,
                   seed: int = 0, pair_weights: np.ndarray | None = None, clusters: Any = None) -> OrdinalArrays:
    """Statistic arrays of ``rated`` vs ``reference`` (equal-length grade arrays) on the sample and
    each resample; ``pair_weights`` weigh pairs for Krippendorff's alpha only; ``clusters`` (one id
    per pair, e.g. its query) makes the bootstrap resample whole clusters."""
    if levels < 2:
        raise JudgeError(f"levels={levels!r}: a grade scale needs at least 2 grades")
    a = _grades(reference, levels, "reference")
    b = _grades(rated, levels, "rated")
    if a.shape != b.shape or a.ndim != 1:
        raise JudgeError(f"reference and rated must be 1-d and of equal length; got {a.shape} and {b.shape}")
    weights: list[np.ndarray | None] = [None]
    if pair_weights is not None:
        weights.append(np.asarray(pair_weights, dtype=float))
    if clusters is not None and np.asarray(clusters).shape != a.shape:
        raise JudgeError(f"clusters must give one id per pair; got {np.asarray(clusters).shape} for {a.shape}")
    stack = count_tables(a * levels + b, levels * levels, n_resamples=n_resamples, seed=seed, weights=weights,
                         clusters=clusters)
    tables = stack[0].reshape(-1, levels, levels)
    alpha_tables = stack[1].reshape(-1, levels, levels) if pair_weights is not None else None
    arrays = _ordinal_from_tables(tables, levels, threshold, alpha_tables)
    return OrdinalArrays(arrays, tables[0], int(a.size))


def ordinal_agreement(reference: Any, rated: Any, *, levels: int, threshold: int, n_resamples: int = 1000,
                      seed: int = 0, confidence: float = 0.95, min_n: int = DEFAULT_MIN_N,
                      pair_weights: np.ndarray | None = None, alpha_data: np.ndarray | None = None,
                      names: tuple[str, str] = ("human", "judge"), clusters: Any = None) -> dict[str, Stat]:
    """Every statistic in ``STATISTICS`` of ``rated`` against ``reference`` (grades 0..levels-1).

    The interval resamples pairs, or whole ``clusters`` when given (one id per pair: pass the query
    of each pair, since the chunks of one query are graded together and are not independent).

    Krippendorff's alpha is computed by the ``krippendorff`` package on ``alpha_data`` (raters x
    units, NaN = missing; default the two rows reference, rated); its interval comes from the
    coincidence matrices of the same resamples as everything else. See the module doc for the
    undefined cases.
    """
    check_bootstrap(confidence, n_resamples)
    result = ordinal_arrays(reference, rated, levels=levels, threshold=threshold, n_resamples=n_resamples,
                            seed=seed, pair_weights=pair_weights, clusters=clusters)
    reasons = _reasons(result.table, levels, threshold, min_n, names)
    stats = {name: _summarise(result.arrays[name], result.n, reasons[name], confidence)
             for name in STATISTICS if name != "confusion_matrix"}
    alpha = stats["krippendorff_alpha"]
    if alpha.defined:
        import krippendorff

        data = alpha_data if alpha_data is not None else np.vstack(
            [_grades(reference, levels, "reference"), _grades(rated, levels, "rated")]).astype(float)
        alpha.value = float(krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal",
                                               value_domain=list(range(levels))))
    stats["confusion_matrix"] = Stat(result.table.astype(int).tolist(), n=result.n)
    return {name: stats[name] for name in STATISTICS}


def paired_difference(first: OrdinalArrays, second: OrdinalArrays, confidence: float = 0.95,
                      min_n: int = DEFAULT_MIN_N) -> dict[str, Stat]:
    """second - first for every scalar statistic, with a paired bootstrap interval (both must come
    from the same items, n and seed, i.e. the same resamples)."""
    if first.n != second.n:
        raise JudgeError("paired differences need both comparisons on the same items")
    out = {}
    for name, values in first.arrays.items():
        d = second.arrays[name] - values
        reason = None
        if first.n < max(min_n, 1):
            reason = f"only {first.n} common pair(s); at least {min_n} are needed"
        elif np.isnan(d[0]):
            reason = "undefined for one of the runs"
        out[name] = _summarise(d, first.n, reason, confidence)
    return {name: out[name] for name in STATISTICS if name in out}


def roc_auc(positive: Any, score: Any, *, n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95,
            min_n: int = DEFAULT_MIN_N, clusters: Any = None) -> Stat:
    """ROC AUC of ``score`` for the boolean ``positive`` (ties count 1/2, as sklearn's
    ``roc_auc_score``), from per-resample class-by-score count tables."""
    check_bootstrap(confidence, n_resamples)
    pos = np.asarray(positive, dtype=bool)
    s = np.asarray(score, dtype=float)
    n = pos.size
    if n < max(min_n, 1):
        return Stat(None, n=n, reason="no pairs to compare" if n == 0 else
                    f"only {n} item(s); at least {min_n} are needed")
    if pos.all() or not pos.any():
        return Stat(None, n=n, reason=f"humans said {'yes' if pos.all() else 'not yes'} for every item: "
                    "ROC AUC needs both classes")
    levels, code = np.unique(s, return_inverse=True)
    m = levels.size
    tables = count_tables(pos.astype(np.int64) * m + code, 2 * m, n_resamples=n_resamples, seed=seed,
                          clusters=clusters)[0]
    neg_n, pos_n = tables[:, :m], tables[:, m:]
    below = np.cumsum(neg_n, axis=1) - neg_n
    with np.errstate(divide="ignore", invalid="ignore"):
        auc = (pos_n * (below + neg_n / 2)).sum(axis=1) / (pos_n.sum(axis=1) * neg_n.sum(axis=1))
    return _summarise(auc, n, None, confidence)


# --- human-human pairs ---------------------------------------------------------------------------

@dataclass
class HumanPairs:
    """Every pair of annotators on the same item: grades (first annotator by name = reference),
    Krippendorff weights 1/(m-1), and the annotators x items reliability matrix."""

    first: np.ndarray
    second: np.ndarray
    weights: np.ndarray
    reliability: np.ndarray
    items: int
    clusters: np.ndarray  # the first unit column (the query) of each pair, for the bootstrap


def human_pairs(grades: pd.DataFrame, unit: Sequence[str]) -> HumanPairs:
    """Pairs from per-annotator grades (columns ``unit`` + annotator + grade) on items that two or
    more annotators graded."""
    import pandas as pd

    cols = [*unit, "annotator", "grade"]
    df = grades[cols]
    counts = df.groupby(list(unit))["annotator"].transform("size")
    df = df[counts >= 2].assign(m=counts[counts >= 2])
    if df.empty:
        empty = np.zeros(0, dtype=np.int64)
        return HumanPairs(empty, empty, np.zeros(0), np.zeros((0, 0)), 0, empty)
    pairs = df.merge(df, on=list(unit), suffixes=("_a", "_b"))
    pairs = pairs[pairs["annotator_a"] < pairs["annotator_b"]].sort_values([*unit, "annotator_a", "annotator_b"])
    wide = df.pivot_table(index="annotator", columns=list(unit), values="grade", aggfunc="first")
    return HumanPairs(pairs["grade_a"].to_numpy(np.int64), pairs["grade_b"].to_numpy(np.int64),
                      1.0 / (pairs["m_a"].to_numpy(float) - 1), wide.to_numpy(dtype=float),
                      int(pd.MultiIndex.from_frame(df[list(unit)]).nunique()), pairs[unit[0]].to_numpy())
