"""The built-in detectors of personal data and secrets: regular expressions, one named branch per
kind of value, combined by group, each with a check that rejects look-alikes (Luhn for card
numbers, mod-97 for IBANs, the address parser for IPv6, libphonenumber and date, version and id
shapes for phone numbers), searched on the NFKC view of any text that is not plain ASCII.

Kinds (the placeholder's type): ``EMAIL``; ``PHONE`` (valid numbers by libphonenumber, see
``phones``: international ``+CC ...`` and ``00CC ...``, national forms with a trunk 0, parentheses
or the North American 3-3-4 shape, and mobile numbers grouped as their country writes them;
dates, versions, amounts and plain digit runs are left alone); ``CARD`` (13 to 19 digits,
optionally grouped by spaces or dashes, Luhn-valid: random 16-digit numbers stay); ``IBAN``
(mod-97 valid); ``IP`` (IPv4 and IPv6, private, link-local and unique-local ranges included: a
home router's 192.168.x.x or a laptop's fe80:: address points at a person as a public one does;
only loopback, 127.x.x.x and ::1, names no one and stays); ``NATIONAL_ID`` (US Social Security
numbers ``123-45-6789`` with valid area, group and serial; UK National Insurance numbers
``AB 12 34 56 C`` with valid prefixes); ``SECRET`` (OpenAI ``sk-...``, AWS access key ids
``AKIA``/``ASIA``, GitHub ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` and ``github_pat_``, Slack
``xox?-``, Google ``AIza...``, Stripe ``sk_live_``/``rk_live_`` (and ``_test_``), JWTs, PEM
private-key blocks).

Unicode disguises (a card grouped by non-breaking spaces, a fullwidth ``＠``, a zero-width joiner
inside an address) do not hide a value: such a text is searched in its view (``unicode_view``)
and every original character of a value found there is replaced.
"""

from __future__ import annotations

import bisect
import ipaddress
import re
from collections.abc import Callable
from itertools import accumulate, chain

from .phones import check_phone
from .unicode_view import spans_back, view

KINDS = ("EMAIL", "PHONE", "CARD", "IBAN", "IP", "NATIONAL_ID", "SECRET")

