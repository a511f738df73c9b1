"""``evaluate``: one evaluation of a pipeline (or of a retrieval stored in the database) on a golden set,
with its report, per-question records, markdown summary, optional baseline comparison, and files.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import sqlite_utils

from .. import db as store
from ..errors import DatabaseError, LabelerError
from ..retrievers import default_retriever
from .gate import (
    Baseline,
    Comparison,
    check_gate,
    check_golden,
    compare,
    load_baseline,
    score,
    summarize,
)
from .golden import GoldenSet, load_golden
from .judged import judge_pipeline_answers
from .options import GateOptions, GoldenOptions, JudgeOptions, OutputOptions, RunOptions, ScoringOptions
from .pipeline import (
    Answer,
    Pipeline,
    callable_pipeline,
    function_pipeline,
    http_pipeline,
    run_pipeline,
)
from .report import Plan, Scores, finish_report
from .result import EvalResult
from .stored import stored_run

# --- building the pieces -------------------------------------------------------------------

def _pipeline(run: RunOptions) -> Pipeline | None:
    """The pipeline ``run`` names (importing a ``module:function``); None: the logged retrieval."""
    if run.endpoint is not None:
        return http_pipeline(run.endpoint, mapping=run.mapping, headers=run.headers, timeout=run.timeout)
    pipeline = run.pipeline
    if pipeline is None or isinstance(pipeline, Pipeline):
        return pipeline
    if isinstance(pipeline, str):
        return callable_pipeline(pipeline)
    return function_pipeline(pipeline)  # RunOptions let only a function through


def _open_db(db: sqlite_utils.Database | str | Path | None, *,
             logged: bool = False) -> tuple[sqlite_utils.Database, str]:
    """Open ``db`` (never creating it); ``logged``: it is read for its logged retrievals (no pipeline)."""
    if isinstance(db, sqlite_utils.Database):
        return db, "database"
    if db is None:
        raise LabelerError("no pipeline: give --pipeline MODULE:FUNCTION or --endpoint URL, or --db with the "
                           "production logs to evaluate")
    if logged and str(db) != ":memory:" and not Path(db).exists():
        raise DatabaseError(f"no pipeline given and database {db} does not exist: pass --pipeline or --endpoint, "
                            "or --db pointing at the database the golden set came from")
    return store.connect(db, create=False), str(db)


# --- evaluate ------------------------------------------------------------------------------

def evaluate(
    golden: str | Path | GoldenSet,
    *,
    pipeline: str | Pipeline | Callable[[str], Any] | None = None,
    endpoint: str | None = None,
    mapping: dict[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    db: sqlite_utils.Database | str | Path | None = None,
    retriever: str | None = None,
    k: int | None = None,
    metrics: Sequence[str] = (),
    threshold: int | None = None,
    strict: bool = True,
    concurrency: int = 8,
    timeout: float | None = 30.0,
    baseline: str | Path | None = None,
    max_drop: Sequence[str] | Mapping[str, float] = (),
    alpha: float = 0.05,
    allow_golden_change: bool = False,
    n_permutations: int = 10000,
    n_resamples: int = 1000,
    seed: int = 0,
    output: str | Path | None = None,
    save_baseline: str | Path | None = None,
    report_md: str | Path | None = None,
    junit: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    judge_runs: Sequence[int] = (),
    llm_config: Any = None,
    holdout: bool = False,
    by: str | None = None,
    run: RunOptions | None = None,
    golden_options: GoldenOptions | None = None,
    scoring: ScoringOptions | None = None,
    gate: GateOptions | None = None,
    outputs: OutputOptions | None = None,
    judges: JudgeOptions | None = None,
) -> EvalResult:
    """Evaluate a RAG pipeline on a golden set and, given a ``baseline``, gate on a regression.

    The pipeline is ``pipeline`` (``"module:function"``, a function, or a :class:`Pipeline`), or the
    HTTP ``endpoint`` (``mapping``/``headers`` as in :func:`http_pipeline`); with neither, the
    retrieval stored in ``db`` under ``retriever`` is evaluated (see :func:`stored_run`; None = the
    default retriever: the only one, else ``production``, else a one-line error naming them). Questions
    run ``concurrency`` at a time with ``timeout`` seconds each; errors and timeouts are misses.
    Metrics: the default set at ``k`` plus ``metrics`` (see :func:`metric_set`) plus every metric
    named in ``max_drop``, each with a seeded 95% bootstrap CI.

    With ``baseline``: see :func:`compare` (``max_drop`` as ``["recall@5=0.02", ...]`` or a dict);
    a baseline made on another golden set or threshold raises BaselineError unless
    ``allow_golden_change``. ``output`` writes report.json and ``<stem>.questions.jsonl`` next to
    it; ``save_baseline`` writes a baseline, except when the gate failed (a regression never
    becomes the new baseline silently); ``report_md`` and ``junit`` get the pull-request comment and
    a JUnit XML (:mod:`labeler.harness.ci`), whatever the verdict. ``judge_runs``: calibration runs of the faithfulness and/or
    answer-relevance judge (in ``db``); the pipeline's answers are judged with each run's judge,
    rubric and model (``llm_config``, default from the environment) and reported as ``faithfulness``
    (supported / total claims) and ``answer_relevance`` (yes 1, partly 0.5, no 0) with CIs, naming
    the run and its calibration agreement, with a warning when it did not pass the gate. Options are
    checked before any question runs. ``holdout``: the golden set's questions are split (a
    ``split`` column, ``labeler split``); by default only ``dev`` questions (and those without a
    split) are evaluated; ``holdout=True`` evaluates the holdout questions only and counts the look
    in ``db`` (required) as ``by``. Raises
    LabelerError (exit 1) on user errors, and when every evaluated question failed (after writing
    the report).

    The options come as keywords, or grouped in option objects (:mod:`labeler.harness.options`):
    ``run`` (:class:`RunOptions`), ``golden_options`` (:class:`GoldenOptions`), ``scoring``
    (:class:`ScoringOptions`), ``gate`` (:class:`GateOptions`), ``outputs`` (:class:`OutputOptions`)
    and ``judges`` (:class:`JudgeOptions`); a group given as an object takes none of its keywords.
    """
    started = time.perf_counter()
    gate = _group(GateOptions, gate, "gate", baseline=baseline, max_drop=max_drop, alpha=alpha,
                  allow_golden_change=allow_golden_change, n_permutations=n_permutations)
    scoring = _group(ScoringOptions, scoring, "scoring", k=k, metrics=metrics, n_resamples=n_resamples, seed=seed)
    golden_options = _group(GoldenOptions, golden_options, "golden_options", threshold=threshold, strict=strict,
                            holdout=holdout, by=by)
    run = _group(RunOptions, run, "run", pipeline=pipeline, endpoint=endpoint, mapping=mapping, headers=headers,
                 retriever=retriever, concurrency=concurrency, timeout=timeout)
    outputs = _group(OutputOptions, outputs, "outputs", output=output, save_baseline=save_baseline,
                     report_md=report_md, junit=junit)
    judges = _group(JudgeOptions, judges, "judges", runs=judge_runs, llm_config=llm_config)

    plan = _prepare(golden, db, run=run, golden_options=golden_options, scoring=scoring, gate=gate, judges=judges)
    loaded_at = time.perf_counter()
    answers, pipeline_info = _answer(plan, db, run, progress)
    ran_at = time.perf_counter()
    scores = _score(plan, answers, db, scoring, judges)
    scored_at = time.perf_counter()
    comparison = _compare(plan, scores, gate, seed=scoring.seed, n_resamples=scoring.n_resamples)
    done_at = time.perf_counter()
    timings = {
        "total_seconds": done_at - started, "load_seconds": loaded_at - started,
        "run_seconds": ran_at - loaded_at, "score_seconds": scored_at - ran_at, "gate_seconds": done_at - scored_at,
    }
    return finish_report(plan, answers, pipeline_info, scores, comparison, timings, run=run, scoring=scoring,
                         gate=gate, outputs=outputs)


# A keyword of evaluate and the field of its option object, where their names differ.
_KEYWORDS = {"runs": "judge_runs"}


def _group(cls: type, given: Any, name: str, **keywords: Any) -> Any:
    """``given`` (an option object) when it is one and none of its keywords was given, else the
    object made from the keywords (which checks them)."""
    if given is None:
        return cls(**keywords)
    if not isinstance(given, cls):
        raise LabelerError(f"{name}= takes a {cls.__name__}(...); got {type(given).__name__}")
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    mixed = [_KEYWORDS.get(key, key) for key, value in keywords.items() if not _is_default(value, defaults[key])]
    if mixed:
        raise LabelerError(f"give {name}={cls.__name__}(...) or its keywords ({', '.join(mixed)}), not both: "
                           f"put {', '.join(mixed)} into the {cls.__name__}")
    return given


def _is_default(value: Any, default: Any) -> bool:
    """Whether a keyword was left at its default: an empty list, tuple or dict is no value."""
    if value is default:
        return True
    if (default is None or default == ()) and isinstance(value, Mapping | list | tuple) and not value:
        return True
    return type(value) is type(default) and value == default


def _prepare(golden: str | Path | GoldenSet, db: Any, *, run: RunOptions, golden_options: GoldenOptions,
             scoring: ScoringOptions, gate: GateOptions, judges: JudgeOptions) -> Plan:
    """Load the golden set (its dev or holdout questions), the baseline and the pipeline, and check
    the options against them and against each other: every user error is raised here, before any
    question runs."""
    tolerances = gate.tolerances
    wanted = scoring.specs(gate.gated)
    specs = [w.spec for w in wanted]
    if judges.runs and db is None:
        raise LabelerError("--judge-run needs --db: the database that holds the judge's calibration run")
    loaded = golden if isinstance(golden, GoldenSet) else load_golden(
        golden, threshold=golden_options.threshold, strict=golden_options.strict)
    loaded, split_info = _split_golden(loaded, golden_options.holdout, db, golden_options.by)
    base: Baseline | None = None
    warnings = list(loaded.warnings)
    if gate.baseline is not None:
        base = load_baseline(gate.baseline)
        warnings += check_golden(base, loaded, allow_change=gate.allow_golden_change)
        check_gate(specs, base, tolerances, alpha=gate.alpha)
    runner = _pipeline(run)
    judge_runs, all_traffic = _cite_all_traffic(db, judges.runs, specs)
    return Plan(loaded, split_info, wanted, base, tolerances, runner, judge_runs, all_traffic, warnings)


def _answer(plan: Plan, db: Any, run: RunOptions,
            progress: Callable[[int, int], None] | None) -> tuple[list[Answer], dict[str, Any]]:
    """Every golden question's answer, from the pipeline or (without one) from the retrieval logged
    in ``db``; and what the report says about where they came from."""
    if plan.runner is not None:
        questions = [q.question for q in plan.golden.queries]
        answers = run_pipeline(plan.runner, questions, concurrency=run.concurrency, timeout=run.timeout,
                               progress=progress)
        return answers, {"id": plan.runner.id, "kind": plan.runner.kind}
    database, where = _open_db(db, logged=True)
    try:
        retriever = default_retriever(database, run.retriever)
        answers = stored_run(database, plan.golden, retriever=retriever)
    finally:
        if database is not db:  # opened here from a path: close it here
            database.close()
    if all(a.status == "skipped" for a in answers):
        raise LabelerError(f"none of the {len(answers)} golden questions has a logged {retriever!r} retrieval "
                           f"in {where}: ingest the production logs first, or pass --pipeline")
    return answers, {"id": f"{where}#{retriever}", "kind": "database", "retriever": retriever}


def _score(plan: Plan, answers: Sequence[Answer], db: Any, scoring: ScoringOptions,
           judges: JudgeOptions) -> Scores:
    """The metrics of every question and their means with seeded bootstrap CIs, then the judges'
    scores of the answers (added as columns and means)."""
    per_q = score(plan.golden, answers, plan.metrics)
    aggregates = summarize(per_q, n_resamples=scoring.n_resamples, seed=scoring.seed)
    judged: list[dict[str, Any]] = []
    if plan.judge_runs:
        if db is None:
            raise LabelerError("--judge-run needs --db: the database that holds the judge's calibration run")
        database, _ = _open_db(db)
        judged = judge_pipeline_answers(database, plan.judge_runs, judges.llm_config, plan.golden, answers, per_q,
                                        aggregates, plan.warnings, n_resamples=scoring.n_resamples,
                                        seed=scoring.seed)
    return Scores(per_q, aggregates, judged)


def _compare(plan: Plan, scores: Scores, gate: GateOptions, *, seed: int, n_resamples: int) -> Comparison | None:
    """The comparison with the baseline (None without one); its warnings join the plan's."""
    if plan.baseline is None:
        return None
    comparison = compare(scores.per_q, plan.golden, plan.baseline, plan.tolerances, alpha=gate.alpha,
                         n_permutations=gate.n_permutations, seed=seed, n_resamples=n_resamples)
    plan.warnings.extend(comparison.warnings)
    return comparison


