"""OpenInference spans (the attribute names Arize Phoenix and its instrumentors write), in every
layout they are exported in: Phoenix's spans dataframe (flattened ``attributes.*`` columns, or an
``attributes`` object, nested or with dotted keys), Phoenix's REST span JSON, the OpenTelemetry
console exporter's JSON, and OTLP spans (``otlp`` turns them into the same shape first); plus
Phoenix's ``get_retrieved_documents()`` rows, one per document, grouped back into their span.
A span in these layouts that carries OpenLLMetry's attributes instead is read by ``traceloop``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ..jsontext import loads_or_text
from . import traceloop
from .spans import ANSWER_KEYS, QUESTION_KEYS, Span, norm_id, signal_meta, text_of

_DOC_KEY = re.compile(r"^retrieval\.documents\.(\d+)\.(.+)$")
_ATTR = "attributes."


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested objects as one level of dotted keys; lists are kept as values."""
    out: dict[str, Any] = {}
    for k, v in value.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _parse_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "{[":
        return loads_or_text(value)  # JSON that cannot be stored stays text
    return value


def _document(fields: dict[str, Any]) -> dict[str, Any]:
    """An OpenInference document (``document.id``, ``document.content``, ``document.score``,
    ``document.metadata`` as JSON text) as a chunk object that validation reads."""
    doc = {k.removeprefix("document."): v for k, v in fields.items()}
    chunk: dict[str, Any] = {"id": doc.get("id"), "text": doc.get("content"), "score": doc.get("score")}
    metadata = _parse_json(doc.get("metadata"))
    if isinstance(metadata, dict):
        chunk["metadata"] = metadata
    return chunk


def _documents(attrs: dict[str, Any]) -> list | None:
    listed = attrs.get("retrieval.documents")
    if isinstance(listed, list):
        return [_document(flatten(d)) if isinstance(d, dict) else d for d in listed]
    indexed: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        m = _DOC_KEY.match(key)
        if m:
            indexed.setdefault(int(m.group(1)), {})[m.group(2)] = value
    if not indexed:
        return None
    return [_document(fields) for _, fields in sorted(indexed.items())]


def _ids_from_output(docs: list, output: Any) -> None:
    """The LangChain instrumentor writes no ``document.id``, but the Documents it returned, ids
    included, are in the span's ``output.value`` JSON: take each id from the Document at the same
    position when its text is the same."""
    if all(not isinstance(d, dict) or d.get("id") is not None for d in docs):
        return
    parsed = _parse_json(output)
    listed = parsed.get("documents") if isinstance(parsed, dict) else None
    if not isinstance(listed, list) or len(listed) != len(docs):
        return
    for doc, returned in zip(docs, listed, strict=True):
        if (isinstance(doc, dict) and doc.get("id") is None and isinstance(returned, dict)
                and returned.get("id") and returned.get("page_content") == doc.get("text")):
            doc["id"] = returned["id"]


def is_span(record: dict) -> bool:
    """A span in one of the layouts above (checked per record, never by key layout alone)."""
    context = record.get("context")
    if isinstance(context, dict) and "span_id" in context:
        return True
    if "context.span_id" in record or "span_kind" in record:
        return True
    if any(k.startswith("attributes.") for k in record):
        return True
    attrs = record.get("attributes")
    return isinstance(attrs, dict) and (
        "openinference.span.kind" in attrs or "retrieval" in attrs or "retrieval.documents" in attrs
        or "input.value" in attrs or isinstance(attrs.get("input"), dict) or traceloop.KIND in attrs)


def span(record: dict) -> Span:
    """The span a record holds (``attributes`` nested, dotted or flattened into columns)."""
    flat = flatten(record)
    attrs = {k[len(_ATTR):]: v for k, v in flat.items() if k.startswith(_ATTR)}
    kind = attrs.get("openinference.span.kind") or flat.get("span_kind")
    kind = str(kind).upper() if kind else None
    docs = _documents(attrs)
    if not docs:
        docs = None
    question = attrs.get("input.value")
    answer = attrs.get("output.value")
    if kind is None and docs is None and question is None and answer is None and traceloop.is_traceloop(attrs):
        return _traceloop_span(flat, attrs)
    if docs is not None and kind == "RETRIEVER":
        _ids_from_output(docs, answer)
        answer = None  # a retriever's output is its documents, not an answer
    return Span(
        trace_id=norm_id(flat.get("context.trace_id", flat.get("trace_id"))),
        span_id=norm_id(flat.get("context.span_id", flat.get("span_id"))),
        parent_id=norm_id(flat.get("parent_id", flat.get("parent_span_id"))),
        retrieval=docs is not None and kind in (None, "RETRIEVER"),
        question=_text(question, attrs.get("input.mime_type"), input_side=True),
        answer=_text(answer, attrs.get("output.mime_type"), input_side=False),
        start=flat.get("start_time"),
        docs=docs,
        meta={"span_name": flat.get("name"), "kind": kind, **signal_meta(
            _metadata(record, attrs), flat.get("status_code", flat.get("status.status_code", flat.get("status.code"))),
            feedback=_human_annotations(record.get("annotations")))},
    )


