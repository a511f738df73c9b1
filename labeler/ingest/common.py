"""What every ingest shares: the problems found in a file, the result record, and the strict and
lenient rules that turn problems into an error or a rejects file."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import IngestError
from .lines import shown_text

MAX_ERRORS_SHOWN = 20


@dataclass
class Problem:
    """One rejected record: where it is and what is wrong with which field."""

    path: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.field}: {self.message}"


class ProblemList:
    """Mixin of the result records that carry ``problems``: ``to_dict`` shows them as text."""

    problems: list[Problem]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)  # type: ignore[call-overload]
        d["problems"] = [str(p) for p in self.problems]
        if hasattr(self, "notes"):
            d["notes"] = self.notes()
        return d


class FieldError(Exception):
    """A record's ``field`` is wrong; becomes a ``Problem`` with the record's place."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message


_FieldError = FieldError


@dataclass
class IngestResult(ProblemList):
    """What one file did to the store. ``new + merged + unchanged + rejected + sampled_out ==
    records`` (``sampled_out``: valid records a ``sample`` left out); records
    that are not retrievals (a trace's chain and LLM spans) are not among them but ``skipped``, by
    reason in ``skipped_reasons``; ``content_ids`` counts retrieved chunks that came without an id
    and were given one made from their text."""

    path: str
    kind: str
    format: str
    tool: str | None = None
    records: int = 0
    new: int = 0
    merged: int = 0
    unchanged: int = 0
    rejected: int = 0
    retrievals: int = 0
    documents_new: int = 0
    documents_updated: int = 0
    documents_without_text: int = 0
    skipped: int = 0
    content_ids: int = 0
    sampled_out: int = 0
    rejects_path: str | None = None
    redacted: bool | None = None
    redactions: dict[str, int] = field(default_factory=dict)
    sample: dict[str, Any] | None = None
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def notes(self) -> list[str]:
        """Plain sentences about what was skipped or made up, for the summary under the counts."""
        out = [f"skipped {n} {reason}" for reason, n in sorted(self.skipped_reasons.items())]
        if self.content_ids:
            out.append(f"{self.content_ids} retrieved chunk(s) had no id and were given one made from "
                       "their text (sha1:...)")
        if self.sample:
            how = (f"rate {self.sample['rate']}" if "rate" in self.sample else f"reservoir of {self.sample['size']}")
            out.append(f"sampled ({how}, seed {self.sample['seed']}): kept {self.records - self.sampled_out - self.rejected}"
                       f" of {self.records} records seen")
        if self.redacted:
            found = ", ".join(f"{kind} {n}" for kind, n in sorted(self.redactions.items()))
            out.append(f"redacted: {found or 'nothing found'}")
        elif self.redacted is False:
            out.append("not redacted (--no-redact or the setting redact is off)")
        return out


class FileHash:
    """The SHA-256 of a file, a block at a time (``step``: while an ingest has nothing else to
    do), the rest when it is asked for (``hexdigest``)."""

    BLOCK = 1 << 22

    def __init__(self, path: Path):
        self.path = path
        self.hash = hashlib.sha256()
        self.file: Any = None
        self.done = False

    def step(self) -> bool:
        """Hash the next block; False once the whole file is."""
        if self.done:
            return False
        if self.file is None:
            self.file = open(self.path, "rb")  # noqa: SIM115 - closed at its end, or by close()
        block = self.file.read(self.BLOCK)
        if block:
            self.hash.update(block)
            return True
        self.close()
        self.done = True
        return False

    def hexdigest(self) -> str:
        while self.step():
            pass
        return self.hash.hexdigest()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def check_path(path: Path) -> None:
    shown = shown_text(str(path))
    if not path.exists():
        raise IngestError(f"{shown}: no such file")
    if path.is_dir():
        raise IngestError(f"{shown}: is a folder; give a file")


def check_problems(path: Path, shown: str, result: Any, lenient: bool, rejects: list[dict]) -> None:
    """The rules every file reader shares: an empty file is an error; in strict mode any problem is
    an error listing up to 20 of them (the caller rolls back); in lenient mode the rejects go to
    ``FILE.rejects.jsonl``. Sets ``result.rejected`` (and ``rejects_path``)."""
    if result.records == 0 and not result.problems:
        raise IngestError(f"{shown}: empty file: no records found")
    if result.problems and not lenient:
        listed = "\n".join(str(p) for p in result.problems[:MAX_ERRORS_SHOWN])
        more = len(result.problems) - MAX_ERRORS_SHOWN
        tail = f"\n... and {more} more" if more > 0 else ""
        raise IngestError(
            f"{shown}: {len(result.problems)} invalid record(s); nothing was written "
            f"(fix them, or pass --lenient to write the valid ones):\n{listed}{tail}",
            result.problems, len(result.problems))
    if rejects:
        rejects_path = Path(str(path) + ".rejects.jsonl")
        with open(rejects_path, "w", encoding="utf-8") as f:
            for r in rejects:
                f.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")
        result.rejects_path = str(rejects_path)
    result.rejected = len(result.problems)

