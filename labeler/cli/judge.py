"""``labeler judge``: LLM judges calibrated against the human labels (``run``, ``agreement``, ``compare``,
``list``), from ``labeler.judge`` and ``labeler.agreement``."""

from __future__ import annotations

import sys
from typing import Any

import click

from .common import (
    CONTEXT_SETTINGS,
    LabelerGroup,
    fmt_value,
    json_option,
    open_db,
    print_json,
    progress_bar,
    secrets_toml,
)
from .group import cli


@cli.group("judge", cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def judge_group() -> None:
    """LLM judges calibrated against the human labels: run, agreement, compare, list.

    Example:

        labeler judge run --judge relevance.v1 --on labeled --limit 200
    """


def _stat_text(name: str, stat: dict[str, Any], ceiling: dict[str, Any] | None = None) -> str:
    if stat["value"] is None:
        line = f"{name:<28} undefined: {stat.get('reason', '')}"
    else:
        ci = f"[{fmt_value(stat['ci_low'])}, {fmt_value(stat['ci_high'])}]" if stat["ci_low"] is not None else ""
        line = f"{name:<28} {fmt_value(stat['value']):>7} {ci:<17} n={stat['n']}"
    if ceiling is not None and ceiling.get("value") is not None:
        line += f"   human-human {fmt_value(ceiling['value'])}"
    return line


@judge_group.command("run", context_settings=CONTEXT_SETTINGS)
@click.option("--judge", "judge_name", default="relevance.v1", show_default=True,
              help="A registered judge: relevance.v1, faithfulness.v1, answer-relevance.v1.")
@click.option("--on", "on_set", type=click.Choice(["labeled", "unlabeled", "all"]), default="labeled", show_default=True,
              help="labeled = calibrate on human-labeled items; unlabeled = pre-label (needs a passing gate); "
                   "all = every logged query, for `labeler metrics --all-traffic` (no gate needed).")
@click.option("--limit", type=click.IntRange(1), help="A seeded random sample of this many items.")
@click.option("--model", help="The model (default: LABELER_MODEL, else gpt-4o-mini).")
@click.option("--rubric", help="A rubric version such as relevance.v1/r2 (default: the latest).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the --limit sample.")
@click.option("--resume", "resume_id", type=int, metavar="RUN_ID", help="Finish a cancelled or failed run instead.")
@click.option("--dry-run", is_flag=True, help="Only estimate tokens and cost; send nothing.")
@click.option("--batch", "as_batch", is_flag=True,
              help="Send through the Batch API (half price, results within 24 h); returns at once.")
@click.option("--wait", "wait", is_flag=True, help="With --batch: poll until the batches finish, then collect.")
@json_option
@click.pass_context
def judge_run_cmd(ctx: click.Context, judge_name: str, on_set: str, limit: int | None, model: str | None,
                  rubric: str | None, seed: int, resume_id: int | None, dry_run: bool, as_batch: bool, wait: bool,
                  as_json: bool) -> None:
    """Run a judge over the human-labeled items (to calibrate) or the unlabeled ones (to pre-label).

    Pre-labeling needs a calibration run of the same judge, rubric, model and temperature that
    passes the gate; its grades become suggestions that annotators accept or not. Reads
    OPENAI_API_KEY, OPENAI_BASE_URL and LABELER_MODEL (environment or .streamlit/secrets.toml).
    Answers are cached: a rerun pays only for what is missing.

    Example:

        labeler judge run --judge relevance.v1 --on labeled --limit 200 --model gpt-4o-mini

    `--on all` judges every logged query, labeled or not, whatever the gate says: the all-traffic
    estimates (`labeler metrics --all-traffic`) correct the judge's bias with the human labels.
    """
    from ..judge import resume_run, run_judge
    from ..llm import LLMConfig

    db = open_db(ctx)
    config = LLMConfig.from_env(secrets_toml(), model=model)
    update, close = progress_bar(judge_name)
    progress = (lambda p: update(p.completed, p.total)) if sys.stderr.isatty() else None
    try:
        if resume_id is not None:
            run = resume_run(db, config, resume_id, progress=progress)
        else:
            run = run_judge(db, config, judge_name, on=on_set, limit=limit, rubric=rubric, seed=seed,
                            progress=None if as_batch else progress, dry_run=dry_run, batch=as_batch)
    finally:
        close()
    if run.status == "submitted" and wait:
        from ..llm import batch
        from .llm import collect_summary, wait_for

        wait_for(db, config, "judge", run.id, 30)
        click.echo(collect_summary(batch.collect(db, config, owner="judge", run_id=run.id)), err=as_json)
        from ..judge import get_run

        run = get_run(db, run.id)
    if run.status == "submitted":
        if as_json:
            print_json(run.to_dict())
        else:
            click.echo(f"run {run.id}: {run.judge} on {run.items} {run.on_set} items submitted as "
                       f"{len(run.batches)} batch(es): {', '.join(run.batches)}; "
                       f"collect with: labeler llm collect judge:{run.id}")
        return
    if as_json:
        print_json(run.to_dict())
        return
    if run.estimate is not None:
        e = run.estimate
        cost = f"${e.cost:.4f} (at most ${e.cost_max:.4f}); as a batch ${e.cost_batch:.4f}" \
            if e.cost is not None else "unknown"
        click.echo(f"dry run of {run.judge} ({run.rubric}) on {run.items} {run.on_set} items with {e.model}: "
                   f"{e.to_request} requests to send, {e.cached} cached; ~{e.input_tokens} input and "
                   f"~{e.output_tokens} output tokens; cost {cost}")
        for note in e.notes:
            click.echo(f"  {note}", err=True)
        return
    cost = f"${run.cost:.4f}" if run.cost is not None else "unknown"
    click.echo(f"run {run.id}: {run.judge} ({run.rubric}, {run.model}) on {run.items} {run.on_set} items: "
               f"{run.done} done, {run.cached} cached, {run.failed} failed, {run.cancelled} not run; cost {cost}; "
               f"{run.status}")
    for key, reason in run.failures[:20]:
        click.echo(f"  {key}: {reason}", err=True)
    if run.on_set == "labeled":
        click.echo(f"next: labeler judge agreement {run.id}")
    elif run.on_set == "all":
        click.echo(f"next: labeler metrics --all-traffic --judge-run {run.id}")


@judge_group.command("agreement", context_settings=CONTEXT_SETTINGS)
@click.argument("run_id", type=int)
@click.option("--resamples", type=click.IntRange(0), default=1000, show_default=True, help="Bootstrap resamples.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap.")
@click.option("--k", type=click.IntRange(1), default=10, show_default=True,
              help="Cutoff of recall@k and nDCG@k when several retrievers are logged.")
@json_option
@click.pass_context
def judge_agreement_cmd(ctx: click.Context, run_id: int, resamples: int, seed: int, k: int, as_json: bool) -> None:
    """Agreement of a judge run with the human labels (95% bootstrap CIs), the human-human
    ceiling, retrievers by judge vs by humans, and the calibration gate.

    With --json: one key per statistic, each {"value", "ci_low", "ci_high", "n"} (value null and a
    "reason" when undefined), then human_human, retrievers, run, gate.

    Example:

        labeler judge agreement 3 --json
    """
    from ..agreement import display_name, run_agreement
    from ..judge import gate

    db = open_db(ctx)
    result = run_agreement(db, run_id, n_resamples=resamples, seed=seed, k=k)
    verdict = gate(db, run_id, agreement=result)
    out = result.to_dict()
    out["gate"] = verdict.to_dict()
    if as_json:
        print_json(out)
        return
    run = result.run
    click.echo(f"run {run.id}: {run.judge} ({run.rubric}, {run.model}) vs human labels; 95% CIs from "
               f"{resamples} resamples")
    for name, stat in result.statistics.items():
        if name != "confusion_matrix":
            ceiling = result.human_human.get(name)
            click.echo(_stat_text(display_name(name), stat.to_dict(), ceiling.to_dict() if ceiling else None))
    matrix = result.statistics["confusion_matrix"].value
    click.echo("confusion matrix (rows human, columns judge): " + " | ".join(" ".join(map(str, r)) for r in matrix))
    if out["retrievers"] and out["retrievers"]["metrics"]:
        for name, tau in out["retrievers"]["kendall_tau"].items():
            click.echo(_stat_text(f"{display_name('kendall_tau')} {name}", tau))
    if any(result.excluded.values()):
        click.echo("left out: " + ", ".join(f"{v} {k}" for k, v in result.excluded.items() if v))
    click.echo(f"gate: {'passed' if verdict.passed else 'failed'}: " + "; ".join(verdict.reasons))


@judge_group.command("compare", context_settings=CONTEXT_SETTINGS)
@click.argument("run_a", type=int)
@click.argument("run_b", type=int)
@click.option("--resamples", type=click.IntRange(0), default=1000, show_default=True, help="Bootstrap resamples.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap.")
@json_option
@click.pass_context
def judge_compare_cmd(ctx: click.Context, run_a: int, run_b: int, resamples: int, seed: int, as_json: bool) -> None:
    """Compare two runs of the same kind (rubric v1 vs v2, model A vs B): each against humans,
    the paired difference B - A with a CI on the items both judged, and A vs B themselves.

    Example:

        labeler judge compare 3 4 --json
    """
    from ..agreement import compare_runs, display_name

    result = compare_runs(open_db(ctx), run_a, run_b, n_resamples=resamples, seed=seed)
    if as_json:
        print_json(result.to_dict())
        return
    a, b = result.a.run, result.b.run
    click.echo(f"run {a.id}: {a.judge} ({a.rubric}, {a.model})  vs  run {b.id}: {b.judge} ({b.rubric}, {b.model}); "
               f"{result.common} common human-labeled items")
    for name, stat in result.difference.items():
        sa, sb = result.a.statistics[name], result.b.statistics[name]
        d = stat.to_dict()
        ci = f"[{fmt_value(d['ci_low'])}, {fmt_value(d['ci_high'])}]" if d["ci_low"] is not None else ""
        click.echo(f"{display_name(name):<28} {fmt_value(sa.value):>7} {fmt_value(sb.value):>7}   "
                   f"B-A {fmt_value(d['value']):>7} {ci}")
    click.echo(f"A vs B exact agreement {fmt_value(result.between['exact_agreement'].value)}, "
               f"Cohen's kappa {fmt_value(result.between['cohen_kappa'].value)} (n={result.between['cohen_kappa'].n})")


@judge_group.command("list", context_settings=CONTEXT_SETTINGS)
@json_option
@click.pass_context
def judge_list_cmd(ctx: click.Context, as_json: bool) -> None:
    """Every judge run, newest first: judge, rubric, model, items, status, cost.

    Example:

        labeler judge list --json
    """
    from ..judge import list_runs

    runs = list_runs(open_db(ctx))
    if as_json:
        print_json([r.to_dict() for r in runs])
        return
    if not runs:
        click.echo("no judge runs yet: labeler judge run --judge relevance.v1 --on labeled")
    for r in runs:
        cost = f"${r.cost:.4f}" if r.cost is not None else "-"
        click.echo(f"{r.id:>4}  {r.created_at[:19]}  {r.judge:<20} {r.rubric:<22} {r.model:<16} {r.on_set:<9} "
                   f"{r.items:>6} items  {r.failed:>4} failed  {r.status:<9} {cost}")

