"""Langfuse observations, as its v2 observations API returns them (``GET
/api/public/v2/observations`` with the ``core,basic,io,metadata`` field groups; one per line, or a
JSON array, or pages ``{"data": [...], "meta": {...}}``), or whole traces as ``GET
/api/public/traces/{traceId}`` returns them (``observations`` and ``scores`` lists): a retriever
observation (``type: RETRIEVER``; its documents in ``output``, a list of LangChain Documents or
``{"documents": [...]}``) becomes a log record; the trace's root observation (no
``parentObservationId``) gives the question and the final answer. An observation without a parent is
the root of its trace, so a retriever observation always has its trace (or a parent observation)
above it unless it is the whole trace.

Scores are Langfuse's user feedback: an observation's ``scores`` (what ``labeler sync`` attaches, or
a trace's list) that concern it, on the observation itself or on its whole trace, and were not made
by a model (``source`` API or ANNOTATION, not EVAL) become its signals ``{name: value}``
(``labeler.signals`` reads them by name): a boolean score's yes/no, a categorical or text score's
label, a numeric score's number. The score's comment is not read. The grades ``labeler push`` sent
(their metadata carries the golden-set version) are not feedback either.
"""

from __future__ import annotations

from typing import Any

from ..common import FieldError
from ..jsontext import loads_or_text
from .spans import ANSWER_KEYS, QUESTION_KEYS, Span, norm_id, signal_meta, text_of

MODEL_SOURCES = ("EVAL",)  # scores an evaluator (an LLM judge) made: not the user's feedback


def is_observation(record: dict) -> bool:
    return "traceId" in record and "type" in record and "id" in record


def is_page(record: dict) -> bool:
    data = record.get("data")
    return isinstance(data, list) and isinstance(record.get("meta"), dict) and all(
        isinstance(o, dict) and is_observation(o) for o in data)


def is_trace(record: dict) -> bool:
    """A whole trace (``GET /api/public/traces/{traceId}``): its observations and scores inside."""
    return record.get("id") is not None and isinstance(record.get("observations"), list) and "type" not in record


def observations_of(record: dict) -> list[dict]:
    """The observations a record holds: itself, a page's ``data``, or a trace's ``observations`` (each
    with the trace's ``scores``, of which the reader keeps those about it)."""
    if is_page(record):
        return record["data"]
    if is_trace(record):
        scores = record.get("scores") if isinstance(record.get("scores"), list) else []
        out = []
        for o in record["observations"]:
            if not isinstance(o, dict):
                raise FieldError("observations", "holds something that is not an observation")
            own = o.get("scores") if isinstance(o.get("scores"), list) else []
            out.append({**o, "traceId": o.get("traceId") or record["id"], "scores": own + scores})
        return out
    return [record]


def _documents(output: Any) -> list | None:
    if isinstance(output, str) and output.strip()[:1] in "[{":  # the API without parseIoAsJson
        output = loads_or_text(output.strip())
    if isinstance(output, dict):
        output = output.get("documents")
    if isinstance(output, list) and output:
        return output
    return None


def score_target(score: dict) -> tuple[str | None, str | None]:
    """(trace id, observation id or None) of a score: v1/v2 scores name them (``traceId``,
    ``observationId``), v3 scores in their ``subject`` (kind ``trace`` or ``observation``)."""
    subject = score.get("subject")
    if isinstance(subject, dict):
        kind = subject.get("kind")
        if kind == "trace":
            return _text(subject.get("id")), None
        if kind == "observation":
            return _text(subject.get("traceId") or score.get("traceId")), _text(subject.get("id"))
        return None, None  # a session's or an experiment's score
    return _text(score.get("traceId")), _text(score.get("observationId"))


def score_value(score: dict) -> Any:
    """A score's value as the user gave it: yes/no (BOOLEAN: 1 or 0 in v1/v2, a boolean in v3), a
    label (CATEGORICAL, TEXT: ``stringValue`` in v1/v2, ``value`` in v3), or a number (NUMERIC);
    None for a correction (the corrected output) or a value that is none of these."""
    kind = str(score.get("dataType") or "").upper()
    value, label = score.get("value"), score.get("stringValue")
    if kind == "CORRECTION":
        return None
    if kind == "BOOLEAN":
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float):
            return value != 0
        return label.strip().lower() == "true" if isinstance(label, str) and label.strip() else None
    if kind in ("CATEGORICAL", "TEXT") or (not kind and isinstance(label, str) and label):
        return label if isinstance(label, str) else value if isinstance(value, str) else None
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def user_scores(record: dict) -> dict[str, Any] | None:
    """{name: value} of the user scores about this observation (its own, its trace's), newest last
    so the newest of a name wins; None when there is none."""
    scores = record.get("scores")
    if not isinstance(scores, list):
        return None
    trace, observation = _text(record.get("traceId")), _text(record.get("id"))
    found = []
    for s in scores:
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            continue
        if str(s.get("source") or "").upper() in MODEL_SOURCES:
            continue
        if isinstance(s.get("metadata"), dict) and "golden_set_version" in s["metadata"]:
            continue  # labeler's own grades, sent back by labeler push
        on_trace, on_observation = score_target(s)
        if on_trace is not None and trace is not None and on_trace != trace:
            continue
        if on_observation is not None and on_observation != observation:
            continue  # another observation's score (the trace's list holds every one)
        if on_trace is None and on_observation is None:
            continue  # a session's or an experiment's
        value = score_value(s)
        if value is not None:
            found.append((str(s.get("timestamp") or ""), s["name"], value))
    found.sort(key=lambda f: f[0])
    return {name: value for _, name, value in found} or None


def _text(value: Any) -> str | None:
    return str(value) if value is not None and value != "" else None


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
              **signal_meta(record.get("metadata"), record.get("level"), feedback=user_scores(record))},
    )
