"""The Batch API half of the fake OpenAI server: ``/v1/files`` and ``/v1/batches``.

Objects follow the API reference shapes (``openai.types.FileObject``, ``openai.types.Batch``).
File contents live in a temporary directory, never in memory. A batch's lifecycle is driven by the
test: ``advance(batch_id, "in_progress")`` validates the input (a bad line makes it ``failed`` with
errors naming the line), ``"finalizing"``, ``"completed"`` (every line answered), ``"expired"``
(the first ``done`` lines answered, the rest in the error file as ``batch_expired``), ``"cancelled"``
(likewise with ``batch_cancelled``); ``auto="completed"`` completes a batch as soon as it is created.
Each line is answered by the server's own chat-completions logic (``FakeOpenAI.complete``), so
responders and prompt fault markers work as for direct calls. Per-line faults by custom_id
(``line_faults``): ``"500"``/``"429"`` (a non-200 line in the error file), ``"invalid_json"`` (an
answer that is not JSON), ``"garbled"`` (an output line that is not JSON), ``"drop"`` (no line), ``"invalid"`` (the line fails
validation, so the whole batch does).
``interrupt[file_id] = n`` cuts the next download of that file after ``n`` bytes. From another
process: ``POST /_batches/{id}/advance`` with ``{"status": ..., "done": ...}``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.fake_openai import FakeOpenAI

TERMINAL = ("completed", "failed", "expired", "cancelled")
_STAMPS = {"in_progress": "in_progress_at", "finalizing": "finalizing_at", "completed": "completed_at",
           "failed": "failed_at", "expired": "expired_at", "cancelling": "cancelling_at", "cancelled": "cancelled_at"}


class BatchStore:
    def __init__(self, fake: FakeOpenAI, *, auto: str | None = None) -> None:
        self.fake, self.auto = fake, auto
        self.dir = tempfile.TemporaryDirectory(prefix="fake-openai-files-")
        self.lock = threading.RLock()
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.line_faults: dict[str, str] = {}
        self.interrupt: dict[str, int] = {}
        self.uploads = 0
        self.deleted: list[str] = []
        self._n = 0

    def _id(self, prefix: str) -> str:
        with self.lock:
            self._n += 1
            # the port too: two fake servers over one database (one closed, one new) never reuse an id
            return f"{prefix}-fake{self.fake.port}-{self._n:06d}"

    def path(self, file_id: str) -> str:
        return os.path.join(self.dir.name, file_id)

    # -- files ------------------------------------------------------------------------------------

    def add_file(self, filename: str, purpose: str, write: Any) -> dict[str, Any]:
        """Store a file: ``write(fh)`` writes its bytes."""
        file_id = self._id("file")
        with open(self.path(file_id), "wb") as fh:
            write(fh)
        meta = {"id": file_id, "object": "file", "bytes": os.path.getsize(self.path(file_id)),
                "created_at": int(time.time()), "filename": filename, "purpose": purpose,
                "status": "processed", "expires_at": None, "status_details": None}
        with self.lock:
            self.files[file_id] = meta
            if purpose == "batch":
                self.uploads += 1
        return meta

    def delete_file(self, file_id: str) -> bool:
        with self.lock:
            if self.files.pop(file_id, None) is None:
                return False
            self.deleted.append(file_id)
        os.remove(self.path(file_id))
        return True

    # -- batches ----------------------------------------------------------------------------------

    def create(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        file_id = body.get("input_file_id")
        if file_id not in self.files:
            return 404, {"error": {"message": f"No such File object: {file_id}", "type": "invalid_request_error",
                                   "param": "input_file_id", "code": None}}
        lines = sum(1 for _ in open(self.path(file_id), "rb"))
        batch = {"id": self._id("batch"), "object": "batch", "endpoint": body.get("endpoint"), "errors": None,
                 "input_file_id": file_id, "completion_window": body.get("completion_window", "24h"),
                 "status": "validating", "output_file_id": None, "error_file_id": None,
                 "created_at": int(time.time()), "in_progress_at": None, "expires_at": int(time.time()) + 86400,
                 "finalizing_at": None, "completed_at": None, "failed_at": None, "expired_at": None,
                 "cancelling_at": None, "cancelled_at": None, "model": None,
                 "request_counts": {"total": lines, "completed": 0, "failed": 0},
                 "metadata": body.get("metadata") or None}
        with self.lock:
            self.batches[batch["id"]] = batch
        if self.auto:
            self.advance(batch["id"], self.auto)
        return 200, batch

    def _validate(self, batch: dict[str, Any]) -> list[dict[str, Any]]:
        errors, seen = [], set()
        with open(self.path(batch["input_file_id"]), "rb") as fh:
            for n, raw in enumerate(fh, 1):
                try:
                    line = json.loads(raw)
                    problem = None
                    if not isinstance(line.get("custom_id"), str):
                        problem = "custom_id is missing"
                    elif line["custom_id"] in seen:
                        problem = f"custom_id {line['custom_id']} is not unique"
                    elif line.get("method") != "POST" or line.get("url") != batch["endpoint"]:
                        problem = f"url must be {batch['endpoint']} with method POST"
                    elif not isinstance(line.get("body"), dict) or "model" not in line["body"]:
                        problem = "body.model is missing"
                    if self.line_faults.get(line.get("custom_id")) == "invalid":
                        problem = "body.messages is not a valid list of messages"
                    seen.add(line.get("custom_id"))
                except ValueError:
                    problem = "the line is not valid JSON"
                if problem:
                    errors.append({"code": "invalid_request", "line": n, "message": problem, "param": None})
        return errors

    def advance(self, batch_id: str, status: str, *, done: int | None = None,
                errors: list[str] | None = None) -> dict[str, Any]:
        """Move a batch to ``status`` (answering its lines on completed / expired / cancelled).
        ``errors``: the provider refuses the batch (status ``failed``) with these messages."""
        with self.lock:
            batch = self.batches[batch_id]
            if errors is not None:
                batch["errors"] = {"object": "list", "data": [
                    {"code": "invalid_request", "line": n, "message": m, "param": None}
                    for n, m in enumerate(errors, 1)]}
                status = "failed"
            if batch["status"] == "validating" and status != "cancelled":
                if errors := self._validate(batch):
                    batch["errors"] = {"object": "list", "data": errors}
                    status = "failed"
            if status in ("completed", "expired", "cancelled"):
                self._run(batch, status, done)
            batch["status"] = status
            if status in _STAMPS:
                batch[_STAMPS[status]] = int(time.time())
            return dict(batch)

    def cancel(self, batch_id: str) -> dict[str, Any]:
        with self.lock:
            batch = self.batches[batch_id]
            if batch["status"] not in TERMINAL:
                batch["status"], batch["cancelling_at"] = "cancelling", int(time.time())
            return dict(batch)

    def _run(self, batch: dict[str, Any], status: str, done: int | None) -> None:
        total = batch["request_counts"]["total"]
        if done is None:
            done = total if status == "completed" else total // 2 if status == "expired" else 0
        out_lines = err_lines = completed = failed = 0
        out_id, err_id = self._id("file"), self._id("file")
        with open(self.path(batch["input_file_id"]), "rb") as src, \
                open(self.path(out_id), "wb") as out, open(self.path(err_id), "wb") as err:
            for n, raw in enumerate(src):
                line = json.loads(raw)
                cid = line["custom_id"]
                if n >= done:
                    code = "batch_expired" if status == "expired" else "batch_cancelled"
                    err.write(_dump({"id": f"batch_req_{n}", "custom_id": cid, "response": None,
                                     "error": {"code": code, "message": "This request was not run."}}))
                    err_lines += 1
                    continue
                fault = self.line_faults.get(cid)
                if fault == "drop":
                    continue
                if fault in ("500", "429"):
                    code, body = int(fault), {"error": {"message": "The server had an error processing this line.",
                                                        "type": "server_error", "param": None, "code": None}}
                else:
                    code, body, _ = self.fake.complete(line["body"], wait=False)
                    if fault == "invalid_json" and code == 200:
                        body["choices"][0]["message"]["content"] = "Here you go: {grade: oops"
                record = {"id": f"batch_req_{n}", "custom_id": cid,
                          "response": {"status_code": code, "request_id": f"req_{n}", "body": body}, "error": None}
                if code == 200:
                    text = _dump(record)
                    out.write(text[: len(text) // 2] + b"\n" if fault == "garbled" else text)
                    out_lines += 1
                    completed += 1
                else:
                    err.write(_dump(record))
                    err_lines += 1
                    failed += 1
        for file_id, lines, name in ((out_id, out_lines, "output"), (err_id, err_lines, "error")):
            if lines:
                meta = {"id": file_id, "object": "file", "bytes": os.path.getsize(self.path(file_id)),
                        "created_at": int(time.time()), "filename": f"batch_{batch['id']}_{name}.jsonl",
                        "purpose": "batch_output", "status": "processed", "expires_at": None, "status_details": None}
                self.files[file_id] = meta
                batch[f"{name}_file_id"] = file_id
            else:
                os.remove(self.path(file_id))
        batch["request_counts"].update(completed=completed, failed=failed)

    # -- HTTP -------------------------------------------------------------------------------------

    def handle(self, handler: Any, method: str, path: str, query: dict[str, str], raw: bytes) -> bool:
        """Serve a /v1/files or /v1/batches request; False when the path is not one of them."""
        parts = [p for p in path.split("/") if p]
        if method == "POST" and len(parts) == 3 and parts[0] == "_batches" and parts[2] == "advance":
            body = json.loads(raw or b"{}")  # the test's remote control, for a server in another process
            handler._send(200, self.advance(parts[1], body["status"], done=body.get("done")))
            return True
        if parts[:1] == ["v1"]:
            parts = parts[1:]
        if not parts or parts[0] not in ("files", "batches"):
            return False
        if parts[0] == "files":
            self._files(handler, method, parts[1:], query, raw)
        else:
            self._batches(handler, method, parts[1:], query, raw)
        return True

    def _files(self, handler: Any, method: str, rest: list[str], query: dict[str, str], raw: bytes) -> None:
        if method == "POST" and not rest:
            fields = _multipart(handler.headers.get("Content-Type", ""), raw)
            if "file" not in fields:
                handler._error(400, "file is required", "invalid_request_error", param="file")
                return
            filename, data = fields["file"]
            handler._send(200, self.add_file(filename or "upload.jsonl", fields.get("purpose", (None, b"batch"))[1].decode(),
                                             lambda fh: fh.write(data)))
        elif method == "GET" and not rest:
            data = [f for f in self.files.values() if not query.get("purpose") or f["purpose"] == query["purpose"]]
            handler._send(200, _page(data, query, 10000))
        elif rest and rest[0] not in self.files:
            handler._error(404, f"No such File object: {rest[0]}", "invalid_request_error")
        elif method == "GET" and len(rest) == 1:
            handler._send(200, self.files[rest[0]])
        elif method == "GET" and rest[1:] == ["content"]:
            self._content(handler, rest[0])
        elif method == "DELETE" and len(rest) == 1:
            self.delete_file(rest[0])
            handler._send(200, {"id": rest[0], "object": "file", "deleted": True})
        else:
            handler._error(404, f"no route {handler.path}", "not_found")

    def _content(self, handler: Any, file_id: str) -> None:
        size = os.path.getsize(self.path(file_id))
        cut = self.interrupt.pop(file_id, None)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(size))
        handler.end_headers()
        sent = 0
        try:
            with open(self.path(file_id), "rb") as fh:
                while chunk := fh.read(1 << 16):
                    if cut is not None and sent + len(chunk) > cut:
                        handler.wfile.write(chunk[: cut - sent])
                        handler.wfile.flush()
                        handler.close_connection = True
                        handler.connection.shutdown(2)  # the download stops half-way
                        return
                    handler.wfile.write(chunk)
                    sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass

    def _batches(self, handler: Any, method: str, rest: list[str], query: dict[str, str], raw: bytes) -> None:
        if method == "POST" and not rest:
            status, body = self.create(json.loads(raw or b"{}"))
            handler._send(status, body)
        elif method == "GET" and not rest:
            handler._send(200, _page(sorted(self.batches.values(), key=lambda b: b["id"], reverse=True), query, 20))
        elif rest and rest[0] not in self.batches:
            handler._error(404, f"No batch found with id '{rest[0]}'.", "invalid_request_error")
        elif method == "GET" and len(rest) == 1:
            handler._send(200, self.batches[rest[0]])
        elif method == "POST" and rest[1:] == ["cancel"]:
            handler._send(200, self.cancel(rest[0]))
        else:
            handler._error(404, f"no route {handler.path}", "not_found")


def _dump(value: Any) -> bytes:
    return json.dumps(value).encode() + b"\n"


def _multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The fields of a multipart/form-data body: name -> (filename, bytes)."""
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if not match:
        return {}
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in raw.split(b"--" + match.group(1).encode())[1:]:
        if part.startswith(b"--"):
            break
        head, _, body = part.partition(b"\r\n\r\n")
        disposition = head.decode(errors="replace")
        name = re.search(r'name="([^"]*)"', disposition)
        filename = re.search(r'filename="([^"]*)"', disposition)
        if name:
            fields[name.group(1)] = (filename.group(1) if filename else None, body.removesuffix(b"\r\n"))
    return fields


def _page(items: list[dict[str, Any]], query: dict[str, str], default_limit: int) -> dict[str, Any]:
    """One page of a cursor-paginated list, as the API serves it: ``limit`` items after the id
    ``after``. Clients of some versions ignore ``has_more`` and ask for the page after the last
    id until one comes back empty, so ``after`` must be honoured."""
    ids = [item["id"] for item in items]
    start = ids.index(query["after"]) + 1 if query.get("after") in ids else 0
    limit = int(query.get("limit") or default_limit)
    data = items[start:start + limit]
    return {"object": "list", "data": data, "has_more": start + limit < len(items),
            "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None}
