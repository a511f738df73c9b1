"""BM25 search over the FTS5 index that the database keeps of every document (migration m012).

Free text never reaches FTS5's query language: it is cut into words the way the index's tokenizer
(``porter unicode61 remove_diacritics 2``) cuts text, each word is quoted and the words are OR-ed,
so quotes, ``*``, ``NEAR(``, ``-``, ``:``, ``AND``/``OR``/``NOT`` in a question are plain words or
nothing. The index stores Porter stems ("retrieval" and "retrieved" are one term, ``retriev``);
``stems`` asks SQLite's own tokenizer for them, so Python's counts and the index's always agree.
Rows of an ingest that is still staging are never returned (``db.visible``).
"""

from __future__ import annotations

import math
import random
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable

import sqlite_utils

from .. import db as store
from ..errors import LabelerError
from .hits import SearchHit

_WORD = re.compile(r"[^\W_]+")
#: BM25 scores every document that matches any word of the query, so a query's cost is the sum of
#: its words' posting lists (about 3 us a posting here). In a corpus of COMMON_MIN_DOCS documents or
#: more, a query keeps its best words (the rarest question words; the highest tf-idf feedback words)
#: whose posting lists add up to at most POSTINGS_BUDGET: common words, which weigh little in BM25,
#: are left out when rarer ones are there. A speed/quality trade-off, measured in bench_search.py.
COMMON_MIN_DOCS = 10_000
POSTINGS_BUDGET = 5_000
#: In a smaller corpus a query keeps every word unless its posting lists add up to more than
#: MAX_POSTINGS (a feedback query: half of it); then it keeps its best words within that. Where most
#: chunks share most words (boilerplate, a narrow vocabulary) every word's list is long, and one
#: "Possibly missed" panel read ~330k postings (0.17 s of CPU, bench_capacity's corpus of 8k chunks
#: drawn from 40 words); no CISI query comes near the bound (questions at most 24.9k, feedback 10.0k).
MAX_POSTINGS = 25_000
MAX_QUERY_TERMS = 64
#: In a corpus of COMMON_MIN_DOCS or more the "Possibly missed" queries leave out words found in
#: more than INFORMATIVE_SHARE of the chunks (a typed search keeps them: there the words are the
#: user's). FTS5's BM25 weighs such a word at most a quarter of a rare one (IDF log 9 against about
#: 9 for a word in ten chunks of 60k; a word in half of them gets ~0), it cannot single out a missed
#: chunk, yet its whole posting list is read: where chunks share boilerplate, the budget's "at
#: least one word" made one such word alone read a third of the corpus for every panel.
INFORMATIVE_SHARE = 0.1


def tokens(text: str | None) -> list[str]:
    """The words of ``text`` as the index stores them: case-folded, diacritics removed, split on
    everything that is not a letter or digit."""
    if not text:
        return []
    if not text.isascii():
        text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return _WORD.findall(text.casefold())


#: The index's tokenizer (migration m021_search_porter); ``stems`` uses the same one.
TOKENIZER = "porter unicode61 remove_diacritics 2"
_stem_lock = threading.Lock()  # the app shares one connection between sessions' threads
#: Words whose stem is known (a word's stem never changes): at most STEM_CACHE, then it starts over.
STEM_CACHE = 500_000
_stem_cache: dict[str, str] = {}


