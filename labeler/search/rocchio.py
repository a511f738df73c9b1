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


def _vector(words: list[str], stem: dict[str, str], idf: dict[str, float]) -> Vector:
    tf = Counter(map(stem.__getitem__, words))
    weights = {t: (1.0 + math.log(c)) * idf[t] for t, c in tf.items() if t in idf}
    norm = math.sqrt(sum(x * x for x in weights.values())) or 1.0
    return {t: x / norm for t, x in weights.items()}


def rerank(db: sqlite_utils.Database, question: str, relevant: Sequence[str], not_relevant: Sequence[str],
           candidates: dict[int, str]) -> list[int]:
    """``candidates`` (doc_pk -> title and text) best first by cosine with the Rocchio vector of
    the question and the graded chunks' texts; ties by key."""
    if not candidates:
        return []
    words = {pk: [w for w in tokens(text) if len(w) > 1] for pk, text in candidates.items()}
    q_words = [w for w in tokens(question) if len(w) > 1]
    rel_words = [[w for w in tokens(t) if len(w) > 1] for t in relevant]
    non_words = [[w for w in tokens(t) if len(w) > 1] for t in not_relevant]
    vocabulary = set(q_words).union(*words.values(), *rel_words, *non_words)
    stem = stems(db, vocabulary)
    df = document_frequencies(db, set(stem.values()), estimate_rare=True)
    n = max(corpus_size(db), 2)
    idf = {t: math.log(n / d) for t, d in df.items() if 0 < d < n}
    probe: Counter = Counter()
    for t, x in _vector(q_words, stem, idf).items():
        probe[t] += ALPHA * x
    for group, weight in ((rel_words, BETA), (non_words, -GAMMA)):
        for ws in group:
            for t, x in _vector(ws, stem, idf).items():
                probe[t] += weight * x / len(group)
    score = {}
    for pk, ws in words.items():
        vector = _vector(ws, stem, idf)
        score[pk] = sum(x * vector[t] for t, x in probe.items() if t in vector)
    return sorted(score, key=lambda pk: (-score[pk], pk))
