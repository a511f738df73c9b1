"""Fake trace stores for tests: real HTTP on 127.0.0.1 answering as Phoenix's REST span API,
Langfuse's v2 observations API and LangSmith's ``/sessions`` and ``POST /runs/query`` do (the
shapes read from each tool's own client: phoenix ``routers/v1/spans.py``, langfuse-python's
``observations_v_2`` client and ``ObservationsV2Response``, langsmith-sdk's ``list_runs`` and
``_get_cursor_paginated_list``), with paging by cursor, records the test makes arrive late, and
faults: 429 with Retry-After, 5xx, and a connection dropped in the middle of a page.

``FakeStore(kind, key=...)`` holds records (``add``), serves them from ``start()`` until
``stop()``, checks the key each tool sends (Phoenix ``Authorization: Bearer``, Langfuse basic auth,
LangSmith ``x-api-key``) and logs every request. A page holds at most ``page_size`` records
whatever limit the client asks for, so a few records make many pages. ``faults`` is a list the
handler pops from for each data request: ``429`` (with ``Retry-After: retry_after``), ``500``,
``503``, ``drop`` (headers and half the body, then the connection closes), ``echo-key`` (a 401
whose body repeats the key it was sent), ``500-echo`` (the same as a 500); ``None`` answers normally.

What ``labeler push`` sends is accepted and kept as each tool does (the faults apply to it too):
Phoenix's ``POST /v1/span_annotations`` and ``/v1/document_annotations`` (``sync=true``: the whole
request refused when a span is missing; upserted on name, span, identifier and document position;
phoenix ``routers/v1/spans.py``, ``documents.py``) in ``annotations``; Langfuse's ``POST
/api/public/scores`` (langfuse-python ``scores.create``: upserted on the score's ``id``) in
``scores``; LangSmith's ``POST /feedback`` (``create_feedback``; an id sent before is a 409, a run's feedback without its project's
``session_id`` is refused by a SmithDB-only deployment) and
``PATCH /feedback/{id}`` (``update_feedback``) in ``feedback``.

The fake Langfuse also lists its scores, those sent and those a test adds (``add_scores``, e.g. an
evaluator's, which the public API cannot create): ``GET /api/public/v3/scores`` and ``GET
/api/public/v2/scores`` (tests/fake_scores.py). ``score_apis`` says which of the two the deployment
serves: both by default; ``("v2",)`` one from before the v3 scores API, ``("v3",)`` one in Langfuse
v4's events-only mode (v2 answers 404). ``route_faults`` ({path: faults}) are popped for requests to
that path before the shared ``faults``.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests import fake_scores

KINDS = ("phoenix", "langfuse", "langsmith")
PROJECT_ID = "5c0b8f0e-1d5e-4a57-9b0e-3f1d2c4b5a69"
TENANT_ID = "9a1e2b3c-4d5e-4f60-8a7b-6c5d4e3f2a10"


def _time(value: Any) -> datetime:
    text = str(value).replace("Z", "+00:00")
    t = datetime.fromisoformat(text)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 - socketserver's signature
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class FakeStore:
    def __init__(self, kind: str, *, key: str | tuple[str, str] | None = None, project: str = "rag",
                 page_size: int = 3, smithdb_only: bool = False,
                 score_apis: tuple[str, ...] = ("v2", "v3")) -> None:
        if kind not in KINDS:
            raise ValueError(kind)
        self.kind, self.key, self.project, self.page_size = kind, key, project, page_size
        # LangSmith: a deployment that serves only the v2 runs query (its /info instance flags say so)
        self.smithdb_only = smithdb_only
        self.score_apis = score_apis  # Langfuse: the scores lists the deployment serves
        self.route_faults: dict[str, list[str | None]] = {}
        self.records: list[dict[str, Any]] = []
        self.faults: list[str | None] = []
        self.retry_after = "0"
        self.requests: list[dict[str, Any]] = []
        # what labeler push sent: Phoenix annotations by (name, span id, identifier, document position
        # or None), Langfuse scores and LangSmith feedback by id
        self.annotations: dict[tuple[str, str, str, int | None], dict[str, Any]] = {}
        self.scores: dict[str, dict[str, Any]] = {}
        self.feedback: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self._httpd: _Server | None = None
        self.port = 0

    # -- records ------------------------------------------------------------------------------

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        with self.lock:
            self.records.extend(records)

    def add_scores(self, scores: Iterable[dict[str, Any]]) -> None:
        """Langfuse scores as the store holds them (``fake_scores.langfuse_score``)."""
        with self.lock:
            for score in scores:
                self.scores[score["id"]] = score

    def _start_of(self, r: dict[str, Any]) -> datetime:
        return _time(r["startTime"] if self.kind == "langfuse" else r["start_time"])

    def _trace_of(self, r: dict[str, Any]) -> str:
        if self.kind == "phoenix":
            return r["context"]["trace_id"]
        return r["traceId"] if self.kind == "langfuse" else r["trace_id"]

    def _kind_of(self, r: dict[str, Any]) -> str:
        if self.kind == "phoenix":
            return r["span_kind"]
        return r["type"] if self.kind == "langfuse" else str(r["run_type"]).upper()

    def _parent_of(self, r: dict[str, Any]) -> Any:
        if self.kind == "phoenix":
            return r["parent_id"]
        return r.get("parentObservationId") if self.kind == "langfuse" else r.get("parent_run_id")

    def _id_of(self, r: dict[str, Any]) -> str:
        return r["context"]["span_id"] if self.kind == "phoenix" else r["id"]

    def select(self, *, kind: str | None = None, start: str | None = None, end: str | None = None,
               traces: list[str] | None = None, ids: list[str] | None = None, roots_only: bool = False,
               cursor: str | None = None, newest_first: bool = False) -> tuple[list[dict], str | None]:
        """One page of the records matching the filters, ordered by (start time, position), and the
        cursor of the next page (the position key of its first record)."""
        with self.lock:
            rows = list(enumerate(self.records))
        found = []
        for pos, r in rows:
            t = self._start_of(r)
            if kind and self._kind_of(r) != kind.upper():
                continue
            if start and t < _time(start):
                continue
            if end and t >= _time(end):
                continue
            if traces and self._trace_of(r) not in traces:
                continue
            if ids and self._id_of(r) not in ids:
                continue
            if roots_only and self._parent_of(r) is not None:
                continue
            found.append(((t.timestamp(), pos), r))
        found.sort(key=lambda x: x[0], reverse=newest_first)
        if cursor:
            bound = tuple(json.loads(base64.b64decode(cursor)))
            found = [f for f in found if (f[0] <= bound if newest_first else f[0] >= bound)]
        page, rest = found[:self.page_size], found[self.page_size:]
        after = base64.b64encode(json.dumps(list(rest[0][0])).encode()).decode() if rest else None
        return [r for _, r in page], after

    # -- HTTP ---------------------------------------------------------------------------------

    def authorized(self, headers: Any) -> bool:
        if self.key is None:
            return True
        if self.kind == "phoenix":
            return headers.get("Authorization") == f"Bearer {self.key}"
        if self.kind == "langsmith":
            return headers.get("x-api-key") == self.key
        public, secret = self.key  # type: ignore[misc]
        token = base64.b64encode(f"{public}:{secret}".encode()).decode()
        return headers.get("Authorization") == f"Basic {token}"

    def _annotate(self, path: str, body: Any) -> tuple[int, Any]:
        """Phoenix's ``POST /v1/span_annotations`` and ``/v1/document_annotations`` with ``sync=true``
        (routers/v1/spans.py, documents.py, annotations.py): the whole request is refused (404) when a
        span is missing, a document position out of range or a document identifier non-empty is 422;
        otherwise each annotation is upserted on (name, span, identifier[, position])."""
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            return 422, {"detail": "data: field required"}
        documents = path == "/v1/document_annotations"
        with self.lock:
            spans = {r["context"]["span_id"]: r for r in self.records}
        missing = sorted({d.get("span_id") for d in data} - set(spans))
        if missing:
            return 404, {"detail": f"Spans with IDs {', '.join(map(str, missing))} do not exist."}
        for d in data:
            if d.get("annotator_kind") not in ("LLM", "CODE", "HUMAN") or not d.get("name"):
                return 422, {"detail": "annotator_kind and name are required"}
            if documents:
                if str(d.get("identifier") or "").strip():
                    return 422, {"detail": f"Non-empty identifier '{d['identifier']}' is not supported"}
                n = sum(k.endswith(".document.id") for k in spans[d["span_id"]]["attributes"])
                if not isinstance(d.get("document_position"), int) or d["document_position"] not in range(n):
                    return 422, {"detail": f"Document position {d.get('document_position')} is out of bounds"}
        ids = []
        with self.lock:
            for d in data:
                key = (d["name"], d["span_id"], d.get("identifier") or "", d.get("document_position") if documents
                       else None)
                self.annotations[key] = d
                ids.append(str(list(self.annotations).index(key) + 1))
        kind = "DocumentAnnotation" if documents else "SpanAnnotation"
        return 200, {"data": [{"id": base64.b64encode(f"{kind}:{i}".encode()).decode()} for i in ids]}

    def _score(self, body: Any) -> tuple[int, Any]:
        """Langfuse's ``POST /api/public/scores`` (langfuse-python ``scores.create``): name and value
        required, source API or ANNOTATION, a score with the ``id`` of an earlier one replaces it;
        answers ``{"id": ...}``."""
        if not isinstance(body, dict) or not body.get("name") or body.get("value") is None:
            return 400, {"message": "Invalid request data: name and value are required"}
        if not (body.get("traceId") or body.get("sessionId") or body.get("datasetRunId")):
            return 400, {"message": "Invalid request data: traceId, sessionId or datasetRunId is required"}
        if body.get("source") not in (None, "API", "ANNOTATION"):  # EVAL is the evaluators' own
            return 400, {"message": "Invalid request data: source must be API or ANNOTATION"}
        score_id = str(body.get("id") or f"score-{len(self.scores) + 1}")
        with self.lock:
            self.scores[score_id] = {**body, "id": score_id}
        return 200, {"id": score_id}

    def _feedback(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        """LangSmith's ``POST /feedback`` (``create_feedback``: a ``FeedbackCreate``, an existing id
        is a 409) and ``PATCH /feedback/{id}`` (``update_feedback``: score, value, correction,
        comment)."""
        if method == "POST" and path == "/feedback":
            if not isinstance(body, dict) or not body.get("key") or not body.get("id"):
                return 422, {"detail": "key and id are required"}
            if not isinstance(body.get("feedback_source"), dict):
                return 422, {"detail": "feedback_source is required"}
            if body.get("session_id") is None and self.smithdb_only:  # the SDK raises before sending there
                return 422, {"detail": "session_id must be provided when creating feedback for a run"}
            if body.get("session_id") not in (None, PROJECT_ID):
                return 404, {"detail": "session not found"}
            with self.lock:
                if body["id"] in self.feedback:
                    return 409, {"detail": "Feedback already exists"}
                self.feedback[body["id"]] = dict(body)
            return 200, dict(body)
        feedback_id = path.rsplit("/", 1)[-1]
        with self.lock:
            if feedback_id not in self.feedback:
                return 404, {"detail": "Feedback not found"}
            update = {k: v for k, v in (body or {}).items() if k in ("score", "value", "correction", "comment")}
            self.feedback[feedback_id].update(update)
            return 200, dict(self.feedback[feedback_id])

    def answer(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        one = {k: v[-1] for k, v in query.items()}
        if self.kind == "phoenix":
            if method == "POST" and path in ("/v1/span_annotations", "/v1/document_annotations"):
                return self._annotate(path, body)
            if method == "GET" and path == f"/v1/projects/{self.project}/spans":
                roots_only = one.get("parent_id") == "null"
                data, cursor = self.select(kind=one.get("span_kind"), start=one.get("start_time"),
                                           end=one.get("end_time"), traces=query.get("trace_id"),
                                           roots_only=roots_only, cursor=one.get("cursor"))
                return 200, {"data": data, "next_cursor": cursor}
            if path.startswith("/v1/projects/"):
                return 404, {"detail": "Project not found"}
        elif self.kind == "langfuse":
            if method == "POST" and path == "/api/public/scores":
                return self._score(body)
            if method == "GET" and path in ("/api/public/v3/scores", "/api/public/v2/scores"):
                version = path.split("/")[3]
                if version not in self.score_apis:
                    return 404, {"message": "This endpoint is not available on deployments running in Langfuse v4 "
                                            "events_only mode."} if version == "v2" else {"message": "Not Found"}
                with self.lock:
                    scores = [fake_scores.stored(s) for s in self.scores.values()]
                listing = fake_scores.list_v3 if version == "v3" else fake_scores.list_v2
                return listing(scores, query, self.page_size)
            if method == "GET" and path == "/api/public/v2/observations":
                data, cursor = self.select(kind=one.get("type"), start=one.get("fromStartTime"),
                                           end=one.get("toStartTime"),
                                           traces=[one["traceId"]] if "traceId" in one else None,
                                           cursor=one.get("cursor"))
                return 200, {"data": data, "meta": {"cursor": cursor} if cursor else {}}
        else:
            if (method, path) == ("POST", "/feedback") or (method == "PATCH" and path.startswith("/feedback/")):
                return self._feedback(method, path, body)
            if method == "GET" and path == "/sessions":
                project = {"id": PROJECT_ID, "name": self.project, "tenant_id": TENANT_ID, "reference_dataset_id": None,
                           "start_time": "2026-11-01T00:00:00.000000", "end_time": None, "description": None,
                           "extra": None, "run_count": len(self.records)}
                return 200, [project] if one.get("name") == self.project else []
            if method == "GET" and path == "/info":
                return 200, {"version": "0.16.0", "instance_flags": {"ch_query_enabled": not self.smithdb_only,
                                                                     "sdb_query_enabled": self.smithdb_only}}
            if method == "POST" and path == "/api/v2/runs/query":
                if body.get("project_ids") != [PROJECT_ID]:
                    return 404, {"detail": "project not found"}
                start = body.get("min_start_time") or (datetime.now(UTC) - timedelta(days=1)).isoformat()
                data, cursor = self.select(kind=body.get("run_type"), start=start, end=body.get("max_start_time"),
                                           ids=body.get("ids"), cursor=body.get("cursor"), newest_first=True)
                return 200, {"items": [v2_run(r, body.get("selects") or ["ID"]) for r in data], "next_cursor": cursor}
            if method == "POST" and path == "/runs/query":
                if self.smithdb_only:
                    return 404, {"detail": "Not Found"}
                if body.get("session") != [PROJECT_ID]:
                    return 404, {"detail": "session not found"}
                data, cursor = self.select(kind=body.get("run_type"), start=body.get("start_time"),
                                           ids=body.get("id"), cursor=body.get("cursor"), newest_first=True)
                return 200, {"runs": data, "cursors": {"next": cursor, "prev": None}}
        return 404, {"detail": f"no route {method} {path}"}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeStore:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None,
                      drop: bool = False) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if drop:  # half the page, then the connection goes: a server killed mid-page
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                split = urlsplit(self.path)
                query = parse_qs(split.query)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                with fake.lock:
                    fake.requests.append({"method": method, "path": split.path, "query": query, "body": body,
                                          "headers": dict(self.headers)})
                    queue = fake.route_faults.get(split.path)
                    fault = queue.pop(0) if queue else fake.faults.pop(0) if fake.faults else None
                if not fake.authorized(self.headers):
                    self._send(401, {"message": "Invalid credentials"})
                    return
                if fault == "429":
                    self._send(429, {"message": "rate limited"}, {"Retry-After": fake.retry_after})
                    return
                if fault in ("500", "503"):
                    self._send(int(fault), {"message": "internal error"})
                    return
                if fault in ("echo-key", "500-echo"):
                    sent = self.headers.get("x-api-key") or self.headers.get("Authorization") or ""
                    self._send(401 if fault == "echo-key" else 500, {"message": f"key {sent} is not valid"})
                    return
                status, payload = fake.answer(method, split.path, query, body)
                self._send(status, payload, drop=fault == "drop")

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._handle("GET")

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self._handle("POST")

            def do_PATCH(self) -> None:  # noqa: N802 - http.server's name
                self._handle("PATCH")

        self._httpd = _Server(("127.0.0.1", self.port), Handler)
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeStore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- records in each tool's shape ----------------------------------------------------------------

def phoenix_trace(n: int, start: str, *, question: str | None = None, chunks: int = 2,
                  root: bool = True) -> list[dict[str, Any]]:
    """A trace as Phoenix's REST API returns it: a root CHAIN span (question in, answer out) and a
    RETRIEVER span below it whose documents are flattened attributes."""
    trace, root_id, ret_id = f"{n:032x}", f"{n:012x}aaaa", f"{n:012x}bbbb"
    question = question or f"question {n}?"
    attrs: dict[str, Any] = {"input.value": question}  # the API pops openinference.span.kind into span_kind
    for i in range(chunks):
        attrs[f"retrieval.documents.{i}.document.id"] = f"doc-{n}-{i}"
        attrs[f"retrieval.documents.{i}.document.content"] = f"text of chunk {i} for question {n}"
        attrs[f"retrieval.documents.{i}.document.score"] = 0.9 - i / 10
    out = [{"id": f"S{n}r", "name": "retrieve", "context": {"trace_id": trace, "span_id": ret_id},
            "span_kind": "RETRIEVER", "parent_id": root_id, "start_time": start, "end_time": start,
            "status_code": "OK", "status_message": "", "attributes": attrs, "events": []}]
    if root:
        out.append(phoenix_root(n, start, question))
    return out


def phoenix_root(n: int, start: str, question: str | None = None) -> dict[str, Any]:
    return {"id": f"S{n}", "name": "RunnableSequence",
            "context": {"trace_id": f"{n:032x}", "span_id": f"{n:012x}aaaa"}, "span_kind": "CHAIN",
            "parent_id": None, "start_time": start, "end_time": start, "status_code": "OK",
            "status_message": "", "attributes": {"input.value": question or f"question {n}?",
                                                 "output.value": f"answer {n}"}, "events": []}


def langsmith_trace(n: int, start: str, *, question: str | None = None, chunks: int = 2) -> list[dict[str, Any]]:
    """A trace as ``POST /runs/query`` returns it: a chain root run and a retriever run below it whose
    outputs are LangChain Documents."""
    trace = f"00000000-0000-4000-8000-{n:012x}"
    question = question or f"question {n}?"
    docs = [{"id": f"doc-{n}-{i}", "page_content": f"text of chunk {i} for question {n}", "metadata": {},
             "type": "Document"} for i in range(chunks)]
    base = {"session_id": PROJECT_ID, "trace_id": trace, "end_time": start, "error": None, "extra": {},
            "tags": [], "status": "success", "reference_example_id": None}
    return [
        {**base, "id": f"00000000-0000-4000-9000-{n:012x}", "name": "Retriever", "run_type": "retriever",
         "start_time": start, "inputs": {"query": question}, "outputs": {"documents": docs},
         "parent_run_id": trace, "dotted_order": f"{start}{trace}.{start}{n}"},
        {**base, "id": trace, "name": "RunnableSequence", "run_type": "chain", "start_time": start,
         "inputs": {"question": question}, "outputs": {"output": f"answer {n}"}, "parent_run_id": None,
         "dotted_order": f"{start}{trace}"},
    ]


def v2_run(run: dict[str, Any], selects: list[str]) -> dict[str, Any]:
    """A run as LangSmith's v2 runs query returns it (langsmith-sdk ``types/run.py``): only the
    selected fields, ``parent_run_ids`` (the ancestors, root first) for ``parent_run_id``,
    ``project_id`` for ``session_id``, the run type and status in upper case."""
    out: dict[str, Any] = {}
    for field in selects:
        name = field.lower()
        if name == "parent_run_ids":
            parent = run.get("parent_run_id")
            out[name] = [] if parent is None else ([run["trace_id"]] if parent == run["trace_id"]
                                                   else [run["trace_id"], parent])
        elif name == "project_id":
            out[name] = run.get("session_id")
        elif name in ("run_type", "status"):
            out[name] = None if run.get(name) is None else str(run[name]).upper()
        elif name in run:
            out[name] = run[name]
    return out


def langfuse_from_run(run: dict[str, Any]) -> dict[str, Any]:
    """A LangSmith run as the observation Langfuse's LangChain integration records for the same step
    (v2 API fields ``core,basic,io,metadata``; a retriever's documents are its output)."""
    kind = {"retriever": "RETRIEVER", "llm": "GENERATION", "prompt": "SPAN", "parser": "SPAN"}.get(
        str(run["run_type"]), "CHAIN")
    parent = run.get("parent_run_id")
    outputs = run.get("outputs")
    if kind == "RETRIEVER" and isinstance(outputs, dict):
        outputs = outputs.get("documents")
    return {"id": str(run["id"]), "traceId": str(run["trace_id"]), "startTime": run["start_time"],
            "endTime": run.get("end_time"), "projectId": "proj-1",
            "parentObservationId": None if parent is None else str(parent), "type": kind,
            "name": run.get("name"), "level": "DEFAULT", "statusMessage": None, "version": None,
            "environment": "default", "input": run.get("inputs"), "output": outputs, "metadata": {}}
