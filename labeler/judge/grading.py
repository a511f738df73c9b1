"""Grading items without a stored run: the requests that grade them and their answers through
``labeler.llm`` (cache, ledger, concurrency, retries), keyed by the caller (perturbed copies of a
chunk, a candidate rubric's grades). What ``labeler judge stress`` and ``labeler judge align`` build on;
``judge.runs`` stores runs on top of the same layer."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from .. import db as store
from ..llm.client import LLMConfig, Progress, Task
from ..llm.direct import run_tasks
from .registry import Judge, JudgeItem


def scale_of(db: sqlite_utils.Database) -> dict[str, Any]:
    """The project's grade scale as a judge's prompt and parser read it (stored with every run)."""
    settings = store.get_settings(db)
    return {"grade_names": settings["grade_names"], "grade_help": settings.get("grade_help"),
            "threshold": settings["threshold"]}


@dataclass
class Graded:
    """What ``grade_items`` got: a Verdict per key, the reason per key that has none, the LLM summary."""

    verdicts: dict[str, Any]
    failures: dict[str, str]
    summary: Any  # labeler.llm.client.RunSummary

    def grades(self) -> dict[str, int]:
        return {k: v.grade for k, v in self.verdicts.items() if v.grade is not None}


def grading_tasks(judge: Judge, items: dict[str, JudgeItem], rubric: str,
                  scale: dict[str, Any]) -> tuple[list[Task], dict[str, str]]:
    """The requests that grade ``items`` (by the caller's keys) and the keys skipped, with why."""
    schema = judge.schema(scale)
    tasks, skipped = [], {}
    for key, item in items.items():
        if judge.unit == "pair" and not (item.text or "").strip():
            skipped[key] = "the chunk has no text (ingest the corpus file with its text)"
        elif judge.unit == "query" and not (item.answer or "").strip():
            skipped[key] = "the query has no production answer"
        else:
            tasks.append(Task(key, judge.messages(item, rubric, scale), schema))
    return tasks, skipped


def grade_items(db: sqlite_utils.Database, config: LLMConfig, judge: Judge, items: dict[str, JudgeItem],
                rubric: str, scale: dict[str, Any], *, progress: Callable[[Progress], None] | None = None,
                cancel: threading.Event | None = None) -> Graded:
    """Grade ``items`` (keyed by the caller: perturbed copies, candidate rubrics) with ``judge`` and
    the rubric text ``rubric`` through ``labeler.llm`` (cache and ledger: a rerun pays nothing), without
    storing a judge run: what ``labeler judge stress`` and ``labeler judge align`` build on."""
    tasks, skipped = grading_tasks(judge, items, rubric, scale)
    summary = run_tasks(db, config, tasks, progress=progress, cancel=cancel)
    verdicts = {key: judge.parse(answer, scale) for key, answer in summary.results.items()}
    return Graded(verdicts, dict(summary.failed) | skipped, summary)
