"""The ``llm_calls`` table as cache and ledger: one row per distinct request (its ``task_hash``),
holding the request, the raw response, the validated output (``parsed``) and what was spent over
every attempt. Only ``ok`` rows are cache hits; a failure never overwrites a success. Both runners
write here, so an answer from a batch is a cache hit for a later direct run and the other way round.
While the setting ``redact`` is on, nothing raw is stored here: the runners send and hash tasks
whose messages are redacted (``redact_tasks``), and an answer that echoes a value is replaced by its
redacted copy (``redact_answer``) before it is stored or handed to the caller (a synthetic question,
a judge's rationale); the rows' request, response and error are redacted too (``call_row``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from typing import Any

import pydantic
import sqlite_utils

from .. import privacy
from ..db import dumps, now, transaction
from ..privacy.redactor import Redactor
from .client import Estimate, LLMConfig, Task
from .structured import json_schema_for, model_schema, request_params, task_hash


def redact_tasks(redactor: Redactor | None, tasks: Iterable[Task]) -> Iterator[Task]:
    """The tasks with the text of their messages redacted (numbered per task), or as they are when
    ``redactor`` is None; a task with nothing to replace is the same object, so its hash (the cache
    key) is unchanged."""
    for task in tasks:
        if redactor is None:
            yield task
            continue
        r = redactor.record()
        messages = [{**m, "content": r.value(m["content"])} if "content" in m else m for m in task.messages]
        yield dataclasses.replace(task, messages=messages) if r.counts else task


def redact_answer(redactor: Redactor | None, schema: type[pydantic.BaseModel],
                  model: pydantic.BaseModel | None) -> tuple[pydantic.BaseModel | None, str | None]:
    """(the answer with every value it holds replaced, None), or (None, why) when the replaced answer
    no longer validates: a model's answer that echoes a phone number is stored, and used, redacted."""
    if redactor is None or model is None:
        return model, None
    dumped = model.model_dump(mode="json")
    redacted = redactor.record().value(dumped)
    if redacted == dumped:
        return model, None
    try:
        return schema.model_validate(redacted), None
    except pydantic.ValidationError as e:
        fields = ", ".join(".".join(map(str, err["loc"])) or "value" for err in e.errors(include_url=False))
        return None, f"the answer holds personal data that cannot be replaced in: {fields}"


