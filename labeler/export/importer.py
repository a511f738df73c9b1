"""Import of golden files as one annotator's submitted labels (strict/lenient like ingest), redacted
like an ingest (question, expected answer, query and chunk ids) before anything is stored."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

from .. import db as store
from .. import privacy
from ..accounts.manage import audit, require
from ..core.names import check_name
from ..errors import IngestError
from ..ingest.common import FieldError, Problem, ProblemList, check_problems
from ..ingest.lines import shown_text
from ..ingest.mapping import LOG_ALIASES
from ..ingest.readers import BadRecord, detect_format, iter_records
from ..ingest.validate import NORM_MATCH, norm_params, normalize_question, question_columns
from ..labels.common import event, max_grade
from ..labels.queue import recount, sync_queue
from ..labels.writes import JUDGMENTS
from ..privacy.redactor import Redactor
from ..report.specs import ORIGINS


@dataclass
class ImportResult(ProblemList):
    """What one golden file did. ``new + merged + unchanged + rejected == records``: new = a query
    was created, merged = an existing query's labels changed, unchanged = nothing to change.
    ``changes``: values written (grades, removed grades, answer fields, statuses), one audit event
    each. ``warnings``: e.g. the file's manifest was exported with another threshold."""

    path: str
    annotator: str
    records: int = 0
    new: int = 0
    merged: int = 0
    unchanged: int = 0
    rejected: int = 0
    changes: int = 0
    documents_new: int = 0
    rejects_path: str | None = None
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


_Bad = FieldError


@dataclass
class _Line:
    line: int
    question: str
    query_id: str | None
    relevance: dict[str, int]
    expected_answer: str | None
    answer_faithful: str | None
    answer_relevant: str | None
    origin: str | None


