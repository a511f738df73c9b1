"""OpenLLMetry (Traceloop) spans: what ``opentelemetry-instrumentation-langchain`` writes. A
retriever is a span with ``gen_ai.operation.name`` ``vector_db_retrieve`` whose
``traceloop.entity.output`` is JSON ``{"documents": [{"page_content", "metadata"}], "count"}``
(no document ids nor scores: a chunk's id is then made from its text, as for any chunk without one);
its ``traceloop.entity.input`` holds ``{"query": ...}``. A workflow (the root) holds
``{"inputs": question}`` and ``{"outputs": answer}``. ``openinference.span`` hands such spans here
when they carry no OpenInference attributes.
"""

from __future__ import annotations

from typing import Any

from ..jsontext import loads_or_text
from .spans import ANSWER_KEYS, QUESTION_KEYS, text_of

KIND = "traceloop.span.kind"
INPUT = "traceloop.entity.input"
OUTPUT = "traceloop.entity.output"
OPERATION = "gen_ai.operation.name"
RETRIEVE = "vector_db_retrieve"


def is_traceloop(attrs: dict[str, Any]) -> bool:
    return KIND in attrs or INPUT in attrs or OUTPUT in attrs


def _json(value: Any) -> Any:
    return loads_or_text(value) if isinstance(value, str) and value[:1] in "{[" else value


def _unwrap(value: Any, key: str) -> Any:
    """``{"inputs": x, "tags": ..., "kwargs": ...}`` -> x (LangChain's callback payloads)."""
    return value[key] if isinstance(value, dict) and key in value else value


def documents(attrs: dict[str, Any]) -> list | None:
    """The retrieved chunks of a retriever span, or None when the span is not one."""
    if attrs.get(OPERATION) != RETRIEVE:
        return None
    listed = _unwrap(_json(attrs.get(OUTPUT)), "documents")
    if not isinstance(listed, list) or not listed:
        return None
    chunks = []
    for d in listed:
        if not isinstance(d, dict):
            chunks.append(d)
            continue
        chunk: dict[str, Any] = {"id": d.get("id"), "text": d.get("page_content", d.get("text"))}
        if isinstance(d.get("metadata"), dict):
            chunk["metadata"] = d["metadata"]
        chunks.append(chunk)
    return chunks


def question(attrs: dict[str, Any]) -> str | None:
    value = _json(attrs.get(INPUT))
    if isinstance(value, dict) and "inputs" not in value and "query" in value:
        value = value["query"]
    return text_of(_unwrap(value, "inputs"), QUESTION_KEYS)


def answer(attrs: dict[str, Any]) -> str | None:
    return text_of(_unwrap(_json(attrs.get(OUTPUT)), "outputs"), ANSWER_KEYS)


def kind(attrs: dict[str, Any]) -> str | None:
    if attrs.get(OPERATION) == RETRIEVE:
        return "RETRIEVER"
    value = attrs.get(KIND)
    return str(value).upper() if value else None