# (group name, kind, pattern). Order matters: at one position the first branch that matches wins,
# and a match its check rejects is kept as text (so a 16-digit number failing Luhn is no phone).
_BRANCHES: list[tuple[str, str, str]] = [
    ("pem", "SECRET", r"-----BEGIN[A-Z ]{0,30} PRIVATE KEY-----[\s\S]{0,20000}?-----END[A-Z ]{0,30} PRIVATE KEY-----"),
    ("jwt", "SECRET", r"(?<![\w-])eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{8,}"),
    ("openai", "SECRET", r"(?<![\w-])sk-(?:proj-|svcacct-|admin-|ant-)?[A-Za-z0-9_-]{20,}"),
    ("stripe", "SECRET", r"(?<![\w-])[sr]k_(?:live|test)_[0-9A-Za-z]{16,}"),
    ("aws", "SECRET", r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"),
    ("github", "SECRET", r"(?<![\w-])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
    ("slack", "SECRET", r"(?<![\w-])xox[abposre]-[A-Za-z0-9-]{10,}"),
    ("google", "SECRET", r"(?<![\w-])AIza[0-9A-Za-z_-]{35}"),
    ("email", "EMAIL", r"(?<![\w.%+-])[\w.%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}(?![A-Za-z0-9])"),
    ("iban", "IBAN", r"(?<![\w])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![a-z0-9])"),
    ("nino", "NATIONAL_ID", r"(?<![\w])[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D](?![\w])"),
    # an IPv4 tail (::ffff:10.0.0.1) is tried first, so the hex part never stops at its first number
    ("ipv6", "IP", r"(?<![\w:.])(?=[0-9A-Fa-f]{0,4}:[0-9A-Fa-f]{0,4}:)(?:[0-9A-Fa-f:]{2,29}(?<=:)\d{1,3}(?:\.\d{1,3}){3}|[0-9A-Fa-f:]{2,39})(?![\w:]|\.\d)"),
    ("ipv4", "IP", r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\w]|\.\d)"),
    ("ssn", "NATIONAL_ID", r"(?<![\w-])\d{3}-\d{2}-\d{4}(?![\w-])"),
    ("card", "CARD", r"(?<![\w.,-])\d(?:[ -]?\d){12,22}(?![\w])"),
    # a candidate only (digits in groups, a country code, an area code in parentheses): the
    # check asks libphonenumber and the shape rules of ``phones``
    ("phone", "PHONE", r"(?<![\w+.,/-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{1,12}(?:[ .-]\d{1,10}){0,5}(?![\w]|[.,/-]\d)"),
]

# Each group runs only on texts that hint at it; most texts are done after a few substring searches.
_SECRET_NAMES = ("pem", "jwt", "openai", "stripe", "aws", "github", "slack", "google")
_LETTER_NAMES = ("iban", "nino")
_NUMERIC_NAMES = ("ipv4", "ssn", "card", "phone")
SECRET_HINTS = ("sk-", "sk_", "rk_", "AKIA", "ASIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox",
                "AIza", "eyJ", "-----BEGIN")
IPV6_HINT = re.compile(r":[0-9A-Fa-f]{1,4}:")
# where an IBAN or NI number may start: two capitals, then digits (few places in most text)
LETTERS_HINT = re.compile(r"[A-Z][A-Z] ?[0-9][0-9]")
# where a number worth a look starts: a digit, then at least seven digits or separators in a row
# (shorter numbers are counts, years, ports and versions: no detector wants them)
NUMBER_HINT = re.compile(r"[0-9][0-9 .()/-]{5,}[0-9]")
NUMBER_MEMO_MAX = 100_000  # hints remembered with what was found at them; past it, afresh
_INNER_START = re.compile(r"(?<= )[0-9(]")  # where a value may start inside a hint
# a canonical UUID (a trace store's run or observation id, a vector store's chunk id): random hex,
# whose digit groups look like a phone or card number about once in 7,000 ids; never a value
_UUID = re.compile(r"(?<![0-9A-Za-z-])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
                   r"(?![0-9A-Za-z-])")
# the provider prefixes in one search: one C call instead of a generator over fifteen substrings
# (a tenth of the time on a question, which has none)
_SECRET_HINT = re.compile("|".join(map(re.escape, SECRET_HINTS)))


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _ends(text: str, sep: str = " -") -> list[int]:
    """Candidate ends of a match: the whole, then each shorter run ending before a separator."""
    ends = [len(text)]
    ends += [i for i in range(len(text) - 1, 0, -1) if text[i] in sep]
    return ends


def check_card(text: str) -> int:
    for end in _ends(text):
        digits = text[:end].replace(" ", "").replace("-", "")
        if 13 <= len(digits) <= 19 and _luhn(digits) and len(set(digits)) > 1:
            return end
    return 0


def _iban_ok(compact: str) -> bool:
    moved = compact[4:] + compact[:4]
    try:
        return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1
    except ValueError:
        return False


def check_iban(text: str) -> int:
    # the pattern may run on into following capitals or digits: the longest valid prefix wins
    for end in range(len(text), 14, -1):
        if text[end - 1] == " ":
            continue
        compact = text[:end].replace(" ", "")
        if 15 <= len(compact) <= 34 and _iban_ok(compact):
            return end
    return 0


def check_ipv4(text: str) -> int:
    # private, shared and link-local ranges are redacted too: only loopback names no one
    return 0 if text.startswith("127.") else len(text)


def check_ipv6(text: str) -> int:
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return 0
    if address.is_loopback or (address.ipv4_mapped is not None and address.ipv4_mapped.is_loopback):
        return 0
    # "::" alone and clock-like runs of small numbers are not worth a placeholder
    return len(text) if sum(c in "0123456789abcdefABCDEF" for c in text) >= 2 else 0


def check_ssn(text: str) -> int:
    area, group, serial = text.split("-")
    if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
        return 0
    return len(text)


def check_nino(text: str) -> int:
    compact = text.replace(" ", "")
    return 0 if compact[:2] in ("BG", "GB", "KN", "NK", "NT", "TN", "ZZ") else len(text)


CHECKS: dict[str, Callable[[str], int]] = {
    "card": check_card, "iban": check_iban, "ipv4": check_ipv4, "ipv6": check_ipv6, "ssn": check_ssn,
    "nino": check_nino,
    "phone": check_phone,
}


class Detectors:
    """The built-in detectors and the user's own (``{KIND: regex}``). Where two finds overlap,
    the user's pattern wins, then secrets, emails, IBANs and national ids, IPs, SSNs, card and
    phone numbers (the order of ``_BRANCHES``).

    Speed: a text is searched by group, each only when a cheap hint is present (``@`` for
    emails, a provider prefix for secrets, colons for IPv6); IBANs and NI numbers are tried only
    where two capitals meet two digits, and the numeric detectors only where a digit starts a run
    of at least seven digits and separators (or the ``+`` or ``(`` before it), anchored there.
    """

    def __init__(self, patterns: dict[str, str] | None = None):
        from ..errors import LabelerError

        self.user: list[tuple[re.Pattern, str]] = []
        for kind, pattern in (patterns or {}).items():
            try:
                self.user.append((re.compile(pattern), kind_name(kind)))
            except re.error as e:
                raise LabelerError(f"redaction pattern {kind}: not a valid regular expression ({e}); "
                                   "fix it in the setting redact_patterns") from None
        by_name = {name: (kind, pattern) for name, kind, pattern in _BRANCHES}
        self.kinds = {name: kind for name, kind, _ in _BRANCHES}
        self.rank = {name: i + 1 for i, (name, _, _) in enumerate(_BRANCHES)}

        def combined(names: tuple[str, ...]) -> re.Pattern:
            return re.compile("|".join(f"(?P<{n}>{by_name[n][1]})" for n in names))

        self.secrets = combined(_SECRET_NAMES)
        self.email = combined(("email",))
        self.ipv6 = combined(("ipv6",))
        self.letters = combined(_LETTER_NAMES)
        self.numeric = combined(_NUMERIC_NAMES)
        self.phone = combined(("phone",))
        self.number_memo: dict[str, tuple] = {}  # see _anchored

    def _scan(self, regex: re.Pattern, text: str, out: list) -> None:
        """Every match of ``regex`` over the whole text (a rejected match is skipped whole)."""
        pos, n = 0, len(text)
        while pos < n:
            m = regex.search(text, pos)
            if m is None:
                return
            end = self._checked(m, text)
            if end > m.start():
                out.append((self.rank[m.lastgroup], m.start(), end, self.kinds[m.lastgroup]))
                pos = end
            else:
                pos = max(m.end(), m.start() + 1)

    @staticmethod
    def _checked(m: re.Match, text: str) -> int:
        check = CHECKS.get(m.lastgroup)  # type: ignore[arg-type]
        start = m.start()
        return m.end() if check is None else start + check(text[start:m.end()])

    def _anchored(self, regex: re.Pattern, hint: re.Pattern, text: str, out: list, before: bool,
                  fallback: re.Pattern | None = None, memo: dict[str, tuple] | None = None) -> None:
        """``regex`` tried only where ``hint`` matches: at its start (and, with ``before``, one
        character earlier when that is a ``+`` or ``(``, the start of a phone number), then after
        each space inside it (``_at_hint``).

        ``memo``: what was found at each hint, by the hint and the two characters either side of
        it, for a hint whose matches cannot reach past it (``NUMBER_HINT``: the numeric patterns
        match only the characters it runs over, a leading ``+`` aside, and end on a digit). What
        they find there depends on nothing else: their look-behinds read one character before a
        start (two with the ``+`` or ``(`` before the hint), their look-aheads two after an end,
        and a match before the hint ends before it. Dates, versions, amounts and ticket numbers
        come back across the chunks of a log, each searched once."""
        pos, n = 0, len(text)
        for h in hint.finditer(text):
            i, stop = h.start(), h.end()
            if stop <= pos:
                continue
            if memo is None or i < 2 or stop + 2 > n:
                pos = self._at_hint(regex, text, i, stop, pos, out, before, fallback)
                continue
            key = text[i - 2:stop + 2]
            got = memo.get(key)
            if got is None:
                mark = len(out)
                pos = self._at_hint(regex, text, i, stop, pos, out, before, fallback)
                if len(memo) >= NUMBER_MEMO_MAX:
                    memo.clear()
                memo[key] = tuple((rank, s - i, e - i, kind) for rank, s, e, kind in out[mark:])
            elif got:
                out.extend((rank, s + i, e + i, kind) for rank, s, e, kind in got)
                pos = got[-1][2] + i

    def _at_hint(self, regex: re.Pattern, text: str, i: int, stop: int, pos: int, out: list, before: bool,
                 fallback: re.Pattern | None) -> int:
        """The values of the hint ``text[i:stop]`` (``_anchored``); returns where the last ends.
        A rejected match is no value for any later start inside it (no part of a long number is
        a phone), except an IP address or a number in parentheses after a space: a value may
        follow a number that is none (the seconds of ``10:32:07 192.168.1.20``). Where another
        branch rejects, ``fallback`` is tried at the same start (``0044 20 7946 0958`` fails Luhn
        as a card and is a phone number)."""
        head = (i - 1, i) if before and i and text[i - 1] in "+(" else (i,)
        # the starts inside the hint are looked for only once the head leaves some of it
        starts = head if text.find(" ", i + 1, stop) < 0 else chain(
            head, (m.start() for m in _INNER_START.finditer(text, i + 1, stop) if m.start() >= pos))
        rejected = 0  # the end of the last rejected match
        for start in starts:
            if start < pos:
                continue
            m = regex.match(text, start)
            if m is None:
                continue
            name = m.lastgroup
            if start < rejected and self.kinds[name] != "IP" and text[start] != "(":  # type: ignore[index]
                continue
            end = self._checked(m, text)
            if end <= start and fallback is not None and name not in fallback.groupindex:
                m2 = fallback.match(text, start)
                if m2 is not None and (end2 := self._checked(m2, text)) > start:
                    m, name, end = m2, m2.lastgroup, end2
            if end > start:
                out.append((self.rank[name], start, end, self.kinds[name]))  # type: ignore[index]
                pos = end
            else:
                rejected = max(rejected, m.end())
        return pos

    def clean(self, texts: list[str]) -> list[bool]:
        """For each of ``texts`` (plain ASCII), whether it certainly holds no value: ``_find``
        looks for one only where a hint is (a secret's prefix, ``@``, ``::`` or an IPv6 group,
        two capitals and digits, a run of digits), so a text in which no hint occurs has none.
        Each hint is searched once over all the texts joined by NUL, which no hint matches, so no
        match spans two texts: a few scans in C instead of a call per text (most questions and
        ids of a log hold no hint). A user's own pattern may match anything: then none is."""
        if self.user:
            return [False] * len(texts)
        joined = "\x00".join(texts)
        ends = list(accumulate(len(t) + 1 for t in texts))  # one past each text's NUL
        clean = [True] * len(texts)

        def hinted(at: int) -> None:
            clean[bisect.bisect_right(ends, at)] = False

        for hint in (_SECRET_HINT, NUMBER_HINT, LETTERS_HINT, IPV6_HINT):
            for m in hint.finditer(joined):
                hinted(m.start())
        for mark in ("@", "::"):
            at = joined.find(mark)
            while at >= 0:
                hinted(at)
                at = joined.find(mark, at + 1)
        return clean

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """The ``(start, end, kind)`` of every value found in ``text``, in order, not overlapping.
        A text that is not plain ASCII is searched in its NFKC view, the spans mapped back."""
        seen = view(text)
        if seen is None:
            return self._find(text)
        normal, starts, ends = seen
        return spans_back(self._find(normal), starts, ends)

    def _find(self, text: str) -> list[tuple[int, int, str]]:
        found: list[tuple[int, int, int, str]] = []
        for regex, kind in self.user:
            for m in regex.finditer(text):
                if m.end() > m.start():
                    found.append((0, m.start(), m.end(), kind))
        if _SECRET_HINT.search(text) is not None:
            self._scan(self.secrets, text, found)
        if "@" in text:
            self._scan(self.email, text, found)
        if ":" in text and ("::" in text or IPV6_HINT.search(text)):
            self._scan(self.ipv6, text, found)
        if text.lower() != text:  # no upper-case letter, no IBAN or NI number (cheaper than the hint)
            self._anchored(self.letters, LETTERS_HINT, text, found, before=False)
        self._anchored(self.numeric, NUMBER_HINT, text, found, before=True, fallback=self.phone,
                       memo=self.number_memo)
        if found and "-" in text:
            found = _outside_uuids(text, found)
        if len(found) < 2:
            return [(s, e, k) for _, s, e, k in found]
        kept: list[tuple[int, int, str]] = []
        for _, s, e, k in sorted(found):  # by rank: the first detector in the order wins an overlap
            if all(e <= a or s >= b for a, b, _ in kept):
                kept.append((s, e, k))
        kept.sort()
        return kept


def _outside_uuids(text: str, found: list[tuple[int, int, int, str]]) -> list[tuple[int, int, int, str]]:
    """``found`` without the built-in detectors' matches that lie inside a UUID (a user's own
    pattern, rank 0, is kept wherever it matched)."""
    uuids = [m.span() for m in _UUID.finditer(text)]
    if not uuids:
        return found
    return [f for f in found if f[0] == 0 or not any(a <= f[1] and f[2] <= b for a, b in uuids)]


def kind_name(name: str) -> str:
    """A user pattern's name as a placeholder type: upper case letters, digits and underscores."""
    return re.sub(r"[^A-Z0-9_]", "_", name.strip().upper()) or "CUSTOM"
