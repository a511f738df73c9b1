"""Validating a canonical log record: types and values of every field, the retrieved chunks as
columns, and the normalized question that deduplication keys on."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from .common import FieldError as _FieldError
from .mapping import CHUNK_ALIASES, LOG_ALIASES
from .readers import dumps_sorted as _dumps_sorted
from .readers import is_number
from .times import timestamp

DEFAULT_RETRIEVER = "production"
# a validated record's keys, in the order ``validate_log`` (and ``fastlines``) give them
RECORD_KEYS = ("query_id", "question", "ids", "texts", "titles", "scores", "answer", "timestamp", "retriever",
               "meta", "opaque_id", "content_ids", "made_ids")

# --- validation ---------------------------------------------------------------------------

def text_or_none(v: Any, fld: str) -> str | None:
    if v is None or isinstance(v, str):
        return v
    raise _FieldError(fld, f"expected text, got {type(v).__name__}")


def _chunk_fast(raw: Any) -> tuple[str, str | None, str | None, float | None] | None:
    """The common shape {"id": str, "text"?: str, "score"?: float, "title"?: str}, checked cheaply.

    Returns None when the chunk needs the general path (aliases, conversions, or an error).
    """
    if type(raw) is not dict:
        return None
    cid = raw.get("id")
    if type(cid) is not str or not cid or cid != cid.strip():
        return None
    text = raw.get("text")
    title = raw.get("title")
    score = raw.get("score")
    if (text is not None and type(text) is not str) or (title is not None and type(title) is not str):
        return None
    if score is not None:
        if type(score) is int:
            score = float(score)
        elif type(score) is not float or score != score or score in (_INF, -_INF):
            return None
    if text is None and "content" in raw or "page_content" in raw or "doc_id" in raw:
        return None
    return cid, text, title, score


_INF = float("inf")
_FAST_KEYS = frozenset(("id", "text", "title", "score"))


_STR = {str}
_OPT_STR = {str, type(None)}
_SCORE_TYPES = {float, int, type(None)}

Columns = tuple[list[str], list[str | None] | None, list[str | None] | None, list[float | None]]


def _chunks_fast(retrieved: list) -> Columns | None:
    """The whole list in the common shape, checked in bulk, as columns ``(ids, texts, titles,
    scores)`` (texts or titles None when no chunk has one); None sends it to the per-chunk path."""
    if not all(type(c) is dict and c.keys() <= _FAST_KEYS for c in retrieved):
        return None
    ids = [c.get("id") for c in retrieved]
    if set(map(type, ids)) - _STR or not all(ids) or list(map(str.strip, ids)) != ids:
        return None
    scores = [c.get("score") for c in retrieved]
    kinds = set(map(type, scores))
    if kinds - _SCORE_TYPES or bool in kinds:
        return None
    if kinds != {float}:
        scores = [None if v is None else float(v) for v in scores]
    if not all(-_INF < v < _INF for v in scores if v is not None):  # NaN fails both comparisons
        return None
    texts = titles = None
    if any("text" in c or "title" in c for c in retrieved):
        texts = [c.get("text") for c in retrieved]
        titles = [c.get("title") for c in retrieved]
        if set(map(type, texts)) - _OPT_STR or set(map(type, titles)) - _OPT_STR:
            return None
        texts, titles = _unless_all_none(texts), _unless_all_none(titles)
    return ids, texts, titles, scores


def _unless_all_none(column: list) -> list | None:
    return None if column.count(None) == len(column) else column


def _columns(chunks: list[tuple[str, str | None, str | None, float | None, bool]]) -> tuple[Columns, list[int]]:
    """Columns of the chunks, and the positions of those that got an id made from their text."""
    if not chunks:
        return ([], None, None, []), []
    ids, texts, titles, scores, made = (list(col) for col in zip(*chunks, strict=True))
    return (ids, _unless_all_none(texts), _unless_all_none(titles), scores), [i for i, m in enumerate(made) if m]


def content_id(text: str) -> str:
    """The stable id of a chunk that came without one: ``sha1:`` and 16 hex digits of its text.
    When redaction finds a value in the text, the redactor replaces this id by a keyed one
    (``privacy.Redactor.content_id``), since this one could be tested against guesses."""
    return "sha1:" + hashlib.sha1(text.encode()).hexdigest()[:16]


def unwrap_chunk(raw: dict) -> dict:
    """The chunk inside the wrappers tools serialise: LangChain's ``dumpd`` constructor
    (``{"lc": 1, "type": "constructor", "kwargs": {...}}``), LlamaIndex's ``NodeWithScore``
    (``{"node": {...}, "score": ...}``) and a node's ``text_resource``."""
    if raw.get("type") == "constructor" and "lc" in raw and isinstance(raw.get("kwargs"), dict):
        raw = raw["kwargs"]
    node = raw.get("node")
    if isinstance(node, dict):
        raw = {**node, "score": raw.get("score", node.get("score"))}
    if "text" not in raw and isinstance(raw.get("text_resource"), dict):
        raw = {**raw, "text": raw["text_resource"].get("text")}
    return raw


