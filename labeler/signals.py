"""Outcome signals of logged questions: thumbs down, rating, feedback text, escalation, retry, error.

Log fields that are not a canonical field are kept in the query's ``meta`` at ingest; this module
reads them back normalised. A signal comes from ``--map signal.NAME=PATH`` (stored by the ingest
under ``meta["_signals"]``), else from the first alias present at the top level of the record or
inside a ``feedback``/``signals``/``metadata`` object. Normalised values:

- ``negative`` (bool): thumbs down / dislike; ``thumbs``/``vote`` of "down", -1 or 0 is negative; a
  thumbs up, like or vote under a name that means yes (``thumbs_up``, ``helpful``, or ``feedback``/
  ``user_feedback`` holding a yes/no or a number: ``UP_VOTES``) is negative when false, 0 or less.
- ``rating`` (number): as logged; ``UNHAPPY_RATING`` (2) or lower counts as unhappy (1-5 scale;
  a rating strictly between 0 and 1 is read as a share: below 0.4 is unhappy).
- ``feedback`` (text): a comment, kept as text (not unhappy by itself, unless its whole text is a
  thumbs-down label such as ``thumbs-down`` or ``👎``: ``NEGATIVE_LABELS``).
- ``escalated``, ``retried``, ``error`` (bool): true, "yes", a non-zero count or a non-empty error
  message are true.

Field names are matched ignoring case, with ``-`` and spaces read as ``_`` (``User-Feedback`` is
``user_feedback``). In a trace store's own feedback (``signals``: what people said, never a model),
any label whose whole text is a thumbs-down label (``NEGATIVE_LABELS``: ``bad``, ``negative``...) is
negative whatever its name, as a person who picked "bad" in an annotation form meant it.

A question is **unhappy** when it has negative feedback, a low rating, an escalation, a retry or an
error; it **bears a signal** when any signal is present. Only the first logged occurrence of a
question keeps its fields (later duplicates add occurrences, not meta).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import sqlite_utils

from . import db as store

SIGNALS = ("negative", "rating", "feedback", "escalated", "retried", "error")
ALIASES: dict[str, tuple[str, ...]] = {
    "negative": ("thumbs_down", "thumbsdown", "thumb_down", "negative_feedback", "disliked", "dislike", "downvote",
                 "downvoted", "thumbs", "thumb", "vote", "reaction", "thumbs_up", "thumbsup", "thumb_up", "upvote",
                 "upvoted", "liked", "helpful", "user_feedback", "feedback"),
    "rating": ("rating", "user_rating", "stars", "star_rating", "csat", "satisfaction"),
    "feedback": ("feedback_text", "user_feedback", "comment", "feedback_comment", "feedback"),
    "escalated": ("escalated", "escalation", "escalated_to_human", "handoff", "human_handoff", "handed_off"),
    "retried": ("retried", "retry", "retries", "retry_count", "regenerated", "regenerate"),
    "error": ("error", "is_error", "errored", "failed", "exception"),
}
NESTED = ("feedback", "signals", "metadata", "outcome")  # objects that may hold the fields (``signals``: a
# trace store's own feedback, {name: label or score}, which labeler sync attaches)
MAPPED_KEY = "_signals"  # where the ingest keeps --map signal.NAME=PATH values
# a feedback whose whole text is one of these (a store's feedback label) is a thumbs down
NEGATIVE_LABELS = ("thumbs-down", "thumbs_down", "thumbs down", "thumbsdown", "down", "negative", "bad", "dislike",
                   "disliked", "👎")
# names whose yes/no or number says the user was happy (Langfuse's "user-feedback" score is 1 or 0):
# false, 0 or less is a thumbs down; their text, if any, is read as feedback text instead
UP_VOTES = ("thumbs_up", "thumbsup", "thumb_up", "upvote", "upvoted", "liked", "helpful", "user_feedback", "feedback")
STORE_FEEDBACK = "signals"  # the nested object holding a trace store's own user feedback ({name: label or score})
UNHAPPY_RATING = 2.0
UNHAPPY_SHARE = 0.4


def _truthy(value: Any) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("", "false", "no", "n", "0", "none", "null", "ok"):
            return False
        return True
    if isinstance(value, list | dict):
        return bool(value)
    return None


def _negative(name: str, value: Any) -> bool | None:
    if name in UP_VOTES:
        if isinstance(value, bool):
            return not value
        if isinstance(value, int | float):
            return value <= 0
        return None
    if name in ("thumbs", "thumb", "vote", "reaction"):
        if isinstance(value, str):
            v = value.strip().lower()
            return v in ("down", "thumbs_down", "thumbsdown", "-1", "negative", "bad", "dislike", "👎")
        if isinstance(value, bool):
            return None if name == "thumbs" else not value
        if isinstance(value, int | float):
            return value < 0 or (name != "vote" and value == 0)
        return None
    return _truthy(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(" ", "_")


def _named(fields: dict) -> dict[str, Any]:
    """``fields`` by their normalised names (the first spelling wins), nested objects left out."""
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if isinstance(name, str) and not isinstance(value, dict):
            out.setdefault(_key(name), value)
    return out


def _lookup(layers: list[dict[str, Any]], signal: str) -> tuple[str | None, Any]:
    for fields in layers:
        for name in ALIASES[signal]:
            if name in fields:
                if signal == "negative" and name in UP_VOTES and isinstance(fields[name], str):
                    continue  # a text under "feedback" is feedback text, not a vote
                return name, fields[name]
    return None, None


def normalise(meta: dict | None) -> dict[str, Any]:
    """The normalised signals of one query's ``meta`` ({} when it has none); see the module doc."""
    if not isinstance(meta, dict):
        return {}
    mapped = meta.get(MAPPED_KEY) if isinstance(meta.get(MAPPED_KEY), dict) else {}
    layers = [_named(meta)] + [_named(meta[outer]) for outer in NESTED if isinstance(meta.get(outer), dict)]
    out: dict[str, Any] = {}
    for signal in SIGNALS:
        if signal in mapped:
            name, value = signal, mapped[signal]
        else:
            name, value = _lookup(layers, signal)
        if value is None:
            continue
        if signal == "negative":
            v: Any = _negative(name or signal, value)
        elif signal == "rating":
            v = _number(value)
        elif signal == "feedback":
            v = value if isinstance(value, str) and value.strip() else None
        else:
            v = _truthy(value)
        if v is not None:
            out[signal] = v
    if "negative" not in out and isinstance(out.get("feedback"), str) and \
            out["feedback"].strip().lower() in NEGATIVE_LABELS:
        out["negative"] = True
    own = meta.get(STORE_FEEDBACK)
    if not out.get("negative") and isinstance(own, dict) and any(
            isinstance(v, str) and v.strip().lower() in NEGATIVE_LABELS for v in own.values()):
        out["negative"] = True  # a person's "bad" under any name (an annotation form's label)
    return out


