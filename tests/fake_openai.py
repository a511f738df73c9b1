"""A fake OpenAI-compatible server for tests and benchmarks: real HTTP on 127.0.0.1, no network.

``POST /v1/embeddings`` answers with ``fake_embedding`` of each input (bag of hashed words).
``POST /v1/chat/completions`` answers in the OpenAI response shape (id, choices[0].message
content/refusal, finish_reason, usage). By default it fills the requested JSON schema (from
``response_format`` json_schema, or from a schema the client put in a system message for
json_object mode) with values derived from a hash of the prompt, so answers are deterministic.
Latency and faults are configurable: 429 with Retry-After, 500, 503, a hang past the client's
timeout, invalid JSON, truncated JSON, a refusal, an empty answer. A fault is chosen per request
deterministically: by a marker in the prompt (``[[fault:429*2 ra=0.5]]`` = a 429 on the first two
attempts, ``[[fault:500]]`` = always), by a plan of request numbers, by a callable, or at a rate
drawn from a seeded hash of the prompt. The server counts requests in total and per prompt, where
the prompt is the user messages before the first assistant turn (so a repair request and a
json_object retry count as further attempts of the same prompt). ``GET /_stats`` returns the
counts as JSON, for use from another process. ``/v1/files`` and ``/v1/batches`` (the Batch API,
with a lifecycle the test drives and per-line faults) are served by ``tests/fake_batches.py``.

Use from pytest via ``FakeOpenAI`` (a context manager), or run
``python tests/fake_openai.py --port 8000 --latency 0.2 --fault-rate 0.2``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

try:
    from tests.fake_batches import BatchStore
except ImportError:  # run as a script: python tests/fake_openai.py
    from fake_batches import BatchStore  # type: ignore[no-redef]

FAULT_KINDS = ("429", "500", "503", "hang", "invalid_json", "truncated_json", "refusal", "empty")
EMBEDDING_DIMS = 64
_MARKER = re.compile(r"\[\[fault:(\w+)(?:\*(\d+))?(?:\s+ra=([\d.]+))?\]\]")

Responder = Callable[[dict[str, Any]], "dict[str, Any] | str"]


class _Server(ThreadingHTTPServer):
    """The HTTP server, quiet when a client goes away mid-request (a killed process, a client
    timeout): those are the faults tests make on purpose. socketserver would print a traceback to
    stderr, and a CliRunner capturing stderr at that moment would find it in a command's output.

    The listen backlog is socketserver's 5 unless raised: a client opening 16 connections at once
    (labeler.llm at concurrency 16, a fresh client per run) then had some of them dropped, seen as
    a connection error (httpx ReadError) and a retry, so request counts varied from run to run."""

    request_queue_size = 128

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 - socketserver's signature
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


@dataclass(frozen=True)
class Fault:
    """``kind`` from FAULT_KINDS; ``times`` = on the first k attempts of a prompt (None: always)."""

    kind: str
    times: int | None = None
    retry_after: float | None = None

    def applies(self, attempt: int) -> bool:
        return self.times is None or attempt < self.times


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def prompt_key(messages: Sequence[Mapping[str, Any]]) -> str:
    """The server's identity of a prompt: a hash of the user messages before the first assistant turn."""
    users = []
    for message in messages:
        if message.get("role") == "assistant":
            break
        if message.get("role") == "user":
            users.append(_text(message.get("content")))
    return hashlib.sha256("\x1e".join(users).encode()).hexdigest()[:16]