def _chunk(raw: Any, i: int) -> tuple[str, str | None, str | None, float | None, bool]:
    """One chunk as ``(id, text, title, score, id made from the text)``."""
    fast = _chunk_fast(raw)
    if fast is not None:
        return (*fast, False)
    where = f"retrieved[{i}]"
    if isinstance(raw, str):
        # a bare context string (Ragas style): identify it by its content
        return content_id(raw), raw, None, None, True
    if not isinstance(raw, dict):
        raise _FieldError(where, f"expected an object with an id, got {type(raw).__name__}")
    raw = unwrap_chunk(raw)
    _, text = _first_set(raw, CHUNK_ALIASES["text"])
    text = text_or_none(text, f"{where}.text")
    _, cid = _first_set(raw, CHUNK_ALIASES["id"])
    if cid is None and isinstance(raw.get("metadata"), dict):
        _, cid = _first_set(raw["metadata"], CHUNK_ALIASES["id"])
    made = False
    if cid is None:
        if text is None:
            raise _FieldError(f"{where}.id", "missing (a chunk needs an id, doc_id or chunk_id, or a text "
                                             "to be identified by; or use --map chunk.id=PATH)")
        cid, made = content_id(text), True
    if isinstance(cid, bool) or not isinstance(cid, str | int):
        raise _FieldError(f"{where}.id", f"expected a string id, got {type(cid).__name__} {cid!r}")
    cid = str(cid).strip()
    if not cid:
        raise _FieldError(f"{where}.id", "is empty")
    _, title = _first_set(raw, CHUNK_ALIASES["title"])
    if title is None and isinstance(raw.get("metadata"), dict):
        _, title = _first_set(raw["metadata"], CHUNK_ALIASES["title"])
        title = title if isinstance(title, str) else None
    _, score = _first_set(raw, CHUNK_ALIASES["score"])
    title = text_or_none(title, f"{where}.title")
    if score is not None:
        if isinstance(score, str):
            try:
                score = float(score)
            except ValueError:
                raise _FieldError(f"{where}.score", f"expected a number, got {score!r}") from None
        if not is_number(score):
            raise _FieldError(f"{where}.score", f"expected a finite number, got {score!r}")
        score = float(score)
    return cid, text, title, score, made


def _first_set(record: dict, names: tuple[str, ...]) -> tuple[str | None, Any]:
    """The first alias present with a value (tools write ``"id": null`` for a missing id)."""
    for name in names:
        if record.get(name) is not None:
            return name, record[name]
    return None, None


