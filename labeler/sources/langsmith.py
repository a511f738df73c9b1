"""LangSmith: ``POST /runs/query``, or ``POST /api/v2/runs/query`` on a deployment that serves only that.

The project's id comes from ``GET /sessions?name=PROJECT``. Which runs query the deployment serves
comes from ``GET /info``: when its ``instance_flags`` turn the v1 queries off and the SmithDB ones on
(``ch_query_enabled`` false, ``sdb_query_enabled`` true), the v2 query is used, as the langsmith
SDK does. v1: retriever runs (``run_type: retriever``) of the project from the window's start
(``start_time``), the fields ``list_runs`` selects, ``limit`` per page, paged by ``cursors.next``
sent back as ``cursor``. v2: ``run_type: RETRIEVER``, ``min_start_time``/``max_start_time``,
``page_size``, ``selects``, paged by ``next_cursor``; each run is mapped to the v1 fields as the SDK
maps it (``parent_run_ids[-1]`` is the parent, ``project_id`` the session, the run type in lower
case). Runs that started at or after the window's end are dropped here and read by the next
window. Then the root runs of the traces (a root run's id is its trace id: ``id``/``ids``). Each
run has the fields of a ``Run.model_dump()`` file, so ``labeler.ingest.formats``' ``langsmith``
reader reads it. The key goes as ``x-api-key``.

User feedback that LangSmith keeps apart from the runs (``GET /feedback?run=ID&run=ID``, paged by
``offset`` as the SDK's ``list_feedback`` pages it) is attached to each run read as ``feedback`` (the
API's objects), where the ``langsmith`` reader finds the feedback not made by a model as outcome
signals (``labeler.signals``). A deployment without that route (404) has none.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from ..core.times import stamp
from ..errors import SourceError
from .http import Http
from .page import Page, chunks, when

PAGE_LIMIT = 100
TRACES_PER_REQUEST = 100
SELECT = ["id", "name", "run_type", "start_time", "end_time", "inputs", "outputs", "error", "extra", "tags",
          "parent_run_id", "trace_id", "dotted_order", "session_id", "reference_example_id", "status"]
SELECT_V2 = ["ID", "NAME", "RUN_TYPE", "START_TIME", "END_TIME", "INPUTS", "OUTPUTS", "ERROR", "EXTRA", "TAGS",
             "PARENT_RUN_IDS", "TRACE_ID", "DOTTED_ORDER", "PROJECT_ID", "REFERENCE_EXAMPLE_ID", "STATUS"]
FEEDBACK_LIMIT = 100  # per page and runs per request (the SDK's page)
ROOT_LOOKBACK = timedelta(days=1)  # v2 wants a start time: a trace's root started at most this before its retrieval


def v2_base(url: str) -> str:
    """The address the v2 API hangs under, from the v1 API's (``.../api/v1`` or ``.../api`` dropped)."""
    url = url.rstrip("/")
    for suffix in ("/api/v1", "/api"):
        if url.endswith(suffix):
            return url[: -len(suffix)]
    return url


def v1_run(run: dict[str, Any]) -> dict[str, Any]:
    """A v2 run with the v1 fields (what ``list_runs`` and a run dump have)."""
    out = dict(run)
    parents = out.pop("parent_run_ids", None)
    out["parent_run_id"] = parents[-1] if isinstance(parents, list) and parents else None
    if "project_id" in out:
        out["session_id"] = out.pop("project_id")
    for key in ("run_type", "status"):
        if isinstance(out.get(key), str):
            out[key] = out[key].lower()
    out.setdefault("inputs", {})
    return out


