"""``drift``: new traffic (a log file, read without storing, or an ingest) against the current
topics: which topics grew beyond their share, and which questions are far from every topic,
clustered into candidate new topics.

Rules (see README "Topics, coverage and drift"):

- **Baseline**: the current model's logged queries weighted by occurrences, without the new
  traffic's own queries (for an ingest: the traffic before it, as far as it is stored).
- **Far**: a new question whose cosine similarity to its nearest centroid is below the model's
  ``far_threshold`` (the 1st percentile of the similarity of the questions the topics were built
  on to their own centroid), or that has no word the topics know. Far questions are clustered
  with TF-IDF (TF-IDF topics: on the words the topics have never seen; far questions without
  such a word form no candidate) + KMeans into candidate topics (k by Ward's jump, as for the
  topics; 1 under 20 questions; clusters whose centroids have a cosine similarity above
  ``MERGE_SIMILARITY`` are merged), each named by c-TF-IDF.
- **Grew**: a topic whose share of the new traffic has a 95% Wilson interval entirely above its
  baseline share and is at least ``GROWTH_RATIO`` times it (both: a tiny share that doubles by
  chance in a small file is not drift, nor is a statistically clear 3% rise of a big topic).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_utils
from sklearn.cluster import KMeans
from sklearn.preprocessing import normalize
from threadpoolctl import threadpool_limits

from .. import db as store
from ..ingest.validate import normalize_question
from .build import NO_TOPIC, TopicModel, current_model
from .choose import choose_k
from .ctfidf import ctfidf_terms
from .space import TfidfSpace, TopicsError, fit_tfidf, similarities

GROWTH_RATIO = 1.5
Z95 = 1.959963984540054
MIN_NEW_TOPIC = 3  # far questions a candidate topic needs to be listed
EXAMPLES = 3
MERGE_SIMILARITY = 0.15


def wilson(count: float, n: float, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``count / n``."""
    if n <= 0:
        return 0.0, 1.0
    p = count / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _file_questions(path: Path, mapping: dict[str, str] | None, tool: str | None) -> dict[str, tuple[str, int]]:
    from ..ingest import formats
    from ..ingest.readers import detect_format, iter_records

    if not path.exists():
        raise TopicsError(f"{path}: no such file or ingest id; give a log file or an ingest id (labeler ingests)")
    fmt, gz = detect_format(path)
    records, _ = iter_records(path, fmt, gz)
    reader = formats.Reader(tool, mapping)
    found: dict[str, tuple[str, int]] = {}
    for _line, item, _raw in reader.read(records):
        question = item.get("question") if isinstance(item, dict) else None
        if isinstance(question, str) and question.strip():
            key = normalize_question(question)
            text, n = found.get(key, (question.strip(), 0))
            found[key] = (text, n + 1)
    if not found:
        raise TopicsError(f"{path}: no questions found; check the file (the same formats as labeler ingest logs)")
    return found


def _ingest_traffic(db: sqlite_utils.Database, ingest_id: int) -> dict[int, tuple[str, int]]:
    """{query pk: (question, occurrences in the ingest)}: each stored line of the ingest once; a
    new query of the ingest whose lines were not kept separately (records with an id) counts with
    its occurrences, one the ingest re-logged once per retriever ranking it brought."""
    if db.execute("SELECT 1 FROM ingests WHERE id = ? AND state = 'done'", [ingest_id]).fetchone() is None:
        raise TopicsError(f"ingest {ingest_id} not found (or not finished); see labeler stats / the Data page")
    counts: dict[int, int] = dict(db.execute(
        "SELECT query_pk, count(*) FROM log_lines WHERE ingest_id = ? GROUP BY query_pk", [ingest_id]).fetchall())
    for pk, occ in db.execute("SELECT pk, occurrences FROM queries WHERE ingest_id = ? AND origin = 'log'",
                              [ingest_id]):
        counts.setdefault(pk, occ)
    for (pk,) in db.execute("SELECT DISTINCT query_pk FROM query_versions WHERE ingest_id = ?", [ingest_id]):
        counts.setdefault(pk, 1)
    if not counts:
        raise TopicsError(f"ingest {ingest_id} brought no logged questions (a corpus ingest?)")
    out = {}
    for start in range(0, len(counts), 5000):
        part = list(counts)[start:start + 5000]
        for pk, question in db.execute("SELECT pk, question FROM queries WHERE pk IN (SELECT value FROM json_each(?))",
                                       [store.dumps(part)]):
            out[pk] = (question, counts[pk])
    return out


