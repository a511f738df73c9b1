"""Submitting batches: each request built exactly as the direct runner builds it (``request_record``
-> ``batch_body``), requests already answered in ``llm_calls`` left out, the rest split into files of
at most 50,000 lines and 190 MB, uploaded and sent, every step stored first; and asking the provider
for their state (``refresh``), cancelling and waiting. A process killed between uploading a file and
creating its batch leaves a row that names both; the next call finds and reuses them."""

from __future__ import annotations

import functools
import json
import logging
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import openai
import pydantic
import sqlite_utils

from ... import privacy
from ...accounts.manage import require
from ...db import dumps, now, transaction
from ...errors import LLMError
from ..cache import load_cached, redact_tasks, request_record
from ..client import LLMConfig, Task
from ..structured import api_message, schema_name_of, short_error, strict_schema, task_hash
from .store import (
    ENDPOINT,
    MAX_BYTES,
    MAX_LINES,
    TERMINAL,
    BatchInfo,
    Submitted,
    list_batches,
    owner_of,
    set_batch,
    stored_batches,
)

log = logging.getLogger("labeler.llm")

_CONFIG_FIELDS = ("model", "temperature", "max_tokens", "token_limit_param", "input_price_per_1m",
                  "output_price_per_1m", "batch_input_price_per_1m", "batch_output_price_per_1m")



# --- requests as batch lines ---------------------------------------------------------------------------

def batch_body(record: dict[str, Any]) -> dict[str, Any]:
    """The JSON body of a batch line from an ``llm_calls`` request record: the body the direct runner
    sends in json_schema mode (server-specific parameters inline, as the client's ``extra_body`` does)."""
    return {"model": record["model"], **record["params"], "messages": record["messages"],
            "response_format": _response_format(record["schema_name"], dumps(record["schema"]))}


@functools.lru_cache(maxsize=64)
def _response_format(schema_name: str, schema_json: str) -> dict[str, Any]:
    # every line of a run has the same schema: made strict once, not 200,000 times
    schema = json.loads(schema_json)
    return {"type": "json_schema", "json_schema": {"name": schema_name_of(schema_name),
                                                   "schema": strict_schema(schema, schema), "strict": True}}


def batch_line(h: str, record: dict[str, Any]) -> str:
    """One line of a batch input file (JSONL): ``custom_id`` is the request's cache hash."""
    return dumps({"custom_id": h, "method": "POST", "url": ENDPOINT, "body": batch_body(record)})


def client_for(config: LLMConfig) -> openai.OpenAI:
    if not config.has_api_key and not config.base_url:
        raise LLMError("no OpenAI API key: set OPENAI_API_KEY in the environment or in "
                       ".streamlit/secrets.toml (for a local server set OPENAI_BASE_URL instead)")
    key = config.api_key.get_secret_value() if isinstance(config.api_key, pydantic.SecretStr) else None
    return openai.OpenAI(api_key=key or "unused", base_url=config.base_url, timeout=config.timeout_s,
                         max_retries=config.max_retries)


