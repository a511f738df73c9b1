"""``evaluate``: one evaluation of a pipeline (or of a retrieval stored in the database) on a golden set,
with its report, per-question records, markdown summary, optional baseline comparison, and files.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sqlite_utils

from .. import db as store
from .. import metrics as m
from ..errors import DatabaseError, LabelerError
from ..retrievers import default_retriever
from .gate import (
    DEFAULT_K,
    Baseline,
    Comparison,
    baseline_document,
    check_gate,
    check_golden,
    compare,
    load_baseline,
    metric_set,
    parse_max_drop,
    score,
    summarize,
)
from .golden import GoldenSet, load_golden
from .pipeline import (
    Answer,
    Pipeline,
    PipelineError,
    callable_pipeline,
    function_pipeline,
    http_pipeline,
    run_pipeline,
)

REPORT_FORMAT = 1
EXIT_REGRESSION = 3
MAX_LISTED = 20  # questions listed per section of the markdown summary (the report lists all)


@dataclass
class EvalResult:
    """What :func:`evaluate` found. ``report`` is the report.json document, ``questions`` the
    per-question records, ``markdown`` the summary, ``per_query`` the metric values as a DataFrame
    (row = golden question position); ``status`` is pass, fail or no baseline."""

    report: dict[str, Any]
    questions: list[dict[str, Any]]
    markdown: str
    comparison: Comparison | None = None
    per_query: pd.DataFrame | None = None

    @property
    def failed(self) -> bool:
        return self.comparison is not None and self.comparison.failed

    @property
    def status(self) -> str:
        return self.report["status"]

    @property
    def exit_code(self) -> int:
        """3 when the gate failed, else 0 (user errors raise LabelerError instead)."""
        return EXIT_REGRESSION if self.failed else 0


# --- the stored production run -------------------------------------------------------------

def stored_run(db: sqlite_utils.Database, golden: GoldenSet, *, retriever: str | None = None) -> list[Answer]:
    """The retrieval logged for each golden question under ``retriever`` (None: the default retriever,
    see :func:`labeler.retrievers.default_retriever`; RetrieverError when none can be chosen or the
    named one logged nothing), as answers: the query is
    found by query id, else by normalized question. A question the database does not hold, or holds
    without a logged ``retriever`` list, is ``skipped`` (not scored), so a first baseline reflects what
    production actually did."""
    from ..ingest.validate import normalize_question

    retriever = default_retriever(db, retriever)
    ids = sorted({q.query_id for q in golden.queries if q.query_id is not None})
    texts = sorted({normalize_question(q.question) for q in golden.queries})
    by_id = dict(db.execute(
        f"SELECT query_id, pk FROM queries q WHERE query_id IN (SELECT value FROM json_each(?)) AND {store.visible('q')}",
        [json.dumps(ids)]))
    by_text: dict[str, int] = {}
    # several logged queries may share a text: take the most frequent one
    for norm, pk in db.execute(
            "SELECT norm_question, pk FROM queries q WHERE norm_question IN (SELECT value FROM json_each(?)) "
            f"AND {store.visible('q')} ORDER BY occurrences DESC, pk", [json.dumps(texts)]):
        by_text.setdefault(norm, pk)
    pks = [by_id.get(q.query_id) if q.query_id in by_id else by_text.get(normalize_question(q.question))
           for q in golden.queries]
    wanted = json.dumps(sorted({pk for pk in pks if pk is not None}))
    logged = {pk for (pk,) in db.execute(
        "SELECT query_pk FROM query_versions WHERE retriever = ? AND query_pk IN (SELECT value FROM json_each(?))",
        [retriever, wanted])}
    docs: dict[int, list[str]] = {}
    for pk, doc_id in db.execute(
            "SELECT r.query_pk, d.doc_id FROM retrievals r JOIN documents d ON d.pk = r.doc_pk "
            f"WHERE r.retriever = ? AND r.query_pk IN (SELECT value FROM json_each(?)) AND {store.visible('r')} "
            "ORDER BY r.query_pk, r.rank",
            [retriever, wanted]):
        docs.setdefault(pk, []).append(doc_id)
    answers = dict(db.execute("SELECT pk, answer FROM queries WHERE pk IN (SELECT value FROM json_each(?))",
                              [wanted]))
    out = []
    for pk in pks:
        if pk is None:
            out.append(Answer([], None, 0.0, "skipped", "not in the database"))
        elif pk not in logged and pk not in docs:
            out.append(Answer([], None, 0.0, "skipped", f"no logged retrieval for retriever {retriever!r}"))
        else:
            out.append(Answer(docs.get(pk, []), answers.get(pk), 0.0))
    return out


# --- building the pieces -------------------------------------------------------------------

def _pipeline(pipeline: str | Pipeline | Callable | None, endpoint: str | None, mapping: dict[str, str] | None,
              headers: Mapping[str, str] | None, timeout: float | None) -> Pipeline | None:
    if pipeline is not None and endpoint is not None:
        raise PipelineError("give either --pipeline or --endpoint, not both")
    if endpoint is not None:
        return http_pipeline(endpoint, mapping=mapping, headers=headers, timeout=timeout)
    if pipeline is None or isinstance(pipeline, Pipeline):
        return pipeline
    if isinstance(pipeline, str):
        return callable_pipeline(pipeline)
    if callable(pipeline):
        return function_pipeline(pipeline)
    raise PipelineError(f"pipeline must be 'module:function', a function or a Pipeline; got {type(pipeline).__name__}")


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


def _none(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def _latency(answers: Sequence[Answer]) -> dict[str, float | None]:
    seconds = np.array([a.seconds for a in answers if a.status != "skipped"])
    if seconds.size == 0:
        return {"mean": None, "p50": None, "p95": None, "max": None}
    p50, p95 = np.quantile(seconds, [0.5, 0.95])
    return {"mean": float(seconds.mean()), "p50": float(p50), "p95": float(p95), "max": float(seconds.max())}


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
    progress: Callable[[int, int], None] | None = None,
    judge_runs: Sequence[int] = (),
    llm_config: Any = None,
    holdout: bool = False,
    by: str | None = None,
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
    becomes the new baseline silently). ``judge_runs``: calibration runs of the faithfulness and/or
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
    """
    started = time.perf_counter()
    if isinstance(max_drop, Mapping):
        max_drop = [str(v) if name == "*" else f"{name}={v}" for name, v in max_drop.items()]
    tolerances = parse_max_drop(max_drop)
    named = [s for s in tolerances if s != "*"]
    wanted = metric_set(k, [*metrics, *named])
    specs = [w.spec for w in wanted]
    if isinstance(n_permutations, bool) or not isinstance(n_permutations, int) or n_permutations < 1:
        raise m.MetricError(f"--permutations must be a positive whole number, e.g. 10000; got {n_permutations!r}")
    loaded = golden if isinstance(golden, GoldenSet) else load_golden(golden, threshold=threshold, strict=strict)
    loaded, split_info = _split_golden(loaded, holdout, db, by)
    base: Baseline | None = None
    warnings = list(loaded.warnings)
    if baseline is not None:
        base = load_baseline(baseline)
        warnings += check_golden(base, loaded, allow_change=allow_golden_change)
        check_gate(specs, base, tolerances, alpha=alpha)
    elif tolerances:
        raise LabelerError("--max-drop needs --baseline (the run to compare with)")
    runner = _pipeline(pipeline, endpoint, mapping, headers, timeout)
    judge_runs, all_traffic = _cite_all_traffic(db, judge_runs, specs)
    loaded_at = time.perf_counter()

    if runner is None:
        database, where = _open_db(db, logged=True)
        try:
            retriever = default_retriever(database, retriever)
            answers = stored_run(database, loaded, retriever=retriever)
        finally:
            if database is not db:  # opened here from a path: close it here
                database.close()
        pipeline_info = {"id": f"{where}#{retriever}", "kind": "database", "retriever": retriever}
        if all(a.status == "skipped" for a in answers):
            raise LabelerError(f"none of the {len(answers)} golden questions has a logged {retriever!r} retrieval "
                               f"in {where}: ingest the production logs first, or pass --pipeline")
    else:
        questions = [q.question for q in loaded.queries]
        answers = run_pipeline(runner, questions, concurrency=concurrency, timeout=timeout, progress=progress)
        pipeline_info = {"id": runner.id, "kind": runner.kind}
    ran_at = time.perf_counter()

    per_q = score(loaded, answers, wanted)
    aggregates = summarize(per_q, n_resamples=n_resamples, seed=seed)
    judged: list[dict[str, Any]] = []
    if judge_runs:
        judged = _judge_answers(db, judge_runs, llm_config, loaded, answers, per_q, aggregates, warnings,
                                n_resamples=n_resamples, seed=seed)
    scored_at = time.perf_counter()
    comparison = None
    if base is not None:
        comparison = compare(per_q, loaded, base, tolerances, alpha=alpha, n_permutations=n_permutations, seed=seed)
        warnings += comparison.warnings
    done_at = time.perf_counter()

    rows = _question_rows(loaded, answers, per_q, specs, base, comparison)
    for j in judged:
        for i, row in enumerate(rows):
            row["metrics"][j["metric"]] = _none(float(per_q.at[i, j["metric"]]))
    evaluated = [a for a in answers if a.status != "skipped"]
    failures = [r for r in rows if r["status"] in ("error", "timeout")]
    status = "no baseline" if comparison is None else "fail" if comparison.failed else "pass"
    report: dict[str, Any] = {
        "labeler_report": REPORT_FORMAT,
        "created_at": store.now(),
        "status": status,
        "pipeline": pipeline_info,
        "golden": loaded.identity(),
        "settings": {
            "metrics": specs, "k": DEFAULT_K if k is None and not metrics else k,
            "threshold": loaded.threshold, "concurrency": concurrency,
            "timeout": timeout, "baseline": str(baseline) if baseline is not None else None,
            "max_drop": tolerances or None, "alpha": alpha, "permutations": n_permutations,
            "bootstrap_resamples": n_resamples, "confidence": 0.95, "seed": seed,
        },
        "metrics": aggregates,
        "counts": {
            "questions": len(answers), "evaluated": len(evaluated),
            "skipped": len(answers) - len(evaluated),
            "errors": sum(a.status == "error" for a in answers),
            "timeouts": sum(a.status == "timeout" for a in answers),
            "without_relevant": int((per_q["n_relevant"] == 0).sum()),
        },
        "timings": {
            "total_seconds": done_at - started, "load_seconds": loaded_at - started,
            "run_seconds": ran_at - loaded_at, "score_seconds": scored_at - ran_at,
            "gate_seconds": done_at - scored_at,
            "questions_per_second": len(evaluated) / (ran_at - loaded_at) if ran_at > loaded_at else None,
            "latency_seconds": _latency(answers),
        },
        "errors": [{k_: r[k_] for k_ in ("query_id", "question", "status", "error")} for r in failures],
        "skipped": [{k_: r[k_] for k_ in ("query_id", "question", "error")} for r in rows if r["status"] == "skipped"],
        "comparison": comparison.to_dict() if comparison is not None else None,
        "judges": judged,
        "warnings": warnings,
        "split": split_info,
    }
    if all_traffic is not None:
        report["all_traffic"] = all_traffic
    result = EvalResult(report, rows, "", comparison, per_q)
    if save_baseline is not None and result.failed:
        warnings.append(f"baseline not saved to {save_baseline}: the gate failed (fix the regression, or save "
                        "without --baseline to accept it)")
    result.markdown = render_markdown(result)
    if output is not None:
        write_report(result, output)
    if evaluated and len(failures) == len(evaluated):
        raise PipelineError(f"all {len(evaluated)} questions failed, e.g. {failures[0]['error']}; "
                            "check the pipeline (nothing was compared or saved)")
    if save_baseline is not None and not result.failed:
        write_json(save_baseline, baseline_document(loaded, pipeline_info["id"], aggregates, rows, report["created_at"]))
    return result


