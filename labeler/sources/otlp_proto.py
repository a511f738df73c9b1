"""OTLP/HTTP trace requests (``POST /v1/traces``) decoded into the spans the collector keeps: the
body gunzipped (bounded), then read as protobuf (``application/x-protobuf``, with the
``opentelemetry-proto`` package: the ``otlp`` extra) or as OTLP/JSON (``application/json``, no extra
needed). Each span comes out as one line of OTLP/JSON (``{"resourceSpans": [{"scopeSpans":
[{"spans": [span]}]}]}``, hex ids, attributes as ``AnyValue`` objects, times as strings of
nanoseconds: the shape the file reader ``ingest.formats.otlp`` reads), with what the collector
needs to hold it: its trace, whether it is the trace's root, whether it is a retrieval.

A request that cannot be read is a ``PayloadError`` carrying the HTTP status (400 malformed, 413
too large, 415 a content type or encoding this process cannot read) and a one-line reason; the
whole request is then refused, never half kept.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson

from ..ingest.formats.spans import is_root, norm_id

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
OTLP_EXTRA = "pip install 'rag-labeler[otlp]'"
_KIND_KEY = "openinference.span.kind"
_DOCS_KEY = "retrieval.documents"
# OpenLLMetry (ingest.formats.traceloop): a retriever is this operation with documents in its output
_OPERATION_KEY, _RETRIEVE = "gen_ai.operation.name", "vector_db_retrieve"
_OUTPUT_KEY = "traceloop.entity.output"


class PayloadError(Exception):
    """A request the collector refuses: ``status`` (an HTTP code) and a one-line ``reason``."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class _Kind:
    """What a span's attributes say about it, as the reader will decide (``openinference.span``)."""

    __slots__ = ("documents", "kind", "operation", "output_documents")

    def __init__(self) -> None:
        self.documents = False  # OpenInference retrieval.documents
        self.kind: Any = None  # openinference.span.kind
        self.operation: Any = None  # OpenLLMetry gen_ai.operation.name
        self.output_documents = False  # OpenLLMetry documents in traceloop.entity.output

    def see(self, key: str, value: Any) -> None:
        """One attribute; ``value`` is an ``AnyValue`` object, or a plain value."""
        if key == _DOCS_KEY or key.startswith(_DOCS_KEY + "."):
            self.documents = True
        elif key in (_KIND_KEY, _OPERATION_KEY, _OUTPUT_KEY):
            text = value.get("stringValue", value.get("string_value")) if isinstance(value, dict) else value
            if key == _KIND_KEY:
                self.kind = text
            elif key == _OPERATION_KEY:
                self.operation = text
            else:
                self.output_documents = isinstance(text, str) and '"documents"' in text

    def retrieval(self) -> bool:
        if self.documents:
            return self.kind is None or str(self.kind).upper() == "RETRIEVER"
        return self.kind is None and self.operation == _RETRIEVE and self.output_documents


class Received(NamedTuple):
    """One span of a request: its trace (lowercase hex), whether it is the trace's root (it holds
    the question and the answer), whether it is a retrieval (documents, and no other kind than
    ``RETRIEVER``, as the reader decides), and its JSONL line."""

    trace_id: str
    root: bool
    retrieval: bool
    line: bytes


def media_type(content_type: str | None) -> str:
    """``application/json; charset=utf-8`` -> ``application/json``."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def body_of(raw: bytes, content_encoding: str | None, max_bytes: int) -> bytes:
    """The request body, gunzipped when ``Content-Encoding: gzip``; at most ``max_bytes`` once
    decompressed (a small gzip can hold gigabytes)."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise PayloadError(415, f"Content-Encoding {encoding!r} is not supported; send gzip, deflate or none")
    inflate = zlib.decompressobj(zlib.MAX_WBITS | 16 if encoding != "deflate" else zlib.MAX_WBITS)
    try:
        body = inflate.decompress(raw, max_bytes + 1)
    except zlib.error as e:
        raise PayloadError(400, f"the body is not valid {encoding}: {e}") from None
    if len(body) > max_bytes:
        raise PayloadError(413, f"the body is over {max_bytes} bytes once decompressed; send smaller batches")
    if not inflate.eof:
        raise PayloadError(400, f"the {encoding} body is truncated")
    return body


def decode(body: bytes, content_type: str | None) -> list[Received]:
    """Every span of one request, or ``PayloadError``."""
    kind = media_type(content_type)
    if kind == PROTOBUF:
        return list(_from_protobuf(body))
    if kind == JSON:
        return list(_from_json(body))
    raise PayloadError(415, f"Content-Type {kind or '(none)'!r} is not supported; send {PROTOBUF} or {JSON}")


def _line(span: dict[str, Any]) -> bytes:
    return orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}) + b"\n"


# --- OTLP/JSON ----------------------------------------------------------------------------------