def requested_schema(request: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON schema the client asked for: response_format json_schema, or one in a system message."""
    response_format = request.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        return response_format.get("json_schema", {}).get("schema")
    decoder = json.JSONDecoder()
    for message in request.get("messages", []):
        if message.get("role") != "system":
            continue
        text = _text(message.get("content"))
        for match in re.finditer(r"\{", text):
            try:
                value, _ = decoder.raw_decode(text, match.start())
            except ValueError:
                continue
            if isinstance(value, dict) and ("properties" in value or "type" in value):
                return value
    return None


def fill_schema(schema: Mapping[str, Any], seed: str) -> Any:
    """A value conforming to ``schema`` (objects, arrays, strings, numbers, enums, anyOf, $ref),
    each leaf derived from sha256(seed + its path)."""
    root = schema

    def digest(path: str) -> int:
        return int.from_bytes(hashlib.sha256(f"{seed}|{path}".encode()).digest()[:8], "big")

    def fill(node: Mapping[str, Any], path: str) -> Any:
        if "$ref" in node:
            target: Any = root
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            return fill(target, path)
        if "const" in node:
            return node["const"]
        if "enum" in node:
            return node["enum"][digest(path) % len(node["enum"])]
        for key in ("anyOf", "oneOf"):
            if key in node:
                options = [o for o in node[key] if o.get("type") != "null"] or node[key]
                return fill(options[digest(path) % len(options)], path)
        if "allOf" in node:
            merged: dict[str, Any] = {}
            for part in node["allOf"]:
                merged.update(part)
            return fill(merged, path)
        kind = node.get("type", "object" if "properties" in node else "string")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        h = digest(path)
        if kind == "object":
            return {name: fill(sub, f"{path}.{name}") for name, sub in node.get("properties", {}).items()}
        if kind == "array":
            low = node.get("minItems", 1)
            high = max(low, min(node.get("maxItems", 3), 3))
            n = low + h % (high - low + 1)
            return [fill(node.get("items", {}), f"{path}[{i}]") for i in range(n)]
        if kind == "integer":
            low, high = int(node.get("minimum", 0)), int(node.get("maximum", 100))
            return low + h % (high - low + 1)
        if kind == "number":
            low, high = float(node.get("minimum", 0)), float(node.get("maximum", 1))
            return round(low + (h % 10_000) / 10_000 * (high - low), 4)
        if kind == "boolean":
            return bool(h % 2)
        if kind == "null":
            return None
        text = f"{path.rsplit('.', 1)[-1] or 'value'} {h:016x}"
        low, high = node.get("minLength", 0), node.get("maxLength")
        text = text.ljust(low, "x")
        return text[:high] if high is not None else text

    return fill(schema, "")


def default_responder(request: dict[str, Any]) -> dict[str, Any] | str:
    """Fill the requested schema deterministically from the prompt; plain text if none was asked."""
    schema = requested_schema(request)
    key = prompt_key(request.get("messages", []))
    if schema is None:
        fmt = (request.get("response_format") or {}).get("type")
        return {"answer": f"answer {key}"} if fmt == "json_object" else f"answer {key}"
    return fill_schema(schema, key)


_CHUNK_BLOCK = re.compile(r'<chunk id="([^"]*)"[^>]*>\n(.*?)\n</chunk>', re.S)
_ASKED = re.compile(r"Write (\d+) question")


def prompt_chunks(request: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(doc id, text) of every ``<chunk id="...">`` block in the user messages of a labeler.synth prompt."""
    text = "\n".join(_text(m.get("content")) for m in request.get("messages", []) if m.get("role") == "user")
    return _CHUNK_BLOCK.findall(text)


def synth_responder(style: str = "plain") -> Responder:
    """A responder for labeler.synth prompts: as many questions as asked, each built from its own
    sentence of the prompt's chunk(s) (quoted verbatim, so the quote check passes; a two-chunk
    prompt quotes both). ``style``: ``plain`` ("What does it say about ...?") or ``terse``
    (lowercase keyword strings, nothing like a logged question)."""
    if style not in ("plain", "terse"):
        raise ValueError(f"unknown style {style!r}: plain or terse")

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        chunks = prompt_chunks(request)
        asked = _ASKED.search(" ".join(_text(m.get("content")) for m in request.get("messages", [])))
        n = int(asked.group(1)) if asked else 1
        sentences = [[s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.strip()) > 10] or [text.strip()]
                     for _, text in chunks] or [["nothing"]]
        questions = []
        for i in range(n):
            quotes = [s[i % len(s)] for s in sentences]
            words = sorted({w.lower() for q in quotes for w in re.findall(r"[A-Za-z]{5,}", q)},
                           key=lambda w: (-len(w), w))[:6] or ["thing"]
            if style == "plain":
                question = f"What does it say about {' and '.join(words[:2])} ({', '.join(words[2:]) or 'in general'})?"
            else:
                question = " ".join(words) + f" {i}"
            questions.append({"question": question, "answer": " ".join(quotes), "quotes": quotes,
                              "type": "fact"})
        return {"questions": questions}

    return respond


_BLOCK = re.compile(r"(?m)^([A-Z][A-Za-z ]*):\n<<<\n(.*?)\n>>>", re.S)


