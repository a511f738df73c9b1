"""Planted personal data for attack tests of redaction: one distinct value per field and per path,
so that a value found raw in a database file or an export names the field it leaked from.

``Plants.new(where)`` makes a fresh value of the next kind (emails, +1 phones, Luhn-valid card
numbers, mod-97-valid IBANs, public IPs, API keys: what the built-in detectors find) and remembers
where it was planted; ``Plants.leaks(data)`` lists the places whose value appears in ``data`` in any
form a store could keep it (as written, its digits run together, lower case, the digits of a number).
``plant_file`` copies a tool's export (JSON, JSON lines, text or Parquet) with a fresh value after
every occurrence of the given strings (each occurrence its own value, so that the root span's
question and the retriever's input differ and both are kept). ``database_bytes`` reads a database
file with its WAL, and again after a checkpoint (full-text index shadow tables included).
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

KINDS = ("EMAIL", "PHONE", "CARD", "IBAN", "IP", "SECRET")


def luhn_complete(digits: str) -> str:
    """``digits`` with the check digit that makes the number Luhn-valid appended."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return digits + str((10 - total % 10) % 10)


def iban_complete(country: str, bban: str) -> str:
    """A mod-97-valid IBAN of ``country`` with account part ``bban`` (digits)."""
    moved = bban + "".join(str(ord(c) - 55) for c in country) + "00"
    return f"{country}{98 - int(moved) % 97:02d}{bban}"


def make_value(kind: str, n: int) -> str:
    """The ``n``-th distinct value of ``kind`` (n < 10000)."""
    if kind == "EMAIL":
        return f"planted.person{n:04d}@mail-example.com"
    if kind == "PHONE":
        return f"+1 415 555 {n:04d}"
    if kind == "CARD":
        return luhn_complete(f"411111{n:04d}01234")
    if kind == "IBAN":
        return iban_complete("DE", f"3704004405{n:04d}1300")
    if kind == "IP":
        return f"198.51.{100 + n // 200}.{50 + n % 200}"
    if kind == "SECRET":
        return f"sk-proj-Pl4nt3dK3y{n:04d}QwErTyUiOpAsDf"
    raise ValueError(f"unknown kind {kind!r}; use one of {KINDS}")


def needles(value: str) -> list[bytes]:
    """The forms in which a stored or exported value would give itself away."""
    out = {value, value.lower(), re.sub(r"[\s()-]", "", value)}
    if value.startswith("+"):  # a phone number stored as a number lost its +
        out.add(re.sub(r"\D", "", value))
    return [n.encode() for n in out]


class Plants:
    """Fresh planted values, each remembered with the place it was planted."""

    def __init__(self, start: int = 0) -> None:
        self.where: dict[str, str] = {}  # value -> place
        self.n = start

    def new(self, where: str, kind: str | None = None) -> str:
        kind = kind or KINDS[self.n % len(KINDS)]
        value = make_value(kind, self.n)
        self.n += 1
        self.where[value] = where
        return value

    def number(self, where: str, kind: str = "CARD", *, as_float: bool = False) -> int | float:
        """A value stored as a JSON number (a card's digits; ``as_float``: as pandas writes an int
        column with gaps, e.g. ``4.111111111111111e15``)."""
        value = re.sub(r"\D", "", self.new(where, kind))
        return float(value) if as_float else int(value)

    def leaks(self, data: bytes) -> list[str]:
        """The places whose value appears in ``data``."""
        return sorted({f"{where}: {value}" for value, where in self.where.items()
                       if any(n in data for n in needles(value))})

    def check_files(self, paths: list[Path]) -> list[str]:
        out = []
        for p in paths:
            files = [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file())
            for f in files:
                out += [f"{f.name}: {leak}" for leak in self.leaks(f.read_bytes())]
        return out


def database_bytes(path: Path) -> bytes:
    """The database file, its WAL and shared memory as they are, then the file again after every
    page was checkpointed into it (so a value in the WAL only, or in the file only, is seen)."""
    parts = [p.read_bytes() for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()]
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    parts.append(path.read_bytes())
    return b"".join(parts)


def _replace(text: str, strings: list[str], plants: Plants, where: str) -> str:
    # longest first, so a string inside a longer one does not split it
    pattern = re.compile("|".join(re.escape(s) for s in sorted(set(strings), key=len, reverse=True)))
    return pattern.sub(lambda m: f"{m.group(0)} {plants.new(where)}", text)


def _replace_value(value: Any, strings: list[str], plants: Plants, where: str) -> Any:
    if isinstance(value, str):
        return _replace(value, strings, plants, where)
    if isinstance(value, dict):
        return {k: _replace_value(v, strings, plants, where) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_value(v, strings, plants, where) for v in value]
    return value


def plant_file(src: Path, dst: Path, strings: list[str], plants: Plants) -> Path:
    """A copy of ``src`` with a fresh planted value after each occurrence of each of ``strings``.
    The inserted text has no quote or backslash, so JSON (also JSON inside JSON strings) stays valid."""
    strings = [s for s in strings if s]
    where = src.parent.name + "/" + src.name
    if src.suffix == ".parquet":
        table = pq.read_table(src)
        rows = _replace_value(table.to_pylist(), strings, plants, where)
        pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), dst)
    else:
        dst.write_text(_replace(src.read_text(encoding="utf-8"), strings, plants, where), encoding="utf-8")
    return dst


def expected_strings(expected: dict[str, Any]) -> list[str]:
    """The questions, answers and chunk texts of a tools fixture (its expected.json entry)."""
    out: list[str] = []
    for q in expected["queries"]:
        out += [q["question"], q.get("answer") or ""]
        out += [c["text"] for c in q["chunks"] if c.get("text")]
    return [s for s in out if len(s) > 12]


def dumps_lines(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)
