"""What a corpus search returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchHit:
    """A found chunk: its key, public id, title, text, and the method's score (higher is better)."""

    doc_pk: int
    doc_id: str
    title: str | None
    text: str | None
    score: float