def _split_golden(loaded: GoldenSet, holdout: bool, db: Any, by: str | None) -> tuple[GoldenSet, dict[str, Any]]:
    """Keep the dev questions (default) or the holdout ones (``holdout``: the look is counted in
    ``db``); a golden set without a split column is all dev."""
    import dataclasses

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


ANSWER_SCORES = {"yes": 1.0, "partly": 0.5, "no": 0.0}


def _judge_answers(db: Any, run_ids: Sequence[int], config: Any, golden: GoldenSet, answers: Sequence[Answer],
                   per_q: pd.DataFrame, aggregates: dict[str, Any], warnings: list[str], *,
                   n_resamples: int, seed: int) -> list[dict[str, Any]]:
    """Judge the pipeline's answers with each calibration run; add the per-question values as
    columns of ``per_q`` and their means with CIs to ``aggregates``; return what the report says
    about each judge (run, rubric, model, calibration agreement, gate)."""
    from .. import judge, llm
    from ..judge.calibration import run_agreement

    if db is None:
        raise LabelerError("--judge-run needs --db: the database that holds the judge's calibration run")
    database, _ = _open_db(db)
    config = config or llm.LLMConfig.from_env()
    items = [(str(i), q.question, a.answer, a.texts) for i, (q, a) in enumerate(zip(golden.queries, answers, strict=True))
             if a.status == "ok" and a.answer]
    out = []
    for run_id in run_ids:
        result = judge.judge_answers(database, config, int(run_id), items)
        name = "faithfulness" if result.run.kind == "faithfulness" else "answer_relevance"
        values = np.full(len(answers), np.nan)
        for key, v in result.verdicts.items():
            value = v.score if name == "faithfulness" else ANSWER_SCORES.get(v.label)
            values[int(key)] = np.nan if value is None else value
        per_q[name] = values
        aggregates[name] = m.aggregate(per_q[[name]], n_resamples=n_resamples, seed=seed)[name]
        agreement = run_agreement(database, int(run_id), retrievers=False, n_resamples=n_resamples, seed=seed)
        kappa = agreement.statistics.get("cohen_kappa")
        try:
            verdict = judge.gate(database, int(run_id), agreement=agreement)
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


