"""The one door to language models: any OpenAI-compatible endpoint, structured output, and a ledger.

``run_tasks`` sends many chat requests with bounded concurrency and returns validated pydantic
objects. Each request asks for JSON matching a pydantic model (``response_format`` json_schema,
strict), falling back to ``json_object`` mode and then to a schema in the prompt for servers that
reject it; output that does not validate gets one repair request, then the item is failed with
the reason. Rate limits (honouring Retry-After), server errors, timeouts and dropped connections are
retried with exponential backoff and full jitter. Every result, success or failure, is written to
``llm_calls`` as it arrives, keyed by a hash of model, messages, parameters and schema: a rerun
reuses every success (no request, no cost), retries every failure, and a killed run loses nothing.
The API key lives only in memory: never in the database, a request record, a log line or a repr.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import logging
import os
import queue
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import openai
import pydantic
import sqlite_utils

from .db import dumps, now, transaction
from .errors import DatabaseError, LabelerError, LLMError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "gpt-4o-mini"

#: USD per 1M tokens (input, output), list prices of mid 2025. A model name matches its longest
#: prefix here (``gpt-4o-mini-2024-07-18`` -> ``gpt-4o-mini``); override with
#: ``LLMConfig(input_price_per_1m=..., output_price_per_1m=...)``. Unknown models cost ``None``.
PRICES: dict[str, tuple[float, float]] = {
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "o3": (2.00, 8.00),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
    "gpt-3.5-turbo": (0.50, 1.50),
}

#: Prompts are versioned constants: changing one changes the requests, hence the cache keys.
SCHEMA_PROMPT_V1 = (
    "Reply with one JSON object and nothing else (no prose, no code fences). "
    "It must conform to this JSON schema:\n{schema}"
)
REPAIR_PROMPT_V1 = (
    "Your reply is not valid JSON for the required schema.\nProblem: {error}\n"
    "Reply with the corrected JSON object only, nothing else."
)

# Structured-output modes, best first; a server that rejects one gets the next for the rest of the run.
MODES = ("json_schema", "json_object", "prompt")
_RETRY_STATUS = {408, 409, 429}
_RESERVED_PARAMS = frozenset({"messages", "model", "response_format", "stream", "stream_options", "n",
                              "tools", "tool_choice", "extra_headers", "extra_query", "extra_body", "timeout"})


# --- configuration and records ---------------------------------------------------------------

@dataclass(repr=False)
class LLMConfig:
    """Where and how to call the model. ``api_key`` is kept as a ``pydantic.SecretStr``.

    Prices are USD per 1M tokens; ``None`` means "look the model up in ``PRICES``".
    ``temperature=None`` and ``max_tokens=None`` leave the parameter out of the request (some
    reasoning models reject them); ``token_limit_param`` names the field that carries
    ``max_tokens`` (``max_completion_tokens`` for OpenAI's reasoning models).
    """

    model: str = DEFAULT_MODEL
    base_url: str | None = None
    api_key: str | pydantic.SecretStr | None = None
    temperature: float | None = 0
    max_tokens: int | None = 1024
    timeout_s: float = 60
    concurrency: int = 8
    max_retries: int = 5
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30
    max_retry_after_s: float = 120
    input_price_per_1m: float | None = None
    output_price_per_1m: float | None = None
    expected_output_tokens: int = 256
    token_limit_param: str = "max_tokens"
    embedding_model: str | None = None
    embedding_batch_size: int = 256

    def __post_init__(self) -> None:
        if isinstance(self.api_key, str):
            self.api_key = pydantic.SecretStr(self.api_key) if self.api_key else None
        checks = {"concurrency": self.concurrency >= 1, "max_retries": self.max_retries >= 0,
                  "timeout_s": self.timeout_s > 0, "backoff_base_s": self.backoff_base_s >= 0,
                  "backoff_max_s": self.backoff_max_s >= 0}
        for name, ok in checks.items():
            if not ok:
                raise LLMError(f"LLM setting {name}={getattr(self, name)!r} is out of range "
                               "(concurrency >= 1, max_retries >= 0, timeout_s > 0, backoffs >= 0)")
        if not self.model:
            raise LLMError("no model set: pass --model or set LABELER_MODEL")

    def __repr__(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.name != "api_key"]
        parts.insert(2, f"api_key={'***' if self.api_key else None!r}")
        return f"LLMConfig({', '.join(parts)})"

    @property
    def has_api_key(self) -> bool:
        return self.api_key is not None

    @classmethod
    def from_env(cls, secrets: Mapping[str, Any] | None = None, **overrides: Any) -> LLMConfig:
        """A config from ``secrets`` (e.g. ``st.secrets``), then the environment, then defaults.

        Reads OPENAI_API_KEY, OPENAI_BASE_URL and LABELER_MODEL (flat keys, or ``api_key``,
        ``base_url``, ``model`` in an ``[openai]`` section of secrets), and the embeddings model of
        the corpus search from ``embedding_model`` in an ``[llm]`` section or
        LABELER_EMBEDDING_MODEL (none: the search is lexical only). ``overrides`` win;
        an override of ``None`` is ignored, so CLI options can be passed through unset.
        """
        secrets = secrets or {}
        section = secrets.get("openai") if hasattr(secrets, "get") else None
        section = section if isinstance(section, Mapping) else {}

        def pick(env_name: str, short: str) -> str | None:
            for value in (secrets.get(env_name), section.get(short), os.environ.get(env_name)):
                if value:
                    return str(value)
            return None

        values: dict[str, Any] = {"api_key": pick("OPENAI_API_KEY", "api_key"),
                                  "base_url": pick("OPENAI_BASE_URL", "base_url")}
        model = pick("LABELER_MODEL", "model")
        if model:
            values["model"] = model
        llm_section = secrets.get("llm") if hasattr(secrets, "get") else None
        embedding = (llm_section.get("embedding_model") if isinstance(llm_section, Mapping) else None) \
            or os.environ.get("LABELER_EMBEDDING_MODEL")
        if embedding:
            values["embedding_model"] = str(embedding)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def prices(self) -> tuple[float, float] | None:
        """(input, output) USD per 1M tokens, or None when the model's price is unknown."""
        if self.input_price_per_1m is not None and self.output_price_per_1m is not None:
            return self.input_price_per_1m, self.output_price_per_1m
        matches = [name for name in PRICES if self.model == name or self.model.startswith(name + "-")]
        if not matches:
            return None
        table = PRICES[max(matches, key=len)]
        return (self.input_price_per_1m if self.input_price_per_1m is not None else table[0],
                self.output_price_per_1m if self.output_price_per_1m is not None else table[1])

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        prices = self.prices()
        if prices is None:
            return None
        return (prompt_tokens * prices[0] + completion_tokens * prices[1]) / 1_000_000

    def price_note(self) -> str | None:
        if self.prices() is None:
            return (f"no price known for model {self.model!r}: cost is unknown "
                    "(set input_price_per_1m and output_price_per_1m)")
        return None


@dataclass
class Task:
    """One request: ``key`` is the caller's item id, ``schema`` the pydantic model of the answer.

    ``params`` are extra request parameters (``temperature``, ``seed``, ...) that override the
    config's and are part of the cache key.
    """

    key: str
    messages: list[dict[str, Any]]
    schema: type[pydantic.BaseModel]
    params: dict[str, Any] = field(default_factory=dict)
    expected_output_tokens: int | None = None


@dataclass(frozen=True)
class Progress:
    """Passed to the ``progress`` callback once per task as it finishes."""

    completed: int
    total: int
    key: str
    status: str  # "done" | "cached" | "failed" | "cancelled"
    failed: int


@dataclass
class RunSummary:
    """What a run did. ``done``, ``cached``, ``failed`` and ``cancelled`` partition the tasks:
    ``done`` got a fresh answer, ``cached`` reused a stored one, ``failed`` lists (key, reason),
    ``cancelled`` were never started. ``results`` maps key -> validated model for done + cached;
    ``hashes`` maps every key to its ``llm_calls.hash``. Tokens, cost and requests count this run
    only (cost is None when the model's price is unknown)."""

    total: int = 0
    done: int = 0
    cached: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    requests_made: int = 0
    mode: str = MODES[0]
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    results: dict[str, pydantic.BaseModel] = field(default_factory=dict, repr=False)
    hashes: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass
class Estimate:
    """A pre-run estimate: tokens by the chars/4 rule (about +-20% for English), cost in USD
    (None for unknown prices) at the expected output size and at ``max_tokens`` (``cost_max``)."""

    tasks: int
    unique: int
    cached: int
    to_request: int
    input_tokens: int
    output_tokens: int
    cost: float | None
    cost_max: float | None
    model: str
    notes: list[str] = field(default_factory=list)


# --- requests, schemas and hashes ------------------------------------------------------------

@functools.lru_cache(maxsize=256)
def _model_schema(model: type[pydantic.BaseModel]) -> str:
    return dumps(model.model_json_schema())


def json_schema_for(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The model's JSON schema made "strict" as OpenAI requires: every object closed
    (``additionalProperties: false``), every property required, ``$ref`` with siblings inlined."""
    schema = json.loads(_model_schema(model))
    return _strict(schema, schema)


def _strict(node: Any, root: dict[str, Any]) -> Any:
    if not isinstance(node, dict):
        return node
    if "$ref" in node and len(node) > 1:
        target: Any = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    out = dict(node)
    for key in ("$defs", "definitions", "properties"):
        if isinstance(out.get(key), dict):
            out[key] = {name: _strict(sub, root) for name, sub in out[key].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = _strict(out[key], root)
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        if isinstance(out.get(key), list):
            out[key] = [_strict(sub, root) for sub in out[key]]
    if out.get("type") == "object" or "properties" in out:
        out.setdefault("additionalProperties", False)
        out["required"] = list(out.get("properties", {}))
    if "default" in out and out["default"] is None:
        del out["default"]
    return out


def _schema_name(model: type[pydantic.BaseModel]) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", model.__name__)[:64] or "answer"


def request_params(config: LLMConfig, task: Task) -> dict[str, Any]:
    """The sampling parameters sent for ``task`` (config defaults overridden by ``task.params``)."""
    params: dict[str, Any] = {}
    if config.temperature is not None:
        params["temperature"] = config.temperature
    if config.max_tokens is not None:
        params[config.token_limit_param] = config.max_tokens
    params.update(task.params)
    return params


def _hashed(value: Any) -> Any:
    # 0 and 0.0 are the same temperature: a whole float is hashed as the int (the config's default
    # temperature is the int 0, so calls cached with it keep their hash)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def task_hash(config: LLMConfig, task: Task) -> str:
    """The ``llm_calls.hash`` of a task: sha256 of model, messages, parameters and schema. Numeric
    parameters that are equal (``temperature`` 0 and 0.0) give the same hash."""
    params = {k: _hashed(v) for k, v in request_params(config, task).items()}
    payload = {"model": config.model, "messages": task.messages, "params": params,
               "schema_name": task.schema.__name__, "schema": json.loads(_model_schema(task.schema))}
    return hashlib.sha256(dumps(payload).encode()).hexdigest()


def _with_schema_prompt(messages: list[dict[str, Any]], schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Describe the schema in the (first) system message, for servers without json_schema."""
    instruction = SCHEMA_PROMPT_V1.format(schema=json.dumps(schema, ensure_ascii=False))
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system" and isinstance(out[0].get("content"), str):
        out[0]["content"] = f"{out[0]['content']}\n\n{instruction}"
    else:
        out.insert(0, {"role": "system", "content": instruction})
    return out


def _strip_fences(text: str) -> str:
    # json_object / prompt-mode servers (Ollama, small models) often wrap JSON in ``` fences.
    match = re.fullmatch(r"\s*```(?:json)?\s*(.*?)\s*```\s*", text, flags=re.S)
    return match.group(1) if match else text


def _short(error: pydantic.ValidationError | Exception, limit: int = 400) -> str:
    if isinstance(error, pydantic.ValidationError):
        text = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}"
                         for e in error.errors(include_url=False))
    else:
        text = str(error)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _api_message(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    message = body.get("message") if isinstance(body, dict) else None
    return _short(Exception(message or error.message), 300)


# --- the llm_calls store (cache + ledger) ----------------------------------------------------

def _load_cached(db: sqlite_utils.Database, hashes: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for start in range(0, len(hashes), 500):
        chunk = hashes[start:start + 500]
        marks = ",".join("?" * len(chunk))
        for h, parsed in db.execute(
                f"SELECT hash, parsed FROM llm_calls WHERE status = 'ok' AND hash IN ({marks})", chunk):
            found[h] = parsed
    return found


def _store(db: sqlite_utils.Database, row: dict[str, Any]) -> None:
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


# --- running -----------------------------------------------------------------------------------

@functools.cache
def _create_params() -> frozenset[str]:
    from openai.resources.chat import AsyncCompletions

    return frozenset(inspect.signature(AsyncCompletions.create).parameters) - _RESERVED_PARAMS - {"self"}


class _Failed(Exception):
    """An item ends as failed with this reason (after storing what was spent)."""


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


class _Run:
    def __init__(self, db: sqlite_utils.Database, config: LLMConfig, tasks: list[Task],
                 progress: Callable[[Progress], None] | None, cancel: threading.Event | None) -> None:
        self.db, self.config, self.tasks = db, config, tasks
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
        cached = _load_cached(self.db, list(units))
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
        if pending:
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
            except _Failed as e:
                error = str(e)
            except LLMError as e:
                self.fatal = self.fatal or e
                error = str(e)
            except Exception as e:  # a bug or an unexpected client error: record it, never drop the item
                log.exception("LLM request %s failed unexpectedly", unit.hash[:12])
                error = f"unexpected error: {type(e).__name__}: {_short(e)}"
            try:
                self._record(unit, model, error)
            except sqlite3.Error as e:  # cannot store: stop sending (unstored answers would be paid twice)
                self.fatal = self.fatal or DatabaseError(
                    f"cannot store an LLM result in the database: {e}; nothing more was sent, rerun to resume")

    def _record(self, unit: _Unit, model: pydantic.BaseModel | None, error: str | None) -> None:
        config, task = self.config, unit.task
        cost = config.cost(unit.prompt_tokens, unit.completion_tokens)
        request = {"model": config.model, "messages": task.messages, "params": request_params(config, task),
                   "schema_name": task.schema.__name__, "schema": json.loads(_model_schema(task.schema)),
                   "mode": unit.mode}
        if unit.repair:
            request["repair"] = unit.repair
        stamp = now()
        if unit.requests:
            _store(self.db, {
                "hash": unit.hash, "model": config.model, "request": dumps(request),
                "response": dumps(unit.raw) if unit.raw is not None else None,
                "parsed": model.model_dump_json() if model is not None else None,
                "status": "ok" if model is not None else "failed", "error": error,
                "prompt_tokens": unit.prompt_tokens, "completion_tokens": unit.completion_tokens,
                "cost": cost, "requests": unit.requests, "created_at": stamp, "updated_at": stamp})
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
        """Request, validate, and on invalid output repair once. Raises _Failed with the reason."""
        task = unit.task
        completion = await self._request(client, unit, task.messages)
        content, truncated = self._content(completion)
        try:
            return task.schema.model_validate_json(_strip_fences(content))
        except pydantic.ValidationError as e:
            first_error = ("truncated output (finish_reason=length); " if truncated else "") + _short(e)
        log.info("LLM output for %s invalid (%s); asking for a repair", unit.hash[:12], first_error)
        unit.repair = {"bad_output": content, "error": first_error}
        repair_messages = [*task.messages, {"role": "assistant", "content": content},
                           {"role": "user", "content": REPAIR_PROMPT_V1.format(error=first_error)}]
        completion = await self._request(client, unit, repair_messages)
        content, truncated = self._content(completion)
        try:
            return task.schema.model_validate_json(_strip_fences(content))
        except pydantic.ValidationError as e:
            why = ("truncated output (finish_reason=length); " if truncated else "") + _short(e)
            raise _Failed(f"invalid output after one repair attempt: {why}") from None

    @staticmethod
    def _content(completion: Any) -> tuple[str, bool]:
        if not completion.choices:
            raise _Failed("empty response: no choices")
        choice = completion.choices[0]
        message = choice.message
        refusal = getattr(message, "refusal", None)
        if refusal:
            raise _Failed(f"refusal: {_short(Exception(refusal), 300)}")
        if choice.finish_reason == "content_filter":
            raise _Failed("refusal: blocked by the server's content filter")
        if not (message.content or "").strip():
            raise _Failed("refusal: empty response")
        return message.content, choice.finish_reason == "length"

    def _body(self, task: Task, messages: list[dict[str, Any]], mode: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.config.model}
        extra: dict[str, Any] = {}
        for name, value in request_params(self.config, task).items():
            # Server-specific parameters (vLLM's top_k, Ollama's options) go in the JSON body as is.
            (body if name in _create_params() else extra)[name] = value
        if extra:
            body["extra_body"] = extra
        schema = json_schema_for(task.schema)
        if mode == "json_schema":
            body["messages"] = messages
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": _schema_name(task.schema), "schema": schema, "strict": True}}
        else:
            body["messages"] = _with_schema_prompt(messages, schema)
            if mode == "json_object":
                body["response_format"] = {"type": "json_object"}
        return body

    def _downgrade(self, mode: str, error: openai.APIStatusError) -> None:
        if self.mode == mode:  # concurrent rejections downgrade once
            self.mode = MODES[MODES.index(mode) + 1]
            note = f"server rejected response_format {mode} ({_api_message(error)}); using {self.mode}"
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
                completion = await client.chat.completions.create(**self._body(unit.task, messages, mode))
            except openai.BadRequestError as e:
                text = (_api_message(e) + " " + str(e.param or "")).lower()
                if mode != MODES[-1] and re.search(r"response_format|json_schema|json_object|schema|structured", text):
                    self._downgrade(mode, e)
                    continue
                raise _Failed(f"bad request (HTTP 400): {_api_message(e)}") from None
            except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
                raise LLMError(f"the LLM server refused the API key (HTTP {e.status_code}: {_api_message(e)}); "
                               "check OPENAI_API_KEY") from None
            except openai.NotFoundError as e:
                raise LLMError(f"the LLM server does not know model {config.model!r} or URL "
                               f"{config.base_url or 'https://api.openai.com/v1'} (HTTP 404: {_api_message(e)}); "
                               "check --model and OPENAI_BASE_URL") from None
            except openai.APIStatusError as e:
                if e.status_code not in _RETRY_STATUS and e.status_code < 500:
                    raise _Failed(f"HTTP {e.status_code}: {_api_message(e)}") from None
                kind = "rate limited" if e.status_code == 429 else "server error"
                reason = f"{kind} (HTTP {e.status_code}): {_api_message(e)}"
                wait = self._retry_after(e)
            except openai.APITimeoutError:
                reason, wait = f"timeout after {config.timeout_s:g} s", None
            except openai.APIConnectionError as e:
                reason, wait = f"connection error: {_short(e.__cause__ or e, 200)}", None
            else:
                usage = completion.usage
                unit.prompt_tokens += usage.prompt_tokens if usage else 0
                unit.completion_tokens += usage.completion_tokens if usage else 0
                unit.raw = completion.model_dump(mode="json")
                return completion
            attempt += 1
            if attempt > config.max_retries:
                raise _Failed(f"{reason} (gave up after {attempt} attempts)")
            if wait is None:  # full jitter: uniform in [0, min(cap, base * 2^attempt))
                wait = self.rng.uniform(0, min(config.backoff_max_s, config.backoff_base_s * 2 ** (attempt - 1)))
            log.info("LLM request %s: %s; retry %d/%d in %.2f s", unit.hash[:12], reason, attempt,
                     config.max_retries, wait)
            if await self._sleep(wait):
                raise _Failed(f"cancelled while waiting to retry after: {reason}")

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
              cancel: threading.Event | None = None) -> RunSummary:
    """Run ``tasks`` against the model and return a ``RunSummary``; see the module docstring.

    Blocks until every task is done, cached, failed or cancelled. Works from plain code and from
    code that already runs an event loop (then the requests run on a worker thread, and
    ``progress`` is still called on the caller's thread). Setting ``cancel`` leaves tasks not yet
    started undone (``summary.cancelled``); requests in flight finish and are stored. A progress
    callback that raises stops the run the same way and its exception is re-raised. Raises
    ``LLMError`` when the server rejects the key or the model, ``DatabaseError`` when a result
    cannot be stored; either way what was stored is kept and a rerun resumes.
    """
    tasks = list(tasks)
    seen: set[str] = set()
    for task in tasks:
        if task.key in seen:
            raise LLMError(f"duplicate task key {task.key!r}: every task needs its own key")
        if reserved := sorted(_RESERVED_PARAMS & set(task.params)):
            raise LLMError(f"task {task.key!r} sets {', '.join(reserved)} in params: labeler.llm "
                           "sets these itself (set the model in LLMConfig)")
        seen.add(task.key)
    if not config.has_api_key and not config.base_url:
        raise LLMError("no OpenAI API key: set OPENAI_API_KEY in the environment or in "
                       ".streamlit/secrets.toml (for a local server set OPENAI_BASE_URL instead)")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_Run(db, config, tasks, progress, cancel).main())
    return _run_in_thread(db, config, tasks, progress, cancel)


