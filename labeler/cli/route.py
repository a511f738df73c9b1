"""``labeler route`` (``set``, ``show``, ``preview``, ``clear``): which live queries enter the labeling
queue (``labeler.labels.routing``)."""

from __future__ import annotations

from typing import Any

import click

from .common import CONTEXT_SETTINGS, LabelerGroup, open_db
from .group import cli
from .output import Output, output_options

PREVIEW_COLUMNS = ["query_id", "routed", "reason", "inclusion_prob", "day", "topic"]
SHOW_COLUMNS = ["reason", "decided", "labeled"]


@cli.group("route", cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def route_group() -> None:
    """Routing rules: which queries synced from live sources enter the labeling queue.

    Queries with a negative signal always; a sampling rate for the rest, with an optional daily
    cap; quotas per topic; every query of a new topic. Each routed query records its inclusion
    probability, so the all-traffic estimates stay unbiased.

    Example:

        labeler route set --rate 0.05 --daily-cap 200
    """


def _rules_text(rules: dict[str, Any] | None, describe: str) -> list[str]:
    if rules is None:
        return [describe]
    cap = "none" if rules["daily_cap"] is None else f"{rules['daily_cap']} a day, then rate {rules['after_cap']:g}"
    quotas = ", ".join(f"topic {t}: {n}" for t, n in rules["quotas"].items()) or "none"
    return [describe, f"rate {rules['rate']:g}; signals always: {'yes' if rules['always_signals'] else 'no'}; "
                      f"daily cap: {cap}; quotas: {quotas}; new topics: {'yes' if rules['new_topics'] else 'no'}; "
                      f"seed {rules['seed']}"]


@route_group.command("set", context_settings=CONTEXT_SETTINGS)
@click.option("--rate", type=float, help="Share of the other live queries routed, 0 to 1 (default 1: all).")
@click.option("--daily-cap", type=click.IntRange(min=0),
              help="Routed queries a day (quotas and sampled; signals are never capped) before the rate drops "
                   "to --rate-after-cap. 0: no cap.")
@click.option("--rate-after-cap", type=float, help="The rate for the rest of a day once the cap is reached "
                                                     "(above 0; default a tenth of --rate).")
@click.option("--always-signals/--no-always-signals", default=None,
              help="Route every query with a negative signal (thumbs down, low rating, escalation, retry, "
                   "error). Default: on.")
@click.option("--quota", "quotas", multiple=True, metavar="TOPIC=N",
              help="Route the first N queries of TOPIC each day (repeat; see labeler coverage for the topics "
                   "the golden set under-covers). --quota '' clears them.")
@click.option("--new-topics/--no-new-topics", default=None,
              help="Route every query far from every topic (what labeler drift calls new). Default: off.")
@click.option("--seed", type=click.IntRange(min=0), help="Seed of the sampling hash (default 0).")
@output_options()
@click.pass_context
def route_set_cmd(ctx: click.Context, rate: float | None, daily_cap: int | None, rate_after_cap: float | None,
                  always_signals: bool | None, quotas: tuple[str, ...], new_topics: bool | None,
                  seed: int | None, output_format: str) -> Output:
    """Set the routing rules (the options given change; the others keep their value). Decisions
    already made stay: each live query is decided once, when a sync brings it.

    Example:

        labeler route set --rate 0.05 --daily-cap 200 --quota 3=20 --new-topics
    """
    from ..labels.routing_rules import parse_quotas, set_rules

    parsed = None if not quotas else ({} if quotas == ("",) else parse_quotas(quotas))
    rules = set_rules(open_db(ctx, create=True), rate=rate, daily_cap=daily_cap, rate_after_cap=rate_after_cap,
                      always_signals=always_signals, quotas=parsed, new_topics=new_topics, seed=seed)
    doc = rules.to_dict()
    return Output(doc, list(doc), [doc], text=_rules_text(doc, rules.describe()))


@route_group.command("show", context_settings=CONTEXT_SETTINGS)
@output_options()
@click.pass_context
def route_show_cmd(ctx: click.Context, output_format: str) -> Output:
    """The routing rules and what they decided so far: live queries per reason (signal, new-topic,
    quota, sampled, not-sampled) and how many of those are labeled.

    Example:

        labeler route show --json
    """
    from ..labels.routing import routing_summary

    summary = routing_summary(open_db(ctx))
    rows = [{"reason": r, "decided": n, "labeled": summary["labeled_by_reason"][r]}
            for r, n in summary["by_reason"].items()]
    return Output(summary, SHOW_COLUMNS, rows, before=_rules_text(summary["rules"], summary["describe"]),
                  after=[f"{summary['routed']} of {summary['decided']} decided live queries routed to the queue"])


@route_group.command("preview", context_settings=CONTEXT_SETTINGS)
@click.option("--since", default="1d", show_default=True, metavar="TIME",
              help="From when: an interval back from now (1d, 6h) or an ISO 8601 time.")
@output_options(nl=True)
@click.pass_context
def route_preview_cmd(ctx: click.Context, since: str, output_format: str) -> Output:
    """What the routing rules would route among the logged queries first seen since --since (default
    the last day), decided afresh and written nowhere.

    Example:

        labeler route preview --json
    """
    from ..labels.routing import preview
    from ..sources import parse_since

    db = open_db(ctx)
    import labeler.topics  # noqa: F401 - quotas and new topics need the topic assigner

    found = preview(db, since=parse_since(since))
    rows = found["queries_detail"]
    reasons = ", ".join(f"{n} {r}" for r, n in found["by_reason"].items() if n)
    return Output(found, PREVIEW_COLUMNS, rows, before=[f"since {found['since']}: {found['routed']} of "
                                                        f"{found['queries']} queries routed ({reasons or 'none'}); "
                                                        f"expected {found['expected_routed']:g}"],
                  empty="no logged query in that time")


@route_group.command("clear", context_settings=CONTEXT_SETTINGS)
@click.pass_context
def route_clear_cmd(ctx: click.Context) -> None:
    """Remove the routing rules: every live query is queued again (decisions already made stay).

    Example:

        labeler route clear
    """
    from ..labels.routing_rules import clear_rules

    clear_rules(open_db(ctx))
    click.echo("routing rules removed: every live query is queued")
