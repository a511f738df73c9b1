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
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ..errors import IngestError
from ..ingest.readers import sniff_format

DASH = "-"  # a FILE argument that means standard input (ingest) or output (export -o)
STDIN_NAME = "<stdin>"
REJECTS_NAME = "stdin.rejects.jsonl"
_GZIP_MAGIC = b"\x1f\x8b"


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


@contextlib.contextmanager
def input_file(name: str, stream: IO[bytes], fmt: str | None) -> Iterator[tuple[str, str | None, str | None]]:
    """(path to read, name to show or None for the path, format or None) for a FILE argument; ``-``
    spools ``stream`` to a temporary file, removed afterwards, and sniffs its format if not given."""
    if name != DASH:
        yield name, None, fmt
        return
    with tempfile.TemporaryDirectory(prefix="labeler-stdin-") as folder:
        path = spool(stream, Path(folder))
        yield str(path), STDIN_NAME, fmt or sniff_format(path, path.suffix == ".gz", STDIN_NAME)


def keep_rejects(rejects_path: str) -> str:
    """Move a rejects file written next to the spooled standard input to ``stdin.rejects.jsonl`` here."""
    target = Path(REJECTS_NAME)
    shutil.move(rejects_path, target)
    return str(target)