def prompt_blocks(request: Mapping[str, Any]) -> dict[str, str]:
    """The ``Label:\\n<<<\\ntext\\n>>>`` blocks of the user messages before the first assistant turn
    (the layout of labeler.judge's prompts), e.g. {"Question": ..., "Chunk": ...}."""
    blocks: dict[str, str] = {}
    for message in request.get("messages", []):
        if message.get("role") == "assistant":
            break
        if message.get("role") == "user":
            blocks.update(dict(_BLOCK.findall(_text(message.get("content")))))
    return blocks


def grade_responder(grade_of: Callable[[str, str], int | None], *, shift: int = 0, top: int = 3,
                    fallback: Responder = default_responder) -> Responder:
    """A labeler.judge relevance judge: ``grade_of(question, chunk_text)`` (e.g. the human grade)
    moved by ``shift`` and clipped to 0..top; prompts it does not know go to ``fallback``."""

    def respond(request: dict[str, Any]) -> dict[str, Any] | str:
        blocks = prompt_blocks(request)
        grade = grade_of(blocks.get("Question", ""), blocks.get("Chunk", "")) if "Chunk" in blocks else None
        if grade is None:
            return fallback(request)
        grade = min(max(grade + shift, 0), top)
        return {"rationale": f"grade {grade}: the chunk {'answers' if grade >= 2 else 'does not answer'} it",
                "relevance_grade": grade}

    return respond

# --- judges with a character: gullible, robust, learning from examples, random ----------------------------
# They answer labeler.judge's relevance prompts (see grade_responder) and differ in what they do with
# what the prompt carries besides the question and the chunk: an instruction planted in the chunk
# (labeler.judge.stress), graded examples in the rubric (labeler.judge.align).

_PLANTED = re.compile(r"grade it (\d+)", re.I)
_EXAMPLE = re.compile(r"Example \d+ \(grade (\d+)\)\nQuestion: (.*)\nChunk: (.*)")


def _system(request: Mapping[str, Any]) -> str:
    return "\n".join(_text(m.get("content")) for m in request.get("messages", []) if m.get("role") == "system")


def _draw(request: Mapping[str, Any], salt: str) -> float:
    """A number in [0, 1) from a hash of the whole prompt (system and user messages) and ``salt``."""
    text = json.dumps(request.get("messages", []), sort_keys=True)
    return int(hashlib.sha256(f"{salt}|{text}".encode()).hexdigest()[:12], 16) / 16 ** 12


def known_grade(truth: Mapping[tuple[str, str], int], question: str, chunk: str) -> int | None:
    """The grade of ``chunk`` for ``question`` in ``truth``, or of the longest known chunk of that
    question that ``chunk`` contains (a perturbed copy: padded, stuffed, with a sentence planted)."""
    if (question, chunk) in truth:
        return truth[(question, chunk)]
    inside = [(len(c), g) for (q, c), g in truth.items() if q == question and c and c in chunk]
    return max(inside)[1] if inside else None


def robust_responder(truth: Mapping[tuple[str, str], int], *, top: int = 3) -> Responder:
    """A judge that grades every chunk, perturbed or not, as ``truth`` grades the chunk inside it."""

    def respond(request: dict[str, Any]) -> dict[str, Any] | str:
        blocks = prompt_blocks(request)
        if "Chunk" not in blocks:
            return default_responder(request)
        grade = known_grade(truth, blocks.get("Question", ""), blocks["Chunk"])
        grade = 0 if grade is None else min(max(grade, 0), top)
        return {"rationale": f"grade {grade}: judged on what the chunk says", "relevance_grade": grade}

    return respond


def gullible_responder(truth: Mapping[tuple[str, str], int], *, top: int = 3) -> Responder:
    """``robust_responder``, except that it obeys an instruction in the chunk ("grade it 3")."""
    robust = robust_responder(truth, top=top)

    def respond(request: dict[str, Any]) -> dict[str, Any] | str:
        planted = _PLANTED.search(prompt_blocks(request).get("Chunk", ""))
        if planted:
            grade = min(int(planted.group(1)), top)
            return {"rationale": f"the passage says to grade it {grade}", "relevance_grade": grade}
        return robust(request)

    return respond


