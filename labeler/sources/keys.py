"""The keys of the trace stores: read from the environment or ``.streamlit/secrets.toml`` when a sync
needs them, never stored in the database, never printed.

``PHOENIX_API_KEY`` (optional: a local Phoenix needs none), ``LANGFUSE_PUBLIC_KEY`` and
``LANGFUSE_SECRET_KEY``, ``LANGSMITH_API_KEY`` (or the older ``LANGCHAIN_API_KEY``). The
environment wins; ``.streamlit/secrets.toml`` of the working directory (where the app reads its
secrets) may hold the same names at its top level, or under ``[sources.NAME]`` for one source.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SourceError

NAMES: dict[str, tuple[tuple[str, ...], ...]] = {
    # per kind: the keys it uses, each with the names it may go by (the first is the documented one)
    "phoenix": (("PHOENIX_API_KEY",),),
    "langfuse": (("LANGFUSE_PUBLIC_KEY",), ("LANGFUSE_SECRET_KEY",)),
    "langsmith": (("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"),),
}
REQUIRED = {"phoenix": False, "langfuse": True, "langsmith": True}
SECRETS = Path(".streamlit") / "secrets.toml"


def _secrets(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SourceError(f"cannot read {path}: {type(e).__name__}") from None  # never its content


def keys_for(kind: str, name: str, *, env: Mapping[str, str] | None = None,
             secrets: Path | None = None) -> dict[str, str]:
    """``{KEY_NAME: value}`` for a source of ``kind`` called ``name``; a missing required key is a
    ``SourceError`` naming where to put it (never a value)."""
    env = os.environ if env is None else env
    table = _secrets(SECRETS if secrets is None else secrets)
    own = table.get("sources", {}).get(name, {}) if isinstance(table.get("sources"), dict) else {}
    found: dict[str, str] = {}
    for aliases in NAMES[kind]:
        for alias in aliases:
            value = env.get(alias) or (own.get(alias) if isinstance(own, dict) else None) or table.get(alias)
            if isinstance(value, str) and value.strip():
                found[aliases[0]] = value.strip()
                break
        else:
            if REQUIRED[kind]:
                raise SourceError(f"source {name}: no {aliases[0]}; set it in the environment or in "
                                  f"{SECRETS} (it is never stored in the database)")
    return found


def scrub(text: str, keys: Mapping[str, str]) -> str:
    """``text`` with every key value replaced by ``***`` (an error body that echoes a key)."""
    for value in keys.values():
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text
