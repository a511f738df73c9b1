"""``labeler sync`` and ``labeler push`` against a real Arize Phoenix server (``arize-phoenix`` from
PyPI), fed by the real instrumentation: ``phoenix.otel.register`` and OpenInference's LangChain
instrumentor tracing a LangChain chain around a retriever.

The module starts ``phoenix serve`` on 127.0.0.1 (free ports, a temporary ``PHOENIX_WORKING_DIR``),
sends traces, syncs them with a small page limit (and checks that the sync stores what an ingest of
the REST export of the same project stores), sends more and syncs again, grades chunks through the
library, pushes the grades and reads them back: the span annotations through the REST API
(``GET /v1/projects/{project}/span_annotations``), the document annotations through Phoenix's
GraphQL API (its REST API has no read route for them). Then a second push sends nothing and a
changed grade updates the annotation in place.

Phoenix is not a test dependency (it pins much of its own stack), so CI runs this module in a venv
of its own (``.ci/run``); elsewhere it is skipped without it, unless ``LABELER_REQUIRE_CONSUMERS``
names ``phoenix`` (then a missing Phoenix fails).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import labeler
from labeler.cli import cli
from labeler.labels.writes import set_grade, set_status
from tests import optional
from tests.test_tool_logs import stored


def required(name: str) -> Any:
    """Import ``name``; skip without it, unless CI's Phoenix step requires it."""
    return optional.required(name, needed_by="phoenix", reason=f"{name} is not installed (CI installs "
                             "arize-phoenix in a venv of its own for this module)")


required("phoenix")
PROJECT = "rag"
START_S = 180.0  # Phoenix's first start migrates its database: about 10 s here


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except (httpx.HTTPError, OSError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"Phoenix: {what} did not happen within {timeout:.0f} s")
        time.sleep(0.2)  # a real server inserts what it receives in batches: poll, there is nothing to wait on


