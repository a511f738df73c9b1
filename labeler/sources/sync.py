"""``labeler sync``: read each source's new retrieval spans and ingest them like a file.

A sync of one source reads the spans that started in its window, ``[high-water - overlap, now)``
(the first sync: from the beginning, or ``since``), page by page. For each page it fetches the
root spans of the page's traces (the question and the final answer); the retrievals and their
roots, exactly as the tool's own export would hold them, are written to a temporary JSONL file
(pages are gathered up to ``BATCH_RECORDS`` records) and ingested with the tool's reader
(``labeler.ingest.ingest_logs``): validation, redaction, sampling, short transactions, ``labeler
ingest list`` and ``ingest undo`` are those of any ingest. After each ingest the cursor of the next
page is saved; after the last page the high-water mark moves to the window's end.

Why no span is skipped or duplicated: the cursor moves only after its pages are ingested, so a
sync killed mid-page reads those pages again, and a retrieval already stored is left out before the
ingest (re-ingesting it would change nothing anyway). Why late spans are caught: each window starts
``overlap`` before the last one ended, so a span the store received up to ``overlap`` late is read
by the next sync. A retrieval whose trace's root has not arrived yet waits (it is in the next
window's overlap) until the root comes or the retrieval is older than the overlap; then it goes in
with what it has, as it would from a file without its root.

``sync_sources`` syncs every source (or one); a source that fails (after the client's retries on
429 and 5xx) records its error and the others go on.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlite_utils

from ..accounts.manage import require
from ..core.times import parse_time, stamp
from ..errors import LabelerError, LabelError, SourceError
from ..ingest.formats import Reader, Skip
from ..ingest.logs import LogIngestOptions, ingest_logs
from ..ingest.sampling import kept_by_rate
from ..ingest.undo import ingest_id_of
from ..ingest.writer import stored_query_ids
from ..labels.routing import ingest_counts, route_pending
from . import keys as source_keys
from . import store as sources
from .langfuse import LangfuseClient
from .langsmith import LangSmithClient
from .page import Client, when
from .phoenix import PhoenixClient

log = logging.getLogger(__name__)

EPOCH = "1970-01-01T00:00:00.000000Z"
_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_UNITS = {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
MAX_PROBLEMS = 20
BATCH_RECORDS = 2000  # records (retrievals and their roots) per ingest: pages are gathered up to it
_running: set[tuple[str, str]] = set()  # (database file, source) synced by a thread of this process now
_running_lock = threading.Lock()


def parse_interval(text: str | float | int) -> float:
    """Seconds in ``5m``, ``30s``, ``2h``, ``1d`` or a plain number of seconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    m = _INTERVAL.match(str(text))
    if not m:
        raise SourceError(f"{text!r} is not an interval; use e.g. 30s, 5m, 2h or 1d")
    return float(m.group(1)) * _UNITS[m.group(2).lower() if m.group(2) else None]


def parse_since(text: str, now: datetime | None = None) -> str:
    """``since`` as a stored time: an ISO 8601 time, or an interval (``2h``: two hours ago)."""
    now = now or datetime.now(UTC)
    if _INTERVAL.match(text):
        return stamp(now - timedelta(seconds=parse_interval(text)))
    try:
        return stamp(parse_time(text))
    except LabelError:
        raise SourceError(f"--since {text!r}: give an ISO 8601 time (2026-12-01T00:00:00Z) or an interval "
                          "back from now (2h)") from None


@dataclass
class SyncResult:
    """What one sync of one source did. ``ok`` false: ``error`` says why (the source's window and
    cursor stay, so the next sync goes on from there)."""

    name: str
    kind: str
    ok: bool = True
    error: str | None = None
    window_start: str | None = None
    window_end: str | None = None
    resumed: bool = False
    pages: int = 0
    spans: int = 0  # retrieval spans (or runs, or observations) read in the window
    waiting: int = 0  # retrievals whose trace root has not arrived yet (read again next sync)
    known: int = 0  # retrievals stored already, or left out by the sample before (the overlap re-read)
    new: int = 0
    unchanged: int = 0
    rejected: int = 0
    skipped: int = 0
    ingest_ids: list[int] = field(default_factory=list)
    high_water: str | None = None
    requests: int = 0
    retries: int = 0
    problems: list[str] = field(default_factory=list)
    routing: dict[str, int] = field(default_factory=dict)  # new queries by routing decision (rules set)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if not self.ok:
            return f"{self.name}: FAILED: {self.error}"
        waiting = f", {self.waiting} waiting for their trace" if self.waiting else ""
        rejected = f", {self.rejected} rejected" if self.rejected else ""
        ingests = f" (ingest {', '.join(map(str, self.ingest_ids))})" if self.ingest_ids else ""
        if self.routing:
            routed = sum(n for r, n in self.routing.items() if r != "not-sampled")
            ingests += f"; routed {routed} of {sum(self.routing.values())} to the queue"
        return (f"{self.name}: {self.spans} retrievals read in {self.pages} page(s): {self.new} new queries, "
                f"{self.known + self.unchanged} already stored{waiting}{rejected}{ingests}; "
                f"synced up to {self.high_water}")


