"""The OTLP receiver: ``POST /v1/traces`` from an instrumented app (OpenInference: its retriever
spans carry ``retrieval.documents.N.document.*``; OpenLLMetry's LangChain retrievers too), stored
as it arrives through the log ingest.

A collect is an ingest like any other. Each request is served by ``otlp_http`` and decoded at once
(``otlp_proto``; a payload
that cannot be read gets a 4xx with its reason, and nothing of it is kept); the retrieval spans and
the roots of their traces are held in a bounded buffer, the other spans are counted and dropped.
A trace is ready when its root has come (it carries the question and the final answer, and exporters
send it last, often in a later request than the retrievals) or when its first span has waited
``hold`` seconds. Every ``flush_every`` seconds, or as soon as ``batch`` spans are ready, the ready
traces are spooled to a temporary OTLP/JSON file and ingested with ``ingest_logs(tool="otlp")``:
the same validation, redaction, sampling, short write transactions and query, chunk and text as
ingesting the exported file, and each flush is an ingest that ``labeler ingest list`` shows and
``labeler ingest undo`` removes. When the buffer is full a request is refused with 429 and a
``Retry-After`` (exporters retry), never taken into unbounded memory; closing flushes everything
held, ready or not.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple

import sqlite_utils

from .. import db as store
from .. import privacy
from ..errors import LabelerError
from ..ingest.logs import ingest_logs
from ..ingest.undo import ingest_id_of
from . import otlp_proto
from .collect_options import CollectError, CollectOptions, CollectSummary, FlushResult
from .otlp_http import TRACES_PATH, Reply, make_server
from .otlp_proto import PayloadError, Received

MiB = 1024 * 1024
DECODING = 4  # requests read and decoded at once (each up to max_request_mb, a few times that decoded)


@dataclass
class _Trace:
    first: float  # when its first span came (monotonic)
    lines: list[bytes] = field(default_factory=list)
    size: int = 0
    root: bytes | None = None  # the root's line, once it came
    resent: int = 0  # 1 when the root was written before, with earlier retrievals of the trace


class _Root(NamedTuple):
    at: float  # when it came, or when it was written (monotonic)
    line: bytes
    written: bool  # kept after its trace was written, for retrievals of the trace that come late


class Collector:
    """An OTLP/HTTP receiver writing into ``db``; ``start()`` listens on ``host:port`` (port 0: a
    free one, then ``port`` says which) with a server thread and a flusher thread, ``close()``
    stops taking requests, flushes everything held and returns the ``CollectSummary``. Also a
    context manager. ``on_flush(FlushResult)`` is called after each flush, from the flusher thread
    (and from ``close()``'s). ``by``: the account the ingests are recorded under (None: the local
    operator)."""

    def __init__(self, db: sqlite_utils.Database, host: str = "127.0.0.1", port: int = 4318, *,
                 options: CollectOptions | None = None, on_flush: Callable[[FlushResult], None] | None = None,
                 by: str | None = None) -> None:
        self.db = db
        self.host, self.port = host, port
        self.options = options or CollectOptions()
        self.on_flush = on_flush
        self.by = by
        self.max_buffer = int(self.options.max_buffer_mb * MiB)
        self.max_request = int(self.options.max_request_mb * MiB)
        self._redactor = privacy.redactor_for(db, self.options.redact, self.options.ingest_options("check").redact_patterns)
        self.decoding = threading.BoundedSemaphore(DECODING)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._traces: OrderedDict[str, _Trace] = OrderedDict()
        # roots of traces with no retrieval held: waiting for one, or written and kept for late ones
        self._roots: OrderedDict[str, _Root] = OrderedDict()
        self._waiting_roots = 0  # of them, the roots not written yet
        self._held = 0  # bytes of every line held (traces and roots)
        self._held_spans = 0  # lines in _traces
        self._ready = 0  # lines in traces whose root has come
        self._roots_bytes = 0
        self._last_flush = time.monotonic()
        self._closing = False
        self._callback_error: Exception | None = None
        self._number = 0
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._spool = tempfile.TemporaryDirectory(prefix="labeler-collect-")
        self.summary = CollectSummary(address=f"{host}:{port}", started_at=store.now())

    # --- the server ---------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The endpoint an exporter is given: ``http://HOST:PORT/v1/traces``."""
        return f"http://{self.address}{TRACES_PATH}"

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the spans held now (never more than ``max_buffer``)."""
        return self._held

    def start(self) -> Collector:
        try:
            server = make_server(self.host, self.port, self)
        except OSError as e:
            self._spool.cleanup()
            raise CollectError(f"cannot listen on {self.host}:{self.port}: {e.strerror or e}; "
                               "pick another --otlp HOST:PORT (port 0: any free port)") from None
        self._server = server
        self.port = server.server_address[1]
        self.summary.address = self.address
        self._threads = [threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                          name=f"collect {self.address}", daemon=True),
                         threading.Thread(target=self._flusher, name=f"collect flusher {self.address}", daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def close(self) -> CollectSummary:
        """Stop taking requests (later ones get 503), flush everything held, return the summary."""
        with self._lock:
            self._closing = True
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join()
        self._threads = []
        with contextlib.suppress(Exception):
            while self._flush(everything=True) is not None:
                pass
        self._server = None
        self._spool.cleanup()
        if self._callback_error is not None:
            raise self._callback_error
        return self.summary

    def __enter__(self) -> Collector:
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- receiving ----------------------------------------------------------------------------

    def receive(self, raw: bytes, content_type: str | None, content_encoding: str | None = None) -> Reply:
        """Take one request's body: 200 when its spans are held, else the status and reason."""
        with self._lock:
            if self._held >= self.max_buffer and not self._closing:  # full: not worth decoding
                return self._full()
        try:
            spans = otlp_proto.decode(otlp_proto.body_of(raw, content_encoding, self.max_request), content_type)
        except PayloadError as e:
            with self._lock:
                self.summary.bad_requests += 1
            return Reply(e.status, e.reason)
        keep = [s for s in spans if s.retrieval or s.root]
        size = sum(len(s.line) for s in keep)
        if size > self.max_buffer:  # it would never fit: asking again would not help
            with self._lock:
                self.summary.bad_requests += 1
            return Reply(413, f"the request holds {size / MiB:.1f} MiB of spans to keep, more than the whole buffer "
                              f"({self.max_buffer / MiB:g} MiB); send smaller batches")
        with self._lock:
            if self._closing:
                self.summary.refused += 1
                return Reply(503, "the collector is shutting down", {"Retry-After": "5"})
            if self._held + size > self.max_buffer:
                return self._full()
            self.summary.requests += 1
            self.summary.spans_received += len(spans)
            self.summary.spans_dropped += len(spans) - len(keep)
            now = time.monotonic()
            for span in keep:
                self._hold(span, now)
            self.summary.spans_buffered = self._held_spans + self._waiting_roots
            if self._ready >= self.options.batch or self._held > self.max_buffer * 3 // 4:
                self._wake.set()
        return Reply(200)

    def _full(self) -> Reply:
        """429 (under the lock): the buffer cannot take the request until a flush frees room."""
        self.summary.refused += 1
        self._wake.set()
        wait = max(1, math.ceil(self.options.flush_every))
        return Reply(429, f"the buffer is full ({self.max_buffer / MiB:g} MiB held); try again in {wait} s",
                     {"Retry-After": str(wait)})

    def _hold(self, span: Received, now: float) -> None:
        """Hold one span (under the lock): a retrieval joins its trace (and the root waiting for it,
        if any); a root completes its trace, or waits for a retrieval of it."""
        trace = self._traces.get(span.trace_id)
        if trace is None and not span.retrieval:
            self._add_root(span.trace_id, _Root(now, span.line, written=False))
            return
        if trace is None:
            trace = self._traces[span.trace_id] = _Trace(now)
            early = self._pop_root(span.trace_id)
            if early is not None:  # its root came first (or was written with earlier retrievals)
                self._append(trace, early.line)
                trace.root = early.line
                trace.resent = int(early.written)
        self._append(trace, span.line)
        if span.root and trace.root is None:
            trace.root = span.line
            self._ready += len(trace.lines) - 1
        if trace.root is not None:
            self._ready += 1

    def _append(self, trace: _Trace, line: bytes) -> None:
        trace.lines.append(line)
        trace.size += len(line)
        self._held += len(line)
        self._held_spans += 1

    def _add_root(self, trace_id: str, root: _Root) -> None:
        self._pop_root(trace_id)
        self._roots[trace_id] = root
        self._roots_bytes += len(root.line)
        self._held += len(root.line)
        self._waiting_roots += not root.written
        # roots that no retrieval claims are not kept past a quarter of the buffer
        while self._roots_bytes > self.max_buffer // 4:
            self._drop_root()

    def _pop_root(self, trace_id: str) -> _Root | None:
        root = self._roots.pop(trace_id, None)
        if root is not None:
            self._roots_bytes -= len(root.line)
            self._held -= len(root.line)
            self._waiting_roots -= not root.written
        return root

    def _drop_root(self) -> None:
        root = self._pop_root(next(iter(self._roots)))
        if root is not None and not root.written:
            self.summary.spans_dropped += 1

    # --- flushing -----------------------------------------------------------------------------

    def _flusher(self) -> None:
        tick = min(self.options.flush_every, self.options.hold, 0.5)
        while not self._stop.is_set():
            self._wake.wait(tick)
            self._wake.clear()
            if self._stop.is_set():
                return
            self._flush(everything=False)

    def flush(self, *, everything: bool = True) -> FlushResult | None:
        """Write now the traces held, ready or not (what ``close`` does last) or, with
        ``everything=False``, only the ready ones (their root came, or they waited ``hold``): one
        batch, oldest first (call again while it returns one); None when there was none."""
        return self._flush(everything=everything, now=True)

    def _take(self, everything: bool, forced: bool) -> tuple[list[_Trace], int] | None:
        """The traces to write now (under the lock), and how many of them lack their root."""
        with self._lock:
            now = time.monotonic()
            while self._roots:  # roots whose retrievals never came (or no more came)
                if now - next(iter(self._roots.values())).at < self.options.hold and not everything:
                    break
                self._drop_root()
            pressed = self._held > self.max_buffer * 3 // 4
            due = (everything or forced or pressed or self._ready >= self.options.batch
                   or now - self._last_flush >= self.options.flush_every)
            if not due or not self._traces:
                return None
            taken: list[_Trace] = []
            without_root = spans = 0
            for trace_id in list(self._traces):
                if spans >= self.options.batch:  # a flush is one batch; the next one follows at once
                    self._wake.set()
                    break
                trace = self._traces[trace_id]
                late = now - trace.first >= self.options.hold
                if not (everything or trace.root is not None or late or self._held > self.max_buffer // 2):
                    continue  # (under pressure the oldest go without their root until half is free)
                del self._traces[trace_id]
                taken.append(trace)
                without_root += trace.root is None
                spans += len(trace.lines)
                self._held -= trace.size
                self._held_spans -= len(trace.lines)
                if trace.root is not None:
                    self._ready -= len(trace.lines)
                    if not everything:  # a retrieval of this trace that comes later still finds its root
                        self._add_root(trace_id, _Root(now, trace.root, written=True))
            self.summary.spans_buffered = self._held_spans + self._waiting_roots
            if not taken:
                return None
            self._last_flush = now
            return taken, without_root

    def _flush(self, everything: bool, now: bool = False) -> FlushResult | None:
        with self._flush_lock:
            got = self._take(everything, now)
            if got is None:
                return None
            traces, without_root = got
            self._number += 1
            name = self._name(self._number)
            path = Path(self._spool.name) / f"flush-{self._number}.jsonl"
            spans = 0
            with open(path, "wb") as f:
                for trace in traces:
                    f.writelines(trace.lines)
                    spans += len(trace.lines) - trace.resent
            result = FlushResult(self._number, store.now(), name, spans, len(traces), without_root)
            del traces
            start = time.perf_counter()
            try:
                self._ingest(path, result)
            except Exception as e:  # noqa: BLE001 - a failed flush is reported; the collector goes on
                result.error = str(e) if isinstance(e, LabelerError) else f"{type(e).__name__}: {e}"
            finally:
                path.unlink(missing_ok=True)
                Path(str(path) + ".rejects.jsonl").unlink(missing_ok=True)
            result.seconds = round(time.perf_counter() - start, 3)
            with self._lock:
                self.summary.add(result)
            if self.on_flush is not None:
                try:
                    self.on_flush(result)
                except Exception as e:  # noqa: BLE001 - raised again by close(), after the last flush
                    self._callback_error = self._callback_error or e
            return result

    def _name(self, number: int) -> str:
        """The flush's name in ``ingests.path`` (redacted as the ingest redacts it)."""
        name = f"collect {self.address} {self.summary.started_at} #{number}"
        return self._redactor.record().text(name) if self._redactor is not None else name

    def _ingest(self, path: Path, result: FlushResult) -> None:
        ingested = ingest_logs(self.db, path, options=self.options.ingest_options(result.name), by=self.by)
        for key in ("records", "new", "merged", "unchanged", "rejected", "sampled_out", "retrievals",
                    "documents_new"):
            setattr(result, key, getattr(ingested, key))
        result.redactions = dict(ingested.redactions)
        result.problems = [str(p) for p in ingested.problems[:5]]
        result.ingest_id = ingest_id_of(self.db, result.name)


def serve(db: sqlite_utils.Database, host: str = "127.0.0.1", port: int = 4318, *,
          options: CollectOptions | None = None, on_flush: Callable[[FlushResult], None] | None = None,
          on_start: Callable[[Collector], None] | None = None, stop: threading.Event | None = None,
          by: str | None = None) -> CollectSummary:
    """Receive OTLP/HTTP traces on ``host:port`` until ``stop`` is set (or KeyboardInterrupt), then
    flush what is held and return the summary. ``on_start(collector)`` once it listens."""
    stop = stop or threading.Event()
    collector = Collector(db, host, port, options=options, on_flush=on_flush, by=by).start()
    try:
        if on_start is not None:
            on_start(collector)
        while not stop.wait(0.2):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        summary = collector.close()
    return summary


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:4318`` for IPv6; ``:4318`` is 127.0.0.1) as (host, port)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise CollectError(f"--otlp takes HOST:PORT, e.g. 127.0.0.1:4318; got {text!r}")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)
