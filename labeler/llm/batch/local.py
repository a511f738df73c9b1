"""Local batches: judges on a team's own GPUs. ``write_requests`` writes the request lines the
Batch API would get (``custom_id`` = the request's cache hash, ``method``, ``url``, ``body``) to a
file that ``vllm run-batch -i FILE -o RESULTS --model MODEL`` reads, and stores them as a batch in
state ``local`` (requests already answered in the cache are left out, as ``submit`` does).
``collect_file`` reads the runner's output file (one line per request: ``id``, ``custom_id``,
``response`` {``status_code``, ``request_id``, ``body``}, ``error``, which vLLM writes as a string or
an error object) and stores every line exactly as a collected Batch API line is stored
(``collecting.store_parsed``): the answer validated and cached under its hash, so a rerun pays
nothing; the ledger at the local price (``price_per_1k`` USD per 1,000 tokens, default 0); a bad
line recorded in ``llm_calls`` with its reason and its item failed, so a later run sends it again.
A request with no line in the file fails the same way. When every batch of a run is collected,
the run's owner reads its results back. A malformed file is refused before anything is stored,
naming FILE:LINE and the field.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import sqlite_utils

from ...accounts.manage import require
from ...db import now, transaction
from ...errors import LLMError
from ..cache import call_row, store_many
from ..client import LLMConfig, Task
from .collecting import Collected, finish_runs, run_config, store_parsed
from .store import LOCAL, Submitted, owner_of, set_batch, stored_batches
from .submitting import file_lines, todo, write_parts

MAX_PROBLEMS = 5  # malformed lines named in the error
_CHUNK = 2_000  # lines stored per transaction

Parsed = tuple[str | None, int | None, Any, str | None]


def write_requests(db: sqlite_utils.Database, config: LLMConfig, tasks: Iterable[Task], path: str | os.PathLike, *,
                   owner: str, run_id: int) -> Submitted:
    """Write the requests of ``tasks`` not already answered in the cache to ``path`` (JSONL, the
    Batch API's input lines) and store them as one local batch of run ``run_id`` of ``owner``. The
    file is replaced whole (empty when everything is cached); nothing is sent anywhere."""
    owner_of(owner)
    counts = {"cached": 0, "sent": 0}
    path = Path(path)
    keys = write_parts(db, config, todo(db, config, tasks, counts), owner=owner, run_id=run_id,
                       max_lines=sys.maxsize, max_bytes=sys.maxsize, state=LOCAL)
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb") as f:
            for key in keys:
                for line in file_lines(db, key):
                    f.write(line)
        os.replace(partial, path)
    except OSError as e:
        _forget(db, keys)
        raise LLMError(f"cannot write {path}: {e.strerror or e}") from None
    for key in keys:
        set_batch(db, key, input_file_id=str(path.resolve()))
    batches = stored_batches(db, f"key IN ({', '.join('?' * len(keys))})", keys) if keys else []
    return Submitted(owner, run_id, batches, cached=counts["cached"], sent=counts["sent"])


def _forget(db: sqlite_utils.Database, keys: list[str]) -> None:
    with transaction(db):
        for key in keys:
            db.execute("DELETE FROM llm_batch_items WHERE batch_key = ?", [key])
            db.execute("DELETE FROM llm_batches WHERE key = ?", [key])


# --- reading a results file -----------------------------------------------------------------------------

def _reason(error: Any) -> str:
    """vLLM writes a failed line's error as a string, or as an error object ({"error": {...}} or
    its older flat form {"message", "type", "code"}); the Batch API as {"code", "message"}."""
    if isinstance(error, str):
        return error.strip() or "error"
    inner = error.get("error") if isinstance(error.get("error"), dict) else error
    code = inner.get("code") or inner.get("type") or "error"
    return f"{code}: {inner.get('message') or ''}".strip()


def parse_result(raw: str) -> tuple[Parsed, None] | tuple[None, str]:
    """One line of a results file as ``(custom_id, status_code, body, error)``, or the problem
    (``field: what is wrong``) that makes it unreadable."""
    try:
        line = json.loads(raw)
    except ValueError as e:
        return None, f"not JSON ({e.msg} at column {e.colno})"
    if not isinstance(line, dict):
        return None, f"not a JSON object (a {type(line).__name__})"
    h = line.get("custom_id")
    if not isinstance(h, str) or not h:
        return None, "custom_id: missing (every line names the request it answers)"
    response, error = line.get("response"), line.get("error")
    if response is not None and not isinstance(response, dict):
        return None, f"response: must be an object or null; got {type(response).__name__}"
    if error is not None and not isinstance(error, str | dict):
        return None, f"error: must be a string, an object or null; got {type(error).__name__}"
    status = (response or {}).get("status_code", 200 if response is not None else None)
    if response is not None and (isinstance(status, bool) or not isinstance(status, int)):
        return None, f"response.status_code: must be a whole number; got {status!r}"
    body = (response or {}).get("body")
    if body is not None and not isinstance(body, dict):
        return None, f"response.body: must be an object or null; got {type(body).__name__}"
    if error is None and (status != 200 or body is None):
        if response is None:
            return None, "response: missing, and no error says why"
        if body is None:
            return None, "response.body: missing, and no error says why"
    return (h, status, body, None if error is None else _reason(error)), None


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with open(path, encoding="utf-8") as f:
            for n, raw in enumerate(f, 1):
                if raw.strip():
                    yield n, raw
    except FileNotFoundError:
        raise LLMError(f"{path}: no such results file (vllm run-batch -o writes it)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LLMError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None


def check_file(path: Path) -> int:
    """Read the whole file once; raise LLMError naming FILE:LINE and the field of the first
    malformed lines (and of a custom_id given twice). Returns the number of lines."""
    problems: list[str] = []
    seen: dict[str, int] = {}
    count = 0
    for n, raw in _lines(path):
        count += 1
        parsed, problem = parse_result(raw)
        if parsed is not None and parsed[0] in seen:
            problem = f"custom_id: {parsed[0]} is also on line {seen[parsed[0]]}"
        elif parsed is not None:
            seen[parsed[0]] = n
        if problem:
            problems.append(f"{path}:{n}: {problem}")
            if len(problems) >= MAX_PROBLEMS:
                break
    if problems:
        raise LLMError("malformed results file, nothing was stored: " + "; ".join(problems)
                       + ("; ..." if len(problems) >= MAX_PROBLEMS else ""))
    if not count:
        raise LLMError(f"{path} is empty: vllm run-batch writes one line per request")
    return count


# --- collecting ----------------------------------------------------------------------------------------

def collect_file(db: sqlite_utils.Database, config: LLMConfig, path: str | os.PathLike, *,
                 price_per_1k: float = 0.0, by: str | None = None) -> Collected:
    """Store the lines of a local runner's results file (see the module docstring) and finish the
    runs whose batches are now all collected. Collecting the same file again changes nothing.
    ``by`` (the signed-in account) must be allowed to run LLM jobs (``None`` is the local operator)."""
    require(db, by, "llm", "collecting a results file")
    if isinstance(price_per_1k, bool) or not isinstance(price_per_1k, int | float) or not price_per_1k >= 0:
        raise LLMError(f"--price-per-1k must be a number of USD >= 0 per 1,000 tokens, e.g. 0.0002; got {price_per_1k!r}")
    path = Path(path)
    check_file(path)
    per_1m = float(price_per_1k) * 1000
    result = Collected()
    open_keys: dict[str, str] = {}  # hash -> the local batch whose open item it answers
    known = unknown = 0
    also: list[tuple[str, str, str]] = []  # (batch, batch that stores the answer, hash): written twice
    pending: list[tuple[str, Parsed]] = []
    contexts: dict[str, Any] = {}

    def context(key: str) -> tuple[LLMConfig, Any]:
        """The config a batch was built with and its answers' schema."""
        if key not in contexts:
            row = db.execute("SELECT owner, run_id, config FROM llm_batches WHERE key = ?", [key]).fetchone()
            contexts[key] = (run_config(config, row[2]), owner_of(row[0]).schema(db, row[1]))
        return contexts[key]

    def flush() -> None:
        by_key: dict[str, list[Parsed]] = {}
        for key, parsed in pending:
            by_key.setdefault(key, []).append(parsed)
        for key, chunk in by_key.items():
            cfg, schema = context(key)
            store_parsed(db, cfg, key, chunk, schema, {}, result, prices=(per_1m, per_1m), engine="local")
        pending.clear()

    for _, raw in _lines(path):
        parsed, _ = parse_result(raw)
        h = parsed[0]
        keys = _open_items(db, h)
        if not keys:
            if db.execute("SELECT 1 FROM llm_batch_items i JOIN llm_batches b ON b.key = i.batch_key "
                          "WHERE i.hash = ? AND b.state IN (?, 'completed') AND b.input_file_id IS NOT NULL "
                          "AND b.batch_id IS NULL", [h, LOCAL]).fetchone():
                known += 1  # collected before
            else:
                unknown += 1
            continue
        key = open_keys[h] = keys[0]
        also.extend((other, key, h) for other in keys[1:])
        pending.append((key, parsed))
        if len(pending) >= _CHUNK:
            flush()
    flush()
    if not open_keys and not known:
        raise LLMError(f"no line of {path} answers a request written by labeler judge run --batch-file "
                       f"({unknown} unknown custom_id values): is it the results of another database's requests?")
    with transaction(db):  # a request written to two files before either was collected: answered once
        db.conn.executemany("UPDATE llm_batch_items SET state = (SELECT state FROM llm_batch_items WHERE "
                            "batch_key = ?2 AND hash = ?3) WHERE batch_key = ?1 AND hash = ?3", also)
    touched: set[tuple[str, int]] = set()
    for key in sorted(set(open_keys.values()) | {other for other, _, _ in also}):
        touched.add(_close(db, context(key)[0], key, path, result))
    finish_runs(db, config, touched, result)
    if known:
        result.notes.append(f"{known} lines of {path} were collected before (left as they were)")
    if unknown:
        result.notes.append(f"{unknown} lines of {path} answer no request of this database (left out)")
    return result


