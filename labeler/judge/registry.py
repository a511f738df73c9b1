"""The judge registry: versioned judges, their prompts (versioned constants), answer models and
parsers, and the editable rubrics (each saved edit a new version with a content hash)."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic
import sqlite_utils

from .. import db as store
from ..accounts.manage import require
from ..errors import JudgeError

KINDS = ("relevance", "faithfulness", "answer_relevance")
VERDICTS = ("no", "partly", "yes")  # the answer judgments as grades 0, 1, 2
ANSWER_FIELDS = {"faithfulness": "answer_faithful", "answer_relevance": "answer_relevant"}
_NAME = re.compile(r"^[a-z][a-z0-9_-]*\.v\d+$")

# --- prompts and rubrics: versioned constants (a change changes every request hash) -----------------

RELEVANCE_PROMPT_V1 = """You grade search results for a question-answering assistant.
Grade how well ONE retrieved chunk helps answer the user's question.

{rubric}

The grades:
{scale}

Give a short rationale (one or two sentences), then the grade."""

RELEVANCE_RUBRIC_V1 = """Judge the chunk on its own: ignore other chunks and any answer the assistant gave.
A chunk on the right topic that lacks the information the question asks for gets a low grade.
A chunk that fully answers the question gets the highest grade.
When torn between two grades, pick the lower one."""

FAITHFULNESS_PROMPT_V1 = """You check whether an assistant's answer is supported by the chunks it was given.

{rubric}

List every claim with the number of the chunk that supports it (null when none does) and whether
it is supported, then a one-sentence rationale."""

FAITHFULNESS_RUBRIC_V1 = """Split the answer into atomic factual claims: one fact each; skip greetings, hedges
and questions back to the user. A claim is supported when a chunk states it or directly implies it.
A claim that is plausible or generally true but not in the chunks is NOT supported."""

ANSWER_RELEVANCE_PROMPT_V1 = """You judge whether an assistant's answer addresses the user's question.

{rubric}

Give a short rationale (one or two sentences), then the verdict: yes, partly or no."""

ANSWER_RELEVANCE_RUBRIC_V1 = """yes: the answer addresses what was asked (whether or not it is correct).
partly: it addresses part of the question, or answers a related but different question.
no: it does not address the question (off topic, a refusal, or only asks back)."""


# --- records -----------------------------------------------------------------------------------------

@dataclass
class JudgeItem:
    """What a judge sees: a (query, chunk) pair, or a query's answer (``doc_pk`` 0) with its chunks."""

    query_pk: int
    doc_pk: int
    question: str
    answer: str | None = None
    text: str | None = None
    title: str | None = None
    chunks: list[tuple[str | None, str | None]] = field(default_factory=list)  # (title, text), ranked

    @property
    def key(self) -> str:
        return f"{self.query_pk}:{self.doc_pk}"


@dataclass
class Verdict:
    """A parsed judgment: ``grade`` on the judge's scale (None = nothing to compare, e.g. no
    claims), ``score`` (faithfulness: supported / total claims), ``label`` (yes/partly/no)."""

    grade: int | None
    rationale: str
    score: float | None = None
    label: str | None = None
    detail: Any = None


@dataclass(frozen=True)
class Judge:
    """A registered judge. ``unit`` is "pair" (query, chunk) or "query" (the production answer).
    ``schema(settings)`` gives the answer model, ``messages(item, rubric, settings)`` the chat,
    ``parse(answer, settings)`` the Verdict."""

    name: str
    kind: str
    unit: str
    rubric: str
    schema: Callable[[dict[str, Any]], type[pydantic.BaseModel]]
    messages: Callable[[JudgeItem, str, dict[str, Any]], list[dict[str, Any]]]
    parse: Callable[[pydantic.BaseModel, dict[str, Any]], Verdict]
    description: str = ""


@dataclass
class Rubric:
    judge: str
    version: int
    text: str
    hash: str
    created_at: str | None = None
    author: str | None = None
    parent: int | None = None  # the version this one was derived from (labeler judge align)
    examples: list[dict[str, Any]] | None = None  # the few-shot examples its text carries
    origin: str | None = None  # None: written by a person; "align": a registered alignment candidate

    @property
    def name(self) -> str:
        return f"{self.judge}/r{self.version}"


# --- the registry --------------------------------------------------------------------------------------

JUDGES: dict[str, Judge] = {}


