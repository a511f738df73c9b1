"""The HTTP side of the OTLP receiver: a threaded ``http.server`` answering ``POST /v1/traces`` as
an OTLP/HTTP server does (200 with an empty ``ExportTraceServiceResponse``; a refusal with a
``google.rpc.Status`` body in the request's encoding and the reason in the status line, which
exporters log), handing each body to a ``Receiver`` (the ``collector.Collector``). It bounds what it
reads: a body needs a ``Content-Length`` (411) within ``max_request`` (413), and at most
``decoding`` requests are read and decoded at a time."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from . import otlp_proto
from .otlp_proto import JSON, PROTOBUF

TRACES_PATH = "/v1/traces"


@dataclass
class Reply:
    """What the server answers one request: an HTTP status, a one-line reason, extra headers."""

    status: int
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)


class Receiver(Protocol):
    max_request: int  # bytes of one body, at most
    decoding: threading.BoundedSemaphore  # requests read and decoded at once

    def receive(self, raw: bytes, content_type: str | None, content_encoding: str | None = None) -> Reply: ...


def make_server(host: str, port: int, receiver: Receiver) -> ThreadingHTTPServer:
    """A server bound to ``host:port`` (an IPv6 host too), not yet serving; OSError if it cannot bind."""
    server = (_Server6 if ":" in host else _Server)((host, port), _Handler)
    server.receiver = receiver
    return server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    receiver: Receiver


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # exporters keep their connection open between batches
    server_version = "labeler-collect"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass  # the collector reports per flush, not per request

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        collector = self.server.receiver
        media = otlp_proto.media_type(self.headers.get("Content-Type"))
        if self.path.split("?", 1)[0] != TRACES_PATH:
            self._reply(media, Reply(404, f"no such path {self.path[:80]!r}; OTLP traces go to {TRACES_PATH}"), drain=True)
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.strip().isdigit():
            chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
            self._reply(media, Reply(411, "send a Content-Length" + (" (chunked bodies are not read)" if chunked else "")))
            self.close_connection = True
            return
        if int(length) > collector.max_request:
            self._reply(media, Reply(413, f"the body is over {collector.max_request} bytes; send smaller batches"))
            self.close_connection = True
            return
        # a few requests are read and decoded at a time: the memory of those in flight is bounded too
        if not collector.decoding.acquire(timeout=30):
            self._reply(media, Reply(429, "too many requests at once; try again", {"Retry-After": "1"}))
            self.close_connection = True
            return
        try:
            body = self.rfile.read(int(length))
            reply = collector.receive(body, self.headers.get("Content-Type"), self.headers.get("Content-Encoding"))
        finally:
            collector.decoding.release()
        self._reply(media, reply)

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        if path == TRACES_PATH:
            self._reply(JSON, Reply(405, f"{TRACES_PATH} takes POST", {"Allow": "POST"}))
        else:
            self._reply(JSON, Reply(404, f"no such path; OTLP traces go to POST {TRACES_PATH}"))

    def _reply(self, media: str, reply: Reply, *, drain: bool = False) -> None:
        if drain:  # read what was sent, so that the connection can be used again
            length = self.headers.get("Content-Length")
            if length and length.strip().isdigit() and int(length) <= self.server.receiver.max_request:
                self.rfile.read(int(length))
            else:
                self.close_connection = True
        media = media if media in (PROTOBUF, JSON) else JSON
        if reply.status == 200:
            body = b"" if media == PROTOBUF else b"{}"  # an empty ExportTraceServiceResponse
        else:
            body = otlp_proto.status_body(media, _rpc_code(reply.status), reply.reason)
        phrase = " ".join(reply.reason.split())[:200] if reply.reason else None
        self.send_response(reply.status, phrase or HTTPStatus(reply.status).phrase)
        self.send_header("Content-Type", media)
        self.send_header("Content-Length", str(len(body)))
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)


def _rpc_code(status: int) -> int:
    """The ``google.rpc.Code`` of an HTTP status (INVALID_ARGUMENT, RESOURCE_EXHAUSTED...)."""
    return {400: 3, 404: 5, 405: 12, 411: 3, 413: 3, 415: 3, 429: 8, 503: 14}.get(status, 2)
