"""LangSmith runs, as ``client.list_runs()`` dumps them (``Run.model_dump()`` per line, or a JSON
array): a whole trace is a chain root, retriever runs (``run_type: retriever``, the documents in
``outputs.documents`` as LangChain Documents) and LLM runs. Retriever runs become log records; the
trace's root run gives the question and the final answer."""

from __future__ import annotations

from typing import Any

from .spans import ANSWER_KEYS, QUESTION_KEYS, Span, norm_id, signal_meta, text_of


def is_run(record: dict) -> bool:
    return "run_type" in record and ("inputs" in record or "outputs" in record)


def span(record: dict) -> Span:
    run_type = str(record.get("run_type") or "").lower()
    outputs = record.get("outputs")
    docs = outputs.get("documents") if isinstance(outputs, dict) else None
    if not isinstance(docs, list) or not docs:
        docs = None
    trace = record.get("trace_id")
    run_id = record.get("id")
    parent = record.get("parent_run_id")
    if parent is None and trace is not None and run_id is not None and str(trace) != str(run_id):
        parent = "(unknown)"  # a child whose parent id was not dumped: not a root
    return Span(
        trace_id=norm_id(trace), span_id=norm_id(run_id), parent_id=norm_id(parent),
        retrieval=run_type == "retriever" and docs is not None,
        question=text_of(record.get("inputs"), QUESTION_KEYS, where="inputs"),
        answer=text_of(_answer_side(outputs), ANSWER_KEYS, where="outputs"),
        start=record.get("start_time"), docs=docs,
        meta={"run_name": record.get("name"), "kind": "RETRIEVER" if run_type == "retriever" else run_type,
              "session_id": record.get("session_id"),
              **signal_meta(extra.get("metadata") if isinstance(extra := record.get("extra"), dict) else None,
                            error=record.get("error"), feedback=_user_feedback(record.get("feedback")))},
    )


def _user_feedback(items: Any) -> dict[str, Any] | None:
    """LangSmith feedback (``labeler sync`` attaches it) not made by a model, as {key: value, or
    score when there is no value}; an evaluator's feedback is not the user's, nor are the grades
    ``labeler push`` sent (their metadata carries the golden-set version)."""
    if not isinstance(items, list):
        return None
    out: dict[str, Any] = {}
    for f in items:
        if not isinstance(f, dict) or not isinstance(f.get("key"), str):
            continue
        source = f.get("feedback_source") if isinstance(f.get("feedback_source"), dict) else {}
        if str(source.get("type") or "").lower() == "model":
            continue
        if any(isinstance(m, dict) and "golden_set_version" in m for m in (f.get("extra"), source.get("metadata"))):
            continue  # labeler's own grades, sent back by labeler push
        value = f.get("value") if f.get("value") is not None else f.get("score")
        if value is not None:
            out[f["key"]] = value
    return out or None


def _answer_side(outputs: Any) -> Any:
    """A chat model's output message (``{"generations": ...}`` or an AIMessage dump) or a chain's."""
    if isinstance(outputs, dict) and isinstance(outputs.get("output"), dict):
        message = outputs["output"]
        kwargs = message.get("kwargs") if isinstance(message.get("kwargs"), dict) else message
        if isinstance(kwargs.get("content"), str):
            return kwargs["content"]
    return outputs