def unhappy(signals: dict[str, Any]) -> bool:
    """Negative feedback, a low rating, an escalation, a retry or an error."""
    rating = signals.get("rating")
    low = rating is not None and (rating < UNHAPPY_SHARE if 0 < rating < 1 else rating <= UNHAPPY_RATING)
    return bool(signals.get("negative") or low or signals.get("escalated") or signals.get("retried")
                or signals.get("error"))


def query_signals(db: sqlite_utils.Database, query_pks: Iterable[int] | None = None) -> dict[int, dict[str, Any]]:
    """{query pk: normalised signals} of the visible queries that have any (all, or ``query_pks``)."""
    sql = f"SELECT q.pk, q.meta FROM queries q WHERE q.meta IS NOT NULL AND {store.visible('q')}"
    params: list[Any] = []
    if query_pks is not None:
        sql += " AND q.pk IN (SELECT value FROM json_each(?))"
        params.append(json.dumps([int(p) for p in query_pks]))
    out = {}
    for pk, meta in db.execute(sql, params):
        found = normalise(store.loads(meta))
        if found:
            out[pk] = found
    return out


def signal_groups(db: sqlite_utils.Database, query_pks: Iterable[int] | None = None) -> dict[int, str]:
    """{query pk: "unhappy" | "other signal"} for the queries with a signal (the rest have none)."""
    return {pk: "unhappy" if unhappy(s) else "other signal" for pk, s in query_signals(db, query_pks).items()}


def signal_counts(db: sqlite_utils.Database) -> dict[str, int]:
    """How many visible queries carry each signal, and how many are unhappy."""
    counts = dict.fromkeys(("queries_with_signals", "unhappy", *SIGNALS), 0)
    for s in query_signals(db).values():
        counts["queries_with_signals"] += 1
        counts["unhappy"] += unhappy(s)
        for name in s:
            counts[name] += 1
    return counts
