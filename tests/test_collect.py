"""``labeler collect --otlp``: OTLP/HTTP traces from an instrumented app, stored as they arrive
(``labeler.sources.collector``).

The collector runs on 127.0.0.1, port 0, in this process; spans come from the real OpenTelemetry
SDK and its OTLP/HTTP protobuf exporter (``opentelemetry-exporter-otlp-proto-http``), from hand-made
OTLP/JSON requests, and from a real LangChain retriever instrumented by OpenInference. The tests
flush explicitly (``Collector.flush``) rather than wait for the timer, except the one about the timer.
The exporter, LangChain and its instrumentor come with the ``[test]`` extra; CI's main step names
them in ``LABELER_REQUIRE_CONSUMERS`` so that they fail there instead of skipping.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from labeler import db as store
from labeler.cli import cli
from labeler.ingest import ingest_logs
from labeler.sources import collector as C
from labeler.sources import otlp_proto
from tests.optional import required

ROOT = Path(__file__).resolve().parents[1]


# --- spans ------------------------------------------------------------------------------------------

def docs_attrs(docs: list[tuple[str, str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, (doc_id, text, score) in enumerate(docs):
        out[f"retrieval.documents.{i}.document.id"] = doc_id
        out[f"retrieval.documents.{i}.document.content"] = text
        out[f"retrieval.documents.{i}.document.score"] = score
    return out


def traced_app(endpoint: str | None, *, compression: str | None = None):
    """A tracer provider that exports each span as it ends to the collector at ``endpoint`` (real
    OTLP/HTTP protobuf exporter) and keeps it in memory; returns (provider, memory exporter)."""
    required("opentelemetry.sdk")
    exporter_module = required("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    if endpoint is not None:
        exporter = exporter_module.OTLPSpanExporter(
            endpoint=endpoint, timeout=5,
            compression=Compression.Gzip if compression == "gzip" else Compression.NoCompression)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, memory


def rag_call(tracer, question: str, docs: list[tuple[str, str, float]], answer: str) -> None:
    """One traced RAG call with OpenInference attributes: a chain root (question, answer), a
    retriever (the documents) and an LLM span."""
    with tracer.start_as_current_span("rag") as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("input.value", question)
        with tracer.start_as_current_span("retrieve") as span:
            span.set_attribute("openinference.span.kind", "RETRIEVER")
            span.set_attribute("input.value", question)
            for key, value in docs_attrs(docs).items():
                span.set_attribute(key, value)
        with tracer.start_as_current_span("llm") as llm:
            llm.set_attribute("openinference.span.kind", "LLM")
            llm.set_attribute("output.value", answer)
        root.set_attribute("output.value", answer)


CALLS = [
    (f"How do I rent bike {i}?", [(f"doc-{i}-{j}", f"Bike {i} text {j}.", round(0.9 - j / 10, 2)) for j in range(3)],
     f"Like this {i}.")
    for i in range(4)
]


def json_span(trace: str, span: str, parent: str = "", **attrs: Any) -> dict[str, Any]:
    def value(v: Any) -> dict[str, Any]:
        return {"doubleValue": v} if isinstance(v, float) else {"stringValue": v}

    return {"traceId": trace, "spanId": span, "parentSpanId": parent, "name": "s",
            "startTimeUnixNano": "1796114609245042944",
            "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()]}


def json_request(*spans: dict[str, Any]) -> bytes:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}).encode()


TRACE = "5b8efff798038103d269b633813fc60c"


def retrieval(trace: str = TRACE, span: str = "eee19b7ec3c1b174", question: str = "What is a spoke?",
              docs: list | None = None) -> dict[str, Any]:
    docs = docs if docs is not None else [("spoke-1", "A spoke joins hub and rim.", 0.8)]
    return json_span(trace, span, "eee19b7ec3c1b173", **{"openinference.span.kind": "RETRIEVER",
                                                         "input.value": question, **docs_attrs(docs)})


def root(trace: str = TRACE, question: str = "What is a spoke, really?", answer: str = "A rod.") -> dict[str, Any]:
    return json_span(trace, "eee19b7ec3c1b173", **{"openinference.span.kind": "CHAIN", "input.value": question,
                                                  "output.value": answer})


def post(collector: C.Collector, body: bytes, content_type: str = "application/json", *,
         encoding: str | None = None, path: str = C.TRACES_PATH, method: str = "POST") -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection(collector.host, collector.port, timeout=10)
    headers = {"Content-Type": content_type, **({"Content-Encoding": encoding} if encoding else {})}
    try:
        conn.request(method, path, body=body if method == "POST" else None, headers=headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


# --- what was stored -------------------------------------------------------------------------------

def stored(db) -> dict[str, Any]:
    """Queries, ranked retrievals and documents, as comparable plain data."""
    return {
        "queries": sorted(db.execute("SELECT query_id, question, answer FROM queries").fetchall()),
        "retrievals": sorted(db.execute(
            "SELECT q.query_id, r.rank, d.doc_id, r.score FROM retrievals r JOIN queries q ON q.pk = r.query_pk "
            "JOIN documents d ON d.pk = r.doc_pk").fetchall()),
        "documents": sorted(db.execute("SELECT doc_id, text FROM documents").fetchall()),
    }


@pytest.fixture
def collect(file_db):
    """``collect(**options)``: a started collector on 127.0.0.1 port 0 writing into ``file_db``
    (no timer flushes unless asked); its flushes are in ``collector.flushes``. Closed at the end."""
    started: list[C.Collector] = []

    def start(**options: Any) -> C.Collector:
        options.setdefault("flush_every", 3600.0)
        flushes: list[C.FlushResult] = []
        collector = C.Collector(file_db, "127.0.0.1", 0, options=C.CollectOptions(**options),
                                on_flush=flushes.append).start()
        collector.flushes = flushes  # type: ignore[attr-defined]
        started.append(collector)
        return collector

    yield start
    for collector in started:
        collector.close()


def _schema_check(db) -> None:
    # the tests read these columns: fail clearly if the schema moves
    for table, columns in {"queries": {"query_id", "question", "answer"}, "retrievals": {"rank", "score"}}.items():
        assert columns <= set(db[table].columns_dict), table


# --- the real exporter -----------------------------------------------------------------------------

@pytest.mark.parametrize("compression", [None, "gzip"])
def test_real_exporter_spans_become_queries(collect, file_db, compression):
    _schema_check(file_db)
    collector = collect()
    provider, memory = traced_app(collector.url, compression=compression)
    tracer = provider.get_tracer("app")
    for question, docs, answer in CALLS:
        rag_call(tracer, question, docs, answer)
    provider.shutdown()
    flush = collector.flush()
    assert flush.error is None and flush.problems == []
    assert (flush.spans, flush.traces, flush.without_root, flush.new) == (8, 4, 0, 4)
    retrievers = {s.context.span_id: s for s in memory.get_finished_spans() if s.name == "retrieve"}
    got = stored(file_db)
    assert got["queries"] == sorted((f"{sid:016x}", q, a) for (q, _, a), sid in
                                    zip(CALLS, sorted(retrievers, key=lambda s: retrievers[s].start_time), strict=True))
    assert got["retrievals"] == sorted((f"{sid:016x}", rank, doc, score)
                                       for (_, docs, _), sid in zip(CALLS, sorted(retrievers, key=lambda s: retrievers[s].start_time), strict=True)
                                       for rank, (doc, _, score) in enumerate(docs, 1))
    assert got["documents"] == sorted((doc, text) for _, docs, _ in CALLS for doc, text, _ in docs)
    s = collector.summary
    assert (s.requests, s.spans_received, s.spans_dropped, s.spans_written, s.bad_requests) == (12, 12, 4, 8, 0)


def test_same_queries_chunks_and_texts_as_ingesting_the_exported_file(collect, file_db, tmp_path):
    """The spans of one run, collected live and ingested from the OTLP/JSON file the OpenTelemetry
    encoder writes for them (protobuf's JSON mapping: base64 ids), store the same rows."""
    from google.protobuf.json_format import MessageToJson
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    collector = collect()
    provider, memory = traced_app(collector.url)
    tracer = provider.get_tracer("app")
    for question, docs, answer in CALLS:
        rag_call(tracer, question, docs, answer)
    provider.shutdown()
    collector.flush()
    exported = tmp_path / "exported.json"
    exported.write_text(MessageToJson(encode_spans(memory.get_finished_spans()), indent=None) + "\n")
    other = store.connect(tmp_path / "file.db")
    ingest_logs(other, exported, tool="otlp")
    assert stored(file_db) == stored(other) and len(stored(other)["queries"]) == 4


# --- OTLP/JSON, gzip, bad payloads -----------------------------------------------------------------

def test_json_requests_plain_and_gzipped(collect, file_db):
    collector = collect()
    status, headers, body = post(collector, json_request(retrieval(), root()))
    assert (status, body, headers["Content-Type"]) == (200, b"{}", "application/json")
    other = "6b8efff798038103d269b633813fc60c"
    status, _, _ = post(collector, gzip.compress(json_request(retrieval(other, "aaa19b7ec3c1b174", "Gears?",
                                                                         [("gear-1", "Gears shift.", 0.5)]))),
                        "application/json; charset=utf-8", encoding="gzip")
    assert status == 200
    flush = collector.flush()
    assert (flush.new, flush.traces, flush.without_root) == (2, 2, 1)
    # the root's question and answer; the retriever's input is kept when it differs
    row = file_db.execute("SELECT question, answer, meta FROM queries WHERE query_id = 'eee19b7ec3c1b174'").fetchone()
    assert row[:2] == ("What is a spoke, really?", "A rod.")
    assert json.loads(row[2])["retriever_input"] == "What is a spoke?"
    assert file_db.execute("SELECT question FROM queries WHERE query_id = 'aaa19b7ec3c1b174'").fetchone() == ("Gears?",)


BAD = [
    (b"\xff\xff\xff", "application/x-protobuf", None, 400, "not an ExportTraceServiceRequest"),
    (b"{not json", "application/json", None, 400, "not JSON"),
    (b"[1, 2]", "application/json", None, 400, "the request must be an object"),
    (b'{"spans": []}', "application/json", None, 400, "no resourceSpans"),
    (b'{"resourceSpans": {"a": 1}}', "application/json", None, 400, "resourceSpans must be a list"),
    (json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "ab"}]}]}]}).encode(), "application/json",
     None, 400, "resourceSpans[0].scopeSpans[0].spans[0].traceId is missing"),
    (b"{}", "text/plain", None, 415, "Content-Type 'text/plain' is not supported"),
    (b"{}", "application/json", "br", 415, "Content-Encoding 'br' is not supported"),
    (b"not gzip", "application/json", "gzip", 400, "not valid gzip"),
    (gzip.compress(b"{}", mtime=0)[:-6], "application/json", "gzip", 400, "truncated"),
]


