"""The ``labeler`` command line: each command parses options, calls one library function, prints.

Exit codes: 0 success, 1 a user error (one line on stderr, no traceback), 2 a usage error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import db as store
from .errors import IngestError, LabelerError

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


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


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")(f)


def _open(ctx: click.Context):
    return store.connect(ctx.obj["db_path"])


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


@click.group(cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
@click.option("--db", "db_path", envvar="LABELER_DB", default="labeler.db", show_default=True,
              type=click.Path(dir_okay=False), help="The SQLite database file (env LABELER_DB).")
@click.version_option(package_name="labeler")
@click.pass_context
def cli(ctx: click.Context, db_path: str) -> None:
    """labeler: turn RAG production logs into a golden dataset with honest numbers.

    Example:

        labeler --db team.db ingest logs logs.jsonl
    """
    ctx.ensure_object(dict)
    ctx.obj["db_path"] = db_path


@cli.group(cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def ingest() -> None:
    """Load production query logs or a corpus into the database.

    Example:

        labeler ingest logs prod-2026-11.jsonl.gz
    """


def _progress_bar(label: str) -> tuple[Callable[[int, int], None], Callable[[], None]]:
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


def _ingest_summary(r: dict[str, Any]) -> str:
    line = (f"{r['path']}: {r['records']} records: {r['new']} new, {r['merged']} merged, "
            f"{r['unchanged']} unchanged, {r['rejected']} rejected")
    if r["kind"] == "logs":
        line += f"; {r['retrievals']} retrievals, {r['documents_new']} new documents"
        if r["documents_without_text"]:
            line += (f"; {r['documents_without_text']} documents have no text yet "
                     "(ingest a corpus file with their text)")
    if r.get("rejects_path"):
        line += f"\nrejected records and reasons: {r['rejects_path']}"
    return line


def _run_ingest(ctx: click.Context, files: tuple[str, ...], as_json: bool, fn: Callable, **kwargs: Any) -> None:
    db = _open(ctx)
    results = []
    for f in files:
        update, close = _progress_bar(Path(f).name)
        try:
            result = fn(db, f, progress=update if sys.stderr.isatty() else None, **kwargs)
        finally:
            close()
        results.append(result.to_dict())
        if not as_json:
            click.echo(_ingest_summary(results[-1]))
            for p in result.problems[:20]:
                click.echo(f"  {p}", err=True)
    if as_json:
        _print_json(results if len(results) > 1 else results[0])


@ingest.command("logs", context_settings=CONTEXT_SETTINGS)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True))
@click.option("--format", "fmt", type=click.Choice(["jsonl", "json", "csv", "tsv", "parquet"]),
              help="File format (default: from the extension; .gz is decompressed).")
@click.option("--map", "maps", multiple=True, metavar="FIELD=PATH",
              help="Read a field from a (dotted) path, e.g. --map question=inputs.query.")
@click.option("--lenient", is_flag=True,
              help="Write the valid records; write rejects with reasons to FILE.rejects.jsonl.")
@click.option("--max-line-mb", type=click.IntRange(1, 1024), default=16, show_default=True,
              help="Reject records longer than this.")
@json_option
@click.pass_context
def ingest_logs_cmd(ctx: click.Context, files: tuple[str, ...], fmt: str | None, maps: tuple[str, ...],
                    lenient: bool, max_line_mb: int, as_json: bool) -> None:
    """Ingest production query logs (JSONL, JSON, CSV/TSV, Parquet, or OpenInference spans).

    Each record needs a question and the retrieved chunks (ids, optional text, score, title).
    Strict by default: any invalid record means nothing from that file is written.

    Example:

        labeler ingest logs logs.jsonl --map question=inputs.query --map retrieved=outputs.documents
    """
    from .ingest import ingest_logs, parse_mapping

    mapping = parse_mapping(maps)
    _run_ingest(ctx, files, as_json, ingest_logs, fmt=fmt, mapping=mapping, lenient=lenient,
                max_line_bytes=max_line_mb * 1024 * 1024)


@ingest.command("corpus", context_settings=CONTEXT_SETTINGS)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True))
@click.option("--format", "fmt", type=click.Choice(["jsonl", "json", "csv", "tsv", "parquet"]),
              help="File format (default: from the extension).")
@click.option("--lenient", is_flag=True, help="Write the valid records; write rejects to FILE.rejects.jsonl.")
@json_option
@click.pass_context
def ingest_corpus_cmd(ctx: click.Context, files: tuple[str, ...], fmt: str | None, lenient: bool,
                      as_json: bool) -> None:
    """Ingest the corpus: chunk records with id, text and optional title and source.

    Example:

        labeler ingest corpus chunks.jsonl
    """
    from .ingest import ingest_corpus

    _run_ingest(ctx, files, as_json, ingest_corpus, fmt=fmt, lenient=lenient)


@cli.command(context_settings=CONTEXT_SETTINGS)
@json_option
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Show what the database holds: documents, queries by origin, retrievals, labels.

    Example:

        labeler stats --json
    """
    s = store.stats(_open(ctx))
    if as_json:
        _print_json(s)
        return
    origins = ", ".join(f"{k} {v}" for k, v in s["queries_by_origin"].items())
    click.echo(f"documents          {s['documents']} ({s['documents_without_text']} without text)")
    click.echo(f"queries            {s['queries']} ({origins}); {s['occurrences']} occurrences")
    click.echo(f"retrievals         {s['retrievals']} (retrievers: {', '.join(s['retrievers']) or '-'})")
    click.echo(f"relevance labels   {s['relevance_labels']}")
    click.echo(f"labeled queries    {s['labeled_queries']}; unlabeled {s['unlabeled_queries']}")