def latest_ingest(db: sqlite_utils.Database) -> int | None:
    """The id of the newest finished logs ingest, or None."""
    row = db.execute("SELECT max(id) FROM ingests WHERE state = 'done' AND kind = 'logs'").fetchone()
    return row[0] if row else None


def _baseline(db: sqlite_utils.Database, model: TopicModel, exclude: set[int]) -> tuple[dict[int, float], float]:
    counts: dict[int, float] = {}
    for pk, topic, occ in db.execute(
            "SELECT t.query_pk, t.topic, q.occurrences FROM query_topics t JOIN queries q ON q.pk = t.query_pk "
            f"WHERE t.model_id = ? AND q.origin = 'log' AND {store.visible('q')}", [model.id]):
        if pk not in exclude:
            counts[topic] = counts.get(topic, 0) + occ
    return counts, float(sum(counts.values()))


def drift(db: sqlite_utils.Database, source: str | int | Path, *, mapping: dict[str, str] | None = None,
          tool: str | None = None, config: Any = None, seed: int = 0) -> dict[str, Any]:
    """New traffic ``source`` (a log file path, or an ingest id) against the current topics; see the
    module doc. Returns {"source", "questions", "occurrences", "baseline_occurrences",
    "far_threshold", "far_share", "topics": [per topic: label, baseline/new share, Wilson CI, ratio,
    grew, examples], "new_topics": [label, terms, questions, occurrences, share, examples]}."""
    model = current_model(db, config=config)
    text = str(source)
    exclude: set[int] = set()
    if isinstance(source, int) or (text.isdigit() and not Path(text).exists()):
        traffic = _ingest_traffic(db, int(text))
        exclude = set(traffic)
        items = list(traffic.values())
        shown = f"ingest {int(text)}"
    else:
        items = list(_file_questions(Path(text), mapping, tool).values())
        shown = text
    texts = [t for t, _ in items]
    weights = np.array([n for _, n in items], dtype=np.float64)
    topic, sim = model.assign(texts)
    far = (topic == NO_TOPIC) | (sim < model.far_threshold)
    base, base_total = _baseline(db, model, exclude)
    total = float(weights.sum())
    labels = dict(db.execute("SELECT topic, label FROM topics WHERE model_id = ?", [model.id]).fetchall())
    rows = []
    for t in sorted(set(range(model.k)) | set(base)):
        if t == NO_TOPIC:
            continue
        mine = (topic == t) & ~far
        count = float(weights[mine].sum())
        base_share = base.get(t, 0.0) / base_total if base_total else 0.0
        share = count / total
        low, high = wilson(count, total)
        ratio = None if base_share == 0 else share / base_share
        grew = bool(low > base_share and (ratio is None or ratio >= GROWTH_RATIO) and count > 0)
        order = np.flatnonzero(mine)[np.argsort(-weights[mine], kind="stable")][:EXAMPLES]
        rows.append({"topic": t, "label": labels.get(t, f"topic {t}"), "baseline_share": base_share,
                     "new_share": share, "ci_low": low, "ci_high": high, "ratio": ratio, "grew": grew,
                     "occurrences": count, "examples": [texts[i] for i in order]})
    rows.sort(key=lambda r: (not r["grew"], -(r["ratio"] or math.inf if r["new_share"] else 0), r["topic"]))
    far_texts = [texts[i] for i in np.flatnonzero(far)]
    known = set(model.space.vocabulary) if isinstance(model.space, TfidfSpace) else set()
    new_topics = _new_topics(far_texts, weights[far], total, known=known, seed=seed)
    return {"source": shown, "model": model.id, "questions": len(texts), "occurrences": total,
            "baseline_occurrences": base_total, "far_threshold": model.far_threshold,
            "far_share": float(weights[far].sum()) / total if total else 0.0, "growth_ratio": GROWTH_RATIO,
            "topics": rows, "new_topics": new_topics}


