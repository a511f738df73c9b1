"""Corpus search by TF-IDF in memory (scikit-learn): the former Label-page search, kept for synth.

A TF-IDF index (scikit-learn, word unigrams and bigrams, sublinear tf) over every document's title
and text. Building it is the expensive part, so callers keep the index and rebuild it when
``corpus_version(db)`` changes (the app caches it with ``st.cache_resource`` keyed by that version).
"""

from __future__ import annotations

import numpy as np
import sqlite_utils
from sklearn.feature_extraction.text import TfidfVectorizer

from .. import db as store
from ..errors import LabelerError
from .hits import SearchHit


def corpus_version(db: sqlite_utils.Database) -> tuple[int, int, int]:
    """Changes whenever a document is added or its text or title changes (count, max pk, total length)."""
    row = db.execute(
        "SELECT count(*), coalesce(max(pk), 0), coalesce(sum(length(text) + length(coalesce(title, ''))), 0) "
        f"FROM documents d WHERE {store.visible('d')}").fetchone()
    return int(row[0]), int(row[1]), int(row[2])


class CorpusIndex:
    """A TF-IDF index over the documents table as it was when built."""

    def __init__(self, db: sqlite_utils.Database):
        rows = db.execute(f"SELECT pk, doc_id, title, text FROM documents d WHERE text IS NOT NULL AND {store.visible('d')} "
                          "ORDER BY pk").fetchall()
        self.version = corpus_version(db)
        self.pks = np.array([r[0] for r in rows], dtype=np.int64)
        self.doc_ids = [r[1] for r in rows]
        self.titles = [r[2] for r in rows]
        self.texts = [r[3] for r in rows]
        self.vectorizer = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), min_df=1, strip_accents="unicode")
        if rows:
            self.matrix = self.vectorizer.fit_transform(
                [f"{t or ''} {x}" for t, x in zip(self.titles, self.texts, strict=True)])
        else:
            self.matrix = None

    def __len__(self) -> int:
        return len(self.doc_ids)

    def search(self, query: str, k: int = 10, *, exclude: set[int] | None = None) -> list[SearchHit]:
        """The top ``k`` documents by cosine similarity to ``query`` (ties by doc id); zero scores dropped."""
        if not query or not query.strip():
            return []
        if self.matrix is None:
            raise LabelerError("the corpus is empty: ingest a corpus file or logs with chunk text first")
        scores = (self.vectorizer.transform([query]) @ self.matrix.T).toarray().ravel()
        if exclude:
            scores[np.isin(self.pks, list(exclude))] = 0.0
        candidates = np.flatnonzero(scores > 0)
        if candidates.size == 0:
            return []
        order = candidates[np.lexsort((np.array([self.doc_ids[i] for i in candidates]), -scores[candidates]))][:k]
        return [SearchHit(int(self.pks[i]), self.doc_ids[i], self.titles[i], self.texts[i], round(float(scores[i]), 4))
                for i in order]


def search(db: sqlite_utils.Database, query: str, k: int = 10, *, index: CorpusIndex | None = None,
           exclude: set[int] | None = None) -> list[SearchHit]:
    """Search the corpus; pass a kept ``index`` to avoid rebuilding it."""
    if index is None or index.version != corpus_version(db):
        index = CorpusIndex(db)
    return index.search(query, k, exclude=exclude)
