"""Mapping a raw log record to the canonical fields: aliases, ``--map`` paths, and OpenInference
(Arize Phoenix) retriever spans; every unmapped field is kept in ``meta``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..errors import IngestError

# canonical field -> aliases accepted at the top level of a log record (first match wins)
LOG_ALIASES: dict[str, tuple[str, ...]] = {
    "query_id": ("query_id", "qid", "request_id", "trace_id", "id"),
    "question": ("question", "query", "input", "user_input", "user_query"),
    "retrieved": ("retrieved", "contexts", "retrieved_contexts", "documents", "chunks",
                  "retrieved_chunks", "retrieved_documents", "sources"),
    "answer": ("answer", "response", "output", "generated_answer"),
    "timestamp": ("timestamp", "ts", "time", "created_at", "start_time"),
    "retriever": ("retriever",),
}
CHUNK_ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("id", "doc_id", "chunk_id", "document_id", "document.id"),
    "text": ("text", "content", "page_content", "chunk", "document.content"),
    "title": ("title", "document.title"),
    "score": ("score", "relevance_score", "similarity", "document.score"),
    "source": ("source", "url"),
}
LOG_FIELDS = tuple(LOG_ALIASES)
_PHOENIX_DOC = re.compile(r"^(?:attributes\.)?retrieval\.documents\.(\d+)\.document\.(id|content|score|metadata)$")

# --- mapping ------------------------------------------------------------------------------

def parse_mapping(pairs: Iterable[str]) -> dict[str, str]:
    """Parse ``--map question=inputs.query`` options into {canonical field: dotted path}."""
    mapping: dict[str, str] = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise IngestError(f"--map {pair!r}: expected FIELD=PATH, e.g. --map question=inputs.query")
        if name not in LOG_FIELDS:
            raise IngestError(f"--map {pair!r}: unknown field {name!r}; known fields: {', '.join(LOG_FIELDS)}")
        mapping[name] = path
    return mapping


def _get_path(record: dict, path: str) -> Any:
    """Look up a dotted path, preferring a literal key with dots (``input.value``) when present."""
    if path in record:
        return record[path]
    head, dot, rest = path.partition(".")
    while dot:
        value = record.get(head)
        if isinstance(value, dict):
            found = _get_path(value, rest)
            if found is not None:
                return found
        more, dot, rest = rest.partition(".")
        head = f"{head}.{more}"
    return record.get(path)


def _first(record: dict, names: tuple[str, ...]) -> tuple[str | None, Any]:
    for name in names:
        if name in record:
            return name, record[name]
    return None, None


def _is_phoenix(record: dict) -> bool:
    attrs = record.get("attributes")
    keys = attrs.keys() if isinstance(attrs, dict) else record.keys()
    return any(k.startswith("retrieval.documents") or k.startswith("attributes.retrieval.documents")
               for k in keys) or (isinstance(attrs, dict) and isinstance(attrs.get("retrieval"), dict))


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                out.update(_flatten(v, key + "."))
            else:
                out[key] = v
    return out


def _phoenix(record: dict) -> dict[str, Any]:
    """Map an OpenInference retriever span (Phoenix export) to the canonical record."""
    flat = _flatten(record)
    docs: dict[int, dict[str, Any]] = {}
    listed = None
    for key, value in flat.items():
        m = _PHOENIX_DOC.match(key)
        if m:
            docs.setdefault(int(m.group(1)), {})[m.group(2)] = value
        elif key.endswith("retrieval.documents") and isinstance(value, list):
            listed = value
    if listed is not None:
        retrieved = [_flatten(d).get("document.id") and {
            "id": _flatten(d).get("document.id"), "text": _flatten(d).get("document.content"),
            "score": _flatten(d).get("document.score")} or d for d in listed]
    else:
        retrieved = [{"id": d.get("id"), "text": d.get("content"), "score": d.get("score")}
                     for _, d in sorted(docs.items())]
    question = flat.get("attributes.input.value", flat.get("input.value"))
    span_id = flat.get("context.span_id", flat.get("span_id"))
    used = {"attributes", "context", "span_id"}
    return {
        "query_id": span_id,
        "question": question,
        "retrieved": retrieved,
        "timestamp": flat.get("start_time"),
        "retriever": None,
        "answer": None,
        "meta": {k: v for k, v in record.items() if k not in used},
    }


_SHAPES: dict[tuple[str, ...], tuple[tuple[tuple[str, str | None], ...], frozenset[str]]] = {}


def canonical(record: dict, mapping: dict[str, str] | None = None) -> dict[str, Any]:
    """Map a raw record to canonical fields (unvalidated); unmapped fields go to ``meta``."""
    if not mapping:
        # records of one log share their keys: resolve the aliases once per shape
        shape = tuple(record)
        known = _SHAPES.get(shape)
        if known is not None:
            fields, used_keys = known
            out = {name: (record[key] if key is not None else None) for name, key in fields}
            out["meta"] = {k: v for k, v in record.items() if k not in used_keys} or None
            return out
        if not any(k in record for k in LOG_ALIASES["question"]) and _is_phoenix(record):
            return _phoenix(record)
        resolved = tuple((name, _first(record, LOG_ALIASES[name])[0]) for name in LOG_FIELDS)
        if len(_SHAPES) < 1000:
            _SHAPES[shape] = (resolved, frozenset(k for _, k in resolved if k is not None))
    if mapping is None:
        mapping = {}
    out: dict[str, Any] = {}
    used: set[str] = set()
    for name in LOG_FIELDS:
        if name in mapping:
            path = mapping[name]
            out[name] = _get_path(record, path)
            used.add(path.split(".", 1)[0])
        else:
            key, value = _first(record, LOG_ALIASES[name])
            out[name] = value
            if key:
                used.add(key)
    meta = {k: v for k, v in record.items() if k not in used}
    out["meta"] = meta or None
    return out

