"""``-`` as a file name: standard input for ``labeler ingest``, standard output for single-file exports.

The ingest library reads files (it needs their size, and a big file is parsed in a second process),
so standard input is spooled to a temporary file first and ingested under the name ``<stdin>``
(messages read ``<stdin>:LINE: field: ...``). Its format comes from ``--format`` or from its first
bytes: gzip is decompressed; then ``[`` is a JSON array, ``{`` JSON lines (unless the first line is
not a whole JSON value: then one JSON object spread over several lines, as ``jq`` prints it), and
``PAR1`` Parquet. CSV and TSV need ``--format``. A ``--lenient`` ingest's rejects go to
``stdin.rejects.jsonl`` in the working directory.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ..errors import IngestError

DASH = "-"  # a FILE argument that means standard input (ingest) or output (export -o)
STDIN_NAME = "<stdin>"
REJECTS_NAME = "stdin.rejects.jsonl"
_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"
_FIRST_LINE_MAX = 1 << 20  # a first line longer than this is taken for JSON lines without parsing it
_WHITE = b" \t\r\n"


def spool(stream: IO[bytes], folder: Path) -> Path:
    """Copy ``stream`` to ``folder/stdin`` (``stdin.gz`` when it is gzip-compressed) and return the path."""
    if stream.isatty():  # nothing was piped in: reading would wait for typing
        raise IngestError(f"{STDIN_NAME}: standard input is a terminal; pipe a file into it, e.g. "
                          "labeler ingest logs - < logs.jsonl")
    head = stream.read(2)
    path = folder / ("stdin.gz" if head == _GZIP_MAGIC else "stdin")
    with open(path, "wb") as f:
        f.write(head)
        shutil.copyfileobj(stream, f, 1 << 20)
    return path


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


def sniff_format(path: Path) -> str:
    """The format of a spooled standard input, from its first bytes (see the module docstring)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            start, line = _head(f)
    except (OSError, EOFError) as e:
        raise IngestError(f"{STDIN_NAME}: cannot read standard input: {e}") from None
    if not start:
        raise IngestError(f"{STDIN_NAME}: standard input is empty; pipe a log file into it")
    if start.startswith(b"PAR1"):
        return "parquet"
    if start.startswith(b"["):
        return "json"
    if start.startswith(b"{"):
        if len(line) >= _FIRST_LINE_MAX:
            return "jsonl"
        try:
            json.loads(line)
        except ValueError:
            return "json"  # an object over several lines
        return "jsonl"
    raise IngestError(f"{STDIN_NAME}: cannot tell the format from its first character {start[:1].decode(errors='replace')!r} "
                      "(JSON starts with [ or {); give --format csv, tsv, jsonl, json or parquet")


@contextlib.contextmanager
def input_file(name: str, stream: IO[bytes], fmt: str | None) -> Iterator[tuple[str, str | None, str | None]]:
    """(path to read, name to show or None for the path, format or None) for a FILE argument; ``-``
    spools ``stream`` to a temporary file, removed afterwards, and sniffs its format if not given."""
    if name != DASH:
        yield name, None, fmt
        return
    with tempfile.TemporaryDirectory(prefix="labeler-stdin-") as folder:
        path = spool(stream, Path(folder))
        yield str(path), STDIN_NAME, fmt or sniff_format(path)


def keep_rejects(rejects_path: str) -> str:
    """Move a rejects file written next to the spooled standard input to ``stdin.rejects.jsonl`` here."""
    target = Path(REJECTS_NAME)
    shutil.move(rejects_path, target)
    return str(target)
