"""Telling phone numbers from other numbers: a candidate the phone pattern found (digits in groups,
perhaps a ``+`` country code or an area code in parentheses) is a phone number when Google's
libphonenumber (the ``phonenumbers`` package) says it is a valid number, and the project's own
shape rules say it is written as people write phone numbers rather than as a date, a version, an
amount or an id.

Which forms count (measured on the planted set, tests/bench/bench_redaction.py):

- international: ``+CC ...`` or ``00CC ...``, valid for its country code (libphonenumber's
  ``Leniency.VALID``: whatever the grouping);
- national with a trunk prefix or an area code in parentheses (``020 7946 0958``, ``030 1234567``,
  ``(415) 555-0132``, ``(11) 91234-5678``), or in the North American 3-3-4 shape, valid in one of
  ``REGIONS``;
- national without a trunk prefix (``138 0013 8000``, ``98765 43210``) only when valid as a mobile
  number of one of ``NO_TRUNK_REGIONS`` and grouped exactly as that country writes it (``EXACT_GROUPING``):
  these are the forms that amounts, ZIP codes and order numbers share, where a looser rule
  (``Leniency.POSSIBLE`` or ``VALID``) took dates, versions, ZIP+4 codes and order numbers.

Left alone whatever libphonenumber says: dates, dotted versions, a bare run of digits (an id or an
order number), and numbers that run on into a letter or a dash.
"""

from __future__ import annotations

import re

import phonenumbers
from phonenumbers import NumberParseException, PhoneNumberFormat, PhoneNumberType

# the regions national forms are tried in (a number is valid in few of them; order is speed only)
REGIONS = ("US", "GB", "DE", "FR", "IN", "IT", "ES", "NL", "BR", "AU", "JP", "CN", "MX")
# where mobile numbers are commonly written without a trunk prefix
NO_TRUNK_REGIONS = ("IN", "CN", "ES", "IT", "MX", "BR")
_MOBILE = (PhoneNumberType.MOBILE, PhoneNumberType.FIXED_LINE_OR_MOBILE)

_DATE = re.compile(r"\d{4}[.-]\d{1,2}[.-]\d{1,2}|\d{1,2}[.-]\d{1,2}[.-]\d{2,4}")
_NANP = re.compile(r"(?:\+?1[ .-]?)?(?:\(\d{3}\)|\d{3})[ .-]?\d{3}[ .-]\d{4}")
# 1 000 000, 12 345 678: thousands grouped as amounts are written
_AMOUNT = re.compile(r"\d{1,3}(?:[ .]\d{3})+")
_GROUPS = re.compile(r"\d+")
_NON_DIGITS = re.compile(r"\D+")


def _valid(text: str, region: str | None) -> phonenumbers.PhoneNumber | None:
    try:
        number = phonenumbers.parse(text, region)
    except NumberParseException:
        return None
    return number if phonenumbers.is_valid_number(number) else None


def _exact_grouping(text: str) -> bool:
    """A national number without a trunk prefix: a valid mobile number of a region in
    ``NO_TRUNK_REGIONS``, its digit groups exactly those of the region's national format."""
    groups = _GROUPS.findall(text)
    if len(groups) > 4 or min(map(len, groups)) < 2:  # a row of a table, not a number
        return False
    for region in NO_TRUNK_REGIONS:
        number = _valid(text, region)
        if number is None or phonenumbers.number_type(number) not in _MOBILE:
            continue
        written = _GROUPS.findall(phonenumbers.format_number(number, PhoneNumberFormat.NATIONAL))
        if written and written[0].startswith("0") and not groups[0].startswith("0"):
            written[0] = written[0][1:]
        if [g for g in written if g] == groups:
            return True
    return False


def is_phone(text: str, digits: int) -> bool:
    """``text`` (a whole candidate of ``digits`` digits, no trailing separator) is a phone
    number as written."""
    if not 7 <= digits <= 15 + 2 * text.startswith("00"):
        return False
    if text[0] == "+" or text.startswith("00"):
        return digits >= 8 and _valid(text, "GB" if text[0] == "0" else None) is not None
    if _DATE.fullmatch(text):
        return False
    if digits == len(text):  # a bare run of digits is an id or an order number
        return False
    if "." in text and (" " in text or "-" in text):
        return False  # the seconds of a time and an address (07 192.168.1.20): dots are not mixed
    if "(" in text or _NANP.fullmatch(text) or (text[0] == "0" and digits >= 9):
        return any(_valid(text, region) is not None for region in REGIONS)
    if "." in text or ("-" in text and " " in text) or not 9 <= digits <= 11 or _AMOUNT.fullmatch(text):
        return False  # versions, amounts, a date and a time; mobile numbers have 9 to 11 digits
    return _exact_grouping(text)


def _ends(text: str) -> list[int]:
    """The whole candidate, then each shorter one ending before a separator (a number may be
    followed by another: ``+44 20 7946 0958 2 times``)."""
    return [len(text), *(i for i in range(len(text) - 1, 0, -1) if text[i] in " .-" and text[i - 1].isdigit())]


def check_phone(text: str) -> int:
    """The end of the longest phone number at the start of ``text`` (0: none)."""
    if _DATE.fullmatch(text):  # and no shorter part of a date has the digits of a phone number
        return 0
    for end in _ends(text):
        digits = len(_NON_DIGITS.sub("", text[:end]))
        if digits < 7:  # nor has any shorter candidate
            return 0
        if is_phone(text[:end], digits):
            return end
    return 0
