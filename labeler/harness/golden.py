"""Read a golden set (JSONL written by ``labeler export``, or the minimal hand-written form) into
validated questions with graded relevance, plus the identity of the file (sha256, threshold) that a
baseline is tied to.

Full format, one question per line: ``query_id``, ``question``, ``relevant_ids`` (grade >=
threshold, best first), ``relevance`` ({chunk id: grade} for every judged chunk, zeros included),
``expected_answer``, ``origin``, and provenance fields that evaluation ignores. Minimal format:
``{"question", "relevant_ids": [...], "expected_answer"?}``; every listed id then gets the top grade.
A manifest ``FILE.manifest.json`` next to the file gives the threshold and the sha256.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import LabelerError
from ..ingest.common import Problem
from ..ingest.mapping import LOG_ALIASES
from ..ingest.readers import BadRecord, iter_records
from ..ingest.validate import normalize_question

DEFAULT_THRESHOLD = 2
TOP_GRADE = 3  # an id in relevant_ids without a relevance map gets the top grade (manifest grade_names, else 0-3)
MAX_PROBLEMS_SHOWN = 20


class GoldenError(LabelerError):
    """The golden set cannot be read or has invalid lines; ``problems`` lists every bad line."""

    def __init__(self, message: str, problems: list[Problem] | None = None):
        super().__init__(message)
        self.problems = problems or []


@dataclass(frozen=True)
class GoldenQuery:
    """One golden question. ``relevance`` maps every judged chunk id to its grade (zeros included)."""

    line: int
    question: str
    relevance: dict[str, int]
    query_id: str | None = None
    expected_answer: str | None = None
    origin: str | None = None
    split: str | None = None  # dev / holdout (labeler split), as the export wrote it

    @property
    def key(self) -> str:
        """How a baseline finds this question again: the query id, else the normalized question."""
        return f"id:{self.query_id}" if self.query_id is not None else f"q:{normalize_question(self.question)}"

    def relevant_ids(self, threshold: int) -> list[str]:
        """Chunk ids with grade >= threshold, highest grade first (ties in file order)."""
        ranked = sorted(self.relevance.items(), key=lambda kv: -kv[1])
        return [doc for doc, grade in ranked if grade >= threshold]


@dataclass
class GoldenSet:
    """A loaded golden set: its questions and identity. ``sha256`` is always the file's own hash;
    ``sha256_source`` says whether the manifest confirmed it (``manifest``) or there was none
    (``computed``)."""

    path: str
    sha256: str
    threshold: int
    queries: list[GoldenQuery]
    sha256_source: str = "computed"
    manifest_path: str | None = None
    manifest: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def identity(self) -> dict[str, Any]:
        """What a report or baseline records about the golden set."""
        export = {k: self.manifest.get(k) for k in ("version", "sha256", "created_at")} if self.manifest else None
        return {"path": self.path, "sha256": self.sha256, "sha256_source": self.sha256_source,
                "manifest": self.manifest_path, "export": export, "questions": len(self.queries),
                "threshold": self.threshold}


class _Bad(Exception):
    def __init__(self, field: str, message: str):
        self.field, self.message = field, message


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _whole(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value != int(value):
        raise _Bad(where, f"expected a whole number, got {value!r}")
    if value < minimum:
        raise _Bad(where, f"must be >= {minimum}, got {value!r}")
    return int(value)


def _text(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _Bad(where, f"expected text, got {type(value).__name__}")


def _chunk_id(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        raise _Bad(where, f"expected a non-empty chunk id, got {value!r}")
    return str(value).strip()


def _question(rec: dict[str, Any], line: int, threshold: int, top: int) -> GoldenQuery:
    name = next((a for a in LOG_ALIASES["question"] if a in rec), "question")
    question = rec.get(name)
    if question is None:
        raise _Bad("question", "missing (expected one of: " + ", ".join(LOG_ALIASES["question"]) + ")")
    if not isinstance(question, str) or not question.strip():
        raise _Bad(name, "is empty" if isinstance(question, str) else f"expected text, got {type(question).__name__}")
    qid = next((rec[a] for a in LOG_ALIASES["query_id"] if rec.get(a) is not None), None)
    if qid is not None:
        qid = _chunk_id(qid, "query_id")

    relevant = rec.get("relevant_ids")
    if relevant is not None and not isinstance(relevant, list):
        raise _Bad("relevant_ids", f"expected a list of chunk ids, got {type(relevant).__name__}")
    relevant_ids = [_chunk_id(v, f"relevant_ids[{i}]") for i, v in enumerate(relevant or [])]
    raw = rec.get("relevance")
    if raw is None:
        if relevant is None:
            raise _Bad("relevant_ids", "missing: give relevant_ids (a list of chunk ids) or relevance {id: grade}")
        # the minimal format: every listed id is as relevant as the scale allows
        relevance = dict.fromkeys(relevant_ids, top)
    else:
        if not isinstance(raw, dict):
            raise _Bad("relevance", f"expected an object {{chunk id: grade}}, got {type(raw).__name__}")
        relevance = {_chunk_id(k, "relevance"): _whole(v, f"relevance.{k}", 0) for k, v in raw.items()}
        for i, doc in enumerate(relevant_ids):
            if doc not in relevance:
                raise _Bad(f"relevant_ids[{i}]", f"{doc!r} has no grade in relevance; add it there")
    return GoldenQuery(
        line=line,
        question=question.strip(),
        relevance=relevance,
        query_id=qid,
        expected_answer=_text(rec.get("expected_answer"), "expected_answer"),
        origin=_text(rec.get("origin"), "origin"),
        split=_split(rec.get("split")),
    )


def _split(value: Any) -> str | None:
    if value is None or value in ("dev", "holdout"):
        return value
    raise _Bad("split", f"expected dev or holdout, got {value!r}")


def _manifest_sha(manifest: dict[str, Any], name: str) -> str | None:
    """The file's sha256 as the manifest lists it: ``files`` {name: sha256} (what ``labeler export``
    writes; its top-level ``sha256`` is a digest over all files), else a top-level ``sha256`` string."""
    files = manifest.get("files")
    if isinstance(files, dict):
        entry = files.get(name)
        if entry is None and len(files) == 1:
            entry = next(iter(files.values()))
        return entry if isinstance(entry, str) else entry.get("sha256") if isinstance(entry, dict) else None
    if isinstance(files, list):
        for entry in files:
            if isinstance(entry, dict) and Path(str(entry.get("path", ""))).name == name:
                return entry.get("sha256")
        return None
    value = manifest.get("sha256")
    if isinstance(value, dict):
        return value.get(name)
    return value if isinstance(value, str) else None


def _top_grade(manifest: dict[str, Any] | None, threshold: int) -> int:
    names = (manifest or {}).get("grade_names")
    top = len(names) - 1 if isinstance(names, list) and len(names) > 1 else TOP_GRADE
    return max(top, threshold)


def _read_manifest(path: Path) -> tuple[Path | None, dict[str, Any] | None]:
    candidate = Path(str(path) + ".manifest.json")
    if not candidate.exists():
        return None, None
    try:
        manifest = json.loads(candidate.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GoldenError(f"{candidate}: not a readable JSON manifest ({e}); fix or delete it") from None
    if not isinstance(manifest, dict):
        raise GoldenError(f"{candidate}: a manifest must be a JSON object")
    return candidate, manifest


def load_golden(path: str | Path, *, threshold: int | None = None, strict: bool = True) -> GoldenSet:
    """Read and validate a golden set file (JSONL, ``.json`` array, optionally ``.gz``).

    ``threshold`` (grade >= threshold is relevant) defaults to the manifest's, else 2. Strict (the
    default): any invalid line raises GoldenError listing up to 20 problems as
    ``FILE:LINE: field: message``; lenient: bad lines are skipped and kept in ``problems``.
    A duplicate query id, or the same question twice without ids, is a problem: a baseline could
    not tell the two apart.
    """
    path = Path(path)
    if not path.exists():
        raise GoldenError(f"{path}: no such golden file (write one with labeler export)")
    if path.is_dir():
        raise GoldenError(f"{path}: is a folder; give the golden JSONL file")
    manifest_path, manifest = _read_manifest(path)
    if threshold is None:
        threshold = (manifest or {}).get("threshold", DEFAULT_THRESHOLD)
        where = f"{manifest_path}: threshold" if manifest_path else "threshold"
    else:
        where = "threshold"
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
        raise GoldenError(f"{where} must be a whole number >= 1 (grade 0 is irrelevant); got {threshold!r}")

    gz = path.suffix.lower() == ".gz"
    inner = Path(path.stem).suffix.lower() if gz else path.suffix.lower()
    records, _ = iter_records(path, "json" if inner == ".json" else "jsonl", gz)
    shown = str(path)
    top = _top_grade(manifest, threshold)
    queries: list[GoldenQuery] = []
    problems: list[Problem] = []
    ids: dict[str, int] = {}
    texts: dict[str, tuple[int, bool]] = {}  # normalized question -> (first line, had a query id)
    for line, rec in records:
        if isinstance(rec, BadRecord):
            problems.append(Problem(shown, line, rec.field, rec.message))
            continue
        try:
            q = _question(rec, line, threshold, top)
            norm = normalize_question(q.question)
            if q.query_id is not None and q.query_id in ids:
                raise _Bad("query_id", f"duplicate of line {ids[q.query_id]}")
            if norm in texts and (q.query_id is None or not texts[norm][1]):
                raise _Bad("question", f"same question as line {texts[norm][0]}; give both a distinct query_id")
        except _Bad as e:
            problems.append(Problem(shown, line, e.field, e.message))
            continue
        if q.query_id is not None:
            ids[q.query_id] = line
        texts.setdefault(norm, (line, q.query_id is not None))
        queries.append(q)
    if not queries and not problems:
        raise GoldenError(f"{path}: empty golden file: no questions found")
    if problems and strict:
        listed = "\n".join(str(p) for p in problems[:MAX_PROBLEMS_SHOWN])
        more = len(problems) - MAX_PROBLEMS_SHOWN
        tail = f"\n... and {more} more" if more > 0 else ""
        raise GoldenError(f"{path}: {len(problems)} invalid line(s) (fix them, or pass --lenient to skip "
                          f"them):\n{listed}{tail}", problems)
    if not queries:
        raise GoldenError(f"{path}: no valid questions ({len(problems)} invalid line(s), e.g. {problems[0]})",
                          problems)

    golden = GoldenSet(shown, file_sha256(path), int(threshold), queries, problems=problems,
                       manifest_path=str(manifest_path) if manifest_path else None, manifest=manifest)
    if problems:
        golden.warnings.append(f"skipped {len(problems)} invalid line(s) of {path}, e.g. {problems[0]}")
    if manifest is not None:
        expected = _manifest_sha(manifest, path.name)
        if expected is None:
            golden.warnings.append(f"{manifest_path} gives no sha256 for {path.name}; using the file's own hash")
        elif expected.lower() != golden.sha256:
            golden.warnings.append(
                f"{path.name} changed since it was exported (manifest sha256 {expected[:12]}…, file "
                f"{golden.sha256[:12]}…); the report records the file's own hash")
        else:
            golden.sha256_source = "manifest"
    return golden
