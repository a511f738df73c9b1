"""Distribution shift: do synthetic questions read like the logged ones?

``shift_report`` compares the two sets four ways: length and wording statistics; a classifier
two-sample test (a TF-IDF + logistic regression classifier tries to tell them apart; its
cross-validated ROC AUC is 0.5 when they are indistinguishable and 1.0 when every question gives
itself away); the terms that give them away most; and the retrieval metrics of each origin side by
side over their human golden labels.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from typing import Any

import numpy as np
import sqlite_utils

from .. import db as store
from ..errors import SynthError

DEFAULT_METRICS = ("recall@10", "mrr", "ndcg@10")
# words kept as tokens, plus "?" and "!": punctuation habits are part of a style
_TOKEN_PATTERN = r"(?u)\b\w+\b|[?!]"
_WORD = re.compile(r"\w+", re.UNICODE)
_QUESTION_WORDS = {"what", "how", "why", "when", "where", "which", "who", "whom", "whose", "can", "could",
                   "is", "are", "does", "do", "did", "should", "will", "would", "was", "were", "has", "have"}


def _pipeline(seed: int) -> Any:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    return make_pipeline(
        TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), token_pattern=_TOKEN_PATTERN, min_df=1),
        LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced", random_state=seed))


def _auc(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """ROC AUC of each row of ``scores`` (Mann-Whitney U over ranks, ties averaged)."""
    from scipy.stats import rankdata

    ranks = rankdata(scores, axis=-1)
    positive = labels.astype(bool)
    n1 = positive.sum(axis=-1)
    n0 = labels.shape[-1] - n1
    return ((ranks * positive).sum(axis=-1) - n1 * (n1 + 1) / 2) / (n1 * n0)


def two_sample_auc(real: list[str], synthetic: list[str], *, seed: int = 0, n_splits: int = 5,
                   n_resamples: int = 1000, confidence: float = 0.95) -> dict[str, Any]:
    """Classifier two-sample test: cross-validated ROC AUC of telling ``synthetic`` from ``real``.

    Out-of-fold probabilities from a stratified ``n_splits``-fold split (shuffled with ``seed``;
    fewer folds when a class is smaller) of TF-IDF (word 1-2 grams, "?" and "!" kept) + logistic
    regression (balanced class weights). The interval is a percentile bootstrap over the
    questions, resampled within each class (so every resample has both), with the fitted models
    fixed: it covers the sampling of questions, not refitting. Returns ``auc``, ``ci_low``,
    ``ci_high``, ``n_real``, ``n_synthetic``, ``n_splits``; ``auc`` None (with ``note``) when a
    class has fewer than 2 questions.
    """
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    out: dict[str, Any] = {"auc": None, "ci_low": None, "ci_high": None, "n_real": len(real),
                           "n_synthetic": len(synthetic), "n_splits": None, "n_resamples": n_resamples,
                           "confidence": confidence, "seed": seed}
    smallest = min(len(real), len(synthetic))
    if smallest < 2:
        out["note"] = (f"needs at least 2 questions of each kind (have {len(real)} logged, "
                       f"{len(synthetic)} synthetic)")
        return out
    texts = list(real) + list(synthetic)
    labels = np.array([0] * len(real) + [1] * len(synthetic))
    folds = min(n_splits, smallest)
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    proba = cross_val_predict(_pipeline(seed), texts, labels, cv=splitter, method="predict_proba")[:, 1]
    auc = float(_auc(proba, labels))
    rng = np.random.default_rng(seed)
    idx0, idx1 = np.flatnonzero(labels == 0), np.flatnonzero(labels == 1)
    draws = np.concatenate([rng.choice(idx0, size=(n_resamples, idx0.size)),
                            rng.choice(idx1, size=(n_resamples, idx1.size))], axis=1)
    resampled = _auc(proba[draws], labels[draws])
    low, high = np.quantile(resampled, [(1 - confidence) / 2, (1 + confidence) / 2])
    out.update(auc=round(auc, 4), ci_low=round(float(low), 4), ci_high=round(float(high), 4), n_splits=folds)
    if smallest < 20:
        out["note"] = f"only {smallest} questions in the smaller set: the interval is wide"
    return out


def distinguishing_terms(real: list[str], synthetic: list[str], *, seed: int = 0, top: int = 15) -> dict[str, list]:
    """The terms with the largest logistic regression weights towards each side (fit on all
    questions), with the share of questions of each kind that contain them."""
    if not real or not synthetic:
        return {"synthetic": [], "log": []}
    model = _pipeline(seed)
    model.fit(list(real) + list(synthetic), [0] * len(real) + [1] * len(synthetic))
    vectorizer, classifier = model.steps[0][1], model.steps[1][1]
    terms = vectorizer.get_feature_names_out()
    weights = classifier.coef_[0]
    present_real = (vectorizer.transform(real) > 0).mean(axis=0).A1
    present_synth = (vectorizer.transform(synthetic) > 0).mean(axis=0).A1

    def rows(order: np.ndarray) -> list[dict[str, Any]]:
        return [{"term": str(terms[i]), "weight": round(float(weights[i]), 4),
                 "share_synthetic": round(float(present_synth[i]), 4), "share_log": round(float(present_real[i]), 4)}
                for i in order[:top]]

    return {"synthetic": rows(np.argsort(-weights, kind="stable")), "log": rows(np.argsort(weights, kind="stable"))}


def wording_stats(questions: list[str]) -> dict[str, Any]:
    """Length (characters, words) and wording habits of a set of questions."""
    if not questions:
        return {"n": 0}
    chars = [len(q) for q in questions]
    words = [_WORD.findall(q.lower()) for q in questions]
    lengths = [len(w) for w in words]
    tokens = [t for w in words for t in w]
    first = Counter(w[0] for w in words if w)

    def pct(values: list[int], q: float) -> float:
        return float(np.percentile(values, q))

    return {
        "n": len(questions),
        "chars_mean": round(statistics.fmean(chars), 2), "chars_median": statistics.median(chars),
        "chars_p10": pct(chars, 10), "chars_p90": pct(chars, 90),
        "words_mean": round(statistics.fmean(lengths), 2), "words_median": statistics.median(lengths),
        "words_p10": pct(lengths, 10), "words_p90": pct(lengths, 90),
        "ends_with_question_mark": round(sum(q.rstrip().endswith("?") for q in questions) / len(questions), 4),
        "starts_lowercase": round(sum(q.strip()[:1].islower() for q in questions) / len(questions), 4),
        "starts_with_question_word": round(sum(bool(w) and w[0] in _QUESTION_WORDS for w in words) / len(questions), 4),
        "mean_word_length": round(statistics.fmean(len(t) for t in tokens), 2) if tokens else 0.0,
        "distinct_words": len(set(tokens)),
        "top_first_words": [{"word": w, "share": round(n / len(questions), 4)} for w, n in first.most_common(8)],
    }


def _questions(db: sqlite_utils.Database, origin: str, states: tuple[str, ...] | None) -> list[str]:
    if origin != "synthetic" or states is None:
        return [r[0] for r in db.execute(f"SELECT question FROM queries q WHERE origin = ? AND {store.visible('q')} "
                                         "ORDER BY pk", [origin])]
    return [r[0] for r in db.execute(
        "SELECT question FROM queries WHERE origin = 'synthetic' AND coalesce(review_state, 'pending') IN "
        "(SELECT value FROM json_each(?)) ORDER BY pk", [store.dumps(list(states))])]


def retrieval_by_origin(db: sqlite_utils.Database, metrics: tuple[str, ...] = DEFAULT_METRICS, *,
                        retriever: str = "production", seed: int = 0) -> dict[str, Any]:
    """Per origin (log, synthetic): ``report.retrieval_report`` of ``retriever`` over the human golden
    labels (synthetic questions only once accepted): labeled queries, queries without a relevant
    chunk, and each metric's mean, 95% bootstrap CI and n."""
    from ..report.core import retrieval_report

    out: dict[str, Any] = {"retriever": retriever, "metrics": list(metrics)}
    for origin in ("log", "synthetic"):
        r = retrieval_report(db, list(metrics), retriever=retriever, origin=origin, seed=seed)
        out["threshold"] = r.threshold
        out[origin] = {"queries": r.n_queries, "without_relevant": r.n_without_relevant,
                       "metrics": {spec: dict(r.metrics[spec]) for spec in r.specs}}
    return out


