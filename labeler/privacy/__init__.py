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
from .redactor import RecordRedaction, Redactor

__all__ = ["KINDS", "Detectors", "RecordRedaction", "Redactor", "StoredTexts", "kind_name", "parse_patterns",
           "redact_log", "redact_typed", "redaction_enabled", "redactor_for", "set_redaction"]

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


class StoredTexts:
    """The chunks an ingest has the text of already (``ids``: their redacted ids), with the types
    of the values found in each one's text and title when it was redacted first. A record whose
    every chunk is among them needs its chunk texts neither searched nor kept (only the text a
    chunk was first logged with is stored); they are counted as that text's values, so the counts
    stay one per value and occurrence (``redact_log``)."""

    __slots__ = ("found", "ids", "valued")

    def __init__(self) -> None:
        self.ids: set[str] = set()
        # (chunk id, "texts" or "titles") -> (the value redacted, the types found in it)
        self.found: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}
        self.valued: set[str] = set()  # chunk ids with an entry in found

    def keep(self, texts: dict[str, tuple[str | None, str | None]]) -> None:
        """The chunks' texts and titles (redacted) that the ingest now stores: what was found in
        another text of one of them (the first text with a value need not be the first text) is
        not theirs."""
        for cid in self.valued.intersection(texts):
            for part, value in zip(("texts", "titles"), texts[cid], strict=True):
                entry = self.found.get((cid, part))
                if entry is not None and entry[0] != value:
                    del self.found[(cid, part)]
        self.ids.update(cid for cid, (text, _) in texts.items() if text is not None)

    def clear(self) -> None:
        self.ids.clear()
        self.found.clear()
        self.valued.clear()


def redact_log(redactor: Redactor, rec: dict[str, Any], stored: StoredTexts | None = None) -> dict[str, Any]:
    """A validated log record (``ingest.validate.validate_log``'s shape) with its values replaced,
    numbered across its question, answer, chunks and meta; ``rec["redactions"]`` counts them.
    ``stored``: when every chunk of the record has its text stored already, the record's texts
    and titles are left out (None) rather than searched, and counted as ``stored`` says."""
    r = redactor.record()
    if not rec.get("opaque_id"):  # a tracer's random span id is never personal data: kept, so push finds the span
        rec["query_id"] = r.ident(rec["query_id"])
    rec["question"] = r.text(rec["question"])
    rec["answer"] = r.text(rec["answer"])
    # a pseudonym, not a numbered placeholder: a retriever's name must be the same in every query
    if rec.get("retriever"):
        rec["retriever"] = r.ident(rec["retriever"])
    # the chunks repeat across queries: most are answered by the redactor's memory, looked up here
    # for a whole column at once (a call per chunk is a measurable share of a big ingest); only a
    # column with a value found, or not yet seen, is walked
    seen, find = redactor._found, redactor.find
    ids = rec["ids"]
    made = rec.get("made_ids") or ()
    for i in made:  # ids made from the raw text, which holds a value: keyed instead
        text = rec["texts"][i]
        if find(text):
            ids[i] = redactor.content_id(text)
    for column, replace in (("ids", r.ident), ("texts", r.text), ("titles", r.text)):
        if column == "texts" and stored is not None and not made and stored.ids.issuperset(ids):
            rec["texts"] = rec["titles"] = None
            for cid in stored.valued.intersection(ids):
                for part in ("texts", "titles"):
                    for kind in stored.found.get((cid, part), (None, ()))[1]:
                        r._count(kind)
            break
        values = rec[column]
        if values is None:
            continue
        founds = list(map(seen.get, values))
        if founds.count(()) == len(founds):  # nothing in any of them (the common case)
            continue
        for i, (v, found) in enumerate(zip(values, founds, strict=True)):
            if not v or found == ():
                continue
            if found is None:
                found = find(v)
            if found:
                values[i] = replace(v)
                if stored is not None and column != "ids" and (ids[i], column) not in stored.found:
                    stored.found[(ids[i], column)] = (values[i], tuple(kind for _, _, kind in found))
                    stored.valued.add(ids[i])
    if rec.get("meta"):
        rec["meta"] = r.value(rec["meta"])
    if r.counts:
        rec["redactions"] = r.counts
    return rec
