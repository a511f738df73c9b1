"""Decoding JSON text from files nobody vetted, so that every value that comes out can be stored.

Three inputs break Python (or SQLite) long after the parser accepted them: a lone surrogate (an
emoji cut in half, ``"\\ud83d"``) is a valid JSON escape but cannot be encoded as UTF-8 when the
row is written; an integer of thousands of digits makes ``int()`` raise (Python's
``int_max_str_digits``) or overflows the float a score becomes; and nesting deeper than the
recursion limit makes the standard library parser, the redactor and ``json.dumps`` raise
``RecursionError``. ``load_json`` turns each into a ``BadJSON`` naming the field (``retrieved[0].score``)
instead, with the same rules on the fast path (orjson, which refuses all three itself) and the
standard library's; ``check_value`` applies them to a value another parser made (a JSON array read
object by object, a Python literal in a CSV cell).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

try:  # orjson is a dependency, but keep a pure-Python fallback for unusual platforms
    import orjson

    _fast_loads: Callable[[bytes | str], Any] | None = orjson.loads
    _FAST_ERRORS: tuple[type[Exception], ...] = (orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover
    _fast_loads = None
    _FAST_ERRORS = (ValueError,)

# Deeper than any log or corpus record nests (spans and LangChain dumps stay under 20 levels), and
# shallow enough that every recursive walk after reading (redaction, json.dumps) stays far from
# Python's recursion limit of 1000 frames.
MAX_DEPTH = 200
_SURROGATE = re.compile("[\ud800-\udfff]")
# a \uD800-\uDFFF escape in JSON source text; a false hit only costs a walk of the value
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]')
_PATH_SHOWN = 4  # path components named in a message; a deeper path ends in "..."


class BadJSON(ValueError):
    """JSON text that cannot be stored: ``field`` is where (``json`` for the text as a whole)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


class _Huge:
    """Stands in for an integer too large for a double while the value is decoded, so that the
    walk afterwards can name its field (raising inside ``parse_int`` would lose the place)."""

    __slots__ = ("digits",)

    def __init__(self, digits: int):
        self.digits = digits


def parse_int(text: str) -> Any:
    """An integer as orjson reads it: exact within 64 bits, else the nearest double; one that no
    double holds (over 308 digits) is marked, and never handed to ``int()`` (which raises past
    4300 digits)."""
    digits = len(text) - text.startswith("-")
    if digits <= 18:
        return int(text)
    if digits > 309:
        return _Huge(digits)
    value = int(text)
    if -(1 << 63) <= value < (1 << 64):
        return value
    try:
        return float(value)
    except OverflowError:
        return _Huge(digits)


def cut_message(value: str) -> str:
    """Why ``value`` (which is not ``is_safe_text``) cannot be stored, for its problem line."""
    found = _SURROGATE.search(value)
    ch = ord(found.group()) if found else 0xDC00
    if 0xDC80 <= ch <= 0xDCFF:  # a byte the file's decoder could not read (surrogateescape)
        return (f"not valid UTF-8 (byte 0x{ch - 0xDC00:02x}: a character cut in two, or a file in another "
                "encoding such as Latin-1; save it as UTF-8)")
    return (f"has a lone surrogate (\\u{ch:04x}: half of a character such as an emoji, cut in two); "
            "fix the program that wrote the file")


def is_safe_text(value: str) -> bool:
    """True when ``value`` can be encoded as UTF-8 (has no lone surrogate); cheap for ASCII."""
    return value.isascii() or _SURROGATE.search(value) is None


def _path(parts: list[str | int]) -> str:
    shown = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts[:_PATH_SHOWN]).lstrip(".")
    return (shown or "json") + ("..." if len(parts) > _PATH_SHOWN else "")


def _key(key: Any) -> str:
    return key if is_safe_text(key) else key.encode("utf-8", "backslashreplace").decode()


def check_value(value: Any, depth_limit: int = MAX_DEPTH) -> None:
    """Raise ``BadJSON`` at the first lone surrogate (in a key or a string), integer too large
    for a double, or container nested deeper than ``depth_limit``. Iterative: a walk of a deep
    value must not itself run out of stack."""
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        item, parts = stack.pop()
        if isinstance(item, str):
            if not is_safe_text(item):
                raise BadJSON(_path(parts), cut_message(item))
        elif isinstance(item, _Huge):
            raise BadJSON(_path(parts), f"an integer of {item.digits} digits is too large "
                                        "(numbers must fit a 64-bit float)")
        elif isinstance(item, dict | list):
            if len(parts) >= depth_limit:
                raise BadJSON(_path(parts), f"nested more than {depth_limit} levels deep")
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for k, v in pairs:
                if isinstance(k, str) and not is_safe_text(k):
                    raise BadJSON(_path([*parts, _key(k)]), f"the key {cut_message(k)}")
                if isinstance(v, str | dict | list | _Huge):
                    stack.append((v, [*parts, k]))


