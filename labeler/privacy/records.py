"""Redacting validated log records: one at a time (``redact_log``), or a batch at once
(``redact_batch``, the same results), with the chunks whose text an ingest stores already
(``StoredTexts``) neither searched nor kept again."""

from __future__ import annotations

import itertools
from typing import Any

from .redactor import RecordRedaction, Redactor


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
    _chunk_columns(redactor, r, rec, stored, ("ids", "texts", "titles"))
    if rec.get("meta"):
        rec["meta"] = r.value(rec["meta"])
    if r.counts:
        rec["redactions"] = r.counts
    return rec


def _chunk_columns(redactor: Redactor, r: RecordRedaction, rec: dict[str, Any], stored: StoredTexts | None,
                   columns: tuple[str, ...]) -> None:
    """The chunk ids, texts and titles of ``rec`` (``columns`` of them) redacted, numbered by ``r``."""
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
    replacing = {"ids": r.ident, "texts": r.text, "titles": r.text}
    for column in columns:
        replace = replacing[column]
        if column == "texts" and stored is not None and not made and stored.ids.issuperset(ids):
            rec["texts"] = rec["titles"] = None
            _count_stored(r, stored, ids)
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


def _count_stored(r: RecordRedaction, stored: StoredTexts, ids: list[str]) -> None:
    """Count, for ``r``'s record, the values found in the stored texts and titles of its chunks."""
    for cid in stored.valued.intersection(ids):
        for part in ("texts", "titles"):
            for kind in stored.found.get((cid, part), (None, ()))[1]:
                r._count(kind)


def redact_batch(redactor: Redactor, recs: list[dict[str, Any]], stored: StoredTexts | None = None) -> None:
    """``redact_log`` for each of ``recs``, in order, with the same results, in place.

    Most records of a log hold no value in their ids, question, answer or retriever's name, and
    (``stored``) retrieve only chunks whose text is stored already. Such a record is recognized
    by looking its texts up among the batch's texts known to be clean (``Redactor.known_clean``:
    the batch's texts screened at once, and the batch's distinct chunk ids likewise) rather than
    searched one by one; it only loses its chunk texts and counts the values they held when
    stored. A record known clean but for chunks not stored yet has just its chunk texts and
    titles searched. Every other record (a hint of a value, meta, an id made from a text) goes
    through ``redact_log``."""
    clean = redactor.known_clean(filter(None, itertools.chain.from_iterable(
        (rec["query_id"], rec["question"], rec["answer"], rec["retriever"]) for rec in recs)))
    distinct = set(itertools.chain.from_iterable(rec["ids"] for rec in recs))
    clean_ids = redactor.known_clean(distinct, remember=True)  # the same ids come back batch after batch
    every_id = len(clean_ids) == len(distinct)
    for rec in recs:
        if rec["meta"] or rec["made_ids"] \
                or not (rec["opaque_id"] or not rec["query_id"] or rec["query_id"] in clean) \
                or not (not rec["question"] or rec["question"] in clean) \
                or not (not rec["answer"] or rec["answer"] in clean) \
                or not (not rec["retriever"] or rec["retriever"] in clean) \
                or not (every_id or clean_ids.issuperset(rec["ids"])):
            redactor.remember_clean(t for t in (rec["query_id"], rec["question"], rec["answer"]) if t in clean)
            redact_log(redactor, rec, stored)
        elif stored is not None and stored.ids.issuperset(rec["ids"]):
            rec["texts"] = rec["titles"] = None
            if stored.valued and not stored.valued.isdisjoint(rec["ids"]):
                r = redactor.record()
                _count_stored(r, stored, rec["ids"])
                if r.counts:
                    rec["redactions"] = r.counts
        elif rec["texts"] is not None or rec["titles"] is not None:
            # only the texts of chunks not stored yet may hold a value (the rest is known clean)
            r = redactor.record()
            _chunk_columns(redactor, r, rec, stored, ("texts", "titles"))
            if r.counts:
                rec["redactions"] = r.counts
