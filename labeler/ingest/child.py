"""An ingest in a process of its own, for the app: ``python -m labeler.ingest.child`` reads what to
ingest as one JSON object on standard input and writes JSON lines to standard output:
``{"progress": [done, total]}`` while it reads, then ``{"result": {...}}`` (``IngestResult.to_dict``)
or ``{"error": "...", "labeler": true}`` (a ``LabelerError``: bad input, a refused permission; the
message is the library's, already free of raw values).

The Data page's upload runs here rather than in the app's server: an ingest parses, redacts and
writes for as long as the file takes, and in the server's process it would hold the interpreter
while every annotator's page waits. It runs at a lower CPU priority (``NICE``), as ``labeler ingest``
does. The request:

- ``db``: the database file; ``path``: the file to read; ``name``: its name in messages and in
  ``labeler ingest list``; ``kind``: ``logs`` or ``corpus``; ``by``: who ingests (checked by the
  library call, as in the app: leads only); ``remove``: a folder to delete when done (the upload's);
- ``options``: ``lenient``, ``redact``, and for logs ``mapping`` (``FIELD=PATH`` strings) and ``tool``.

If the page stops reading (its run was replaced, the tab closed), the ingest still finishes: a
progress line that cannot be written is dropped, never the ingest.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import Any

NICE = 5
PROGRESS_EVERY_S = 0.2


class _Out:
    """JSON lines to the page, for as long as it reads them."""

    def __init__(self, stream: Any):
        self.stream = stream
        self.open = True
        self.last = 0.0

    def send(self, message: dict[str, Any]) -> None:
        if not self.open:
            return
        try:
            self.stream.write(json.dumps(message) + "\n")
            self.stream.flush()
        except (BrokenPipeError, OSError):
            self.open = False

    def progress(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.send({"progress": [done, total]})


def run(request: dict[str, Any], out: _Out) -> int:
    from ..db import connect
    from ..errors import LabelerError
    from .corpus import ingest_corpus
    from .logs import ingest_logs
    from .mapping import parse_mapping

    options = request.get("options") or {}
    db = connect(request["db"], migrate=False)
    try:
        if request.get("kind", "logs") == "logs":
            result = ingest_logs(db, request["path"], mapping=parse_mapping(options.get("mapping") or []),
                                 lenient=bool(options.get("lenient")), progress=out.progress, name=request.get("name"),
                                 by=request.get("by"), redact=options.get("redact"), tool=options.get("tool"))
        else:
            result = ingest_corpus(db, request["path"], lenient=bool(options.get("lenient")), progress=out.progress,
                                   name=request.get("name"), by=request.get("by"), redact=options.get("redact"))
    except LabelerError as e:
        out.send({"error": str(e), "labeler": True})
        return 1
    finally:
        db.conn.close()
    out.send({"result": result.to_dict()})
    return 0


def main() -> int:
    if hasattr(os, "setpriority") and os.getpriority(os.PRIO_PROCESS, 0) < NICE:
        os.setpriority(os.PRIO_PROCESS, 0, NICE)
    request = json.loads(sys.stdin.read())
    out = _Out(sys.stdout)
    try:
        return run(request, out)
    finally:
        if request.get("remove"):
            shutil.rmtree(request["remove"], ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
