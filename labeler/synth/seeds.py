"""Seed chunks for synthetic questions (seeded, uncovered first, stratified, multi-hop pairs) and
the corpus language."""

from __future__ import annotations

import random
import re

import numpy as np
import sqlite_utils

from .. import db as store
from ..errors import SynthError
from ..search.tfidf import CorpusIndex
from .models import STRATEGIES, Seed

# --- language ---------------------------------------------------------------------------------

_STOPWORDS = {
    "English": "the and of to is in that it for are with as on be this you can or not your",
    "German": "der die und das ist nicht mit sich auf für ein eine den dem von zu sie es",
    "French": "le la les et des est une un du pour que qui dans pas sur vous avec au",
    "Spanish": "el la los las y de que es en un una por con para se del no su",
    "Italian": "il la le di che è e un una per non con del della sono gli si",
    "Dutch": "de het een en van is dat niet op te met voor zijn je er",
    "Portuguese": "o a os as e de que é em um uma para com não do da se",
}
_WORDS = re.compile(r"\w+", re.UNICODE)


def detect_language(texts: list[str]) -> str:
    """The corpus language by stop-word counts over ``texts`` (English when nothing matches).

    Simple on purpose: it only has to pick the language to ask the model for, and a project can
    set ``synth_language`` (or pass ``language``) to override it.
    """
    words = [w for t in texts for w in _WORDS.findall((t or "").lower()[:2000])]
    if not words:
        return "English"
    counts = {lang: 0 for lang in _STOPWORDS}
    sets = {lang: set(v.split()) for lang, v in _STOPWORDS.items()}
    for w in words:
        for lang, s in sets.items():
            if w in s:
                counts[lang] += 1
    best = max(counts, key=lambda k: (counts[k], k == "English"))
    return best if counts[best] else "English"


# --- seeds ------------------------------------------------------------------------------------

def _covered(db: sqlite_utils.Database) -> set[int]:
    """Chunks some submitted label grades relevant (grade >= threshold)."""
    threshold = store.get_setting(db, "threshold") or 2
    return {r[0] for r in db.execute(
        "SELECT DISTINCT r.doc_pk FROM relevance_labels r JOIN query_labels l ON l.query_pk = r.query_pk "
        "AND l.annotator = r.annotator AND l.status = 'submitted' WHERE r.grade >= ?", [threshold])}


def _used_by_other_seeds(db: sqlite_utils.Database, seed: int) -> set[str]:
    used: set[str] = set()
    for (ids,) in db.execute(
        "SELECT seed_doc_ids FROM queries WHERE origin = 'synthetic' AND seed_doc_ids IS NOT NULL "
        "AND json_extract(generator, '$.seed') IS NOT ? "
        "UNION ALL SELECT seed_doc_ids FROM synth_rejections WHERE json_extract(generator, '$.seed') IS NOT ?",
        [seed, seed],
    ):
        used.update(store.loads(ids) or [])
    return used


def select_seeds(db: sqlite_utils.Database, count: int, *, seed: int = 7, strategy: str = "uncovered",
                 multi_hop: float = 0.0, min_chars: int = 80, index: CorpusIndex | None = None) -> list[Seed]:
    """``count`` seeds in a seeded order; see ``SynthOptions`` for the strategies.

    Chunks shorter than ``min_chars`` are skipped unless nothing longer exists. A multi-hop seed is
    a chunk plus its most similar other chunk (TF-IDF cosine, below 0.95 so not a copy of it).
    """
    if strategy not in STRATEGIES:
        raise SynthError(f"strategy {strategy!r} is unknown; use one of: {', '.join(STRATEGIES)}")
    index = index if index is not None else CorpusIndex(db)
    if len(index) == 0:
        raise SynthError("the corpus is empty: ingest a corpus file (labeler ingest corpus) or logs with chunk text")
    pool = [i for i, t in enumerate(index.texts) if len(t.strip()) >= min_chars] or \
        [i for i, t in enumerate(index.texts) if t.strip()]
    rng = random.Random(seed)
    rng.shuffle(pool)
    covered, used = _covered(db), _used_by_other_seeds(db, seed)

    def rank(i: int) -> tuple[int, int]:
        used_before = int(index.doc_ids[i] in used)
        return (used_before, int(strategy != "random" and int(index.pks[i]) in covered))

    pool.sort(key=rank)  # stable: the seeded shuffle orders within each class
    if strategy == "stratified":
        sources = dict(db.execute("SELECT pk, source FROM documents WHERE text IS NOT NULL").fetchall())
        use_source = any(sources.get(int(index.pks[i])) for i in pool)
        groups: dict[str, list[int]] = {}
        for i in pool:
            key = (sources.get(int(index.pks[i])) if use_source else index.titles[i]) or ""
            groups.setdefault(key, []).append(i)
        names = sorted(groups)
        rng.shuffle(names)
        # round robin, but by class first: every group's unused/uncovered chunks before any used one
        ordered = []
        for cls in sorted({rank(i) for i in pool}):
            lists = [[i for i in groups[g] if rank(i) == cls] for g in names]
            for j in range(max((len(x) for x in lists), default=0)):
                ordered += [x[j] for x in lists if j < len(x)]
        pool = ordered
    chosen = pool[:count]
    hop_rng = random.Random(f"{seed}:multi-hop")
    seeds = []
    for i in chosen:
        members = [i]
        if multi_hop > 0 and hop_rng.random() < multi_hop and index.matrix is not None:
            sims = (index.matrix[i] @ index.matrix.T).toarray().ravel()
            sims[i] = 0.0
            sims[sims >= 0.95] = 0.0
            j = int(np.argmax(sims))
            if sims[j] > 0:
                members.append(j)
        seeds.append(Seed(tuple(int(index.pks[m]) for m in members), tuple(index.doc_ids[m] for m in members),
                          tuple(index.titles[m] for m in members), tuple(index.texts[m] for m in members)))
    return seeds

