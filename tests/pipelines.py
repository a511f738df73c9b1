"""RAG pipelines over the CISI collection for the ``labeler eval`` tests and benchmark.

``tfidf`` is a real TF-IDF retriever (the same one as ``tests.cisi.tfidf_run``, so its rankings equal
the ingested production logs); ``degraded`` drops half the vocabulary; ``noisy`` swaps ranks 1 and 2
in two questions; ``flaky`` raises or returns garbage on some questions; ``hanging`` blocks on some
until ``RELEASE`` is set; ``langchain_style`` returns document objects; ``slow`` adds ``LATENCY``.
Each takes a question and returns ``(docs, answer)``, as ``labeler eval --pipeline`` expects.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from tests import cisi

K = 10
LATENCY = 0.05  # seconds added by ``slow``
RELEASE = threading.Event()  # set it to let ``hanging`` questions finish
_BUILDING = threading.Lock()  # the first questions arrive together: build each index once


def _index(half: bool):
    with _BUILDING:
        return _build_index(half)


@lru_cache(maxsize=2)
def _build_index(half: bool):
    from sklearn.feature_extraction.text import TfidfVectorizer

    docs = cisi.documents()
    ids = list(docs)
    texts = [docs[i]["title"] + " " + docs[i]["text"] for i in ids]
    vec = TfidfVectorizer(stop_words="english", sublinear_tf=True)
    matrix = vec.fit_transform(texts)
    if half:  # keep every other term of the sorted vocabulary: a badly degraded retriever
        kept = sorted(vec.vocabulary_)[::2]
        vec = TfidfVectorizer(stop_words="english", sublinear_tf=True, vocabulary=kept)
        matrix = vec.fit_transform(texts)
    return vec, matrix, ids, np.array([int(i) for i in ids])


def search(question: str, *, half: bool = False, k: int = K) -> list[dict]:
    """Top-k CISI documents by TF-IDF cosine, ties broken by doc id (as ``cisi.tfidf_run``)."""
    vec, matrix, ids, int_ids = _index(half)
    sims = (vec.transform([question]) @ matrix.T).toarray()[0]
    order = np.lexsort((int_ids, -np.round(sims, 6)))[:k]
    docs = cisi.documents()
    return [{"id": ids[j], "text": docs[ids[j]]["text"], "score": float(sims[j])} for j in order]


def _answer(docs: list[dict]) -> str:
    return docs[0]["text"][:200] if docs else ""


def tfidf(question: str) -> tuple[list[dict], str]:
    docs = search(question)
    return docs, _answer(docs)


def degraded(question: str) -> tuple[list[dict], str]:
    docs = search(question, half=True)
    return docs, _answer(docs)


@lru_cache(maxsize=1)
def _qid_by_question() -> dict[str, str]:
    return {text: q for q, text in cisi.queries().items()}


@lru_cache(maxsize=1)
def noisy_questions() -> tuple[str, ...]:
    """The first two judged CISI queries whose top doc is relevant and second is not: swapping them
    halves their reciprocal rank and changes nothing else at k >= 2."""
    rel, run = cisi.qrels(), cisi.tfidf_run(K)
    picked = [q for q in sorted(rel, key=int)
              if len(run[q]) > 1 and run[q][0][0] in rel[q] and run[q][1][0] not in rel[q]]
    return tuple(picked[:2])


def noisy(question: str) -> tuple[list[dict], str]:
    docs = search(question)
    if _qid_by_question().get(question) in noisy_questions():
        docs[0], docs[1] = docs[1], docs[0]
    return docs, _answer(docs)


def flaky_kind(question: str) -> str | None:
    """``raise`` for CISI query ids ending in 3, ``garbage`` for those ending in 7, else None."""
    qid = _qid_by_question().get(question, "")
    return {"3": "raise", "7": "garbage"}.get(qid[-1:])


def flaky(question: str):
    kind = flaky_kind(question)
    if kind == "raise":
        raise ConnectionError(f"vector store unavailable for query {_qid_by_question()[question]}")
    if kind == "garbage":
        return 42
    return tfidf(question)


def hangs(question: str) -> bool:
    return _qid_by_question().get(question, "").endswith("5")


def hanging(question: str) -> tuple[list[dict], str]:
    if hangs(question):
        RELEASE.wait(60)  # far beyond any timeout a test sets; the test sets RELEASE when done
    return tfidf(question)


async def async_tfidf(question: str) -> tuple[list[dict], str]:
    return tfidf(question)


def slow(question: str) -> tuple[list[dict], str]:
    time.sleep(LATENCY)
    return tfidf(question)


@dataclass
class Document:
    """Shaped like a LangChain ``Document``: the id lives in ``metadata``."""

    page_content: str
    metadata: dict = field(default_factory=dict)
    id: str | None = None


@dataclass
class Message:
    content: str


def langchain_style(question: str) -> tuple[list[Document], Message]:
    docs = search(question)
    return [Document(d["text"], {"id": d["id"], "score": np.float32(d["score"])}) for d in docs], \
        Message(_answer(docs))


def tiny_items(question: str) -> tuple[list[dict], str]:
    """For the judge test: answers the tiny fixture's questions ("What is item q7?") the way the
    fixture's logs did, with its chunk texts."""
    name = question.removeprefix("What is item ").rstrip("?")
    i = int(name.lstrip("q"))
    docs = [{"id": f"q{i:03d}-c{j}", "text": f"chunk {j} about {name}"} for j in range(2)]
    return docs, f"Item {name} is a thing."
