"""Replacing what the detectors find: typed placeholders numbered per query in text, stable
pseudonyms in ids, counts per type, and an untyped scrub for error messages."""

from __future__ import annotations

import hashlib
import hmac
import itertools
from collections.abc import Callable, Iterable
from typing import Any

from .detectors import Detectors

CACHE_CHARS = 32_000_000  # texts remembered with what was found in them (chunk texts repeat a lot)
CLEAN_IDS_MAX = 500_000  # texts remembered as clean by known_clean (chunk ids); past it they are screened again


class Redactor:
    """Finds personal data and secrets in text and replaces them. One per ingest; ``record()``
    starts the numbering of one query (or corpus record).

    In text a value becomes ``[TYPE_n]``, ``n`` counting the distinct values of that type in the
    record (the same value twice in a query's question, answer, chunks and meta gets the same
    number). In ids (query ids, chunk ids) a value becomes ``[TYPE:hhhhhhhhhhhh]``, 12 hex digits
    of an HMAC-SHA256 of the value under the database's own key: the same value gives the same id
    in every file and ingest of the database (so chunk ids of logs and corpus still match and
    re-ingests deduplicate), and without the key the id cannot be tested against a guess.
    ``extra``: an optional second detector (the Presidio adapter), ``text -> [(start, end, kind)]``.
    """

    def __init__(self, patterns: dict[str, str] | None = None, *, key: bytes = b"", extra: Any = None):
        self.detectors = Detectors(patterns)
        # nothing a built-in detector finds is shorter (the IPv6 "1::2"); a user pattern may be
        self.min_len = 1 if patterns or extra is not None else 4
        self.key = key
        self.extra = extra
        self.counts: dict[str, int] = {}
        self._found: dict[str, tuple] = {}
        self._chars = 0
        self._clean: set[str] = set()  # texts known_clean(remember=True) found clean

    # --- finding ------------------------------------------------------------------------
    def find(self, text: str) -> tuple:
        if len(text) < self.min_len:
            return ()
        found = self._found.get(text)
        if found is None:
            spans = self.detectors.find(text)
            if self.extra is not None:
                spans = _merge(spans, self.extra(text))
            found = tuple(spans)
            self._keep(text, found)
        return found

    def _keep(self, text: str, found: tuple) -> None:
        """Remember what was found in ``text``; past ``CACHE_CHARS`` characters, start afresh."""
        if self._chars > CACHE_CHARS:
            self._found.clear()
            self._chars = 0
        self._found[text] = found
        self._chars += len(text)

    def known_clean(self, texts: Iterable[str], *, remember: bool = False) -> set[str]:
        """Which of ``texts`` certainly hold no value, found at once: those too short for any
        detector, and the plain ASCII ones in which no detector's hint occurs (``Detectors.clean``:
        a few scans in C over all of them joined, instead of a search per text). The others
        (not plain ASCII, or with a hint; any text of some length when a second detector is set)
        are for ``find`` to answer. ``remember``: texts that come back batch after batch (chunk
        ids): those found clean are kept, and not screened again."""
        distinct = set(texts)
        known = distinct.intersection(self._clean) if remember and self._clean else set()
        if known:
            distinct -= known
        least = self.min_len
        clean = {t for t in distinct if len(t) < least}
        if self.extra is None:
            todo = [t for t in distinct if len(t) >= least and t.isascii()]
            clean.update(itertools.compress(todo, self.detectors.clean(todo)))
        if remember:
            if len(self._clean) > CLEAN_IDS_MAX:
                self._clean.clear()
            self._clean |= clean
        return clean | known if known else clean

    def remember_clean(self, texts: Iterable[str]) -> None:
        """Remember ``texts`` (known to hold no value: ``known_clean``) as searched, so that
        ``find`` answers them from memory."""
        for text in texts:
            if text not in self._found:
                self._keep(text, ())

    def record(self) -> RecordRedaction:
        return RecordRedaction(self)

    def content_id(self, text: str) -> str:
        """The id of a chunk that came without one whose text holds a value: ``sha1:`` and 16 hex
        digits of an HMAC-SHA1 of the raw text under the database's key. A plain hash of the text
        would let anyone holding the redacted text try every candidate value until the id
        matches; keyed, the same text still gets the same id in every file and ingest of the
        database (logs and corpus agree, re-ingests deduplicate)."""
        return "sha1:" + hmac.new(self.key, text.encode(), hashlib.sha1).hexdigest()[:16]

    # --- for messages -------------------------------------------------------------------
    def scrub(self, text: str) -> str:
        """``text`` with every value as ``[TYPE]``: for error messages and rejected records."""
        found = self.find(text)
        return _replace(text, found, lambda kind, value: f"[{kind}]") if found else text

    def scrub_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {self.scrub(k) if isinstance(k, str) else k: self.scrub_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub_value(v) for v in value]
        found = self.number(value)
        return value if found is None else self.scrub(found)

    def number(self, value: Any) -> str | None:
        """The text of a number in which a value is found, or None. A phone number read as a
        number lost its ``+``: the digits are also tried with it."""
        digits = number_text(value)
        if digits is not None:
            for candidate in (digits, "+" + digits):
                if self.find(candidate):
                    return candidate
        return None