@pytest.mark.parametrize("body, content_type, encoding, status, reason", BAD, ids=[b[-1] for b in BAD])
def test_malformed_payload_is_refused_with_its_reason(collect, body, content_type, encoding, status, reason):
    collector = collect()
    got, headers, answer = post(collector, body, content_type, encoding=encoding)
    assert got == status
    if content_type == "application/x-protobuf":  # a google.rpc.Status message: code 3, the reason
        assert answer[:2] == b"\x08\x03" and reason.encode() in answer
    else:
        assert reason in json.loads(answer)["message"]
    assert collector.summary.bad_requests == 1 and collector.summary.spans_received == 0
    assert collector.flush() is None


def test_wrong_path_method_and_size(collect):
    collector = collect(max_request_mb=0.001, max_buffer_mb=1)
    status, _, body = post(collector, json_request(root()), path="/v1/logs")
    assert status == 404 and "OTLP traces go to /v1/traces" in json.loads(body)["message"]
    status, headers, _ = post(collector, b"", method="GET")
    assert status == 405 and headers["Allow"] == "POST"
    status, _, body = post(collector, b"{" + b" " * 2000 + b"}")
    assert status == 413 and "send smaller batches" in json.loads(body)["message"]
    bomb = gzip.compress(b"{" + b" " * 100_000 + b"}")  # small, but not once decompressed
    status, _, body = post(collector, bomb, encoding="gzip")
    assert status == 413 and "once decompressed" in json.loads(body)["message"]


