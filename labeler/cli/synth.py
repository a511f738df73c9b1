"""``labeler synth``: synthetic questions from the corpus (``generate``) and their distribution shift
against the logged ones (``report``), from ``labeler.synth``."""

from __future__ import annotations

import sys

import click

from .common import CONTEXT_SETTINGS, LabelerGroup, open_db, progress_bar, secrets_toml
from .group import cli
from .output import Note, Output, output_options

GENERATE_COLUMNS = ["run_id", "stored", "rejected", "already_stored", "failed", "requests", "cached", "cost"]
SUBMITTED_COLUMNS = ["run_id", "status", "batches", "stored"]


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
@output_options()
@click.pass_context
def synth_generate_cmd(ctx: click.Context, n: int, per_chunk: int, seed: int, model: str | None, types: str,
                       persona: str | None, language: str | None, strategy: str, multi_hop: float,
                       duplicate_threshold: float, concurrency: int | None, dry_run: bool, as_batch: bool,
                       wait: bool, output_format: str) -> Output | None:
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
        e = plan.estimate
        cost = "unknown cost (no price for this model)" if e.cost is None else \
            f"about ${e.cost:.4f} (at most ${e.cost_max:.4f}; ${e.cost_batch:.4f} as a batch)"
        document = plan.to_dict()
        estimate = document["estimate"]
        return Output(document, ["seeds", *estimate], [{"seeds": len(plan.seeds), **estimate}],
                      text=[f"dry run: {e.to_request} request(s) to {e.model} ({e.cached} cached) for up to "
                            f"{len(plan.seeds) * per_chunk} questions from {len(plan.seeds)} seed(s): "
                            f"~{e.input_tokens} input + ~{e.output_tokens} output tokens, {cost}; nothing was sent"],
                      notes=[f"note: {note}" for note in plan.notes + e.notes])
    if as_batch:
        result = synthesis.generate(db, config, options, batch=True)
        if wait and result.status == "submitted":
            from .llm import COLLECT_COLUMNS, collect_summary, wait_for

            wait_for(db, config, "synth", result.run_id, 30)
            collected = llm.batch.collect(db, config, owner="synth", run_id=result.run_id)
            if output_format == "json":  # as before: --wait prints the collect summary, not a document
                click.echo(collect_summary(collected))
                return None
            return Output(collected.to_dict(), COLLECT_COLUMNS, [collected.to_dict()],
                          text=[collect_summary(collected)])
        document = result.to_dict()
        if result.status == "submitted":
            text = [f"synth run {result.run_id} submitted as {len(result.batches)} batch(es): "
                    f"{', '.join(result.batches)}; collect with: labeler llm collect synth:{result.run_id}"]
        else:
            text = [f"synth run {result.run_id}: everything was cached; stored {len(result.stored)} question(s)"]
        return Output(document, SUBMITTED_COLUMNS, [{"run_id": result.run_id, "status": result.status,
                                                     "batches": list(result.batches), "stored": len(result.stored)}],
                      text=text)
    update, close = progress_bar("generating")
    try:
        result = synthesis.generate(
            db, config, options,
            progress=(lambda p: update(p.completed, p.total)) if sys.stderr.isatty() else None)
    finally:
        close()
    r = result.to_dict()
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(r["rejected_by_reason"].items()))
    m = r["llm"]
    cost = "unknown" if m["cost"] is None else f"${m['cost']:.4f}"
    text = [f"stored {r['stored']} synthetic question(s) pending review; rejected {r['rejected']}"
            + (f" ({reasons})" if reasons else "") + f"; already stored {r['already_stored']}; "
            f"{len(m['failed'])} failed; {m['requests']} request(s), {m['cached']} cached; cost {cost}"]
    text += [Note(f"  failed {f['key']}: {f['reason']}") for f in m["failed"][:20]]
    text += [Note(f"  rejected ({rej['reason']}: {rej['detail']}): {rej['question'][:100]}")
             for rej in r["rejections"][:20]]
    row = {"run_id": r.get("run_id"), "stored": r["stored"], "rejected": r["rejected"],
           "already_stored": r["already_stored"], "failed": len(m["failed"]), "requests": m["requests"],
           "cached": m["cached"], "cost": m["cost"]}
    return Output(r, GENERATE_COLUMNS, [row], text=text)


@synth.command("report", context_settings=CONTEXT_SETTINGS)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the folds and the bootstrap.")
@click.option("--all", "include_rejected", is_flag=True, help="Include synthetic questions rejected in review.")
@output_options()
@click.pass_context
def synth_report_cmd(ctx: click.Context, seed: int, include_rejected: bool, output_format: str) -> Output:
    """Distribution shift: synthetic vs logged questions (wording, classifier AUC, terms, metrics).

    Example:

        labeler synth report --json
    """
    from ..synth import shift_report

    report = shift_report(open_db(ctx), seed=seed, review_states=None if include_rejected else ("pending", "accepted"))
    c, w = report["classifier"], report["wording"]
    text = [f"questions          {report['n']['log']} logged, {report['n']['synthetic']} synthetic",
            f"mean length        {w['log']['words_mean']} vs {w['synthetic']['words_mean']} words"]
    if c["auc"] is None:
        text.append(f"classifier AUC     - ({c.get('note')})")
    else:
        text.append(f"classifier AUC     {c['auc']:.3f} (95% CI {c['ci_low']:.3f}-{c['ci_high']:.3f}; "
                    "0.5 = indistinguishable)")
    text.append("synthetic terms    " + ", ".join(t["term"] for t in report["terms"]["synthetic"][:10]))
    text.append("logged terms       " + ", ".join(t["term"] for t in report["terms"]["log"][:10]))
    rows = []
    for origin in ("log", "synthetic"):
        r = report["retrieval"][origin]
        values = ", ".join(f"{k} {v['mean']:.3f}" for k, v in r["metrics"].items() if v["mean"] is not None)
        text.append(f"{origin + ' metrics':<19}{values or '-'} ({r['queries']} labeled queries)")
        rows.append({"origin": origin, "questions": report["n"][origin], "words_mean": w[origin]["words_mean"],
                     "labeled_queries": r["queries"], **{k: v["mean"] for k, v in r["metrics"].items()}})
    specs = list(report["retrieval"]["metrics"])
    return Output(report, ["origin", "questions", "words_mean", "labeled_queries", *specs], rows, text=text)
