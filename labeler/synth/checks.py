"""The checks a generated question must pass before it is stored; each failure has a reason code."""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import sqlite_utils

from .. import db as store
from .models import MAX_CHUNK_CHARS, GeneratedQuestion, Seed, SynthOptions

REJECTION_REASONS = {
    "empty": "the question, expected answer or quote is empty",
    "overlong": "the question or expected answer is longer than allowed",
    "quote_not_found": "a supporting quote does not occur in the seed chunk(s)",
    "not_multi_hop": "a two-chunk question is supported by one chunk only",
    "duplicate": "a near-duplicate of an existing question (TF-IDF cosine at or above the threshold)",
    "too_many": "the model returned more questions than asked for",
}


_QUOTE_CHARS = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-",
                              "\u2014": "-", "\u00a0": " "})


def normalize_text(text: str) -> str:
    """For the quote check: Unicode NFKC, curly quotes and dashes made plain, case and white space folded."""
    text = unicodedata.normalize("NFKC", text).translate(_QUOTE_CHARS).lower()
    return " ".join(text.split())


def _strip_quote(quote: str) -> str:
    q = normalize_text(quote).strip(" \"'")
    q = re.sub(r"^(\.\.\.|…)\s*|\s*(\.\.\.|…)$", "", q)
    return q.strip(" \"'")


def check_item(item: GeneratedQuestion, seed: Seed, options: SynthOptions) -> tuple[str, str] | None:
    """(reason, detail) when ``item`` fails a check other than the duplicate check, else None."""
    question, answer = " ".join(item.question.split()), item.answer.strip()
    quotes = [q for q in (_strip_quote(q) for q in item.quotes) if q]
    if not question or not answer or not quotes:
        missing = [name for name, v in (("question", question), ("answer", answer), ("quote", quotes)) if not v]
        return "empty", f"empty {', '.join(missing)}"
    if len(question) > options.max_question_chars:
        return "overlong", f"question has {len(question)} characters (max {options.max_question_chars})"
    if len(answer) > options.max_answer_chars:
        return "overlong", f"expected answer has {len(answer)} characters (max {options.max_answer_chars})"
    texts = [normalize_text(t[:MAX_CHUNK_CHARS]) for t in seed.texts]
    sources = set()
    for quote in quotes:
        hits = [i for i, t in enumerate(texts) if quote in t]
        if not hits:
            return "quote_not_found", f"quote not in the chunk: {quote[:160]!r}"
        sources.update(hits)
    if seed.multi_hop and len(sources) < len(texts):
        return "not_multi_hop", "every quote comes from one of the two chunks"
    return None


def find_duplicates(db: sqlite_utils.Database, questions: list[str], threshold: float) -> list[tuple[str, float] | None]:
    """For each new question (in order): (query id or earlier new question, cosine) of its nearest
    neighbour at or above ``threshold`` among the stored questions and the earlier new ones, or None."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    if not questions:
        return []
    existing = db.execute(f"SELECT query_id, question FROM queries q WHERE {store.visible('q')} ORDER BY pk").fetchall()
    vectorizer = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), strip_accents="unicode")
    vectorizer.fit([q for _, q in existing] + questions)
    new = vectorizer.transform(questions)
    out: list[tuple[str, float] | None] = [None] * len(questions)
    best = np.zeros(len(questions))
    if existing:
        sims = (new @ vectorizer.transform([q for _, q in existing]).T).tocsr()
        for i in range(len(questions)):
            row = sims.getrow(i)
            if row.nnz:
                j = int(row.indices[np.argmax(row.data)])
                best[i] = float(row.data.max())
                if best[i] >= threshold - 1e-9:
                    out[i] = (existing[j][0], round(best[i], 4))
    kept: list[int] = []
    within = (new @ new.T).toarray()
    for i in range(len(questions)):
        if out[i] is None:
            for j in kept:
                if within[i, j] >= threshold - 1e-9:
                    out[i] = (f"new question {questions[j][:80]!r}", round(float(within[i, j]), 4))
                    break
        if out[i] is None:
            kept.append(i)
    return out