def _list(value: Any, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PayloadError(400, f"{where} must be a list, got {type(value).__name__}")
    return value


def _object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise PayloadError(400, f"{where} must be an object, got {type(value).__name__}")
    return value


def _from_json(body: bytes) -> Iterator[Received]:
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise PayloadError(400, f"the body is not JSON: {e}") from None
    request = _object(request, "the request")
    if "resourceSpans" not in request and "resource_spans" not in request:
        raise PayloadError(400, "not an OTLP/JSON trace request: no resourceSpans")
    resources = _list(request.get("resourceSpans", request.get("resource_spans")), "resourceSpans")
    for r, resource in enumerate(resources):
        resource = _object(resource, f"resourceSpans[{r}]")
        for s, scope in enumerate(_list(resource.get("scopeSpans", resource.get("scope_spans")),
                                        f"resourceSpans[{r}].scopeSpans")):
            where = f"resourceSpans[{r}].scopeSpans[{s}]"
            for i, span in enumerate(_list(_object(scope, where).get("spans"), f"{where}.spans")):
                yield _json_span(_object(span, f"{where}.spans[{i}]"), f"{where}.spans[{i}]")


def _json_span(span: dict[str, Any], where: str) -> Received:
    trace_id = span.get("traceId", span.get("trace_id"))
    span_id = span.get("spanId", span.get("span_id"))
    for name, value in (("traceId", trace_id), ("spanId", span_id)):
        if not isinstance(value, str) or not value.strip():
            raise PayloadError(400, f"{where}.{name} is missing (a hex string)")
    parent = span.get("parentSpanId", span.get("parent_span_id"))
    if parent is not None and not isinstance(parent, str):
        raise PayloadError(400, f"{where}.parentSpanId must be a hex string, got {type(parent).__name__}")
    attributes = span.get("attributes")
    kind = _Kind()
    if isinstance(attributes, dict):  # already an object (not the spec, but the reader takes it)
        for key, value in attributes.items():
            kind.see(str(key), value)
    else:
        for a, pair in enumerate(_list(attributes, f"{where}.attributes")):
            key = _object(pair, f"{where}.attributes[{a}]").get("key")
            if not isinstance(key, str):
                raise PayloadError(400, f"{where}.attributes[{a}].key must be a string")
            kind.see(key, pair.get("value"))
    return Received(norm_id(trace_id) or "", is_root(norm_id(parent)), kind.retrieval(), _line(span))


# --- protobuf -----------------------------------------------------------------------------------

def _request_class() -> Any:
    try:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    except ImportError:
        raise PayloadError(415, f"protobuf requests need the opentelemetry-proto package ({OTLP_EXTRA}); "
                                f"or send {JSON}") from None
    return ExportTraceServiceRequest


def protobuf_available() -> bool:
    try:
        _request_class()
    except PayloadError:
        return False
    return True


def _from_protobuf(body: bytes) -> Iterator[Received]:
    request_class = _request_class()
    from google.protobuf.message import DecodeError

    try:
        request = request_class.FromString(body)
    except DecodeError as e:
        raise PayloadError(400, f"the body is not an ExportTraceServiceRequest: {e}") from None
    for r, resource in enumerate(request.resource_spans):
        for s, scope in enumerate(resource.scope_spans):
            for i, span in enumerate(scope.spans):
                yield _pb_span(span, f"resourceSpans[{r}].scopeSpans[{s}].spans[{i}]")


def _pb_span(span: Any, where: str) -> Received:
    if not span.trace_id or not span.span_id:
        raise PayloadError(400, f"{where} has no {'traceId' if not span.trace_id else 'spanId'}")
    attributes = []
    kind = _Kind()
    for pair in span.attributes:
        value = _any(pair.value)
        attributes.append({"key": pair.key, "value": value})
        kind.see(pair.key, value)
    trace_id = span.trace_id.hex()
    parent = span.parent_span_id.hex()
    out = {
        "traceId": trace_id,
        "spanId": span.span_id.hex(),
        "parentSpanId": parent,
        "name": span.name,
        "kind": span.kind,
        "startTimeUnixNano": str(span.start_time_unix_nano),
        "endTimeUnixNano": str(span.end_time_unix_nano),
        "attributes": attributes,
    }
    if span.HasField("status"):
        out["status"] = {"code": span.status.code, **({"message": span.status.message} if span.status.message else {})}
    return Received(trace_id, is_root(parent or None), kind.retrieval(), _line(out))


def _any(value: Any) -> dict[str, Any]:
    """An ``AnyValue`` message as OTLP/JSON (64-bit integers as strings, bytes as base64)."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return {"stringValue": value.string_value}
    if which == "int_value":
        return {"intValue": str(value.int_value)}
    if which == "double_value":
        return {"doubleValue": value.double_value}
    if which == "bool_value":
        return {"boolValue": value.bool_value}
    if which == "array_value":
        return {"arrayValue": {"values": [_any(v) for v in value.array_value.values]}}
    if which == "kvlist_value":
        return {"kvlistValue": {"values": [{"key": p.key, "value": _any(p.value)} for p in value.kvlist_value.values]}}
    if which == "bytes_value":
        return {"bytesValue": base64.b64encode(value.bytes_value).decode("ascii")}
    return {}


def status_body(media: str, code: int, message: str) -> bytes:
    """A ``google.rpc.Status`` (``code``, ``message``) in the request's encoding: what an OTLP
    server answers a refused request with."""
    if media == PROTOBUF:
        text = message.encode("utf-8")
        return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text
    return orjson.dumps({"code": code, "message": message})


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