def register_judge(judge: Judge) -> Judge:
    """Add ``judge`` under its versioned name (``kind.vN``-style, lower case); returns it."""
    if not _NAME.match(judge.name):
        raise JudgeError(f"judge name {judge.name!r} is invalid: use lower case and a version, e.g. 'relevance.v2'")
    if judge.name in JUDGES:
        raise JudgeError(f"judge {judge.name!r} is already registered; register a new version (e.g. .v2)")
    if judge.kind not in KINDS:
        raise JudgeError(f"judge kind {judge.kind!r} is unknown; use one of: {', '.join(KINDS)}")
    if judge.unit not in ("pair", "query"):
        raise JudgeError(f"judge unit {judge.unit!r} is unknown; use 'pair' or 'query'")
    JUDGES[judge.name] = judge
    return judge


def get_judge(name: str) -> Judge:
    """The judge registered as ``name``; an unknown name lists the known ones."""
    if name not in JUDGES:
        raise JudgeError(f"unknown judge {name!r}; known judges: {', '.join(sorted(JUDGES))}")
    return JUDGES[name]


def _scale(settings: dict[str, Any]) -> str:
    helps = list(settings.get("grade_help") or [])
    return "\n".join(f"{g} = {name}" + (f": {helps[g]}" if g < len(helps) and helps[g] else "")
                     for g, name in enumerate(settings["grade_names"]))


def _block(label: str, text: str | None) -> str:
    return f"{label}:\n<<<\n{text if text is not None else '(none)'}\n>>>"


def _chunk_text(title: str | None, text: str | None) -> str:
    return f"{title}\n{text}" if title else (text or "")


# Field names sort in the order the model should write them (rationale before the grade, claim before
# its verdict): labeler.llm sends schemas with keys sorted, and strict output follows schema order.
@functools.cache
def _relevance_model(top: int) -> type[pydantic.BaseModel]:
    grades = Literal.__getitem__(tuple(range(top + 1)))
    return pydantic.create_model(
        "RelevanceJudgment",
        rationale=(str, pydantic.Field(description="one or two sentences: why this grade")),
        relevance_grade=(grades, pydantic.Field(description="the grade on the scale")))


def _relevance_messages(item: JudgeItem, rubric: str, settings: dict[str, Any]) -> list[dict[str, Any]]:
    system = RELEVANCE_PROMPT_V1.format(rubric=rubric.strip(), scale=_scale(settings))
    user = _block("Question", item.question) + "\n\n" + _block("Chunk", _chunk_text(item.title, item.text))
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _relevance_parse(answer: Any, settings: dict[str, Any]) -> Verdict:
    return Verdict(int(answer.relevance_grade), answer.rationale, score=float(answer.relevance_grade))


class Claim(pydantic.BaseModel):
    claim: str
    evidence_chunk: int | None = pydantic.Field(None, description="number of the supporting chunk, or null")
    supported: bool


class FaithfulnessJudgment(pydantic.BaseModel):
    claims: list[Claim]
    rationale: str


def _answer_messages(prompt: str) -> Callable[[JudgeItem, str, dict[str, Any]], list[dict[str, Any]]]:
    def messages(item: JudgeItem, rubric: str, settings: dict[str, Any]) -> list[dict[str, Any]]:
        user = _block("Question", item.question) + "\n\n" + _block("Answer", item.answer)
        if prompt is FAITHFULNESS_PROMPT_V1:
            chunks = "\n\n".join(f"[{i}] {_chunk_text(t, x)}" for i, (t, x) in enumerate(item.chunks, 1))
            user += "\n\n" + _block("Chunks", chunks or "(no chunks were retrieved)")
        return [{"role": "system", "content": prompt.format(rubric=rubric.strip())},
                {"role": "user", "content": user}]
    return messages


def faithfulness_verdict(claims: list[dict[str, Any]] | list[Claim], rationale: str = "") -> Verdict:
    """Score = supported / total claims; verdict yes when every claim is supported, partly when at
    least half are, no otherwise. No claims -> no score and no verdict (left out of agreement)."""
    rows = [c.model_dump() if isinstance(c, pydantic.BaseModel) else dict(c) for c in claims]
    if not rows:
        return Verdict(None, rationale, detail=rows)
    score = sum(bool(c["supported"]) for c in rows) / len(rows)
    grade = 2 if score == 1 else 1 if score >= 0.5 else 0
    return Verdict(grade, rationale, score=score, label=VERDICTS[grade], detail=rows)