def stems(db: sqlite_utils.Database, words: Iterable[str]) -> dict[str, str]:
    """The index term (Porter stem) of each of ``words`` (as ``tokens`` gives them), from SQLite's
    own tokenizer: each word goes into a scratch FTS5 table in the connection's temp database and
    its term is read back from that table's vocabulary."""
    words = list(dict.fromkeys(words))
    known = {w: _stem_cache[w] for w in words if w in _stem_cache}
    words = [w for w in words if w not in known]
    if not words:
        return known
    with _stem_lock:
        conn = db.conn
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.labeler_stems USING fts5(word, tokenize='{TOKENIZER}')")
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.labeler_stems_terms USING "
                     "fts5vocab(temp, labeler_stems, instance)")
        # in one transaction (a savepoint, nested in the caller's if there is one): row by row in
        # autocommit, FTS5 writes its index at every row, 40 us a word instead of 2
        conn.execute("SAVEPOINT labeler_stems")
        try:
            conn.executemany("INSERT INTO temp.labeler_stems (rowid, word) VALUES (?, ?)", list(enumerate(words, 1)))
            found = dict(conn.execute("SELECT doc, term FROM temp.labeler_stems_terms WHERE offset = 0"))
        finally:
            conn.execute("DELETE FROM temp.labeler_stems")
            conn.execute("RELEASE labeler_stems")
    new = {w: found.get(i, w) for i, w in enumerate(words, 1)}
    if len(_stem_cache) + len(new) > STEM_CACHE:
        _stem_cache.clear()
    _stem_cache.update(new)
    return known | new


def match_expression(terms: Iterable[str]) -> str:
    """An FTS5 query OR-ing ``terms``, each a quoted string (``""`` escapes a quote inside)."""
    quoted = ['"' + t.replace('"', '""') + '"' for t in dict.fromkeys(terms) if t]
    return " OR ".join(quoted)


def corpus_size(db: sqlite_utils.Database) -> int:
    """An upper bound of the number of indexed documents (the largest document key), for idf."""
    return int(db.execute("SELECT coalesce(max(pk), 0) FROM documents").fetchone()[0])


def document_frequencies(db: sqlite_utils.Database, terms: Iterable[str], *, estimate_rare: bool = False
                         ) -> dict[str, int]:
    """How many indexed documents contain each index term (a stem, see ``stems``; 0 for a term not
    in the index).

    The vocabulary table counts a term's documents by reading its whole posting list, which for a
    common word in a large corpus takes long. So in a corpus of SAMPLED_FROM documents or more, a
    word seen in at least SAMPLE_MIN_SEEN of a random sample of SAMPLE_DOCS chunks gets the
    sample's estimate; only the rarer words (short posting lists) are counted exactly, or, with
    ``estimate_rare``, all get the estimate of a word seen once (an upper bound: they are rare)."""
    terms = list(dict.fromkeys(terms))
    sample = _sample(db)
    if sample is None:  # a small corpus: its whole vocabulary, read once per change of the index
        vocabulary = _vocabulary(db)
        return {term: vocabulary.get(term, 0) for term in terms}
    out = {}
    for term in terms:
        if sample is not None and sample[2][term] >= SAMPLE_MIN_SEEN:
            out[term] = round(sample[2][term] * sample[0] / sample[1])
            continue
        if sample is not None and estimate_rare:
            out[term] = max(1, round(max(sample[2][term], 1) * sample[0] / sample[1]))
            continue
        row = db.execute("SELECT doc FROM documents_fts_vocab WHERE term = ?", [term]).fetchone()
        out[term] = int(row[0]) if row else 0
    return out


class _PerConnection:
    """Values kept per open connection, for the last few: keyed by the connection object itself
    (held while kept), never by its file name or ``id()``. A database made anew at the same path,
    or an in-memory one whose connection took a closed one's ``id()``, must never find another
    database's values: two small indexes can have the same structure record."""

    def __init__(self, size: int = 8):
        self.size = size
        self.items: list[tuple[object, object]] = []

    def get(self, conn: object) -> object | None:
        return next((value for c, value in self.items if c is conn), None)

    def put(self, conn: object, value: object) -> None:
        self.items = [(c, v) for c, v in self.items if c is not conn][-(self.size - 1):] + [(conn, value)]


#: Per connection: (the index's structure record when read, term -> document frequency).
_vocabularies = _PerConnection()


def _vocabulary(db: sqlite_utils.Database) -> dict[str, int]:
    """Every term of the index with its document frequency. Looking terms up one by one in the
    vocabulary table costs about a millisecond each, and the relevance feedback asks for thousands.
    FTS5 rewrites its structure record (row 10 of its data table, with a counter of writes) at
    every change of the index, so within one database that record tells whether the copy kept for
    this connection is still right."""
    row = db.execute("SELECT block FROM documents_fts_data WHERE id = 10").fetchone()
    structure = bytes(row[0]) if row else b""
    kept = _vocabularies.get(db.conn)
    if kept is None or kept[0] != structure:  # type: ignore[index]
        kept = (structure, dict(db.execute("SELECT term, doc FROM documents_fts_vocab")))
        _vocabularies.put(db.conn, kept)
    return kept[1]  # type: ignore[index]