@cli.command(context_settings=CONTEXT_SETTINGS)
@json_option
@click.pass_context
def annotators(ctx: click.Context, as_json: bool) -> None:
    """Per-annotator counts (submitted, skipped, flagged, discarded, grades) and time spent.

    Example:

        labeler annotators --json
    """
    from .labels import annotator_stats

    rows = annotator_stats(_open(ctx))
    if as_json:
        _print_json(rows)
        return
    if not rows:
        click.echo("no annotators yet (they appear when they sign in to the app)")
    for r in rows:
        median = f"{r['median_seconds']:.0f} s" if r["median_seconds"] is not None else "-"
        click.echo(f"{r['annotator']:<20} {r['role'] or '-':<9} submitted {r['submitted']:>5}  skipped {r['skipped']:>4}  "
                   f"flagged {r['flagged']:>4}  discarded {r['discarded']:>4}  grades {r['grades']:>6}  "
                   f"time {r['seconds'] / 3600:.1f} h  median/item {median}")


@cli.command(context_settings=CONTEXT_SETTINGS)
@json_option
@click.pass_context
def queue(ctx: click.Context, as_json: bool) -> None:
    """Items in the labeling queue by state (open, leased, done), open slots, overlap, statuses.

    Example:

        labeler queue --json
    """
    from .labels import queue_counts

    counts = queue_counts(_open(ctx))
    if as_json:
        _print_json(counts)
        return
    for key, value in counts.items():
        click.echo(f"{key:<15} {value}")


def _streamlit(db_path: str, port: int | None, headless: bool) -> None:
    app = Path(__file__).parent / "app" / "streamlit_app.py"
    cmd = [sys.executable, "-m", "streamlit", "run", str(app), "--browser.gatherUsageStats", "false"]
    if port:
        cmd += ["--server.port", str(port)]
    if headless:
        cmd += ["--server.headless", "true"]
    env = dict(os.environ, LABELER_DB=str(Path(db_path).resolve()))
    raise SystemExit(subprocess.call(cmd, env=env))


def _app_options(f: Callable) -> Callable:
    f = click.option("--port", type=int, help="Port to serve on (default: Streamlit's 8501).")(f)
    return click.option("--headless", is_flag=True, help="Do not open a browser.")(f)


@cli.command(context_settings=CONTEXT_SETTINGS)
@_app_options
@click.pass_context
def app(ctx: click.Context, port: int | None, headless: bool) -> None:
    """Open the labeling app on --db.

    Example:

        labeler --db team.db app --port 8502
    """
    store.connect(ctx.obj["db_path"]).conn.close()
    _streamlit(ctx.obj["db_path"], port, headless)


@cli.command(context_settings=CONTEXT_SETTINGS)
@_app_options
@click.option("--no-app", is_flag=True, help="Only build the demo database.")
@click.pass_context
def demo(ctx: click.Context, port: int | None, headless: bool, no_app: bool) -> None:
    """Build a demo database from the bundled data (if absent) and open the app on it.

    Uses --db when given explicitly, else ./labeler-demo.db.

    Example:

        labeler demo
    """
    from .demo import build_demo

    src = ctx.find_root().params
    db_path = ctx.obj["db_path"] if os.environ.get("LABELER_DB") or src.get("db_path") != "labeler.db" \
        else "labeler-demo.db"
    summary = build_demo(db_path)
    click.echo(summary, err=True)
    if not no_app:
        _streamlit(db_path, port, headless)
