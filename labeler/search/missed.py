"""Finding the relevant chunks every retriever missed for a query ("possibly missed").

Ranked lists, each over the corpus minus the query's pool (every chunk a retriever logged for the
query and every chunk the viewing annotator graded: labeling is blind, so only their own grades are
feedback; without a viewer, everyone's and the adjudications), are fused by reciprocal rank
(score = sum of weight / (60 + rank)): BM25 on the question; BM25 on the most distinctive words of
the chunks graded relevant, one list per chunk (relevance feedback, "more like this"); when an
embeddings model is configured, cosine similarity between the question (plus the relevant chunks)
and the chunks whose embeddings are cached (``embed_documents``); in corpora of 200 to 20,000
chunks, nearness to the question and the relevant chunks in a latent semantic space fitted on the
corpus (``latent``; it weighs as much as the other lists together); and, once any chunk of the query
is graded (in a corpus of fewer than RERANK_MAX_DOCS chunks), with weight 2, the best RERANK_DEPTH
of those re-ranked by a Rocchio vector of the question and every graded chunk (``rocchio``). On
CISI each part adds: see tests/test_search.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sqlite_utils

from .. import db as store
from ..errors import LabelerError
from . import latent
from .fts import bm25, chunk_texts, corpus_size, distinctive_terms, hits, query_terms
from .hits import SearchHit
from .rocchio import rerank

RRF_K = 60
#: How deep each fused list goes.
DEPTH = 100
#: The most distinctive words (tf-idf) of a chunk graded relevant that make its "more like this" query.
FEEDBACK_TERMS = 20
#: Relevant chunks used for feedback, in key order (each costs one index query).
MAX_FEEDBACK_CHUNKS = 10
#: How many of the fused candidates the Rocchio vector re-ranks, and the weight of its list.
RERANK_DEPTH = 50
RERANK_WEIGHT = 2.0
#: The re-ranking reads and tokenizes the candidates' texts: at a million chunks it tripled a
#: search's median (42 -> 136 ms, bench_search.py). Corpora of this many chunks or more go without.
RERANK_MAX_DOCS = 200_000


def query_pk(db: sqlite_utils.Database, query_id: str) -> int:
    """The key of the query ``query_id``; an unknown id is a LabelerError."""
    row = db.execute("SELECT pk FROM queries WHERE query_id = ?", [query_id]).fetchone()
    if row is None:
        raise LabelerError(f"no query {query_id!r}: see the query ids with labeler export or the Label page")
    return int(row[0])


def labeled_queries(db: sqlite_utils.Database, annotator: str | None = None) -> list[tuple[int, str]]:
    """(pk, query_id) of every visible query with at least one grade (by ``annotator``, when
    given), in key order."""
    mine = "" if annotator is None else " AND l.annotator = ?"
    return [(r[0], r[1]) for r in db.execute(
        f"SELECT q.pk, q.query_id FROM queries q WHERE {store.visible('q')} AND EXISTS "
        f"(SELECT 1 FROM relevance_labels l WHERE l.query_pk = q.pk{mine}) ORDER BY q.pk",
        [] if annotator is None else [annotator])]


# Whose grades a search reads: an annotator's own only, as labeling is blind (what another annotator
# graded, or a lead adjudicated, must not change what the panel offers them); without an annotator,
# everyone's and the adjudications (the lead's view, which ``labeler search missed`` gives by default).
_GRADED = {False: "SELECT doc_pk FROM relevance_labels WHERE query_pk = :q",
           True: "SELECT doc_pk FROM relevance_labels WHERE query_pk = :q AND annotator = :a"}
_LABELS = {False: _GRADED[False] + " UNION SELECT doc_pk FROM adjudications WHERE query_pk = :q",
           True: _GRADED[True]}
_RELEVANT = {False: "SELECT doc_pk FROM relevance_labels WHERE query_pk = :q AND grade >= :t "
                    "UNION SELECT doc_pk FROM adjudications WHERE query_pk = :q AND grade >= :t",
             True: "SELECT doc_pk FROM relevance_labels WHERE query_pk = :q AND grade >= :t AND annotator = :a"}


def _params(db: sqlite_utils.Database, query_pk: int, annotator: str | None) -> dict[str, Any]:
    return {"q": query_pk, "t": int(store.get_setting(db, "threshold")), "a": annotator}


def pool(db: sqlite_utils.Database, query_pk: int, annotator: str | None = None) -> set[int]:
    """Every chunk any retriever logged for the query, or ``annotator`` graded (without one: any
    annotator graded or a lead adjudicated)."""
    return {r[0] for r in db.execute(
        f"SELECT doc_pk FROM retrievals WHERE query_pk = :q UNION {_LABELS[annotator is not None]}",
        _params(db, query_pk, annotator))}


def relevant_pks(db: sqlite_utils.Database, query_pk: int, annotator: str | None = None) -> list[int]:
    """Keys of the chunks ``annotator`` graded relevant (grade >= the project's threshold; without
    an annotator: anyone, or the adjudication)."""
    return [r[0] for r in db.execute(f"SELECT doc_pk FROM ({_RELEVANT[annotator is not None]}) ORDER BY 1",
                                     _params(db, query_pk, annotator))]


def relevant_texts(db: sqlite_utils.Database, query_pk: int, annotator: str | None = None) -> list[str]:
    """Title and text of the chunks ``relevant_pks`` names."""
    return [f"{r[0] or ''} {r[1] or ''}" for r in db.execute(
        f"SELECT d.title, d.text FROM documents d WHERE d.pk IN ({_RELEVANT[annotator is not None]}) "
        "ORDER BY d.pk", _params(db, query_pk, annotator))]


def not_relevant_texts(db: sqlite_utils.Database, query_pk: int, annotator: str | None = None) -> list[str]:
    """Title and text of the chunks ``annotator`` graded (without one: anyone), but not relevant."""
    mine = annotator is not None
    return [f"{r[0] or ''} {r[1] or ''}" for r in db.execute(
        f"SELECT d.title, d.text FROM documents d WHERE d.pk IN ({_GRADED[mine]} EXCEPT {_RELEVANT[mine]}) "
        "AND d.text IS NOT NULL ORDER BY d.pk", _params(db, query_pk, annotator))]


def missed_key(db: sqlite_utils.Database, query_pk: int, annotator: str | None = None) -> tuple:
    """What ``search_missed`` depends on for the query and viewer, cheap to read: the viewer, their
    grades (without a viewer: everyone's and the adjudications), how many chunks its retrievers
    logged, the relevance threshold and the search index's structure record (FTS5 rewrites it at
    every change of the index). Equal keys, equal results: the Label page keeps the panel's chunks
    while the key stays the same; another annotator's grades never change the key of a viewer."""
    if annotator is None:
        grades = db.execute("SELECT doc_pk, grade FROM relevance_labels WHERE query_pk = ?1 UNION ALL "
                            "SELECT doc_pk, grade FROM adjudications WHERE query_pk = ?1 ORDER BY 1, 2",
                            [query_pk]).fetchall()
    else:
        grades = db.execute("SELECT doc_pk, grade FROM relevance_labels WHERE query_pk = ? AND annotator = ? "
                            "ORDER BY 1, 2", [query_pk, annotator]).fetchall()
    logged = db.execute("SELECT count(*) FROM retrievals WHERE query_pk = ?", [query_pk]).fetchone()[0]
    row = db.execute("SELECT block FROM documents_fts_data WHERE id = 10").fetchone()
    return (query_pk, annotator, tuple(grades), logged, store.get_setting(db, "threshold"),
            bytes(row[0]) if row else b"")


