"""Topic names by class-based TF-IDF (c-TF-IDF, as BERTopic defines it): all the questions of a
topic are one document; a term's weight in topic c is ``tf(t, c) * log(1 + A / f(t))`` with
``tf(t, c)`` the term's count in the topic's questions (each question counted as often as it was
logged), ``A`` the average number of words per topic and ``f(t)`` the term's count across all
topics. A word every topic uses ("help", "account") has a large f(t) and sinks; a word only one
topic uses keeps its whole count there. Mean TF-IDF (the old labels) ranked such generic words
high in every topic whose questions used them."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import sparse

TOP_TERMS = 6


def ctfidf(counts: Any, labels: np.ndarray, k: int, weights: np.ndarray | None = None) -> np.ndarray:
    """(k, terms) c-TF-IDF weights of the topics ``0..k-1`` given the term ``counts`` of each
    question (rows), its topic in ``labels`` (negative: no topic, left out) and its ``weights``
    (occurrences; 1 each when None)."""
    counts = sparse.csr_matrix(counts, dtype=np.float64)
    labels = np.asarray(labels)
    w = np.ones(counts.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    keep = labels >= 0
    # topics x questions indicator scaled by occurrences: one product concatenates each topic
    member = sparse.csr_matrix((w[keep], (labels[keep], np.flatnonzero(keep))), shape=(k, counts.shape[0]))
    tf = np.asarray((member @ counts).todense())
    f = tf.sum(axis=0)
    words = tf.sum(axis=1)
    average = float(words[words > 0].mean()) if (words > 0).any() else 0.0
    # a term no topic uses has tf 0 everywhere: its (huge) idf multiplies zeros
    idf = np.log1p(average / np.maximum(f, 1e-12))
    return tf * idf


def ctfidf_terms(counts: Any, labels: np.ndarray, k: int, vocabulary: list[str],
                 weights: np.ndarray | None = None, top: int = TOP_TERMS) -> list[list[str]]:
    """The ``top`` terms of each topic by c-TF-IDF weight (only terms the topic uses; ties: the
    vocabulary's order)."""
    scores = ctfidf(counts, labels, k, weights)
    out = []
    for row in scores:
        order = np.argsort(-row, kind="stable")[:top]
        out.append([vocabulary[i] for i in order if row[i] > 0])
    return out
