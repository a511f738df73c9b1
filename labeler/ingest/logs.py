"""Ingesting a production log file: parse, validate, write, report."""

from __future__ import annotations

import contextlib
import gc
import itertools
import multiprocessing
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

from .. import db as store
from .. import privacy
from ..accounts.manage import audit, require
from ..errors import IngestError, LabelError
from ..labels.queue import sync_queue
from ..labels.routing import hold_ingest, route_ingest
from . import batches, formats, sampling
from .batches import PARALLEL_MIN_BYTES, Row, may_fork
from .common import FileHash, IngestResult, Problem, check_path, check_problems
from .lines import shown_text
from .mapping import LOG_ALIASES, parse_mapping
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
            shown: str, by: str | None = None, *, live: bool = False, sha256: FileHash | None = None) -> IngestResult:
    """Apply the strict/lenient rules, then the final commit that makes the staged rows visible;
    the ingest is recorded in the audit trail under ``by``. ``live``: the new queries wait
    (``labels.routing``) from before the commit until the routing rules decided them.
    ``sha256``: the file's hash, made so far (else it is made here)."""
    check_problems(path, shown, result, lenient, rejects)
    counts = {k: v for k, v in result.to_dict().items() if isinstance(v, int) and not isinstance(v, bool)}
    sampling.record(staging.db, staging.id, records_seen=result.records, sample=result.sample,
                    redaction=None if result.redacted is None else
                    {"on": result.redacted, "counts": result.redactions})
    if live:
        hold_ingest(staging.db, staging.id)
    publish(staging, (sha256 or FileHash(path)).hexdigest(), counts)
    with store.transaction(staging.db):
        audit(staging.db.conn, store.now(), by, f"ingest_{result.kind}", shown, store.dumps(counts))
    if live:
        route_ingest(staging.db, staging.id)
    # the new queries join the labeling queue here, in the ingest's bulk writes, rather than in
    # the next annotator's Enter (which would otherwise wait for them); the ingest is committed
    # already, so a queue that cannot be brought up to date (a bad queue setting) is left to
    # next_item, which says why
    with contextlib.suppress(LabelError):
        sync_queue(staging.db, if_planned=True)
    if result.records:
        result.documents_without_text = staging.db.execute(
            "SELECT count(*) FROM documents WHERE text IS NULL").fetchone()[0]
    return result


@contextlib.contextmanager
def staged(db: sqlite_utils.Database, kind: str, shown: str, fmt: str) -> Iterator[Staging]:
    """Claim an ingest for the block; when the block raises, whatever it staged is deleted. Its
    writes are bulk writes (``db.bulk_writes``): an annotator's write waiting for the lock goes
    before the ingest's next transaction."""
    with store.bulk_writes(db):
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


@dataclass(frozen=True)
class LogIngestOptions:
    """How one log file is read and what of it is kept (see :func:`ingest_logs`). ``fmt``: the file
    format (``jsonl``, ``json``, ``csv``, ``tsv``, ``parquet``; None: from the name, else the first
    bytes), or a tool's name, which then goes to ``tool``: force that tool's reader (``phoenix``,
    ``otel``, ``otlp``, ``langsmith``, ``plain``...) instead of recognising each record. ``mapping``:
    ``{field: dotted path}`` or ``["question=inputs.query", ...]``. ``lenient``: write the valid
    records and the rejects to ``FILE.rejects.jsonl``. ``max_line_bytes``: longer records are
    rejected. ``name``: the file's name in messages (default: its path). ``parallel``: parse in a
    second process (None: when the file is big and a core is spare). ``redact`` (None: the setting)
    and ``redact_patterns`` (``{TYPE: regex}`` or ``["TYPE=regex", ...]``): personal data and
    secrets replaced before anything is stored. ``sample`` (a rate below 1, or a number of records)
    with ``seed``: keep a uniform sample."""

    fmt: str | None = None
    tool: str | None = None
    mapping: Mapping[str, str] | Sequence[str] | None = None
    lenient: bool = False
    max_line_bytes: int = MAX_LINE_BYTES
    name: str | None = None
    parallel: bool | None = None
    redact: bool | None = None
    redact_patterns: Mapping[str, str] | Sequence[str] | None = None
    sample: float | None = None
    seed: int = 0
    live: bool = False  # from a live source: the routing rules decide which queries enter the queue

    def __post_init__(self) -> None:
        if self.fmt is not None and not isinstance(self.fmt, str):
            raise IngestError(f"format must be a file format or a tool's name, e.g. jsonl; got {self.fmt!r}")
        if self.fmt and self.fmt.lower() in formats.tool_names():  # a tool named as the format
            object.__setattr__(self, "tool", self.fmt)
            object.__setattr__(self, "fmt", None)
        if self.tool is not None and not isinstance(self.tool, str):
            raise IngestError(f"tool must be a tool's name, one of {', '.join(formats.tool_names())}; "
                              f"got {self.tool!r}")
        object.__setattr__(self, "tool", formats.resolve(self.tool))
        if self.mapping is not None and not isinstance(self.mapping, Mapping):
            object.__setattr__(self, "mapping", parse_mapping(_lines("--map", self.mapping)))
        if self.redact_patterns is not None and not isinstance(self.redact_patterns, Mapping):
            object.__setattr__(self, "redact_patterns",
                               privacy.parse_patterns(_lines("--redact-pattern", self.redact_patterns)))
        if not _whole(self.max_line_bytes) or self.max_line_bytes < 1:
            raise IngestError(f"max_line_bytes must be a whole number of bytes >= 1, e.g. {MAX_LINE_BYTES}; "
                              f"got {self.max_line_bytes!r}")
        if self.sample is not None:  # (the seed is only the sample's)
            if not (isinstance(self.sample, numbers.Real) and not isinstance(self.sample, bool)):
                raise IngestError(f"--sample must be a rate below 1 (e.g. 0.05) or a number of records "
                                  f"(e.g. 50000); got {self.sample!r}")
            if not _whole(self.seed):
                raise IngestError(f"--seed must be a whole number, e.g. 7; got {self.seed!r}")
            sampling.sample_spec(self.sample, self.seed)  # a bad --sample is one line before the file is read

    @property
    def sampling(self) -> dict[str, Any] | None:
        """``{"rate": r, "seed": s}``, ``{"size": n, "seed": s}`` or None (everything is kept)."""
        return sampling.sample_spec(self.sample, self.seed)