class LangSmithClient:
    tool = "langsmith"

    def __init__(self, name: str, url: str, project: str, keys: dict[str, str], *, limit: int = PAGE_LIMIT,
                 **http: Any) -> None:
        self.http = Http(name, url, {"x-api-key": keys["LANGSMITH_API_KEY"]}, **http)
        self.name, self.project, self.limit = name, project, limit
        self.v2_query = v2_base(url) + "/api/v2/runs/query"
        self._session: str | None = None
        self._v2: bool | None = None
        self._earliest: datetime | None = None  # the window's start: roots are looked for from a day before

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

    def uses_v2(self) -> bool:
        """Whether the deployment serves only the v2 runs query (``/info``'s instance flags)."""
        if self._v2 is None:
            try:
                info = self.http.get("info")
            except SourceError as e:
                if e.status != 404:
                    raise
                info = None  # an old deployment without /info serves the v1 query
            flags = info.get("instance_flags") if isinstance(info, dict) else None
            flags = flags if isinstance(flags, dict) else {}
            self._v2 = not bool(flags.get("ch_query_enabled", True)) and bool(flags.get("sdb_query_enabled", False))
        return self._v2

    def _query(self, body: dict[str, Any], v2: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
        """One page: ``body`` for the v1 query, ``v2`` for the v2 one (the project and fields added)."""
        if self.uses_v2():
            answer = self.http.post(self.v2_query, {"project_ids": [self.session()], "selects": SELECT_V2, **v2})
            runs = answer.get("items") if isinstance(answer, dict) else None
            cursor = answer.get("next_cursor") if isinstance(answer, dict) else None
            runs = [v1_run(r) for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []
            return runs, cursor or None
        answer = self.http.post("runs/query", {"session": [self.session()], "select": SELECT, **body})
        runs = answer.get("runs") if isinstance(answer, dict) else None
        cursors = answer.get("cursors") if isinstance(answer, dict) else None
        cursor = cursors.get("next") if isinstance(cursors, dict) else None
        return ([r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []), cursor or None

    def pages(self, start: str, end: str, cursor: str | None) -> Iterator[Page]:
        stop = when(end)
        self._earliest = when(start)
        while True:
            # no end_time in the v1 body (list_runs sends none): runs at or after the window's end are
            # dropped below, and the next window reads them
            body: dict[str, Any] = {"run_type": "retriever", "start_time": start, "limit": self.limit}
            v2: dict[str, Any] = {"run_type": "RETRIEVER", "min_start_time": start, "max_start_time": end,
                                  "page_size": self.limit}
            if cursor:
                body["cursor"] = v2["cursor"] = cursor
            runs, cursor = self._query(body, v2)
            inside = [r for r in runs if (t := self.started(r)) is None or stop is None or t < stop]
            yield Page(inside, cursor, len(runs))
            if not cursor:
                return

    def roots(self, trace_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        since = stamp(self._earliest - ROOT_LOOKBACK) if self._earliest else None
        for part in chunks(sorted(set(trace_ids)), TRACES_PER_REQUEST):
            cursor = None
            while True:
                v2: dict[str, Any] = {"ids": part, "page_size": TRACES_PER_REQUEST}
                if since:
                    v2["min_start_time"] = since
                body: dict[str, Any] = {"id": part, "limit": TRACES_PER_REQUEST}
                if cursor:
                    body["cursor"] = v2["cursor"] = cursor
                runs, cursor = self._query(body, v2)
                for run in runs:
                    trace = self.trace_of(run)
                    if trace is not None and self.is_root(run):
                        found[trace] = run
                if not cursor:
                    break
        return found

    def attach_feedback(self, records: list[dict[str, Any]]) -> None:
        """Put each run's feedback on it (``feedback``: the API's objects) when it has any."""
        by_run: dict[str, list[dict[str, Any]]] = {}
        ids = sorted({str(r["id"]) for r in records if r.get("id")})
        for part in chunks(ids, FEEDBACK_LIMIT):
            offset = 0
            while True:
                params = [("run", i) for i in part] + [("limit", FEEDBACK_LIMIT), ("offset", offset)]
                try:
                    items = self.http.get("feedback", params=params)
                except SourceError as e:
                    if e.status == 404:  # a deployment without the route: no feedback
                        break
                    raise
                items = [f for f in items if isinstance(f, dict)] if isinstance(items, list) else []
                for f in items:
                    if f.get("run_id") is not None:
                        by_run.setdefault(str(f["run_id"]), []).append(f)
                if len(items) < FEEDBACK_LIMIT:
                    break
                offset += len(items)
        for r in records:
            found = by_run.get(str(r.get("id")))
            if found:
                r["feedback"] = found

    def trace_of(self, record: dict[str, Any]) -> str | None:
        trace = record.get("trace_id")
        return str(trace) if trace else None

    def is_root(self, record: dict[str, Any]) -> bool:
        return record.get("parent_run_id") is None

    def started(self, record: dict[str, Any]) -> datetime | None:
        return when(record.get("start_time"))