def _question_rows(golden: GoldenSet, answers: Sequence[Answer], per_q: Any, specs: Sequence[str],
                   base: Baseline | None, comparison: Comparison | None) -> list[dict[str, Any]]:
    matched = dict(comparison.pairs) if comparison is not None else {}
    rows = []
    for i, (q, a) in enumerate(zip(golden.queries, answers, strict=True)):
        row: dict[str, Any] = {
            "key": q.key, "query_id": q.query_id, "question": q.question, "status": a.status, "error": a.error,
            "seconds": round(a.seconds, 6), "retrieved": a.docs, "answer": a.answer,
            "relevant_ids": q.relevant_ids(golden.threshold),
            "metrics": {s: _none(float(per_q.at[i, s])) for s in specs},
            "n_relevant": _none(float(per_q.at[i, "n_relevant"])),
        }
        if base is not None:
            j = matched.get(i)
            row["baseline"] = None if j is None else {s: base.questions[j]["values"].get(s) for s in specs}
        rows.append(row)
    return rows


# --- outputs -------------------------------------------------------------------------------

def questions_path(output: str | Path) -> Path:
    """Where the per-question JSONL of ``report.json`` goes: ``report.questions.jsonl``."""
    output = Path(output)
    return output.with_name(output.stem + ".questions.jsonl") if output.suffix == ".json" \
        else output.with_name(output.name + ".questions.jsonl")


