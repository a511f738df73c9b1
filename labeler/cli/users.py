"""``labeler users`` (accounts: add, list, passwd, role, grant-llm, link, remove) and ``labeler audit``.

The CLI is the local operator: whoever holds the database file may manage accounts.
"""

from __future__ import annotations

import sys

import click

from .common import CONTEXT_SETTINGS, LabelerGroup, json_option, open_db, print_json
from .group import cli


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
@json_option
@click.pass_context
def users_add(ctx: click.Context, name: str, role: str, email: str | None, password_stdin: bool, url: str,
              as_json: bool) -> None:
    """Add an account. Without --password-stdin, prints a one-time sign-in link (valid 72 hours)
    with which the person sets their own password.

    Example:

        labeler users add bob --role annotator
    """
    from ..accounts import add_user

    password = _read_password(True) if password_stdin else None
    made = add_user(open_db(ctx, create=True), name, role, password=password, email=email)
    link = _link(url, made.token) if made.token else None
    if as_json:
        print_json({**made.account._asdict(), "signin_link": link})
        return
    click.echo(f"added {made.account.name} ({made.account.role})")
    if link:
        click.echo(f"one-time sign-in link (shown once): {link}")


@users.command("list", context_settings=CONTEXT_SETTINGS)
@click.option("--all", "include_removed", is_flag=True, help="Include removed accounts.")
@json_option
@click.pass_context
def users_list(ctx: click.Context, include_removed: bool, as_json: bool) -> None:
    """Every account: name, role, whether a password is set, email, may run LLM jobs.

    Example:

        labeler users list --json
    """
    from ..accounts import list_accounts

    rows = list_accounts(open_db(ctx), include_removed=include_removed)
    if as_json:
        print_json([a._asdict() for a in rows])
        return
    if not rows:
        click.echo("no accounts yet: labeler users add NAME --role lead")
    for a in rows:
        state = "removed" if a.removed else "password" if a.has_password else \
            "link pending" if a.invite_pending else "email" if a.email else "no password"
        click.echo(f"{a.name:<24} {a.role:<9} {state:<12} {a.email or '-':<28} "
                   f"{'may run LLM jobs' if a.may_run_llm or a.role == 'lead' else ''}")


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
@json_option
@click.pass_context
def audit_cmd(ctx: click.Context, annotator: str | None, since: str | None, limit: int | None,
              as_json: bool) -> None:
    """Who changed what: every label change (grade, answer, status, adjudication) and every account,
    settings or data action, oldest first.

    Example:

        labeler audit --annotator bob --since 2026-11-01
    """
    from ..audit import audit_log

    events = audit_log(open_db(ctx), annotator=annotator, since=since, limit=limit)
    if as_json:
        print_json([e.to_dict() for e in events])
        return
    if not events:
        click.echo("no events")
    for e in events:
        where = " ".join(x for x in (e.query_id and f"query {e.query_id}", e.doc_id and f"chunk {e.doc_id}",
                                     e.target) if x)
        change = f"{e.old} -> {e.new}" if e.query_id else (e.new or "")
        click.echo(f"{e.at}  {e.actor:<20} {e.action:<16} {where}  {change}".rstrip())
