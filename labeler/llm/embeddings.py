"""Embedding vectors (the corpus search's optional semantic part), cached in the ``embeddings``
table by a hash of model and text."""

from __future__ import annotations

import hashlib
import json

import openai
import pydantic
import sqlite_utils

from ..db import now, transaction
from ..errors import LLMError
from .client import LLMConfig
from .structured import api_message


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
                    raise LLMError(f"embeddings request failed: {api_message(e)}") from None
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
