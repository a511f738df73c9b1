"""The routing rules (setting ``routing``; ``labeler route set``, the Settings page): what they are,
how a value is checked (one line naming a bad value and the fix) and how they are stored. What
they decide, and why the estimates stay unbiased, is ``labels.routing``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlite_utils

from .. import db as store
from ..accounts.settings import set_setting
from ..errors import LabelError
from .strata import parse_topic_values

SETTING = "routing"
AFTER_CAP_FACTOR = 0.1  # the default rate after the cap: a tenth of the rate


@dataclass(frozen=True)
class Rules:
    """The routing rules; what each decides: ``labels.routing``."""

    rate: float = 1.0
    always_signals: bool = True
    daily_cap: int | None = None
    rate_after_cap: float | None = None  # None: AFTER_CAP_FACTOR * rate
    quotas: dict[int, int] = field(default_factory=dict)
    new_topics: bool = False
    seed: int = 0

    @property
    def after_cap(self) -> float:
        return self.rate * AFTER_CAP_FACTOR if self.rate_after_cap is None else self.rate_after_cap

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["quotas"] = {str(t): n for t, n in sorted(self.quotas.items())}
        out["after_cap"] = self.after_cap if self.daily_cap is not None else None
        return out

    def describe(self) -> str:
        """One line: how the rules draw the labeled set."""
        parts = ["every query with a negative signal"] if self.always_signals else []
        if self.new_topics:
            parts.append("every query of a new topic")
        if self.quotas:
            parts.append("per day the first " + ", ".join(f"{n} of topic {t}" for t, n in sorted(self.quotas.items())))
        rest = f"{self.rate:g} of the rest" if self.rate > 0 else \
            "none of the rest (no all-traffic estimate can speak for it)"
        if self.daily_cap is not None:
            rest += f" (after {self.daily_cap} a day: {self.after_cap:g})"
        parts.append(rest)
        return "routed live queries: " + "; ".join(parts) + f" (seed {self.seed})"


def _number(name: str, value: Any, *, low: float, high: float, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise LabelError(f"routing {name} {value!r} must be a number from {low:g} to {high:g} (e.g. {example})")
    return float(value)


def _whole(name: str, value: Any, *, low: int, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise LabelError(f"routing {name} {value!r} must be a whole number >= {low} (e.g. {example})")
    return int(value)


def check_rules(values: Mapping[str, Any]) -> Rules:
    """Rules from stored or given ``values``; a LabelError of one line names a bad value and the fix."""
    unknown = set(values) - {"rate", "always_signals", "daily_cap", "rate_after_cap", "quotas", "new_topics", "seed"}
    if unknown:
        raise LabelError(f"unknown routing rule(s) {', '.join(sorted(unknown))}; use rate, always_signals, "
                         "daily_cap, rate_after_cap, quotas, new_topics, seed")
    rate = _number("rate", values.get("rate", 1.0), low=0.0, high=1.0, example="0.05")
    cap = values.get("daily_cap")
    cap = None if cap is None else _whole("daily cap", cap, low=1, example="200")
    after = values.get("rate_after_cap")
    after = None if after is None else _number("rate after the cap", after, low=0.0, high=rate, example="0.005")
    if cap is not None and rate > 0 and (after if after is not None else rate * AFTER_CAP_FACTOR) <= 0:
        raise LabelError("routing rate after the cap must be above 0: a query the rules can never route leaves "
                         "the estimates biased; give e.g. --rate-after-cap 0.001")
    quotas: dict[int, int] = {}
    for topic, n in (values.get("quotas") or {}).items():
        try:
            t = int(topic)
        except (TypeError, ValueError):
            raise LabelError(f"routing quota topic {topic!r} is not a topic id; see `labeler topics show`") from None
        quotas[t] = _whole(f"quota of topic {t}", n, low=1, example="20")
    for flag in ("always_signals", "new_topics"):
        if not isinstance(values.get(flag, flag == "always_signals"), bool):
            raise LabelError(f"routing {flag} {values[flag]!r} must be true or false")
    seed = _whole("seed", values.get("seed", 0), low=0, example="7")
    return Rules(rate, values.get("always_signals", True), cap, after, quotas, values.get("new_topics", False), seed)


def parse_quotas(items: Iterable[str]) -> dict[int, int]:
    """``["3=20", "5=10"]`` (TOPIC=N) as {3: 20, 5: 10}; a LabelError names a bad item."""
    return parse_topic_values(items, int, "quota", "TOPIC=N", "3=20")


def get_rules(db: sqlite_utils.Database) -> Rules | None:
    """The routing rules, or None when none are set (every live query is queued)."""
    value = store.get_setting(db, SETTING)
    return None if not value else check_rules(value)


def set_rules(db: sqlite_utils.Database, *, by: str | None = None, **changes: Any) -> Rules:
    """Change the routing rules (leads only, ``by``): the given rules change, the others keep their
    value (the defaults on the first call); ``daily_cap=0`` removes the cap. Decisions already made
    stay. Returns the new rules."""
    current = get_rules(db)
    values = {**(current.to_dict() if current else {}), **{k: v for k, v in changes.items() if v is not None}}
    if changes.get("daily_cap") == 0:
        values["daily_cap"] = None
    return replace_rules(db, values, by=by)


def replace_rules(db: sqlite_utils.Database, values: Mapping[str, Any], *, by: str | None = None) -> Rules:
    """Set the routing rules to ``values`` (leads only; rules not given take their defaults)."""
    values = {k: v for k, v in values.items() if k != "after_cap"}
    rules = check_rules(values)
    stored = rules.to_dict()
    stored.pop("after_cap")
    set_setting(db, SETTING, stored, by=by)
    return rules


def clear_rules(db: sqlite_utils.Database, *, by: str | None = None) -> None:
    """Stop routing (leads only): live queries are queued again; decisions already made stay."""
    set_setting(db, SETTING, None, by=by)
