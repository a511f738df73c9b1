"""Collecting Batch API results (``labeler.llm.batch.collect``): stream each finished batch's output
and error files, validate and store every line in ``llm_calls`` chunk by chunk with the lines' state
(so an interrupted download is read again without counting twice), retry bad lines once directly,
re-send or run directly what an expired batch never ran, and let the run's owner read its results
back once all its batches are collected. One collect at a time holds a batch (``_hold``): a second
collect started meanwhile (another terminal, a page opened by another lead) leaves it alone, so
nothing is retried or re-sent twice."""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import openai
import pydantic
import sqlite_utils

from ... import privacy
from ...accounts.manage import require
from ...db import now, transaction
from ...errors import LLMError
from ..cache import call_row, redact_answer, store_call, store_many
from ..client import LLMConfig, Task
from ..direct import run_tasks
from ..structured import CallFailed, api_message, completion_content, short_error, validate_content
from .store import LOCAL, BatchInfo, owner_of, set_batch
from .submitting import client_for, refresh, submit

_CHUNK = 2_000  # lines stored per transaction
#: How long a collect holds a batch without renewing the hold (it renews at every step): another
#: collect waits that long for a collect that was killed.
HOLD_S = 15 * 60


@dataclass
class Collected:
    """What ``collect`` did: lines stored ok / failed from the files, lines retried directly, lines
    re-batched, batches collected, and the runs whose owner read their results back."""

    batches: list[str] = field(default_factory=list)
    ok: int = 0
    failed: int = 0
    retried: int = 0
    rebatched: int = 0
    run_direct: int = 0
    finished_runs: list[tuple[str, int]] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)  # being collected by another process: left to it
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def run_config(config: LLMConfig, stored: str) -> LLMConfig:
    """``config`` with the model, temperature and prices a batch was built with."""
    return dataclasses.replace(config, **json.loads(stored))


def _task(record: dict[str, Any], h: str, schema: type[pydantic.BaseModel]) -> Task:
    return Task(key=h, messages=record["messages"], schema=schema, params=dict(record["params"]))


def collect(db: sqlite_utils.Database, config: LLMConfig, *, owner: str | None = None, run_id: int | None = None,
            direct_rest: bool = False, client: openai.OpenAI | None = None, by: str | None = None) -> Collected:
    """Collect every finished, not yet collected batch (all, or one run's); see the module docstring.
    Collecting again changes nothing. May pay for direct retries and new batches: ``by`` (the
    signed-in account) must be allowed to run LLM jobs (``None`` is the local operator)."""
    require(db, by, "llm", "collecting Batch API results")
    result = Collected()
    own = client is None
    client = client or client_for(config)
    try:
        batches = refresh(db, config, client=client, owner=owner, run_id=run_id)
        touched: set[tuple[str, int]] = set()
        token = secrets.token_hex(8)
        for b in batches:
            if b.collected_at is not None:
                continue
            if not b.finished:
                result.waiting.append(b.batch_id or b.key)
                if b.state == LOCAL:
                    result.notes.append(f"{b.key} waits for the results of {b.input_file_id}: "
                                        "labeler llm collect --file RESULTS")
                continue
            if not _hold(db, b.key, token):
                if db.execute("SELECT collected_at FROM llm_batches WHERE key = ?", [b.key]).fetchone()[0] is None:
                    result.busy.append(b.batch_id or b.key)
                continue
            try:
                _collect_one(db, config, client, b, result, direct_rest=direct_rest,
                             renew=lambda b=b: _renew(db, b, token))
            finally:
                _release(db, b.key, token)
            touched.add((b.owner, b.run_id))
        finish_runs(db, config, touched, result)
    finally:
        if own:
            client.close()
    return result


def finish_runs(db: sqlite_utils.Database, config: LLMConfig, touched: set[tuple[str, int]], result: Collected) -> None:
    """Let the owner of every run in ``touched`` whose batches are all collected read its results back."""
    for kind, run in sorted(touched):
        if db.execute("SELECT 1 FROM llm_batches WHERE owner = ? AND run_id = ? AND collected_at IS NULL",
                      [kind, run]).fetchone() is None:
            stored = db.execute("SELECT config FROM llm_batches WHERE owner = ? AND run_id = ? LIMIT 1",
                                [kind, run]).fetchone()[0]
            owner_of(kind).finish(db, run_config(config, stored), run)
            result.finished_runs.append((kind, run))


