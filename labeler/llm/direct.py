"""The direct runner: many chat requests at once with bounded concurrency, each validated (one
repair request for invalid output) and retried on rate limits (honouring Retry-After), server
errors, timeouts and dropped connections with exponential backoff and full jitter. Every result is
written to ``llm_calls`` as it arrives (see ``cache``), so a killed run loses nothing."""

from __future__ import annotations

import asyncio
import logging
import queue
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import openai
import pydantic
import sqlite_utils

from .. import privacy
from ..errors import DatabaseError, LabelerError, LLMError
from .cache import (
    call_row,
    failure_reasons,
    load_cached,
    redact_answer,
    redact_tasks,
    request_record,
    store_call,
)
from .client import MODES, RESERVED_PARAMS, RETRY_STATUS, LLMConfig, Progress, RunSummary, Task
from .structured import (
    CallFailed,
    api_message,
    completion_content,
    repair_messages,
    request_body,
    short_error,
    task_hash,
    validate_content,
)

log = logging.getLogger("labeler.llm")

@dataclass
class _Unit:
    """One distinct request (tasks with the same hash share it)."""

    hash: str
    task: Task
    keys: list[str]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    raw: Any = None
    repair: dict[str, Any] | None = None
    mode: str = MODES[0]
    prior: tuple[str, bool] | None = None  # a batch's invalid answer (content, truncated): repair it first


