"""Ingest production query logs and corpus files into the store, validated, deduplicated, idempotent.

A log record is mapped to the canonical shape ``{"query_id"?, "question", "retrieved": [{"id",
"text"?, "score"?, "title"?}], "answer"?, "timestamp"?, "retriever"?}`` through field aliases,
``--map`` paths, or OpenInference (Arize Phoenix) retriever-span detection; every unmapped field is
kept in ``meta``. Records are written in batches inside one transaction per file: in strict mode
(the default) one bad record means nothing from the file is written; in lenient mode the valid
records are written and the rejects go to ``FILE.rejects.jsonl`` with their reasons.

Deduplication: a record with a ``query_id`` seen before with identical content changes nothing; with
different content it is an error naming both places. Without an id, records with the same
normalized question and the same retrieved list merge into one query whose ``occurrences`` counts
the distinct log lines (a line is identified by its content plus its ordinal among identical lines
of its file), so re-ingesting a file changes nothing.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import json
import multiprocessing
import os
import queue
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import sqlite_utils

from . import accounts
from . import db as store
from .errors import IngestError
from .readers import MAX_LINE_BYTES, BadRecord, detect_format, is_number, iter_records
from .readers import dumps_sorted as _dumps_sorted

MAX_ERRORS_SHOWN = 20
BATCH = 2000
DEFAULT_RETRIEVER = "production"

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


@dataclass
class Problem:
    """One rejected record: where it is and what is wrong with which field."""

    path: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.field}: {self.message}"


class ProblemList:
    """Mixin of the result records that carry ``problems``: ``to_dict`` shows them as text."""

    problems: list[Problem]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)  # type: ignore[call-overload]
        d["problems"] = [str(p) for p in self.problems]
        return d


class FieldError(Exception):
    """A record's ``field`` is wrong; becomes a ``Problem`` with the record's place."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message


_FieldError = FieldError


@dataclass
class IngestResult(ProblemList):
    """What one file did to the store. ``new + merged + unchanged + rejected == records``."""

    path: str
    kind: str
    format: str
    records: int = 0
    new: int = 0
    merged: int = 0
    unchanged: int = 0
    rejected: int = 0
    retrievals: int = 0
    documents_new: int = 0
    documents_updated: int = 0
    documents_without_text: int = 0
    rejects_path: str | None = None
    problems: list[Problem] = field(default_factory=list)


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


# --- validation ---------------------------------------------------------------------------

def _text_or_none(v: Any, fld: str) -> str | None:
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


def _columns(chunks: list[tuple[str, str | None, str | None, float | None]]) -> Columns:
    if not chunks:
        return [], None, None, []
    ids, texts, titles, scores = (list(col) for col in zip(*chunks, strict=True))
    return ids, _unless_all_none(texts), _unless_all_none(titles), scores


