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


# --- checks of a judge configuration: stress tests and alignments (table judge_checks) -------------------

CHECK_KINDS = ("stress", "align")


def save_check(db: sqlite_utils.Database, kind: str, *, judge: str, rubric: str, rubric_hash: str, model: str,
               temperature: float | None, params: dict[str, Any], result: dict[str, Any],
               by: str | None = None) -> int:
    """Store one stress test or alignment (``kind``) of a judge configuration; returns its id."""
    if kind not in CHECK_KINDS:
        raise JudgeError(f"check kind {kind!r} is unknown; use one of: {', '.join(CHECK_KINDS)}")
    with store.transaction(db):
        cur = db.execute(
            "INSERT INTO judge_checks (kind, judge, rubric, rubric_hash, model, temperature, params, result, "
            "created_at, by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [kind, judge, rubric, rubric_hash, model, temperature, store.dumps(params), store.dumps(result),
             store.now(), by])
    return int(cur.lastrowid)


def list_checks(db: sqlite_utils.Database, kind: str, *, judge: str | None = None,
                rubric_hash: str | None = None, model: str | None = None) -> list[dict[str, Any]]:
    """Stored checks of ``kind``, newest first, optionally of one judge / rubric hash / model; each a
    dict of the row with ``params`` and ``result`` decoded."""
    cur = db.execute(
        "SELECT id, kind, judge, rubric, rubric_hash, model, temperature, params, result, created_at, by "
        "FROM judge_checks WHERE kind = ?1 AND (?2 IS NULL OR judge = ?2) AND (?3 IS NULL OR rubric_hash = ?3) "
        "AND (?4 IS NULL OR model = ?4) ORDER BY id DESC", [kind, judge, rubric_hash, model])
    names = [c[0] for c in cur.description]
    out = []
    for row in cur.fetchall():
        record = dict(zip(names, row, strict=True))
        record["params"], record["result"] = store.loads(record["params"]), store.loads(record["result"])
        out.append(record)
    return out


def get_check(db: sqlite_utils.Database, check_id: int) -> dict[str, Any]:
    """One stored check by id (as ``list_checks`` gives them); JudgeError when there is none."""
    cur = db.execute("SELECT id, kind, judge, rubric, rubric_hash, model, temperature, params, result, created_at, by "
                     "FROM judge_checks WHERE id = ?", [check_id])
    row = cur.fetchone()
    if row is None:
        raise JudgeError(f"judge check {check_id!r} does not exist")
    record = dict(zip([c[0] for c in cur.description], row, strict=True))
    record["params"], record["result"] = store.loads(record["params"]), store.loads(record["result"])
    return record


def update_check(db: sqlite_utils.Database, check_id: int, *, params: dict[str, Any] | None = None,
                 result: dict[str, Any] | None = None) -> None:
    """Replace a stored check's ``params`` and/or ``result`` (an alignment resumed after its batches)."""
    with store.transaction(db):
        if params is not None:
            db.execute("UPDATE judge_checks SET params = ? WHERE id = ?", [store.dumps(params), check_id])
        if result is not None:
            db.execute("UPDATE judge_checks SET result = ? WHERE id = ?", [store.dumps(result), check_id])