def _split_golden(loaded: GoldenSet, holdout: bool, db: Any, by: str | None) -> tuple[GoldenSet, dict[str, Any]]:
    """Keep the dev questions (default) or the holdout ones (``holdout``: the look is counted in
    ``db``); a golden set without a split column is all dev."""
    from ..holdout import HOLDOUT, record_look

    held = [q for q in loaded.queries if q.split == HOLDOUT]
    if not holdout:
        kept = [q for q in loaded.queries if q.split != HOLDOUT]
        return dataclasses.replace(loaded, queries=kept), {"evaluated": "dev", "holdout_excluded": len(held)}
    if not held:
        raise LabelerError(f"{loaded.path} has no holdout questions: set a split (labeler split --holdout 0.2 "
                           "--seed N) and export the golden set again")
    if db is None:
        raise LabelerError("--holdout needs the database that counts looks at the holdout: pass --db")
    database, _ = _open_db(db)
    try:
        count = record_look(database, f"eval {loaded.path}", len(held), by=by)
    finally:
        if database is not db:
            database.close()
    return dataclasses.replace(loaded, queries=held), {"evaluated": "holdout", "holdout_excluded": 0,
                                                       "holdout_looks": count}


def _cite_all_traffic(db: Any, run_ids: Sequence[int], specs: Sequence[str]) -> tuple[list[int], dict[str, Any] | None]:
    """Take a relevance run over all traffic out of ``run_ids``: its all-traffic estimate is cited
    (:mod:`labeler.harness.traffic`); the other runs judge the answers as before."""
    if not run_ids or db is None:
        return list(run_ids), None
    from .traffic import all_traffic_citation, split_runs

    database, _ = _open_db(db)
    try:
        cited, rest = split_runs(database, run_ids)
        return rest, None if cited is None else all_traffic_citation(database, cited, specs)
    finally:
        if database is not db:
            database.close()