def _whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _lines(option: str, values: Any) -> list[str]:
    if isinstance(values, str | bytes) or not all(isinstance(v, str) for v in values):
        raise IngestError(f"{option} takes a dict or a list of strings, e.g. [\"question=inputs.query\"]; "
                          f"got {values!r}")
    return list(values)


_OPTION_DEFAULTS = LogIngestOptions()


def _given(value: Any, default: Any) -> bool:
    """Whether a keyword of ingest_logs differs from its default (an empty mapping is no mapping)."""
    if value is default or (default is None and isinstance(value, Mapping | list | tuple) and not value):
        return False
    return type(value) is not type(default) or value != default


def ingest_logs(db: sqlite_utils.Database, path: str | Path, *, fmt: str | None = None,
                mapping: dict[str, str] | None = None, lenient: bool = False,
                progress: Callable[[int, int], None] | None = None,
                max_line_bytes: int = MAX_LINE_BYTES, name: str | None = None,
                parallel: bool | None = None, by: str | None = None, tool: str | None = None,
                redact: bool | None = None, redact_patterns: dict[str, str] | None = None,
                sample: float | None = None, seed: int = 0,
                options: LogIngestOptions | None = None) -> IngestResult:
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

    The options may also come as one :class:`LogIngestOptions` (``options=``), which then takes
    none of their keywords; ``progress`` and ``by`` stay keywords.

    Other writers are never blocked for long: rows are written in short transactions and stay
    hidden until the final commit (see ``staging``); one ingest runs at a time (a second one waits).
    """
    keywords = {"fmt": fmt, "tool": tool, "mapping": mapping, "lenient": lenient, "max_line_bytes": max_line_bytes,
                "name": name, "parallel": parallel, "redact": redact, "redact_patterns": redact_patterns,
                "sample": sample, "seed": seed}
    if options is None:
        options = LogIngestOptions(**keywords)
    else:
        mixed = [key for key, value in keywords.items() if _given(value, getattr(_OPTION_DEFAULTS, key))]
        if not isinstance(options, LogIngestOptions) or mixed:
            raise IngestError(f"give options=LogIngestOptions(...) or its keywords ({', '.join(mixed)}), not both"
                              if mixed else f"options= takes a LogIngestOptions(...); got {type(options).__name__}")
    require(db, by, "lead", "ingesting a file")
    path = Path(path)
    check_path(path)
    fmt, gz = detect_format(path, options.fmt)
    shown = options.name or shown_text(str(path))  # a name that is not UTF-8 cannot be stored as it is
    spec = options.sampling
    redactor = privacy.redactor_for(db, options.redact, options.redact_patterns)
    if redactor is not None:  # the file's name is stored (ingests.path) and in every message
        shown = redactor.record().text(shown)
    result = IngestResult(path=shown, kind="logs", format=fmt, tool=options.tool, redacted=redactor is not None,
                          sample=spec)
    total = path.stat().st_size
    parallel = options.parallel
    if parallel is None:
        parallel = total >= PARALLEL_MIN_BYTES and may_fork()
    parallel = parallel and "fork" in multiprocessing.get_all_start_methods()  # not on Windows
    parse = batches.parsed_batches_forked if parallel else batches.parsed_batches
    # while the parsing process is behind, the file is hashed (else after the last batch). (Not
    # the search index: a failed ingest must leave the database as it was, and FTS5's segments
    # keep a trace of rows indexed and deleted again.)
    with _bulk(db), staged(db, "logs", shown, fmt) as staging, contextlib.closing(FileHash(path)) as sha256:
        load = _LogLoad(LogWriter(db, shown, result, staging.id), staging, result, shown, options.lenient,
                        sampling.Sampler(spec))
        idle = {"idle": sha256.step} if parallel else {}
        with staging.run():
            # a chunk's text crosses from the parser once, not with every row that retrieves it
            # again; a sample keeps only some rows, so there each row keeps its own texts
            for items, done_bytes, fresh_ids, texts in parse(path, fmt, gz, options.mapping,
                                                             options.max_line_bytes, options.lenient, options.tool,
                                                             redactor, spec is None, **idle):
                load.batch(items, fresh_ids, texts)
                if progress:
                    progress(done_bytes, total)
            load.finish()
        if progress:
            progress(total, total)
        _check_found(result, shown, load.chunks)
        return finish_ingest(staging, path, result, options.lenient, load.rejects, shown, by, live=options.live,
                             sha256=sha256)


class _LogLoad:
    """One file's parsed batches on their way into the staged rows: what each batch adds to the
    ``result`` (records, skips, problems, redaction counts), the ``rejects`` a lenient ingest lists,
    the sample, and the size of the write transactions."""

    def __init__(self, writer: LogWriter, staging: Staging, result: IngestResult, shown: str, lenient: bool,
                 sampler: sampling.Sampler) -> None:
        self.writer = writer
        self.staging = staging
        self.result = result
        self.shown = shown  # the file as messages name it
        self.lenient = lenient
        self.sampler = sampler
        self.sizer = _Sizer()
        self.rejects: list[dict] = []
        self.raws: dict[int, Any] = {}  # this batch's raw records by line, for the rejects (lenient only)
        self.chunks = 0  # retrieved chunks in the valid records

    def reject(self, line: int, problem: Problem, raw: Any) -> None:
        self.result.problems.append(problem)
        if self.lenient:
            self.rejects.append({"line": line, "field": problem.field, "error": problem.message, "record": raw})

    def batch(self, items: list, fresh_ids: list[str] | None, texts: dict | None) -> None:
        """Count one parsed batch, reject its invalid records, write (or only check) the valid ones."""
        result = self.result
        if texts:
            self.writer.add_texts(texts)
        rows: list[Row] = []
        self.raws.clear()
        for line, row, problem, raw in items:
            if row is None and problem is None:  # not a retrieval: raw is the reason
                result.skipped += 1
                result.skipped_reasons[raw] = result.skipped_reasons.get(raw, 0) + 1
                continue
            result.records += 1
            if problem is not None:
                self.reject(line, Problem(self.shown, line, *problem), raw)
                continue
            rows.append(row)
            self.chunks += len(row.rec["ids"])
            result.content_ids += row.rec["content_ids"]
            if self.lenient and not self.sampler.holds_back:  # (a reservoir's rejects are listed without the record)
                self.raws[line] = raw
        if self.sampler.spec is not None:
            # the chunk ids of rows left out must not become documents: no fresh-id shortcut
            rows, fresh_ids = self.sampler.take(rows), None
        self.write(rows, fresh_ids)

    def finish(self) -> None:
        """Write what a reservoir sample held back, and count what the sample left out."""
        if self.sampler.holds_back:
            self.write(self.sampler.rest(), None)
        self.result.sampled_out = self.sampler.dropped

    def write(self, rows: list[Row], fresh_ids: list[str] | None) -> None:
        result = self.result
        for row in rows:  # what was replaced in the records kept
            for kind, n in row.rec.get("redactions", {}).items():
                result.redactions[kind] = result.redactions.get(kind, 0) + n
        if result.problems and not self.lenient:
            # nothing more is written; the rest is only checked, to report every problem
            for line, problem in self.writer.write(rows, result.problems, write=False):
                self.reject(line, problem, self.raws.get(line))
            return
        done = 0
        left = set(fresh_ids) if fresh_ids else None  # the batch's new chunk ids no part has yet
        while done < len(rows):
            part = rows[done:done + self.sizer.take(len(rows) - done)]
            fresh = fresh_ids
            if fresh_ids and len(part) < len(rows):
                # a part's new chunk ids: the batch's that it retrieves first (in the batch's
                # first-seen order, which is the parts' order); looking each id of the part up
                # among the documents known instead cost the writer 0.4 s at 100k
                here = left.intersection(itertools.chain.from_iterable(r.rec["ids"] for r in part)) if left else ()
                fresh = [cid for cid in fresh_ids if cid in here] if here else []
                left.difference_update(here)
            with self.staging.write():
                found = self.writer.write(part, result.problems, write=True, fresh_ids=fresh)
            self.sizer.adapt(len(part), self.staging.holds[-1])
            self.staging.key_run(self.writer.next_query_pk)  # the question keys in sorted runs (the rest: publish)
            for line, problem in found:
                self.reject(line, problem, self.raws.get(line))
            done += len(part)
