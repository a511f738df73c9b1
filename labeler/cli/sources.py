"""``labeler source`` (``add``, ``list``, ``remove``) and ``labeler sync``: live sources, the trace
stores whose new retrieval spans are ingested incrementally (``labeler.sources``)."""

from __future__ import annotations

from typing import Any

import click

from .common import CONTEXT_SETTINGS, LabelerGroup, open_db, topic_assigner
from .group import cli
from .output import Output, output_options, render

LIST_COLUMNS = ["name", "kind", "url", "project", "every_s", "overlap_s", "high_water", "lag_s", "last_sync_at",
                "last_error", "syncs", "spans", "queries_new", "last_new"]
SYNC_COLUMNS = ["name", "kind", "ok", "error", "window_start", "window_end", "resumed", "pages", "spans", "new",
                "known", "unchanged", "waiting", "rejected", "ingest_ids", "high_water", "requests", "retries"]


@cli.group("source", cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def source_group() -> None:
    """Trace stores (Phoenix, Langfuse, LangSmith) that labeler sync reads incrementally.

    Keys come from the environment or .streamlit/secrets.toml (PHOENIX_API_KEY, LANGFUSE_PUBLIC_KEY
    and LANGFUSE_SECRET_KEY, LANGSMITH_API_KEY); they are never stored in the database or printed.

    Example:

        labeler source add phoenix prod --url http://127.0.0.1:6006 --project rag-prod
    """


def _interval(_ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    from ..errors import SourceError
    from ..sources import parse_interval

    try:
        return parse_interval(value)
    except SourceError as e:  # a bad interval is a usage error of this option
        raise click.BadParameter(str(e), param=param) from None


@source_group.command("add", context_settings=CONTEXT_SETTINGS)
@click.argument("kind", type=click.Choice(["phoenix", "langfuse", "langsmith"]))
@click.argument("name")
@click.option("--url", "--host", "url", metavar="URL",
              help="The store's address (--host is the same, as Langfuse calls it). Default: "
                   "http://127.0.0.1:6006 (Phoenix), https://cloud.langfuse.com, https://api.smith.langchain.com.")
@click.option("--project", help="The project whose traces to read (Phoenix and LangSmith; Langfuse keys "
                                "belong to one project).")
@click.option("--every", "every_s", callback=_interval, metavar="INTERVAL",
              help="Sync it this often from labeler sync --every and the app, e.g. 5m.")
@click.option("--overlap", "overlap_s", callback=_interval, default="5m", show_default=True, metavar="INTERVAL",
              help="Each sync re-reads this far back, for spans the store received late.")
@click.option("--sample", type=float, metavar="RATE",
              help="Keep a uniform sample of its queries, a rate below 1 (as ingest logs --sample).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --sample.")
@click.pass_context
def source_add_cmd(ctx: click.Context, kind: str, name: str, url: str | None, project: str | None,
                   every_s: float | None, overlap_s: float, sample: float | None, seed: int) -> None:
    """Add the source NAME: a KIND trace store (phoenix, langfuse or langsmith) to sync from.

    Example:

        labeler source add langfuse prod --host https://cloud.langfuse.com --every 5m

        labeler source add langsmith prod --project rag-prod
    """
    from ..sources import add_source

    s = add_source(open_db(ctx, create=True), kind, name, url=url, project=project, every_s=every_s,
                   overlap_s=overlap_s, sample=sample, seed=seed)
    project_text = f", project {s.project}" if s.project else ""
    click.echo(f"added source {s.name}: {s.kind} at {s.url}{project_text}; sync it with labeler sync {s.name}")


@source_group.command("list", context_settings=CONTEXT_SETTINGS)
@output_options(nl=True)
@click.pass_context
def source_list_cmd(ctx: click.Context, output_format: str) -> Output:
    """Every source: kind, URL, project, interval, high-water mark and lag (seconds behind now), last
    sync, last error and counts (retrievals read, new queries). Never a key.

    Example:

        labeler source list --json
    """
    from ..sources import source_status

    rows = source_status(open_db(ctx))
    return Output(rows, LIST_COLUMNS, rows, empty="no sources yet: labeler source add phoenix NAME --project P")


@source_group.command("remove", context_settings=CONTEXT_SETTINGS)
@click.argument("name")
@click.pass_context
def source_remove_cmd(ctx: click.Context, name: str) -> None:
    """Remove the source NAME. What its syncs ingested stays (labeler ingest undo removes an ingest).

    Example:

        labeler source remove prod
    """
    from ..sources import remove_source

    s = remove_source(open_db(ctx), name)
    click.echo(f"removed source {s.name} ({s.kind} at {s.url}); what it ingested stays")


def _sync_output(results: list[Any], exit_on_failure: bool) -> Output:
    rows = [r.to_dict() for r in results]
    failed = [r for r in results if not r.ok]
    return Output(rows, SYNC_COLUMNS, rows, text=[r.summary() for r in results],
                  exit_code=1 if failed and exit_on_failure else 0)


@cli.command("sync", context_settings=CONTEXT_SETTINGS)
@click.argument("name", required=False)
@click.option("--since", metavar="TIME",
              help="Read from this time (ISO 8601, or an interval back from now such as 2h) instead of "
                   "the source's high-water mark.")
@click.option("--every", "every_s", callback=_interval, metavar="INTERVAL",
              help="Keep syncing at this interval (e.g. 5m) until interrupted; prints each round (with "
                   "--json one document per round).")
@click.option("--rounds", type=click.IntRange(1), help="With --every: stop after this many rounds.")
@output_options()
@click.pass_context
def sync_cmd(ctx: click.Context, name: str | None, since: str | None, every_s: float | None, rounds: int | None,
             output_format: str) -> Output | None:
    """Ingest the new retrieval spans of every source (or of NAME) since its last sync.

    Each page of spans is ingested as a file of the tool's export would be (validation, redaction,
    sampling; it shows in labeler ingest list, and labeler ingest undo removes it). A sync killed
    mid-way goes on where it stopped; each sync re-reads the source's overlap for late spans;
    429 and 5xx answers are retried with backoff. A failing source is reported and the others go on;
    the exit code is then 1 (with --every, the rounds go on).

    Example:

        labeler sync

        labeler sync prod --since 2026-12-01T00:00:00Z

        labeler sync --every 5m
    """
    from ..sources import sync_every, sync_sources

    db = open_db(ctx)
    topic_assigner(db, always=every_s is not None)  # routing quotas and new topics need it
    if every_s is None:
        if rounds is not None:
            raise click.UsageError("--rounds goes with --every")
        return _sync_output(sync_sources(db, name, since=since), exit_on_failure=True)
    for results in sync_every(db, every_s, name, since=since, rounds=rounds):
        render(_sync_output(results, exit_on_failure=False), output_format)
    return None


PUSH_COLUMNS = ["name", "kind", "ok", "dry_run", "golden_set_version", "queries", "items", "sent", "updated",
                "unchanged", "failed", "not_retrieved", "requests", "retries", "error"]


@cli.command("push", context_settings=CONTEXT_SETTINGS)
@click.argument("name")
@click.option("--dry-run", is_flag=True, help="Count what would be sent; send and record nothing (no key needed).")
@output_options()
@click.pass_context
def push_cmd(ctx: click.Context, name: str, dry_run: bool, output_format: str) -> Output:
    """Send the consolidated human grades of the queries synced from the source NAME back to it.

    Phoenix gets a HUMAN document annotation "relevance" per graded retrieved document and a span
    annotation "golden precision"; Langfuse scores on the retriever observation; LangSmith feedback
    on the retriever run; each with the golden-set version (the latest export) in its metadata. A
    second push sends nothing; a changed grade is updated. 429 and 5xx answers are retried; items
    the store still refuses are listed, the exit code is 1, and the next push sends them again.

    Example:

        labeler push prod --dry-run

        labeler push prod --json
    """
    from ..sources.push import push_source

    r = push_source(open_db(ctx), name, dry_run=dry_run)
    row = r.to_dict()
    return Output(row, PUSH_COLUMNS, [row], text=[r.summary(), *r.errors], exit_code=0 if r.ok else 1)
