"""A file as lines of bytes and as text, and the record that could not be read (``BadRecord``): what
every reader of ingest shares. Lines over the size limit are skipped without being held in memory;
bytes that are not UTF-8 are kept as lone surrogates (``surrogateescape``) so that the checks after
parsing can name the field that holds them (``jsontext``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from .jsontext import is_safe_text

MAX_LINE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class BadRecord:
    """A record that could not be read; ``field`` names what was wrong (``json``, ``encoding``...)."""

    field: str
    message: str
    raw: str | None = None


def decode_line(data: bytes) -> tuple[str, bool]:
    """The text of a line, and whether it had bytes that are not UTF-8: those become lone
    surrogates (``surrogateescape``), which the checks after parsing report with their field."""
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", "surrogateescape"), True


def shown_text(text: str) -> str:
    """``text`` as it can be written to a rejects file (undecodable bytes as U+FFFD)."""
    return text if is_safe_text(text) else text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def read_lines(f: IO[bytes], max_bytes: int) -> Iterator[tuple[int, bytes | BadRecord]]:
    """Yield (line number, raw line) with over-long lines replaced by a BadRecord."""
    n = 0
    while True:
        line = f.readline(max_bytes + 1)
        if not line:
            return
        n += 1
        if len(line) > max_bytes and not line.endswith(b"\n"):
            # skip the rest of the line without holding it in memory
            while True:
                rest = f.readline(1 << 20)
                if not rest or rest.endswith(b"\n"):
                    break
            yield n, BadRecord("line", f"longer than the {max_bytes // (1024 * 1024)} MiB limit "
                                       "(raise --max-line-mb if this is intended)")
            continue
        yield n, line
