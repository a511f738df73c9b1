"""Ingesting a corpus file: chunk ids with their text, title and source (authoritative)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import sqlite_utils

from .. import db as store
from .. import privacy
from ..accounts.manage import require
from ..privacy.redactor import Redactor
from .common import FieldError as _FieldError
from .common import IngestResult, Problem, check_path
from .lines import shown_text
from .logs import finish_ingest, staged
from .mapping import CHUNK_ALIASES, first_value
from .readers import BadRecord, detect_format, iter_records
from .staging import LOCK_TARGET_S, Staging
from .validate import text_or_none

CORPUS_BATCH = 2000  # corpus records per write transaction at most (fewer when they are slow)

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
        key, value = first_value(raw, aliases)
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
    title = text_or_none(values["title"], "title")
    source = text_or_none(values["source"], "source")
    meta = {k: v for k, v in raw.items() if k not in used and k != "metadata"}
    if isinstance(raw.get("metadata"), dict):
        meta.update(raw["metadata"])
    return cid, text, title, source, meta or None


def ingest_corpus(db: sqlite_utils.Database, path: str | Path, *, fmt: str | None = None,
                  lenient: bool = False, progress: Callable[[int, int], None] | None = None,
                  name: str | None = None, by: str | None = None, redact: bool | None = None,
                  redact_patterns: dict[str, str] | None = None) -> IngestResult:
    """Ingest a corpus file (records with id, text, title?, source?) into ``documents``.

    The corpus is authoritative: its text replaces text seen in logs. The same id twice in one
    file is an error naming both lines. Same strict/lenient rules as ``ingest_logs``.
    ``by``: the signed-in account; ingesting is for leads (``None``: the local operator).
    ``redact``: replace personal data and secrets in ids, texts, titles, sources and meta before
    anything is stored, as for logs (None: the setting ``redact``, on by default; ``redact_patterns``
    as for logs).
    """
    require(db, by, "lead", "ingesting a file")
    path = Path(path)
    check_path(path)
    fmt, gz = detect_format(path, fmt)
    shown = name or shown_text(str(path))  # a name that is not UTF-8 cannot be stored as it is
    redactor = privacy.redactor_for(db, redact, redact_patterns)
    if redactor is not None:  # the file's name is stored (ingests.path) and in every message
        shown = redactor.record().text(shown)
    result = IngestResult(path=shown, kind="corpus", format=fmt, redacted=redactor is not None)
    records, bytes_read = iter_records(path, fmt, gz, json_columns={"meta", "metadata"})
    total = path.stat().st_size
    rejects: list[dict] = []
    conn = db.conn
    created = store.now()
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS corpus_seen (doc_id TEXT PRIMARY KEY, line INTEGER)")
    conn.execute("DELETE FROM corpus_seen")
    pending: list[tuple] = []
    size = CORPUS_BATCH

    def write(staging: Staging) -> None:
        nonlocal size
        with staging.write():
            _write_documents(conn, pending, result, created, staging.id)
        size = max(50, min(CORPUS_BATCH, int(LOCK_TARGET_S * len(pending) / max(staging.holds[-1], 1e-4))))
        pending.clear()

    with staged(db, "corpus", shown, fmt) as staging:
        with staging.run():  # foreign keys off until the last write
            for line, raw in _progress(records, progress, bytes_read, total):
                result.records += 1
                try:
                    if isinstance(raw, BadRecord):
                        raise _FieldError(raw.field, raw.message)
                    cid, text, title, source, meta = _corpus_record(raw)
                    if redactor is not None:
                        cid, text, title, source, meta = _redact(redactor, result, cid, text, title, source, meta)
                    prev = conn.execute("SELECT line FROM corpus_seen WHERE doc_id = ?", [cid]).fetchone()
                    if prev:
                        raise _FieldError("id", f"duplicate id {cid!r} (first at {shown}:{prev[0]})")
                except _FieldError as e:
                    message = redactor.scrub(e.message) if redactor else e.message
                    result.problems.append(Problem(shown, line, e.field, message))
                    if lenient:
                        record = raw if isinstance(raw, dict) else raw.raw
                        rejects.append({"line": line, "field": e.field, "error": message,
                                        "record": redactor.scrub_value(record) if redactor else record})
                    continue
                conn.execute("INSERT INTO corpus_seen VALUES (?, ?)", [cid, line])
                if result.problems and not lenient:
                    continue
                pending.append((cid, text, title, source, store.dumps(meta) if meta else None))
                if len(pending) >= size:
                    write(staging)
            if pending and (lenient or not result.problems):
                write(staging)
        return finish_ingest(staging, path, result, lenient, rejects, shown, by)


def _redact(redactor: Redactor, result: IngestResult, cid: str, text: str, title: str | None,
            source: str | None, meta: dict | None) -> tuple:
    """One corpus record redacted (numbered on its own), its counts added to ``result``."""
    r = redactor.record()
    out = (r.ident(cid), r.text(text), r.text(title), r.text(source), r.value(meta) if meta else meta)
    for kind, n in r.counts.items():
        result.redactions[kind] = result.redactions.get(kind, 0) + n
    return out


def _write_documents(conn: Any, records: list[tuple], result: IngestResult, created: str, ingest_id: int) -> None:
    """Stage a batch of corpus records: new documents hidden until the commit, changes to stored
    ones waiting in ``ingest_texts``."""
    old = {r[0]: tuple(r[1:]) for r in conn.execute(
        "SELECT doc_id, text, title, source, in_corpus, pk FROM documents WHERE doc_id IN "
        "(SELECT value FROM json_each(?))", [json.dumps([r[0] for r in records])])}
    for cid, text, title, source, meta_json in records:
        stored = old.get(cid)
        if stored is None:
            conn.execute("INSERT INTO documents (doc_id, text, title, source, meta, in_corpus, created_at, ingest_id) "
                         "VALUES (?, ?, ?, ?, ?, 1, ?, ?)", [cid, text, title, source, meta_json, created, ingest_id])
            result.new += 1
            result.documents_new += 1
        elif stored[:4] == (text, title, source, 1):
            result.unchanged += 1
        else:
            conn.execute("INSERT INTO ingest_texts (ingest_id, doc_pk, text, title, source, meta, corpus) "
                         "VALUES (?, ?, ?, ?, ?, ?, 1)", [ingest_id, stored[4], text, title, source, meta_json])
            result.merged += 1
            result.documents_updated += 1


def _progress(records: Iterator, progress: Callable[[int, int], None] | None,
              bytes_read: Callable[[], int], total: int) -> Iterator:
    for i, item in enumerate(records, 1):
        yield item
        if progress and i % 1000 == 0:
            progress(bytes_read(), total)
    if progress:
        progress(total, total)
