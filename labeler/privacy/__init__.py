"""PII and secret redaction, applied to every stored field before anything is stored.

Ingest (``labeler.ingest_logs`` / ``ingest_corpus``, the CLI and the Data page) redacts by default:
the question, answer, chunk texts and titles, every string and number in meta, the query and chunk
ids and the retriever's name; a chunk id made from a text that holds a value is keyed with the
database's secret (``Redactor.content_id``). The other writers of text redact the same way
while the setting is on: ``labeler import golden``, what annotators and leads type
(``redact_typed``), and the LLM cache and ledger (``llm.cache``). ``redact=False`` (``--no-redact``, or the setting ``redact`` off) keeps the values; each ingest
records which it did and how many values of each type it replaced (``ingests.redaction``), never
the values. Error messages and rejected records are scrubbed the same way (``[EMAIL]``), so a raw
value reaches no log line, stderr or rejects file either.

Detectors: ``detectors`` (built in, regular expressions with checks), the setting
``redact_patterns`` (``{"TYPE": "regex"}``, the user's own), and Presidio's analyzer when it is
installed with a language model (``presidio``; optional, never required).
"""

from __future__ import annotations

import secrets
from typing import Any

import sqlite_utils

from .detectors import KINDS, Detectors, kind_name
from .records import StoredTexts, redact_batch, redact_log
from .redactor import RecordRedaction, Redactor

__all__ = ["KINDS", "Detectors", "RecordRedaction", "Redactor", "StoredTexts", "kind_name", "parse_patterns",
           "redact_batch", "redact_log", "redact_typed", "redaction_enabled", "redactor_for", "set_redaction"]

KEY_SETTING = "redact_key"  # the database's own key of the pseudonyms in ids (made on first use)


def redaction_enabled(db: sqlite_utils.Database) -> bool:
    """The project setting ``redact`` (on unless a lead turned it off)."""
    from .. import db as store

    value = store.get_setting(db, "redact")
    return True if value is None else bool(value)


def _key(db: sqlite_utils.Database) -> bytes:
    from .. import db as store

    key = store.get_setting(db, KEY_SETTING)
    if not key:
        with store.transaction(db):
            db.execute("INSERT OR IGNORE INTO settings (key, value) VALUES (?, ?)",
                       [KEY_SETTING, store.dumps(secrets.token_hex(32))])
        key = store.get_setting(db, KEY_SETTING)
    return bytes.fromhex(key)


def redactor_for(db: sqlite_utils.Database, redact: bool | None = None,
                 patterns: dict[str, str] | None = None) -> Redactor | None:
    """The redactor an ingest into ``db`` uses, or None when redaction is off (``redact``: the
    caller's choice; None: the setting). User patterns: the setting ``redact_patterns``, then
    ``patterns`` (``{"TYPE": "regex"}``, e.g. from ``--redact-pattern``)."""
    from .. import db as store

    if redact is None:
        redact = redaction_enabled(db)
    if not redact:
        return None
    mine = {**(store.get_setting(db, "redact_patterns") or {}), **(patterns or {})}
    from .presidio import analyzer

    return Redactor(mine, key=_key(db), extra=analyzer())


def redact_typed(db: sqlite_utils.Database, values: dict[str, Any]) -> dict[str, Any]:
    """What people type into ``db`` (an annotator's expected answer, notes and reasons, a lead's
    notes and question edits) with its values replaced, numbered across the fields of one write as
    in an ingested record; as given when redaction is off. Non-text values pass unchanged."""
    redactor = redactor_for(db)
    if redactor is None:
        return values
    r = redactor.record()
    return {name: r.text(v) if isinstance(v, str) else v for name, v in values.items()}


def parse_patterns(lines: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``TYPE=regex`` lines (blank ones ignored) as ``{"TYPE": "regex"}``, each checked."""
    from ..errors import LabelerError

    out: dict[str, str] = {}
    for line in lines:
        if not line.strip():
            continue
        name, sep, pattern = line.partition("=")
        if not sep or not name.strip() or not pattern.strip():
            raise LabelerError(f"redaction pattern {line.strip()!r}: write TYPE=REGEX, e.g. CUSTOMER_ID=CUST-\\d{{6}}")
        out[kind_name(name)] = pattern.strip()
    Detectors(out)  # raises naming a pattern that does not compile
    return out


def set_redaction(db: sqlite_utils.Database, *, enabled: bool | None = None, patterns: dict[str, str] | None = None,
                  by: str | None = None) -> None:
    """Turn redaction at ingest on or off and set the user's patterns; leads only (``by``, checked
    where the setting is written: ``accounts.settings.set_setting``)."""
    from .. import db as store
    from ..accounts.settings import set_setting

    if patterns is not None:
        patterns = {kind_name(k): v for k, v in patterns.items()}
        Detectors(patterns)
        if patterns != (store.get_setting(db, "redact_patterns") or {}):
            set_setting(db, "redact_patterns", patterns, by=by)
    if enabled is not None and enabled != redaction_enabled(db):
        set_setting(db, "redact", bool(enabled), by=by)
