"""Tool formats: the records that tracing and RAG tools write, recognised record by record and turned
into canonical log records (``mapping.canonical``'s shape), or into a reason to skip them.

Built in: ``phoenix`` (OpenInference spans: Phoenix's dataframe as JSONL/Parquet, its REST JSON,
``get_retrieved_documents()`` rows), ``otel`` (the OpenTelemetry console exporter's spans),
``otlp`` (OTLP/JSON requests), ``langsmith`` (run dumps, whole traces), ``langfuse`` (observations
of its v2 API, or whole traces with their observations and scores; an observation has an ``input``
field, which reads as a plain record's question, so a Langfuse file needs ``--format langfuse``),
and ``plain`` (a record
with a question and its chunks under any alias; LangChain Documents, LlamaIndex nodes and
``Response`` dumps, Ragas and Hugging Face datasets are plain records whose chunk shapes
validation knows). ``langchain``, ``llamaindex`` and ``ragas`` are names for ``plain``.

Detection looks at each record on its own (a file may mix span layouts, and no key layout is
remembered across records or files); ``--format NAME`` forces one reader instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ...errors import IngestError
from ..common import FieldError
from ..fastlines import Valid
from ..mapping import LOG_ALIASES, canonical, map_chunks
from ..readers import BadRecord
from . import langfuse, langsmith, openinference, otlp
from .spans import TraceJoin


@dataclass(frozen=True)
class Skip:
    """A record that is not a retrieval (a chain or LLM span...): counted, never stored."""

    reason: str


@dataclass(frozen=True)
class ToolFormat:
    name: str
    description: str
    detect: Callable[[dict], bool]


TOOLS: dict[str, ToolFormat] = {}
ALIASES = {"langchain": "plain", "llamaindex": "plain", "ragas": "plain"}


def register_tool(name: str, description: str, detect: Callable[[dict], bool]) -> ToolFormat:
    if name in TOOLS or name in ALIASES:
        raise IngestError(f"tool format {name!r} is already registered; pick another name")
    TOOLS[name] = ToolFormat(name, description, detect)
    return TOOLS[name]


register_tool("otlp", "OTLP/JSON requests (resourceSpans)", otlp.is_envelope)
register_tool("langsmith", "LangSmith run dumps (whole traces)", langsmith.is_run)
register_tool("langfuse", "Langfuse observations (its v2 observations API, or whole traces with their "
                          "scores; pass --format langfuse)",
              lambda r: langfuse.is_observation(r) or langfuse.is_page(r) or langfuse.is_trace(r))
register_tool("otel", "OpenTelemetry console exporter spans",
              lambda r: str(r.get("kind", "")).startswith("SpanKind") and openinference.is_span(r))
register_tool("phoenix", "Phoenix / OpenInference spans (dataframe, REST JSON, retrieved documents)",
              lambda r: openinference.is_document_row(r) or openinference.is_span(r) or _is_rest_page(r))
register_tool("plain", "a question and its retrieved chunks under any alias", lambda r: True)

_QUESTION_KEYS = LOG_ALIASES["question"]


def tool_names() -> list[str]:
    return [*TOOLS, *ALIASES]


def resolve(name: str | None) -> str | None:
    if name is None:
        return None
    name = ALIASES.get(name.lower(), name.lower())
    if name not in TOOLS:
        raise IngestError(f"unknown tool format {name!r}; use one of {', '.join(tool_names())}")
    return name


def _is_rest_page(record: dict) -> bool:
    """A page of Phoenix's REST span API: ``{"data": [span, ...], "next_cursor": ...}``."""
    data = record.get("data")
    return isinstance(data, list) and bool(data) and isinstance(data[0], dict) and openinference.is_span(data[0])


def detect(record: dict) -> str:
    """The tool that wrote ``record``, judged from this record alone."""
    if openinference.is_document_row(record):  # has an ``input`` column, so before plain records
        return "phoenix"
    if any(k in record for k in _QUESTION_KEYS):
        return "plain"
    for tool in TOOLS.values():
        if tool.name != "plain" and tool.detect(record):
            return tool.name
    return "plain"


