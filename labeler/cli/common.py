"""What every ``labeler`` command module shares: the group class, the database of --db, the progress
bar and ``.streamlit/secrets.toml`` (the output of reporting commands: ``output.py``).

Kept apart from ``labeler.cli`` (the package) so that the command modules import it without a cycle;
the package re-exports every name.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .. import db as store
from ..errors import DatabaseError, IngestError, LabelerError

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
DEMO_DB = "labeler-demo.db"  # where ``labeler demo`` builds its database unless --db is given


class LabelerGroup(click.Group):
    """Turns LabelerError into one clear line and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except IngestError as e:
            click.echo(f"Error: {e}", err=True)
            sys.exit(1)
        except LabelerError as e:
            click.echo(f"Error: {e}", err=True)
            sys.exit(1)


def open_db(ctx: click.Context, *, create: bool = False):
    """The --db database. Only commands that write data of their own (ingest, import, demo, users add,
    app) may create it; for every other command a missing file is an error (``store.connect``),
    so that a mistyped --db is not a new, empty database that reads as zeros. Right after
    ``labeler demo`` in the same folder the missing ./labeler.db is no typo: the error names the
    demo's file and the command again with the ``--db`` that opens it."""
    path = ctx.obj["db_path"]
    try:
        return store.connect(path, create=create)
    except DatabaseError:
        demo = Path(DEMO_DB)
        if create or Path(path).exists() or not demo.is_file() or Path(path).resolve() == demo.resolve():
            raise
        command = ctx.command_path[len(ctx.find_root().command_path):].strip()
        again = f"labeler --db {DEMO_DB} {command}".rstrip()
        raise DatabaseError(f"no database at {path}; labeler demo built {DEMO_DB} here: pass --db {DEMO_DB} "
                            f"({again})") from None


def progress_bar(label: str) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """A click progress bar on stderr, driven by (done, total) byte counts."""
    state: dict[str, Any] = {"bar": None, "done": 0}

    def update(done: int, total: int) -> None:
        if state["bar"] is None:
            state["bar"] = click.progressbar(length=max(total, 1), label=label, file=sys.stderr)
            state["bar"].__enter__()
        state["bar"].update(max(done - state["done"], 0))
        state["done"] = done

    def close() -> None:
        if state["bar"] is not None:
            state["bar"].__exit__(None, None, None)

    return update, close


def secrets_toml() -> dict[str, Any]:
    """``.streamlit/secrets.toml`` of the working directory (where the app reads it), if any."""
    import tomllib

    path = Path(".streamlit") / "secrets.toml"
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise LabelerError(f"cannot read {path}: {e}") from None


def fmt_value(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


# --origin of labeler metrics and labeler export
ORIGIN_CHOICE = click.Choice(["log", "synthetic", "import"])


def topic_assigner(db: Any, *, always: bool = False) -> None:
    """Load ``labeler.topics`` (it registers the routing's topic assigner) when the routing rules have
    topic quotas or new topics, or ``always`` (a command that keeps running while the rules may
    change). Loading it costs a one-shot sync about 2 s of imports (scikit-learn), so not otherwise."""
    if not always:
        from ..labels.routing_rules import get_rules

        rules = get_rules(db)
        if rules is None or not (rules.quotas or rules.new_topics):
            return
    import labeler.topics  # noqa: F401

