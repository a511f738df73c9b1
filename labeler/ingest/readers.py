"""Streaming record readers for JSONL, JSON arrays, CSV/TSV and Parquet (plain or gzip-compressed):
the format from the name or the first bytes, and ``iter_records`` over any of them (JSON here, the
tables in ``tables``, lines and ``BadRecord`` in ``lines``, hostile JSON values in ``jsontext``).

Each reader yields ``(line, record)`` pairs where ``line`` is the 1-based line (or Parquet row) a
record starts on and ``record`` is a dict, or ``(line, BadRecord)`` for a record that cannot be
read at all (invalid JSON, invalid UTF-8, a ragged CSV row, a line over the size limit). Readers
never hold more than one batch of the file in memory.
"""

from __future__ import annotations

import gzip
import io
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from ..errors import IngestError
from .jsontext import (
    MAX_DEPTH,
    BadJSON,
    IntParser,
    check_value,
    deep_field,
    is_safe_text,
    load_json,
    needs_check,
    sniffs_as_json,
    value_end,
)
from .lines import MAX_LINE_BYTES, BadRecord, decode_line, read_lines, shown_text
from .tables import read_csv, read_parquet

try:  # orjson is a dependency, but keep a pure-Python fallback for unusual platforms
    import orjson
except ImportError:  # pragma: no cover
    pass

