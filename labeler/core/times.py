"""Times as labeler stores them: anything a caller may pass (``When``) becomes an aware UTC datetime
(``parse_time``) and is stored as UTC ISO 8601 text with microseconds and ``Z`` (``stamp``)."""

from __future__ import annotations

from datetime import UTC, datetime

from ..errors import LabelError

When = datetime | str | None


def parse_time(value: When) -> datetime:
    """``None`` -> now; an ISO 8601 string or a datetime (naive means UTC) -> an aware datetime."""
    if value is None:
        return datetime.now(UTC)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise LabelError(f"time {value!r} is not ISO 8601; use e.g. 2026-01-31T12:00:00Z") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def stamp(value: When) -> str:
    """The stored form of a time: UTC ISO 8601 with microseconds and ``Z`` (sorts as text)."""
    return parse_time(value).isoformat(timespec="microseconds").replace("+00:00", "Z")
