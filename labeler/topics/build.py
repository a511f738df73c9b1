"""``build_topics``: cluster the logged questions into topics and store them; ``assign``: give
questions (stored or new) their topic under the current model.

How (see README "Topics, coverage and drift"): the logged questions (deduplicated queries, each
weighted by its occurrences) are vectorised with sublinear TF-IDF projected to 200 LSA dimensions
(TruncatedSVD; or the configured embeddings model) and L2-normalised, so nearest centroid =
highest cosine similarity. ``k``: given, or where Ward's agglomeration of a sample jumps most
(``choose.choose_k``, where the evidence for the rule is). scikit-learn's KMeans (one
thread) then refines the Ward clustering of a seeded sample cut at k (k-means++ starts found
generic-word clusters on short questions). The model is fitted on a seeded sample of at most
``FIT_SAMPLE`` questions and every query is then assigned in batches of ``BATCH``: time grows
linearly and memory stays flat with the number of questions. Questions with no known term
(TF-IDF) are topic -1. A topic's label is its most distinctive terms by c-TF-IDF
(``ctfidf``); its medoid is the question closest to its centroid.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlite_utils
from sklearn.cluster import KMeans
from sklearn.preprocessing import normalize
from threadpoolctl import threadpool_limits

from .. import db as store
from ..accounts.manage import audit, require
from .choose import CRITERION, choose_k, ward_centroids
from .ctfidf import ctfidf_terms
from .space import EmbeddingSpace, TfidfSpace, TopicsError, fit_lsa, fit_tfidf, similarities

FIT_SAMPLE = 50_000  # questions the vectoriser and the clustering are fitted on
BATCH = 10_000  # questions vectorised and assigned at once
FAR_QUANTILE = 0.01  # a new question is far from every topic below this quantile of the built ones' similarity
NO_TOPIC = -1


@dataclass
class TopicModel:
    """The current topic model: its id, method, k, seed, the far threshold, the centroids and the
    space questions are vectorised in."""

    id: int
    method: str
    k: int
    seed: int
    n_questions: int
    far_threshold: float
    created_at: str
    params: dict[str, Any]
    centroids: np.ndarray
    space: Any

    def assign(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(topic, similarity) of each text: the nearest centroid by cosine similarity; a text
        with no known term gets topic -1 and similarity 0."""
        topic = np.full(len(texts), NO_TOPIC, dtype=np.int64)
        sim = np.zeros(len(texts), dtype=np.float32)
        for start in range(0, len(texts), BATCH):
            rows = self.space.transform(texts[start:start + BATCH])
            s = similarities(rows, self.centroids)
            best = s.argmax(axis=1)
            value = s[np.arange(len(best)), best]
            known = _row_norms(rows) > 0
            topic[start:start + len(best)] = np.where(known, best, NO_TOPIC)
            sim[start:start + len(best)] = np.where(known, value, 0.0)
        return topic, sim


def _row_norms(rows: Any) -> np.ndarray:
    if hasattr(rows, "getnnz"):
        return rows.getnnz(axis=1)
    return np.linalg.norm(rows, axis=1)


def _logged(db: sqlite_utils.Database) -> tuple[np.ndarray, list[str], np.ndarray]:
    rows = db.execute(f"SELECT q.pk, q.question, q.occurrences FROM queries q WHERE q.origin = 'log' "
                      f"AND {store.visible('q')} ORDER BY q.pk").fetchall()
    return (np.array([r[0] for r in rows], dtype=np.int64), [r[1] for r in rows],
            np.array([r[2] for r in rows], dtype=np.float64))


