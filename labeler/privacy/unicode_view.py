"""The view of a text the detectors search when it is not plain ASCII: NFKC-normalised (fullwidth
``＠`` and digits, non-breaking and thin spaces become their ASCII selves), other scripts' decimal
digits as ASCII digits, Unicode dashes as ``-``, and the invisible characters NFKC keeps (zero-width
space, joiners, word joiner, byte-order mark, soft hyphen) left out, with an index map back to the
original text, so that a value found in the view replaces every original character it was made of.
"""

from __future__ import annotations

import re
import unicodedata

INVISIBLE = frozenset("\u00ad\u180e\u200b\u200c\u200d\u2060\ufeff")
DASHES = frozenset("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _special(text: str) -> bool:
    """Has what needs a view even in NFKC-normal text: invisible characters, dashes, digits of
    other scripts."""
    return any(c in INVISIBLE or c in DASHES or c.isdecimal() for c in set(_NON_ASCII.findall(text)))


def view(text: str) -> tuple[str, list[int], list[int]] | None:
    """``(view, starts, ends)``: the view's i-th character stands for ``text[starts[i]:ends[i]]``;
    None when the text is its own view (ASCII, the common case, costs one check)."""
    if text.isascii() or (unicodedata.is_normalized("NFKC", text) and not _special(text)):
        return None
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pos, n = 0, len(text)
    for m in _NON_ASCII.finditer(text):
        i = m.start()
        if i < pos:  # a combining mark already taken with its letter
            continue
        if i > pos:  # the ASCII run before it, in bulk (texts are mostly ASCII)
            if text[i - 1] >= "\x80" or not unicodedata.combining(text[i]):
                chars.append(text[pos:i])
                starts.extend(range(pos, i))
                ends.extend(range(pos + 1, i + 1))
            else:  # an ASCII letter followed by combining marks: normalised with them below
                chars.append(text[pos:i - 1])
                starts.extend(range(pos, i - 1))
                ends.extend(range(pos + 1, i))
                i -= 1
        ch = text[i]
        j = i + 1
        # a letter and its combining marks normalise together (e + U+0301 is one é)
        while j < n and text[j] >= "\x80" and unicodedata.combining(text[j]):
            j += 1
        pos = j
        if ch in INVISIBLE:
            continue
        if ch in DASHES:
            out = "-"
        else:
            digit = unicodedata.decimal(ch, None) if j == i + 1 else None
            out = str(digit) if digit is not None else unicodedata.normalize("NFKC", text[i:j])
        chars.append(out)
        starts.extend([i] * len(out))
        ends.extend([j] * len(out))
    chars.append(text[pos:])
    starts.extend(range(pos, n))
    ends.extend(range(pos + 1, n + 1))
    return "".join(chars), starts, ends


def spans_back(spans: list[tuple[int, int, str]], starts: list[int], ends: list[int]) -> list[tuple[int, int, str]]:
    """Spans found in the view as spans of the original text (never overlapping, even where one
    original character became two view characters that two finds share)."""
    out: list[tuple[int, int, str]] = []
    for s, e, kind in spans:
        start, end = starts[s], ends[e - 1]
        if out and start < out[-1][1]:
            start = out[-1][1]
        if end > start:
            out.append((start, end, kind))
    return out
