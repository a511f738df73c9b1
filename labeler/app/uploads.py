"""The Data page's upload, ingested in a child process (``labeler.ingest.child``) so that the
server's interpreter stays free for the annotators' pages while a big file is parsed and written."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labeler.errors import LabelerError


class UploadFailed(LabelerError):
    """The ingest said why it wrote nothing (its own message), or its process failed."""


def ingest_upload(db_path: str, name: str, data: bytes, *, kind: str, by: str | None, options: dict[str, Any],
                  progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Write ``data`` to a file named ``name`` in a new temporary folder and ingest it in a child
    process; its ``IngestResult.to_dict()``. The child deletes the folder when it is done, also when
    this caller stops waiting (a rerun replaced the page run): the ingest then finishes on its own."""
    folder = Path(tempfile.mkdtemp(prefix="labeler-upload-"))
    path = folder / (Path(name).name or "upload")
    path.write_bytes(data)
    request = {"db": db_path, "path": str(path), "name": name, "kind": kind, "by": by, "options": options,
               "remove": str(folder)}
    # its error output to a file, not a pipe: a pipe nobody reads while the progress is read could fill
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen([sys.executable, "-m", "labeler.ingest.child"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errors, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(request))
        proc.stdin.close()
        answer: dict[str, Any] = {}
        for line in proc.stdout:
            message = json.loads(line)
            if "progress" in message:
                if progress is not None:
                    progress(*message["progress"])
            else:
                answer = message
        proc.wait()
        errors.seek(0)
        stderr = errors.read()
    if "result" in answer:
        return answer["result"]
    if "error" in answer:
        raise UploadFailed(answer["error"])
    last = [x for x in stderr.strip().splitlines() if x.strip()][-1:] or [f"exit status {proc.returncode}"]
    raise UploadFailed(f"the ingest of {name} failed: {last[0]}")