def shift_report(db: sqlite_utils.Database, *, seed: int = 0, review_states: tuple[str, ...] | None = ("pending", "accepted"),
                 n_splits: int = 5, n_resamples: int = 1000, top_terms: int = 15,
                 metrics: tuple[str, ...] = DEFAULT_METRICS, retriever: str = "production") -> dict[str, Any]:
    """Synthetic vs logged questions; see the module docstring. ``review_states`` picks the
    synthetic questions compared (default: all but rejected; None: all). Everything is seeded
    with ``seed``. Raises SynthError when there is nothing to compare."""
    real = _questions(db, "log", None)
    synthetic = _questions(db, "synthetic", review_states)
    if not real or not synthetic:
        raise SynthError(f"nothing to compare: {len(real)} logged and {len(synthetic)} synthetic questions "
                         "(ingest logs, then generate with `labeler synth generate`)")
    real_vocab = {t for q in real for t in _WORD.findall(q.lower())}
    synth_tokens = [t for q in synthetic for t in _WORD.findall(q.lower())]
    return {
        "seed": seed,
        "review_states": list(review_states) if review_states is not None else None,
        "n": {"log": len(real), "synthetic": len(synthetic)},
        "wording": {"log": wording_stats(real), "synthetic": wording_stats(synthetic),
                    "synthetic_words_seen_in_logs": round(sum(t in real_vocab for t in synth_tokens) / len(synth_tokens), 4)
                    if synth_tokens else None},
        "classifier": two_sample_auc(real, synthetic, seed=seed, n_splits=n_splits, n_resamples=n_resamples),
        "terms": distinguishing_terms(real, synthetic, seed=seed, top=top_terms),
        "retrieval": retrieval_by_origin(db, metrics, retriever=retriever, seed=seed),
        "notes": ["AUC 0.5 = the classifier cannot tell synthetic from logged questions; near 1.0 = they read "
                  "differently (see the distinguishing terms)",
                  "for synthetic questions the 'production' list is the corpus-search candidate pool they were "
                  "judged over, not the production system's answer"],
    }
