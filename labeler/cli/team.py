"""``labeler stats``, ``annotators`` and ``queue``: what the database and the team's labeling hold."""

from __future__ import annotations

import click

from .. import db as store
from .common import CONTEXT_SETTINGS, open_db
from .group import cli
from .output import Output, output_options


@cli.command(context_settings=CONTEXT_SETTINGS)
@output_options()
@click.pass_context
def stats(ctx: click.Context, output_format: str) -> Output:
    """Show what the database holds: documents, queries by origin, retrievals, labels.

    Example:

        labeler stats --json
    """
    s = store.stats(open_db(ctx))
    origins = ", ".join(f"{k} {v}" for k, v in s["queries_by_origin"].items())
    rows = [{"name": k, "value": v} for k, v in s.items() if not isinstance(v, dict | list)]
    rows += [{"name": f"queries_{k}", "value": v} for k, v in s["queries_by_origin"].items()]
    rows.append({"name": "retrievers", "value": ", ".join(s["retrievers"])})
    return Output(s, ["name", "value"], rows, text=[
        f"documents          {s['documents']} ({s['documents_without_text']} without text)",
        f"queries            {s['queries']} ({origins}); {s['occurrences']} occurrences",
        f"retrievals         {s['retrievals']} (retrievers: {', '.join(s['retrievers']) or '-'})",
        f"relevance labels   {s['relevance_labels']}",
        f"labeled queries    {s['labeled_queries']}; unlabeled {s['unlabeled_queries']}"])


@cli.command(context_settings=CONTEXT_SETTINGS)
@output_options(nl=True)
@click.pass_context
def annotators(ctx: click.Context, output_format: str) -> Output:
    """Per-annotator counts (submitted, skipped, flagged, discarded, grades) and time spent; with
    --json also items per hour, kappa vs the consolidated label and vs the others (with 95% CIs),
    skip and flag shares (defined in the README, "Annotators").

    Example:

        labeler annotators --json
    """
    from ..labels import annotator_stats

    db = open_db(ctx)
    rows = annotator_stats(db)
    if output_format == "json":  # the coaching numbers cost a pass over every label: only for --json
        from ..labels.coaching import annotator_performance

        extra = {r["annotator"]: r for r in annotator_performance(db)}
        return Output([{**extra.get(r["annotator"], {}), **r} for r in rows], [])
    return Output(rows, ANNOTATOR_COLUMNS, [{**r, "hours": round(r["seconds"] / 3600, 1)} for r in rows],
                  empty="no annotators yet (they appear when they sign in to the app)")


ANNOTATOR_COLUMNS = ["annotator", "role", "submitted", "skipped", "flagged", "discarded", "grades", "hours",
                     "median_seconds"]


@cli.command(context_settings=CONTEXT_SETTINGS)
@click.option("--order", type=click.Choice(["random", "oldest", "lowest_score", "frequent", "active", "stratified"]),
              help="Set the queue order first (a lead's setting). active draws the queries to label with "
                   "probabilities from the judge's uncertainty (needs --judge-run); stratified fills the topics "
                   "in proportion to their traffic (needs labeler topics build).")
@click.option("--target", "targets", multiple=True, metavar="TOPIC=SHARE",
              help="With --order stratified: the share of labels a topic should get instead of its traffic share "
                   "(repeatable; topics left out get none).")
@click.option("--judge-run", "judge_run", type=int, metavar="RUN",
              help="With --order active: a relevance run over all traffic (labeler judge run --on all).")
@click.option("--budget", type=click.FloatRange(min=0, min_open=True),
              help="With --order active: expected labels to draw (default: the label_budget setting, else 100).")
@click.option("--seed", type=int, default=0, show_default=True, help="With --order active: seed of the draw.")
@output_options()
@click.pass_context
def queue(ctx: click.Context, order: str | None, targets: tuple[str, ...], judge_run: int | None,
          budget: float | None, seed: int, output_format: str) -> Output:
    """Items in the labeling queue by state (open, leased, done), open slots, overlap, statuses.

    With --order, set the queue order instead; `--order active --judge-run RUN` draws the queries
    to label next (seeded, recorded) for the all-traffic estimates.

    Example:

        labeler queue --json

    \b
        labeler queue --order active --judge-run 3 --budget 200

    \b
        labeler queue --order stratified --target 0=0.5 --target 2=0.5
    """
    from ..labels import queue_counts

    if order is not None:
        from .estimate import set_order

        return set_order(open_db(ctx), order, judge_run=judge_run, budget=budget, seed=seed, targets=list(targets))
    if targets:
        raise click.UsageError("--target goes with --order stratified")
    counts = queue_counts(open_db(ctx))
    return Output(counts, ["state", "count"], [{"state": k, "count": v} for k, v in counts.items()])