def make_client(source: sources.Source, keys: dict[str, str], **http: Any) -> Client:
    """The HTTP client of ``source``'s kind; ``http`` goes to ``labeler.sources.http.Http``
    (``retries``, ``backoff``, ``timeout``, ``sleep``)."""
    if source.kind == "phoenix":
        return PhoenixClient(source.name, source.url, source.project or "default", keys, **http)
    if source.kind == "langfuse":
        return LangfuseClient(source.name, source.url, keys, **http)
    if source.kind == "langsmith":
        return LangSmithClient(source.name, source.url, source.project or "default", keys, **http)
    raise SourceError(f"source {source.name}: unknown kind {source.kind!r}")


def _window(source: sources.Source, since: str | None, now: datetime) -> tuple[str, str, str | None, bool]:
    """(start, end, cursor, resumed): a sync in progress goes on; else from the high-water mark less
    the overlap (or ``since``) to now."""
    if since is None and source.window_start is not None and source.window_end is not None:
        return source.window_start, source.window_end, source.cursor, True
    if since is not None:
        start = since
    elif source.high_water is not None:
        start = stamp(parse_time(source.high_water) - timedelta(seconds=source.overlap_s))
    else:
        start = EPOCH
    # a clock set back (or a since in the future) gives an empty window, never a high-water mark moved back
    return start, max(stamp(now), start), None, False


