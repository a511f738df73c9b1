"""The pipeline's answers judged by LLM judges whose calibration runs the humans graded
(``labeler eval --judge-run``): faithfulness and answer relevance per question, their means with
CIs, and what the report says of each judge (its calibration agreement and gate)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import sqlite_utils

from ..errors import LabelerError
from ..metrics.bootstrap import aggregate
from .golden import GoldenSet
from .pipeline import Answer

ANSWER_SCORES = {"yes": 1.0, "partly": 0.5, "no": 0.0}


def judge_pipeline_answers(database: sqlite_utils.Database, run_ids: Sequence[int], config: Any, golden: GoldenSet,
                           answers: Sequence[Answer], per_q: pd.DataFrame, aggregates: dict[str, Any],
                           warnings: list[str], *, n_resamples: int, seed: int) -> list[dict[str, Any]]:
    """Judge the pipeline's answers with each calibration run; add the per-question values as
    columns of ``per_q`` and their means with CIs to ``aggregates``; return what the report says
    about each judge (run, rubric, model, calibration agreement, gate)."""
    from ..judge.calibration import run_agreement
    from ..judge.gate import gate as judge_gate
    from ..judge.runs import judge_answers
    from ..llm.client import LLMConfig

    config = config or LLMConfig.from_env()
    items = [(str(i), q.question, a.answer, a.texts) for i, (q, a) in enumerate(zip(golden.queries, answers, strict=True))
             if a.status == "ok" and a.answer]
    out = []
    for run_id in run_ids:
        result = judge_answers(database, config, int(run_id), items)
        name = "faithfulness" if result.run.kind == "faithfulness" else "answer_relevance"
        values = np.full(len(answers), np.nan)
        for key, v in result.verdicts.items():
            value = v.score if name == "faithfulness" else ANSWER_SCORES.get(v.label)
            values[int(key)] = np.nan if value is None else value
        per_q[name] = values
        aggregates[name] = aggregate(per_q[[name]], n_resamples=n_resamples, seed=seed)[name]
        agreement = run_agreement(database, int(run_id), retrievers=False, n_resamples=n_resamples, seed=seed)
        kappa = agreement.statistics.get("cohen_kappa")
        try:
            verdict = judge_gate(database, int(run_id), agreement=agreement)
            passed, reasons = verdict.passed, verdict.reasons
        except LabelerError as e:
            passed, reasons = False, [str(e)]
        if not passed:
            warnings.append(f"judge run {run_id} ({result.run.judge}) did not pass the calibration gate: "
                            f"{'; '.join(reasons) or 'see labeler judge agreement'}; treat {name} with care")
        out.append({
            "metric": name, "run_id": int(run_id), "judge": result.run.judge, "rubric": result.run.rubric,
            "rubric_hash": result.run.rubric_hash, "model": result.run.model,
            "calibration_kappa": kappa.to_dict() if kappa is not None else None,
            "gate_passed": passed, "gate_reasons": reasons, "judged": len(result.verdicts),
            "failed": [{"question": golden.queries[int(k)].question, "reason": r} for k, r in result.failures.items()],
            "cost": result.cost,
        })
    return out
