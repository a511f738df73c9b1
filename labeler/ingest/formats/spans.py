"""Traces, whichever tool wrote them: a span (or a LangSmith run) reduced to what ingest needs, and
the join that turns a trace's retrieval spans into log records carrying the trace's question and
final answer.

A trace is a tree: the root span (no parent) holds what the user asked and what the app answered;
retriever spans below it hold the chunks, and the query the retriever got (often the same
question, sometimes a rewritten one). A retrieval becomes one log record: the query id is its span
id, the question is the root's when the root is in the file (else the retriever's input, and the
retriever's input is kept in ``meta.retriever_input`` when the two differ), the answer is the
root's output. Spans that are not retrievals (chains, LLM calls, embeddings, retrievers that
returned no documents) are skipped and counted.

Exporters write spans in the order they end, so the root of a trace usually comes after its
retrievals: those wait for their root, and everything still waiting at the end of the file (or
beyond ``MAX_WAITING`` records) goes out with what it has.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, NamedTuple

from ..common import FieldError
from ..jsontext import BadJSON, load_json, loads_or_text

SKIP_NOT_RETRIEVAL = "{unit}s that are not retrievals"
SKIP_NO_DOCUMENTS = "retriever {unit}s without documents"
MAX_WAITING = 50_000
_HEX = re.compile(r"^[0-9a-f]+$")
# keys under which a structured input or output carries the text a person typed or read
QUESTION_KEYS = ("question", "query", "input", "user_input", "query_str", "user_query", "text", "content")
ANSWER_KEYS = ("answer", "output", "response", "result", "text", "content", "generated_answer")


class Span(NamedTuple):
    """A span or run: ids (normalised), whether it is a retrieval, its texts and documents."""

    trace_id: str | None
    span_id: str | None
    parent_id: str | None
    retrieval: bool
    question: str | None  # the span's input, as text
    answer: str | None  # the span's output, as text
    start: Any
    docs: list | None  # raw chunk objects (None: the span has no documents)
    meta: dict[str, Any]


SIGNAL_META = ("metadata", "error", "signals")  # meta keys a root passes to its trace's retrievals
_ERROR_CODES = ("ERROR", "STATUS_CODE_ERROR", "2")  # Langfuse's level ERROR too


def signal_meta(metadata: Any = None, status: Any = None, error: Any = None,
                feedback: dict[str, Any] | None = None) -> dict[str, Any]:
    """The meta that carries a span's outcome signals (``labeler.signals`` reads them): its
    ``metadata`` object (JSON text is parsed; e.g. ``{"thumbs_down": true}``), ``error`` (true, or
    the error message) when the span's status code is ERROR (OpenTelemetry's 2) or ``error`` is set,
    and ``signals``: the store's own user ``feedback`` ({name: label or score})."""
    out: dict[str, Any] = {"signals": feedback} if feedback else {}
    if isinstance(metadata, str) and metadata[:1] == "{":
        metadata = loads_or_text(metadata)  # JSON that cannot be stored stays text (and is left out)
    if isinstance(metadata, dict) and metadata:
        out["metadata"] = metadata
    if error:
        out["error"] = error if isinstance(error, str) else True
    elif status is not None and str(status).strip().upper() in _ERROR_CODES:
        out["error"] = True
    return out


