"""Corpus search, so annotators can find the relevant chunks the retrievers missed.

``search_text`` ranks documents by BM25 over the FTS5 index the database keeps (``fts``);
``search_missed`` fuses question, relevance feedback and optional embeddings (``missed``). The
former in-memory TF-IDF index (``tfidf``: ``CorpusIndex``, ``search``) stays for synthetic questions.
"""

from .fts import match_expression, search_text, tokens
from .hits import SearchHit
from .missed import embed_documents, labeled_queries, missed_key, pool, query_pk, search_missed


def __getattr__(name: str):  # the TF-IDF index imports scikit-learn: only when asked for
    if name in ("CorpusIndex", "corpus_version", "search"):
        from . import tfidf

        return getattr(tfidf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CorpusIndex", "SearchHit", "corpus_version", "embed_documents", "labeled_queries", "match_expression",
           "missed_key", "pool", "query_pk", "search", "search_missed", "search_text", "tokens"]
