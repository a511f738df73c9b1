"""Timestamps from logs, normalised to UTC ISO 8601 with microseconds (``2026-12-01T07:58:38.000000Z``),
the form the store writes everywhere, so that comparing them as text compares them as times.

Logs write times many ways: ISO 8601 with ``Z``, an offset or none (read as UTC), a space instead of
the ``T``; epoch numbers (or digit strings, as OTLP/JSON writes ``startTimeUnixNano``) in seconds,
milliseconds, microseconds or nanoseconds, told apart by their size; pandas' ``Timestamp`` in a
Parquet file arrives as ``datetime``.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from .common import FieldError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DIGITS = re.compile(r"^-?\d+(\.\d+)?$")
# already UTC with a Z: only the fraction needs padding (the common case, done without datetime)
_UTC_Z = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?Z")
# epoch values below each bound are read in that unit: 1e11 s is the year 5138, 1e14 ms the same
_UNITS = ((1e11, 1.0), (1e14, 1e-3), (1e17, 1e-6), (math.inf, 1e-9))


def _format(t: datetime) -> str:
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _from_epoch(value: float) -> str:
    scale = next(scale for bound, scale in _UNITS if abs(value) < bound)
    if scale == 1e-9 and isinstance(value, int):  # integer nanoseconds: no float rounding
        return _format(_EPOCH + timedelta(microseconds=value // 1000))
    return _format(_EPOCH + timedelta(seconds=value * scale))


def timestamp(value: Any) -> str | None:
    """``value`` as UTC ISO 8601 with microseconds, or None; raise FieldError ``timestamp`` when it
    is not a time."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, datetime):
            return _format(value)
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, int | float):
            if not math.isfinite(value):
                raise ValueError
            return _from_epoch(value)
        if isinstance(value, str):
            m = _UTC_Z.fullmatch(value)
            if m:
                return f"{m.group(1)}.{(m.group(2) or '').ljust(6, '0')}Z"
            text = value.strip()
            if _DIGITS.match(text):
                return _from_epoch(int(text) if "." not in text else float(text))
            return _format(datetime.fromisoformat(text))
        if hasattr(value, "isoformat"):  # pandas.Timestamp, numpy datetime64 via pandas
            return _format(datetime.fromisoformat(value.isoformat()))
    except (ValueError, OverflowError):
        pass
    raise FieldError("timestamp", f"cannot read {value!r} as a time (expected ISO 8601 or epoch "
                                  "seconds/ms/us/ns)")