def _chunk(raw: Any, i: int) -> tuple[str, str | None, str | None, float | None]:
    fast = _chunk_fast(raw)
    if fast is not None:
        return fast
    where = f"retrieved[{i}]"
    if isinstance(raw, str):
        # a bare context string (Ragas style): identify it by its content
        return "sha1:" + hashlib.sha1(raw.encode()).hexdigest()[:16], raw, None, None
    if not isinstance(raw, dict):
        raise _FieldError(where, f"expected an object with an id, got {type(raw).__name__}")
    _, cid = _first(raw, CHUNK_ALIASES["id"])
    if cid is None and isinstance(raw.get("metadata"), dict):
        _, cid = _first(raw["metadata"], CHUNK_ALIASES["id"])
    if cid is None:
        raise _FieldError(f"{where}.id", "missing (a chunk needs an id, doc_id or chunk_id)")
    if isinstance(cid, bool) or not isinstance(cid, str | int):
        raise _FieldError(f"{where}.id", f"expected a string id, got {type(cid).__name__} {cid!r}")
    cid = str(cid).strip()
    if not cid:
        raise _FieldError(f"{where}.id", "is empty")
    _, text = _first(raw, CHUNK_ALIASES["text"])
    _, title = _first(raw, CHUNK_ALIASES["title"])
    _, score = _first(raw, CHUNK_ALIASES["score"])
    text = _text_or_none(text, f"{where}.text")
    title = _text_or_none(title, f"{where}.title")
    if score is not None:
        if isinstance(score, str):
            try:
                score = float(score)
            except ValueError:
                raise _FieldError(f"{where}.score", f"expected a number, got {score!r}") from None
        if not is_number(score):
            raise _FieldError(f"{where}.score", f"expected a finite number, got {score!r}")
        score = float(score)
    return cid, text, title, score


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
        retrieved = []
    if not isinstance(retrieved, list):
        raise _FieldError("retrieved", f"expected a list of chunks, got {type(retrieved).__name__}")
    columns = _chunks_fast(retrieved)
    if columns is None:
        columns = _columns([_chunk(raw, i) for i, raw in enumerate(retrieved)])
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
    ts = rec["timestamp"]
    if ts is not None and not isinstance(ts, str):
        ts = str(ts)
    return {
        "query_id": qid,
        "question": q.strip(),
        # the retrieved chunks as columns: ids, texts and titles (None when no chunk has one), scores
        "ids": ids,
        "texts": columns[1],
        "titles": columns[2],
        "scores": columns[3],
        "answer": _text_or_none(rec["answer"], "answer"),
        "timestamp": ts,
        "retriever": retriever,
        "meta": rec.get("meta"),
    }


def normalize_question(question: str) -> str:
    """Lower-case and collapse white space: the dedupe key of a question."""
    return " ".join(question.lower().split())


def _hash(*parts: Any) -> str:
    return hashlib.sha1(_dumps_sorted(parts)).hexdigest()


# --- writing ------------------------------------------------------------------------------

class _Row(NamedTuple):  # a tuple: cheap to pass from the parsing process
    line: int
    rec: dict[str, Any]
    query_id: str
    content_hash: str
    line_key: str | None


