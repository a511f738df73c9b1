"""``labeler ingest list`` / ``ingest undo`` and ``labeler queries remove``: undoing a bad ingest
or single bad items (``labeler.ingest.undo``)."""

from __future__ import annotations

import click

from . import CONTEXT_SETTINGS, LabelerGroup, _open, _print_json, cli, ingest, json_option


@ingest.command("list", context_settings=CONTEXT_SETTINGS)
@json_option
@click.pass_context
def ingest_list_cmd(ctx: click.Context, as_json: bool) -> None:
    """Every ingest, oldest first: id, file, sha256, time, who ran it, state (done, running,
    undoing, undone) and counts (queries and documents it created, retrievals, skipped records).

    Example:

        labeler ingest list --json
    """
    from ..ingest.undo import list_ingests

    rows = list_ingests(_open(ctx))
    if as_json:
        _print_json([r.to_dict() for r in rows])
        return
    if not rows:
        click.echo("no ingests yet: labeler ingest logs FILE")
    for r in rows:
        click.echo(f"{r.id:>4}  {r.created_at[:19]}  {r.kind:<6} {r.state:<7} {r.by or '-':<12} "
                   f"queries {r.queries:>6}  retrievals {r.retrievals:>7}  documents {r.documents:>6}  "
                   f"skipped {r.skipped:>5}  {r.sha256[:12]}  {r.path}")


@ingest.command("undo", context_settings=CONTEXT_SETTINGS)
@click.argument("ingest_id", type=int)
@click.option("--force", is_flag=True, help="Also remove queries that have labels, with their labels.")
@click.option("--dry-run", is_flag=True, help="Only count what would be removed.")
@json_option
@click.pass_context
def ingest_undo_cmd(ctx: click.Context, ingest_id: int, force: bool, dry_run: bool, as_json: bool) -> None:
    """Remove the queries, retrievals, log lines and documents that only ingest INGEST_ID brought
    (rows another ingest logged too stay). Refused when any query to remove has labels, unless
    --force. Writes in short transactions (annotators keep saving meanwhile); if interrupted, the
    ingest shows as undoing and running this again finishes it. Undoing twice changes nothing.

    Example:

        labeler ingest undo 3 --dry-run
    """
    from ..ingest.undo import undo_ingest

    result = undo_ingest(_open(ctx), ingest_id, force=force, dry_run=dry_run)
    _print_json(result.to_dict()) if as_json else click.echo(result.summary())


@cli.group("queries", cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def queries() -> None:
    """Manage single queries (items).

    Example:

        labeler queries remove q-1234 q-5678
    """


@queries.command("remove", context_settings=CONTEXT_SETTINGS)
@click.argument("query_ids", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="Also remove queries that have labels, with their labels.")
@json_option
@click.pass_context
def queries_remove_cmd(ctx: click.Context, query_ids: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Remove QUERY_IDS with their retrievals, log lines and the documents nothing else uses
    (corpus documents stay). Refused when any has labels, unless --force.

    Example:

        labeler queries remove q-1234 --force
    """
    from ..ingest.undo import remove_queries

    result = remove_queries(_open(ctx), query_ids, force=force)
    _print_json(result.to_dict()) if as_json else click.echo(result.summary())
