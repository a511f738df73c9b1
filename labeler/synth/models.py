"""What a generation run is asked for (``SynthOptions``), what the model returns (the pydantic
schema of the structured output), and the seed chunk(s) a request is written from (``Seed``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pydantic

from ..errors import SynthError

QUESTION_TYPES = ("fact", "how-to", "troubleshooting", "comparison")
STRATEGIES = ("uncovered", "random", "stratified")
#: Chunk text beyond this many characters is not sent (nor used by the quote check).
MAX_CHUNK_CHARS = 6000


class GeneratedQuestion(pydantic.BaseModel):
    """One generated question as the model returns it."""

    question: str
    answer: str
    quotes: list[str]
    type: str


class GeneratedBatch(pydantic.BaseModel):
    """The model's answer for one seed: its questions."""

    questions: list[GeneratedQuestion]


@dataclass(frozen=True)
class SynthOptions:
    """What to generate. ``n`` questions in all, ``per_chunk`` per seed (so ceil(n / per_chunk)
    seeds); ``strategy``: ``uncovered`` (chunks no labeled query has as relevant first), ``random``
    or ``stratified`` (round robin over sources, else titles; uncovered first within each); in every
    strategy chunks already used as seeds by a run with another ``seed`` come last, so a new seed
    covers new chunks while a rerun with the same seed repeats its requests (cache hits).
    ``multi_hop``: share of seeds that pair a chunk with its nearest TF-IDF neighbour.
    ``language``: None = the ``synth_language`` setting, else detected from the corpus.
    ``duplicate_threshold``: TF-IDF cosine at or above which a question is a near-duplicate of an
    existing one. ``candidates_k``: chunks found by corpus search to judge per question.
    """

    n: int = 50
    per_chunk: int = 2
    seed: int = 7
    question_types: tuple[str, ...] = QUESTION_TYPES
    persona: str | None = None
    language: str | None = None
    strategy: str = "uncovered"
    multi_hop: float = 0.0
    n_examples: int = 8
    duplicate_threshold: float = 0.85
    max_question_chars: int = 300
    max_answer_chars: int = 3000
    min_chunk_chars: int = 80
    candidates_k: int = 10

    def __post_init__(self) -> None:
        object.__setattr__(self, "question_types", tuple(self.question_types))
        checks = [
            (isinstance(self.n, int) and 1 <= self.n <= 100_000, f"n={self.n!r} must be 1..100000"),
            (isinstance(self.per_chunk, int) and 1 <= self.per_chunk <= 20, f"per_chunk={self.per_chunk!r} must be 1..20"),
            (bool(self.question_types) and set(self.question_types) <= set(QUESTION_TYPES),
             f"question types {list(self.question_types)} must be some of {', '.join(QUESTION_TYPES)}"),
            (self.strategy in STRATEGIES, f"strategy {self.strategy!r} must be one of {', '.join(STRATEGIES)}"),
            (0 <= self.multi_hop <= 1, f"multi_hop={self.multi_hop!r} must be a share from 0 to 1"),
            (0 < self.duplicate_threshold <= 1, f"duplicate_threshold={self.duplicate_threshold!r} must be in (0, 1]"),
            (0 <= self.n_examples <= 50, f"n_examples={self.n_examples!r} must be 0..50"),
            (self.max_question_chars >= 10 and self.max_answer_chars >= 10, "max_*_chars must be >= 10"),
            (1 <= self.candidates_k <= 100, f"candidates_k={self.candidates_k!r} must be 1..100"),
        ]
        for ok, message in checks:
            if not ok:
                raise SynthError(f"synthetic question option {message}")

    def setting(self) -> dict[str, Any]:
        """The options that shape the questions (acceptance rates are tracked per setting); ``n``
        and ``seed`` only choose which chunks, so they are left out."""
        out = asdict(self)
        for name in ("n", "seed"):
            out.pop(name)
        out["question_types"] = list(self.question_types)
        return out


@dataclass(frozen=True)
class Seed:
    """The chunk(s) one LLM request writes questions from (two for a multi-hop question)."""

    doc_pks: tuple[int, ...]
    doc_ids: tuple[str, ...]
    titles: tuple[str | None, ...]
    texts: tuple[str, ...]

    @property
    def key(self) -> str:
        return "+".join(self.doc_ids)

    @property
    def multi_hop(self) -> bool:
        return len(self.doc_ids) > 1