class _LogWriter:
    """Writes validated log records batch by batch inside the caller's transaction."""

    def __init__(self, db: sqlite_utils.Database, path: str, result: IngestResult):
        self.db, self.path, self.result = db, path, result
        self.conn = db.conn
        self.created = store.now()
        # doc_id -> pk of the documents already resolved in this file, and the ones among them still
        # without text; bounded so memory stays flat
        self.doc_pk: dict[str, int] = {}
        self.no_text: set[str] = set()
        # the caller holds the write lock (BEGIN IMMEDIATE), so the next keys can be given here
        # instead of read back after each insert
        self.next_query_pk = self._next_pk("queries")
        self.next_doc_pk = self._next_pk("documents")
        self.all_resolved = True  # every row so far had its chunks resolved into doc_pk

    def _next_pk(self, table: str) -> int:
        # table is one of two fixed names, never user text
        return int(self.conn.execute(f"SELECT coalesce(max(pk), 0) + 1 FROM {table}").fetchone()[0])

    def _resolve_docs(self, rows: list[_Row], candidates: list[str] | None) -> None:
        """Make ``doc_pk`` know every chunk of ``rows``: look up the unknown ids, insert the new
        documents (first seen first), and fill in the text of a document logged without it before.
        ``candidates``: a list (in first-seen order) known to hold every chunk id of ``rows`` that
        ``doc_pk`` may lack; None to check every id."""
        doc_pk, no_text = self.doc_pk, self.no_text
        if len(doc_pk) > 1_000_000:
            doc_pk.clear()
            no_text.clear()
            self.all_resolved = False
            candidates = None
        if candidates is None:
            candidates = dict.fromkeys(itertools.chain.from_iterable(r.rec["ids"] for r in rows))
        unknown = list(itertools.filterfalse(doc_pk.__contains__, candidates))
        # a chunk logged with text in one line and without in another keeps its text
        texts = {cid: (text, title) for r in rows if r.rec["texts"] is not None
                 for cid, text, title in zip(r.rec["ids"], r.rec["texts"], r.rec["titles"] or itertools.repeat(None),
                                                 strict=False)
                 if text is not None}
        if not unknown and not (texts and no_text):
            return
        # a chunk logged with a title but no text still names its new document
        titles = {cid: title for r in rows if r.rec["titles"] is not None and unknown
                  for cid, title in zip(r.rec["ids"], r.rec["titles"], strict=True) if title is not None}
        lookup = unknown + [cid for cid in texts if cid in no_text]
        found: dict[str, bool] = {}  # doc_id -> stored without text
        if lookup:
            for pk, doc_id, missing in self.conn.execute(
                "SELECT pk, doc_id, text IS NULL FROM documents WHERE doc_id IN (SELECT value FROM json_each(?))",
                [json.dumps(lookup)],
            ):
                doc_pk[doc_id] = pk
                found[doc_id] = bool(missing)
        new = []
        for cid in unknown:
            if cid in found:
                continue
            pk = self.next_doc_pk
            self.next_doc_pk += 1
            text, title = texts.get(cid, (None, None))
            new.append((pk, cid, text, title if title is not None else titles.get(cid), self.created))
            doc_pk[cid] = pk
            if text is None:
                no_text.add(cid)
        fill = [(t, ti, doc_pk[cid]) for cid, (t, ti) in texts.items() if found.get(cid)]
        if new:
            self.conn.executemany(
                "INSERT INTO documents (pk, doc_id, text, title, created_at) VALUES (?, ?, ?, ?, ?)", new)
            self.result.documents_new += len(new)
        if fill:
            self.conn.executemany(
                "UPDATE documents SET text = ?, title = coalesce(title, ?) WHERE pk = ?", fill)
            self.result.documents_updated += len(fill)
        for cid, missing in found.items():
            if missing and cid not in texts:
                no_text.add(cid)
            else:
                no_text.discard(cid)
        no_text.difference_update(texts)

    def write(self, batch: list[_Row], problems: list[Problem], write: bool,
              fresh_ids: list[str] | None = None) -> list[tuple[int, Problem]]:
        """Classify each row as new/merged/unchanged or a conflict; write when ``write`` is true.
        ``fresh_ids``: the chunk ids of ``batch`` that no earlier batch of the file had."""
        conn = self.conn
        ids = list({r.query_id for r in batch})
        existing: dict[str, tuple[int, str]] = {
            qid: (pk, q) for pk, qid, q in conn.execute(
                "SELECT pk, query_id, question FROM queries WHERE query_id IN (SELECT value FROM json_each(?))",
                [json.dumps(ids)])
        }
        versions: dict[tuple[int, str], tuple[str, str]] = {}
        if existing:
            for pk, retriever, chash, source in conn.execute(
                "SELECT query_pk, retriever, content_hash, source FROM query_versions "
                "WHERE query_pk IN (SELECT value FROM json_each(?))",
                [json.dumps([v[0] for v in existing.values()])],
            ):
                versions[(pk, retriever)] = (chash, source)
        seen_keys: set[str] = set()
        keyed = [r.line_key for r in batch if r.line_key]
        if keyed:
            seen_keys = {k for (k,) in conn.execute(
                "SELECT line_key FROM log_lines WHERE line_key IN (SELECT value FROM json_each(?))",
                [json.dumps(keyed)])}
        rejected: list[tuple[int, Problem]] = []
        pending_versions: dict[tuple[str, str], tuple[str, str]] = {}
        batch_questions: dict[str, str] = {}
        new_queries: list[_Row] = []
        new_versions: list[_Row] = []
        new_lines: list[_Row] = []
        bumps: list[_Row] = []  # rows that add one occurrence to an existing query
        for r in batch:
            rec = r.rec
            known = existing.get(r.query_id)
            vkey = (r.query_id, rec["retriever"])
            prior = pending_versions.get(vkey)
            if prior is None and known is not None:
                prior = versions.get((known[0], rec["retriever"]))
            if prior is not None:
                if prior[0] != r.content_hash:
                    rejected.append((r.line, Problem(
                        self.path, r.line, "query_id",
                        f"{r.query_id!r} was already ingested from {prior[1]} with different content "
                        "(question, answer or retrieved list); give it a new query_id")))
                elif r.line_key is None or r.line_key in seen_keys:
                    self.result.unchanged += 1
                else:
                    seen_keys.add(r.line_key)
                    new_lines.append(r)
                    bumps.append(r)
                    self.result.merged += 1
                continue
            question = known[1] if known is not None else batch_questions.get(r.query_id)
            if question is not None and question != rec["question"]:
                rejected.append((r.line, Problem(self.path, r.line, "query_id",
                                 f"{r.query_id!r} already exists with another question")))
                continue
            pending_versions[vkey] = (r.content_hash, f"{self.path}:{r.line}")
            new_versions.append(r)
            if r.line_key is not None:
                seen_keys.add(r.line_key)
                new_lines.append(r)
            if question is None:
                batch_questions[r.query_id] = rec["question"]
                new_queries.append(r)
                self.result.new += 1
            else:
                self.result.merged += 1
                if r.line_key is not None:
                    bumps.append(r)
        if not write:
            self.all_resolved = False
            return rejected
        if new_queries:
            first = self.next_query_pk
            self.next_query_pk += len(new_queries)
            conn.executemany(
                "INSERT INTO queries (pk, query_id, question, norm_question, origin, answer, occurrences, "
                "first_seen, last_seen, meta, source, created_at) VALUES (?, ?, ?, ?, 'log', ?, 1, ?, ?, ?, ?, ?)",
                [(pk, r.query_id, r.rec["question"], normalize_question(r.rec["question"]), r.rec["answer"],
                  r.rec["timestamp"], r.rec["timestamp"],
                  store.dumps(r.rec["meta"]) if r.rec["meta"] else None,
                  f"{self.path}:{r.line}", self.created) for pk, r in enumerate(new_queries, first)])
            pks = {r.query_id: pk for pk, r in enumerate(new_queries, first)}
        else:
            pks = {}
        pks.update((qid, v[0]) for qid, v in existing.items())
        if new_versions:
            # while every earlier row of the file had its chunks resolved, an id no earlier batch
            # had is the only kind doc_pk can lack: check just those
            self._resolve_docs(new_versions, fresh_ids if self.all_resolved else None)
            docs = self.doc_pk
        if len(new_versions) < len(batch):
            self.all_resolved = False
        if new_versions:
            conn.executemany(
                "INSERT INTO query_versions (query_pk, retriever, content_hash, source) VALUES (?, ?, ?, ?)",
                [(pks[r.query_id], r.rec["retriever"], r.content_hash, f"{self.path}:{r.line}")
                 for r in new_versions])
            # the rows are zipped from columns in C rather than built one by one
            lengths = [len(r.rec["ids"]) for r in new_versions]
            chain, repeat = itertools.chain.from_iterable, itertools.repeat
            retrievers = {r.rec["retriever"] for r in new_versions}
            conn.executemany(
                "INSERT INTO retrievals (query_pk, retriever, rank, doc_pk, score) VALUES (?, ?, ?, ?, ?)",
                zip(chain(map(repeat, [pks[r.query_id] for r in new_versions], lengths)),
                    repeat(retrievers.pop()) if len(retrievers) == 1 else
                    chain(map(repeat, [r.rec["retriever"] for r in new_versions], lengths)),
                    chain(map(range, repeat(1), [n + 1 for n in lengths])),
                    map(docs.__getitem__, chain(r.rec["ids"] for r in new_versions)),
                    chain(r.rec["scores"] for r in new_versions), strict=False))  # a repeat() is endless
            self.result.retrievals += sum(lengths)
        if new_lines:
            conn.executemany("INSERT INTO log_lines (line_key, query_pk) VALUES (?, ?)",
                             [(r.line_key, pks[r.query_id]) for r in new_lines])
        touched = bumps
        if touched:
            conn.executemany(
                "UPDATE queries SET occurrences = occurrences + 1, "
                "first_seen = CASE WHEN first_seen IS NULL OR ?1 < first_seen THEN ?1 ELSE first_seen END, "
                "last_seen = CASE WHEN last_seen IS NULL OR ?1 > last_seen THEN ?1 ELSE last_seen END, "
                "answer = coalesce(answer, ?2) WHERE pk = ?3",
                [(r.rec["timestamp"], r.rec["answer"], pks[r.query_id]) for r in touched])
        return rejected


