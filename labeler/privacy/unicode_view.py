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
# what needs a view even in NFKC-normal text: invisible characters, dashes, non-ASCII digits
_SPECIAL = re.compile("[" + "".join(sorted(INVISIBLE | DASHES)) + r"]|(?![0-9])\d")


def view(text: str) -> tuple[str, list[int], list[int]] | None:
    """``(view, starts, ends)``: the view's i-th character stands for ``text[starts[i]:ends[i]]``;
    None when the text is its own view (ASCII, the common case, costs one check)."""
    if text.isascii() or (unicodedata.is_normalized("NFKC", text) and _SPECIAL.search(text) is None):
        return None
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        j = i + 1
        # a letter and its combining marks normalise together (e + U+0301 is one é)
        while j < n and text[j] >= "\x80" and unicodedata.combining(text[j]):
            j += 1
        if j == i + 1 and ch < "\x80":
            out = ch
        elif ch in INVISIBLE:
            i = j
            continue
        elif ch in DASHES:
            out = "-"
        else:
            digit = unicodedata.decimal(ch, None) if j == i + 1 else None
            out = str(digit) if digit is not None else unicodedata.normalize("NFKC", text[i:j])
        for c in out:
            chars.append(c)
            starts.append(i)
            ends.append(j)
        i = j
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
