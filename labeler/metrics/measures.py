"""The built-in measures, one kernel per metric: ``fn(judgments, k)`` gives one value per query and its
docstring is the specification (formula, gain, cutoff, what happens without relevant docs). Values
equal trec_eval's where it has the measure. Registered under their names and aliases on import."""

from __future__ import annotations

import numpy as np

from .judgments import RankedJudgments
from .registry import register_metric


def recall(r: RankedJudgments, k: int | None) -> np.ndarray:
    """Relevant docs in the top k / all relevant judged docs (trec_eval recall_k)."""
    return r.sum_top(r.relevant, k) / r.n_relevant


def precision(r: RankedJudgments, k: int | None) -> np.ndarray:
    """Relevant docs in the top k / k, even when fewer than k were retrieved (trec_eval P_k)."""
    return r.sum_top(r.relevant, k) / k


def hit(r: RankedJudgments, k: int | None) -> np.ndarray:
    """1 if any relevant doc is in the top k, else 0 (trec_eval success_k)."""
    return (r.sum_top(r.relevant, k) > 0).astype(float)


def mrr(r: RankedJudgments, k: int | None) -> np.ndarray:
    """1 / rank of the first relevant doc, 0 if none was retrieved (trec_eval recip_rank, no cutoff).

    With @k: 0 when the first relevant doc is below rank k.
    """
    first = r.first_relevant_rank
    return np.where(first <= (np.inf if k is None else k), 1.0 / first, 0.0)


def _linear_gain(grade: np.ndarray) -> np.ndarray:
    return grade.astype(float)


def _exp_gain(grade: np.ndarray) -> np.ndarray:
    return np.exp2(grade.astype(float)) - 1.0


def ndcg(r: RankedJudgments, k: int | None) -> np.ndarray:
    """nDCG@k: DCG of the top k / DCG@k of the ideal ranking (trec_eval ndcg_cut_k).

    DCG = sum of gain / log2(rank + 1) with gain = grade (unjudged = 0). The ideal ranking orders
    every judged doc with grade > 0 by grade, highest first. As in trec_eval, gains ignore the
    threshold: with threshold 2 a grade-1 doc still adds gain 1, to DCG and to the ideal.
    """
    return r.sum_top(_linear_gain(r.grade) * r.discount, k) / r.ideal_dcg(k, _linear_gain)


def ndcg_exp(r: RankedJudgments, k: int | None) -> np.ndarray:
    """nDCG@k with gain 2^grade - 1 (Burges et al.), otherwise as ndcg; no trec_eval equivalent."""
    return r.sum_top(_exp_gain(r.grade) * r.discount, k) / r.ideal_dcg(k, _exp_gain)


def ap(r: RankedJudgments, k: int | None) -> np.ndarray:
    """Average precision: sum of precision at each relevant rank <= k / all relevant (trec_eval map, map_cut_k)."""
    return r.sum_top(r.precision_at_relevant, k) / r.n_relevant


def judged(r: RankedJudgments, k: int | None) -> np.ndarray:
    """Docs in the top k that carry any label (grade 0 included) / the docs in the top k (k, or fewer
    when fewer were retrieved): the share of the retriever's top k that is judged. Defined without
    relevant docs; NaN for a query with nothing retrieved. (ir_measures' Judged@k divides by k.)"""
    shown = np.minimum(r.n_retrieved, k).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(shown > 0, r.sum_top(r.judged, k) / shown, np.nan)


register_metric("recall", recall, needs_k=True)
register_metric("precision", precision, aliases=("P",), needs_k=True)
register_metric("hit", hit, aliases=("success",), needs_k=True)
register_metric("mrr", mrr, aliases=("recip_rank",))
register_metric("ndcg", ndcg, aliases=("ndcg_cut",), needs_k=True)
register_metric("ndcg_exp", ndcg_exp, needs_k=True)
register_metric("ap", ap, aliases=("map",))
register_metric("judged", judged, needs_k=True, nan_without_relevant=False)