class _Keyer:
    """Gives each validated record its query id, content hash and (without an id) line key."""

    def __init__(self) -> None:
        self.ordinals: dict[str, int] = {}

    def key(self, line: int, rec: dict[str, Any]) -> _Row:
        content = _hash(rec["question"], rec["answer"], list(zip(rec["ids"], rec["scores"], strict=True)))
        if rec["query_id"] is not None:
            return _Row(line, rec, rec["query_id"], content, None)
        norm = normalize_question(rec["question"])
        qid = "q-" + _hash(norm, rec["retriever"], rec["ids"])[:16]
        raw = _hash(content, rec["timestamp"], rec["meta"])
        n = self.ordinals.get(raw, 0)
        self.ordinals[raw] = n + 1
        # without an id, a different answer or score is another occurrence, never a conflict
        return _Row(line, rec, qid, qid, f"{raw}#{n}")



def _parsed_batches(path: Path, fmt: str, gz: bool, mapping: dict[str, str] | None, max_line_bytes: int,
                    keep_raw: bool) -> Iterator[tuple[list[tuple], int, list[str]]]:
    """Read, map, validate and key the records of a file, in batches of
    ``(line, row or None, (field, message) or None, raw or None)``, with the bytes read so far and
    the chunk ids that no earlier batch of the file had (first seen first)."""
    records, bytes_read = iter_records(path, fmt, gz, max_line_bytes=max_line_bytes)
    keyer = _Keyer()
    batch: list[tuple] = []
    seen: set[str] = set()

    def done() -> tuple[list[tuple], int, list[str]]:
        order = dict.fromkeys(itertools.chain.from_iterable(item[1].rec["ids"] for item in batch
                                                            if item[1] is not None))
        fresh = list(itertools.filterfalse(seen.__contains__, order))
        if len(seen) > 1_000_000:
            seen.clear()  # only makes later lists longer than needed, never shorter
        seen.update(fresh)
        return batch, bytes_read(), fresh

    for line, raw in records:
        if isinstance(raw, BadRecord):
            batch.append((line, None, (raw.field, raw.message), raw.raw))
        else:
            try:
                row = keyer.key(line, validate_log(canonical(raw, mapping)))
                batch.append((line, row, None, raw if keep_raw else None))
            except _FieldError as e:
                batch.append((line, None, (e.field, e.message), raw))
        if len(batch) >= BATCH:
            yield done()
            batch = []
    yield done()


