"""The client side of ``labeler.llm``: configuration and prices, and the records of requests and
runs (``Task``, ``Progress``, ``RunSummary``, ``Estimate``). What a request is on the wire (strict
JSON schemas, the body in each mode, validating an answer, the cache key) is in ``structured``."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import pydantic

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
