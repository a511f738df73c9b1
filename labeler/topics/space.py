"""The vector spaces questions are clustered in: TF-IDF (scikit-learn, the default) or the configured
embeddings model (through ``labeler.llm``, cached). A space turns questions into L2-normalised rows
so that a dot product with the L2-normalised centroids is the cosine similarity; it is stored with
the topic model so that new traffic (drift) lands in the same space."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import sparse
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.preprocessing import normalize
from threadpoolctl import threadpool_limits

from ..errors import LabelerError

MAX_TERMS = 20000  # vocabulary size cap
# dimensions TF-IDF rows are projected to before clustering: with 100, 20 planted topics under 6
# shared question templates and rare noise words (tests/bench/bench_topics.py) came out as
# template clusters (purity 0.45 at k=20); with 200 they came out whole (purity 1.0)
LSA_DIMS = 200
TOKENS = {"lowercase": True, "strip_accents": "unicode", "stop_words": "english",
          "token_pattern": r"(?u)\b[^\W\d_][^\W_]+\b"}  # words of 2+ characters that start with a letter


class TopicsError(LabelerError):
    """Topics cannot be built, read or used as asked."""


def fit_tfidf(texts: Sequence[str]) -> tuple[list[str], np.ndarray, sparse.csr_matrix]:
    """Vocabulary, idf weights and TF-IDF rows (as :meth:`TfidfSpace.tfidf` gives them) of ``texts``: English stop words out, terms in at least 2
    questions (1 below 50 questions) and at most half of them, the ``MAX_TERMS`` most frequent."""
    n = len(texts)
    vectorizer = TfidfVectorizer(min_df=2 if n >= 50 else 1, max_df=0.5 if n >= 50 else 1.0,
                                 max_features=MAX_TERMS, sublinear_tf=True, dtype=np.float32, **TOKENS)
    try:
        rows = vectorizer.fit_transform(texts)
    except ValueError:
        raise TopicsError("the questions have no words to cluster on (after English stop words); "
                          "ingest logs with real questions first") from None
    vocabulary = [""] * len(vectorizer.vocabulary_)
    for term, index in vectorizer.vocabulary_.items():
        vocabulary[index] = term
    return vocabulary, vectorizer.idf_.astype(np.float32), rows.astype(np.float32).tocsr()


class TfidfSpace:
    """Sublinear TF-IDF with a fixed vocabulary and idf, rows L2-normalised (a question with no
    known term is a zero row). With ``components`` (an LSA projection, see :func:`fit_lsa`) rows
    are projected to its dimensions and normalised again (dense); without, they stay sparse."""

    method = "tfidf"

    def __init__(self, vocabulary: list[str], idf: np.ndarray, components: np.ndarray | None = None):
        self.vocabulary = vocabulary
        self.idf = np.asarray(idf, dtype=np.float32)
        self.components = components
        self._counts = CountVectorizer(vocabulary={t: i for i, t in enumerate(vocabulary)}, dtype=np.float32,
                                       **TOKENS)

    @property
    def dims(self) -> int:
        return len(self.vocabulary) if self.components is None else self.components.shape[0]

    def counts(self, texts: Sequence[str]) -> sparse.csr_matrix:
        """How often each vocabulary term occurs in each text (the rows c-TF-IDF adds up)."""
        return self._counts.transform(texts).tocsr()

    def tfidf(self, texts: Sequence[str]) -> sparse.csr_matrix:
        counts = self.counts(texts)
        counts.data = 1.0 + np.log(counts.data)
        return normalize(counts @ sparse.diags(self.idf), copy=False).astype(np.float32).tocsr()

    def project(self, rows: sparse.csr_matrix) -> Any:
        if self.components is None:
            return rows
        out = np.asarray(rows @ self.components.T, dtype=np.float32)
        out[np.linalg.norm(out, axis=1) < 1e-6] = 0.0  # no known word (or none the projection keeps)
        return normalize(out, copy=False)

    def transform(self, texts: Sequence[str]) -> Any:
        return self.project(self.tfidf(texts))

    def stored(self) -> dict[str, Any]:
        return {"vocabulary": self.vocabulary, "idf": self.idf.tobytes(),
                "components": None if self.components is None else self.components.astype(np.float32).tobytes()}


def fit_lsa(rows: sparse.csr_matrix, *, seed: int) -> np.ndarray | None:
    """An LSA projection (TruncatedSVD, ``LSA_DIMS`` components, seeded) of TF-IDF rows, or None when
    the vocabulary is that small already. k-means on a few hundred dense dimensions is much faster than on
    sparse TF-IDF here (k-means++ on sparse rows dominated the build) and groups synonyms better."""
    if rows.shape[1] <= LSA_DIMS:
        return None
    # one BLAS thread: with several, on this shared 2-core machine, the SVD took 8x as long
    with threadpool_limits(1):
        svd = TruncatedSVD(LSA_DIMS, random_state=seed).fit(rows)
    return svd.components_.astype(np.float32)


class EmbeddingSpace:
    """The configured embeddings model's vectors (``labeler.llm.embed``: cached in the
    ``embeddings`` table, so a question is paid for once), L2-normalised."""

    method = "embeddings"

    def __init__(self, db: Any, config: Any, dims: int | None = None):
        if config is None or not getattr(config, "embedding_model", None):
            raise TopicsError("these topics were built with an embeddings model: pass the LLM config with "
                              "embedding_model set (the [llm] section of secrets.toml)")
        self.db, self.config, self.model = db, config, config.embedding_model
        self._dims = dims

    @property
    def dims(self) -> int:
        return int(self._dims or 0)

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        from ..llm.embeddings import embed

        vectors = np.asarray(embed(self.db, self.config, list(texts)), dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise TopicsError(f"the embeddings model {self.model} returned no vectors for the questions")
        self._dims = vectors.shape[1]
        return normalize(vectors, copy=False)

    def stored(self) -> dict[str, Any]:
        return {"vocabulary": None, "idf": None, "components": None}


def similarities(rows: Any, centroids: np.ndarray) -> np.ndarray:
    """Cosine similarity of each (normalised) row to each (normalised) centroid: (n, k)."""
    out = rows @ centroids.T
    return np.asarray(out, dtype=np.float32)