# files at least this big are parsed in a second process while this one writes (when it may fork)
PARALLEL_MIN_BYTES = 4 * 1024 * 1024
_QUEUED_BATCHES = 4  # batches in flight between the processes: bounds the memory


def _may_fork() -> bool:
    """Forking is safe only from a single-threaded process (the CLI; not the Streamlit server), and
    only done on Linux (macOS frameworks are not fork-safe, which is why Python spawns there)."""
    return (sys.platform.startswith("linux") and (os.cpu_count() or 1) > 1
            and threading.active_count() == 1)


def _produce(out: Any, args: tuple) -> None:
    gc.disable()
    try:
        for item in _parsed_batches(*args):
            out.put(("batch", item))
        out.put(("done", None))
    except BaseException as e:  # noqa: BLE001 - everything is handed to the parent to raise
        try:
            out.put(("error", e))
        except Exception:  # noqa: BLE001 - an exception that cannot be pickled
            out.put(("error", IngestError(f"{type(e).__name__}: {e}")))


def _parsed_batches_forked(*args: Any) -> Iterator[tuple[list[tuple], int]]:
    """``_parsed_batches`` run in a forked child process, so that reading, JSON parsing, validation
    and hashing (half the work) run on another core while this process writes. The batches
    arrive in file order, so the result is the same as in one process."""
    ctx = multiprocessing.get_context("fork")
    channel = ctx.Queue(maxsize=_QUEUED_BATCHES)
    child = ctx.Process(target=_produce, args=(channel, args), daemon=True, name="labeler-parse")
    child.start()
    try:
        while True:
            try:
                kind, payload = channel.get(timeout=1.0)
            except queue.Empty:
                if not child.is_alive():
                    raise IngestError(f"the parsing process stopped unexpectedly (exit code {child.exitcode})") \
                        from None
                continue
            if kind == "batch":
                yield payload
            elif kind == "error":
                raise payload
            else:
                return
    finally:
        if child.is_alive():
            child.terminate()
        child.join()
        channel.close()


