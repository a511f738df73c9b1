"""``labeler users`` (accounts: add, list, passwd, role, grant-llm, link, remove) and ``labeler audit``.

The CLI is the local operator: whoever holds the database file may manage accounts.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from .common import CONTEXT_SETTINGS, LabelerGroup, open_db
from .group import cli
from .output import Output, output_options

ACCOUNT_COLUMNS = ["name", "role", "state", "email", "may_run_llm", "created_at"]
AUDIT_COLUMNS = ["at", "actor", "action", "query_id", "doc_id", "target", "old", "new"]


def _read_password(from_stdin: bool, prompt: str = "Password") -> str:
    if from_stdin:
        line = sys.stdin.readline()
        if not line:
            raise click.UsageError("--password-stdin: no password on standard input")
        return line.rstrip("\r\n")
    return click.prompt(prompt, hide_input=True, confirmation_prompt=True)


def _link(url: str, token: str) -> str:
    return f"{url.rstrip('/')}/?invite={token}"


_URL = click.option("--url", default="http://localhost:8501", show_default=True,
                    help="The app's address, to print the sign-in link with.")


@cli.group("users", cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def users() -> None:
    """Accounts: who may sign in to the app, with which role.

    Once any account has a password (or a pending sign-in link), the app asks everyone for name and
    password; ?annotator= in the URL never signs anyone in.

    Example:

        labeler users add alice --role lead --password-stdin < pw.txt
    """


@users.command("add", context_settings=CONTEXT_SETTINGS)
@click.argument("name")
@click.option("--role", type=click.Choice(["annotator", "lead"]), default="annotator", show_default=True)
@click.option("--email", help="The email the identity provider (OIDC) gives for this person.")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin.")
@_URL
@output_options()
@click.pass_context
def users_add(ctx: click.Context, name: str, role: str, email: str | None, password_stdin: bool, url: str,
              output_format: str) -> Output:
    """Add an account. Without --password-stdin, prints a one-time sign-in link (valid 72 hours)
    with which the person sets their own password.

    Example:

        labeler users add bob --role annotator
    """
    from ..accounts import add_user

    password = _read_password(True) if password_stdin else None
    made = add_user(open_db(ctx, create=True), name, role, password=password, email=email)
    link = _link(url, made.token) if made.token else None
    document = {**made.account._asdict(), "signin_link": link}
    return Output(document, [*made.account._fields, "signin_link"], [document],
                  text=[f"added {made.account.name} ({made.account.role})"]
                  + ([f"one-time sign-in link (shown once): {link}"] if link else []))


@users.command("list", context_settings=CONTEXT_SETTINGS)
@click.option("--all", "include_removed", is_flag=True, help="Include removed accounts.")
@output_options(nl=True)
@click.pass_context
def users_list(ctx: click.Context, include_removed: bool, output_format: str) -> Output:
    """Every account: name, role, whether a password is set, email, may run LLM jobs.

    Example:

        labeler users list --json
    """
    from ..accounts import list_accounts

    accounts = list_accounts(open_db(ctx), include_removed=include_removed)
    rows = [{**a._asdict(), "state": _state(a), "may_run_llm": a.may_run_llm or a.role == "lead"} for a in accounts]
    return Output([a._asdict() for a in accounts], ACCOUNT_COLUMNS, rows,
                  empty="no accounts yet: labeler users add NAME --role lead")


def _state(a: Any) -> str:
    """How the account signs in, in a word."""
    return "removed" if a.removed else "password" if a.has_password else \
        "link pending" if a.invite_pending else "email" if a.email else "no password"


@users.command("passwd", context_settings=CONTEXT_SETTINGS)
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the new password from the first line of stdin.")
@click.option("--link", "make_link", is_flag=True, help="Print a one-time sign-in link instead.")
@_URL
@click.pass_context
def users_passwd(ctx: click.Context, name: str, password_stdin: bool, make_link: bool, url: str) -> None:
    """Set NAME's password (their signed-in browsers are signed out), or make a new sign-in link.

    Example:

        labeler users passwd bob --link
    """
    from ..accounts import new_invite, set_password

    db = open_db(ctx)
    if make_link:
        click.echo(f"one-time sign-in link (shown once): {_link(url, new_invite(db, name))}")
        return
    set_password(db, name, _read_password(password_stdin, "New password"))
    click.echo(f"password of {name} set")


@users.command("role", context_settings=CONTEXT_SETTINGS)
@click.argument("name")
@click.argument("role", type=click.Choice(["annotator", "lead"]))
@click.pass_context
def users_role(ctx: click.Context, name: str, role: str) -> None:
    """Make NAME a lead or an annotator (the last lead cannot be demoted).

    Example:

        labeler users role bob lead
    """
    from ..accounts import set_role

    a = set_role(open_db(ctx), name, role)
    click.echo(f"{a.name} is {a.role}")


@users.command("grant-llm", context_settings=CONTEXT_SETTINGS)
@click.argument("name")
@click.option("--revoke", is_flag=True, help="Take the grant back.")
@click.pass_context
def users_grant_llm(ctx: click.Context, name: str, revoke: bool) -> None:
    """Allow annotator NAME to run paid LLM jobs (judge and synth runs) in the app.

    Example:

        labeler users grant-llm bob
    """
    from ..accounts import grant_llm

    a = grant_llm(open_db(ctx), name, not revoke)
    click.echo(f"{a.name} {'may' if a.may_run_llm else 'may not'} run LLM jobs")


@users.command("remove", context_settings=CONTEXT_SETTINGS)
@click.argument("name")
@click.pass_context
def users_remove(ctx: click.Context, name: str) -> None:
    """Remove NAME's account: they can no longer sign in; their labels stay, attributed to them.

    Example:

        labeler users remove bob
    """
    from ..accounts import remove_user

    remove_user(open_db(ctx), name)
    click.echo(f"removed {name}; their labels stay")


@cli.command("audit", context_settings=CONTEXT_SETTINGS)
@click.option("--annotator", help="Only what this account did.")
@click.option("--since", metavar="TIME", help="Only events at or after TIME (ISO 8601).")
@click.option("--limit", type=click.IntRange(0), help="Only the newest N events.")
@output_options(nl=True)
@click.pass_context
def audit_cmd(ctx: click.Context, annotator: str | None, since: str | None, limit: int | None,
              output_format: str) -> Output:
    """Who changed what: every label change (grade, answer, status, adjudication) and every account,
    settings or data action, oldest first.

    Example:

        labeler audit --annotator bob --since 2026-11-01
    """
    from ..audit import audit_log

    events = [e.to_dict() for e in audit_log(open_db(ctx), annotator=annotator, since=since, limit=limit)]
    return Output(events, AUDIT_COLUMNS, events, empty="no events")
