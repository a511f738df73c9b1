"""Write the generated parts of the docs: the CLI reference (docs/cli.md, from every command's own
help, walking click's command tree of ``labeler.cli:cli``), the metrics table in docs/metrics.md
(from the metric registry ``labeler.metrics.METRICS``) and the site's home page (docs/index.md: the
README with its links made relative to docs/). tests/test_docs.py fails when a committed file
differs from what this script writes.

    python docs/generate.py          # rewrite docs/cli.md and the table in docs/metrics.md
    python docs/generate.py --check  # exit 1, naming the stale files, when they are out of date
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import click

DOCS = Path(__file__).resolve().parent
CLI_PAGE = DOCS / "cli.md"
HOME_PAGE = DOCS / "index.md"
README = DOCS.parent / "README.md"
METRICS_PAGE = DOCS / "metrics.md"
REGENERATE = "python docs/generate.py"
WIDTH = 100  # help is wrapped at a fixed width, so the page does not depend on the terminal

METRICS_BEGIN = (f"<!-- BEGIN metrics table: generated from labeler.metrics.METRICS by `{REGENERATE}`; "
                 "do not edit by hand -->")
METRICS_END = "<!-- END metrics table -->"

CLI_PREAMBLE = f"""\
# CLI reference

<!-- generated from the commands' own help by `{REGENERATE}`; do not edit by hand -->

Every command's help, exactly as `labeler COMMAND -h` prints it (this page is generated from it,
and a test fails when the two differ). [Commands at a glance](commands.md) has one line per command.

Global options: `labeler [--db PATH] COMMAND` (env `LABELER_DB`, default `./labeler.db`). Every
command has `-h` with an example. Exit codes: 0 success, 1 a user error (one line, no traceback),
2 a usage error. Reporting commands take `--json` and then print one JSON document.
"""


def commands(group: click.Group, ctx: click.Context) -> list[tuple[click.Command, click.Context]]:
    """Every command under ``group`` (groups too), depth first in the order ``-h`` lists them."""
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        sub = click.Context(cmd, info_name=name, parent=ctx, **cmd.context_settings)
        out.append((cmd, sub))
        if isinstance(cmd, click.Group):
            out.extend(commands(cmd, sub))
    return out


def cli_reference() -> str:
    """docs/cli.md as it should be: the preamble, then each command's heading and help text."""
    from labeler.cli import cli

    settings = {"max_content_width": WIDTH, **cli.context_settings, "terminal_width": WIDTH}
    root = click.Context(cli, info_name="labeler", **settings)
    parts = [CLI_PREAMBLE]
    for cmd, ctx in [(cli, root), *commands(cli, root)]:
        parts.append(f"## `{ctx.command_path}`\n\n```text\n{cmd.get_help(ctx).rstrip()}\n```\n")
    return "\n".join(parts)


def _summary(definition) -> str:
    """The first paragraph of a metric's docstring (its function's, else the definition's own
    description), on one line, safe in a table cell."""
    doc = inspect.getdoc(getattr(definition, "fn", None)) or getattr(definition, "description", "") or ""
    first = doc.split("\n\n", 1)[0]
    return " ".join(first.split()).replace("|", "\\|")


def metrics_table() -> str:
    """The table of every registered metric: spellings, aliases, cutoff, and its definition."""
    from labeler.metrics import METRICS

    rows = ["| metric | aliases | cutoff | a query without a relevant chunk | per query |",
            "|---|---|---|---|---|"]
    for name, d in METRICS.items():  # in the order they were registered: recall first
        if d.needs_k:
            spellings, aliases, cutoff = f"`{name}@k`", ", ".join(f"`{a}@k`" for a in d.aliases), "required"
        else:
            spellings = f"`{name}`, `{name}@k`"
            aliases = ", ".join(f"`{a}`" for a in d.aliases)
            cutoff = "optional (none: the whole ranking)"
        left_out = "left out of the means" if d.nan_without_relevant else "counted"
        rows.append(f"| {spellings} | {aliases or '-'} | {cutoff} | {left_out} | {_summary(d)} |")
    return "\n".join([METRICS_BEGIN, "", *rows, "", METRICS_END])


def metrics_page(current: str) -> str:
    """docs/metrics.md with the text between the markers replaced by :func:`metrics_table`."""
    start, end = current.find(METRICS_BEGIN), current.find(METRICS_END)
    if start < 0 or end < start:
        raise SystemExit(f"{METRICS_PAGE}: the markers of the metrics table are missing; put back\n"
                         f"{METRICS_BEGIN}\n{METRICS_END}")
    return current[:start] + metrics_table() + current[end + len(METRICS_END):]


def home_page(readme: str) -> str:
    """docs/index.md: the README, whose links point into docs/, with those links relative to docs/."""
    text = readme.replace("](docs/index.md)", "](index.md)").replace("](docs/", "](")
    return (f"<!-- generated from README.md by `{REGENERATE}`; edit the README, not this page -->\n\n"
            + text)


def expected() -> dict[Path, str]:
    """Each generated file and the text it should hold."""
    return {CLI_PAGE: cli_reference(), METRICS_PAGE: metrics_page(METRICS_PAGE.read_text()),
            HOME_PAGE: home_page(README.read_text())}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, text in expected().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not check:
            path.write_text(text)
    if check and stale:
        names = ", ".join(str(p.relative_to(DOCS.parent)) for p in stale)
        print(f"stale: {names}; regenerate with `{REGENERATE}` and commit", file=sys.stderr)
        return 1
    for path in stale:
        print(f"wrote {path.relative_to(DOCS.parent)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(DOCS.parent))  # document the checkout this script is in, not another install
    sys.exit(main(sys.argv[1:]))