BULK_CACHE_KIB = 64 * 1024


@contextlib.contextmanager
def _bulk(db: sqlite_utils.Database) -> Iterator[None]:
    """Settings for a bulk load, restored afterwards: a 64 MiB page cache (the default 2 MiB keeps
    re-reading the index pages that random keys touch; bounded, so memory stays flat however big
    the file), and no cyclic garbage collection (a batch is millions of small acyclic objects,
    freed by reference counting; the collector re-scanning them cost a quarter of the time)."""
    conn = db.conn
    cache = conn.execute("PRAGMA cache_size").fetchone()[0]
    gc_was_on = gc.isenabled()
    conn.execute(f"PRAGMA cache_size = -{BULK_CACHE_KIB}")
    gc.disable()
    try:
        yield
    finally:
        if gc_was_on:
            gc.enable()
        conn.execute(f"PRAGMA cache_size = {int(cache)}")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_path(path: Path) -> None:
    if not path.exists():
        raise IngestError(f"{path}: no such file")
    if path.is_dir():
        raise IngestError(f"{path}: is a folder; give a file")


def check_problems(path: Path, shown: str, result: Any, lenient: bool, rejects: list[dict]) -> None:
    """The rules every file reader shares: an empty file is an error; in strict mode any problem is
    an error listing up to 20 of them (the caller rolls back); in lenient mode the rejects go to
    ``FILE.rejects.jsonl``. Sets ``result.rejected`` (and ``rejects_path``)."""
    if result.records == 0 and not result.problems:
        raise IngestError(f"{shown}: empty file: no records found")
    if result.problems and not lenient:
        listed = "\n".join(str(p) for p in result.problems[:MAX_ERRORS_SHOWN])
        more = len(result.problems) - MAX_ERRORS_SHOWN
        tail = f"\n... and {more} more" if more > 0 else ""
        raise IngestError(
            f"{shown}: {len(result.problems)} invalid record(s); nothing was written "
            f"(fix them, or pass --lenient to write the valid ones):\n{listed}{tail}",
            result.problems, len(result.problems))
    if rejects:
        rejects_path = Path(str(path) + ".rejects.jsonl")
        with open(rejects_path, "w", encoding="utf-8") as f:
            for r in rejects:
                f.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")
        result.rejects_path = str(rejects_path)
    result.rejected = len(result.problems)