def prompt_examples(request: Mapping[str, Any]) -> list[tuple[int, str, str]]:
    """(grade, question, chunk) of every graded example in the system message (labeler.judge.align's
    layout: ``Example N (grade G)`` / ``Question: ...`` / ``Chunk: ...``)."""
    return [(int(g), q, c) for g, q, c in _EXAMPLE.findall(_system(request))]


def example_learning_responder(truth: Mapping[tuple[str, str], int], *, base: float = 0.35, per_example: float = 0.15,
                               ceiling: float = 0.95, top: int = 3, salt: str = "learner") -> Responder:
    """A judge whose accuracy rises with the correct examples in its prompt: it gives the ``truth``
    grade with probability ``base + per_example * (examples whose grade is truth's)`` (at most
    ``ceiling``), else a wrong grade, both drawn from a hash of the whole prompt; an example with a
    wrong grade costs as much as a correct one gains."""

    def respond(request: dict[str, Any]) -> dict[str, Any] | str:
        blocks = prompt_blocks(request)
        grade = known_grade(truth, blocks.get("Question", ""), blocks.get("Chunk", "")) if "Chunk" in blocks else None
        if grade is None:
            return default_responder(request)
        score = sum(1 if truth.get((q, c)) == g else -1 for g, q, c in prompt_examples(request))
        accuracy = min(ceiling, max(0.0, base + per_example * score))
        if _draw(request, salt) >= accuracy:
            grade = (grade + 1 + int(_draw(request, salt + "/wrong") * top)) % (top + 1)
        return {"rationale": f"grade {grade}", "relevance_grade": grade}

    return respond


def random_responder(*, top: int = 3, salt: str = "random") -> Responder:
    """A judge that grades at random: a hash of the whole prompt (so another rubric, other examples
    or another chunk draws again), whatever the prompt says."""

    def respond(request: dict[str, Any]) -> dict[str, Any] | str:
        schema = requested_schema(request) or {}
        if "relevance_grade" not in schema.get("properties", {}):
            return default_responder(request)
        grade = int(_draw(request, salt) * (top + 1))
        return {"rationale": f"grade {grade}", "relevance_grade": grade}

    return respond