def _merge(labels: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clusters whose centroids have a cosine similarity above ``MERGE_SIMILARITY`` become one
    (single linkage): k-means splits one new subject by which of its words each question uses."""
    k = centroids.shape[0]
    parent = list(range(k))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    sims = centroids @ centroids.T
    for i in range(k):
        for j in range(i + 1, k):
            if sims[i, j] > MERGE_SIMILARITY:
                parent[root(j)] = root(i)
    roots = sorted({root(i) for i in range(k)})
    renumber = {r: n for n, r in enumerate(roots)}
    merged = np.array([renumber[root(int(c))] for c in labels], dtype=np.int64)
    return merged, np.vstack([normalize(centroids[[i for i in range(k) if root(i) == r]].sum(axis=0, keepdims=True))
                              for r in roots])


def _new_topics(texts: list[str], weights: np.ndarray, total: float, *, known: set[str],
                seed: int) -> list[dict[str, Any]]:
    """The far questions clustered into candidate topics (largest first). With TF-IDF topics
    (``known``: the model's vocabulary) only the words the topics have never seen count, and a far
    question without one forms no candidate: the words it shares with the old traffic (how do I,
    not working...) would split one new subject by phrasing, and a question of known words only
    is an odd phrasing of old traffic, not a new subject."""
    if len(texts) < MIN_NEW_TOPIC:
        return []
    try:
        vocabulary, idf, _ = fit_tfidf(texts)
    except TopicsError:
        return []
    if known:
        fresh = [i for i, term in enumerate(vocabulary) if term not in known]
        if not fresh:
            return []
        vocabulary, idf = [vocabulary[i] for i in fresh], idf[fresh]
    fresh_space = TfidfSpace(vocabulary, idf)
    rows = fresh_space.transform(texts)
    keep = np.flatnonzero(rows.getnnz(axis=1) > 0)
    if len(keep) < MIN_NEW_TOPIC:
        return []
    rows, weights, texts = rows[keep], weights[keep], [texts[i] for i in keep]
    counts = fresh_space.counts(texts)
    k = 1 if len(texts) < 20 else choose_k(rows, weights, seed=seed)[0]
    if k == 1:
        labels = np.zeros(len(texts), dtype=np.int64)
        centroids = normalize(np.asarray(rows.multiply(weights[:, None]).sum(axis=0)))
    else:
        with threadpool_limits(1):
            km = KMeans(n_clusters=k, random_state=seed, n_init=4).fit(rows, sample_weight=weights)
        labels, centroids = _merge(km.labels_, normalize(km.cluster_centers_))
        k = centroids.shape[0]
    terms = ctfidf_terms(counts, labels, k, vocabulary, weights)
    sims = similarities(rows, np.asarray(centroids, dtype=np.float32))
    out = []
    for c in range(k):
        members = np.flatnonzero(labels == c)
        if len(members) < MIN_NEW_TOPIC:
            continue
        closest = members[np.argsort(-sims[members, c], kind="stable")][:EXAMPLES]
        occ = float(weights[members].sum())
        out.append({"label": " · ".join(terms[c][:3]), "terms": terms[c], "questions": int(len(members)),
                    "occurrences": occ, "share": occ / total if total else 0.0,
                    "examples": [texts[i] for i in closest]})
    return sorted(out, key=lambda r: -r["occurrences"])