def _finish(db: sqlite_utils.Database, path: Path, kind: str, fmt: str, result: IngestResult,
            lenient: bool, rejects: list[dict], shown: str) -> IngestResult:
    check_problems(path, shown, result, lenient, rejects)
    counts = {k: v for k, v in result.to_dict().items() if isinstance(v, int)}
    db.conn.execute(
        "INSERT INTO ingests (kind, path, sha256, format, counts, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        [kind, shown, _sha256(path), fmt, store.dumps(counts), store.now()])
    return result


def ingest_logs(db: sqlite_utils.Database, path: str | Path, *, fmt: str | None = None,
                mapping: dict[str, str] | None = None, lenient: bool = False,
                progress: Callable[[int, int], None] | None = None,
                max_line_bytes: int = MAX_LINE_BYTES, name: str | None = None,
                parallel: bool | None = None, by: str | None = None) -> IngestResult:
    """Ingest one production log file; see the module docstring for the rules.

    Raises ``IngestError`` (listing up to 20 problems as ``FILE:LINE: field: message``) when the
    file cannot be read, is empty, or, in strict mode, has any invalid record; then nothing is
    written. ``progress(done_bytes, total_bytes)`` is called as the file is read. ``name`` is
    how the file is called in messages (default: its path), e.g. an uploaded file's own name.
    ``parallel``: parse in a second process while this one writes (same result); by default
    when the file is 4 MiB or more and this process is single-threaded with a spare core.
    ``by``: the signed-in account (the app); ingesting is for leads (``None``: the local operator).
    """
    accounts.require(db, by, "lead", "ingesting a file")
    path = Path(path)
    _check_path(path)
    fmt, gz = detect_format(path, fmt)
    shown = name or str(path)
    result = IngestResult(path=shown, kind="logs", format=fmt)
    total = path.stat().st_size
    writer = _LogWriter(db, shown, result)
    rejects: list[dict] = []

    def reject(line: int, problem: Problem, raw: Any) -> None:
        result.problems.append(problem)
        if lenient:
            rejects.append({"line": line, "field": problem.field, "error": problem.message,
                            "record": raw})

    if parallel is None:
        parallel = total >= PARALLEL_MIN_BYTES and _may_fork()
    parallel = parallel and "fork" in multiprocessing.get_all_start_methods()  # not on Windows
    batches = _parsed_batches_forked if parallel else _parsed_batches
    with _bulk(db), store.transaction(db, check_foreign_keys=False):
        for items, done_bytes, fresh_ids in batches(path, fmt, gz, mapping, max_line_bytes, lenient):
            rows: list[_Row] = []
            raws: dict[int, Any] = {}
            for line, row, problem, raw in items:
                result.records += 1
                if problem is not None:
                    reject(line, Problem(shown, line, *problem), raw)
                    continue
                rows.append(row)
                if lenient:
                    raws[line] = raw
            clean = not result.problems or lenient
            for line, problem in writer.write(rows, result.problems, write=clean, fresh_ids=fresh_ids):
                reject(line, problem, raws.get(line))
            if progress:
                progress(done_bytes, total)
        if progress:
            progress(total, total)
        if result.records:
            result.documents_without_text = db.execute(
                "SELECT count(*) FROM documents WHERE text IS NULL").fetchone()[0]
        return _finish(db, path, "logs", fmt, result, lenient, rejects, shown)


CORPUS_ALIASES = {
    "id": CHUNK_ALIASES["id"],
    "text": CHUNK_ALIASES["text"] + ("body", "abstract"),
    "title": ("title", "name"),
    "source": ("source", "url", "path"),
}


def _corpus_record(raw: dict) -> tuple[str, str, str | None, str | None, dict | None]:
    used = set()
    values = {}
    for name, aliases in CORPUS_ALIASES.items():
        key, value = _first(raw, aliases)
        values[name] = value
        if key:
            used.add(key)
    cid = values["id"]
    if cid is None:
        raise _FieldError("id", "missing (expected one of: " + ", ".join(CORPUS_ALIASES["id"]) + ")")
    if isinstance(cid, bool) or not isinstance(cid, str | int):
        raise _FieldError("id", f"expected a string id, got {type(cid).__name__}")
    cid = str(cid).strip()
    if not cid:
        raise _FieldError("id", "is empty")
    text = values["text"]
    if not isinstance(text, str) or not text.strip():
        raise _FieldError("text", "missing or empty" if text in (None, "") else
                          f"expected text, got {type(text).__name__}")
    title = _text_or_none(values["title"], "title")
    source = _text_or_none(values["source"], "source")
    meta = {k: v for k, v in raw.items() if k not in used and k != "metadata"}
    if isinstance(raw.get("metadata"), dict):
        meta.update(raw["metadata"])
    return cid, text, title, source, meta or None


def ingest_corpus(db: sqlite_utils.Database, path: str | Path, *, fmt: str | None = None,
                  lenient: bool = False, progress: Callable[[int, int], None] | None = None,
                  name: str | None = None, by: str | None = None) -> IngestResult:
    """Ingest a corpus file (records with id, text, title?, source?) into ``documents``.

    The corpus is authoritative: its text replaces text seen in logs. The same id twice in one
    file is an error naming both lines. Same strict/lenient rules as ``ingest_logs``.
    ``by``: the signed-in account; ingesting is for leads (``None``: the local operator).
    """
    accounts.require(db, by, "lead", "ingesting a file")
    path = Path(path)
    _check_path(path)
    fmt, gz = detect_format(path, fmt)
    shown = name or str(path)
    result = IngestResult(path=shown, kind="corpus", format=fmt)
    records, bytes_read = iter_records(path, fmt, gz)
    total = path.stat().st_size
    rejects: list[dict] = []
    conn = db.conn
    created = store.now()
    with store.transaction(db):
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS corpus_seen (doc_id TEXT PRIMARY KEY, line INTEGER)")
        conn.execute("DELETE FROM corpus_seen")
        for line, raw in _progress(records, progress, bytes_read, total):
            result.records += 1
            try:
                if isinstance(raw, BadRecord):
                    raise _FieldError(raw.field, raw.message)
                cid, text, title, source, meta = _corpus_record(raw)
                prev = conn.execute("SELECT line FROM corpus_seen WHERE doc_id = ?", [cid]).fetchone()
                if prev:
                    raise _FieldError("id", f"duplicate id {cid!r} (first at {shown}:{prev[0]})")
            except _FieldError as e:
                result.problems.append(Problem(shown, line, e.field, e.message))
                if lenient:
                    rejects.append({"line": line, "field": e.field, "error": e.message,
                                    "record": raw if isinstance(raw, dict) else raw.raw})
                continue
            conn.execute("INSERT INTO corpus_seen VALUES (?, ?)", [cid, line])
            if result.problems and not lenient:
                continue
            old = conn.execute("SELECT text, title, source, in_corpus FROM documents WHERE doc_id = ?",
                               [cid]).fetchone()
            meta_json = store.dumps(meta) if meta else None
            if old is None:
                conn.execute("INSERT INTO documents (doc_id, text, title, source, meta, in_corpus, created_at) "
                             "VALUES (?, ?, ?, ?, ?, 1, ?)", [cid, text, title, source, meta_json, created])
                result.new += 1
                result.documents_new += 1
            elif tuple(old) == (text, title, source, 1):
                result.unchanged += 1
            else:
                conn.execute("UPDATE documents SET text = ?, title = coalesce(?, title), "
                             "source = coalesce(?, source), meta = coalesce(?, meta), in_corpus = 1 "
                             "WHERE doc_id = ?", [text, title, source, meta_json, cid])
                result.merged += 1
                result.documents_updated += 1
        result.documents_without_text = conn.execute(
            "SELECT count(*) FROM documents WHERE text IS NULL").fetchone()[0]
        return _finish(db, path, "corpus", fmt, result, lenient, rejects, shown)


def _progress(records: Iterator, progress: Callable[[int, int], None] | None,
              bytes_read: Callable[[], int], total: int) -> Iterator:
    for i, item in enumerate(records, 1):
        yield item
        if progress and i % 1000 == 0:
            progress(bytes_read(), total)
    if progress:
        progress(total, total)
