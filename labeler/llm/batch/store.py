"""Stored batches: the runs that hand work to batches (owners), the ``llm_batches`` records and what
a run's batches cost. Reads and small updates of the store only; submitting is ``submitting``,
collecting ``collecting``."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pydantic
import sqlite_utils

from ...db import now, transaction
from ...errors import LLMError
from ..client import LLMConfig

MAX_LINES = 50_000
MAX_BYTES = 190 * 1024 * 1024
ENDPOINT = "/v1/chat/completions"
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
LOCAL = "local"  # a batch written to a file for a local runner, waiting for its results file (``local``)


# --- owners: the runs that hand work to batches ---------------------------------------------------

@dataclass(frozen=True)
class BatchOwner:
    """A kind of run that submits batches: ``schema(db, run_id)`` is the answer model of its
    requests; ``finish(db, config, run_id)`` reads the run's results back once every batch is
    collected (``run_tasks(..., cached_only=True)``)."""

    kind: str
    schema: Callable[[sqlite_utils.Database, int], type[pydantic.BaseModel]]
    finish: Callable[[sqlite_utils.Database, LLMConfig, int], Any]


_OWNERS: dict[str, BatchOwner] = {}


def register_owner(owner: BatchOwner) -> BatchOwner:
    _OWNERS[owner.kind] = owner
    return owner


def owner_of(kind: str) -> BatchOwner:
    if kind not in _OWNERS:  # the built-in owners register when their package is imported
        try:
            importlib.import_module(f"labeler.{kind}")
        except ImportError:
            pass
    if kind not in _OWNERS:
        raise LLMError(f"unknown batch owner {kind!r}; known: {', '.join(sorted(_OWNERS)) or 'none'}")
    return _OWNERS[kind]


# --- records ------------------------------------------------------------------------------------------

@dataclass
class BatchInfo:
    """One stored batch (``batch_id`` None until the provider created it)."""

    key: str
    owner: str
    run_id: int
    part: int
    model: str
    state: str
    requests: int
    completed: int = 0
    failed: int = 0
    collected: int = 0
    bytes: int = 0
    batch_id: str | None = None
    input_file_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    created_at: str | None = None
    updated_at: str | None = None
    collected_at: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Submitted:
    """What ``submit`` did: the batches created, requests answered from the cache, lines sent."""

    owner: str
    run_id: int
    batches: list[BatchInfo]
    cached: int
    sent: int

    def to_dict(self) -> dict[str, Any]:
        return {"owner": self.owner, "run_id": self.run_id, "cached": self.cached, "sent": self.sent,
                "batches": [b.batch_id for b in self.batches]}


_COLUMNS = [f.name for f in dataclasses.fields(BatchInfo)]


def stored_batches(db: sqlite_utils.Database, where: str = "1", params: Iterable[Any] = ()) -> list[BatchInfo]:
    cur = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM llm_batches WHERE {where} ORDER BY created_at, key",
                     list(params))
    return [BatchInfo(*row) for row in cur.fetchall()]


def list_batches(db: sqlite_utils.Database, *, owner: str | None = None, run_id: int | None = None) -> list[BatchInfo]:
    """The stored batches (all, or one run's), oldest first. Reads the database only; ``refresh``
    asks the provider for their state."""
    return stored_batches(db, "(?1 IS NULL OR owner = ?1) AND (?2 IS NULL OR run_id = ?2)", [owner, run_id])


def set_batch(db: sqlite_utils.Database, key: str, **values: Any) -> None:
    values["updated_at"] = now()
    with transaction(db):
        db.execute(f"UPDATE llm_batches SET {', '.join(f'{k} = ?' for k in values)} WHERE key = ?",
                   [*values.values(), key])



def run_spend(db: sqlite_utils.Database, owner: str, run_id: int) -> tuple[int, int, float | None, int]:
    """(prompt tokens, completion tokens, cost, answered lines) of a run's batches."""
    pt, ct, cost, n = db.execute(
        "SELECT coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), sum(cost), "
        "(SELECT count(*) FROM llm_batch_items i JOIN llm_batches x ON x.key = i.batch_key "
        " WHERE x.owner = ?1 AND x.run_id = ?2 AND i.state = 'ok') "
        "FROM llm_batches WHERE owner = ?1 AND run_id = ?2", [owner, run_id]).fetchone()
    return int(pt), int(ct), cost, int(n)


def ages(batches: list[BatchInfo]) -> dict[str, str]:
    """A short age ("3 h", "2 d") per batch key, from ``created_at``."""
    from datetime import UTC, datetime

    out = {}
    for b in batches:
        try:
            seconds = (datetime.now(UTC) - datetime.fromisoformat(str(b.created_at).replace("Z", "+00:00"))).total_seconds()
        except ValueError:
            out[b.key] = "?"
            continue
        for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
            if seconds >= size:
                out[b.key] = f"{int(seconds // size)} {unit}"
                break
        else:
            out[b.key] = f"{int(seconds)} s"
    return out