def _human_annotations(annotations: Any) -> dict[str, Any] | None:
    """Phoenix span annotations (``labeler sync`` attaches them) made by people, as {name: label, or
    score when there is no label}; an LLM's or code's evaluation is not user feedback, nor are the
    grades ``labeler push`` sent (their metadata carries the golden-set version)."""
    if not isinstance(annotations, list):
        return None
    out: dict[str, Any] = {}
    for a in annotations:
        if not isinstance(a, dict) or a.get("annotator_kind") != "HUMAN" or not isinstance(a.get("name"), str):
            continue
        if isinstance(a.get("metadata"), dict) and "golden_set_version" in a["metadata"]:
            continue  # labeler's own grades, sent back by labeler push
        result = a.get("result") if isinstance(a.get("result"), dict) else {}
        value = result.get("label") if result.get("label") is not None else result.get("score")
        if value is not None:
            out[a["name"]] = value
    return out or None


def _metadata(record: dict, attrs: dict[str, Any]) -> Any:
    """The span's ``metadata`` attribute (JSON text, or an object: then ``flatten`` spread it)."""
    if "metadata" in attrs:
        return attrs["metadata"]
    nested = record.get("attributes")
    if isinstance(nested, dict) and isinstance(nested.get("metadata"), dict):
        return nested["metadata"]
    spread = {k[len("metadata."):]: v for k, v in attrs.items() if k.startswith("metadata.")}
    return spread or None


def _traceloop_span(flat: dict[str, Any], attrs: dict[str, Any]) -> Span:
    """A span OpenLLMetry wrote (``traceloop``), which has no OpenInference attributes."""
    docs = traceloop.documents(attrs)
    return Span(
        trace_id=norm_id(flat.get("context.trace_id", flat.get("trace_id"))),
        span_id=norm_id(flat.get("context.span_id", flat.get("span_id"))),
        parent_id=norm_id(flat.get("parent_id", flat.get("parent_span_id"))),
        retrieval=docs is not None,
        question=traceloop.question(attrs),
        answer=None if docs is not None else traceloop.answer(attrs),
        start=flat.get("start_time"),
        docs=docs,
        meta={"span_name": flat.get("name"), "kind": traceloop.kind(attrs)},
    )


def _text(value: Any, mime: Any, *, input_side: bool) -> str | None:
    return text_of(value, QUESTION_KEYS if input_side else ANSWER_KEYS, mime if isinstance(mime, str) else None,
                   "attributes.input.value" if input_side else "attributes.output.value")


# --- Phoenix get_retrieved_documents(): one row per document -------------------------------

def is_document_row(record: dict) -> bool:
    return "document_position" in record and ("context.span_id" in record or "span_id" in record)


class DocumentRows:
    """Groups consecutive rows of one span (the dataframe is indexed by span, then position)."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.line = 0
        self.rows: list[dict] = []

    def feed(self, line: int, record: dict) -> Iterator[tuple[int, Span]]:
        key = norm_id(record.get("context.span_id", record.get("span_id")))
        if key != self.key:
            yield from self.flush()
            self.key, self.line = key, line
        self.rows.append(record)

    def flush(self) -> Iterator[tuple[int, Span]]:
        if not self.rows:
            return
        rows = sorted(self.rows, key=lambda r: r.get("document_position") or 0)
        first = rows[0]
        docs = [{"id": r.get("document_id", r.get("document.id")),
                 "text": next((r[k] for k in ("document", "reference", "document_content") if r.get(k) is not None),
                              None),
                 "score": r.get("document_score"),
                 "metadata": _parse_json(r.get("document_metadata"))} for r in rows]
        # no trace id on the Span: a documents file has no roots to wait for
        yield self.line, Span(
            trace_id=None, span_id=self.key, parent_id="(row)", retrieval=True,
            question=first.get("input"), answer=None, start=None, docs=docs,
            meta={"kind": "RETRIEVER", "trace_id": norm_id(first.get("context.trace_id"))})
        self.rows = []
