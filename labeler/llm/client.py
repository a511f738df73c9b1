"""The client side of ``labeler.llm``: configuration and prices, the request records, structured
output (strict JSON schemas, the request body in each mode, validating an answer) and the cache key
of a request (``task_hash``). Both runners (``direct`` and ``batch``) build requests here, so a
request is the same whichever engine sends it."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import openai
import pydantic

from ..db import dumps
from ..errors import LLMError

log = logging.getLogger("labeler.llm")

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
RETRY_STATUS = {408, 409, 429}
RESERVED_PARAMS = frozenset({"messages", "model", "response_format", "stream", "stream_options", "n",
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
    batch_input_price_per_1m: float | None = None
    batch_output_price_per_1m: float | None = None
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

    def batch_prices(self) -> tuple[float, float] | None:
        """(input, output) USD per 1M tokens through the Batch API: the configured batch prices, else
        half the direct prices (OpenAI's batch discount)."""
        direct = self.prices()
        configured = (self.batch_input_price_per_1m, self.batch_output_price_per_1m)
        if direct is None and None in configured:
            return None
        return (configured[0] if configured[0] is not None else direct[0] / 2,  # type: ignore[index]
                configured[1] if configured[1] is not None else direct[1] / 2)  # type: ignore[index]

    def cost(self, prompt_tokens: int, completion_tokens: int, *, batch: bool = False) -> float | None:
        prices = self.batch_prices() if batch else self.prices()
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
    (None for unknown prices) at the expected output size and at ``max_tokens`` (``cost_max``);
    ``cost_batch``/``cost_batch_max`` the same at Batch API prices."""

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
    cost_batch: float | None = None
    cost_batch_max: float | None = None


# --- requests, schemas and hashes ------------------------------------------------------------

@functools.lru_cache(maxsize=256)
def model_schema(model: type[pydantic.BaseModel]) -> str:
    return dumps(model.model_json_schema())


def json_schema_for(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The model's JSON schema made "strict" as OpenAI requires: every object closed
    (``additionalProperties: false``), every property required, ``$ref`` with siblings inlined."""
    schema = json.loads(model_schema(model))
    return strict_schema(schema, schema)


def strict_schema(node: Any, root: dict[str, Any]) -> Any:
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
            out[key] = {name: strict_schema(sub, root) for name, sub in out[key].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = strict_schema(out[key], root)
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        if isinstance(out.get(key), list):
            out[key] = [strict_schema(sub, root) for sub in out[key]]
    if out.get("type") == "object" or "properties" in out:
        out.setdefault("additionalProperties", False)
        out["required"] = list(out.get("properties", {}))
    if "default" in out and out["default"] is None:
        del out["default"]
    return out


def schema_name_of(model: type[pydantic.BaseModel] | str) -> str:
    name = model if isinstance(model, str) else model.__name__
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "answer"


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
               "schema_name": task.schema.__name__, "schema": json.loads(model_schema(task.schema))}
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


_FENCED = re.compile(r"\s*```(?:json)?\s*(.*?)\s*```\s*", flags=re.S)


def _strip_fences(text: str) -> str:
    # json_object / prompt-mode servers (Ollama, small models) often wrap JSON in ``` fences.
    if "```" not in text:
        return text
    match = _FENCED.fullmatch(text)
    return match.group(1) if match else text


def short_error(error: pydantic.ValidationError | Exception, limit: int = 400) -> str:
    if isinstance(error, pydantic.ValidationError):
        text = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}"
                         for e in error.errors(include_url=False))
    else:
        text = str(error)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def api_message(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    message = body.get("message") if isinstance(body, dict) else None
    return short_error(Exception(message or error.message), 300)


@functools.cache
def _create_params() -> frozenset[str]:
    from openai.resources.chat import AsyncCompletions

    return frozenset(inspect.signature(AsyncCompletions.create).parameters) - RESERVED_PARAMS - {"self"}


class CallFailed(Exception):
    """An item ends as failed with this reason (after storing what was spent)."""


def request_body(config: LLMConfig, task: Task, messages: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """The keyword arguments of ``chat.completions.create`` for ``task`` in structured-output ``mode``;
    parameters the client does not know (vLLM's ``top_k``) go in ``extra_body``."""
    body: dict[str, Any] = {"model": config.model}
    extra: dict[str, Any] = {}
    for name, value in request_params(config, task).items():
        # Server-specific parameters (vLLM's top_k, Ollama's options) go in the JSON body as is.
        (body if name in _create_params() else extra)[name] = value
    if extra:
        body["extra_body"] = extra
    schema = json_schema_for(task.schema)
    if mode == "json_schema":
        body["messages"] = messages
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": schema_name_of(task.schema), "schema": schema, "strict": True}}
    else:
        body["messages"] = _with_schema_prompt(messages, schema)
        if mode == "json_object":
            body["response_format"] = {"type": "json_object"}
    return body


def completion_content(completion: Any) -> tuple[str, bool]:
    """The answer text of a chat completion (the client's object, or its JSON as a dict, as a batch
    output line holds it) and whether it was cut at ``max_tokens``; raises ``CallFailed`` on a
    refusal, a content filter or an empty answer."""
    if isinstance(completion, dict):
        choices = completion.get("choices") or []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        message = choice.get("message") or {}
        content, refusal, finish = message.get("content"), message.get("refusal"), choice.get("finish_reason")
    else:
        choices = completion.choices
        choice = choices[0] if choices else None
        message = choice.message if choice else None
        content, refusal = (message.content, getattr(message, "refusal", None)) if message else (None, None)
        finish = choice.finish_reason if choice else None
    if not choices:
        raise CallFailed("empty response: no choices")
    if refusal:
        raise CallFailed(f"refusal: {short_error(Exception(refusal), 300)}")
    if finish == "content_filter":
        raise CallFailed("refusal: blocked by the server's content filter")
    if not isinstance(content, str) or not content.strip():
        raise CallFailed("refusal: empty response")
    return content, finish == "length"


def validate_content(task: Task | type[pydantic.BaseModel], content: str,
                     truncated: bool) -> tuple[pydantic.BaseModel | None, str | None]:
    """(the validated answer, None) or (None, the reason it does not validate); ``task`` a task or
    its schema."""
    schema = task.schema if isinstance(task, Task) else task
    try:
        return schema.model_validate_json(_strip_fences(content)), None
    except pydantic.ValidationError as e:
        return None, ("truncated output (finish_reason=length); " if truncated else "") + short_error(e)


def repair_messages(task: Task, content: str, error: str) -> list[dict[str, Any]]:
    """The conversation that asks the model to fix its invalid ``content`` (``REPAIR_PROMPT_V1``)."""
    return [*task.messages, {"role": "assistant", "content": content},
            {"role": "user", "content": REPAIR_PROMPT_V1.format(error=error)}]