class AnswerRelevanceJudgment(pydantic.BaseModel):
    rationale: str
    verdict: Literal["yes", "partly", "no"]


register_judge(Judge(
    "relevance.v1", "relevance", "pair", RELEVANCE_RUBRIC_V1,
    schema=lambda s: _relevance_model(len(s["grade_names"]) - 1), messages=_relevance_messages,
    parse=_relevance_parse, description="grades a question-chunk pair on the project's scale, with a rationale"))
register_judge(Judge(
    "faithfulness.v1", "faithfulness", "query", FAITHFULNESS_RUBRIC_V1,
    schema=lambda s: FaithfulnessJudgment, messages=_answer_messages(FAITHFULNESS_PROMPT_V1),
    parse=lambda a, s: faithfulness_verdict(a.claims, a.rationale),
    description="splits the production answer into claims and checks each against the retrieved chunks"))
register_judge(Judge(
    "answer-relevance.v1", "answer_relevance", "query", ANSWER_RELEVANCE_RUBRIC_V1,
    schema=lambda s: AnswerRelevanceJudgment, messages=_answer_messages(ANSWER_RELEVANCE_PROMPT_V1),
    parse=lambda a, s: Verdict(VERDICTS.index(a.verdict), a.rationale, score=float(VERDICTS.index(a.verdict)),
                               label=a.verdict),
    description="does the production answer address the question: yes / partly / no"))


# --- rubrics ---------------------------------------------------------------------------------------------

def _hash(text: str) -> str:
    return hashlib.sha256(text.strip().encode()).hexdigest()[:12]


def rubrics(db: sqlite_utils.Database, judge: str) -> list[Rubric]:
    """Every rubric version of ``judge``, oldest first; version 1 is the built-in text."""
    j = get_judge(judge)
    out = [Rubric(judge, 1, j.rubric, _hash(j.rubric))]
    out += [Rubric(judge, version, text, h, at, author, parent, store.loads(examples), origin)
            for version, text, h, at, author, parent, examples, origin in db.execute(
                "SELECT version, text, hash, created_at, author, parent, examples, origin FROM judge_rubrics "
                "WHERE judge = ? AND version > 1 ORDER BY version", [judge])]
    return out


def get_rubric(db: sqlite_utils.Database, judge: str, version: int | str | None = None) -> Rubric:
    """A rubric version by number or name (``relevance.v1/r2``); the latest when ``version`` is None."""
    versions = rubrics(db, judge)
    if version is None:
        return versions[-1]
    number = int(str(version).rsplit("/r", 1)[-1]) if re.fullmatch(r"(.*/r)?\d+", str(version)) else None
    for r in versions:
        if r.version == number:
            return r
    raise JudgeError(f"rubric {version!r} of {judge} does not exist; versions: "
                     f"{', '.join(r.name for r in versions)}")


def save_rubric(db: sqlite_utils.Database, judge: str, text: str, *, author: str | None = None,
                by: str | None = None, parent: int | None = None, examples: list[dict[str, Any]] | None = None,
                origin: str | None = None) -> Rubric:
    """Save an edited rubric as a new version and return it (an existing version with the same text
    is returned instead: versions are unique by content hash). Leads only (``by``, the signed-in
    account; ``None`` is the local operator). ``parent``: the version it was derived from;
    ``examples``: the few-shot examples its text carries; ``origin``: how it was made (``align``)."""
    require(db, by, "lead", "saving a rubric")
    if not isinstance(text, str) or not text.strip():
        raise JudgeError("a rubric cannot be empty; write the grading instructions")
    h = _hash(text)
    for r in rubrics(db, judge):
        if r.hash == h:
            return r
    with store.transaction(db):
        version = max(2, (db.execute("SELECT max(version) FROM judge_rubrics WHERE judge = ?",
                                     [judge]).fetchone()[0] or 1) + 1)
        at = store.now()
        db.execute("INSERT INTO judge_rubrics (judge, version, hash, text, author, created_at, parent, examples, "
                   "origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   [judge, version, h, text.strip(), author, at, parent,
                    store.dumps(examples) if examples is not None else None, origin])
    return Rubric(judge, version, text.strip(), h, at, author, parent, examples, origin)