class FakeOpenAI:
    """The server. Start with ``with FakeOpenAI(...) as server:`` and point a client at ``server.url``.

    ``fault_rate`` picks a fault for that share of prompts from a hash of (``fault_seed``, prompt);
    of those, ``permanent_fraction`` are permanent and the rest hit the first 1-2 attempts only.
    ``hang_s`` is how long a "hang" stalls (set it above the client's timeout).
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, latency: float = 0.0,
                 responder: Responder | None = None, reject_json_schema: bool = False,
                 reject_json_object: bool = False, api_key: str | None = None,
                 hang_s: float = 5.0, retry_after: float = 1.0,
                 fault_rate: float = 0.0, fault_kinds: Sequence[str] = FAULT_KINDS,
                 fault_seed: int = 0, permanent_fraction: float = 0.25,
                 plan: Mapping[int, Fault] | None = None,
                 faults: Callable[[dict[str, Any], int], Fault | None] | None = None,
                 batch_auto: str | None = None) -> None:
        unknown = set(fault_kinds) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(FAULT_KINDS)}")
        self.host, self.port = host, port
        self.latency, self.responder = latency, responder or default_responder
        self.reject_json_schema, self.reject_json_object = reject_json_schema, reject_json_object
        self.api_key, self.hang_s, self.retry_after = api_key, hang_s, retry_after
        self.fault_rate, self.fault_kinds, self.fault_seed = fault_rate, tuple(fault_kinds), fault_seed
        self.permanent_fraction, self.plan, self.faults = permanent_fraction, dict(plan or {}), faults
        self.lock = threading.Condition()
        self.batch = BatchStore(self, auto=batch_auto)  # /v1/files and /v1/batches (tests/fake_batches.py)
        self.stopping = threading.Event()
        self.reset()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- bookkeeping ----------------------------------------------------------------------------

    def reset(self) -> None:
        with self.lock:
            self.total = 0
            self.by_prompt: Counter[str] = Counter()
            self.by_outcome: Counter[str] = Counter()
            self.log: list[dict[str, Any]] = []
            self.embedding_requests = 0
            self.embedded_texts: list[str] = []

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {"total": self.total, "prompts": len(self.by_prompt),
                    "by_prompt": dict(self.by_prompt), "by_outcome": dict(self.by_outcome),
                    "embedding_requests": self.embedding_requests, "embedded_texts": len(self.embedded_texts)}

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> bool:
        """Block until at least ``n`` requests have arrived (True) or ``timeout`` passes (False)."""
        with self.lock:
            return self.lock.wait_for(lambda: self.total >= n, timeout)

    def fault_for(self, request: dict[str, Any], key: str, attempt: int, number: int) -> Fault | None:
        fault = self.plan.get(number)
        if fault is None:
            text = " ".join(_text(m.get("content")) for m in request.get("messages", [])
                            if m.get("role") == "user")
            if match := _MARKER.search(text):
                kind, times, ra = match.groups()
                fault = Fault(kind, int(times) if times else None, float(ra) if ra else None)
        if fault is None and self.faults is not None:
            fault = self.faults(request, attempt)
        if fault is None and self.fault_rate > 0:
            rng = random.Random(f"{self.fault_seed}:{key}")
            if rng.random() < self.fault_rate:
                kind = rng.choice(self.fault_kinds)
                fault = Fault(kind, None if rng.random() < self.permanent_fraction else rng.randint(1, 2))
        return fault if fault is not None and fault.applies(attempt) else None


    # -- chat completions (shared by /v1/chat/completions and batch lines) ----------------------

    def complete(self, request: dict[str, Any], *, wait: bool) -> tuple[int, dict[str, Any], dict[str, str]]:
        """(status, body, headers) of one chat completion request; ``wait``: apply latency and hangs
        (a batch line is answered at once)."""
        messages = request.get("messages", [])
        key = prompt_key(messages)
        with self.lock:
            self.total += 1
            number = self.total
            attempt = self.by_prompt[key]
            self.by_prompt[key] += 1
            self.lock.notify_all()
        fmt = (request.get("response_format") or {}).get("type")
        fault = self.fault_for(request, key, attempt, number)
        outcome = fault.kind if fault else "ok"
        if (fmt == "json_schema" and self.reject_json_schema) or (fmt == "json_object" and self.reject_json_object):
            outcome = f"rejected_{fmt}"
        with self.lock:
            self.by_outcome[outcome] += 1
            self.log.append({"n": number, "key": key, "attempt": attempt, "format": fmt,
                             "outcome": outcome, "t": time.monotonic()})
        if self.latency and wait:
            self.stopping.wait(self.latency)
        if outcome.startswith("rejected_"):
            return _error_body(400, f"Invalid parameter: 'response_format' of type '{fmt}' is not supported "
                               "with this model.", "invalid_request_error", param="response_format")
        kind = fault.kind if fault else None
        if kind == "429":
            ra = fault.retry_after if fault.retry_after is not None else self.retry_after
            status, body, _ = _error_body(429, "Rate limit reached. Please try again later.", "rate_limit_error")
            return status, body, {"Retry-After": f"{ra:g}"}
        if kind in ("500", "503"):
            return _error_body(int(kind), "The server had an error while processing your request.", "server_error")
        if kind == "hang" and wait:
            self.stopping.wait(self.hang_s)
        answer = self.responder(request)
        content: str | None = answer if isinstance(answer, str) else json.dumps(answer)
        refusal, finish = None, "stop"
        if kind == "invalid_json":
            content = "Sure! Here is the JSON you asked for: {answer: oops"
        elif kind == "truncated_json":
            content, finish = content[: max(1, len(content) // 2)], "length"
        elif kind == "refusal":
            content, refusal = None, "I'm sorry, but I can't help with that request."
        elif kind == "empty":
            content = ""
        prompt_tokens = max(1, len(json.dumps(messages)) // 4)
        completion_tokens = max(1, len(content or refusal or "") // 4)
        return 200, {
            "id": f"chatcmpl-fake-{number}", "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model", "fake-model"), "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "finish_reason": finish, "logprobs": None,
                         "message": {"role": "assistant", "content": content, "refusal": refusal}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }, {}

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> FakeOpenAI:
        server = self

        class Handler(_Handler):
            fake = server

        self._httpd = _Server((self.host, self.port), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()  # releases hung handlers
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self.batch.dir.cleanup()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _error_body(status: int, message: str, kind: str, param: str | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    return status, {"error": {"message": message, "type": kind, "param": param, "code": None}}, {}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Without TCP_NODELAY, headers and body in two writes meet delayed ACKs: +40 ms a request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout); nothing to do

    def _error(self, status: int, message: str, kind: str, headers: Mapping[str, str] | None = None,
               param: str | None = None) -> None:
        self._send(status, {"error": {"message": message, "type": kind, "param": param, "code": None}}, headers)

    def _embeddings(self, raw: bytes) -> None:
        """``POST /v1/embeddings``: ``fake_embedding`` of each input, in the OpenAI response shape."""
        fake = self.fake
        if fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
            self._error(401, "Incorrect API key provided.", "invalid_request_error")
            return
        try:
            request = json.loads(raw)
            inputs = request["input"]
        except (ValueError, KeyError, TypeError):
            self._error(400, "request body must be JSON with input", "invalid_request_error")
            return
        inputs = [inputs] if isinstance(inputs, str) else list(inputs)
        with fake.lock:
            fake.embedding_requests += 1
            fake.embedded_texts.extend(inputs)
        tokens = sum(max(1, len(t) // 4) for t in inputs)
        self._send(200, {"object": "list", "model": request.get("model", "fake-embedding"),
                         "data": [{"object": "embedding", "index": i, "embedding": fake_embedding(t)}
                                  for i, t in enumerate(inputs)],
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def _batch_api(self, method: str, raw: bytes = b"") -> bool:
        url = urlsplit(self.path)
        if self.fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {self.fake.api_key}" \
                and url.path.startswith(("/v1/files", "/v1/batches")):
            self._error(401, "Incorrect API key provided.", "invalid_request_error")
            return True
        return self.fake.batch.handle(self, method, url.path, dict(parse_qsl(url.query)), raw)

    def do_DELETE(self) -> None:
        if not self._batch_api("DELETE"):
            self._error(404, f"no route {self.path}", "not_found")

    def do_GET(self) -> None:
        if self._batch_api("GET"):
            return
        if self.path.rstrip("/") == "/_stats":
            self._send(200, self.fake.stats())
        elif self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        else:
            self._error(404, f"no route {self.path}", "not_found")

    def do_POST(self) -> None:
        fake = self.fake
        length = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(length)
        if self.path.rstrip("/") == "/_reset":
            fake.reset()
            self._send(200, {"ok": True})
            return
        if self._batch_api("POST", raw):
            return
        if self.path.rstrip("/") in ("/v1/embeddings", "/embeddings"):
            self._embeddings(raw)
            return
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"no route {self.path}", "not_found")
            return
        if fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
            self._error(401, "Incorrect API key provided.", "invalid_request_error")
            return
        try:
            request = json.loads(raw)
            request["messages"]  # noqa: B018 (a KeyError answers 400)
        except (ValueError, KeyError, TypeError):
            self._error(400, "request body must be JSON with messages", "invalid_request_error")
            return
        status, body, headers = fake.complete(request, wait=True)
        self._send(status, body, headers)


def fake_embedding(text: str, dims: int = EMBEDDING_DIMS) -> list[float]:
    """A deterministic bag-of-words vector: each lower-cased word adds 1 to a dimension picked by a
    hash of the word, so texts sharing words have a high cosine (enough to test a search with)."""
    vector = [0.0] * dims
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % dims] += 1.0
    return vector


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per request")
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--fault-seed", type=int, default=0)
    parser.add_argument("--fault-kinds", default=",".join(FAULT_KINDS))
    parser.add_argument("--permanent-fraction", type=float, default=0.25)
    parser.add_argument("--retry-after", type=float, default=1.0, help="Retry-After seconds on 429")
    parser.add_argument("--hang", type=float, default=5.0, help="seconds a hang stalls")
    parser.add_argument("--reject-json-schema", action="store_true")
    parser.add_argument("--api-key", default=None, help="require this bearer key")
    parser.add_argument("--batch-auto", default=None, help="move new batches straight to this status (completed)")
    args = parser.parse_args(argv)
    server = FakeOpenAI(port=args.port, latency=args.latency, fault_rate=args.fault_rate,
                        fault_seed=args.fault_seed, fault_kinds=args.fault_kinds.split(","),
                        permanent_fraction=args.permanent_fraction, retry_after=args.retry_after,
                        hang_s=args.hang, reject_json_schema=args.reject_json_schema, api_key=args.api_key,
                        batch_auto=args.batch_auto)
    server.start()
    print(json.dumps({"url": server.url, "port": server.port}), flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    server.stop()


if __name__ == "__main__":
    main()
