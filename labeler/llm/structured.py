"""Structured output on the wire, the same for both runners (``direct`` and ``batch``): strict JSON
schemas, the request body in each mode, the cache key of a request (``task_hash``), reading and
validating an answer, the repair prompt, and short error messages."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import re
from typing import Any

import openai
import pydantic

from ..db import dumps
from .client import REPAIR_PROMPT_V1, RESERVED_PARAMS, SCHEMA_PROMPT_V1, LLMConfig, Task


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