def write_json(path: str | Path, document: Any) -> Path:
    path = Path(path)
    try:
        path.write_text(json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    except OSError as e:
        raise LabelerError(f"cannot write {path}: {e.strerror or e}") from None
    return path


def write_report(result: EvalResult, output: str | Path) -> tuple[Path, Path]:
    """Write ``report.json`` and its per-question JSONL; returns both paths."""
    report = write_json(output, result.report)
    rows = questions_path(output)
    with open(rows, "w", encoding="utf-8") as f:
        for row in result.questions:
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    return report, rows


def append_step_summary(markdown: str, path: str | Path | None) -> bool:
    """Append the summary to a GitHub Actions step summary file (``$GITHUB_STEP_SUMMARY``) if given."""
    if not path:
        return False
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(markdown.rstrip("\n") + "\n\n")
    except OSError as e:
        raise LabelerError(f"cannot append to GITHUB_STEP_SUMMARY {path}: {e.strerror or e}") from None
    return True


def _fmt(v: float | None, digits: int = 4) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _who(row: Mapping[str, Any]) -> str:
    text = row["question"] if len(row["question"]) <= 80 else row["question"][:79] + "…"
    return f"`{row['query_id']}` {text}" if row.get("query_id") else text


def render_markdown(result: EvalResult) -> str:
    """The summary printed on stdout and appended to the GitHub step summary."""
    r = result.report
    comparison = r["comparison"]
    verdict = {"pass": "PASS", "fail": "FAIL: regression", "no baseline": "no baseline"}[r["status"]]
    g, c = r["golden"], r["counts"]
    lines = [f"### labeler eval: {verdict}", "",
             f"Pipeline `{r['pipeline']['id']}` on `{Path(g['path']).name}` ({g['questions']} questions, sha256 "
             f"`{g['sha256'][:12]}`, threshold {g['threshold']}): {c['evaluated']} evaluated, {c['errors']} errors, "
             f"{c['timeouts']} timeouts, {c['skipped']} skipped; {r['timings']['run_seconds']:.1f} s.", ""]
    split = r.get("split") or {}
    if split.get("evaluated") == "holdout":
        lines += [f"Holdout questions only: the holdout has now been looked at {split['holdout_looks']} time(s).", ""]
    elif split.get("holdout_excluded"):
        lines += [f"Dev questions only: {split['holdout_excluded']} holdout questions left out (--holdout "
                  "evaluates them, and counts the look).", ""]
    header = "| metric | value | 95% CI | n |"
    if comparison:
        header += " baseline | change | max drop | p | gate |"
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    for spec, agg in r["metrics"].items():
        ci = "–" if agg["mean"] is None else f"{agg['ci_low']:.4f}–{agg['ci_high']:.4f}"
        line = f"| {spec} | {_fmt(agg['mean'])} | {ci} | {agg['n']} |"
        if comparison:
            ch = comparison["metrics"].get(spec)
            if ch is None:
                line += " – | – | – | – | not in baseline |"
            else:
                change = "–" if ch["drop"] is None else f"{-ch['drop']:+.4f}"
                tolerance = "–" if ch["max_drop"] is None else f"{ch['max_drop']:g}"
                gate = "FAIL" if ch["failed"] else "ok" if ch["gated"] else "not gated"
                line += f" {_fmt(ch['baseline'])} | {change} | {tolerance} | {_fmt(ch['p_value'])} | {gate} |"
        lines.append(line)
    if comparison:
        lines += ["", f"Compared on {comparison['matched']} questions shared with `{comparison['baseline']}` "
                      f"({comparison['only_current']} new, {comparison['only_baseline']} only in the baseline). "
                      f"A metric fails when its drop exceeds its max drop and the paired randomization test "
                      f"gives p < {r['settings']['alpha']}."]
    cited = r.get("all_traffic")
    if cited:
        values = ", ".join(f"{spec} {v['estimate']:.4f} ({v['ci_low']:.4f}–{v['ci_high']:.4f})"
                           for spec, v in cited["metrics"].items() if v.get("estimate") is not None)
        lines += ["", f"All production traffic (not this pipeline): retriever `{cited['retriever']}` over "
                      f"{cited['population']} logged queries, judge run {cited['judge_run']} corrected by "
                      f"{cited['n_labeled']} human labels ({cited['design']}): {values}."]
    regressed = result.comparison.regressions if result.comparison else []
    if regressed:
        by_question: dict[str, list[str]] = {}
        rows = {}
        for reg in regressed:
            key = reg["query_id"] or reg["question"]
            rows[key] = reg
            by_question.setdefault(key, []).append(f"{reg['metric']} {reg['baseline']:.3f} → {reg['current']:.3f}")
        lines += ["", f"**Questions that got worse** ({len(by_question)}):"]
        for key, changes in list(by_question.items())[:MAX_LISTED]:
            lines.append(f"- {_who(rows[key])}: {', '.join(changes)}")
        if len(by_question) > MAX_LISTED:
            lines.append(f"- … and {len(by_question) - MAX_LISTED} more (see the report)")
    if r["errors"]:
        lines += ["", f"**Errors** ({len(r['errors'])} questions counted as misses):"]
        for row in r["errors"][:MAX_LISTED]:
            lines.append(f"- {_who(row)}: {row['error']}")
        if len(r["errors"]) > MAX_LISTED:
            lines.append(f"- … and {len(r['errors']) - MAX_LISTED} more (see the report)")
    for warning in r["warnings"]:
        lines += ["", f"Warning: {warning}"]
    return "\n".join(lines) + "\n"
