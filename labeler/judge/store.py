"""Judge runs as stored: the ``JudgeRun`` record and reading runs back (``get_run``, ``list_runs``).
Starting, resuming and collecting runs is in ``judge.runs``; everything that reads runs imports this."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlite_utils

from .. import db as store
from .. import owners
from ..errors import JudgeError

if TYPE_CHECKING:
    from ..llm.client import Estimate


@dataclass
class JudgeRun:
    """A judge run as stored (``id`` None for a dry run, which carries only ``estimate``)."""

    id: int | None
    judge: str
    kind: str
    rubric: str
    rubric_hash: str
    model: str
    temperature: float | None
    on_set: str
    status: str
    items: int = 0
    done: int = 0
    cached: int = 0
    failed: int = 0
    cancelled: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    created_at: str | None = None
    finished_at: str | None = None
    calibration_run: int | None = None
    error: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    estimate: Estimate | None = None
    failures: list[tuple[str, str]] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["failures"] = [list(f) for f in self.failures[:20]]
        return out


def _run_from_row(row: dict[str, Any]) -> JudgeRun:
    names = {f.name for f in dataclasses.fields(JudgeRun)}
    values = {k: v for k, v in row.items() if k in names}
    values["params"] = store.loads(row["params"]) or {}
    if values["status"] == "running" and values["params"].get("engine") == "batch":
        values["status"] = "submitted"  # waiting for its batches: `labeler llm collect` finishes it
    elif values["status"] == "running" and not owners.alive(row.get("owner")):
        values["status"] = "interrupted"  # its process was killed: `--resume` finishes it
    return JudgeRun(**values)


_RUN_COLUMNS = ("id, judge, kind, rubric, rubric_hash, model, temperature, on_set, status, items, done, cached, "
                "failed, cancelled, prompt_tokens, completion_tokens, cost, created_at, finished_at, "
                "calibration_run, error, params, owner")


def get_run(db: sqlite_utils.Database, run_id: int) -> JudgeRun:
    """The stored run ``run_id``; JudgeError naming the fix when it does not exist."""
    cur = db.execute(f"SELECT {_RUN_COLUMNS} FROM judge_runs WHERE id = ?", [run_id])
    row = cur.fetchone()
    if row is None:
        raise JudgeError(f"judge run {run_id!r} does not exist; `labeler judge list` shows the runs")
    return _run_from_row(dict(zip([c[0] for c in cur.description], row, strict=True)))


def list_runs(db: sqlite_utils.Database, *, kind: str | None = None) -> list[JudgeRun]:
    """Every judge run, newest first (``kind`` filters)."""
    cur = db.execute(f"SELECT {_RUN_COLUMNS} FROM judge_runs WHERE ?1 IS NULL OR kind = ?1 ORDER BY id DESC",
                     [kind])
    names = [c[0] for c in cur.description]
    return [_run_from_row(dict(zip(names, r, strict=True))) for r in cur.fetchall()]
