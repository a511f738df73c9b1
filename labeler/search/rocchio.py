"""Re-ranking candidates by a Rocchio vector: the question, plus the chunks graded relevant, minus a
little of the chunks graded not relevant, as one tf-idf vector over the index's terms (stems).

BM25 lists score a chunk by the words it shares with one query at a time; this scores every
candidate against everything the annotators said about the query at once, which is what relevance
feedback in the vector-space model does (Rocchio 1971). Only the few candidates the BM25 lists
found are scored, so the cost does not grow with the corpus.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import sqlite_utils

from .fts import corpus_size, document_frequencies, stems, tokens

#: Weights of the question, the mean relevant chunk and the mean non-relevant chunk in the vector.
ALPHA, BETA, GAMMA = 1.0, 1.0, 0.25

Vector = dict[str, float]


def _vector(words: list[str], stem: dict[str, str], df: dict[str, int], n: int) -> Vector:
    tf = Counter(stem[w] for w in words if len(w) > 1)
    weights = {t: (1 + math.log(c)) * math.log(n / df[t]) for t, c in tf.items() if 0 < df.get(t, 0) < n}
    norm = math.sqrt(sum(x * x for x in weights.values())) or 1.0
    return {t: x / norm for t, x in weights.items()}


def rerank(db: sqlite_utils.Database, question: str, relevant: Sequence[str], not_relevant: Sequence[str],
           candidates: dict[int, str]) -> list[int]:
    """``candidates`` (doc_pk -> title and text) best first by cosine with the Rocchio vector of
    the question and the graded chunks' texts; ties by key."""
    if not candidates:
        return []
    words = {pk: tokens(text) for pk, text in candidates.items()}
    q_words, rel_words, non_words = tokens(question), [tokens(t) for t in relevant], [tokens(t) for t in not_relevant]
    vocabulary = set(q_words).union(*words.values(), *rel_words, *non_words)
    stem = stems(db, vocabulary)
    df = document_frequencies(db, set(stem.values()), estimate_rare=True)
    n = max(corpus_size(db), 2)
    probe: Counter = Counter()
    for t, x in _vector(q_words, stem, df, n).items():
        probe[t] += ALPHA * x
    for group, weight in ((rel_words, BETA), (non_words, -GAMMA)):
        for ws in group:
            for t, x in _vector(ws, stem, df, n).items():
                probe[t] += weight * x / len(group)
    score = {pk: sum(probe.get(t, 0.0) * x for t, x in _vector(ws, stem, df, n).items()) for pk, ws in words.items()}
    return sorted(score, key=lambda pk: (-score[pk], pk))
