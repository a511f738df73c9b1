"""The CISI test collection (read from ../shared/datasets/cisi) as production logs and labels.

Parses the SMART-format files, runs a real TF-IDF retriever (scikit-learn) to produce the
"production" top-k for every query, and exposes the human judgments (CISI.REL, binary).
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

CISI = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "cisi"


def require_cisi() -> Path:
    """The collection's folder; without it a test skips on a developer's checkout and fails in CI
    (``CI`` set), where ../shared is always there: data CI provides is never silently missing."""
    if not (CISI / "CISI.ALL").exists():
        message = f"CISI collection not found at {CISI} (it ships in ../shared/datasets/cisi)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return CISI


def _smart(path: Path) -> dict[str, dict[str, str]]:
    records: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    field = None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = re.match(r"^\.([A-Z])(?:\s+(\d+))?\s*$", line)
        if m:
            if m.group(1) == "I":
                current = records.setdefault(m.group(2), {})
                field = None
            else:
                field = m.group(1)
                current.setdefault(field, "")
            continue
        if current is not None and field:
            current[field] += line + "\n"
    return {k: {f: " ".join(v.split()) for f, v in rec.items()} for k, rec in records.items()}


@lru_cache(maxsize=1)
def documents() -> dict[str, dict[str, str]]:
    docs = _smart(require_cisi() / "CISI.ALL")
    return {k: {"title": d.get("T", ""), "text": d.get("W", "") or d.get("T", "")} for k, d in docs.items()}


@lru_cache(maxsize=1)
def queries() -> dict[str, str]:
    qs = _smart(require_cisi() / "CISI.QRY")
    return {k: q.get("W") or q.get("T", "") for k, q in qs.items()}


@lru_cache(maxsize=1)
def qrels() -> dict[str, set[str]]:
    rel: dict[str, set[str]] = {}
    for line in (require_cisi() / "CISI.REL").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2:
            rel.setdefault(parts[0], set()).add(parts[1])
    return rel


@lru_cache(maxsize=4)
def tfidf_run(k: int = 10) -> dict[str, list[tuple[str, float]]]:
    """Top-k documents per query by TF-IDF cosine (ties broken by doc id), scores rounded to 6 places."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    docs = documents()
    ids = list(docs)
    vec = TfidfVectorizer(stop_words="english", sublinear_tf=True)
    matrix = vec.fit_transform([docs[i]["title"] + " " + docs[i]["text"] for i in ids])
    qids = list(queries())
    sims = (vec.transform([queries()[q] for q in qids]) @ matrix.T).toarray()
    run = {}
    for qi, q in enumerate(qids):
        order = np.lexsort((np.array([int(i) for i in ids]), -np.round(sims[qi], 6)))[:k]
        run[q] = [(ids[j], round(float(sims[qi, j]), 6)) for j in order]
    return run


def write_logs(path: Path, k: int = 10) -> Path:
    """Production logs for every CISI query: the TF-IDF top k with text, as JSONL."""
    docs = documents()
    with open(path, "w", encoding="utf-8") as f:
        for q, question in queries().items():
            retrieved = [{"id": d, "score": s, "title": docs[d]["title"], "text": docs[d]["text"]}
                         for d, s in tfidf_run(k)[q]]
            f.write(json.dumps({"query_id": f"cisi-{q}", "question": question, "retrieved": retrieved}) + "\n")
    return path


def write_corpus(path: Path) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for d, doc in documents().items():
            f.write(json.dumps({"id": d, "title": doc["title"], "text": doc["text"]}) + "\n")
    return path