SAMPLE_DOCS = 5000
SAMPLE_MIN_SEEN = 3
SAMPLED_FROM = 10_000
#: Per connection: (corpus size when drawn, chunks in the sample, document frequencies in it).
_samples = _PerConnection()


def _sample(db: sqlite_utils.Database) -> tuple[int, int, Counter] | None:
    n = corpus_size(db)
    if n < SAMPLED_FROM:
        return None
    kept = _samples.get(db.conn)
    if kept is not None and n <= kept[0] * 1.1:
        return kept
    rng = random.Random(n)  # seeded by the corpus size: the same corpus, the same sample
    pks = rng.sample(range(1, n + 1), min(n, SAMPLE_DOCS * 2))
    texts: list[str] = []
    for i in range(0, len(pks), 500):
        part = pks[i:i + 500]
        texts += [f"{r[0] or ''} {r[1]}" for r in db.execute(
            f"SELECT title, text FROM documents WHERE pk IN ({','.join('?' * len(part))}) AND text IS NOT NULL",
            part)]
    texts = texts[:SAMPLE_DOCS]
    words = [set(tokens(text)) for text in texts]
    stem = stems(db, set().union(*words)) if words else {}
    counts = Counter(t for ws in words for t in {stem[w] for w in ws})
    kept = (n, max(len(texts), 1), counts)
    _samples.put(db.conn, kept)
    return kept


def query_terms(db: sqlite_utils.Database, text: str, *, informative: bool = False) -> list[str]:
    """The words of ``text`` worth searching for: in the index, one per index term (stem), within
    the postings budget; ``informative``: none too common to rank by (see INFORMATIVE_SHARE)."""
    words = list(dict.fromkeys(tokens(text)))[:MAX_QUERY_TERMS]
    stem = stems(db, words)
    by_term = {stem[w]: w for w in reversed(words)}  # the first word of each term stands for it
    df = document_frequencies(db, by_term)
    n = max(corpus_size(db), 1)
    found = [t for t in dict.fromkeys(stem[w] for w in words) if df[t] > 0]
    if informative and n >= COMMON_MIN_DOCS:
        found = [t for t in found if df[t] <= INFORMATIVE_SHARE * n]
    if n >= COMMON_MIN_DOCS:
        found = _within_budget(sorted(found, key=lambda t: (df[t], t)), df)
    elif sum(df[t] for t in found) > MAX_POSTINGS:
        found = _within_budget(sorted(found, key=lambda t: (df[t], t)), df, MAX_POSTINGS)
    return [by_term[t] for t in found]


def _within_budget(ranked: list[str], df: dict[str, int], budget: int = POSTINGS_BUDGET) -> list[str]:
    """The best-ranked words whose posting lists add up to at most ``budget`` (at least one)."""
    kept: list[str] = []
    total = 0
    for w in ranked:
        if not kept or total + df[w] <= budget:
            kept.append(w)
            total += df[w]
    return kept