def norm_id(value: Any) -> str | None:
    """A trace or span id as lowercase hex without ``0x``, whichever way the exporter wrote it
    (``0x``-prefixed hex from the OTel console exporter, plain hex from OTLP/JSON and Phoenix,
    base64 from a protobuf JSON mapping, an integer); other ids (LangSmith's UUIDs) are kept."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return f"{value:016x}" if value < 1 << 64 else f"{value:032x}"
    text = str(value).strip()
    if not text:
        return None
    lowered = text.lower()
    if lowered.startswith("0x"):
        lowered = lowered[2:]
    if _HEX.match(lowered):
        return lowered
    if len(text) in (12, 24) and "-" not in text:  # base64 of 8 or 16 bytes
        try:
            return base64.b64decode(text, validate=True).hex()
        except (binascii.Error, ValueError):
            pass
    return text


def is_root(parent_id: Any) -> bool:
    return parent_id is None or (isinstance(parent_id, str) and not parent_id.strip("0x "))


def text_of(value: Any, keys: tuple[str, ...], mime: str | None = None, where: str = "input") -> str | None:
    """The text inside a span's input or output: the value itself, or in a JSON object the first
    of ``keys`` (recursively), or a chat message's content; None when there is no such text.
    JSON text holding what cannot be stored (a lone surrogate...) is a ``FieldError`` at ``where``."""
    if isinstance(value, str):
        stripped = value.strip()
        if mime == "application/json" or (stripped[:1] in "{[" and stripped[-1:] in "}]"):
            try:
                value = load_json(stripped)
            except BadJSON as e:
                raise FieldError(where if e.field == "json" else f"{where} ({e.field})", e.message) from None
            except ValueError:
                return value
        else:
            return value
    if isinstance(value, dict):
        for key in keys:
            if key in value:
                found = text_of(value[key], keys)
                if found is not None:
                    return found
        return None
    if isinstance(value, list) and value:
        if all(isinstance(m, dict) for m in value):  # chat messages: the last one's content
            return text_of(value[-1], keys)
        if isinstance(value[0], str) and len(value) == 1:
            return value[0]
    return None


class TraceJoin:
    """Turns spans into log records (or skip reasons), attaching each trace's root question and
    answer to its retrievals; ``flush()`` at the end of the file gives those still waiting."""

    def __init__(self, tool: str, unit: str = "span"):
        self.tool = tool
        self.unit = unit  # what the tool calls a span, in skip reasons
        self.roots: dict[str, tuple[str | None, str | None]] = {}
        self.waiting: OrderedDict[str, list[tuple[int, Span]]] = OrderedDict()
        self.count = 0

    def feed(self, line: int, span: Span) -> Iterator[tuple[int, dict | str]]:
        root = is_root(span.parent_id)
        if root and span.trace_id is not None:
            self.roots[span.trace_id] = (span.question, span.answer,
                                         {k: span.meta[k] for k in SIGNAL_META if span.meta.get(k) is not None})
            if len(self.roots) > 4 * MAX_WAITING:
                self.roots.pop(next(iter(self.roots)))
            for waiting_line, waiting in self.waiting.pop(span.trace_id, []):
                self.count -= 1
                yield waiting_line, self._record(waiting)
        if not span.retrieval:
            reason = SKIP_NO_DOCUMENTS if span.docs is None and span.meta.get("kind") == "RETRIEVER" \
                else SKIP_NOT_RETRIEVAL
            yield line, reason.format(unit=self.unit)
            return
        if root or span.trace_id is None or span.trace_id in self.roots:
            yield line, self._record(span)
            return
        self.waiting.setdefault(span.trace_id, []).append((line, span))
        self.count += 1
        while self.count > MAX_WAITING:
            _, spans = self.waiting.popitem(last=False)
            self.count -= len(spans)
            for waiting_line, waiting in spans:
                yield waiting_line, self._record(waiting)

    def flush(self) -> Iterator[tuple[int, dict | str]]:
        while self.waiting:
            _, spans = self.waiting.popitem(last=False)
            for line, span in spans:
                yield line, self._record(span)
        self.count = 0

    def _record(self, span: Span) -> dict[str, Any]:
        question, answer, signals = self.roots.get(span.trace_id, (None, None, {})) if span.trace_id else \
            (None, None, {})
        if is_root(span.parent_id):  # a trace that is only a retrieval
            question, answer, signals = None, None, {}
        # the trace's outcome (thumbs down, an error) is usually on its root: the retrieval carries it
        meta = {**signals, **{k: v for k, v in span.meta.items() if k != "kind" and v is not None}}
        if isinstance(signals.get("signals"), dict) and isinstance(span.meta.get("signals"), dict):
            # the store's feedback on the root and on the retrieval both count (the retrieval's wins a name)
            meta["signals"] = {**signals["signals"], **span.meta["signals"]}
        meta["tool"] = self.tool
        if span.trace_id:
            meta["trace_id"] = span.trace_id
        if question and span.question and question.strip() != span.question.strip():
            meta["retriever_input"] = span.question
        return {
            "query_id": span.span_id,
            "question": question if isinstance(question, str) and question.strip() else span.question,
            "retrieved": span.docs,
            "answer": answer,
            "timestamp": span.start,
            "retriever": None,
            "meta": meta,
            "opaque_id": True,  # the query id is the tracer's random span id (see validate.opaque_id)
        }