class _Run:
    def __init__(self, db: sqlite_utils.Database, config: LLMConfig, tasks: list[Task],
                 progress: Callable[[Progress], None] | None, cancel: threading.Event | None, *,
                 cached_only: bool = False, prior: dict[str, tuple[str, bool]] | None = None) -> None:
        self.redactor = privacy.redactor_for(db)
        # redacted before hashing: the cache key is of what is sent and stored, never of raw text
        self.db, self.config, self.tasks = db, config, list(redact_tasks(self.redactor, tasks))
        self.cached_only, self.prior = cached_only, prior or {}
        self.progress, self.user_cancel = progress, cancel
        self.stop = threading.Event()  # set when a progress callback raised
        self.progress_error: BaseException | None = None
        self.fatal: LabelerError | None = None
        self.mode = MODES[0]
        self.summary = RunSummary(total=len(tasks), cost=0.0 if config.prices() else None)
        self.completed = 0
        self.rng = random.Random()

    def cancelled(self) -> bool:
        return self.stop.is_set() or bool(self.user_cancel and self.user_cancel.is_set())

    def notify(self, key: str, status: str) -> None:
        self.completed += 1
        if self.progress is None or self.progress_error is not None:
            return
        try:
            self.progress(Progress(self.completed, self.summary.total, key, status, len(self.summary.failed)))
        except BaseException as e:  # e.g. Streamlit's rerun exception: stop like a cancel, re-raise later
            self.progress_error = e
            self.stop.set()

    async def main(self) -> RunSummary:
        started = time.perf_counter()
        units: dict[str, _Unit] = {}
        for task in self.tasks:
            h = task_hash(self.config, task)
            self.summary.hashes[task.key] = h
            if h in units:
                units[h].keys.append(task.key)
            else:
                units[h] = _Unit(h, task, [task.key])
        cached = load_cached(self.db, list(units))
        pending = []
        for h, unit in units.items():
            model = self._validate_cached(unit, cached.get(h))
            if model is None:
                pending.append(unit)
                continue
            for key in unit.keys:
                self.summary.results[key] = model
                self.summary.cached += 1
                self.notify(key, "cached")
        if pending and self.cached_only:
            reasons = failure_reasons(self.db, [u.hash for u in pending])
            for unit in pending:
                for key in unit.keys:
                    self.summary.failed.append((key, reasons.get(unit.hash, "no answer stored for this request")))
                    self.notify(key, "failed")
        elif pending:
            for unit in pending:
                unit.prior = self.prior.get(unit.hash)
            await self._run_pending(pending)
        if self.summary.cost is None and (note := self.config.price_note()):
            self.summary.notes.append(note)
        self.summary.mode = self.mode
        self.summary.seconds = time.perf_counter() - started
        if self.fatal is not None:
            raise self.fatal
        if self.progress_error is not None:
            raise self.progress_error
        return self.summary

    def _validate_cached(self, unit: _Unit, parsed: str | None) -> pydantic.BaseModel | None:
        if parsed is None:
            return None
        try:
            return unit.task.schema.model_validate_json(parsed)
        except pydantic.ValidationError:
            return None  # a validator changed since: ask again

    async def _run_pending(self, pending: list[_Unit]) -> None:
        key = self.config.api_key.get_secret_value() if isinstance(self.config.api_key, pydantic.SecretStr) else None
        # Local servers (Ollama, vLLM) accept any key but the client insists on one.
        client = openai.AsyncOpenAI(api_key=key or "unused", base_url=self.config.base_url,
                                    timeout=self.config.timeout_s, max_retries=0)
        semaphore = asyncio.Semaphore(self.config.concurrency)
        try:
            await asyncio.gather(*(self._one(client, semaphore, unit) for unit in pending))
        finally:
            await client.close()

    async def _one(self, client: openai.AsyncOpenAI, semaphore: asyncio.Semaphore, unit: _Unit) -> None:
        async with semaphore:
            if self.cancelled() or self.fatal is not None:
                for key in unit.keys:
                    self.summary.cancelled.append(key)
                    self.notify(key, "cancelled")
                return
            model: pydantic.BaseModel | None = None
            try:
                model = await self._answer(client, unit)
                error = None
            except CallFailed as e:
                error = str(e)
            except LLMError as e:
                self.fatal = self.fatal or e
                error = str(e)
            except Exception as e:  # a bug or an unexpected client error: record it, never drop the item
                log.exception("LLM request %s failed unexpectedly", unit.hash[:12])
                error = f"unexpected error: {type(e).__name__}: {short_error(e)}"
            try:
                self._record(unit, model, error)
            except sqlite3.Error as e:  # cannot store: stop sending (unstored answers would be paid twice)
                self.fatal = self.fatal or DatabaseError(
    f"cannot store an LLM result in the database: {e}; nothing more was sent, rerun to resume")

    def _record(self, unit: _Unit, model: pydantic.BaseModel | None, error: str | None) -> None:
        config, task = self.config, unit.task
        cost = config.cost(unit.prompt_tokens, unit.completion_tokens)
        model, why = redact_answer(self.redactor, task.schema, model)
        error = why or error
        if unit.requests:
            store_call(self.db, call_row(
    unit.hash, config, request_record(config, task, unit.mode, unit.repair), model=model, error=error,
                raw=unit.raw, prompt_tokens=unit.prompt_tokens, completion_tokens=unit.completion_tokens,
                requests=unit.requests, cost=cost, redactor=self.redactor))
        s = self.summary
        s.prompt_tokens += unit.prompt_tokens
        s.completion_tokens += unit.completion_tokens
        s.requests_made += unit.requests
        if s.cost is not None and cost is not None:
            s.cost += cost
        for key in unit.keys:
            if model is not None:
                s.results[key] = model
                s.done += 1
                self.notify(key, "done")
            elif error and error.startswith("cancelled"):
                s.cancelled.append(key)
                self.notify(key, "cancelled")
            else:
                s.failed.append((key, error or "unknown error"))
                self.notify(key, "failed")

    async def _answer(self, client: openai.AsyncOpenAI, unit: _Unit) -> pydantic.BaseModel:
        """Request, validate, and on invalid output repair once. Raises CallFailed with the reason."""
        task = unit.task
        if unit.prior is not None:  # a batch's answer that did not validate: go straight to the repair
            content, truncated = unit.prior
        else:
            content, truncated = completion_content(await self._request(client, unit, task.messages))
        model, first_error = validate_content(task, content, truncated)
        if model is not None:
            return model
        log.info("LLM output for %s invalid (%s); asking for a repair", unit.hash[:12], first_error)
        unit.repair = {"bad_output": content, "error": first_error}
        completion = await self._request(client, unit, repair_messages(task, content, first_error))
        model, why = validate_content(task, *completion_content(completion))
        if model is None:
            raise CallFailed(f"invalid output after one repair attempt: {why}")
        return model

    def _downgrade(self, mode: str, error: openai.APIStatusError) -> None:
        if self.mode == mode:  # concurrent rejections downgrade once
            self.mode = MODES[MODES.index(mode) + 1]
            note = f"server rejected response_format {mode} ({api_message(error)}); using {self.mode}"
            log.warning(note)
            self.summary.notes.append(note)

    async def _request(self, client: openai.AsyncOpenAI, unit: _Unit, messages: list[dict[str, Any]]) -> Any:
        """One completion, retried on 429 / 5xx / timeouts / connection errors."""
        config = self.config
        attempt = 0
        while True:
            mode = self.mode
            unit.mode = mode
            unit.requests += 1
            try:
                completion = await client.chat.completions.create(**request_body(config, unit.task, messages, mode))
            except openai.BadRequestError as e:
                text = (api_message(e) + " " + str(e.param or "")).lower()
                if mode != MODES[-1] and re.search(r"response_format|json_schema|json_object|schema|structured", text):
                    self._downgrade(mode, e)
                    continue
                raise CallFailed(f"bad request (HTTP 400): {api_message(e)}") from None
            except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
                raise LLMError(f"the LLM server refused the API key (HTTP {e.status_code}: {api_message(e)}); "
                               "check OPENAI_API_KEY") from None
            except openai.NotFoundError as e:
                raise LLMError(f"the LLM server does not know model {config.model!r} or URL "
                               f"{config.base_url or 'https://api.openai.com/v1'} (HTTP 404: {api_message(e)}); "
                               "check --model and OPENAI_BASE_URL") from None
            except openai.APIStatusError as e:
                if e.status_code not in RETRY_STATUS and e.status_code < 500:
                    raise CallFailed(f"HTTP {e.status_code}: {api_message(e)}") from None
                kind = "rate limited" if e.status_code == 429 else "server error"
                reason = f"{kind} (HTTP {e.status_code}): {api_message(e)}"
                wait = self._retry_after(e)
            except openai.APITimeoutError:
                reason, wait = f"timeout after {config.timeout_s:g} s", None
            except openai.APIConnectionError as e:
                reason, wait = f"connection error: {short_error(e.__cause__ or e, 200)}", None
            else:
                usage = completion.usage
                unit.prompt_tokens += usage.prompt_tokens if usage else 0
                unit.completion_tokens += usage.completion_tokens if usage else 0
                unit.raw = completion.model_dump(mode="json")
                return completion
            attempt += 1
            if attempt > config.max_retries:
                raise CallFailed(f"{reason} (gave up after {attempt} attempts)")
            if wait is None:  # full jitter: uniform in [0, min(cap, base * 2^attempt))
                wait = self.rng.uniform(0, min(config.backoff_max_s, config.backoff_base_s * 2 ** (attempt - 1)))
            log.info("LLM request %s: %s; retry %d/%d in %.2f s", unit.hash[:12], reason, attempt,
                     config.max_retries, wait)
            if await self._sleep(wait):
                raise CallFailed(f"cancelled while waiting to retry after: {reason}")

    def _retry_after(self, error: openai.APIStatusError) -> float | None:
        headers = error.response.headers
        for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
            try:
                value = float(headers.get(name, "")) * scale
            except ValueError:
                continue
            if value >= 0:
                return min(value, self.config.max_retry_after_s)
        return None

    async def _sleep(self, seconds: float) -> bool:
        """Sleep, waking early on cancel; True if cancelled."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.cancelled():
                return True
            await asyncio.sleep(min(left, 0.05))
        return self.cancelled()


def run_tasks(db: sqlite_utils.Database, config: LLMConfig, tasks: Iterable[Task], *,
              progress: Callable[[Progress], None] | None = None,
              cancel: threading.Event | None = None, cached_only: bool = False,
              prior: dict[str, tuple[str, bool]] | None = None) -> RunSummary:
    """Run ``tasks`` against the model and return a ``RunSummary``; see the package docstring.

    Blocks until every task is done, cached, failed or cancelled. Works from plain code and from
    code that already runs an event loop (then the requests run on a worker thread, and
    ``progress`` is still called on the caller's thread). Setting ``cancel`` leaves tasks not yet
    started undone (``summary.cancelled``); requests in flight finish and are stored. A progress
    callback that raises stops the run the same way and its exception is re-raised. Raises
    ``LLMError`` when the server rejects the key or the model, ``DatabaseError`` when a result
    cannot be stored; either way what was stored is kept and a rerun resumes.

    ``cached_only``: send nothing; a task without a stored answer fails with the stored reason
    (how a batch run's results are read back). ``prior`` maps a request hash to an answer a batch
    returned that did not validate (content, truncated): it gets the repair request directly.
    """
    tasks = list(tasks)
    seen: set[str] = set()
    for task in tasks:
        if task.key in seen:
            raise LLMError(f"duplicate task key {task.key!r}: every task needs its own key")
        if reserved := sorted(RESERVED_PARAMS & set(task.params)):
            raise LLMError(f"task {task.key!r} sets {', '.join(reserved)} in params: labeler.llm "
                           "sets these itself (set the model in LLMConfig)")
        seen.add(task.key)
    if not config.has_api_key and not config.base_url and not cached_only:
        raise LLMError("no OpenAI API key: set OPENAI_API_KEY in the environment or in "
                       ".streamlit/secrets.toml (for a local server set OPENAI_BASE_URL instead)")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_Run(db, config, tasks, progress, cancel, cached_only=cached_only, prior=prior).main())
    return _run_in_thread(db, config, tasks, progress, cancel, cached_only=cached_only, prior=prior)


def _run_in_thread(db: sqlite_utils.Database, config: LLMConfig, tasks: list[Task],
                   progress: Callable[[Progress], None] | None, cancel: threading.Event | None,
                   **options: Any) -> RunSummary:
    events: queue.Queue[Progress | None] = queue.Queue()
    run = _Run(db, config, tasks, events.put if progress else None, cancel, **options)
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["summary"] = asyncio.run(run.main())
        except BaseException as e:
            outcome["error"] = e
        finally:
            events.put(None)

    worker = threading.Thread(target=work, name="labeler-llm", daemon=True)
    worker.start()
    callback_error: BaseException | None = None
    while (event := events.get()) is not None:
        if progress is not None and callback_error is None:
            try:
                progress(event)
            except BaseException as e:
                callback_error = e
                run.stop.set()
    worker.join()
    if callback_error is not None:
        raise callback_error
    if "error" in outcome:
        raise outcome["error"]
    return outcome["summary"]

