"""LangSmith: ``POST /runs/query``.

The project's id comes from ``GET /sessions?name=PROJECT``. Retriever runs (``run_type:
retriever``) of that project that started from the window's start (``start_time``; runs that
started at or after the window's end are left to the next sync), the fields ``list_runs`` selects,
``limit`` per page, paged by ``cursors.next`` sent back as ``cursor``; then the root runs of their
traces (a root run's id is its trace id: ``id: [...]``). Each run is the JSON the API returns, the
same fields a ``Run.model_dump()`` file has, so ``labeler.ingest.formats``' ``langsmith`` reader
reads it. The key goes as ``x-api-key``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from ..errors import SourceError
from .http import Http
from .page import Page, chunks, when

PAGE_LIMIT = 100
TRACES_PER_REQUEST = 100
SELECT = ["id", "name", "run_type", "start_time", "end_time", "inputs", "outputs", "error", "extra", "tags",
          "parent_run_id", "trace_id", "dotted_order", "session_id", "reference_example_id", "status"]


class LangSmithClient:
    tool = "langsmith"

    def __init__(self, name: str, url: str, project: str, keys: dict[str, str], *, limit: int = PAGE_LIMIT,
                 **http: Any) -> None:
        self.http = Http(name, url, {"x-api-key": keys["LANGSMITH_API_KEY"]}, **http)
        self.name, self.project, self.limit = name, project, limit
        self._session: str | None = None

    def close(self) -> None:
        self.http.close()

    def session(self) -> str:
        if self._session is None:
            found = self.http.get("sessions", params={"name": self.project, "limit": 1})
            if isinstance(found, dict):
                found = [found]
            if not isinstance(found, list) or not found or not isinstance(found[0], dict) or not found[0].get("id"):
                raise SourceError(f"{self.name}: LangSmith has no project named {self.project!r}")
            self._session = str(found[0]["id"])
        return self._session

    def _query(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
        answer = self.http.post("runs/query", {"session": [self.session()], "select": SELECT, **body})
        runs = answer.get("runs") if isinstance(answer, dict) else None
        cursors = answer.get("cursors") if isinstance(answer, dict) else None
        cursor = cursors.get("next") if isinstance(cursors, dict) else None
        return ([r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []), cursor or None

    def pages(self, start: str, end: str, cursor: str | None) -> Iterator[Page]:
        stop = when(end)
        while True:
            # no end_time in the body (list_runs sends none): runs at or after the window's end are
            # dropped here, and the next window reads them
            body: dict[str, Any] = {"run_type": "retriever", "start_time": start, "limit": self.limit}
            if cursor:
                body["cursor"] = cursor
            runs, cursor = self._query(body)
            inside = [r for r in runs if (t := self.started(r)) is None or stop is None or t < stop]
            yield Page(inside, cursor, len(runs))
            if not cursor:
                return

    def roots(self, trace_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for part in chunks(sorted(set(trace_ids)), TRACES_PER_REQUEST):
            cursor = None
            while True:
                runs, cursor = self._query({"id": part, "limit": TRACES_PER_REQUEST,
                                            **({"cursor": cursor} if cursor else {})})
                for run in runs:
                    trace = self.trace_of(run)
                    if trace is not None and self.is_root(run):
                        found[trace] = run
                if not cursor:
                    break
        return found

    def trace_of(self, record: dict[str, Any]) -> str | None:
        trace = record.get("trace_id")
        return str(trace) if trace else None

    def is_root(self, record: dict[str, Any]) -> bool:
        return record.get("parent_run_id") is None

    def started(self, record: dict[str, Any]) -> datetime | None:
        return when(record.get("start_time"))