def _id(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        raise _Bad(where, f"expected a non-empty id, got {value!r}")
    return str(value).strip()


def _opt_text(rec: dict[str, Any], name: str) -> str | None:
    value = rec.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Bad(name, f"expected text, got {type(value).__name__}")
    return value if value.strip() else None


def _parse(rec: dict[str, Any], line: int, top: int) -> _Line:
    name = next((a for a in LOG_ALIASES["question"] if a in rec), "question")
    question = rec.get(name)
    if question is None:
        raise _Bad("question", "missing (expected one of: " + ", ".join(LOG_ALIASES["question"]) + ")")
    if not isinstance(question, str):
        raise _Bad(name, f"expected text, got {type(question).__name__}")
    if not question.strip():
        raise _Bad(name, "is empty")
    qid = rec.get("query_id")
    qid = None if qid is None else _id(qid, "query_id")
    relevant = rec.get("relevant_ids")
    if relevant is not None and not isinstance(relevant, list):
        raise _Bad("relevant_ids", f"expected a list of chunk ids, got {type(relevant).__name__}")
    relevant_ids = [_id(v, f"relevant_ids[{i}]") for i, v in enumerate(relevant or [])]
    raw = rec.get("relevance")
    if raw is None:
        if relevant is None:
            raise _Bad("relevant_ids", "missing: give relevant_ids (a list of chunk ids) or relevance {id: grade}")
        relevance = dict.fromkeys(relevant_ids, top)  # the minimal format: as relevant as the scale allows
    else:
        if not isinstance(raw, dict):
            raise _Bad("relevance", f"expected an object {{chunk id: grade}}, got {type(raw).__name__}")
        relevance = {}
        for key, grade in raw.items():
            doc = _id(key, "relevance")
            if isinstance(grade, bool) or not isinstance(grade, int) or not 0 <= grade <= top:
                raise _Bad(f"relevance.{doc}", f"grade {grade!r} is not on the scale; use a whole number from 0 to {top}")
            relevance[doc] = grade
        for i, doc in enumerate(relevant_ids):
            if doc not in relevance:
                raise _Bad(f"relevant_ids[{i}]", f"{doc!r} has no grade in relevance; add it there")
    judgments = {}
    for name in ("answer_faithful", "answer_relevant"):
        value = _opt_text(rec, name)
        if value is not None and value not in JUDGMENTS:
            raise _Bad(name, f"{value!r} is not allowed; use one of: {', '.join(JUDGMENTS)} (or null)")
        judgments[name] = value
    origin = rec.get("origin")
    if origin is not None and origin not in ORIGINS:
        raise _Bad("origin", f"{origin!r} is unknown; use one of: {', '.join(ORIGINS)} (or leave it out)")
    return _Line(line, question.strip(), qid, relevance, _opt_text(rec, "expected_answer"),
                 judgments["answer_faithful"], judgments["answer_relevant"], origin)


def _redact(redactor: Redactor, x: _Line) -> _Line:
    """The line with its values replaced as an ingest replaces them: the question numbered on its own
    (so it still matches the question an ingest stored) and the ids pseudonymised (so they match the
    stored chunk and query ids)."""
    r = redactor.record()
    x.question = r.text(x.question)
    x.expected_answer = r.text(x.expected_answer)
    x.query_id = r.ident(x.query_id)
    relevance: dict[str, int] = {}
    for doc, grade in x.relevance.items():
        relevance[r.ident(doc)] = grade
    x.relevance = relevance
    return x


def _finish(db: sqlite_utils.Database, path: Path, shown: str, fmt: str, result: ImportResult, lenient: bool,
            rejects: list[dict]) -> ImportResult:
    """The ingest rules and messages: empty file, strict failure listing problems, rejects file."""
    check_problems(path, shown, result, lenient, rejects)
    manifest = Path(str(path) + ".manifest.json")
    if manifest.exists():
        try:
            exported = json.loads(manifest.read_text(encoding="utf-8")).get("threshold")
        except (OSError, ValueError, AttributeError, RecursionError):  # a manifest is only a hint
            exported = None
        threshold = store.get_setting(db, "threshold")
        if exported is not None and exported != threshold:
            result.warnings.append(
                f"{manifest.name} says the set was exported with threshold {exported}, this database uses "
                f"{threshold}: relevant_ids and binary metrics will differ (change it in Settings)")
    counts = {k: v for k, v in result.to_dict().items() if isinstance(v, int)}
    db.execute("INSERT INTO ingests (kind, path, sha256, format, counts, created_at) VALUES (?, ?, ?, ?, ?, ?)",
               ["golden", shown, hashlib.sha256(path.read_bytes()).hexdigest(), fmt, store.dumps(counts), store.now()])
    return result


def _resolve_queries(conn: Any, lines: list[_Line]) -> dict[int, int | None]:
    """line -> existing query pk (by query_id, else normalized question), None when it is new."""
    by_id = dict(conn.execute("SELECT query_id, pk FROM queries WHERE query_id IN (SELECT value FROM json_each(?))",
                              [json.dumps([x.query_id for x in lines if x.query_id is not None])]).fetchall())
    by_text: dict[str, int] = {}
    for norm, pk in conn.execute(
            f"SELECT norm_question, min(pk) FROM queries WHERE {NORM_MATCH} GROUP BY norm_question",
            norm_params(sorted({normalize_question(x.question) for x in lines}))):
        by_text[norm] = pk
    return {x.line: by_id.get(x.query_id) or by_text.get(normalize_question(x.question)) for x in lines}


def _doc_pks(conn: Any, doc_ids: set[str], at: str) -> tuple[dict[str, int], int]:
    found = dict(conn.execute("SELECT doc_id, pk FROM documents WHERE doc_id IN (SELECT value FROM json_each(?))",
                              [json.dumps(sorted(doc_ids))]).fetchall())
    new = sorted(doc_ids - set(found))
    if new:
        conn.executemany("INSERT INTO documents (doc_id, created_at) VALUES (?, ?)", [(d, at) for d in new])
        found.update(conn.execute("SELECT doc_id, pk FROM documents WHERE doc_id IN (SELECT value FROM json_each(?))",
                                  [json.dumps(new)]).fetchall())
    return found, len(new)


def _store_line(conn: Any, x: _Line, pk: int, docs: dict[str, int], annotator: str, at: str) -> int:
    """Make the annotator's labels of query ``pk`` equal the line; return how many values changed."""
    changed = 0
    old = dict(conn.execute("SELECT doc_pk, grade FROM relevance_labels WHERE query_pk = ? AND annotator = ?",
                            [pk, annotator]).fetchall())
    new = {docs[d]: g for d, g in x.relevance.items()}
    for doc_pk, grade in new.items():
        if old.get(doc_pk) != grade:
            conn.execute(
                "INSERT INTO relevance_labels (query_pk, doc_pk, annotator, grade, origin, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, 'human', ?, ?) ON CONFLICT (query_pk, doc_pk, annotator) DO UPDATE SET "
                "grade = excluded.grade, updated_at = excluded.updated_at", [pk, doc_pk, annotator, grade, at, at])
            event(conn, at, annotator, pk, doc_pk, "grade", old.get(doc_pk), grade)
            changed += 1
    for doc_pk in sorted(set(old) - set(new)):
        conn.execute("DELETE FROM relevance_labels WHERE query_pk = ? AND doc_pk = ? AND annotator = ?",
                     [pk, doc_pk, annotator])
        event(conn, at, annotator, pk, doc_pk, "grade", old[doc_pk], None)
        changed += 1
    conn.execute("INSERT INTO query_labels (query_pk, annotator, created_at, updated_at) VALUES (?, ?, ?, ?) "
                 "ON CONFLICT DO NOTHING", [pk, annotator, at, at])
    row = conn.execute("SELECT status, expected_answer, answer_faithful, answer_relevant FROM query_labels "
                       "WHERE query_pk = ? AND annotator = ?", [pk, annotator]).fetchone()
    fields = {"expected_answer": x.expected_answer, "answer_faithful": x.answer_faithful,
              "answer_relevant": x.answer_relevant}
    for (name, value), before in zip(fields.items(), row[1:], strict=True):
        if before != value:
            # name is one of the three fixed columns above, never input
            conn.execute(f"UPDATE query_labels SET {name} = ? WHERE query_pk = ? AND annotator = ?",
                         [value, pk, annotator])
            event(conn, at, annotator, pk, None, name, before, value)
            changed += 1
    if row[0] != "submitted":
        conn.execute("UPDATE query_labels SET status = 'submitted', status_at = ?, submitted_at = ? "
                     "WHERE query_pk = ? AND annotator = ?", [at, at, pk, annotator])
        event(conn, at, annotator, pk, None, "status", row[0], "submitted")
        changed += 1
    if changed:
        conn.execute("UPDATE query_labels SET updated_at = ? WHERE query_pk = ? AND annotator = ?", [at, pk, annotator])
    # the annotator's slot on the item is done, so the queue does not hand it out again
    conn.execute("INSERT INTO assignments (query_pk, annotator, state, updated_at) VALUES (?, ?, 'done', ?) "
                 "ON CONFLICT (query_pk, annotator) DO UPDATE SET state = 'done', lease_expires = NULL, "
                 "updated_at = excluded.updated_at WHERE state != 'done'", [pk, annotator, at])
    return changed


def import_golden(db: sqlite_utils.Database, path: str | Path, *, annotator: str, lenient: bool = False,
                  fmt: str | None = None, name: str | None = None, by: str | None = None,
                  redact: bool | None = None) -> ImportResult:
    """Import a golden set (this tool's JSONL, or the minimal form) as ``annotator``'s submitted labels.

    Each line is matched to a query by ``query_id``, else by the normalized question; otherwise a
    query is created (with the line's ``query_id`` or a generated one, and the line's ``origin``
    when it gives one, else ``import``). The annotator's grades of that query become the line's
    ``relevance`` (the minimal form's ``relevant_ids`` get the top grade), and their expected
    answer and answer judgments the line's; the label is submitted. Unknown chunk ids are created
    without text (a corpus ingest fills it). Strict by default (see the module doc). ``name`` is
    how the file is called in messages (default: its path). Leads only (``by``; ``None`` is the
    local operator). ``redact``: replace personal data and secrets as an ingest does (None: the
    setting ``redact``); problems and rejects are scrubbed the same way.
    """
    require(db, by, "lead", "importing a golden set")
    annotator = check_name(annotator)
    path = Path(path)
    shown = name or shown_text(str(path))  # a name that is not UTF-8 cannot be stored as it is
    if not path.exists():
        raise IngestError(f"{shown}: no such file")
    if path.is_dir():
        raise IngestError(f"{shown}: is a folder; give a file")
    fmt, gz = detect_format(path, fmt)
    if fmt not in ("jsonl", "json"):
        raise IngestError(f"{shown}: a golden set is JSONL (or a JSON array); got {fmt}")
    settings = store.get_settings(db)
    top = max_grade(settings)
    result = ImportResult(shown, annotator)
    records, _ = iter_records(path, fmt, gz, json_columns={"relevant_ids", "relevance", "meta"})
    lines: list[_Line] = []
    rejects: list[dict] = []
    raws: dict[int, Any] = {}

    redactor = privacy.redactor_for(db, redact)
    if redactor is not None:  # the file's name is stored (ingests.path, queries.source)
        shown = redactor.record().text(shown)
        result.path = shown

    def reject(line: int, field_name: str, message: str, raw: Any) -> None:
        if redactor is not None:
            field_name, message, raw = redactor.scrub(field_name), redactor.scrub(message), redactor.scrub_value(raw)
        result.problems.append(Problem(shown, line, field_name, message))
        if lenient:
            rejects.append({"line": line, "field": field_name, "error": message, "record": raw})

    for line, raw in records:
        result.records += 1
        if isinstance(raw, BadRecord):
            reject(line, raw.field, raw.message, raw.raw)
            continue
        try:
            parsed = _parse(raw, line, top)
            lines.append(parsed if redactor is None else _redact(redactor, parsed))
            raws[line] = raw
        except _Bad as e:
            reject(line, e.field, e.message, raw)

    with store.transaction(db):
        conn = db.conn
        resolved = _resolve_queries(conn, lines)
        # two lines for one query would overwrite each other: the later one is a problem
        seen: dict[Any, int] = {}
        valid: list[_Line] = []
        for x in lines:
            key = ("pk", resolved[x.line]) if resolved[x.line] is not None else \
                ("id", x.query_id) if x.query_id is not None else ("q", normalize_question(x.question))
            if key in seen:
                reject(x.line, "query_id" if key[0] == "id" else "question",
                       f"the same query as line {seen[key]}; keep one line per query", raws[x.line])
                continue
            seen[key] = x.line
            valid.append(x)
        if result.problems and not lenient:
            return _finish(db, path, shown, fmt, result, lenient, rejects)
        at = store.now()
        conn.execute("INSERT INTO annotators (name, role, created_at) VALUES (?, 'annotator', ?) "
                     "ON CONFLICT (name) DO NOTHING", [annotator, at])
        docs, result.documents_new = _doc_pks(conn, {d for x in valid for d in x.relevance}, at)
        created = [x for x in valid if resolved[x.line] is None]
        conn.executemany(
            "INSERT INTO queries (query_id, question, norm_question, norm_key, origin, review_state, source, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(x.query_id or "g-" + hashlib.sha1(norm.encode()).hexdigest()[:16], x.question, norm, key,
              x.origin or "import", "accepted" if x.origin == "synthetic" else None, f"{shown}:{x.line}", at)
             for x in created for norm, key in [question_columns(x.question)]])
        resolved.update(_resolve_queries(conn, created))
        sync_queue(db)
        new_lines = {x.line for x in created}
        for x in valid:
            pk = resolved[x.line]
            changed = _store_line(conn, x, pk, docs, annotator, at)
            recount(conn, pk)
            result.changes += changed
            if x.line in new_lines:
                result.new += 1
            elif changed:
                result.merged += 1
            else:
                result.unchanged += 1
        audit(conn, at, by, "import_golden", annotator, shown)
        return _finish(db, path, shown, fmt, result, lenient, rejects)