def deep_field(text: str) -> str:
    """Where the JSON ``text`` first nests deeper than ``MAX_DEPTH``, found by a scan of its
    tokens: the value is too deep to be decoded, so its place cannot come from a walk."""
    stack: list[list[Any]] = []  # per open container: [is object, current key or index]
    last = None
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok[0] == '"':
            last = tok
        elif tok == ":" and stack and stack[-1][0] and last is not None:
            try:
                stack[-1][1] = json.loads(last)
            except ValueError:
                stack[-1][1] = last[1:-1]
        elif tok == "," and stack and not stack[-1][0]:
            stack[-1][1] += 1
        elif tok in "[{":
            if len(stack) >= MAX_DEPTH:
                break
            stack.append([tok == "{", None if tok == "{" else 0])
        elif tok in "]}" and stack:
            stack.pop()
    return _path([_key(k) if isinstance(k, str) else k for _, k in stack[:_PATH_SHOWN + 1] if k is not None])


def value_end(text: str, start: int) -> int | None:
    """Where the container that opens at ``text[start]`` closes (the index after it), by a scan of
    its tokens that keeps no values; None when ``text`` ends first."""
    depth = 0
    for m in _TOKEN.finditer(text, start):
        tok = m.group()
        if tok == "[" or tok == "{":
            depth += 1
        elif tok == "]" or tok == "}":
            depth -= 1
            if depth == 0:
                return m.end()
    return None


def _std_loads(text: str) -> Any:
    """The standard library parser, which accepts NaN/Infinity (which Python's json.dumps writes,
    so validation can name the field) and gives the clearer message for invalid JSON."""
    try:
        value = json.loads(text, parse_int=parse_int)
    except RecursionError:
        raise BadJSON(deep_field(text), f"nested more than {MAX_DEPTH} levels deep") from None
    check_value(value)
    return value


def _many_brackets(text: str) -> bool:
    return text.count("[") + text.count("{") > MAX_DEPTH


class IntParser:
    """``parse_int`` for a decoder that reads many values: ``huge`` tells whether one of them had an
    integer too large (so that only those values are walked)."""

    def __init__(self) -> None:
        self.huge = False

    def __call__(self, text: str) -> Any:
        if len(text) <= 18:  # nearly every integer: no second call
            return int(text)
        value = parse_int(text)
        if isinstance(value, _Huge):
            self.huge = True
        return value


def needs_check(text: str, start: int, end: int, ints: IntParser) -> bool:
    """Whether the value just decoded from ``text[start:end]`` (with ``ints``) could hold what
    ``check_value`` refuses: a quick look at the source, so that ordinary records are not walked.
    (Raw lone surrogates, from bytes that are not UTF-8, are for the caller to look for once per
    block it reads: a search per record costs more than the decoding.)"""
    return (ints.huge or text.count("[", start, end) + text.count("{", start, end) > MAX_DEPTH
            or SURROGATE_ESCAPE.search(text, start, end) is not None)


def load_json(text: str) -> Any:
    """Decode ``text``; raise ``json.JSONDecodeError`` when it is not JSON and ``BadJSON`` when it
    is JSON that cannot be stored (see the module docstring)."""
    if _fast_loads is not None:
        try:
            value = _fast_loads(text)
        except _FAST_ERRORS:
            return _std_loads(text)
        if _many_brackets(text):  # orjson nests up to 1024 levels: too deep for what follows
            check_value(value)
        return value
    return _std_loads(text)


def loads_or_text(value: str) -> Any:
    """``value`` decoded when it is storable JSON, else ``value`` itself (a tool attribute that
    holds JSON text, kept as text when it cannot be decoded)."""
    try:
        return load_json(value)
    except ValueError:  # JSONDecodeError and BadJSON
        return value


def sniffs_as_json(line: bytes) -> bool:
    """Whether a file's first line is one whole JSON value (then the file is JSON lines)."""
    try:
        load_json(line.decode("utf-8", "replace"))
    except BadJSON:
        return True  # a whole value, though not a storable one: the reader names the problem
    except ValueError:
        return False
    return True
