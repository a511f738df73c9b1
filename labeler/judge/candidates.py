"""The candidates of an alignment (``labeler judge align``): graded examples appended to a rubric
(stratified by grade, the current judge's mistakes first), and rubric revisions an LLM proposes from
the disagreements (``ALIGN_REVISION_PROMPT_V1``, a versioned prompt: a change changes every request
hash). ``judge.align`` scores them; everything here is built from the selection pairs only."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pydantic
import sqlite_utils

from .. import db as store
from ..llm.client import LLMConfig, Task
from ..llm.direct import run_tasks
from .pairs import LabeledPairs
from .registry import JudgeItem, Rubric

ALIGN_REVISION_PROMPT_V1 = """You improve the grading instructions (the rubric) of an LLM judge that grades how well
ONE retrieved chunk helps answer a user's question, on this scale:
{scale}

Below are the current rubric and pairs where the judge's grade differed from the grade human
annotators gave. Find what the judge misunderstands and write a revised rubric that would make it
grade as the annotators do. Keep what works, keep it short (at most 12 lines), write rules, not
examples, and do not mention these particular questions.

Give a short analysis of the disagreements first, then the full revised rubric."""

EXAMPLES_HEADER = "Graded examples (the grades human annotators gave):"
MAX_DISAGREEMENTS = 12
_EXAMPLE_CHARS = 600

class RubricRevision(pydantic.BaseModel):
    """An LLM's proposed rubric: the analysis comes first (schema order is the writing order)."""

    analysis: str = pydantic.Field(description="what the judge gets wrong, in two or three sentences")
    rubric: str = pydantic.Field(description="the full revised rubric")


def one_line(text: str | None, limit: int = _EXAMPLE_CHARS) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def instructions_of(rubric_text: str) -> str:
    """A rubric's text without the graded examples an alignment appended."""
    return rubric_text.split(EXAMPLES_HEADER, 1)[0].rstrip()


def with_examples(rubric_text: str, examples: list[dict[str, Any]]) -> str:
    """The rubric's instructions followed by ``examples`` (question, text, grade), replacing any it had."""
    if not examples:
        return instructions_of(rubric_text)
    lines = [instructions_of(rubric_text), "", EXAMPLES_HEADER]
    for i, e in enumerate(examples, 1):
        lines += [f"Example {i} (grade {e['grade']})", f"Question: {one_line(e['question'])}",
                  f"Chunk: {one_line(e['text'])}"]
    return "\n".join(lines)


def pick_examples(grades: np.ndarray, wrong: np.ndarray, shots: int, rng: np.random.Generator) -> list[int]:
    """Indices of ``shots`` examples stratified by grade (the grades present take turns, lowest
    first), within a grade the current judge's mistakes (``wrong``) first, each group shuffled."""
    pools: dict[int, list[int]] = {}
    for g in np.unique(grades):
        idx = np.flatnonzero(grades == g)
        bad, good = idx[wrong[idx]], idx[~wrong[idx]]
        pools[int(g)] = [*rng.permutation(bad).tolist(), *rng.permutation(good).tolist()]
    picked: list[int] = []
    while len(picked) < shots and any(pools.values()):
        for g in sorted(pools):
            if pools[g] and len(picked) < shots:
                picked.append(pools[g].pop(0))
    return sorted(picked, key=lambda i: (int(grades[i]), i))


def revision_task(key: str, current: str, scale: dict[str, Any], disagreements: list[dict[str, Any]]) -> Task:
    names = scale["grade_names"]
    system = ALIGN_REVISION_PROMPT_V1.format(scale="\n".join(f"{g} = {n}" for g, n in enumerate(names)))
    shown = "\n\n".join(f"Question: {one_line(d['question'])}\nChunk: {one_line(d['text'])}\n"
                        f"Judge's grade: {d['judge']}; annotators' grade: {d['grade']}" for d in disagreements)
    user = f"Current rubric:\n<<<\n{instructions_of(current)}\n>>>\n\nDisagreements:\n<<<\n{shown or '(none)'}\n>>>"
    return Task(key, [{"role": "system", "content": system}, {"role": "user", "content": user}], RubricRevision)


@dataclass
class Candidate:
    """One candidate version: how it was made, its text and examples, and its validation numbers."""

    name: str
    kind: str  # "examples" or "revision"
    text: str
    examples: list[dict[str, Any]] = field(default_factory=list)
    analysis: str | None = None
    n: int = 0
    statistics: dict[str, Any] = field(default_factory=dict)
    current: dict[str, Any] = field(default_factory=dict)
    difference: dict[str, Any] = field(default_factory=dict)
    decision: dict[str, Any] = field(default_factory=dict)
    failed: int = 0


def keyed(tasks: list[Task], prefix: str) -> list[Task]:
    return [dataclasses.replace(t, key=f"{prefix}/{t.key}") for t in tasks]


def build_candidates(db: sqlite_utils.Database, config: LLMConfig, current: Rubric, select: LabeledPairs,
                items: dict[str, JudgeItem], base: dict[str, int], wrong: np.ndarray, scale: dict[str, Any], *,
                shots: int, candidates: int, revisions: int, seed: int, spend: Any,
                send: Callable[[list[Task], str], None]) -> list[Candidate]:
    ids = dict(db.execute("SELECT pk, doc_id FROM documents WHERE pk IN (SELECT value FROM json_each(?))",
                          [store.dumps([int(d) for _, d in select.keys])]).fetchall())

    def example(i: int) -> dict[str, Any]:
        q, d = select.keys[i]
        item = items[f"{q}:{d}"]
        return {"query_id": select.query_ids[i], "doc_id": ids.get(d), "question": item.question,
                "text": item.text, "grade": int(select.grades[i]), "judge_grade": base.get(f"{q}:{d}")}

    usable = np.array([bool((items.get(f"{q}:{d}") or JudgeItem(0, 0, "")).text) for q, d in select.keys])
    out = []
    for c in range(candidates):
        rng = np.random.default_rng([seed, c])
        chosen = pick_examples(select.grades[usable], wrong[usable], shots, rng)
        picked = [example(int(i)) for i in np.flatnonzero(usable)[chosen]]
        out.append(Candidate(f"examples-{c + 1}", "examples", with_examples(current.text, picked), picked))
    disagreements = [example(i) for i in np.flatnonzero(wrong & usable)]
    tasks = []
    for r in range(revisions):
        rng = np.random.default_rng([seed, 1000 + r])
        shown = [disagreements[i] for i in sorted(rng.permutation(len(disagreements))[:MAX_DISAGREEMENTS])]
        tasks.append(revision_task(f"revision-{r + 1}", current.text, scale,
                                    [{**d, "judge": d["judge_grade"]} for d in shown]))
    if tasks:
        send(tasks, "revision")
        summary = run_tasks(db, config, tasks)
        spend.add(summary)
        kept = list(current.examples or [])
        for t in tasks:
            answer = summary.results.get(t.key)
            if answer is None or not answer.rubric.strip() or answer.rubric.strip() == instructions_of(current.text):
                continue
            out.append(Candidate(t.key, "revision", with_examples(answer.rubric.strip(), kept), kept,
                                 analysis=answer.analysis))
    return out