class _SourceSync:
    """One sync of one source: the pages of its window, ingested as files of up to ``BATCH_RECORDS``
    records (a page at least), the cursor saved after each ingest."""

    def __init__(self, db: sqlite_utils.Database, source: sources.Source, client: Client, result: SyncResult,
                 by: str | None, folder: Path) -> None:
        self.db, self.source, self.client, self.result, self.by = db, source, client, result, by
        self.folder = folder
        self.pending: list[tuple[str, str | None]] = []  # (query id, start) of the retrievals not ingested yet
        # whether the lines gathered so far give the ingest anything but skips (retriever spans
        # without documents): known from the reading that left out what is stored
        self.worth = False

    def run(self, start: str, end: str, cursor: str | None) -> None:
        first, stop = parse_time(start), parse_time(end)
        settled_before = stop - timedelta(seconds=self.source.overlap_s)
        lines: list[dict] = []  # what the pages since the last saved cursor bring, not ingested yet
        spans, first_page = 0, 1
        seen = {cursor}
        for page in self.client.pages(start, end, cursor):
            result = self.result
            result.pages += 1
            if page.next_cursor is not None and page.next_cursor in seen:  # a store paging in a circle
                raise SourceError(f"{self.source.name}: the store gave the cursor of an earlier page again "
                                  f"(page {result.pages}); stopped")
            seen.add(page.next_cursor)
            inside = [r for r in page.records
                      if (t := self.client.started(r)) is None or first <= t < stop]
            result.spans += len(inside)
            spans += len(inside)
            lines += self.ready_lines(inside, settled_before) if inside else []
            if len(lines) >= BATCH_RECORDS or page.next_cursor is None:
                new = self.ingest(lines, first_page) if lines else 0
                self.remember_left_out()
                sources.save_cursor(self.db, self.source.name, page.next_cursor, spans=spans, new=new)
                lines, spans, first_page = [], 0, result.pages + 1

    def remember_left_out(self) -> None:
        """The retrievals just ingested that the source's sample left out: not read again."""
        source, pending, self.pending = self.source, self.pending, []
        if source.sample is not None:
            sources.add_skipped(self.db, source.name, [(q, t) for q, t in pending
                                                       if not kept_by_rate(q, source.sample, source.seed)])

    def ready_lines(self, records: list[dict], settled_before: datetime) -> list[dict]:
        """The page's retrievals that are ready and not stored yet, with their traces' roots."""
        client, result = self.client, self.result
        traces = {t for r in records if not client.is_root(r) and (t := client.trace_of(r)) is not None}
        roots = client.roots(traces) if traces else {}
        ready: list[dict] = []
        for r in records:
            trace, started = client.trace_of(r), client.started(r)
            if client.is_root(r) or trace is None or trace in roots or started is None or started < settled_before:
                ready.append(r)
            else:
                result.waiting += 1
        return self.unstored(ready, roots) or []

    def unstored(self, ready: list[dict], roots: dict[str, dict]) -> list[dict] | None:
        """The ready retrievals not stored yet, then their traces' roots; None when none is left."""
        client = self.client
        query_of: dict[int, str] = {}  # position in ``ready`` -> the query id its reader gives
        given: set[int] = set()  # positions whose reading gives a record or a problem, not a skip
        candidates = ready + [roots[t] for t in dict.fromkeys(client.trace_of(r) for r in ready) if t in roots]
        for line, item, _ in Reader(client.tool).read(enumerate(candidates)):
            if not isinstance(item, Skip):
                given.add(min(line, len(ready)))  # (at a root's line: counted as given)
            if isinstance(item, dict) and isinstance(item.get("query_id"), str) and line < len(ready):
                query_of[line] = item["query_id"]
        ids = sorted(set(query_of.values()))
        stored = stored_query_ids(self.db, ids) | sources.skipped_ids(self.db, self.source.name, ids)
        keep = [r for i, r in enumerate(ready) if query_of.get(i) not in stored]
        self.result.known += len(ready) - len(keep)
        self.pending += [(query_of[i], stamp(t) if (t := client.started(r)) else None)
                         for i, r in enumerate(ready) if i in query_of and query_of[i] not in stored]
        if not keep:
            return None
        self.worth = self.worth or len(ready) in given or any(
            i in given for i, r in enumerate(ready) if query_of.get(i) not in stored)
        traces = dict.fromkeys(client.trace_of(r) for r in keep)
        lines = keep + [roots[t] for t in traces if t in roots]
        # the store's own user feedback: Phoenix annotations, Langfuse scores, LangSmith feedback
        attach = getattr(client, "attach_feedback", None)
        if attach is not None:
            attach(lines)
        return lines

    def ingest(self, lines: list[dict], first_page: int) -> int:
        result, source = self.result, self.source
        worth, self.worth = self.worth, False
        if not worth:
            return 0  # only retrievers without documents: nothing to ingest
        path = self.folder / f"pages-{first_page}-{result.pages}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for record in lines:
                f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        pages = f"page {first_page}" if first_page == result.pages else f"pages {first_page}-{result.pages}"
        name = f"sync {source.name} {result.window_start}..{result.window_end} {pages}"
        options = LogIngestOptions(tool=self.client.tool, lenient=True, name=name, parallel=False,
                                   sample=source.sample, seed=source.seed, live=True)
        done = ingest_logs(self.db, path, options=options, by=self.by)
        result.new += done.new
        result.unchanged += done.unchanged + done.merged
        result.rejected += done.rejected
        result.skipped += done.skipped
        result.problems += [str(p) for p in done.problems][:MAX_PROBLEMS - len(result.problems)]
        ingest_id = ingest_id_of(self.db, done.path)
        if ingest_id is not None:
            result.ingest_ids.append(int(ingest_id))
            for reason, n in ingest_counts(self.db, int(ingest_id)).items():
                result.routing[reason] = result.routing.get(reason, 0) + n
        return done.new


def sync_source(db: sqlite_utils.Database, name: str, *, since: str | None = None, by: str | None = None,
                now: datetime | None = None, env: dict[str, str] | None = None, secrets: Path | None = None,
                **http: Any) -> SyncResult:
    """Sync the source ``name`` once (leads only); see the module docstring. A failure (the store
    still failing after the retries, a missing key) is returned as ``ok=False`` with ``error``
    recorded on the source, never raised: the caller goes on with the other sources. ``since``: an
    ISO time or an interval back from now; the sync reads from there instead of its high-water mark.
    ``env``/``secrets``: where the keys are read (default: the environment, .streamlit/secrets.toml);
    ``http``: the client's ``retries``, ``backoff``, ``timeout``, ``sleep``."""
    require(db, by, "lead", "syncing a source")
    source = sources.get_source(db, name)
    now = now or datetime.now(UTC)
    result = SyncResult(source.name, source.kind)
    busy = (str(db.conn.execute("PRAGMA database_list").fetchone()[2]), source.name)
    with _running_lock:
        if busy in _running:  # the app's background sync and a "Sync now" click at once
            result.ok, result.error = False, f"{source.name}: a sync of it is running already; try again when it ends"
            return result
        _running.add(busy)
    try:
        return _sync(db, source, result, since=since, by=by, now=now, env=env, secrets=secrets, **http)
    finally:
        with _running_lock:
            _running.discard(busy)


