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

The package by job: ``client`` (configuration, prices, request records, structured output, the
cache key), ``cache`` (the ``llm_calls`` cache and ledger, the estimate), ``direct`` (the direct
runner), ``batch`` (the OpenAI Batch API runner, a package: store, submitting, collecting),
``embeddings``.
"""

from __future__ import annotations

from ..errors import LLMError
from . import batch
from .cache import estimate
from .client import (
    DEFAULT_MODEL,
    MODES,
    PRICES,
    REPAIR_PROMPT_V1,
    SCHEMA_PROMPT_V1,
    Estimate,
    LLMConfig,
    Progress,
    RunSummary,
    Task,
)
from .direct import run_tasks
from .embeddings import embed
from .structured import json_schema_for, request_body, request_params, task_hash

__all__ = ["DEFAULT_MODEL", "batch", "MODES", "PRICES", "REPAIR_PROMPT_V1", "SCHEMA_PROMPT_V1", "Estimate", "LLMConfig", "LLMError",
           "Progress", "RunSummary", "Task", "embed", "estimate", "json_schema_for", "request_body",
           "request_params", "run_tasks", "task_hash"]
