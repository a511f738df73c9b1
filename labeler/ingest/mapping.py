"""Mapping a plain log record to the canonical fields through aliases and ``--map`` paths (record
fields, and chunk fields as ``chunk.id=metadata.source``); every unmapped field is kept in ``meta``.
The records that tools write (spans, runs) are recognised first, in ``formats``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import IngestError
from ..signals import MAPPED_KEY, SIGNALS

# canonical field -> aliases accepted at the top level of a log record (first match wins)
LOG_ALIASES: dict[str, tuple[str, ...]] = {
    "query_id": ("query_id", "qid", "request_id", "trace_id", "id"),
    "question": ("question", "query", "input", "user_input", "user_query"),
    "retrieved": ("retrieved", "contexts", "retrieved_contexts", "documents", "chunks",
                  "retrieved_chunks", "retrieved_documents", "sources", "source_nodes", "nodes"),
    "answer": ("answer", "response", "output", "generated_answer"),
    "timestamp": ("timestamp", "ts", "time", "created_at", "start_time"),
    "retriever": ("retriever",),
}
CHUNK_ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("id", "doc_id", "chunk_id", "document_id", "document.id", "id_", "node_id"),
    "text": ("text", "content", "page_content", "chunk", "document.content"),
    "title": ("title", "document.title"),
    "score": ("score", "relevance_score", "similarity", "document.score"),
    "source": ("source", "url"),
}
LOG_FIELDS = tuple(LOG_ALIASES)
CHUNK_FIELDS = ("id", "text", "title", "score")
# outcome signals (labeler.signals): --map signal.NAME=PATH keeps PATH's value in meta["_signals"]
SIGNAL_FIELDS = SIGNALS

# --- mapping ------------------------------------------------------------------------------

def parse_mapping(pairs: Iterable[str]) -> dict[str, str]:
    """Parse ``--map question=inputs.query`` options into {canonical field: dotted path}; a chunk
    field is named ``chunk.FIELD`` and its path is looked up inside each retrieved chunk."""
    mapping: dict[str, str] = {}
    known = [*LOG_FIELDS, *(f"chunk.{f}" for f in CHUNK_FIELDS), *(f"signal.{s}" for s in SIGNAL_FIELDS)]
    for pair in pairs:
        name, sep, path = pair.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise IngestError(f"--map {pair!r}: expected FIELD=PATH, e.g. --map question=inputs.query")
        if name not in known:
            raise IngestError(f"--map {pair!r}: unknown field {name!r}; known fields: {', '.join(known)}")
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


def first_value(record: dict, names: tuple[str, ...]) -> tuple[str | None, Any]:
    for name in names:
        if name in record:
            return name, record[name]
    return None, None


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
        resolved = tuple((name, first_value(record, LOG_ALIASES[name])[0]) for name in LOG_FIELDS)
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
            key, value = first_value(record, LOG_ALIASES[name])
            out[name] = value
            if key:
                used.add(key)
    out["retrieved"] = map_chunks(out["retrieved"], mapping)
    meta = {k: v for k, v in record.items() if k not in used}
    signals = {n[7:]: v for n, p in mapping.items() if n.startswith("signal.") and (v := _get_path(record, p)) is not None}
    if signals:
        meta[MAPPED_KEY] = signals
    out["meta"] = meta or None
    return out


def map_chunks(retrieved: Any, mapping: dict[str, str]) -> Any:
    """Apply the ``chunk.FIELD=PATH`` mappings to each chunk that is an object: the value at PATH
    becomes the chunk's FIELD (a chunk without that path keeps what it had)."""
    paths = {name[6:]: path for name, path in mapping.items() if name.startswith("chunk.")}
    if not paths or not isinstance(retrieved, list):
        return retrieved
    out = []
    for chunk in retrieved:
        if isinstance(chunk, dict):
            found = {f: v for f, p in paths.items() if (v := _get_path(chunk, p)) is not None}
            chunk = {**chunk, **found} if found else chunk
        out.append(chunk)
    return out