@pytest.fixture(scope="module")
def phoenix_url(tmp_path_factory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("phoenix")
    port = free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(work), "PHOENIX_PORT": str(port), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_GRPC_PORT": str(free_port()), "PHOENIX_TELEMETRY_ENABLED": "false"}
    env.pop("PHOENIX_COLLECTOR_ENDPOINT", None)
    log = open(work / "phoenix.log", "w")  # noqa: SIM115 - closed after the server stops
    server = subprocess.Popen([sys.executable, "-m", "phoenix.server.main", "serve"], env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        def healthy() -> bool:
            if server.poll() is not None:
                raise AssertionError(f"phoenix serve exited ({server.returncode}): "
                                     + (work / "phoenix.log").read_text()[-3000:])
            return httpx.get(url + "/healthz", timeout=2).status_code == 200

        wait_for(healthy, "the server starting", START_S)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
        log.close()


def send_traces(url: str, numbers: range) -> None:
    """A LangChain chain (question -> retriever -> answer) traced by OpenInference's instrumentor
    into Phoenix through ``phoenix.otel``: one trace per question, three documents each."""
    required("langchain_core")
    instrumentation = required("openinference.instrumentation.langchain")
    otel = required("phoenix.otel")
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda

    class Retriever(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
            n = int(query.split()[1].rstrip("?"))
            return [Document(id=f"doc-{n}-{i}", page_content=f"chunk {i} about topic {n}", metadata={"n": n})
                    for i in range(3)]

    provider = otel.register(project_name=PROJECT, endpoint=url + "/v1/traces", batch=False,
                             set_global_tracer_provider=False, verbose=False)
    instrumentor = instrumentation.LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        chain = ({"docs": Retriever(), "question": RunnableLambda(lambda q: q)}
                 | RunnableLambda(lambda x: f"answer to {x['question']} from {len(x['docs'])} chunks"))
        for n in numbers:
            chain.invoke(f"question {n}?")
    finally:
        instrumentor.uninstrument()
        provider.force_flush()
        provider.shutdown()


def retrieval_spans(url: str) -> list[dict[str, Any]]:
    spans, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 100, "span_kind": "RETRIEVER", **({"cursor": cursor} if cursor else {})}
        answer = httpx.get(f"{url}/v1/projects/{PROJECT}/spans", params=params, timeout=10)
        if answer.status_code == 404:  # no span has reached the project yet
            return []
        page = answer.json()
        spans += page["data"]
        cursor = page.get("next_cursor")
        if not cursor:
            return spans


def export(url: str) -> dict[str, Any]:
    """Every span of the project as the REST API returns it: the file labeler ingest logs reads."""
    spans, cursor = [], None
    while True:
        page = httpx.get(f"{url}/v1/projects/{PROJECT}/spans", params={"limit": 100, **(
            {"cursor": cursor} if cursor else {})}, timeout=10).json()
        spans += page["data"]
        cursor = page.get("next_cursor")
        if not cursor:
            return {"data": spans, "next_cursor": None}


def span_annotations(url: str, span_ids: list[str]) -> list[dict[str, Any]]:
    page = httpx.get(f"{url}/v1/projects/{PROJECT}/span_annotations",
                     params={"span_ids": span_ids, "limit": 1000}, timeout=10)
    assert page.status_code == 200, page.text
    return page.json()["data"]


DOCUMENT_ANNOTATIONS = """query ($id: ID!) { node(id: $id) { ... on Span { documentEvaluations {
  name annotatorKind label score documentPosition metadata } } } }"""


def document_annotations(url: str, span_global_id: str) -> list[dict[str, Any]]:
    answer = httpx.post(f"{url}/graphql", json={"query": DOCUMENT_ANNOTATIONS,
                                               "variables": {"id": span_global_id}}, timeout=10).json()
    assert not answer.get("errors"), answer
    return sorted(answer["data"]["node"]["documentEvaluations"], key=lambda a: a["documentPosition"])


def run(db: Path, *args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == code, result.output
    return json.loads(result.output) if "--json" in args else result.output


def grade(db: Any, query_id: str, grades: dict[int, int]) -> None:
    pk = db.execute("SELECT pk FROM queries WHERE query_id = ?", [query_id]).fetchone()[0]
    for rank, g in grades.items():
        doc = db.execute("SELECT doc_pk FROM retrievals WHERE query_pk = ? AND rank = ?", [pk, rank]).fetchone()[0]
        set_grade(db, pk, doc, "ann", g)
    set_status(db, pk, "ann", "submitted")


def test_sync_and_push_against_a_real_phoenix(phoenix_url, tmp_path, monkeypatch):
    monkeypatch.delenv("PHOENIX_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)  # no .streamlit/secrets.toml of the checkout
    url, db_path = phoenix_url, tmp_path / "live.db"
    send_traces(url, range(0, 7))
    wait_for(lambda: len(retrieval_spans(url)) == 7, "7 retrieval spans arriving")
    run(db_path, "source", "add", "phoenix", "px", "--url", url, "--project", PROJECT, "--overlap", "1m")
    first = run(db_path, "sync", "px", "--json")[0]
    assert first["ok"] and first["new"] == 7 and first["rejected"] == 0, first

    send_traces(url, range(7, 10))
    wait_for(lambda: len(retrieval_spans(url)) == 10, "10 retrieval spans arriving")
    second = run(db_path, "sync", "px", "--json")[0]
    assert second["ok"] and second["new"] == 3 and second["known"] == 7, second

    (tmp_path / "export.json").write_text(json.dumps(export(url)))
    other = labeler.connect(tmp_path / "file.db")
    labeler.ingest_logs(other, tmp_path / "export.json")
    db = labeler.connect(db_path)
    assert stored(db) == stored(other)  # the sync stores what an ingest of the REST export stores
    assert db.execute("SELECT count(*), count(DISTINCT query_id) FROM queries").fetchone() == (10, 10)

    spans = {s["context"]["span_id"]: s for s in retrieval_spans(url)}
    q1, q2 = sorted(spans)[:2]
    assert db.execute("SELECT question FROM queries WHERE query_id = ?", [q1]).fetchone()[0].startswith("question ")
    grade(db, q1, {1: 3, 2: 0, 3: 2})
    grade(db, q2, {2: 1})
    dry = run(db_path, "push", "px", "--dry-run", "--json")
    assert dry["sent"] == 6 and not span_annotations(url, [q1, q2])

    pushed = run(db_path, "push", "px", "--json")
    assert pushed["ok"] and (pushed["sent"], pushed["failed"]) == (6, 0), pushed
    annotations = {a["span_id"]: a for a in span_annotations(url, [q1, q2])}
    assert annotations[q1]["name"] == "golden precision" and annotations[q1]["annotator_kind"] == "HUMAN"
    assert annotations[q1]["result"]["label"] == "2 of 3 relevant"
    assert annotations[q1]["metadata"]["golden_set_version"] == "unversioned"
    docs = document_annotations(url, spans[q1]["id"])
    assert [(d["documentPosition"], d["name"], d["annotatorKind"], d["score"], d["label"]) for d in docs] == [
        (0, "relevance", "HUMAN", 3.0, "highly relevant"), (1, "relevance", "HUMAN", 0.0, "irrelevant"),
        (2, "relevance", "HUMAN", 2.0, "relevant")]
    rank1 = db.execute("SELECT d.doc_id FROM retrievals r JOIN documents d ON d.pk = r.doc_pk JOIN queries q "
                       "ON q.pk = r.query_pk WHERE q.query_id = ? AND r.rank = 1", [q1]).fetchone()[0]
    assert docs[0]["metadata"]["doc_id"] == rank1 and rank1.startswith("doc-")

    again = run(db_path, "push", "px", "--json")
    assert (again["sent"], again["updated"], again["unchanged"], again["requests"]) == (0, 0, 6, 0), again
    grade(db, q1, {2: 2})  # a changed grade: its document and the span's precision are updated in place
    changed = run(db_path, "push", "px", "--json")
    assert changed["ok"] and (changed["updated"], changed["unchanged"]) == (2, 4), changed
    docs = document_annotations(url, spans[q1]["id"])
    assert len(docs) == 3 and docs[1]["score"] == 2.0 and docs[1]["label"] == "relevant"
    again_annotations = [a for a in span_annotations(url, [q1]) if a["name"] == "golden precision"]
    assert len(again_annotations) == 1 and again_annotations[0]["result"]["label"] == "3 of 3 relevant"
