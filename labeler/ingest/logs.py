"""Ingesting a production log file: parse, validate, write, report."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import sqlite_utils

from .. import accounts, privacy
from .. import db as store
from ..errors import IngestError
from . import batches, formats, sampling
from .batches import PARALLEL_MIN_BYTES, Row, may_fork
from .common import IngestResult, Problem, check_path, check_problems, sha256_of
from .lines import shown_text
from .mapping import LOG_ALIASES
from .readers import MAX_LINE_BYTES, detect_format
from .staging import LOCK_TARGET_S, Staging, claim, discard, publish, release
from .writer import LogWriter

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
    checkpoint = conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    conn.execute(f"PRAGMA cache_size = -{BULK_CACHE_KIB}")
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # Staging.write checkpoints, outside the lock
    gc.disable()
    try:
        yield
    finally:
        if gc_was_on:
            gc.enable()
        conn.execute(f"PRAGMA cache_size = {int(cache)}")
        conn.execute(f"PRAGMA wal_autocheckpoint = {int(checkpoint)}")
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")


def finish_ingest(staging: Staging, path: Path, result: IngestResult, lenient: bool, rejects: list[dict],
            shown: str, by: str | None = None) -> IngestResult:
    """Apply the strict/lenient rules, then the final commit that makes the staged rows visible;
    the ingest is recorded in the audit trail under ``by``."""
    check_problems(path, shown, result, lenient, rejects)
    counts = {k: v for k, v in result.to_dict().items() if isinstance(v, int) and not isinstance(v, bool)}
    sampling.record(staging.db, staging.id, records_seen=result.records, sample=result.sample,
                    redaction=None if result.redacted is None else
                    {"on": result.redacted, "counts": result.redactions})
    publish(staging, sha256_of(path), counts)
    with store.transaction(staging.db):
        accounts.audit(staging.db.conn, store.now(), by, f"ingest_{result.kind}", shown, store.dumps(counts))
    if result.records:
        result.documents_without_text = staging.db.execute(
            "SELECT count(*) FROM documents WHERE text IS NULL").fetchone()[0]
    return result


@contextlib.contextmanager
def staged(db: sqlite_utils.Database, kind: str, shown: str, fmt: str) -> Iterator[Staging]:
    """Claim an ingest for the block; when the block raises, whatever it staged is deleted."""
    staging = claim(db, kind, shown, fmt)
    try:
        yield staging
    except BaseException:
        with contextlib.suppress(Exception):  # else the next ingest cleans up
            discard(db, staging.id)
        raise
    finally:
        release(staging)
        staging.log_holds()


class _Sizer:
    """Rows per write transaction, adapted so that each holds the lock about LOCK_TARGET_S. It
    starts small (the first transactions of a file run on a cold cache) and at most doubles."""

    def __init__(self) -> None:
        self.size = 250

    def take(self, remaining: int) -> int:
        # a little over the size takes the rest of the batch: one transaction instead of a tiny second
        return remaining if remaining <= self.size * 1.25 else self.size

    def adapt(self, rows: int, hold: float) -> None:
        if rows:
            per_row = max(hold, 1e-4) / rows
            self.size = max(50, min(batches.BATCH, int(LOCK_TARGET_S / per_row), self.size * 2))


def _check_found(result: IngestResult, shown: str, chunks: int) -> None:
    """A file that gave no retrieved chunks at all is an error, not an empty success."""
    if result.problems:
        return  # the problems say what is wrong
    if result.records == 0 and result.skipped:
        raise IngestError(f"{shown}: no retrievals found: {'; '.join(result.notes())}; nothing was written")
    if result.records and chunks == 0:
        raise IngestError(
            f"{shown}: no record had retrieved chunks (looked for: {', '.join(LOG_ALIASES['retrieved'])}; "
            "use --map retrieved=PATH, or --format with the tool that wrote the file); nothing was written")


def ingest_logs(db: sqlite_utils.Database, path: str | Path, *, fmt: str | None = None,
                mapping: dict[str, str] | None = None, lenient: bool = False,
                progress: Callable[[int, int], None] | None = None,
                max_line_bytes: int = MAX_LINE_BYTES, name: str | None = None,
                parallel: bool | None = None, by: str | None = None, tool: str | None = None,
                redact: bool | None = None, redact_patterns: dict[str, str] | None = None,
                sample: float | None = None, seed: int = 0) -> IngestResult:
    """Ingest one production log file; see the package docstring for the rules.

    Raises ``IngestError`` (listing up to 20 problems as ``FILE:LINE: field: message``) when the
    file cannot be read, is empty, or, in strict mode, has any invalid record; then nothing is
    written. ``progress(done_bytes, total_bytes)`` is called as the file is read. ``name`` is
    how the file is called in messages (default: its path), e.g. an uploaded file's own name.
    ``parallel``: parse in a second process while this one writes (same result); by default
    when the file is 4 MiB or more and this process is single-threaded with a spare core.
    ``by``: the signed-in account (the app); ingesting is for leads (``None``: the local operator).
    ``tool``: force a tool's reader (``phoenix``, ``otel``, ``otlp``, ``langsmith``, ``plain``...;
    ``fmt`` may name one too) instead of recognising each record (see ``formats``).
    ``redact``: replace personal data and secrets before anything is stored (``labeler.privacy``;
    None: the setting ``redact``, on by default; ``redact_patterns``: ``{TYPE: regex}`` added to
    the setting's). ``sample``: keep a uniform sample, a rate below 1
    (hashed on the query id with ``seed``: consistent across files and re-ingests) or a number of
    records (a reservoir seeded with ``seed``); see ``sampling``.

    Other writers are never blocked for long: rows are written in short transactions and stay
    hidden until the final commit (see ``staging``); one ingest runs at a time (a second one waits).
    """
    accounts.require(db, by, "lead", "ingesting a file")
    path = Path(path)
    check_path(path)
    if fmt and fmt.lower() in formats.tool_names():
        tool, fmt = fmt, None
    tool = formats.resolve(tool)
    fmt, gz = detect_format(path, fmt)
    shown = name or shown_text(str(path))  # a name that is not UTF-8 cannot be stored as it is
    spec = sampling.sample_spec(sample, seed)
    redactor = privacy.redactor_for(db, redact, redact_patterns)
    if redactor is not None:  # the file's name is stored (ingests.path) and in every message
        shown = redactor.record().text(shown)
    result = IngestResult(path=shown, kind="logs", format=fmt, tool=tool, redacted=redactor is not None, sample=spec)
    sampler = sampling.Sampler(spec)
    total = path.stat().st_size
    rejects: list[dict] = []

    def reject(line: int, problem: Problem, raw: Any) -> None:
        result.problems.append(problem)
        if lenient:
            rejects.append({"line": line, "field": problem.field, "error": problem.message,
                            "record": raw})

    if parallel is None:
        parallel = total >= PARALLEL_MIN_BYTES and may_fork()
    parallel = parallel and "fork" in multiprocessing.get_all_start_methods()  # not on Windows
    parse = batches.parsed_batches_forked if parallel else batches.parsed_batches
    sizer = _Sizer()
    chunks = 0
    with _bulk(db), staged(db, "logs", shown, fmt) as staging:
        writer = LogWriter(db, shown, result, staging.id)
        raws: dict[int, Any] = {}

        def write(rows: list[Row], fresh_ids: list[str] | None) -> None:
            for row in rows:  # what was replaced in the records kept
                for kind, n in row.rec.get("redactions", {}).items():
                    result.redactions[kind] = result.redactions.get(kind, 0) + n
            if result.problems and not lenient:
                # nothing more is written; the rest is only checked, to report every problem
                for line, problem in writer.write(rows, result.problems, write=False):
                    reject(line, problem, raws.get(line))
                return
            done = 0
            while done < len(rows):
                part = rows[done:done + sizer.take(len(rows) - done)]
                with staging.write():
                    # while one transaction takes the whole batch, fresh_ids holds its new chunk ids
                    found = writer.write(part, result.problems, write=True,
                                         fresh_ids=fresh_ids if len(part) == len(rows) else None)
                sizer.adapt(len(part), staging.holds[-1])
                for line, problem in found:
                    reject(line, problem, raws.get(line))
                done += len(part)

        # a chunk's text crosses from the parser once, not with every row that retrieves it again;
        # a sample keeps only some rows, so there each row keeps its own texts
        for items, done_bytes, fresh_ids, texts in parse(path, fmt, gz, mapping, max_line_bytes, lenient, tool,
                                                         redactor, spec is None):
            if texts:
                writer.add_texts(texts)
            rows: list[Row] = []
            raws.clear()
            for line, row, problem, raw in items:
                if row is None and problem is None:  # not a retrieval: raw is the reason
                    result.skipped += 1
                    result.skipped_reasons[raw] = result.skipped_reasons.get(raw, 0) + 1
                    continue
                result.records += 1
                if problem is not None:
                    reject(line, Problem(shown, line, *problem), raw)
                    continue
                rows.append(row)
                chunks += len(row.rec["ids"])
                result.content_ids += row.rec["content_ids"]
                if lenient and not sampler.holds_back:  # (a reservoir's rejects are listed without the record)
                    raws[line] = raw
            if spec is not None:
                # the chunk ids of rows left out must not become documents: no fresh-id shortcut
                rows, fresh_ids = sampler.take(rows), None
            write(rows, fresh_ids)
            if progress:
                progress(done_bytes, total)
        if sampler.holds_back:
            write(sampler.rest(), None)
        result.sampled_out = sampler.dropped
        if progress:
            progress(total, total)
        _check_found(result, shown, chunks)
        return finish_ingest(staging, path, result, lenient, rejects, shown, by)