def _api(what: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except openai.APIStatusError as e:
        raise LLMError(f"Batch API: {what} failed (HTTP {e.status_code}: {api_message(e)})") from None
    except openai.APIError as e:
        raise LLMError(f"Batch API: {what} failed ({short_error(e, 200)}); run the command again") from None


# --- submitting ----------------------------------------------------------------------------------------

def submit(db: sqlite_utils.Database, config: LLMConfig, tasks: Iterable[Task], *, owner: str, run_id: int,
           max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES, client: openai.OpenAI | None = None) -> Submitted:
    """Send the requests of ``tasks`` not already answered in the cache as batches of run ``run_id``
    of ``owner``; returns once the batches are created (their ids and state stored). ``tasks`` is
    read once, as a stream: a generator of a million tasks is never held whole."""
    owner_of(owner)
    counts = {"cached": 0, "sent": 0}
    keys = write_parts(db, config, todo(db, config, tasks, counts), owner=owner, run_id=run_id,
                        max_lines=max_lines, max_bytes=max_bytes)
    if keys:
        own = client is None
        client = client or client_for(config)
        try:
            for key in keys:
                _send(db, client, key, recovering=False)
        finally:
            if own:
                client.close()
    return Submitted(owner, run_id, stored_batches(db, f"key IN ({', '.join('?' * len(keys))})", keys) if keys else [],
                     cached=counts["cached"], sent=counts["sent"])


def todo(db: sqlite_utils.Database, config: LLMConfig, tasks: Iterable[Task],
          counts: dict[str, int]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(hash, request record) of each distinct request not answered in the cache, in task order."""
    seen: set[str] = set()
    chunk: list[tuple[str, Task]] = []
    # redacted as the direct runner redacts: the same hashes, and nothing raw in llm_batch_items
    tasks = redact_tasks(privacy.redactor_for(db), tasks)

    def flush() -> Iterator[tuple[str, dict[str, Any]]]:
        cached = load_cached(db, [h for h, _ in chunk])
        counts["cached"] += len(cached)
        for h, task in chunk:
            if h not in cached:
                counts["sent"] += 1
                yield h, request_record(config, task, "json_schema")
        chunk.clear()

    for task in tasks:
        h = task_hash(config, task)
        if h in seen:
            continue
        seen.add(h)
        chunk.append((h, task))
        if len(chunk) >= 2_000:
            yield from flush()
    yield from flush()


def write_parts(db: sqlite_utils.Database, config: LLMConfig, todo: Iterator[tuple[str, dict[str, Any]]], *,
                 owner: str, run_id: int, max_lines: int, max_bytes: int, state: str = "building") -> list[str]:
    """Store the lines in parts of at most ``max_lines`` lines and ``max_bytes`` bytes, one
    transaction a part, rows in ``state`` ('building': to upload; 'local': written to a file for a
    local runner, :mod:`labeler.llm.batch.local`). Returns the parts' keys."""
    stored = dumps({name: getattr(config, name) for name in _CONFIG_FIELDS})
    part = db.execute("SELECT coalesce(max(part), -1) + 1 FROM llm_batches WHERE owner = ? AND run_id = ?",
                      [owner, run_id]).fetchone()[0]
    keys: list[str] = []
    pending = next(todo, None)
    while pending is not None:
        key = f"labeler-{owner}-{run_id}-{part}-{secrets.token_hex(3)}"
        lines = size = 0
        rows: list[tuple[str, str, str]] = []
        with transaction(db):
            stamp = now()
            db.execute("INSERT INTO llm_batches (key, owner, run_id, part, model, config, requests, bytes, state, "
                       "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?)",
                       [key, owner, run_id, part, config.model, stored, state, stamp, stamp])
            while pending is not None:
                h, record = pending
                line_bytes = len(batch_line(h, record).encode()) + 1
                if lines and (lines >= max_lines or size + line_bytes > max_bytes):
                    break
                rows.append((key, h, dumps(record)))
                lines, size = lines + 1, size + line_bytes
                if len(rows) >= 2_000:
                    db.conn.executemany("INSERT INTO llm_batch_items (batch_key, hash, request) VALUES (?, ?, ?)", rows)
                    rows.clear()
                pending = next(todo, None)
            db.conn.executemany("INSERT INTO llm_batch_items (batch_key, hash, request) VALUES (?, ?, ?)", rows)
            db.execute("UPDATE llm_batches SET requests = ?, bytes = ? WHERE key = ?", [lines, size, key])
        keys.append(key)
        part += 1
    return keys


def file_lines(db: sqlite_utils.Database, key: str) -> Iterator[bytes]:
    for h, request in db.execute("SELECT hash, request FROM llm_batch_items WHERE batch_key = ?", [key]):
        yield batch_line(h, json.loads(request)).encode() + b"\n"


def _send(db: sqlite_utils.Database, client: openai.OpenAI, key: str, *, recovering: bool) -> None:
    """Upload part ``key`` and create its batch, whichever of the two is not yet done. When
    ``recovering`` (an earlier process stopped half-way) the file and batch are looked up first."""
    row = stored_batches(db, "key = ?", [key])[0]
    filename = f"{key}.jsonl"
    if row.state == "building":
        file_id = _find_file(client, filename, row.bytes) if recovering else None
        if file_id is None:
            with tempfile.TemporaryFile() as fh:  # the file is streamed from the database, never held whole
                for line in file_lines(db, key):
                    fh.write(line)
                fh.seek(0)
                file_id = _api(f"uploading {filename}",
                               lambda: client.files.create(file=(filename, fh), purpose="batch")).id
        set_batch(db, key, input_file_id=file_id, state="uploaded")
        row.state, row.input_file_id = "uploaded", file_id
    if row.state == "uploaded":
        batch = _find_batch(client, key, row.input_file_id) if recovering else None
        if batch is None:
            batch = _api(f"creating the batch of {filename}", lambda: client.batches.create(
    input_file_id=row.input_file_id, endpoint=ENDPOINT, completion_window="24h",
                metadata={"labeler_key": key}))
        _update_from(db, key, batch)


def _find_file(client: openai.OpenAI, filename: str, size: int) -> str | None:
    """An uploaded file of this name from a process that stopped before storing its id: reused
    when complete, deleted when not."""
    for f in _api("listing files", lambda: list(client.files.list(purpose="batch"))):
        if f.filename != filename:
            continue
        if f.bytes == size:
            log.info("reusing uploaded file %s (%s)", f.id, filename)
            return f.id
        log.info("deleting partial upload %s (%s: %d of %d bytes)", f.id, filename, f.bytes, size)
        _api(f"deleting {f.id}", lambda f=f: client.files.delete(f.id))
    return None


def _find_batch(client: openai.OpenAI, key: str, file_id: str | None) -> Any:
    for b in _api("listing batches", lambda: list(client.batches.list(limit=100))):
        if (b.metadata or {}).get("labeler_key") == key or (file_id and b.input_file_id == file_id):
            log.info("adopting batch %s created for %s", b.id, key)
            return b
    return None


def _update_from(db: sqlite_utils.Database, key: str, batch: Any) -> None:
    counts = batch.request_counts
    errors = None
    if batch.errors and batch.errors.data:
        errors = "; ".join(f"line {e.line}: {e.message}" if e.line is not None else str(e.message)
                           for e in batch.errors.data[:5])
    set_batch(db, key, batch_id=batch.id, state=batch.status, completed=counts.completed if counts else 0,
         failed=counts.failed if counts else 0, output_file_id=batch.output_file_id,
         error_file_id=batch.error_file_id, error=errors)


def recover(db: sqlite_utils.Database, client: openai.OpenAI) -> list[str]:
    """Finish every part a stopped process left uploaded-but-not-created or half-built."""
    keys = [b.key for b in stored_batches(db, "state IN ('building', 'uploaded')")]
    for key in keys:
        _send(db, client, key, recovering=True)
    return keys


def refresh(db: sqlite_utils.Database, config: LLMConfig, *, client: openai.OpenAI | None = None,
            owner: str | None = None, run_id: int | None = None) -> list[BatchInfo]:
    """Ask the provider for the state of every unfinished batch (all, or one run's); return them all.
    When no batch waits for the provider (none, or only local ones) nothing is asked: no client is
    made, so a team that only runs local batches needs no API key."""
    if client is None and not stored_batches(
            db, "state IN ('building', 'uploaded') OR (batch_id IS NOT NULL AND state NOT IN "
                f"({', '.join('?' * len(TERMINAL))}))", sorted(TERMINAL)):
        return list_batches(db, owner=owner, run_id=run_id)
    own = client is None
    client = client or client_for(config)
    try:
        recover(db, client)
        for b in list_batches(db, owner=owner, run_id=run_id):
            if b.batch_id and not b.finished:
                _update_from(db, b.key, _api(f"reading batch {b.batch_id}", lambda b=b: client.batches.retrieve(b.batch_id)))
    finally:
        if own:
            client.close()
    return list_batches(db, owner=owner, run_id=run_id)


def cancel(db: sqlite_utils.Database, config: LLMConfig, batch_id: str, *, client: openai.OpenAI | None = None,
           by: str | None = None) -> BatchInfo:
    """Cancel batch ``batch_id`` (a batch id or labeler's key); its finished lines are still collected.
    ``by`` as in :func:`collect`."""
    require(db, by, "llm", "cancelling a batch")
    rows = stored_batches(db, "batch_id = ? OR key = ?", [batch_id, batch_id])
    if not rows or rows[0].batch_id is None:
        raise LLMError(f"no batch {batch_id!r}; `labeler llm batches` lists them")
    own = client is None
    client = client or client_for(config)
    try:
        _update_from(db, rows[0].key, _api(f"cancelling {batch_id}", lambda: client.batches.cancel(rows[0].batch_id)))
    finally:
        if own:
            client.close()
    return stored_batches(db, "key = ?", [rows[0].key])[0]


def wait(db: sqlite_utils.Database, config: LLMConfig, *, owner: str, run_id: int, poll_s: float = 30,
         progress: Callable[[int, int], None] | None = None, timeout_s: float | None = None,
         client: openai.OpenAI | None = None) -> list[BatchInfo]:
    """Poll until every batch of the run is finished; ``progress(done, total)`` on request counts."""
    started = time.monotonic()
    while True:
        batches = refresh(db, config, client=client, owner=owner, run_id=run_id)
        if progress is not None:
            progress(sum(b.completed + b.failed for b in batches), sum(b.requests for b in batches))
        if all(b.finished for b in batches):
            return batches
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            return batches
        time.sleep(poll_s)