def distinctive_terms(db: sqlite_utils.Database, texts: Iterable[str], top: int = 30) -> list[str]:
    """The ``top`` words of ``texts`` by tf-idf of their index terms (tf summed over the texts,
    sublinear; idf from the index's vocabulary), best first, ties by term, one word per term: the
    "more like these" query."""
    words = [w for text in texts for w in tokens(text) if len(w) > 1 and not w.isdigit()]
    if not words:
        return []
    stem = stems(db, words)
    tf = Counter(stem[w] for w in words)
    by_term = {stem[w]: w for w in reversed(words)}
    df = document_frequencies(db, tf, estimate_rare=True)  # the terms of indexed chunks: all in the index
    n = max(corpus_size(db), 1)
    # in a big corpus, no word too common to rank by (see INFORMATIVE_SHARE)
    most = INFORMATIVE_SHARE * n if n >= COMMON_MIN_DOCS else n - 1
    weights = {t: (1 + math.log(c)) * math.log(n / df[t]) for t, c in tf.items() if 0 < df[t] <= most}
    ranked = sorted(weights, key=lambda t: (-weights[t], t))
    # half the budget: search_missed runs one such query per relevant chunk after the question's
    kept = ranked[:top] if n < COMMON_MIN_DOCS else _within_budget(ranked, df, POSTINGS_BUDGET // 2)[:top]
    if sum(df[t] for t in kept) > MAX_POSTINGS // 2:
        kept = _within_budget(ranked, df, MAX_POSTINGS // 2)[:top]
    return [by_term[t] for t in kept]


def bm25(db: sqlite_utils.Database, terms: list[str], k: int = 10, *,
         exclude: Collection[int] = ()) -> list[tuple[int, float]]:
    """(doc_pk, score) of the ``k`` best visible documents matching any of ``terms`` by BM25
    (FTS5's ``bm25()``, sign turned so that higher is better), ``exclude``'s keys left out."""
    expression = match_expression(terms)
    if not expression or k <= 0:
        return []
    excluded = set(exclude)
    limit = k + len(excluded) + 16
    while True:
        rows = db.execute("SELECT rowid, rank FROM documents_fts WHERE documents_fts MATCH ? ORDER BY rank LIMIT ?",
                          [expression, limit]).fetchall()
        candidates = [(pk, -score) for pk, score in rows if pk not in excluded]
        staged = _staged(db, [pk for pk, _ in candidates])
        hits = [(pk, score) for pk, score in candidates if pk not in staged]
        if len(hits) >= k or len(rows) < limit:
            return hits[:k]
        limit *= 4  # an ingest still staging holds many of the best matches: look further


def chunk_texts(db: sqlite_utils.Database, pks: list[int]) -> dict[int, str]:
    """doc_pk -> its title and text joined by a space, in the order of ``pks`` (unknown keys: "")."""
    out: dict[int, str] = {}
    for i in range(0, len(pks), 500):
        part = pks[i:i + 500]
        out |= {r[0]: f"{r[1] or ''} {r[2] or ''}" for r in db.execute(
            f"SELECT pk, title, text FROM documents WHERE pk IN ({','.join('?' * len(part))})", part)}
    return {pk: out.get(pk, "") for pk in pks}


def _staged(db: sqlite_utils.Database, pks: list[int]) -> set[int]:
    if not pks or not db.execute("SELECT 1 FROM ingests WHERE state = 'staging' LIMIT 1").fetchone():
        return set()
    marks = ",".join("?" * len(pks))
    return {r[0] for r in db.execute(f"SELECT pk FROM documents d WHERE pk IN ({marks}) AND NOT {store.visible('d')}",
                                     pks)}


def hits(db: sqlite_utils.Database, scored: list[tuple[int, float]]) -> list[SearchHit]:
    """The documents of ``scored`` (doc_pk, score) as SearchHits, in that order."""
    if not scored:
        return []
    marks = ",".join("?" * len(scored))
    rows = {r[0]: r for r in db.execute(f"SELECT pk, doc_id, title, text FROM documents WHERE pk IN ({marks})",
                                        [pk for pk, _ in scored])}
    return [SearchHit(pk, rows[pk][1], rows[pk][2], rows[pk][3], float(score)) for pk, score in scored if pk in rows]


def search_text(db: sqlite_utils.Database, text: str, k: int = 10, exclude: Collection[int] = ()) -> list[SearchHit]:
    """The ``k`` documents that best match the words of ``text`` (BM25 over title and text), best
    first; ``exclude`` holds document keys (``doc_pk``) to leave out. Empty text gives []."""
    if not tokens(text):
        return []
    if not db.execute("SELECT 1 FROM documents_fts_docsize LIMIT 1").fetchone():
        raise LabelerError("the corpus is empty: ingest a corpus file or logs with chunk text first")
    return hits(db, bm25(db, query_terms(db, text), k, exclude=exclude))