def _sync(db: sqlite_utils.Database, source: sources.Source, result: SyncResult, *, since: str | None,
          by: str | None, now: datetime, env: dict[str, str] | None, secrets: Path | None, **http: Any) -> SyncResult:
    keys: dict[str, str] = {}
    client: Client | None = None
    try:
        keys = source_keys.keys_for(source.kind, source.name, env=env, secrets=secrets)
        start, end, cursor, resumed = _window(source, parse_since(since, now) if since else None, now)
        result.window_start, result.window_end, result.resumed = start, end, resumed
        if not resumed:
            sources.start_window(db, source.name, start, end)
        client = make_client(source, keys, **http)
        route_pending(db)  # what a sync that stopped between an ingest's commit and its routing left
        with tempfile.TemporaryDirectory(prefix="labeler-sync-") as folder:
            _SourceSync(db, source, client, result, by, Path(folder)).run(start, end, cursor)
        # never back: a window after a clock was set back ends before the mark
        result.high_water = mark = max(end, source.high_water or end)
        sources.finish_sync(db, source.name, mark, result.new,
                            forget_before=stamp(parse_time(mark) - timedelta(seconds=source.overlap_s)))
    except Exception as e:  # noqa: BLE001 - one failing source never stops the others
        if not isinstance(e, LabelerError):
            log.exception("sync of %s failed", source.name)
        result.ok = False
        result.error = source_keys.scrub(f"{e}" if isinstance(e, LabelerError) else f"{type(e).__name__}: {e}", keys)
        try:
            sources.record_error(db, source.name, result.error, result.new)
        except LabelerError:
            log.warning("could not record the error of %s", source.name)
    finally:
        if client is not None:
            _count_requests(client, result)
            client.close()
    return result


def _count_requests(client: Client, result: SyncResult) -> None:
    http = getattr(client, "http", None)
    if http is not None:
        result.requests, result.retries = http.attempts, http.retried


def sync_sources(db: sqlite_utils.Database, name: str | None = None, *, since: str | None = None,
                 by: str | None = None, due_only: bool = False, **options: Any) -> list[SyncResult]:
    """Sync every source (or only ``name``), one after the other; each result says whether its
    source synced. ``due_only``: only the sources whose interval (``every``) has passed since their
    last sync (what the app's background sync runs). Options as for :func:`sync_source`."""
    require(db, by, "lead", "syncing sources")
    chosen = [sources.get_source(db, name)] if name else sources.list_sources(db)
    if not chosen:
        raise SourceError("no sources yet: add one with labeler source add phoenix NAME --project P")
    if due_only:
        chosen = [s for s in chosen if is_due(s)]
    return [sync_source(db, s.name, since=since, by=by, **options) for s in chosen]


def is_due(source: sources.Source, now: datetime | None = None) -> bool:
    """Whether ``source`` has an interval and it has passed since its last sync (or it never synced)."""
    if source.every_s is None:
        return False
    if source.last_sync_at is None:
        return True
    return (now or datetime.now(UTC)) - parse_time(source.last_sync_at) >= timedelta(seconds=source.every_s)


def sync_every(db: sqlite_utils.Database, every_s: float, name: str | None = None, *, by: str | None = None,
               rounds: int | None = None, since: str | None = None, sleep: Callable[[float], None] = time.sleep,
               **options: Any) -> Iterator[list[SyncResult]]:
    """Sync every ``every_s`` seconds (``rounds`` times, or until interrupted), yielding each
    round's results. ``since`` applies to the first round only."""
    if every_s <= 0:
        raise SourceError(f"--every must be a positive interval, e.g. 5m; got {every_s!r}")
    done = 0
    while rounds is None or done < rounds:
        began = time.monotonic()
        yield sync_sources(db, name, since=since if done == 0 else None, by=by, **options)
        done += 1
        if rounds is None or done < rounds:
            sleep(max(0.0, every_s - (time.monotonic() - began)))


def source_status(db: sqlite_utils.Database, now: datetime | None = None) -> list[dict[str, Any]]:
    """Every source with its progress, for ``labeler source list`` and the Data page: the stored row
    (never a key) plus ``lag_s``, seconds from the high-water mark to now (None before the first sync)."""
    now = now or datetime.now(UTC)
    rows = []
    for s in sources.list_sources(db):
        row = s.to_dict()
        mark = when(s.high_water)
        row["lag_s"] = round((now - mark).total_seconds(), 1) if mark else None
        rows.append(row)
    return rows
