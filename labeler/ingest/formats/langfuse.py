"""Langfuse observations, as its v2 observations API returns them (``GET
/api/public/v2/observations`` with the ``core,basic,io,metadata`` field groups; one per line, or a
JSON array, or pages ``{"data": [...], "meta": {...}}``): a retriever observation (``type:
RETRIEVER``; its documents in ``output``, a list of LangChain Documents or ``{"documents": [...]}``)
becomes a log record; the trace's root observation (no ``parentObservationId``) gives the question
and the final answer. An observation without a parent is the root of its trace, so a retriever
observation always has its trace (or a parent observation) above it unless it is the whole trace."""

from __future__ import annotations

from typing import Any

from ..jsontext import loads_or_text
from .spans import ANSWER_KEYS, QUESTION_KEYS, Span, norm_id, signal_meta, text_of


def is_observation(record: dict) -> bool:
    return "traceId" in record and "type" in record and "id" in record


def is_page(record: dict) -> bool:
    data = record.get("data")
    return isinstance(data, list) and isinstance(record.get("meta"), dict) and all(
        isinstance(o, dict) and is_observation(o) for o in data)


def _documents(output: Any) -> list | None:
    if isinstance(output, str) and output.strip()[:1] in "[{":  # the API without parseIoAsJson
        output = loads_or_text(output.strip())
    if isinstance(output, dict):
        output = output.get("documents")
    if isinstance(output, list) and output:
        return output
    return None


def span(record: dict) -> Span:
    kind = str(record.get("type") or "").upper()
    docs = _documents(record.get("output")) if kind == "RETRIEVER" else None
    parent = record.get("parentObservationId")
    return Span(
        trace_id=norm_id(record.get("traceId")), span_id=norm_id(record.get("id")),
        parent_id=norm_id(parent),
        retrieval=kind == "RETRIEVER" and docs is not None,
        question=text_of(record.get("input"), QUESTION_KEYS, where="input"),
        answer=None if kind == "RETRIEVER" else text_of(record.get("output"), ANSWER_KEYS, where="output"),
        start=record.get("startTime"), docs=docs,
        meta={"observation_name": record.get("name"), "kind": kind or None,
              "session_id": record.get("sessionId"), "user_id": record.get("userId"),
              **signal_meta(record.get("metadata"), record.get("level"))},
    )