def _until(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _hold(db: sqlite_utils.Database, key: str, token: str) -> bool:
    """Take (or renew) the hold on the uncollected batch ``key`` for the collect ``token``; False
    when another collect holds it and its hold has not run out."""
    with transaction(db):
        cursor = db.execute(
            "UPDATE llm_batches SET collector = ?1, collecting_until = ?2 WHERE key = ?3 AND collected_at IS NULL "
            "AND (collector IS NULL OR collector = ?1 OR collecting_until < ?4)", [token, _until(HOLD_S), key, now()])
    return cursor.rowcount == 1


def _renew(db: sqlite_utils.Database, b: BatchInfo, token: str) -> None:
    if not _hold(db, b.key, token):
        raise LLMError(f"Batch API: collecting {b.batch_id or b.key} took longer than {HOLD_S // 60} minutes "
                       "between steps and another collect took it over; what was stored is kept")


def _release(db: sqlite_utils.Database, key: str, token: str) -> None:
    with transaction(db):
        db.execute("UPDATE llm_batches SET collector = NULL, collecting_until = NULL WHERE key = ? AND collector = ?",
                   [key, token])


def _collect_one(db: sqlite_utils.Database, config: LLMConfig, client: openai.OpenAI, b: BatchInfo,
                 result: Collected, *, direct_rest: bool, renew: Callable[[], None]) -> None:
    config = run_config(config, db.execute("SELECT config FROM llm_batches WHERE key = ?", [b.key]).fetchone()[0])
    schema = owner_of(b.owner).schema(db, b.run_id)
    label = b.batch_id or b.key
    prior: dict[str, tuple[str, bool]] = {}
    if b.state == "failed" and not b.output_file_id:
        reason = f"batch {label} failed validation: {b.error or 'no reason given'}"
        _fail_rest(db, config, b.key, reason, states=("sent",))
        result.failed += b.requests
        result.notes.append(reason)
    for file_id in (b.output_file_id, b.error_file_id):
        if file_id:
            _collect_file(db, config, client, b, file_id, schema, prior, result)
            renew()
    # lines with no answer: in a completed batch they were lost (retry directly); otherwise never run
    missing = "retry" if b.state == "completed" else "rest"
    with transaction(db):
        db.execute("UPDATE llm_batch_items SET state = ? WHERE batch_key = ? AND state = 'sent'", [missing, b.key])
    _retry_direct(db, config, b, schema, prior, result)
    renew()
    if b.state == "expired":
        _rest(db, config, client, b, schema, result, direct_rest=direct_rest)
        renew()
    elif b.state == "cancelled":
        _fail_rest(db, config, b.key, f"batch {label} was cancelled before this request ran", states=("rest",))
    spent = db.execute("SELECT count(*) FROM llm_batch_items WHERE batch_key = ? AND state IN ('ok', 'failed')",
                       [b.key]).fetchone()[0]
    set_batch(db, b.key, collected=spent, collected_at=now())
    result.batches.append(label)


def _parse_line(raw: bytes) -> tuple[str | None, int | None, Any, str | None]:
    """(custom_id, status_code, body, error) of an output or error file line."""
    try:
        line = json.loads(raw)
        h = line.get("custom_id")
        response = line.get("response") or {}
        error = line.get("error")
        reason = None
        if error:
            reason = f"{error.get('code') or 'error'}: {error.get('message') or ''}".strip()
        return h, response.get("status_code"), response.get("body"), reason
    except (ValueError, AttributeError):
        return None, None, None, "unreadable line"


def _collect_file(db: sqlite_utils.Database, config: LLMConfig, client: openai.OpenAI, b: BatchInfo, file_id: str,
                  schema: type[pydantic.BaseModel], prior: dict[str, tuple[str, bool]], result: Collected) -> None:
    chunk: list[bytes] = []
    read = 0
    lines = _download(client, file_id)
    while True:
        try:
            line = next(lines)
        except StopIteration:
            break
        except openai.APIStatusError as e:
            raise LLMError(f"Batch API: downloading {file_id} failed (HTTP {e.status_code}: {api_message(e)}); "
                           "run `labeler llm collect` again") from None
        except Exception as e:  # the connection dropped mid-file (the HTTP library's own error types)
            _store_lines(db, config, b, chunk, schema, prior, result)  # keep every complete line read
            raise LLMError(f"Batch API: download of {file_id} was interrupted after {read} lines "
                           f"({type(e).__name__}: {short_error(e, 200)}); what was read is stored: "
                           "run `labeler llm collect` again") from None
        if not line.strip():
            continue
        chunk.append(line.encode() if isinstance(line, str) else line)
        read += 1
        if len(chunk) >= _CHUNK:
            _store_lines(db, config, b, chunk, schema, prior, result)
            chunk = []
    _store_lines(db, config, b, chunk, schema, prior, result)


def _download(client: openai.OpenAI, file_id: str) -> Iterator[str]:
    """The lines of a file, streamed (never the whole file in memory)."""
    with client.files.with_streaming_response.content(file_id) as response:
        yield from response.iter_lines()


def _store_lines(db: sqlite_utils.Database, config: LLMConfig, b: BatchInfo, lines: list[bytes],
                 schema: type[pydantic.BaseModel], prior: dict[str, tuple[str, bool]], result: Collected) -> None:
    """Validate and store a chunk of output / error lines in one transaction, with their lines'
    state; lines already collected (a download read again) are skipped."""
    store_parsed(db, config, b.key, [_parse_line(raw) for raw in lines], schema, prior, result,
                 prices=config.batch_prices(), engine="batch")


def store_parsed(db: sqlite_utils.Database, config: LLMConfig, key: str,
                 parsed: list[tuple[str | None, int | None, Any, str | None]], schema: type[pydantic.BaseModel],
                 prior: dict[str, tuple[str, bool]], result: Collected, *, prices: tuple[float, float] | None,
                 engine: str) -> None:
    """Store a chunk of answered lines of batch ``key``, each ``(custom_id, status_code, body,
    error)``, in one transaction: every answer validated as a direct call's is and stored in
    ``llm_calls`` under its hash at ``prices`` (USD per 1M input and output tokens; None: unknown),
    its request record marked with ``engine``; the lines' items set ok, failed (a refusal) or retry
    (anything else). Lines of no open item of the batch (collected before, or not ours) are skipped."""
    hashes = [p[0] for p in parsed if p[0]]
    if not hashes:
        return
    open_items: dict[str, str] = {}
    for start in range(0, len(hashes), 500):
        part = hashes[start:start + 500]
        open_items.update(db.execute(
            f"SELECT hash, request FROM llm_batch_items WHERE batch_key = ? AND state = 'sent' "
            f"AND hash IN ({', '.join('?' * len(part))})", [key, *part]).fetchall())
    rows: list[dict[str, Any]] = []
    states: list[tuple[str, str, str]] = []
    redactor = privacy.redactor_for(db)
    spent = [0, 0, 0.0, False]  # prompt tokens, completion tokens, cost, cost known
    for h, status, body, error in parsed:
        if h is None or h not in open_items:
            continue  # collected before (an interrupted download read again), or not ours
        if error and error.startswith(("batch_expired", "batch_cancelled")):
            continue  # never ran: left for the rest (re-batched, run directly or failed)
        request = open_items.pop(h)
        request = request[:-1] + f', "engine": "{engine}"}}'  # the request record, marked as sent in a batch
        pt = ct = 0
        model = raw = None
        if status == 200 and isinstance(body, dict):
            raw = body
            usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
            pt, ct = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
            try:
                content, truncated = completion_content(body)
                model, error = validate_content(schema, content, truncated)
                if model is None:
                    prior[h] = (content, truncated)
                    error = f"invalid output from the batch: {error}"
                else:
                    model, error = redact_answer(redactor, schema, model)
            except CallFailed as e:
                error = str(e)
        elif error is None:
            message = (body or {}).get("error", {}).get("message") if isinstance(body, dict) else None
            error = f"HTTP {status}: {message or 'no message'}"
        cost = (pt * prices[0] + ct * prices[1]) / 1_000_000 if prices else None
        rows.append(call_row(h, config, request, model=model, error=error, raw=raw, prompt_tokens=pt,
                             completion_tokens=ct, requests=1, cost=cost, redactor=redactor))
        # a refusal is an answer (the direct runner does not retry it either); the rest are retried
        final = model is not None or (error or "").startswith("refusal")
        states.append(("ok" if model is not None else "failed" if final else "retry", key, h))
        result.ok += model is not None
        result.failed += model is None and final
        spent[0], spent[1] = spent[0] + pt, spent[1] + ct
        if cost is not None:
            spent[2], spent[3] = spent[2] + cost, True
    with transaction(db):
        store_many(db, rows)
        db.conn.executemany("UPDATE llm_batch_items SET state = ? WHERE batch_key = ? AND hash = ?", states)
        db.execute("UPDATE llm_batches SET prompt_tokens = prompt_tokens + ?, completion_tokens = "
                   "completion_tokens + ?, cost = CASE WHEN ? THEN coalesce(cost, 0) + ? ELSE cost END WHERE key = ?",
                   [spent[0], spent[1], spent[3], spent[2], key])


def _items(db: sqlite_utils.Database, key: str, state: str) -> list[tuple[str, dict[str, Any]]]:
    return [(h, json.loads(r)) for h, r in db.execute(
        "SELECT hash, request FROM llm_batch_items WHERE batch_key = ? AND state = ?", [key, state])]


def _run_direct(db: sqlite_utils.Database, config: LLMConfig, key: str, items: list[tuple[str, dict[str, Any]]],
                schema: type[pydantic.BaseModel], prior: dict[str, tuple[str, bool]] | None) -> tuple[int, int]:
    tasks = [_task(record, h, schema) for h, record in items]
    summary = run_tasks(db, config, tasks, prior=prior)
    ok = [(key, h) for h in summary.results]
    failed = [(key, h) for h, _ in summary.failed] + [(key, h) for h in summary.cancelled]
    with transaction(db):
        db.conn.executemany("UPDATE llm_batch_items SET state = 'ok' WHERE batch_key = ? AND hash = ?", ok)
        db.conn.executemany("UPDATE llm_batch_items SET state = 'failed' WHERE batch_key = ? AND hash = ?", failed)
    return len(ok), len(failed)


def _retry_direct(db: sqlite_utils.Database, config: LLMConfig, b: BatchInfo, schema: type[pydantic.BaseModel],
                  prior: dict[str, tuple[str, bool]], result: Collected) -> None:
    items = _items(db, b.key, "retry")
    if not items:
        return
    ok, failed = _run_direct(db, dataclasses.replace(config, max_retries=0), b.key, items, schema, prior)
    result.retried += len(items)
    result.ok += ok
    result.failed += failed


def _rest(db: sqlite_utils.Database, config: LLMConfig, client: openai.OpenAI, b: BatchInfo,
          schema: type[pydantic.BaseModel], result: Collected, *, direct_rest: bool) -> None:
    items = _items(db, b.key, "rest")
    if not items:
        return
    if direct_rest:
        ok, failed = _run_direct(db, config, b.key, items, schema, None)
        result.run_direct += len(items)
        result.ok += ok
        result.failed += failed
        return
    sub = submit(db, config, [_task(record, h, schema) for h, record in items], owner=b.owner, run_id=b.run_id,
                 client=client)
    with transaction(db):
        db.execute("UPDATE llm_batch_items SET state = 'rebatched' WHERE batch_key = ? AND state = 'rest'", [b.key])
    result.rebatched += sub.sent
    result.notes.append(f"batch {b.batch_id} expired: {sub.sent} requests sent again as "
                        f"{', '.join(x.batch_id or x.key for x in sub.batches)}")


def _fail_rest(db: sqlite_utils.Database, config: LLMConfig, key: str, reason: str, *, states: tuple[str, ...]) -> None:
    marks = ", ".join("?" * len(states))
    items = db.execute(f"SELECT hash, request FROM llm_batch_items WHERE batch_key = ? AND state IN ({marks})",
                       [key, *states]).fetchall()
    with transaction(db):
        for h, request in items:
            store_call(db, call_row(h, config, request, model=None, error=reason, raw=None, prompt_tokens=0,
                                completion_tokens=0, requests=0, cost=None))
        db.execute(f"UPDATE llm_batch_items SET state = 'failed' WHERE batch_key = ? AND state IN ({marks})",
                   [key, *states])