# a span id as tracers make them: 8 or 16 random bytes in hex (OpenTelemetry, Phoenix), or a UUID
# (Langfuse, LangSmith); all digits about once in 1,900 ids, and then sometimes a valid card number
_TRACER_ID = re.compile(r"[0-9a-f]{16}|[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)


def validate_log(rec: dict[str, Any]) -> dict[str, Any]:
    """Check a canonical record's types and values; raise _FieldError naming the field."""
    q = rec["question"]
    if q is None:
        raise _FieldError("question", "missing (expected one of: " + ", ".join(LOG_ALIASES["question"])
                          + "; or use --map question=PATH)")
    if not isinstance(q, str):
        raise _FieldError("question", f"expected text, got {type(q).__name__}")
    if not q.strip():
        raise _FieldError("question", "is empty")
    retrieved = rec["retrieved"]
    if retrieved is None:
        raise _FieldError("retrieved", "missing (expected one of: " + ", ".join(LOG_ALIASES["retrieved"])
                          + "; or use --map retrieved=PATH)")
    if not isinstance(retrieved, list):
        raise _FieldError("retrieved", f"expected a list of chunks, got {type(retrieved).__name__}")
    columns = _chunks_fast(retrieved)
    made: list[int] = []
    if columns is None:
        columns, made = _columns([_chunk(raw, i) for i, raw in enumerate(retrieved)])
    ids = columns[0]
    if len(set(ids)) != len(ids):
        seen: dict[str, int] = {}
        for i, cid in enumerate(ids):
            if cid in seen:
                raise _FieldError(f"retrieved[{i}].id",
                                  f"duplicate chunk id {cid!r} (also at retrieved[{seen[cid]}])")
            seen[cid] = i
    qid = rec["query_id"]
    if qid is not None:
        if isinstance(qid, bool) or not isinstance(qid, str | int):
            raise _FieldError("query_id", f"expected a string id, got {type(qid).__name__}")
        qid = str(qid).strip() or None
    retriever = rec["retriever"] or DEFAULT_RETRIEVER
    if not isinstance(retriever, str):
        raise _FieldError("retriever", f"expected text, got {type(retriever).__name__}")
    return {
        "query_id": qid,
        "question": q.strip(),
        # the retrieved chunks as columns: ids, texts and titles (None when no chunk has one), scores
        "ids": ids,
        "texts": columns[1],
        "titles": columns[2],
        "scores": columns[3],
        "answer": text_or_none(rec["answer"], "answer"),
        "timestamp": timestamp(rec["timestamp"]),
        "retriever": retriever,
        "meta": rec.get("meta"),
        "opaque_id": rec.get("opaque_id") is True and qid is not None and _TRACER_ID.fullmatch(qid) is not None,
        "content_ids": len(made),  # chunks whose id was made from their text
        "made_ids": made,  # their positions
    }


def normalize_question(question: str) -> str:
    """Lower-case and collapse white space: the dedupe key of a question."""
    return " ".join(question.lower().split())


def question_key(norm: str) -> int:
    """The 64-bit key of a normalized question (``queries.norm_key``): what ``query_keys`` holds
    for finding a question by its text, rather than the text itself (entries of 8 bytes: a
    fraction of the pages). A lookup finds the keys, then compares the text (``NORM_MATCH``)."""
    return int.from_bytes(hashlib.blake2b(norm.encode(), digest_size=8).digest(), "big", signed=True)


def question_columns(question: str) -> tuple[str, int]:
    """What every writer of ``queries`` stores for a question: ``(norm_question, norm_key)``."""
    norm = normalize_question(question)
    return norm, question_key(norm)


# the queries whose normalized question is one of a list: by key (``query_keys``; rows written
# without one, by hand, have NULL and are found through the ``queries_unkeyed`` index), then by the
# text itself; parameters: ``norm_params(norms)``. (A log ingest's rows get their keys just before
# they become visible: until then they are hidden anyway.)
NORM_MATCH = ("pk IN (SELECT query_pk FROM query_keys WHERE norm_key IN (SELECT value FROM json_each(?)) "
              "UNION ALL SELECT pk FROM queries WHERE norm_key IS NULL) "
              "AND norm_question IN (SELECT value FROM json_each(?))")


def norm_params(norms: list[str]) -> list[str]:
    """The two parameters of ``NORM_MATCH`` for these normalized questions."""
    return [json.dumps([question_key(n) for n in norms]), json.dumps(norms)]


def hash_parts(*parts: Any) -> str:
    return hashlib.sha1(_dumps_sorted(parts)).hexdigest()