def number_text(value: Any) -> str | None:
    """The digits of a number that may be a phone or card number stored as a number (a CSV or
    Parquet column read as int, or as float by pandas: ``14155550132.0``, ``4.111111111111111e15``),
    or None for numbers too small or fractional to be one."""
    if type(value) is int:
        return str(value) if abs(value) >= 10**6 else None
    if type(value) is float and value.is_integer() and 10**6 <= abs(value) < 1e19:
        return str(int(value))
    return None


class RecordRedaction:
    """The numbering of one record: ``text``, ``ident`` and ``value`` replace what they find."""

    __slots__ = ("counts", "numbers", "redactor")

    def __init__(self, redactor: Redactor):
        self.redactor = redactor
        self.numbers: dict[tuple[str, str], int] = {}
        self.counts: dict[str, int] = {}

    def _count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        totals = self.redactor.counts
        totals[kind] = totals.get(kind, 0) + 1

    def text(self, text: str | None) -> str | None:
        if not text:
            return text
        found = self.redactor.find(text)
        if not found:
            return text
        numbers = self.numbers

        def numbered(kind: str, value: str) -> str:
            n = numbers.get((kind, value))
            if n is None:
                n = numbers[(kind, value)] = sum(1 for k, _ in numbers if k == kind) + 1
            self._count(kind)
            return f"[{kind}_{n}]"

        return _replace(text, found, numbered)

    def ident(self, text: str | None) -> str | None:
        if not text:
            return text
        found = self.redactor.find(text)
        if not found:
            return text

        def pseudonym(kind: str, value: str) -> str:
            self._count(kind)
            return f"[{kind}:{hmac.new(self.redactor.key, value.encode(), hashlib.sha256).hexdigest()[:12]}]"

        return _replace(text, found, pseudonym)

    def value(self, value: Any) -> Any:
        """Meta: strings, the strings inside lists and objects (keys too), and numbers that may
        be a card or phone number a CSV or Parquet column gave as a number (``number_text``)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        found = self.redactor.number(value)
        return value if found is None else self.text(found)


def _merge(spans: list[tuple[int, int, str]], more: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The built-in spans plus the extra detector's that overlap none of them, in order."""
    out = list(spans)
    for s in sorted(more):
        if all(s[1] <= a or s[0] >= b for a, b, _ in out):
            out.append(s)
    out.sort()
    return out


def _replace(text: str, found: list[tuple[int, int, str]], placeholder: Callable[[str, str], str]) -> str:
    """``text`` with each found span (start, end, type), in order, replaced by
    ``placeholder(type, value)``."""
    out, pos = [], 0
    for start, end, kind in found:
        out.append(text[pos:start])
        out.append(placeholder(kind, text[start:end]))
        pos = end
    out.append(text[pos:])
    return "".join(out)
