"""OTLP/JSON (``{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}``, what the OTLP HTTP
exporter sends and the collector's file exporter writes, one request per line or one per file):
each span becomes the console exporter's shape (``context``, ``parent_id``, ``attributes`` as an
object), which ``openinference`` reads. Attribute values are OTLP ``AnyValue`` objects; ids are hex
(the spec) or base64 (a plain protobuf JSON mapping); times are nanoseconds since the epoch."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ..common import FieldError

_INT64 = re.compile(r"-?\d{1,19}")


def is_envelope(record: dict) -> bool:
    return "resourceSpans" in record or "resource_spans" in record


def _value(v: Any) -> Any:
    """An OTLP ``AnyValue`` as a plain value."""
    if not isinstance(v, dict):
        return v
    for key in ("stringValue", "string_value", "boolValue", "bool_value", "doubleValue", "double_value",
                "bytesValue", "bytes_value"):
        if key in v:
            return v[key]
    for key in ("intValue", "int_value"):
        if key in v:
            return _int(v[key], key)
    for key in ("arrayValue", "array_value"):
        if key in v:
            return [_value(x) for x in (v[key] or {}).get("values", [])]
    for key in ("kvlistValue", "kvlist_value"):
        if key in v:
            return _attributes((v[key] or {}).get("values", []))
    return None


def _int(raw: Any, key: str) -> Any:
    """An ``intValue`` (a string in OTLP/JSON, as 64-bit integers are): ``int()`` is not given a
    string of thousands of digits (it raises past 4300) nor anything else that is not an int64."""
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and _INT64.fullmatch(raw.strip()):
        value = int(raw)
        if -(1 << 63) <= value < (1 << 63):
            return value
    shown = f"{raw[:20]}... ({len(raw)} characters)" if isinstance(raw, str) and len(raw) > 24 else repr(raw)
    raise FieldError(f"attributes.{key}", f"{shown} is not a 64-bit integer")


def _attributes(pairs: Any) -> dict[str, Any]:
    if isinstance(pairs, dict):  # already an object
        return pairs
    return {p.get("key"): _value(p.get("value")) for p in pairs or [] if isinstance(p, dict)}


def _get(d: dict, camel: str, snake: str) -> Any:
    return d.get(camel, d.get(snake))


def spans(record: dict) -> Iterator[dict[str, Any]]:
    """The spans of one OTLP/JSON request, each as a console-exporter-shaped object."""
    for resource in _get(record, "resourceSpans", "resource_spans") or []:
        for scope in _get(resource, "scopeSpans", "scope_spans") or []:
            for s in scope.get("spans") or []:
                yield {
                    "name": s.get("name"),
                    "context": {"trace_id": _get(s, "traceId", "trace_id"),
                                "span_id": _get(s, "spanId", "span_id")},
                    "parent_id": _get(s, "parentSpanId", "parent_span_id") or None,
                    "start_time": _get(s, "startTimeUnixNano", "start_time_unix_nano"),
                    "attributes": _attributes(s.get("attributes")),
                    # STATUS_CODE_ERROR (2) is an outcome signal (labeler.signals: error)
                    "status": {"code": (s.get("status") or {}).get("code")} if isinstance(s.get("status"), dict)
                    else None,
                }
