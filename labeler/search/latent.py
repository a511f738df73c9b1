"""Latent semantic search: chunks near the question and the chunks graded relevant, in a space of
topics learned from the corpus itself (LSA: tf-idf reduced by a truncated SVD, Deerwester et al.
1990), so a chunk that says the same thing in other words can be found without an embeddings
endpoint.

The space is fitted with scikit-learn on every visible chunk, for corpora of LSA_MIN_DOCS to
LSA_MAX_DOCS chunks, kept per database file for every connection and thread of the process (the
app opens one connection per script thread), and brought up to date cheaply: chunks added, removed
or changed since the fit are projected into the kept space (folding in, as LSI does), and the space
is fitted again only when they are more than REFIT_SHARE of it. Larger corpora use the embeddings
endpoint instead (``missed``).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import sqlite_utils

from .. import db as store
from .fts import chunk_texts

#: Below this many chunks a latent space says nothing a word match does not.
LSA_MIN_DOCS = 200
#: Above this many, fitting would hold up the Label page for seconds.
LSA_MAX_DOCS = 20_000
#: Dimensions of the space, at most a fifth of the chunks (CISI, 1,460 chunks: 100 to 200 find about
#: as many missed chunks).
DIMENSIONS = 150
#: Weight of the mean relevant chunk against the question in the probe (the question weighs 1).
RELEVANT_WEIGHT = 2.0
#: Share of the fitted chunks that may be added, removed or changed before the space is refitted.
REFIT_SHARE = 0.2


@dataclass
class _Space:
    vectorizer: object
    svd: object
    hashes: dict[int, int]  # doc_pk -> hash of its title and text when projected
    rows: dict[int, int]  # doc_pk -> row of ``vectors``
    vectors: np.ndarray  # unit rows
    fitted: int  # chunks the space was fitted on
    folded: int = 0  # chunks projected since
    #: the projection as a dense (terms x dimensions) array: a question's few terms are a few rows
    basis: np.ndarray | None = None
    #: (chunk keys, their rows of ``vectors``) as arrays, rebuilt after a fold-in
    index: tuple[np.ndarray, np.ndarray] | None = None
    #: Database object -> the ``_key`` it last read while this space matched the chunks it sees
    verified: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)


#: Database file -> its space, for the last few files. Whether a space matches what a connection
#: sees is decided by the chunks' hashes (``_chunks``), never by the file name alone: a database
#: made anew at the same path, or another in-memory one, only reuses the vectors of identical chunks.
_spaces: OrderedDict[str, _Space] = OrderedDict()
_SPACES_KEPT = 4
#: Database file -> (``_key``, chunks with text) when the largest chunk key was above LSA_MAX_DOCS:
#: documents without text (logged ids only) make keys, so the count may still be in range.
_counts: dict[str, tuple[tuple, int]] = {}
#: Above this largest chunk key the chunks are not even counted: the corpus is taken as too big.
COUNT_SCAN_MAX = 200_000
_lock = threading.Lock()  # one thread at a time fits, folds in or reads a space


def _key(db: sqlite_utils.Database) -> tuple:
    """Index lookups only, and different whenever a chunk was added, changed, removed or made
    visible: FTS5's structure record (rewritten at every change of the index), the largest chunk
    key, and the ingests done and staging (an ingest's chunks become visible when it commits)."""
    row = db.execute("SELECT block FROM documents_fts_data WHERE id = 10").fetchone()
    rest = db.execute("SELECT (SELECT max(pk) FROM documents), (SELECT max(id) FROM ingests WHERE state = 'done'), "
                      "(SELECT group_concat(id) FROM ingests WHERE state = 'staging')").fetchone()
    return (bytes(row[0]) if row else b"", *rest)


def _chunks(db: sqlite_utils.Database) -> dict[int, int]:
    """doc_pk -> hash of title and text, of every visible chunk with text (this process's hash)."""
    return {r[0]: hash((r[1], r[2])) for r in db.execute(
        f"SELECT d.pk, d.title, d.text FROM documents d WHERE d.text IS NOT NULL AND {store.visible('d')}")}


def _unit(matrix: np.ndarray) -> np.ndarray:
    return (matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def _fit(db: sqlite_utils.Database, chunks: dict[int, int]) -> _Space | None:
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    pks = sorted(chunks)
    vectorizer = TfidfVectorizer(stop_words="english", sublinear_tf=True, min_df=2, dtype=np.float32)
    try:
        matrix = vectorizer.fit_transform(list(chunk_texts(db, pks).values()))
    except ValueError:  # no word occurs in two chunks
        return None
    dims = min(DIMENSIONS, matrix.shape[1] - 1, len(pks) // 5)  # more than a fifth of the chunks fits noise
    if dims < 2:
        return None
    svd = TruncatedSVD(dims, random_state=0)
    vectors = _unit(svd.fit_transform(matrix))
    return _Space(vectorizer, svd, dict(chunks), {pk: i for i, pk in enumerate(pks)}, vectors, len(pks))


def _project(space: _Space, texts: list[str]) -> np.ndarray:
    """Unit vectors of ``texts`` in the space (tf-idf times the SVD's basis, as its ``transform``)."""
    if space.basis is None:
        space.basis = np.ascontiguousarray(space.svd.components_.T, dtype=np.float32)  # type: ignore[attr-defined]
    tfidf = space.vectorizer.transform(texts).tocsr()  # type: ignore[attr-defined]
    out = np.zeros((len(texts), space.basis.shape[1]), dtype=np.float32)
    for i in range(len(texts)):
        cols = tfidf.indices[tfidf.indptr[i]:tfidf.indptr[i + 1]]
        if cols.size:
            out[i] = tfidf.data[tfidf.indptr[i]:tfidf.indptr[i + 1]] @ space.basis[cols]
    return _unit(out)


def _file(db: sqlite_utils.Database) -> str:
    row = db.execute("PRAGMA database_list").fetchone()
    return row[2] if row and row[2] else ":memory:"


def _in_range(db: sqlite_utils.Database, key: tuple, path: str) -> bool:
    """Whether the visible chunks with text may number LSA_MIN_DOCS to LSA_MAX_DOCS, cheaply: the
    largest chunk key bounds their count, and is exact enough unless many documents have no text."""
    top = key[1] or 0
    if top < LSA_MIN_DOCS or top > COUNT_SCAN_MAX:
        return False
    if top <= LSA_MAX_DOCS:
        return True
    kept = _counts.get(path)
    if kept is None or kept[0] != key:
        n = db.execute(f"SELECT count(*) FROM documents d WHERE d.text IS NOT NULL AND {store.visible('d')}"
                       ).fetchone()[0]
        kept = _counts[path] = (key, int(n))
    return LSA_MIN_DOCS <= kept[1] <= LSA_MAX_DOCS


def _space(db: sqlite_utils.Database) -> _Space | None:
    """The latent space of the visible chunks ``db`` sees, fitted or brought up to date. Call with
    ``_lock`` held."""
    key = _key(db)
    path = _file(db)
    if not _in_range(db, key, path):
        return None
    space = _spaces.get(path)
    if space is not None and space.verified.get(db) == key:
        return space
    chunks = _chunks(db)
    if not LSA_MIN_DOCS <= len(chunks) <= LSA_MAX_DOCS:
        return None
    if space is not None:
        stale = [pk for pk, h in chunks.items() if space.hashes.get(pk) != h]
        gone = [pk for pk in space.hashes if pk not in chunks]
        if space.folded + len(stale) + len(gone) > REFIT_SHARE * space.fitted:
            space = None
        elif stale or gone:
            _fold_in(db, space, stale, gone, chunks)
    if space is None:
        space = _fit(db, chunks)
        if space is None:
            return None
        _spaces[path] = space
        while len(_spaces) > _SPACES_KEPT:
            _spaces.popitem(last=False)
    _spaces.move_to_end(path)
    space.verified[db] = key
    return space


def _fold_in(db: sqlite_utils.Database, space: _Space, stale: list[int], gone: list[int],
             chunks: dict[int, int]) -> None:
    for pk in gone:
        space.hashes.pop(pk, None)
        space.rows.pop(pk, None)  # its row stays in the matrix, unreachable
    if stale:
        projected = _project(space, list(chunk_texts(db, stale).values()))
        added = []
        for pk, vector in zip(stale, projected, strict=True):
            if pk in space.rows:
                space.vectors[space.rows[pk]] = vector
            else:
                space.rows[pk] = len(space.vectors) + len(added)
                added.append(vector)
            space.hashes[pk] = chunks[pk]
        if added:
            space.vectors = np.vstack([space.vectors, np.asarray(added, dtype=np.float32)])
    space.folded += len(stale) + len(gone)
    space.index = None


def warm(db: sqlite_utils.Database) -> bool:
    """Fit (or bring up to date) the space of ``db``'s file now, so the first search does not wait;
    False when the corpus is out of range. The app calls it in the background at start."""
    with _lock:
        return _space(db) is not None


def similar(db: sqlite_utils.Database, question: str, relevant: list[int], exclude: set[int],
            k: int) -> list[int]:
    """The ``k`` chunks outside ``exclude`` nearest the probe: the question plus RELEVANT_WEIGHT
    times the mean of the chunks ``relevant`` (keys); best first, ties by key. Empty when the
    corpus is out of range or the probe is empty."""
    with _lock:
        space = _space(db)
        if space is None:
            return []
        probe = _project(space, [question])[0]
        rows = [space.rows[pk] for pk in relevant if pk in space.rows]
        if rows:
            probe = probe + RELEVANT_WEIGHT * space.vectors[rows].mean(axis=0)
        if not np.any(probe):
            return []  # no word the space knows, no relevant chunk: nothing is nearer than another
        if space.index is None:
            pks = np.fromiter(space.rows.keys(), dtype=np.int64, count=len(space.rows))
            space.index = pks, np.fromiter(space.rows.values(), dtype=np.int64, count=len(space.rows))
        pks, rows_of = space.index
        scores = (space.vectors @ probe)[rows_of]  # rows of removed chunks are scored and dropped
    # only the best k + |exclude| can make the list: sort those (ties by key)
    take = min(len(pks), k + len(exclude))
    best = np.argpartition(-scores, take - 1)[:take] if take < len(pks) else np.arange(len(pks))
    threshold = scores[best].min() if take else 0.0
    best = np.flatnonzero(scores >= threshold)  # every tie of the last score too
    order = best[np.lexsort((pks[best], -scores[best]))]
    out = [int(pk) for pk in pks[order] if int(pk) not in exclude]
    return out[:k]