def dumps_sorted(value: Any) -> bytes:
    """Canonical JSON bytes (sorted keys) for content hashes."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    except (NameError, TypeError):
        return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False).encode()


FORMATS = ("jsonl", "json", "csv", "tsv", "parquet")
_EXTENSIONS = {
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
    ".parquet": "parquet", ".pq": "parquet",
}
_BOM = b"\xef\xbb\xbf"
_FIRST_LINE_MAX = 1 << 20  # a first line longer than this is taken for JSON lines without parsing it
_WHITE = b" \t\r\n"


def detect_format(path: Path, fmt: str | None = None) -> tuple[str, bool]:
    """Return ``(format, gzipped)`` from ``fmt`` or the file extension (``.jsonl.gz`` works)."""
    gz = path.suffix.lower() == ".gz"
    if fmt:
        fmt = fmt.lower()
        if fmt not in FORMATS:
            raise IngestError(f"{path}: unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
        return fmt, gz
    suffix = Path(path.stem).suffix.lower() if gz else path.suffix.lower()
    if suffix not in _EXTENSIONS:  # .txt, .log, no extension: JSON and Parquet tell by their first bytes
        return sniff_format(path, gz, str(path)), gz
    return _EXTENSIONS[suffix], gz


def _head(f: IO[bytes]) -> tuple[bytes, bytes]:
    """(the first non-white-space bytes, the rest of their line), reading no more than needed."""
    chunk = f.read(1 << 16)
    if chunk.startswith(_BOM):
        chunk = chunk[len(_BOM):]
    while chunk and not chunk.lstrip(_WHITE):
        chunk = f.read(1 << 16)
    chunk = chunk.lstrip(_WHITE)
    line = chunk
    while b"\n" not in line and len(line) < _FIRST_LINE_MAX:
        more = f.read(1 << 16)
        if not more:
            break
        line += more
    return chunk[:4], line.split(b"\n", 1)[0]


def sniff_format(path: Path, gz: bool, shown: str) -> str:
    """The format of a file from its first bytes (standard input, a file with an unknown extension):
    ``PAR1`` Parquet, ``[`` a JSON array, ``{`` JSON lines, unless the first line is not a whole
    JSON value (objects written over several lines, as ``jq`` or the OTel console exporter print
    them: read as JSON)."""
    opener = gzip.open if gz else open
    try:
        with opener(path, "rb") as f:
            start, line = _head(f)
    except (OSError, EOFError) as e:
        raise IngestError(f"{shown}: cannot read: {e}") from None
    stdin = shown == "<stdin>"
    if not start:
        raise IngestError(f"{shown}: standard input is empty; pipe a log file into it" if stdin
                          else f"{shown}: empty file: no records found")
    if start.startswith(b"PAR1"):
        return "parquet"
    if start.startswith(b"["):
        return "json"
    if start.startswith(b"{"):
        if len(line) >= _FIRST_LINE_MAX:
            return "jsonl"
        return "jsonl" if sniffs_as_json(line) else "json"  # else an object over several lines
    ext = "" if stdin else f"unknown file extension {path.suffix or '(none)'} and "
    names = "" if stdin else "use .jsonl, .json, .csv, .tsv or .parquet (optionally .gz), or "
    raise IngestError(f"{shown}: {ext}cannot tell the format from its first character "
                      f"{start[:1].decode(errors='replace')!r} (JSON starts with [ or {{); "
                      f"{names}give --format csv, tsv, jsonl, json or parquet")


class _Counting(io.RawIOBase):
    """Wraps a binary file and counts the compressed bytes read, for the progress bar."""

    def __init__(self, f: IO[bytes]):
        self.f = f
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self.f.readinto(b)
        self.bytes_read += n or 0
        return n

    def close(self) -> None:
        """Close the file too (a GzipFile leaves the file under it open, and RawIOBase's close
        would too): an ingest leaves no handle behind."""
        if not self.closed:
            self.f.close()
        super().close()


def open_binary(path: Path, gz: bool) -> tuple[IO[bytes], _Counting]:
    raw = open(path, "rb")  # noqa: SIM115 - closed by the caller through the returned handle
    counter = _Counting(raw)
    buffered = io.BufferedReader(counter, buffer_size=1 << 20)
    if gz:
        return gzip.GzipFile(fileobj=buffered), counter  # type: ignore[return-value]
    return buffered, counter


def read_jsonl(f: IO[bytes], max_bytes: int = MAX_LINE_BYTES,
               fast: Callable[[bytes], Any] | None = None) -> Iterator[tuple[int, Any]]:
    """The records of a JSON lines file. ``fast``: a line's bytes -> what stands for its record
    (``fastlines.FastLines.decode``), or None to have it read here."""
    for n, line in read_lines(f, max_bytes):
        if isinstance(line, BadRecord):
            yield n, line
            continue
        if n == 1 and line.startswith(_BOM):  # Windows editors start UTF-8 files with a byte order mark
            line = line[len(_BOM):]
        if not line.strip():
            continue
        if fast is not None and (valid := fast(line)) is not None:
            yield n, valid
            continue
        text, _ = decode_line(line)
        try:
            value = load_json(text)
        except BadJSON as e:
            yield n, BadRecord(e.field, e.message, shown_text(text[:200]))
            continue
        except json.JSONDecodeError as e:
            truncated = not line.endswith(b"\n")
            what = "truncated or invalid JSON" if truncated else "invalid JSON"
            yield n, BadRecord("json", f"{what}: {e}", shown_text(text[:200]))
            continue
        if not isinstance(value, dict):
            yield n, BadRecord("json", f"expected a JSON object, got {type(value).__name__}", shown_text(text[:200]))
            continue
        yield n, value


def read_json_array(f: IO[bytes], max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, dict | BadRecord]]:
    """Stream the objects of a top-level JSON array, or of objects written one after another (a
    single object is the simplest case).

    Objects are decoded one at a time from a sliding buffer, so a large array never sits in
    memory whole; the line number is where each object starts.
    """
    ints = IntParser()
    decoder = json.JSONDecoder(parse_int=ints)
    undecodable = False
    # bytes that are not UTF-8 become lone surrogates, which the check of their object reports with
    # its line and field (a strict decoder would fail a whole 1 MiB read and end the file there)
    reader = io.TextIOWrapper(f, encoding="utf-8-sig", errors="surrogateescape")
    buf = ""
    line = 1
    pos = 0
    eof = False

    def fill() -> bool:
        nonlocal buf, pos, eof, undecodable
        if eof:
            return False
        chunk = reader.read(1 << 20)
        undecodable = undecodable or not is_safe_text(chunk)  # from here on every object is checked
        if not chunk:
            eof = True
            return False
        buf = buf[pos:] + chunk
        pos = 0
        return True

    def skip_ws() -> None:
        nonlocal pos, line
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                if buf[pos] == "\n":
                    line += 1
                pos += 1
            if pos < len(buf) or not fill():
                return

    def too_deep() -> tuple[None, BadRecord, bool]:
        """The object at ``pos`` nests past the limit: skipped to its end, found by its brackets."""
        nonlocal pos, line
        field = deep_field(buf[pos:pos + max_bytes])
        while (end := value_end(buf, pos)) is None:
            if len(buf) - pos > max_bytes or not fill():
                return None, BadRecord(field, f"nested more than {MAX_DEPTH} levels deep; nothing after it "
                                              "was read"), True
        line += buf.count("\n", pos, end)
        pos = end
        return None, BadRecord(field, f"nested more than {MAX_DEPTH} levels deep"), False

    def next_object(start_line: int) -> tuple[Any, BadRecord | None, bool]:
        """Decode the value at ``pos`` (reading more of the file as needed): ``(value, problem, whether
        the reading must stop)``."""
        nonlocal pos, line
        while True:
            try:
                value, end = decoder.raw_decode(buf, pos)
                break
            except json.JSONDecodeError as e:
                if len(buf) - pos > max_bytes:
                    return None, BadRecord("json", f"record longer than the {max_bytes >> 20} MiB limit"), True
                if not fill():
                    return None, BadRecord("json", f"truncated or invalid JSON: {e.msg}"), True
            except RecursionError:
                return too_deep()
        line += buf.count("\n", pos, end)
        start, pos = pos, end
        if undecodable or needs_check(buf, start, end, ints):
            ints.huge = False
            try:
                check_value(value)
            except BadJSON as e:
                return None, BadRecord(e.field, e.message), False
        return value, None, False

    skip_ws()
    if pos >= len(buf):
        return
    if buf[pos] == "{":
        # one object, or objects one after another (as the OpenTelemetry console exporter writes)
        while True:
            skip_ws()
            if pos >= len(buf):
                return
            start_line = line
            if buf[pos] != "{":
                yield start_line, BadRecord("json", "expected a JSON object")
                return
            value, bad, stop = next_object(start_line)
            if bad is not None:
                yield start_line, bad
                if stop:
                    return
                continue
            yield start_line, value
    if buf[pos] != "[":
        yield line, BadRecord("json", "expected a JSON array of objects")
        return
    pos += 1
    while True:
        skip_ws()
        if pos >= len(buf):
            yield line, BadRecord("json", "truncated JSON: the array is not closed")
            return
        if buf[pos] == "]":
            return
        if buf[pos] == ",":
            pos += 1
            continue
        start_line = line
        value, bad, stop = next_object(start_line)
        if bad is not None:
            yield start_line, bad
            if stop:
                return
            continue
        if not isinstance(value, dict):
            yield start_line, BadRecord("json", f"expected a JSON object, got {type(value).__name__}")
            continue
        yield start_line, value


def _pretty_printed(f: IO[bytes]) -> bool:
    """The file's first line is a lone ``{``: JSON objects written over several lines each."""
    head = f.peek(64 * 1024)[:64 * 1024] if hasattr(f, "peek") else b""
    first = head.lstrip().split(b"\n", 1)[0].strip()
    return first == b"{"


def iter_records(path: Path, fmt: str, gz: bool, *, max_line_bytes: int = MAX_LINE_BYTES,
                 json_columns: frozenset[str] | set[str] = frozenset(), fast: Callable[[bytes], Any] | None = None,
                 ) -> tuple[Iterator[tuple[int, Any]], Callable[[], int]]:
    """Open ``path`` and return (records, bytes_read) where bytes_read() reports progress;
    ``fast`` reads the lines of a JSON lines file first (``read_jsonl``)."""
    if fmt == "parquet":
        size = path.stat().st_size
        return read_parquet(path), lambda: size
    f, counter = open_binary(path, gz)
    if fmt == "jsonl" and _pretty_printed(f):
        fmt = "json"  # objects spread over lines (the OpenTelemetry console exporter's output)
    if fmt == "jsonl":
        it = read_jsonl(f, max_line_bytes, fast)
    elif fmt == "json":
        it = read_json_array(f, max_line_bytes)
    else:
        it = read_csv(f, "," if fmt == "csv" else "\t", json_columns)

    def closing() -> Iterator[tuple[int, dict | BadRecord]]:
        try:
            yield from it
        except (OSError, EOFError) as e:  # gzip errors, truncated gzip streams
            raise IngestError(f"{path}: cannot read file: {e}") from None
        finally:
            f.close()
            counter.close()

    return closing(), lambda: counter.bytes_read


def is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