def test_a_request_bigger_than_the_whole_buffer_is_413_not_429(collect):
    """Protobuf is compact: a body within the size allowed may decode to more than the buffer holds."""
    required("opentelemetry.proto")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    span.attributes.append(KeyValue(key="retrieval.documents.0.document.id", value=AnyValue(string_value="d")))
    for i in range(80):
        span.attributes.append(KeyValue(key=f"k{i}", value=AnyValue(int_value=i)))
    body = request.SerializeToString()
    collector = collect(max_buffer_mb=0.002, max_request_mb=0.002)  # 2 KiB
    assert len(body) < collector.max_request
    status, _, answer = post(collector, body, "application/x-protobuf")
    assert status == 413 and b"more than the whole buffer" in answer


def test_protobuf_without_the_package_is_415_naming_the_extra(collect, monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry.proto.collector.trace.v1.trace_service_pb2", None)
    collector = collect()
    status, _, body = post(collector, b"", "application/x-protobuf")
    assert status == 415 and b"rag-labeler[otlp]" in body
    assert not otlp_proto.protobuf_available()
    assert post(collector, json_request(retrieval()))[0] == 200  # JSON needs no extra


# --- holding, flushing, the bounded buffer ----------------------------------------------------------

def test_retrievals_wait_for_their_root_from_a_later_request(collect, file_db, monkeypatch):
    clock = {"now": 1000.0}
    monkeypatch.setattr(C.time, "monotonic", lambda: clock["now"])
    collector = collect(hold=30.0)
    assert post(collector, json_request(retrieval()))[0] == 200
    assert collector.flush(everything=False) is None  # not ready: its root has not come
    assert post(collector, json_request(root()))[0] == 200
    flush = collector.flush(everything=False)
    assert (flush.traces, flush.without_root, flush.new) == (1, 0, 1)
    assert file_db.execute("SELECT question FROM queries").fetchall() == [("What is a spoke, really?",)]
    # a root that came first waits for its retrievals; a retrieval without a root goes after `hold`
    other, third = "6b8efff798038103d269b633813fc60c", "7b8efff798038103d269b633813fc60c"
    post(collector, json_request(root(other, "Early root?")))
    post(collector, json_request(retrieval(other, "bbb19b7ec3c1b174"), retrieval(third, "ccc19b7ec3c1b174")))
    flush = collector.flush(everything=False)
    assert (flush.traces, flush.without_root) == (1, 0)
    assert collector.flush(everything=False) is None
    clock["now"] += 31
    flush = collector.flush(everything=False)
    assert (flush.traces, flush.without_root) == (1, 1)
    assert dict(file_db.execute("SELECT query_id, question FROM queries").fetchall()) == {
        "eee19b7ec3c1b174": "What is a spoke, really?", "bbb19b7ec3c1b174": "Early root?",
        "ccc19b7ec3c1b174": "What is a spoke?"}


def test_a_retrieval_that_comes_after_its_trace_was_written_still_gets_the_root(collect, file_db):
    collector = collect()
    post(collector, json_request(retrieval(), root()))
    assert collector.flush(everything=False).new == 1
    late = retrieval(span="ddd19b7ec3c1b174", question="Spoke length?", docs=[("spoke-2", "Lengths vary.", 0.4)])
    post(collector, json_request(late))
    flush = collector.flush(everything=False)  # ready at once: its root is known
    assert (flush.spans, flush.traces, flush.without_root, flush.new) == (1, 1, 0, 1)
    assert file_db.execute("SELECT question FROM queries WHERE query_id = 'ddd19b7ec3c1b174'").fetchone() == (
        "What is a spoke, really?",)
    assert collector.summary.spans_written == 3 and collector.summary.spans_received == 3


def test_the_timer_flushes_without_being_asked(collect):
    done = threading.Event()
    collector = collect(flush_every=0.05)
    collector.on_flush = lambda flush: done.set()
    post(collector, json_request(retrieval(), root()))
    assert done.wait(10)
    assert collector.summary.new == 1


def test_a_full_buffer_answers_429_with_retry_after_instead_of_growing(collect, file_db, monkeypatch):
    """While the database is slow (here: the flush's ingest waits on a gate), requests fill the
    buffer up to its bound and are then refused with 429 and Retry-After, which exporters honour."""
    gate = threading.Event()
    real = C.ingest_logs

    def slow_ingest(*args: Any, **kwargs: Any) -> Any:
        assert gate.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(C, "ingest_logs", slow_ingest)
    collector = collect(max_buffer_mb=0.01, max_request_mb=0.01, flush_every=0.01)
    sizes, statuses = [], []
    for i in range(40):
        status, headers, body = post(collector, json_request(
            retrieval(f"{i:032x}", f"a{i:015x}", f"Question {i}?", [(f"d{i}", "x" * 300, 0.5)])))
        statuses.append(status)
        sizes.append(collector.buffered_bytes)
        if status == 429:
            assert headers["Retry-After"] == "1" and "buffer is full" in json.loads(body)["message"]
    assert 429 in statuses and statuses.index(429) > 3
    assert max(sizes) <= collector.max_buffer
    gate.set()
    collector.flush()
    taken = statuses.count(200)
    assert collector.summary.new == taken and collector.summary.refused == 40 - taken
    assert post(collector, json_request(retrieval("f" * 32, "f" * 16)))[0] == 200  # room again


def test_a_buffer_three_quarters_full_writes_the_oldest_traces_without_their_roots(collect):
    done = threading.Event()
    collector = collect(max_buffer_mb=0.02, max_request_mb=0.02, hold=3600.0)
    collector.on_flush = lambda flush: done.set()
    i = 0
    while not done.is_set() and i < 100:  # roots never come
        status, _, _ = post(collector, json_request(
            retrieval(f"{i + 1:032x}", f"a{i:015x}", f"Question {i}?", [(f"d{i}", "z" * 400, 0.5)])))
        assert status in (200, 429)
        i += 1
    assert done.wait(10)
    flush = collector.summary.flushes[0]
    assert flush.error is None and flush.without_root == flush.traces > 0
    assert collector.buffered_bytes <= collector.max_buffer


def test_the_real_exporter_waits_out_a_429_and_nothing_is_lost(collect, file_db, monkeypatch):
    gate = threading.Event()
    real_ingest, real_full = C.ingest_logs, C.Collector._full

    def slow_ingest(*args: Any, **kwargs: Any) -> Any:
        assert gate.wait(30)
        return real_ingest(*args, **kwargs)

    def full(self: C.Collector) -> C.Reply:
        gate.set()  # the first refusal opens the database again
        return real_full(self)

    monkeypatch.setattr(C, "ingest_logs", slow_ingest)
    monkeypatch.setattr(C.Collector, "_full", full)
    collector = collect(max_buffer_mb=0.02, max_request_mb=0.02, flush_every=0.01)
    provider, _ = traced_app(collector.url)
    tracer = provider.get_tracer("app")
    calls = [(f"Question {i}?", [(f"doc-{i}", "y" * 500, 0.5)], f"Answer {i}.") for i in range(30)]
    for question, docs, answer in calls:
        rag_call(tracer, question, docs, answer)
    provider.shutdown()
    collector.close()
    assert collector.summary.refused >= 1 and collector.summary.new == 30
    assert file_db.execute("SELECT count(*) FROM queries").fetchone() == (30,)


def test_close_flushes_what_is_held_and_refuses_what_comes_after(collect, file_db):
    collector = collect()
    post(collector, json_request(retrieval()))  # no root yet
    summary = collector.close()
    assert summary.flush_count == 1 and summary.flushes[0].without_root == 1 and summary.new == 1
    assert file_db.execute("SELECT question FROM queries").fetchall() == [("What is a spoke?",)]
    assert collector.receive(json_request(retrieval()), "application/json").status == 503


def test_a_failed_ingest_is_reported_and_the_collector_goes_on(collect, file_db):
    collector = collect()
    bad = retrieval(docs=[("", "", 0.1)])  # a chunk with neither id nor text: rejected by validation
    post(collector, json_request(bad, root()))
    flush = collector.flush()
    assert flush.error is None and flush.rejected == 1 and flush.new == 0 and flush.problems
    post(collector, json_request(retrieval("1" * 32, "1" * 16), root("1" * 32)))
    assert collector.flush().new == 1


# --- redaction, ingest list and undo, the CLI ------------------------------------------------------

def test_span_text_is_redacted_before_it_is_stored(collect, file_db):
    collector = collect()
    post(collector, json_request(retrieval(question="Mail bob@example.com about my card 4111 1111 1111 1111",
                                           docs=[("c1", "Call +44 20 7946 0958 or write ann@example.org", 0.3)])))
    flush = collector.flush()
    assert flush.redactions and flush.redactions.get("EMAIL") == 2
    text = json.dumps(stored(file_db))
    assert "example.com" not in text and "ann@example.org" not in text and "4111" not in text
    assert "[EMAIL_1]" in text


def test_no_redact_keeps_the_text(collect, file_db):
    collector = collect(redact=False)
    post(collector, json_request(retrieval(question="Mail bob@example.com")))
    collector.flush()
    assert file_db.execute("SELECT question FROM queries").fetchone() == ("Mail bob@example.com",)


def test_a_sample_keeps_the_same_retrievals_as_sampling_the_file(collect, file_db, tmp_path):
    collector = collect(sample=0.5, seed=3)
    spans = [retrieval(f"{i + 1:032x}", f"a{i:015x}", f"Question {i}?", [(f"d{i}", f"text {i}", 0.5)])
             for i in range(40)]
    post(collector, json_request(*spans))
    flush = collector.flush()
    assert flush.new + flush.sampled_out == 40 and 0 < flush.new < 40
    exported = tmp_path / "exported.json"
    exported.write_bytes(json_request(*spans))
    other = store.connect(tmp_path / "file.db")
    ingest_logs(other, exported, tool="otlp", sample=0.5, seed=3)
    assert stored(other) == stored(file_db)


def test_ingest_list_shows_each_flush_and_undo_removes_it(collect, file_db, db_path):
    collector = collect()
    post(collector, json_request(retrieval(), root()))
    first = collector.flush()
    post(collector, json_request(retrieval("1" * 32, "1" * 16), root("1" * 32)))
    second = collector.flush()
    runner = CliRunner()
    listed = json.loads(runner.invoke(cli, ["--db", str(db_path), "ingest", "list", "--json"]).output)
    assert [(i["id"], i["path"], i["queries"]) for i in listed] == [
        (first.ingest_id, first.name, 1), (second.ingest_id, second.name, 1)]
    assert first.name.startswith(f"collect {collector.address} ") and first.name.endswith("#1")
    r = runner.invoke(cli, ["--db", str(db_path), "ingest", "undo", str(first.ingest_id)])
    assert r.exit_code == 0, r.output
    assert file_db.execute("SELECT query_id FROM queries").fetchall() == [("1" * 16,)]


def test_options_are_checked_before_listening(file_db):
    with pytest.raises(C.CollectError, match="batch must be a whole number"):
        C.CollectOptions(batch=0)
    with pytest.raises(C.CollectError, match="samples by rate"):
        C.CollectOptions(sample=500)
    with pytest.raises(C.CollectError, match="--otlp takes HOST:PORT"):
        C.parse_address("localhost")
    assert C.parse_address(":4318") == ("127.0.0.1", 4318)
    busy = C.Collector(file_db, "127.0.0.1", 0).start()
    try:
        with pytest.raises(C.CollectError, match=f"cannot listen on 127.0.0.1:{busy.port}"):
            C.Collector(file_db, "127.0.0.1", busy.port).start()
    finally:
        busy.close()


def test_cli_collects_until_sigterm_then_writes_what_it_holds(tmp_path):
    db = tmp_path / "cli.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "labeler", "--db", str(db), "collect", "--otlp", "127.0.0.1:0",
                             "--flush-every", "1h"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    try:
        first = proc.stderr.readline()
        assert first.startswith("collecting OTLP traces on http://127.0.0.1:"), first
        port = int(first.split("127.0.0.1:")[1].split("/")[0])
        target = C.Collector.__new__(C.Collector)
        target.host, target.port = "127.0.0.1", port
        assert post(target, json_request(retrieval(), root()))[0] == 200
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert "#1 (ingest 1): 2 spans of 1 traces: 1 retrievals: 1 new" in lines[0]
    assert lines[-1].startswith(f"127.0.0.1:{port}: 1 requests (0 refused, 0 bad), 2 spans: 2 written in 1 ingests")
    check = store.connect(db)
    assert check.execute("SELECT query_id FROM queries").fetchall() == [("eee19b7ec3c1b174",)]


def test_cli_ctrl_c_with_json_prints_the_summary_document(tmp_path):
    db = tmp_path / "cli.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Ctrl-C as in a terminal: a suite started in the background by a shell without job control
    # (``pytest &``) inherits SIGINT ignored, as every process it starts would (POSIX)
    proc = subprocess.Popen([sys.executable, "-m", "labeler", "--db", str(db), "collect", "--otlp", "127.0.0.1:0",
                             "--flush-every", "1h", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        first = proc.stderr.readline()  # the address goes to stderr in every format
        port = int(first.split("127.0.0.1:")[1].split("/")[0])
        target = C.Collector.__new__(C.Collector)
        target.host, target.port = "127.0.0.1", port
        assert post(target, json_request(retrieval(), root()))[0] == 200
        assert post(target, b"{", "application/json")[0] == 400
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    document = json.loads(out)
    assert (document["requests"], document["bad_requests"], document["new"], document["flush_count"]) == (1, 1, 1, 1)
    assert document["flushes"][0]["ingest_id"] == 1 and document["address"] == f"127.0.0.1:{port}"


def test_cli_rejects_a_bad_address_in_one_line(tmp_path):
    r = CliRunner().invoke(cli, ["--db", str(tmp_path / "x.db"), "collect", "--otlp", "nope"])
    assert r.exit_code == 1 and r.output == "Error: --otlp takes HOST:PORT, e.g. 127.0.0.1:4318; got 'nope'\n"


# --- a real LangChain retriever under OpenInference ----------------------------------------------

def test_an_instrumented_langchain_retriever(collect, file_db):
    required("langchain_core")
    instrumentation = required("openinference.instrumentation.langchain")
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda

    corpus = [Document(id="pricing-1", page_content="A city bike costs 12 euros per day.", metadata={"s": 1}),
              Document(id="pricing-2", page_content="E-bikes cost 29 euros per day.", metadata={"s": 2})]

    class FixedRetriever(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
            return corpus

    collector = collect()
    provider, memory = traced_app(collector.url)
    instrumentor = instrumentation.LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        chain = ({"docs": FixedRetriever(), "question": RunnableLambda(lambda q: q)}
                 | RunnableLambda(lambda x: f"{len(x['docs'])} prices for: {x['question']}"))
        assert chain.invoke("How much is a bike?") == "2 prices for: How much is a bike?"
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    flush = collector.flush()
    assert flush.error is None and flush.new == 1 and flush.without_root == 0
    retriever_span = next(s for s in memory.get_finished_spans()
                          if s.attributes.get("openinference.span.kind") == "RETRIEVER")
    got = stored(file_db)
    assert got["queries"] == [(f"{retriever_span.context.span_id:016x}", "How much is a bike?",
                               "2 prices for: How much is a bike?")]
    assert [(rank, doc) for _, rank, doc, _ in got["retrievals"]] == [(1, "pricing-1"), (2, "pricing-2")]
    assert got["documents"] == [(d.id, d.page_content) for d in corpus]


def _fixed_retriever_chain(corpus):
    from langchain_core.documents import Document  # noqa: F401 - the corpus' type
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda

    class FixedRetriever(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list:
            return corpus

    return ({"docs": FixedRetriever(), "question": RunnableLambda(lambda q: q)}
            | RunnableLambda(lambda x: f"{len(x['docs'])} prices for: {x['question']}"))


def test_an_openllmetry_instrumented_langchain_retriever(collect, file_db, tmp_path):
    """OpenLLMetry (Traceloop) writes no document ids: the chunks get ids made from their texts, the
    same whether the spans are collected or ingested from the exported file."""
    required("langchain_core")
    instrumentation = required("opentelemetry.instrumentation.langchain")
    from google.protobuf.json_format import MessageToJson
    from langchain_core.documents import Document
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    corpus = [Document(page_content="A city bike costs 12 euros per day.", metadata={"s": 1}),
              Document(page_content="E-bikes cost 29 euros per day.", metadata={"s": 2})]
    collector = collect()
    provider, memory = traced_app(collector.url)
    instrumentor = instrumentation.LangchainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        assert _fixed_retriever_chain(corpus).invoke("How much is a bike?") == "2 prices for: How much is a bike?"
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    flush = collector.flush()
    assert flush.error is None and (flush.new, flush.without_root, flush.spans) == (1, 0, 2)
    retriever_span = next(s for s in memory.get_finished_spans()
                          if s.attributes.get("gen_ai.operation.name") == "vector_db_retrieve")
    got = stored(file_db)
    assert got["queries"] == [(f"{retriever_span.context.span_id:016x}", "How much is a bike?",
                               "2 prices for: How much is a bike?")]
    texts = dict(got["documents"])
    assert all(doc.startswith("sha1:") for doc in texts)  # made from the text: no id was exported
    assert [texts[doc] for _, _, doc, _ in got["retrievals"]] == [d.page_content for d in corpus]
    exported = tmp_path / "exported.json"
    exported.write_text(MessageToJson(encode_spans(memory.get_finished_spans()), indent=None) + "\n")
    other = store.connect(tmp_path / "file.db")
    ingest_logs(other, exported, tool="otlp")
    assert stored(other) == got
