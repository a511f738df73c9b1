"""What ``labeler collect`` is asked (``CollectOptions``, checked when made) and what it reports:
each flush (``FlushResult``) and the run so far (``CollectSummary``)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import LabelerError
from ..ingest.logs import LogIngestOptions

KEPT_FLUSHES = 1000  # the summary lists the last flushes, not every one of a long run


class CollectError(LabelerError):
    """The collector cannot start as asked (a bad option, an address it cannot listen on)."""


@dataclass(frozen=True)
class CollectOptions:
    """How a collect holds and writes spans. ``batch``: ingest as soon as this many spans are ready;
    ``flush_every``: else every this many seconds; ``hold``: how long a trace's retrievals wait
    for its root (question and answer) before they are written without it; ``max_buffer_mb``: the
    spans held in memory, at most (a request that would pass it gets 429); ``max_request_mb``: one
    request's body, at most, compressed or not (413). ``redact``, ``redact_patterns``, ``sample`` (a
    rate below 1) and ``seed`` are the log ingest's (``LogIngestOptions``)."""

    batch: int = 5000
    flush_every: float = 2.0
    hold: float = 30.0
    max_buffer_mb: float = 64.0
    max_request_mb: float = 16.0
    redact: bool | None = None
    redact_patterns: Any = None
    sample: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.batch, int) or isinstance(self.batch, bool) or self.batch < 1:
            raise CollectError(f"batch must be a whole number of spans >= 1, e.g. 5000; got {self.batch!r}")
        for name in ("flush_every", "hold", "max_buffer_mb", "max_request_mb"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise CollectError(f"{name} must be a number > 0; got {value!r}")
        if self.max_request_mb > self.max_buffer_mb:
            raise CollectError(f"max_request_mb ({self.max_request_mb}) cannot be more than max_buffer_mb "
                               f"({self.max_buffer_mb}): such a request could never be taken")
        if self.sample is not None and not (isinstance(self.sample, int | float) and 0 < self.sample < 1):
            raise CollectError(f"a collect samples by rate: sample must be between 0 and 1 (e.g. 0.05); "
                               f"got {self.sample!r}")
        self.ingest_options("check")  # a bad pattern or seed is one line before the port is opened

    def ingest_options(self, name: str) -> LogIngestOptions:
        return LogIngestOptions(tool="otlp", lenient=True, name=name, parallel=False, redact=self.redact,
                                redact_patterns=self.redact_patterns, sample=self.sample, seed=self.seed, live=True)


@dataclass
class FlushResult:
    """One flush: the ingest it made (``ingest_id``, ``name``), the spans and traces it wrote
    (``without_root``: traces written without their root after waiting ``hold`` seconds, or at
    close) and what the ingest reported; ``error`` when the ingest failed (its spans are lost)."""

    number: int
    at: str
    name: str
    spans: int
    traces: int
    without_root: int
    seconds: float = 0.0
    ingest_id: int | None = None
    records: int = 0
    new: int = 0
    merged: int = 0
    unchanged: int = 0
    rejected: int = 0
    sampled_out: int = 0
    retrievals: int = 0
    documents_new: int = 0
    redactions: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CollectSummary:
    """A collect so far: requests (taken, refused because the buffer was full or the collector was
    closing, bad: 4xx), spans (received in the requests taken, written, dropped: not retrievals nor
    the root of one, buffered: still held), and the sums of its flushes (the last ``KEPT_FLUSHES``
    of which are listed)."""

    address: str
    started_at: str
    requests: int = 0
    refused: int = 0
    bad_requests: int = 0
    spans_received: int = 0
    spans_written: int = 0
    spans_dropped: int = 0
    spans_buffered: int = 0
    flush_count: int = 0
    failed_flushes: int = 0
    records: int = 0
    new: int = 0
    merged: int = 0
    unchanged: int = 0
    rejected: int = 0
    retrievals: int = 0
    documents_new: int = 0
    flushes: list[FlushResult] = field(default_factory=list)

    def add(self, flush: FlushResult) -> None:
        self.flush_count += 1
        self.failed_flushes += flush.error is not None
        self.spans_written += flush.spans if flush.error is None else 0
        for key in ("records", "new", "merged", "unchanged", "rejected", "retrievals", "documents_new"):
            setattr(self, key, getattr(self, key) + getattr(flush, key))
        self.flushes.append(flush)
        del self.flushes[:-KEPT_FLUSHES]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