def build_topics(db: sqlite_utils.Database, *, k: int | None = None, seed: int = 0, config: Any = None,
                 by: str | None = None, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Cluster the logged questions into topics and store them as the current topic model (see
    the module doc); every query (logged, synthetic, imported) gets its topic. ``k``: the number
    of topics (None: chosen from the data, see ``choose``). ``config``: a ``labeler.llm.LLMConfig`` whose
    ``embedding_model`` is used instead of TF-IDF when set. Leads only (``by``). Returns the
    summary that :func:`topic_summary` returns."""
    require(db, by, "lead", "building topics")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 2):
        raise TopicsError(f"k must be a whole number >= 2, e.g. 10; got {k!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TopicsError(f"seed must be a whole number, e.g. 0; got {seed!r}")
    pks, texts, occurrences = _logged(db)
    if len(pks) < 2 * (k or 2):
        raise TopicsError(f"{len(pks)} logged questions are too few for {k or 2} topics: ingest more logs "
                          "(labeler ingest logs FILE) or pass a smaller --k")
    rng = np.random.default_rng([seed, 0])
    fit = np.sort(rng.choice(len(pks), size=min(len(pks), FIT_SAMPLE), replace=False))
    fit_texts = [texts[i] for i in fit]
    vocabulary, idf, term_rows = fit_tfidf(fit_texts)
    embedded = config is not None and getattr(config, "embedding_model", None)
    if embedded:
        space: Any = EmbeddingSpace(db, config)
        rows = space.transform(fit_texts)
    else:
        space = TfidfSpace(vocabulary, idf, fit_lsa(term_rows, seed=seed))
        rows = space.project(term_rows)
    known = _row_norms(rows) > 0
    rows, weights = rows[known], occurrences[fit][known]
    if rows.shape[0] < 2 * (k or 2):
        raise TopicsError("too few questions have words to cluster on; ingest more logs or pass a smaller --k")
    chosen, scores = (k, {}) if k is not None else choose_k(rows, weights, seed=seed)
    # one thread: on a shared machine scikit-learn's OpenMP threads made the clustering 5-10x slower
    with threadpool_limits(1):
        # k-means++ starts found generic-word clusters as good by inertia as the topics (see
        # choose.py): start from the Ward clustering of the sample and let k-means refine it
        start = ward_centroids(rows, chosen, seed=seed)
        kmeans = KMeans(n_clusters=chosen, random_state=seed, **(
            {"init": start, "n_init": 1} if start is not None else {"n_init": 10}))
        labels = kmeans.fit_predict(rows.astype(np.float64) if isinstance(rows, np.ndarray) else rows,
                                    sample_weight=weights)
    centroids = normalize(kmeans.cluster_centers_.astype(np.float32))
    counts = TfidfSpace(vocabulary, idf).counts(fit_texts)[known]
    top_terms = ctfidf_terms(counts, labels, chosen, vocabulary, weights)
    # far threshold: the low tail of the fitted questions' similarity to their own centroid
    own = similarities(rows, centroids)[np.arange(rows.shape[0]), labels]
    far = float(np.quantile(own, FAR_QUANTILE))
    k_choice = {"rule": "given", "criterion": "k given (--k)", "scores": [], "chosen": chosen,
                "reason": f"k={chosen} given with --k"} if k is not None else \
        {"rule": "ward-jump", "criterion": CRITERION,
         "scores": [{"k": c, "jump": v} for c, v in scores.items()], "chosen": chosen,
         "reason": _reason(chosen, scores)}
    params = {"fit_questions": int(len(fit)), "k_rule": k_choice["rule"], "k_choice": k_choice,
              "far_quantile": FAR_QUANTILE, "embedding_model": config.embedding_model if embedded else None}
    created = store.now()
    with store.transaction(db):
        stored = space.stored()
        cur = db.conn.execute(
            "INSERT INTO topic_models (created_at, by, method, k, seed, n_questions, far_threshold, dims, params, "
            "vocabulary, idf, components, centroids) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [created, by, space.method, chosen, seed, len(pks), far, int(centroids.shape[1]), store.dumps(params),
             None if stored["vocabulary"] is None else json.dumps(stored["vocabulary"]), stored["idf"],
             stored["components"], centroids.astype(np.float32).tobytes()])
        model_id = cur.lastrowid
        audit(db.conn, created, by, "topics build", f"model {model_id}", f"k={chosen} seed={seed}")
    model = TopicModel(model_id, space.method, chosen, seed, len(pks), far, created, params, centroids, space)
    _assign_all(db, model, progress=progress)
    _write_topics(db, model, top_terms)
    return topic_summary(db)


def _reason(chosen: int, scores: dict[int, float]) -> str:
    others = {c: v for c, v in scores.items() if c != chosen}
    text = (f"k={chosen}: Ward's merge that would leave {chosen - 1} clusters costs {scores.get(chosen, 0.0):.2f}x "
            f"the one that left {chosen}, the largest jump")
    if others:
        runner = max(others, key=others.__getitem__)
        text += f" (next largest jump {others[runner]:.2f}x, at k={runner})"
    return text


def _assign_all(db: sqlite_utils.Database, model: TopicModel, *,
                progress: Callable[[int, int], None] | None = None) -> None:
    """Every visible query's topic under ``model``, written in short transactions; rows of older
    models are dropped at the end."""
    total = db.execute(f"SELECT count(*) FROM queries q WHERE {store.visible('q')}").fetchone()[0]
    done, last = 0, 0
    while True:
        part = db.execute(f"SELECT q.pk, q.question FROM queries q WHERE q.pk > ? AND {store.visible('q')} "
                          "ORDER BY q.pk LIMIT ?", [last, BATCH]).fetchall()
        if not part:
            break
        _store_topics(db, model, part)
        last = part[-1][0]
        done += len(part)
        if progress:
            progress(done, total)
    with store.transaction(db):
        db.execute("DELETE FROM query_topics WHERE model_id != ?", [model.id])


def _write_topics(db: sqlite_utils.Database, model: TopicModel, top_terms: list[list[str]]) -> None:
    sizes = dict(db.execute(
        "SELECT t.topic, count(*) FROM query_topics t JOIN queries q ON q.pk = t.query_pk "
        "WHERE t.model_id = ? AND q.origin = 'log' GROUP BY t.topic", [model.id]).fetchall())
    medoids = dict(db.execute(
        "SELECT topic, query_pk FROM (SELECT t.topic, t.query_pk, row_number() OVER (PARTITION BY t.topic "
        "ORDER BY t.similarity DESC, t.query_pk) AS n FROM query_topics t JOIN queries q ON q.pk = t.query_pk "
        "WHERE t.model_id = ? AND q.origin = 'log' AND t.topic >= 0) WHERE n = 1", [model.id]).fetchall())
    with store.transaction(db):
        db.execute("DELETE FROM topics WHERE model_id != ?", [model.id])
        db.conn.executemany(
            "INSERT INTO topics (model_id, topic, label, terms, medoid_query_pk, size) VALUES (?, ?, ?, ?, ?, ?)",
            [(model.id, t, " · ".join(top_terms[t][:3]) or f"topic {t}", json.dumps(top_terms[t]),
              medoids.get(t), sizes.get(t, 0)) for t in range(model.k)]
            + ([(model.id, NO_TOPIC, "(no known words)", "[]", None, sizes[NO_TOPIC])] if sizes.get(NO_TOPIC) else []))


def current_model(db: sqlite_utils.Database, *, config: Any = None, required: bool = True) -> TopicModel | None:
    """The newest topic model, or None (``required``: raise TopicsError saying how to build one)."""
    row = db.execute("SELECT id, method, k, seed, n_questions, far_threshold, created_at, params, vocabulary, idf, "
                     "centroids, dims, components FROM topic_models ORDER BY id DESC LIMIT 1").fetchone()
    if row is None:
        if required:
            raise TopicsError("no topics yet: build them first with labeler topics build (or on the Metrics page)")
        return None
    model_id, method, k, seed, n, far, created, params, vocabulary, idf, centroids, dims, components = row
    if method == "tfidf":
        terms = json.loads(vocabulary)
        lsa = None if components is None else np.frombuffer(components, dtype=np.float32).reshape(-1, len(terms))
        space: Any = TfidfSpace(terms, np.frombuffer(idf, dtype=np.float32), lsa)
    else:
        space = EmbeddingSpace(db, config, dims)
    matrix = np.frombuffer(centroids, dtype=np.float32).reshape(k, dims)
    return TopicModel(model_id, method, k, seed, n, far, created, store.loads(params), matrix, space)


def assign_new(db: sqlite_utils.Database, *, config: Any = None) -> int:
    """Give the queries that arrived since the current model was built their topic (a derived
    value, written in short transactions); returns how many. 0 without a model."""
    model = current_model(db, config=config, required=False)
    if model is None:
        return 0
    added = 0
    while True:
        part = db.execute(f"SELECT q.pk, q.question FROM queries q WHERE {store.visible('q')} AND NOT EXISTS "
                          "(SELECT 1 FROM query_topics t WHERE t.query_pk = q.pk AND t.model_id = ?) "
                          "ORDER BY q.pk LIMIT ?", [model.id, BATCH]).fetchall()
        if not part:
            return added
        _store_topics(db, model, part)
        added += len(part)


def topic_summary(db: sqlite_utils.Database) -> dict[str, Any]:
    """The current model (id, method, k, seed, questions, far threshold, built at) and its topics
    (topic, label, terms, medoid question, logged questions)."""
    model = db.execute("SELECT id, method, k, seed, n_questions, far_threshold, created_at, params FROM topic_models "
                       "ORDER BY id DESC LIMIT 1").fetchone()
    if model is None:
        raise TopicsError("no topics yet: build them first with labeler topics build")
    topics = [{"topic": t, "label": label, "terms": json.loads(terms), "medoid": medoid, "questions": size}
              for t, label, terms, medoid, size in db.execute(
                  "SELECT t.topic, t.label, t.terms, q.question, t.size FROM topics t LEFT JOIN queries q "
                  "ON q.pk = t.medoid_query_pk WHERE t.model_id = ? ORDER BY t.topic", [model[0]])]
    params = store.loads(model[7])
    # models built before the choice was recorded say only their rule
    k_choice = params.get("k_choice") or {"rule": params.get("k_rule"), "criterion": None, "scores": [],
                                          "chosen": model[2], "reason": None}
    return {"model": model[0], "method": model[1], "k": model[2], "k_choice": k_choice, "seed": model[3],
            "questions": model[4], "far_threshold": model[5], "created_at": model[6], "params": params,
            "topics": topics}


def _store_topics(db: sqlite_utils.Database, model: Any, part: list[tuple[int, str]]) -> None:
    """Give the (pk, question) rows of ``part`` their topic under ``model``, in one short transaction."""
    topic, sim = model.assign([r[1] for r in part])
    with store.transaction(db):
        db.conn.executemany(
            "INSERT INTO query_topics (query_pk, model_id, topic, similarity) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (query_pk) DO UPDATE SET model_id = excluded.model_id, topic = excluded.topic, "
            "similarity = excluded.similarity",
            zip([r[0] for r in part], [model.id] * len(part), topic.tolist(), sim.astype(float).tolist(),
                strict=True))