def _redacted_json(redactor: Redactor, value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return redactor.record().text(value)
    return redactor.record().value(value)


def load_cached(db: sqlite_utils.Database, hashes: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for start in range(0, len(hashes), 500):
        chunk = hashes[start:start + 500]
        marks = ",".join("?" * len(chunk))
        for h, parsed in db.execute(
    f"SELECT hash, parsed FROM llm_calls WHERE status = 'ok' AND hash IN ({marks})", chunk):
            found[h] = parsed
    return found


def store_call(db: sqlite_utils.Database, row: dict[str, Any]) -> None:
    """Upsert one result. Tokens, cost and requests add up over attempts (the ledger); a failure
    never overwrites a success that another process stored meanwhile."""
    with transaction(db):
        old = db.execute("SELECT status, prompt_tokens, completion_tokens, cost, requests, created_at "
                         "FROM llm_calls WHERE hash = ?", [row["hash"]]).fetchone()
        if old is not None:
            row["prompt_tokens"] += old[1] or 0
            row["completion_tokens"] += old[2] or 0
            costs = [c for c in (old[3], row["cost"]) if c is not None]
            row["cost"] = sum(costs) if costs else None
            row["requests"] += old[4] or 0
            row["created_at"] = old[5]
            if old[0] == "ok" and row["status"] != "ok":
                db.execute("UPDATE llm_calls SET prompt_tokens = ?, completion_tokens = ?, cost = ?, "
                           "requests = ?, updated_at = ? WHERE hash = ?",
                           [row["prompt_tokens"], row["completion_tokens"], row["cost"],
                            row["requests"], row["updated_at"], row["hash"]])
                return
        columns = list(row)
        db.execute(f"INSERT OR REPLACE INTO llm_calls ({', '.join(columns)}) "
                   f"VALUES ({', '.join('?' * len(columns))})", [row[c] for c in columns])


def estimate(db: sqlite_utils.Database | None, config: LLMConfig, tasks: Iterable[Task]) -> Estimate:
    """Tokens and cost of running ``tasks`` now, counting only requests not already cached in ``db``.

    Input tokens are chars/4 of the messages and the schema plus 4 per message; output tokens are
    ``task.expected_output_tokens`` or ``config.expected_output_tokens``, capped at ``max_tokens``.
    """
    units: dict[str, Task] = {}
    tasks = list(redact_tasks(privacy.redactor_for(db) if db is not None else None, tasks))
    for task in tasks:
        units.setdefault(task_hash(config, task), task)
    cached = set(load_cached(db, list(units))) if db is not None else set()
    input_tokens = output_tokens = output_max = 0
    for h, task in units.items():
        if h in cached:
            continue
        text = json.dumps(task.messages, ensure_ascii=False) + json.dumps(json_schema_for(task.schema))
        input_tokens += len(text) // 4 + 4 * len(task.messages)
        expected = task.expected_output_tokens or config.expected_output_tokens
        cap = task.params.get(config.token_limit_param, config.max_tokens)
        output_tokens += min(expected, cap) if cap else expected
        output_max += cap or expected
    notes = [note] if (note := config.price_note()) else []
    return Estimate(
        tasks=len(tasks), unique=len(units), cached=len(cached), to_request=len(units) - len(cached),
        input_tokens=input_tokens, output_tokens=output_tokens,
        cost=config.cost(input_tokens, output_tokens), cost_max=config.cost(input_tokens, output_max),
        model=config.model, notes=notes, cost_batch=config.cost(input_tokens, output_tokens, batch=True),
        cost_batch_max=config.cost(input_tokens, output_max, batch=True))



def store_many(db: sqlite_utils.Database, rows: list[dict[str, Any]]) -> None:
    """``store_call`` for many rows of distinct hashes at once (the caller holds a transaction): one
    read of the rows already there, one write."""
    if not rows:
        return
    old: dict[str, tuple] = {}
    hashes = [r["hash"] for r in rows]
    for start in range(0, len(hashes), 500):
        part = hashes[start:start + 500]
        for found in db.execute("SELECT hash, status, prompt_tokens, completion_tokens, cost, requests, created_at "
                                f"FROM llm_calls WHERE hash IN ({', '.join('?' * len(part))})", part):
            old[found[0]] = found[1:]
    fresh = []
    for row in rows:
        if row["hash"] in old:
            store_call(db, row)  # rare: an earlier attempt is there; add up the ledger row by row
        else:
            fresh.append(row)
    if fresh:
        columns = list(fresh[0])
        db.conn.executemany(f"INSERT INTO llm_calls ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                            [[r[c] for c in columns] for r in fresh])


def request_record(config: LLMConfig, task: Task, mode: str, repair: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``llm_calls.request`` records of a request: model, messages, parameters, schema, mode."""
    request = {"model": config.model, "messages": task.messages, "params": request_params(config, task),
               "schema_name": task.schema.__name__, "schema": json.loads(model_schema(task.schema)), "mode": mode}
    if repair:
        request["repair"] = repair
    return request


def call_row(h: str, config: LLMConfig, request: dict[str, Any] | str, *, model: pydantic.BaseModel | str | None,
             error: str | None, raw: Any, prompt_tokens: int, completion_tokens: int, requests: int,
             cost: float | None, redactor: Redactor | None = None) -> dict[str, Any]:
    """An ``llm_calls`` row (``model`` the validated answer, or its JSON text, already redacted:
    ``redact_answer``); with a ``redactor``, the request (a repair holds the model's raw output),
    the raw response and the error are redacted too."""
    if redactor is not None:
        request = _redacted_json(redactor, request)
        raw = _redacted_json(redactor, raw) if raw is not None else None
        error = redactor.scrub(error) if error else error
    stamp = now()
    parsed = model.model_dump_json() if isinstance(model, pydantic.BaseModel) else model
    return {"hash": h, "model": config.model, "request": request if isinstance(request, str) else dumps(request),
            "response": (raw if isinstance(raw, str) else dumps(raw)) if raw is not None else None,
            "parsed": parsed, "status": "ok" if parsed is not None else "failed", "error": error,
            "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "cost": cost,
            "requests": requests, "created_at": stamp, "updated_at": stamp}


def failure_reasons(db: sqlite_utils.Database, hashes: list[str]) -> dict[str, str]:
    """The stored reason of every failed call among ``hashes``."""
    found: dict[str, str] = {}
    for start in range(0, len(hashes), 500):
        chunk = hashes[start:start + 500]
        marks = ",".join("?" * len(chunk))
        for h, error in db.execute(
    f"SELECT hash, error FROM llm_calls WHERE status = 'failed' AND hash IN ({marks})", chunk):
            found[h] = error or "failed"
    return found