class Reader:
    """Turns ``(line, raw record)`` pairs into ``(line, canonical record | Skip | BadRecord |
    FieldError)``; ``tool`` forces a reader, ``mapping`` is ``--map``."""

    def __init__(self, tool: str | None = None, mapping: dict[str, str] | None = None):
        self.tool = resolve(tool)
        self.mapping = mapping or None
        self.joins: dict[str, TraceJoin] = {}
        self.rows = openinference.DocumentRows()

    def _join(self, tool: str) -> TraceJoin:
        if tool not in self.joins:
            self.joins[tool] = TraceJoin(tool, {"langsmith": "run", "langfuse": "observation"}.get(tool, "span"))
        return self.joins[tool]

    def read(self, records: Iterator[tuple[int, Any]]) -> Iterator[tuple[int, Any, Any]]:
        """``(line, item, source)``: the source is the raw record for plain records, else the
        record made from the span (what a rejects file shows)."""
        for line, raw in records:
            if isinstance(raw, BadRecord):
                yield line, raw, raw.raw
                continue
            if type(raw) is Valid:  # a plain record validated as it was read (``fastlines``)
                yield line, raw, None
                continue
            try:
                tool = self.tool or detect(raw)
                if tool == "plain":
                    yield line, self._plain(raw), raw
                    continue
                for at, item in self._one(tool, line, raw):
                    yield at, item, item
            except FieldError as e:
                yield line, e, raw
        for at, item in self.finish_ingest():
            yield at, item, item

    def finish_ingest(self) -> Iterator[tuple[int, Any]]:
        yield from self._spans("phoenix", self.rows.flush())
        for join in self.joins.values():
            yield from self._out(join.flush())

    def _one(self, tool: str, line: int, raw: dict) -> Iterator[tuple[int, Any]]:
        if tool == "otlp":
            if not otlp.is_envelope(raw):
                raise FieldError("resourceSpans", "missing (not an OTLP/JSON request)")
            yield from self._spans("otlp", ((line, openinference.span(s)) for s in otlp.spans(raw)))
        elif tool == "langfuse":
            observations = langfuse.observations_of(raw)
            for observation in observations:
                if not langfuse.is_observation(observation):
                    raise FieldError("traceId", "missing (not a Langfuse observation)")
            yield from self._spans("langfuse", ((line, langfuse.span(o)) for o in observations))
        elif tool == "langsmith":
            if not langsmith.is_run(raw):
                raise FieldError("run_type", "missing (not a LangSmith run)")
            yield from self._spans("langsmith", [(line, langsmith.span(raw))])
        elif openinference.is_document_row(raw):
            yield from self._spans(tool, self.rows.feed(line, raw))
        elif _is_rest_page(raw):
            yield from self._spans(tool, ((line, openinference.span(s)) for s in raw["data"]))
        else:
            if not openinference.is_span(raw):
                raise FieldError("context.span_id", f"missing (not a {tool} span)")
            yield from self._spans(tool, [(line, openinference.span(raw))])

    def _spans(self, tool: str, spans: Iterator) -> Iterator[tuple[int, Any]]:
        join = self._join(tool)
        for line, span in spans:
            yield from self._out(join.feed(line, span))

    def _out(self, items: Iterator[tuple[int, dict | str]]) -> Iterator[tuple[int, Any]]:
        for line, item in items:
            if isinstance(item, str):
                yield line, Skip(item)
            else:
                if self.mapping:
                    item["retrieved"] = map_chunks(item["retrieved"], self.mapping)
                yield line, item

    def _plain(self, raw: dict) -> dict[str, Any]:
        rec = canonical(raw, self.mapping)
        ids = raw.get("retrieved_context_ids")
        if ids is not None and isinstance(rec["retrieved"], list):
            rec["retrieved"] = _with_ids(rec["retrieved"], ids)
        return rec


def _with_ids(contexts: list, ids: Any) -> list:
    """Ragas' ``retrieved_contexts`` (texts) paired with its ``retrieved_context_ids``."""
    if not isinstance(ids, list) or len(ids) != len(contexts):
        n = len(ids) if isinstance(ids, list) else type(ids).__name__
        raise FieldError("retrieved_context_ids", f"expected a list as long as the contexts "
                                                  f"({len(contexts)}), got {n}")
    return [{"id": i, "text": c} if isinstance(c, str) else c for i, c in zip(ids, contexts, strict=True)]