def _run_in_thread(db: sqlite_utils.Database, config: LLMConfig, tasks: list[Task],
                   progress: Callable[[Progress], None] | None, cancel: threading.Event | None) -> RunSummary:
    events: queue.Queue[Progress | None] = queue.Queue()
    run = _Run(db, config, tasks, events.put if progress else None, cancel)
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


def estimate(db: sqlite_utils.Database | None, config: LLMConfig, tasks: Iterable[Task]) -> Estimate:
    """Tokens and cost of running ``tasks`` now, counting only requests not already cached in ``db``.

    Input tokens are chars/4 of the messages and the schema plus 4 per message; output tokens are
    ``task.expected_output_tokens`` or ``config.expected_output_tokens``, capped at ``max_tokens``.
    """
    units: dict[str, Task] = {}
    tasks = list(tasks)
    for task in tasks:
        units.setdefault(task_hash(config, task), task)
    cached = set(_load_cached(db, list(units))) if db is not None else set()
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
        model=config.model, notes=notes)


# --- embeddings (the corpus search's optional semantic part) ----------------------------------

def _embedding_key(model: str, text: str) -> str:
    return hashlib.sha256(json.dumps([model, text], ensure_ascii=False).encode()).hexdigest()


def embed(db: sqlite_utils.Database, config: LLMConfig, texts: list[str], *,
          doc_pks: list[int | None] | None = None) -> list[list[float]]:
    """Embedding vectors of ``texts`` with ``config.embedding_model``, one per text, in order.

    Vectors are cached in the ``embeddings`` table by a hash of model and text: a text embedded
    before costs no request. The rest go to the endpoint's ``/embeddings`` in batches of
    ``config.embedding_batch_size``. ``doc_pks`` (the document each text belongs to, or None)
    marks chunk vectors, which the corpus search compares questions with.
    """
    import numpy as np

    if not config.embedding_model:
        raise LLMError("no embeddings model: set embedding_model in the [llm] section of secrets.toml "
                       "or LABELER_EMBEDDING_MODEL")
    model = config.embedding_model
    keys = [_embedding_key(model, t) for t in texts]
    found: dict[str, list[float]] = {}
    for i in range(0, len(keys), 500):
        part = list(dict.fromkeys(keys[i:i + 500]))
        marks = ",".join("?" * len(part))
        for key, blob in db.execute(f"SELECT key, vector FROM embeddings WHERE model = ? AND key IN ({marks})",
                                    [model, *part]):
            found[key] = np.frombuffer(blob, dtype=np.float32).tolist()
    first: dict[str, int] = {}  # each text not cached yet, once
    for i, key in enumerate(keys):
        if key not in found:
            first.setdefault(key, i)
    missing = list(first.values())
    if missing:
        api_key = config.api_key.get_secret_value() if isinstance(config.api_key, pydantic.SecretStr) else None
        client = openai.OpenAI(api_key=api_key or "unused", base_url=config.base_url, timeout=config.timeout_s,
                               max_retries=config.max_retries)
        try:
            for start in range(0, len(missing), config.embedding_batch_size):
                batch = missing[start:start + config.embedding_batch_size]
                try:
                    response = client.embeddings.create(model=model, input=[texts[i] for i in batch])
                except openai.APIStatusError as e:
                    raise LLMError(f"embeddings request failed: {_api_message(e)}") from None
                except openai.APIError as e:
                    raise LLMError(f"embeddings request failed: {e}") from None
                vectors = [d.embedding for d in sorted(response.data, key=lambda d: d.index)]
                rows = []
                for i, vector in zip(batch, vectors, strict=True):
                    found[keys[i]] = vector
                    rows.append((keys[i], model, doc_pks[i] if doc_pks else None, len(vector),
                                 np.asarray(vector, dtype=np.float32).tobytes(), now()))
                with transaction(db):
                    db.conn.executemany("INSERT OR REPLACE INTO embeddings (key, model, doc_pk, dims, vector, created_at) "
                                        "VALUES (?, ?, ?, ?, ?, ?)", rows)
        finally:
            client.close()
    if doc_pks:
        marked = [(doc_pks[i], keys[i], model) for i in range(len(keys)) if doc_pks[i] is not None]
        with transaction(db):
            db.conn.executemany("UPDATE embeddings SET doc_pk = ? WHERE key = ? AND model = ? AND doc_pk IS NULL",
                                marked)
    return [found[k] for k in keys]
