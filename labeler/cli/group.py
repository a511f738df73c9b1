"""The ``labeler`` click group itself; every command module adds its commands to it."""

from __future__ import annotations

import click

from .common import CONTEXT_SETTINGS, LabelerGroup


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from ..version import version  # importlib.metadata costs ~40 ms: only when asked

    click.echo(f"labeler, version {version()}")
    ctx.exit()


@click.group(cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
@click.option("--db", "db_path", envvar="LABELER_DB", default="labeler.db", show_default=True,
              type=click.Path(dir_okay=False), help="The SQLite database file (env LABELER_DB).")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version of rag-labeler and exit.")
@click.pass_context
def cli(ctx: click.Context, db_path: str) -> None:
    """labeler: turn RAG production logs into a golden dataset with honest numbers.

    Example:

        labeler --db team.db ingest logs logs.jsonl
    """
    ctx.ensure_object(dict)
    ctx.obj["db_path"] = db_path
