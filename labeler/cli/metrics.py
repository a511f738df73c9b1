"""``labeler metrics`` (retrieval metrics of the labeled queries, ``labeler.report``) and ``labeler eval``
(a RAG pipeline on the golden set, ``labeler.harness``)."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from .common import (
    CONTEXT_SETTINGS,
    ORIGIN_CHOICE,
    fmt_value,
    open_db,
    progress_bar,
    secrets_toml,
)
from .group import cli
from .output import Output, output_options


def _eval_llm_config() -> Any:
    from ..llm import LLMConfig

    return LLMConfig.from_env(secrets_toml())  # the judge run's own model and temperature are used


@cli.command("eval", context_settings=CONTEXT_SETTINGS)
@click.option("--golden", required=True, type=click.Path(dir_okay=False),
              help="The golden set: JSONL from labeler export, or lines {question, relevant_ids}.")
@click.option("--pipeline", metavar="MODULE:FUNCTION",
              help="A function taking a question and returning (docs, answer), e.g. mypkg.rag:answer.")
@click.option("--endpoint", metavar="URL", help='An HTTP pipeline: POST {"question": ...}, JSON response.')
@click.option("--map", "maps", multiple=True, metavar="FIELD=PATH",
              help="Read the endpoint's response from (dotted) paths, as in ingest: --map retrieved=result.docs.")
@click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'",
              help="An HTTP header for --endpoint (repeatable), e.g. 'Authorization: Bearer $TOKEN'.")
@click.option("--retriever", help="Without --pipeline/--endpoint: the logged retriever in --db to evaluate "
              "(default: the only one, else production).")
@click.option("-k", "k", type=click.IntRange(1), help="Cutoff of the default metrics recall@k, precision@k, "
              "hit@k, mrr, ndcg@k (default 10).")
@click.option("--metric", "metric_specs", multiple=True, metavar="SPEC", help="Another metric, e.g. ndcg@10.")
@click.option("--threshold", type=click.IntRange(1), help="Lowest relevant grade (default: manifest's, else 2).")
@click.option("--concurrency", type=click.IntRange(1, 1024), default=8, show_default=True,
              help="Questions in flight at once.")
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=30.0, show_default=True,
              help="Seconds per question; a slower question counts as a miss.")
@click.option("--baseline", type=click.Path(dir_okay=False), help="A baseline (--save-baseline) to compare with.")
@click.option("--max-drop", "max_drops", multiple=True, metavar="METRIC=TOL",
              help="Fail when METRIC's mean drops by more than TOL and p < alpha (TOL alone: every metric; "
              "none: every metric at 0).")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="Significance level of the paired randomization test.")
@click.option("--permutations", type=click.IntRange(1), default=10000, show_default=True,
              help="Sign flips of the randomization test.")
@click.option("--allow-golden-change", is_flag=True,
              help="Compare with a baseline made on another golden set (on the shared questions).")
@click.option("--save-baseline", type=click.Path(dir_okay=False), help="Write this run as a baseline.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write report.json here and per-question records to <stem>.questions.jsonl.")
@click.option("--report-md", "report_md", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the pull-request comment here (per metric: baseline, candidate, paired difference with "
              "95% CI and p-value, verdict; the worst regressed queries), also when the gate fails.")
@click.option("--junit", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write a JUnit XML here: one test case per metric, a failure for each regressed one.")
@click.option("--lenient", is_flag=True, help="Skip invalid golden lines with a warning instead of stopping.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap and the test.")
@click.option("--judge-run", "judge_runs", multiple=True, type=int, metavar="RUN_ID",
              help="Also judge the answers (faithfulness / answer relevance) with the judge, rubric and model of "
              "this calibration run in --db (labeler judge list); repeatable. A relevance run over all traffic "
              "(judge run --on all) is cited instead: the report's all_traffic holds its all-traffic estimate.")
@click.option("--holdout", is_flag=True, help="Evaluate the holdout questions only (labeler split); the look "
              "is counted in --db.")
@output_options()
@click.pass_context
def eval_cmd(ctx: click.Context, golden: str, pipeline: str | None, endpoint: str | None, maps: tuple[str, ...],
             headers: tuple[str, ...], retriever: str | None, k: int | None, metric_specs: tuple[str, ...],
             threshold: int | None, concurrency: int, timeout: float, baseline: str | None,
             max_drops: tuple[str, ...], alpha: float, permutations: int, allow_golden_change: bool,
             save_baseline: str | None, output: str | None, report_md: str | None, junit: str | None, lenient: bool, seed: int, judge_runs: tuple[int, ...],
             holdout: bool, output_format: str) -> Output:
    """Run a RAG pipeline on the golden set; with --baseline, fail on a real regression.

    Without --pipeline or --endpoint, evaluates the retrieval logged in --db by --retriever (default:
    the only retriever, else production) to seed a first baseline. Prints a markdown summary (also appended to $GITHUB_STEP_SUMMARY when set).
    Exit 0: no regression; 3: a metric dropped by more than its --max-drop with p < --alpha (the
    questions that got worse are listed); 1: a user error.

    Example:

    \b
        labeler eval --golden golden.jsonl --pipeline mypkg.rag:answer -k 5 \\
            --baseline baseline.json --max-drop recall@5=0.02 --max-drop mrr=0.02 -o report.json \\
            --report-md report.md --junit junit.xml
    """
    from ..harness import (
        GateOptions,
        GoldenOptions,
        JudgeOptions,
        OutputOptions,
        RunOptions,
        ScoringOptions,
        append_step_summary,
        evaluate,
    )

    run = RunOptions(pipeline=pipeline, endpoint=endpoint, mapping=maps, headers=headers, retriever=retriever,
                     concurrency=concurrency, timeout=timeout)
    golden_options = GoldenOptions(threshold=threshold, strict=not lenient, holdout=holdout)
    scoring = ScoringOptions(k=k, metrics=metric_specs, seed=seed)
    gate = GateOptions(baseline=baseline, max_drop=max_drops, alpha=alpha, allow_golden_change=allow_golden_change,
                       n_permutations=permutations)
    outputs = OutputOptions(output=output, save_baseline=save_baseline, report_md=report_md, junit=junit)
    judges = JudgeOptions(runs=judge_runs, llm_config=_eval_llm_config() if judge_runs else None)
    db = ctx.obj["db_path"] if judge_runs or holdout or not (pipeline or endpoint) else None
    update, close = progress_bar("questions")
    try:
        result = evaluate(golden, db=db, run=run, golden_options=golden_options, scoring=scoring, gate=gate,
                          outputs=outputs, judges=judges, progress=update if sys.stderr.isatty() else None)
    finally:
        close()
    append_step_summary(result.markdown, os.environ.get("GITHUB_STEP_SUMMARY"))
    report = result.report
    comparison = (report["comparison"] or {}).get("metrics")
    rows = []
    for spec, agg in report["metrics"].items():
        row = {"metric": spec, **{key: agg.get(key) for key in ("mean", "ci_low", "ci_high", "n")}}
        if comparison is not None:
            change = comparison.get(spec) or {}
            row.update({key: change.get(key) for key in ("baseline", "drop", "max_drop", "p_value", "failed")})
        rows.append(row)
    columns = ["metric", "mean", "ci_low", "ci_high", "n"]
    if comparison is not None:
        columns += ["baseline", "drop", "max_drop", "p_value", "failed"]
    return Output(report, columns, rows, text=[result.markdown.removesuffix("\n")], exit_code=result.exit_code)


def _parse_ks(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(k) for k in value.split(",") if k.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: give whole numbers separated by commas, e.g. 1,3,5,10") from None
    if not ks or min(ks) < 1:
        raise click.BadParameter(f"{value!r}: give positive cutoffs, e.g. 1,3,5,10")
    return ks


@cli.command("metrics", context_settings=CONTEXT_SETTINGS)
@click.option("--k", "ks", default="1,3,5,10", show_default=True, callback=_parse_ks, metavar="K,K,...",
              help="Cutoffs for the default metrics and for --metric names given without @k.")
@click.option("--metric", "metric_specs", multiple=True, metavar="SPEC",
              help="A metric spec (recall@5, P@10, mrr, ndcg...); repeatable. Default: recall, ndcg, mrr.")
@click.option("--retriever", help="Whose logged ranking to score (default: the only retriever, else production).")
@click.option("--compare", metavar="A,B", help="Compare two retrievers on the queries both ran: means, the paired "
              "difference with a bootstrap CI, a sign-flip p-value, judged@k.")
@click.option("--origin", type=ORIGIN_CHOICE, help="Only queries of this origin.")
@click.option("--annotator", help="Only this annotator's submitted grades.")
@click.option("--since", metavar="TIME", help="Only labels submitted at or after TIME (ISO 8601).")
@click.option("--until", metavar="TIME", help="Only labels submitted before TIME (ISO 8601).")
@click.option("--per-query", "per_query", type=click.Path(dir_okay=False),
              help='Write every query\'s values as JSONL {"query_id", "metric", "value"}.')
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap CIs.")
@click.option("--all-traffic", "all_traffic", is_flag=True,
              help="Estimate over all traffic from a judge run plus the human labels (prediction-powered).")
@click.option("--judge-run", "judge_run", type=int, metavar="RUN",
              help="With --all-traffic: a relevance run over all traffic (labeler judge run --on all).")
@click.option("--design", type=click.Choice(["uniform", "active", "stratified", "routed"]),
              help="With --all-traffic: which labels (default: active when the active draw has labels, else "
                   "stratified when the stratified queue has, else uniform; when routing sampled the live "
                   "traffic, routed: each label weighted by 1 / its inclusion probability).")
@click.option("--random-only", "random_only", is_flag=True,
              help="With --all-traffic: use only labels drawn at random, leaving out the others.")
@output_options()
@click.pass_context
def metrics_cmd(ctx: click.Context, ks: tuple[int, ...], metric_specs: tuple[str, ...], retriever: str | None,
                compare: str | None, origin: str | None, annotator: str | None, since: str | None,
                until: str | None, per_query: str | None, seed: int, all_traffic: bool, judge_run: int | None,
                design: str | None, random_only: bool, output_format: str) -> Output:
    """Retrieval metrics of the labeled queries, identical to trec_eval, with 95% bootstrap CIs.

    Scores the logged ranking of --retriever against the consolidated human labels of submitted
    queries; relevant = grade >= the project's threshold. Queries without a relevant chunk are
    left out of the means and counted. judged@k (the share of the top k with a label) under 0.9
    prints a warning: the metrics then count unjudged chunks as irrelevant. When routing rules
    sampled the live traffic (labeler route set --rate), it says how the labeled set was drawn and
    adds each metric weighted by 1 / inclusion probability, with its CI (columns weighted...).

    Example:

        labeler metrics --k 5,10 --metric recall --metric mrr --origin log --json

    \b
        labeler metrics --compare production,bm25 --k 10 --json

    --all-traffic estimates every metric over all logged traffic: a judge run over all of it
    (`labeler judge run --on all`), corrected by the human labels of a random, active, stratified
    or routed sample (PPI++ / active inference), with 95% CIs, beside the human-only and the
    judge-only means.

    \b
        labeler metrics --all-traffic --judge-run 3 --json
    """
    specs = list(metric_specs) or None
    if all_traffic:
        if compare is not None or per_query or origin or annotator or since or until:
            raise click.UsageError("--all-traffic takes --metric, --retriever, --judge-run, --design, --random-only")
        return _all_traffic(ctx, specs, retriever=retriever, judge_run=judge_run, design=design,
                            random_only=random_only)
    if judge_run is not None or design is not None or random_only:
        raise click.UsageError("--judge-run, --design and --random-only go with --all-traffic")
    if compare is not None:
        if retriever is not None or per_query:
            raise click.UsageError("--compare names both retrievers; it takes neither --retriever nor --per-query")
        return _compare(ctx, compare, specs, ks=ks, origin=origin, annotator=annotator, since=since, until=until,
                        seed=seed)
    return _labeled(ctx, specs, ks=ks, retriever=retriever, origin=origin, annotator=annotator, since=since,
                    until=until, seed=seed, per_query=per_query)


# The three modes of ``labeler metrics``, one library call each.

def _labeled(ctx: click.Context, specs: list[str] | None, *, ks: tuple[int, ...], retriever: str | None,
             origin: str | None, annotator: str | None, since: str | None, until: str | None, seed: int,
             per_query: str | None) -> Output:
    """``labeler metrics``: ``labeler.report.retrieval_report``; a row per metric, then judged@k."""
    from ..report import retrieval_report

    report = retrieval_report(open_db(ctx), specs, ks=ks, retriever=retriever, origin=origin, annotator=annotator,
                              since=since, until=until, seed=seed)
    if per_query:
        report.write_per_query(per_query)
    document = report.to_dict()
    rows = [{"metric": spec, **v} for spec, v in document["metrics"].items()]
    rows += [{"metric": spec, "mean": v["mean"], "ci_low": None, "ci_high": None, "n": v["n"]}
             for spec, v in report.judged.items()]
    columns = ["metric", "mean", "ci_low", "ci_high", "n"]
    before = [f"{report.retriever}: {report.n_queries} labeled queries, threshold {report.threshold}; "
              f"{report.n_without_relevant} without a relevant chunk (left out of the means)"
              + (f"; {report.n_not_run} more it never ran (left out)" if report.n_not_run else "")]
    notes = [f"Warning: {line}" for line in report.judged_warnings()]
    w = report.weighted
    if w is not None:
        columns += ["weighted", "weighted_ci_low", "weighted_ci_high", "weighted_n"]
        for row in rows:
            got = w["metrics"].get(row["metric"], {})
            row.update({"weighted": got.get("mean"), "weighted_ci_low": got.get("ci_low"),
                        "weighted_ci_high": got.get("ci_high"), "weighted_n": got.get("n")})
        before.append(f"labeled set {w['text']}; weighted = over the {w['population']} live queries the rules "
                      "decided (Hajek, 95% CI); mean = the labeled set's plain mean")
        notes += [f"note: {line}" for line in ([w["error"]] if w["error"] else []) + w["notes"]]
    return Output(
        document, columns, rows, before=before,
        after=["95% bootstrap CIs; judged@k: the share of the top k with a human label"] if report.judged else [],
        notes=notes)


def _compare(ctx: click.Context, names: str, specs: list[str] | None, *, ks: tuple[int, ...], origin: str | None,
             annotator: str | None, since: str | None, until: str | None, seed: int) -> Output:
    """``labeler metrics --compare A,B``: ``labeler.report.compare_retrievers``; a row per metric."""
    from ..report import compare_retrievers

    pair = [n.strip() for n in names.split(",")]
    if len(pair) != 2 or not all(pair):
        raise click.BadParameter(f"{names!r}: give two retrievers separated by a comma, e.g. production,bm25",
                                 param_hint="'--compare'")
    c = compare_retrievers(open_db(ctx), pair[0], pair[1], specs, ks=ks, origin=origin, annotator=annotator,
                           since=since, until=until, seed=seed)
    rows = [{"metric": spec, c.a: v.get("a"), c.b: v.get("b"), "diff": v.get("diff"), "ci_low": v.get("ci_low"),
             "ci_high": v.get("ci_high"), "p_value": v.get("p_value"), "n": v["n"]} for spec, v in c.metrics.items()]
    return Output(
        c.to_dict(), ["metric", c.a, c.b, "diff", "ci_low", "ci_high", "p_value", "n"], rows,
        before=[f"{c.a} vs {c.b}: {c.n_queries} labeled queries both ran, threshold {c.threshold}; "
                f"{c.n_without_relevant} without a relevant chunk (left out); 95% bootstrap CI of the "
                f"difference (seed {c.seed}), paired sign-flip p-value"],
        after=[f"{r}: " + ", ".join(f"{s} {fmt_value(v)}" for s, v in judged.items())
               for r, judged in c.judged.items()],
        notes=[f"Warning: {line}" for line in c.warnings])  # --json carries them in "warnings"


def _all_traffic(ctx: click.Context, specs: list[str] | None, *, retriever: str | None, judge_run: int | None,
                 design: str | None, random_only: bool) -> Output:
    """``labeler metrics --all-traffic``: ``labeler.estimate.report.all_traffic_report``."""
    from ..estimate.report import all_traffic_report
    from .estimate import all_traffic_output

    return all_traffic_output(all_traffic_report(open_db(ctx), judge_run, specs, retriever=retriever, design=design,
                                                 random_only=random_only))
