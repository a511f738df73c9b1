"""Arize Phoenix: its REST span API, ``GET /v1/projects/{project}/spans``.

Retriever spans (``span_kind=RETRIEVER``) that started in the sync's window (``start_time``
inclusive, ``end_time`` exclusive), sorted by start time, ``limit`` per page, paged by
``cursor``/``next_cursor``; then the root spans of their traces (``trace_id`` repeated,
``parent_id=null``). Each span is the JSON the API returns, which is what Phoenix's REST export
is, so ``labeler.ingest.formats`` reads it with its ``phoenix`` reader. The key, if Phoenix asks
for one, goes as ``Authorization: Bearer``.

User feedback that Phoenix keeps apart from the spans, its span annotations (``GET
/v1/projects/{project}/span_annotations?span_ids=...``, paged by ``cursor``), is attached to each
span read as ``annotations`` (the API's objects), where the ``phoenix`` reader finds the human ones
as outcome signals (``labeler.signals``). A Phoenix without that route (404) has none.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any
from urllib.parse import quote

from ..errors import SourceError
from .http import Http
from .page import Page, chunks, when

# Each request costs Phoenix about the same whatever it asks for: the page query sorts the window's
# retrievers, the roots and annotations queries go over the project's spans (with 100k spans in its
# SQLite: about 0.7-0.9 s of CPU per page of 500 or 1,000, 0.07-0.11 s per roots request of 50 to
# 500 traces, 0.03 s per annotations request of 100 to 1,000 spans). So the sync asks for as much
# as one request may: the largest page Phoenix gives, and as many ids as keep the query string under
# 8 KB (a proxy in front of Phoenix, nginx's default among them, refuses longer request lines):
# 150 trace ids of 32 hex digits, 250 span ids of 16 (Phoenix takes up to 1,000).
PAGE_LIMIT = 1000  # spans per page (Phoenix allows up to 1000)
TRACES_PER_REQUEST = 150
SPANS_PER_ANNOTATION_REQUEST = 250


class PhoenixClient:
    tool = "phoenix"

    def __init__(self, name: str, url: str, project: str, keys: dict[str, str], *, limit: int = PAGE_LIMIT,
                 **http: Any) -> None:
        headers = {"Authorization": f"Bearer {keys['PHOENIX_API_KEY']}"} if keys.get("PHOENIX_API_KEY") else {}
        self.http = Http(name, url, headers, **http)
        self.path = f"v1/projects/{quote(project, safe='')}/spans"
        self.limit = limit

    def close(self) -> None:
        self.http.close()

    def pages(self, start: str, end: str, cursor: str | None) -> Iterator[Page]:
        while True:
            params: dict[str, Any] = {"span_kind": "RETRIEVER", "start_time": start, "end_time": end,
                                      "limit": self.limit, "sort": "start_time", "order": "asc"}
            if cursor:
                params["cursor"] = cursor
            body = self.http.get(self.path, params=params)
            data = body.get("data") if isinstance(body, dict) else None
            spans = [s for s in data if isinstance(s, dict)] if isinstance(data, list) else []
            cursor = body.get("next_cursor") if isinstance(body, dict) else None
            yield Page(spans, cursor or None, len(spans))
            if not cursor:
                return

    def roots(self, trace_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for part in chunks(sorted(set(trace_ids)), TRACES_PER_REQUEST):
            cursor = None
            while True:
                params: list[tuple[str, Any]] = [("trace_id", t) for t in part]
                params += [("parent_id", "null"), ("limit", 1000)] + ([("cursor", cursor)] if cursor else [])
                body = self.http.get(self.path, params=params)
                for span in body.get("data") or []:
                    trace = self.trace_of(span)
                    if trace is not None and span.get("parent_id") is None:
                        found[trace] = span
                cursor = body.get("next_cursor")
                if not cursor:
                    break
        return found

    def attach_feedback(self, records: list[dict[str, Any]]) -> None:
        """Put each span's annotations on it (``annotations``: a list, empty when it has none)."""
        by_span: dict[str, list[dict[str, Any]]] = {}
        ids = sorted({str(c["span_id"]) for r in records
                      if isinstance(c := r.get("context"), dict) and c.get("span_id")})
        path = self.path.removesuffix("/spans") + "/span_annotations"
        for part in chunks(ids, SPANS_PER_ANNOTATION_REQUEST):
            cursor = None
            while True:
                params: list[tuple[str, Any]] = [("span_ids", i) for i in part]
                params += [("limit", 1000)] + ([("cursor", cursor)] if cursor else [])
                try:
                    body = self.http.get(path, params=params)
                except SourceError as e:
                    if e.status == 404:  # a Phoenix without annotations (or none of these spans): none
                        break
                    raise
                for a in body.get("data") or [] if isinstance(body, dict) else []:
                    if isinstance(a, dict) and a.get("span_id") is not None:
                        by_span.setdefault(str(a["span_id"]), []).append(a)
                cursor = body.get("next_cursor") if isinstance(body, dict) else None
                if not cursor:
                    break
        for r in records:
            context = r.get("context")
            found = by_span.get(str(context.get("span_id"))) if isinstance(context, dict) else None
            if found:
                r["annotations"] = found

    def trace_of(self, record: dict[str, Any]) -> str | None:
        context = record.get("context")
        trace = context.get("trace_id") if isinstance(context, dict) else None
        return str(trace) if trace else None

    def is_root(self, record: dict[str, Any]) -> bool:
        return record.get("parent_id") is None

    def started(self, record: dict[str, Any]) -> datetime | None:
        return when(record.get("start_time"))
