"""Ingesting a production log file: parse, validate, write, report."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import sqlite_utils

from .. import accounts
from .. import db as store
from ..readers import MAX_LINE_BYTES, detect_format
from .batches import PARALLEL_MIN_BYTES, _may_fork, _parsed_batches, _parsed_batches_forked, _Row
from .common import IngestResult, Problem, _check_path, _sha256, check_problems
from .writer import _LogWriter

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

