"""What every source client gives the sync loop: pages of retrieval records in the shape the tool's own
export has (so ``labeler.ingest.formats`` reads them exactly as it reads that export), and the root
records of their traces (the question the user asked and the answer the app gave)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from ..core.times import parse_time
from ..errors import LabelError


@dataclass
class Page:
    """One page of a store's retrieval spans (or runs, or observations) and the cursor of the next."""

    records: list[dict[str, Any]]
    next_cursor: str | None
    raw_count: int = 0  # what the store answered, before the client dropped what lies outside the window


class Client(Protocol):
    """A trace store's client (``phoenix``, ``langfuse``, ``langsmith``)."""

    tool: str  # the ingest reader of the tool's export (``labeler.ingest.formats``)

    def pages(self, start: str, end: str, cursor: str | None) -> Iterator[Page]:
        """Retrieval records that started in [start, end), page by page from ``cursor`` (None: the first)."""
        ...

    def roots(self, trace_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The root record of each trace that has one in the store yet (trace id -> record)."""
        ...

    def trace_of(self, record: dict[str, Any]) -> str | None:
        ...

    def is_root(self, record: dict[str, Any]) -> bool:
        ...

    def started(self, record: dict[str, Any]) -> datetime | None:
        ...

    def close(self) -> None:
        ...


def when(value: Any) -> datetime | None:
    """A record's start time as an aware UTC datetime (None when it has none or it is unreadable)."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):  # nanoseconds, milliseconds or seconds since the epoch
        seconds = value / 1e9 if value > 1e14 else value / 1e3 if value > 1e11 else value
        return datetime.fromtimestamp(seconds, UTC)
    try:
        return parse_time(value if isinstance(value, datetime) else str(value))
    except (LabelError, ValueError):
        return None


def chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
