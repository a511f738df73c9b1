"""What every reporting command prints, rendered by one function.

A reporting command takes ``--json`` (its one JSON document, exactly as before), ``--csv`` and
``--table`` (its rows under named columns) and, where its rows are records that can stream, ``--nl``
(one JSON object per row and line); without any of these it prints its plain text: a narrative
(``ingest logs``: what was loaded), or a header line, the table and a few closing lines (``metrics``).
The command builds an ``Output`` from the one library result it asked for and returns it; the
``output_options`` decorator adds the flags and hands the ``Output`` to ``render``. Command modules
never format a table of their own.

Cells: ``--csv`` and ``--nl`` carry the full values (in CSV: empty for none, true/false, lists and
objects as compact JSON); ``--table`` and the plain text show at most 4 decimals, ``-`` for none,
yes/no, text on one line and cut at 60 characters with ``…`` (ids, paths and hashes stay whole).
"""

from __future__ import annotations

import csv
import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

FORMATS = ("text", "json", "csv", "table", "nl")
CELL_WIDTH = 60  # --table cuts longer text (CSV and --nl keep it whole)


class Note(str):
    """A line of the plain text that goes to stderr (a problem, a hint), where it falls in the text."""

    __slots__ = ()


@dataclass
class Output:
    """One reporting command's result, ready for every format.

    ``document`` is what ``--json`` prints; ``rows`` (mappings; a generator streams under ``--nl``)
    under ``columns`` are what ``--csv``, ``--table`` and ``--nl`` print. The plain text is ``text``
    when the command tells a narrative, else ``before``, the table (``empty`` when there are no rows)
    and ``after``. ``notes`` go to stderr in every format but ``--json`` (whose document carries them
    or, as before, leaves them out). ``err`` prints the whole output on stderr (when stdout carries
    data, as with ``export -o -``); ``exit_code`` ends the command with that code after printing.
    """

    document: Any
    columns: Sequence[str]
    rows: Iterable[Mapping[str, Any]] = ()
    text: Sequence[str] | None = None
    before: Sequence[str] = ()
    after: Sequence[str] = ()
    empty: str | None = None
    notes: Sequence[str] = ()
    err: bool = False
    exit_code: int = 0


def output_options(*, nl: bool = False) -> Callable[[Callable[..., Output | None]], Callable[..., None]]:
    """Add ``--json``, ``--csv``, ``--table`` (and ``--nl`` when ``nl``) to a click command.

    The command receives ``output_format`` (one of FORMATS; ``text`` when no flag is given), returns
    an ``Output`` (or None when it printed by itself) and the decorator renders it. Put it right
    above ``@click.pass_context``, where ``--json`` was: the help lists the flags in this order.
    """

    def decorate(f: Callable[..., Output | None]) -> Callable[..., None]:
        @functools.wraps(f)
        def command(*args: Any, as_json: bool, as_csv: bool, as_table: bool, as_nl: bool = False,
                    **kwargs: Any) -> None:
            chosen = [name for name, on in (("json", as_json), ("csv", as_csv), ("table", as_table),
                                            ("nl", as_nl)) if on]
            if len(chosen) > 1:
                raise click.UsageError(f"give one of --json, --csv, --table{', --nl' if nl else ''} "
                                       f"(got --{' and --'.join(chosen)})")
            output_format = chosen[0] if chosen else "text"
            out = f(*args, output_format=output_format, **kwargs)
            if out is None:
                return
            render(out, output_format)
            if out.exit_code:
                click.get_current_context().exit(out.exit_code)

        if nl:
            command = click.option("--nl", "as_nl", is_flag=True,
                                   help="Print the rows as newline-delimited JSON (one object per line).")(command)
        command = click.option("--table", "as_table", is_flag=True, help="Print the rows as a text table.")(command)
        command = click.option("--csv", "as_csv", is_flag=True,
                               help="Print the rows as CSV (a header line, then one line per row).")(command)
        return click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")(command)

    return decorate


def render(out: Output, output_format: str) -> None:
    """Print ``out`` in ``output_format`` (one of FORMATS): the one place the CLI's output is made."""
    if output_format not in FORMATS:
        raise ValueError(f"unknown output format {output_format!r}; use one of {', '.join(FORMATS)}")
    err = out.err
    if output_format == "json":
        click.echo(json.dumps(out.document, indent=2, ensure_ascii=False, default=str), err=err)
        return
    if output_format == "csv":
        writer = csv.writer(_Echo(err), lineterminator="\n")
        writer.writerow(out.columns)
        for row in out.rows:
            writer.writerow([_csv_cell(row.get(c)) for c in out.columns])
    elif output_format == "nl":
        for row in out.rows:
            click.echo(json.dumps(dict(row), ensure_ascii=False, default=str), err=err)
    elif output_format == "table":
        click.echo(table(out.columns, out.rows), err=err)
    else:
        lines: Iterable[str]
        if out.text is not None:
            lines = out.text
        else:
            rows = list(out.rows)
            middle = [table(out.columns, rows)] if rows or out.empty is None else [out.empty]
            lines = [*out.before, *middle, *out.after]
        for line in lines:
            click.echo(line, err=err or isinstance(line, Note))
    for note in out.notes:
        click.echo(note, err=True)


def table(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """The rows as a text table: a header, a rule, one line per row; numbers right-aligned, the
    decimals of a column's numbers aligned (at most 4)."""
    values = [[row.get(c) for c in columns] for row in rows]
    places = [max((_places(row[i]) for row in values), default=0) for i in range(len(columns))]
    cells = [[_table_cell(v, places[i]) for i, v in enumerate(row)] for row in values]
    numeric = [bool(values) and all(row[i] is None or _is_number(row[i]) for row in values)
               for i in range(len(columns))]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]

    def line(texts: Sequence[str]) -> str:
        return "  ".join(t.rjust(w) if num else t.ljust(w)
                         for t, w, num in zip(texts, widths, numeric, strict=True)).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(row) for row in cells)])


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _places(value: Any) -> int:
    """Decimals a float needs, up to 4 (0.5 -> 1, 0.8333 -> 4, 2.0 -> 0)."""
    if not isinstance(value, float) or value != value or value in (float("inf"), float("-inf")):
        return 0
    text = f"{value:.4f}".rstrip("0")
    return len(text) - text.index(".") - 1


def _table_cell(value: Any, places: int = 4) -> str:
    if value is None:
        text = "-"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, float):
        text = "-" if value != value else f"{value:.{places}f}"  # NaN: undefined
        text = text[1:] if text.startswith("-") and float(text) == 0 else text  # no "-0.000"
    elif isinstance(value, list | tuple):
        text = ", ".join(_table_cell(v) for v in value)
    elif isinstance(value, dict):
        text = json.dumps(value, ensure_ascii=False, default=str)
    else:
        text = str(value)
    text = " ".join(text.split())
    if len(text) <= CELL_WIDTH or " " not in text:  # ids, paths and hashes stay whole
        return text
    return text[: CELL_WIDTH - 1] + "…"


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return value


class _Echo:
    """A file for csv.writer that writes through click.echo (which tests and pipes capture)."""

    def __init__(self, err: bool) -> None:
        self.err = err

    def write(self, text: str) -> None:
        click.echo(text, nl=False, err=self.err)
