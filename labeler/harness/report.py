"""The report of one evaluation (``evaluate``): what was planned (``Plan``) and scored (``Scores``)
becomes report.json's document, the per-question records and the markdown summary, written to
the outputs asked for (the baseline only when the gate passed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .. import db as store
from ..metrics.registry import Metric
from .ci import write_ci_files
from .gate import Baseline, Comparison, baseline_document
from .golden import GoldenSet
from .options import GateOptions, OutputOptions, RunOptions, ScoringOptions
from .pipeline import Answer, Pipeline, PipelineError
from .result import EvalResult, render_markdown, write_json, write_report

REPORT_FORMAT = 1


def nan_to_none(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def latency(answers: Sequence[Answer]) -> dict[str, float | None]:
    seconds = np.array([a.seconds for a in answers if a.status != "skipped"])
    if seconds.size == 0:
        return {"mean": None, "p50": None, "p95": None, "max": None}
    p50, p95 = np.quantile(seconds, [0.5, 0.95])
    return {"mean": float(seconds.mean()), "p50": float(p50), "p95": float(p95), "max": float(seconds.max())}


@dataclass
class Plan:
    """What the options and the golden set came to before any question runs (``_prepare``)."""

    golden: GoldenSet
    split: dict[str, Any]
    metrics: list[Metric]
    baseline: Baseline | None
    tolerances: dict[str, float]
    runner: Pipeline | None
    judge_runs: list[int]
    all_traffic: dict[str, Any] | None
    warnings: list[str]

    @property
    def specs(self) -> list[str]:
        return [w.spec for w in self.metrics]


@dataclass
class Scores:
    """Per-question values (``per_q``), their means with CIs (``aggregates``) and what the report
    says about each judge that scored the answers (``judged``)."""

    per_q: pd.DataFrame
    aggregates: dict[str, Any]
    judged: list[dict[str, Any]]


def finish_report(plan: Plan, answers: Sequence[Answer], pipeline_info: dict[str, Any], scores: Scores,
            comparison: Comparison | None, timings: dict[str, Any], *, run: RunOptions, scoring: ScoringOptions,
            gate: GateOptions, outputs: OutputOptions) -> EvalResult:
    """The report, per-question records and markdown summary; written to ``outputs`` (the baseline
    only when the gate passed). Raises PipelineError, after writing the report, when every evaluated
    question failed."""
    per_q, specs, warnings = scores.per_q, plan.specs, plan.warnings
    rows = question_rows(plan.golden, answers, per_q, specs, plan.baseline, comparison)
    for j in scores.judged:
        for i, row in enumerate(rows):
            row["metrics"][j["metric"]] = nan_to_none(float(per_q.at[i, j["metric"]]))
    evaluated = [a for a in answers if a.status != "skipped"]
    failures = [r for r in rows if r["status"] in ("error", "timeout")]
    status = "no baseline" if comparison is None else "fail" if comparison.failed else "pass"
    run_seconds = timings["run_seconds"]
    report: dict[str, Any] = {
        "labeler_report": REPORT_FORMAT,
        "created_at": store.now(),
        "status": status,
        "pipeline": pipeline_info,
        "golden": plan.golden.identity(),
        "settings": {
            "metrics": specs, "k": scoring.reported_k,
            "threshold": plan.golden.threshold, "concurrency": run.concurrency,
            "timeout": run.timeout, "baseline": str(gate.baseline) if gate.baseline is not None else None,
            "max_drop": plan.tolerances or None, "alpha": gate.alpha, "permutations": gate.n_permutations,
            "bootstrap_resamples": scoring.n_resamples, "confidence": 0.95, "seed": scoring.seed,
        },
        "metrics": scores.aggregates,
        "counts": {
            "questions": len(answers), "evaluated": len(evaluated),
            "skipped": len(answers) - len(evaluated),
            "errors": sum(a.status == "error" for a in answers),
            "timeouts": sum(a.status == "timeout" for a in answers),
            "without_relevant": int((per_q["n_relevant"] == 0).sum()),
        },
        "timings": {
            **timings,
            "questions_per_second": len(evaluated) / run_seconds if run_seconds > 0 else None,
            "latency_seconds": latency(answers),
        },
        "errors": [{k_: r[k_] for k_ in ("query_id", "question", "status", "error")} for r in failures],
        "skipped": [{k_: r[k_] for k_ in ("query_id", "question", "error")} for r in rows if r["status"] == "skipped"],
        "comparison": comparison.to_dict() if comparison is not None else None,
        "judges": scores.judged,
        "warnings": warnings,
        "split": plan.split,
    }
    if plan.all_traffic is not None:
        report["all_traffic"] = plan.all_traffic
    result = EvalResult(report, rows, "", comparison, per_q)
    if outputs.save_baseline is not None and result.failed:
        warnings.append(f"baseline not saved to {outputs.save_baseline}: the gate failed (fix the regression, or "
                        "save without --baseline to accept it)")
    result.markdown = render_markdown(result)
    if outputs.output is not None:
        write_report(result, outputs.output)
    write_ci_files(report, rows, report_md=outputs.report_md, junit=outputs.junit)
    if evaluated and len(failures) == len(evaluated):
        raise PipelineError(f"all {len(evaluated)} questions failed, e.g. {failures[0]['error']}; "
                            "check the pipeline (nothing was compared or saved)")
    if outputs.save_baseline is not None and not result.failed:
        write_json(outputs.save_baseline, baseline_document(plan.golden, pipeline_info["id"], scores.aggregates, rows,
                                                            report["created_at"]))
    return result


def question_rows(golden: GoldenSet, answers: Sequence[Answer], per_q: Any, specs: Sequence[str],
                   base: Baseline | None, comparison: Comparison | None) -> list[dict[str, Any]]:
    matched = dict(comparison.pairs) if comparison is not None else {}
    rows = []
    for i, (q, a) in enumerate(zip(golden.queries, answers, strict=True)):
        row: dict[str, Any] = {
            "key": q.key, "query_id": q.query_id, "question": q.question, "status": a.status, "error": a.error,
            "seconds": round(a.seconds, 6), "retrieved": a.docs, "answer": a.answer,
            "relevant_ids": q.relevant_ids(golden.threshold),
            "metrics": {s: nan_to_none(float(per_q.at[i, s])) for s in specs},
            "n_relevant": nan_to_none(float(per_q.at[i, "n_relevant"])),
        }
        if base is not None:
            j = matched.get(i)
            row["baseline"] = None if j is None else {s: base.questions[j]["values"].get(s) for s in specs}
        rows.append(row)
    return rows