def _open_items(db: sqlite_utils.Database, h: str) -> list[str]:
    """The uncollected local batches with an unanswered item of hash ``h``, oldest first."""
    return [key for (key,) in db.execute(
        "SELECT b.key FROM llm_batch_items i JOIN llm_batches b ON b.key = i.batch_key "
        "WHERE i.hash = ? AND i.state = 'sent' AND b.state = ? AND b.collected_at IS NULL "
        "ORDER BY b.created_at, b.key", [h, LOCAL])]


def _close(db: sqlite_utils.Database, config: LLMConfig, key: str, path: Path, result: Collected) -> tuple[str, int]:
    """Finish local batch ``key``: a line answered badly stays failed (no direct retry: a later run
    sends it again), a request with no line in ``path`` fails with that reason; then the batch is
    collected. Returns its (owner, run)."""
    reason = f"no line in {path} answers this request"
    missing = db.execute("SELECT hash, request FROM llm_batch_items WHERE batch_key = ? AND state = 'sent'",
                         [key]).fetchall()
    bad = db.execute("SELECT count(*) FROM llm_batch_items WHERE batch_key = ? AND state = 'retry'", [key]).fetchone()[0]
    with transaction(db):
        store_many(db, [call_row(h, config, request, model=None, error=reason, raw=None, prompt_tokens=0,
                                 completion_tokens=0, requests=0, cost=None) for h, request in missing])
        db.execute("UPDATE llm_batch_items SET state = 'failed' WHERE batch_key = ? AND state IN ('sent', 'retry')",
                   [key])
        states = dict(db.execute("SELECT state, count(*) FROM llm_batch_items WHERE batch_key = ? GROUP BY state",
                                 [key]).fetchall())
    result.failed += bad + len(missing)  # refusals were counted as they were stored
    set_batch(db, key, state="completed", output_file_id=str(path.resolve()), completed=states.get("ok", 0),
              failed=states.get("failed", 0), collected=states.get("ok", 0) + states.get("failed", 0),
              collected_at=now())
    if missing:
        result.notes.append(f"{len(missing)} requests of {key} have no line in {path}: recorded as failed")
    result.batches.append(key)
    owner, run_id = db.execute("SELECT owner, run_id FROM llm_batches WHERE key = ?", [key]).fetchone()
    return owner, int(run_id)
