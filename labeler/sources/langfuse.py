"""Langfuse: its v2 observations API, ``GET /api/public/v2/observations``.

Retriever observations (``type=RETRIEVER``) that started in the sync's window (``fromStartTime``
inclusive, ``toStartTime`` exclusive), with the field groups ``core,basic,io,metadata`` and the
input and output parsed as JSON (``parseIoAsJson``), ``limit`` per page, paged by the cursor in
``meta.cursor``; then, per trace, its observations (``traceId``) of which the root (no
``parentObservationId``) holds what the user asked and what the app answered. Each observation is
the JSON the API returns; ``labeler.ingest.formats``' ``langfuse`` reader reads it (as it reads a
file of such observations). The keys go as HTTP basic auth (public key, secret key).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from .http import Http
from .page import Page, when

PAGE_LIMIT = 500  # observations per page (Langfuse allows up to 1000)
FIELDS = "core,basic,io,metadata"
PATH = "api/public/v2/observations"


class LangfuseClient:
    tool = "langfuse"

    def __init__(self, name: str, url: str, keys: dict[str, str], *, limit: int = PAGE_LIMIT, **http: Any) -> None:
        self.http = Http(name, url, auth=(keys["LANGFUSE_PUBLIC_KEY"], keys["LANGFUSE_SECRET_KEY"]), **http)
        self.limit = limit

    def close(self) -> None:
        self.http.close()

    def _get(self, params: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
        body = self.http.get(PATH, params={"fields": FIELDS, "parseIoAsJson": "true", "limit": self.limit, **params})
        data = body.get("data") if isinstance(body, dict) else None
        meta = body.get("meta") if isinstance(body, dict) else None
        cursor = meta.get("cursor") if isinstance(meta, dict) else None
        return ([o for o in data if isinstance(o, dict)] if isinstance(data, list) else []), cursor or None

    def pages(self, start: str, end: str, cursor: str | None) -> Iterator[Page]:
        while True:
            params: dict[str, Any] = {"type": "RETRIEVER", "fromStartTime": start, "toStartTime": end}
            if cursor:
                params["cursor"] = cursor
            observations, cursor = self._get(params)
            yield Page(observations, cursor, len(observations))
            if not cursor:
                return

    def roots(self, trace_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for trace in sorted(set(trace_ids)):
            cursor = None
            while trace not in found:
                observations, cursor = self._get({"traceId": trace, **({"cursor": cursor} if cursor else {})})
                for o in observations:
                    if self.is_root(o) and str(o.get("traceId")) == trace:
                        found[trace] = o
                        break
                if not cursor:
                    break
        return found

    def trace_of(self, record: dict[str, Any]) -> str | None:
        trace = record.get("traceId")
        return str(trace) if trace else None

    def is_root(self, record: dict[str, Any]) -> bool:
        return record.get("parentObservationId") is None

    def started(self, record: dict[str, Any]) -> datetime | None:
        return when(record.get("startTime"))
