"""``labeler synth``: synthetic questions from the corpus (``generate``) and their distribution shift
against the logged ones (``report``), from ``labeler.synth``."""

from __future__ import annotations

import sys

import click

from .common import (
    CONTEXT_SETTINGS,
    LabelerGroup,
    json_option,
    open_db,
    print_json,
    progress_bar,
    secrets_toml,
)
from .group import cli


@cli.group(cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def synth() -> None:
    """Generate synthetic questions from the corpus and compare them with logged ones.

    Generated questions wait for review on the app's Review page before they are labeled.

    Example:

        labeler synth generate --n 50 --dry-run
    """


@synth.command("generate", context_settings=CONTEXT_SETTINGS)
@click.option("--n", "n", type=click.IntRange(1, 100_000), default=50, show_default=True,
              help="Questions to ask for in all.")
@click.option("--per-chunk", type=click.IntRange(1, 20), default=2, show_default=True,
              help="Questions per seed chunk.")
@click.option("--seed", type=int, default=7, show_default=True, help="Seed of the chunk and example sampling.")
@click.option("--model", help="Model name (default: env LABELER_MODEL, else gpt-4o-mini).")
@click.option("--types", default="fact,how-to,troubleshooting,comparison", show_default=True,
              help="Comma-separated question types.")
@click.option("--persona", help='Who asks, e.g. "a new admin of a small team".')
@click.option("--language", help="Language of the questions (default: setting synth_language, else detected).")
@click.option("--strategy", type=click.Choice(["uncovered", "random", "stratified"]), default="uncovered",
              show_default=True, help="How seed chunks are picked.")
@click.option("--multi-hop", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Share of seeds that pair two related chunks.")
@click.option("--duplicate-threshold", type=click.FloatRange(0, 1, min_open=True), default=0.85,
              show_default=True, help="TF-IDF cosine at which a question is a near-duplicate.")
@click.option("--concurrency", type=click.IntRange(1, 256), help="Parallel requests (default 8).")
@click.option("--dry-run", is_flag=True, help="Print the token and cost estimate; send nothing.")
@click.option("--batch", "as_batch", is_flag=True,
              help="Send through the Batch API (half price, results within 24 h); returns at once.")
@click.option("--wait", "wait", is_flag=True, help="With --batch: poll until the batches finish, then collect.")
@json_option
@click.pass_context
def synth_generate_cmd(ctx: click.Context, n: int, per_chunk: int, seed: int, model: str | None, types: str,
                       persona: str | None, language: str | None, strategy: str, multi_hop: float,
                       duplicate_threshold: float, concurrency: int | None, dry_run: bool, as_batch: bool,
                       wait: bool, as_json: bool) -> None:
    """Generate synthetic questions from seed chunks; they are stored pending review.

    Needs OPENAI_API_KEY (and OPENAI_BASE_URL for another endpoint) in the environment or in
    .streamlit/secrets.toml. A rerun with the same options resumes: finished requests come from
    the cache and cost nothing.

    Example:

        labeler synth generate --n 50 --per-chunk 2 --seed 7 --model gpt-4o-mini --dry-run
    """
    from .. import llm
    from .. import synth as synthesis

    options = synthesis.SynthOptions(
        n=n, per_chunk=per_chunk, seed=seed, question_types=tuple(t.strip() for t in types.split(",") if t.strip()),
        persona=persona, language=language, strategy=strategy, multi_hop=multi_hop,
        duplicate_threshold=duplicate_threshold)
    config = llm.LLMConfig.from_env(secrets_toml(), model=model, concurrency=concurrency)
    db = open_db(ctx)
    if dry_run:
        plan = synthesis.plan_generation(db, config, options)
        if as_json:
            print_json(plan.to_dict())
            return
        e = plan.estimate
        cost = "unknown cost (no price for this model)" if e.cost is None else \
            f"about ${e.cost:.4f} (at most ${e.cost_max:.4f}; ${e.cost_batch:.4f} as a batch)"
        click.echo(f"dry run: {e.to_request} request(s) to {e.model} ({e.cached} cached) for up to "
                   f"{len(plan.seeds) * per_chunk} questions from {len(plan.seeds)} seed(s): ~{e.input_tokens} input + "
                   f"~{e.output_tokens} output tokens, {cost}; nothing was sent")
        for note in plan.notes + e.notes:
            click.echo(f"note: {note}", err=True)
        return
    if as_batch:
        result = synthesis.generate(db, config, options, batch=True)
        if wait and result.status == "submitted":
            from .llm import collect_summary, wait_for

            wait_for(db, config, "synth", result.run_id, 30)
            click.echo(collect_summary(llm.batch.collect(db, config, owner="synth", run_id=result.run_id)))
            return
        if as_json:
            print_json(result.to_dict())
        elif result.status == "submitted":
            click.echo(f"synth run {result.run_id} submitted as {len(result.batches)} batch(es): "
                       f"{', '.join(result.batches)}; collect with: labeler llm collect synth:{result.run_id}")
        else:
            click.echo(f"synth run {result.run_id}: everything was cached; stored {len(result.stored)} question(s)")
        return
    update, close = progress_bar("generating")
    try:
        result = synthesis.generate(
            db, config, options,
            progress=(lambda p: update(p.completed, p.total)) if sys.stderr.isatty() else None)
    finally:
        close()
    r = result.to_dict()
    if as_json:
        print_json(r)
        return
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(r["rejected_by_reason"].items()))
    m = r["llm"]
    cost = "unknown" if m["cost"] is None else f"${m['cost']:.4f}"
    click.echo(f"stored {r['stored']} synthetic question(s) pending review; rejected {r['rejected']}"
               + (f" ({reasons})" if reasons else "") + f"; already stored {r['already_stored']}; "
               f"{len(m['failed'])} failed; {m['requests']} request(s), {m['cached']} cached; cost {cost}")
    for f in m["failed"][:20]:
        click.echo(f"  failed {f['key']}: {f['reason']}", err=True)
    for rej in r["rejections"][:20]:
        click.echo(f"  rejected ({rej['reason']}: {rej['detail']}): {rej['question'][:100]}", err=True)


@synth.command("report", context_settings=CONTEXT_SETTINGS)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the folds and the bootstrap.")
@click.option("--all", "include_rejected", is_flag=True, help="Include synthetic questions rejected in review.")
@json_option
@click.pass_context
def synth_report_cmd(ctx: click.Context, seed: int, include_rejected: bool, as_json: bool) -> None:
    """Distribution shift: synthetic vs logged questions (wording, classifier AUC, terms, metrics).

    Example:

        labeler synth report --json
    """
    from ..synth import shift_report

    report = shift_report(open_db(ctx), seed=seed, review_states=None if include_rejected else ("pending", "accepted"))
    if as_json:
        print_json(report)
        return
    c, w = report["classifier"], report["wording"]
    click.echo(f"questions          {report['n']['log']} logged, {report['n']['synthetic']} synthetic")
    click.echo(f"mean length        {w['log']['words_mean']} vs {w['synthetic']['words_mean']} words")
    if c["auc"] is None:
        click.echo(f"classifier AUC     - ({c.get('note')})")
    else:
        click.echo(f"classifier AUC     {c['auc']:.3f} (95% CI {c['ci_low']:.3f}-{c['ci_high']:.3f}; "
                   "0.5 = indistinguishable)")
    click.echo("synthetic terms    " + ", ".join(t["term"] for t in report["terms"]["synthetic"][:10]))
    click.echo("logged terms       " + ", ".join(t["term"] for t in report["terms"]["log"][:10]))
    for origin in ("log", "synthetic"):
        r = report["retrieval"][origin]
        values = ", ".join(f"{k} {v['mean']:.3f}" for k, v in r["metrics"].items() if v["mean"] is not None)
        click.echo(f"{origin + ' metrics':<19}{values or '-'} ({r['queries']} labeled queries)")

