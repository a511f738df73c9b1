"""The HTTP every source client shares: JSON in and out, retried with backoff on 429 and 5xx.

A 429 or a 5xx answer, a refused connection or a timeout is tried again up to ``retries`` times,
waiting ``Retry-After`` when the store sends it (capped at ``MAX_WAIT_S``), else an exponential
backoff with jitter; then a ``SourceError`` says what failed. Any other 4xx fails at once (a wrong
key or project does not heal by waiting). Messages name the source, the method and the path, never a
header: the keys stay out of errors and logs.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

from ..errors import SourceError

log = logging.getLogger(__name__)

RETRIES = 4
BACKOFF_S = 0.5
MAX_WAIT_S = 60.0
TIMEOUT_S = 30.0


def retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds, or an HTTP date); None if absent or bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


class Http:
    """JSON requests to one trace store (``base`` URL), with ``headers`` (the keys) sent and never shown."""

    def __init__(self, source: str, base: str, headers: Mapping[str, str] | None = None, *,
                 auth: tuple[str, str] | None = None, retries: int = RETRIES, backoff: float = BACKOFF_S,
                 timeout: float = TIMEOUT_S, sleep: Callable[[float], None] = time.sleep) -> None:
        self.source = source
        self.retries, self.backoff, self.sleep = retries, backoff, sleep
        self.client = httpx.Client(base_url=base.rstrip("/") + "/", headers=dict(headers or {}),
                                   auth=httpx.BasicAuth(*auth) if auth else None, timeout=timeout,
                                   follow_redirects=False, trust_env=False)
        self.attempts = 0  # every request sent, retries included (tests and the sync report read it)
        self.retried = 0
        # what an error body might echo back: the header values, their last word (a bearer token), auth
        self._secrets = sorted({w for v in (headers or {}).values() for w in (v, v.split()[-1] if v.split() else v)}
                               | set(auth or ()), key=len, reverse=True)

    def _clean(self, text: str) -> str:
        for secret in self._secrets:
            if len(secret) >= 4:
                text = text.replace(secret, "***")
        return text

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Http:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, path: str, params: Any = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, json=body)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        shown = path if path.startswith(("http://", "https://")) else "/" + path.lstrip("/")
        where = f"{self.source}: {method} {httpx.URL(shown).path if shown.startswith('http') else shown}"
        status: int | None = None
        for attempt in range(self.retries + 1):
            self.attempts += 1
            wait: float | None = None
            try:
                response = self.client.request(method, path.lstrip("/"), **kwargs)
            except httpx.TransportError as e:  # refused, reset, timed out: the store may be restarting
                problem = self._clean(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
            else:
                status = response.status_code
                if status < 400:
                    try:
                        return response.json()
                    except ValueError:
                        problem = f"answered {status} with a body that is not JSON"
                        if attempt >= self.retries:
                            break
                        self._pause(attempt, None, where, problem)
                        continue
                problem = self._clean(f"HTTP {status}{_detail(response)}")
                if status != 429 and status < 500:
                    hint = " (check the key: it comes from the environment or .streamlit/secrets.toml)" \
                        if status in (401, 403) else " (check the URL and the project)" if status == 404 else ""
                    raise SourceError(f"{where}: {problem}{hint}", status)
                wait = retry_after(response.headers.get("Retry-After"))
            if attempt >= self.retries:
                break
            self._pause(attempt, wait, where, problem)
        raise SourceError(f"{where}: {problem}, still failing after {self.retries + 1} attempts", status)

    def _pause(self, attempt: int, wait: float | None, where: str, problem: str) -> None:
        if wait is None:
            wait = self.backoff * (2 ** attempt) * (0.5 + random.random() / 2)  # noqa: S311 - jitter, not a secret
        wait = min(wait, MAX_WAIT_S)
        self.retried += 1
        log.info("%s: %s; trying again in %.1f s", where, problem, wait)
        self.sleep(wait)


def _detail(response: httpx.Response) -> str:
    """A short reason from the body of an error answer (its message or detail field), if any."""
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip()
        return f": {text[:200]}" if text and len(text) < 200 else ""
    if isinstance(body, dict):
        for key in ("detail", "message", "error"):
            if isinstance(body.get(key), str):
                return f": {body[key][:200]}"
    return ""
