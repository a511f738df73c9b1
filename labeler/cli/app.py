"""``labeler app`` and ``labeler demo``: the Streamlit labeling app on --db (or on a demo database)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import click

from .. import db as store
from .common import CONTEXT_SETTINGS, DEMO_DB, open_db, secrets_toml
from .group import cli


def serve_app(db_path: str, port: int | None, headless: bool, host: str = "127.0.0.1") -> None:
    """Serve the Streamlit app on ``db_path`` until it stops (looked up when a command runs, so a
    test can replace ``labeler.cli.app``'s module attribute)."""
    from ..accounts import check_exposure
    from ..app.launch import serve, streamlit_command

    secrets = secrets_toml()
    check_exposure(store.connect(db_path), host, password=bool(secrets.get("password")),
                   oidc=bool(secrets.get("auth")))
    cmd = streamlit_command(host=host, port=port, headless=headless)
    env = dict(os.environ, LABELER_DB=str(Path(db_path).resolve()))
    raise SystemExit(serve(cmd, env))


def _app_options(f: Callable) -> Callable:
    f = click.option("--port", type=int, help="Port to serve on (default: Streamlit's 8501).")(f)
    f = click.option("--host", default="127.0.0.1", show_default=True,
                     help="Address to listen on. Anything but this machine (e.g. 0.0.0.0) needs accounts, a "
                          "password or OIDC sign-in first.")(f)
    return click.option("--headless", is_flag=True, help="Do not open a browser.")(f)


@cli.command(context_settings=CONTEXT_SETTINGS)
@_app_options
@click.pass_context
def app(ctx: click.Context, port: int | None, headless: bool, host: str) -> None:
    """Open the labeling app on --db (on 127.0.0.1 unless --host is given).

    Example:

        labeler --db team.db app --port 8502
    """
    if not Path(ctx.obj["db_path"]).exists():
        click.echo(f"new database {ctx.obj['db_path']}: add data on the Data page or with labeler ingest logs",
                   err=True)
    open_db(ctx, create=True).conn.close()
    serve_app(ctx.obj["db_path"], port, headless, host)


@cli.command(context_settings=CONTEXT_SETTINGS)
@_app_options
@click.option("--no-app", is_flag=True, help="Only build the demo database.")
@click.pass_context
def demo(ctx: click.Context, port: int | None, headless: bool, host: str, no_app: bool) -> None:
    """Build a demo database from the bundled data (if absent) and open the app on it.

    Uses --db when given explicitly, else ./labeler-demo.db.

    Example:

        labeler demo
    """
    from ..demo import build_demo

    src = ctx.find_root().params
    db_path = ctx.obj["db_path"] if os.environ.get("LABELER_DB") or src.get("db_path") != "labeler.db" \
        else DEMO_DB
    summary = build_demo(db_path)
    click.echo(summary, err=True)
    if not no_app:
        serve_app(db_path, port, headless, host)

