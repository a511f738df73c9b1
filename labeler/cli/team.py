"""``labeler stats``, ``annotators`` and ``queue``: what the database and the team's labeling hold."""

from __future__ import annotations

import click

from .. import db as store
from .common import CONTEXT_SETTINGS, json_option, open_db, print_json
from .group import cli


@cli.command(context_settings=CONTEXT_SETTINGS)
@json_option
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Show what the database holds: documents, queries by origin, retrievals, labels.

    Example:

        labeler stats --json
    """
    s = store.stats(open_db(ctx))
    if as_json:
        print_json(s)
        return
    origins = ", ".join(f"{k} {v}" for k, v in s["queries_by_origin"].items())
    click.echo(f"documents          {s['documents']} ({s['documents_without_text']} without text)")
    click.echo(f"queries            {s['queries']} ({origins}); {s['occurrences']} occurrences")
    click.echo(f"retrievals         {s['retrievals']} (retrievers: {', '.join(s['retrievers']) or '-'})")
    click.echo(f"relevance labels   {s['relevance_labels']}")
    click.echo(f"labeled queries    {s['labeled_queries']}; unlabeled {s['unlabeled_queries']}")


@cli.command(context_settings=CONTEXT_SETTINGS)
@json_option
@click.pass_context
def annotators(ctx: click.Context, as_json: bool) -> None:
    """Per-annotator counts (submitted, skipped, flagged, discarded, grades) and time spent; with
    --json also items per hour, kappa vs the consolidated label and vs the others (with 95% CIs),
    skip and flag shares (defined in the README, "Annotators").

    Example:

        labeler annotators --json
    """
    from ..labels import annotator_stats

    db = open_db(ctx)
    rows = annotator_stats(db)
    if as_json:
        from ..labels.coaching import annotator_performance

        extra = {r["annotator"]: r for r in annotator_performance(db)}
        print_json([{**extra.get(r["annotator"], {}), **r} for r in rows])
        return
    if not rows:
        click.echo("no annotators yet (they appear when they sign in to the app)")
    for r in rows:
        median = f"{r['median_seconds']:.0f} s" if r["median_seconds"] is not None else "-"
        click.echo(f"{r['annotator']:<20} {r['role'] or '-':<9} submitted {r['submitted']:>5}  skipped {r['skipped']:>4}  "
                   f"flagged {r['flagged']:>4}  discarded {r['discarded']:>4}  grades {r['grades']:>6}  "
                   f"time {r['seconds'] / 3600:.1f} h  median/item {median}")


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
@json_option
@click.pass_context
def queue(ctx: click.Context, order: str | None, targets: tuple[str, ...], judge_run: int | None,
          budget: float | None, seed: int, as_json: bool) -> None:
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

        set_order(open_db(ctx), order, judge_run=judge_run, budget=budget, seed=seed, as_json=as_json,
                  targets=list(targets))
        return
    if targets:
        raise click.UsageError("--target goes with --order stratified")
    counts = queue_counts(open_db(ctx))
    if as_json:
        print_json(counts)
        return
    for key, value in counts.items():
        click.echo(f"{key:<15} {value}")