def fuse(rankings: list[list[int]], k: int, weights: list[float] | None = None) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of ranked key lists (each weighted, default 1): the ``k`` best
    (key, score), ties by key."""
    scores: dict[int, float] = {}
    for i, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[i]
        for rank, pk in enumerate(ranking, start=1):
            scores[pk] = scores.get(pk, 0.0) + weight / (RRF_K + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


def search_missed(db: sqlite_utils.Database, query_pk: int, k: int = 10, *,
                  config: Any = None, annotator: str | None = None) -> list[SearchHit]:
    """The ``k`` chunks outside the query's pool most likely to be relevant, best first.

    ``annotator``: the viewer, whose own grades are the feedback and, with the retrievers' chunks,
    the pool left out; no other annotator's grade or adjudication changes the result (blind
    labeling: the Label page always passes the signed-in annotator). Without one, everyone's grades
    and the adjudications count (the lead's view). ``config`` (a ``labeler.llm.LLMConfig``) with
    an ``embedding_model`` adds the embedding list to the fusion; without one the search is
    lexical. Scores are the fused RRF scores.
    """
    row = db.execute("SELECT question FROM queries WHERE pk = ?", [query_pk]).fetchone()
    if row is None:
        raise LabelerError(f"no query with key {query_pk}")
    question = row[0]
    exclude = pool(db, query_pk, annotator)
    feedback = relevant_texts(db, query_pk, annotator)
    rankings = [[pk for pk, _ in bm25(db, query_terms(db, question, informative=True), DEPTH, exclude=exclude)]]
    for text in feedback[:MAX_FEEDBACK_CHUNKS]:
        # one "more like this" list per relevant chunk: on CISI, fusing them finds more than one
        # query of the words of all relevant chunks together (33% vs 28.5% of what a top 10 can hold)
        terms = distinctive_terms(db, [text], FEEDBACK_TERMS)
        rankings.append([pk for pk, _ in bm25(db, terms, DEPTH, exclude=exclude)])
    if config is not None and getattr(config, "embedding_model", None):
        rankings.append(_by_embedding(db, config, question, feedback, exclude))
    rankings = [r for r in rankings if r]
    weights = [1.0] * len(rankings)
    lsa = latent.similar(db, question, relevant_pks(db, query_pk, annotator), exclude, DEPTH)
    if lsa:  # one list of everything at once, against one per chunk: it weighs as much as they do together
        rankings.append(lsa)
        weights.append(float(max(1, len(weights))))
    negative = not_relevant_texts(db, query_pk, annotator)
    if not feedback and not negative or corpus_size(db) >= RERANK_MAX_DOCS:
        return hits(db, fuse(rankings, k, weights))  # nothing graded yet (nothing for the vector to add), or too big
    candidates = [pk for pk, _ in fuse(rankings, RERANK_DEPTH, weights)]
    reranked = rerank(db, question, feedback, negative, chunk_texts(db, candidates))
    return hits(db, fuse([*rankings, reranked], k, [*weights, RERANK_WEIGHT]))


def _chunk_vectors(db: sqlite_utils.Database, model: str) -> tuple[np.ndarray, np.ndarray]:
    rows = db.execute(
        f"SELECT e.doc_pk, e.vector FROM embeddings e JOIN documents d ON d.pk = e.doc_pk "
        f"WHERE e.model = ? AND e.doc_pk IS NOT NULL AND {store.visible('d')} ORDER BY e.doc_pk", [model]).fetchall()
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
    pks = np.array([r[0] for r in rows], dtype=np.int64)
    matrix = np.vstack([np.frombuffer(r[1], dtype=np.float32) for r in rows])
    return pks, matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


def _by_embedding(db: sqlite_utils.Database, config: Any, question: str, feedback: list[str],
                  exclude: set[int]) -> list[int]:
    from ..llm.embeddings import embed

    pks, matrix = _chunk_vectors(db, config.embedding_model)
    if not pks.size:
        return []
    vectors = np.asarray(embed(db, config, [question, *feedback]), dtype=np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    probe = vectors.mean(axis=0)  # the question and the relevant chunks, equally weighted (Rocchio)
    scores = matrix @ probe
    order = np.lexsort((pks, -scores))
    return [int(pks[i]) for i in order if int(pks[i]) not in exclude][:DEPTH]


def embed_documents(db: sqlite_utils.Database, config: Any, *, batch: int = 1000) -> int:
    """Embed every visible chunk with text that has no cached vector for the model; returns how many
    were embedded (cached ones cost nothing)."""
    from ..llm.embeddings import embed

    if not getattr(config, "embedding_model", None):
        raise LabelerError("no embeddings model: set embedding_model in the [llm] section of secrets.toml "
                           "or LABELER_EMBEDDING_MODEL")
    rows = db.execute(
        f"SELECT d.pk, coalesce(d.title || ' ', '') || d.text FROM documents d WHERE d.text IS NOT NULL "
        f"AND {store.visible('d')} AND NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.model = ? "
        "AND e.doc_pk = d.pk) ORDER BY d.pk", [config.embedding_model]).fetchall()
    for i in range(0, len(rows), batch):
        part = rows[i:i + batch]
        embed(db, config, [r[1] for r in part], doc_pks=[r[0] for r in part])
    return len(rows)
