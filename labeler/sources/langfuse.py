"""Langfuse: its v2 observations API, ``GET /api/public/v2/observations``.

Retriever observations (``type=RETRIEVER``) that started in the sync's window (``fromStartTime``
inclusive, ``toStartTime`` exclusive), with the field groups ``core,basic,io,metadata`` and the
input and output parsed as JSON (``parseIoAsJson``), ``limit`` per page, paged by the cursor in
``meta.cursor``; then, per trace, its observations (``traceId``) of which the root (no
``parentObservationId``) holds what the user asked and what the app answered. Each observation is
the JSON the API returns; ``labeler.ingest.formats``' ``langfuse`` reader reads it (as it reads a
file of such observations). The keys go as HTTP basic auth (public key, secret key).

Scores, Langfuse's user feedback, are kept apart from the observations: the scores of the traces read
(``GET /api/public/v3/scores`` with ``traceId`` a comma-separated list of up to
``TRACES_PER_SCORE_REQUEST`` traces, ``source=API,ANNOTATION`` as an evaluator's are not the user's,
the field groups ``details`` (comment, metadata) and ``subject`` (what the score is about), ``limit``
100, paged by ``meta.cursor``) are attached to each observation read as ``scores`` (the API's
objects): its own and its trace's. A deployment older than the v3 scores API (404) is asked the v2
one, ``GET /api/public/v2/scores?traceId=...`` a trace at a time (it takes one), paged by ``page``
up to ``meta.totalPages``; one without either has none. The ``langfuse`` reader finds the signals in
them (``labeler.ingest.formats.langfuse``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from ..errors import SourceError
from ..ingest.formats.langfuse import score_target
from .http import Http
from .page import Page, chunks, when

PAGE_LIMIT = 500  # observations per page (Langfuse allows up to 1000)
FIELDS = "core,basic,io,metadata"
PATH = "api/public/v2/observations"
SCORES_V3 = "api/public/v3/scores"
SCORES_V2 = "api/public/v2/scores"
SCORE_LIMIT = 100  # scores per page: the API's maximum
TRACES_PER_SCORE_REQUEST = 50  # trace ids in one v3 request (UUIDs: the address stays under 2 kB)


class LangfuseClient:
    tool = "langfuse"

    def __init__(self, name: str, url: str, keys: dict[str, str], *, limit: int = PAGE_LIMIT, **http: Any) -> None:
        self.http = Http(name, url, auth=(keys["LANGFUSE_PUBLIC_KEY"], keys["LANGFUSE_SECRET_KEY"]), **http)
        self.limit = limit
        self._scores_api: str | None = None  # "v3", "v2" or "none": which scores list the deployment serves

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

    def attach_feedback(self, records: list[dict[str, Any]]) -> None:
        """Put on each observation the scores about it or about its trace (``scores``: the API's
        objects) when there are any."""
        traces = sorted({t for r in records if (t := self.trace_of(r)) is not None})
        on_trace: dict[str, list[dict[str, Any]]] = {}
        on_observation: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for score in self.scores(traces) if traces else []:
            trace, observation = score_target(score)
            if trace is None:
                continue
            if observation is None:
                on_trace.setdefault(trace, []).append(score)
            else:
                on_observation.setdefault((trace, observation), []).append(score)
        for r in records:
            trace = self.trace_of(r)
            found = on_observation.get((trace, str(r.get("id"))), []) + on_trace.get(trace, []) if trace else []
            if found:
                r["scores"] = found

    def scores(self, traces: list[str]) -> list[dict[str, Any]]:
        """The users' scores of ``traces`` (the v3 API, else the v2 one; none when neither is served)."""
        if self._scores_api in (None, "v3"):
            try:
                found = self._scores_v3(traces)
            except SourceError as e:
                if e.status != 404 or self._scores_api == "v3":
                    raise
                self._scores_api = "v2"  # a deployment from before the v3 scores API
            else:
                self._scores_api = "v3"
                return found
        if self._scores_api == "v2":
            try:
                return self._scores_v2(traces)
            except SourceError as e:
                if e.status != 404:
                    raise
                self._scores_api = "none"
        return []

    def _scores_v3(self, traces: list[str]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for part in chunks(traces, TRACES_PER_SCORE_REQUEST):
            cursor = None
            while True:
                params = {"traceId": ",".join(part), "source": "API,ANNOTATION", "fields": "details,subject",
                          "limit": SCORE_LIMIT, **({"cursor": cursor} if cursor else {})}
                data, meta = _page(self.http.get(SCORES_V3, params=params))
                found += data
                cursor = meta.get("cursor") or None
                if not cursor:
                    break
        return found

    def _scores_v2(self, traces: list[str]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for trace in traces:
            page = 1
            while True:
                data, meta = _page(self.http.get(SCORES_V2, params={"traceId": trace, "page": page,
                                                                   "limit": SCORE_LIMIT}))
                found += data
                pages = meta.get("totalPages")
                if not data or not isinstance(pages, int) or page >= pages:
                    break
                page += 1
        return found

    def trace_of(self, record: dict[str, Any]) -> str | None:
        trace = record.get("traceId")
        return str(trace) if trace else None

    def is_root(self, record: dict[str, Any]) -> bool:
        return record.get("parentObservationId") is None

    def started(self, record: dict[str, Any]) -> datetime | None:
        return when(record.get("startTime"))


def _page(body: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The scores and the ``meta`` of one page of a scores list."""
    data = body.get("data") if isinstance(body, dict) else None
    meta = body.get("meta") if isinstance(body, dict) else None
    return ([s for s in data if isinstance(s, dict)] if isinstance(data, list) else []), \
        (meta if isinstance(meta, dict) else {})
