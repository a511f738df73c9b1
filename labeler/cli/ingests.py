"""``labeler ingest`` (``logs``, ``corpus``, ``list``, ``undo``) and ``labeler queries remove``: loading
query logs and corpora (``labeler.ingest``) and undoing a bad ingest or single bad items
(``labeler.ingest.undo``)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..errors import LabelerError
from ..ingest import ingest_tools
from ..ingest.readers import FORMATS as FILE_FORMATS
from . import stdio
from .common import CONTEXT_SETTINGS, LabelerGroup, open_db, progress_bar
from .group import cli
from .output import Note, Output, output_options, render

INGEST_COLUMNS = ["path", "kind", "format", "records", "new", "merged", "unchanged", "rejected", "retrievals",
                  "documents_new", "documents_without_text", "rejects_path"]
LIST_COLUMNS = ["id", "created_at", "kind", "state", "by", "queries", "retrievals", "documents", "skipped", "sha256",
                "path"]
UNDO_COLUMNS = ["ingest_id", "dry_run", "already_undone", "queries_removed", "queries_kept", "retrievals_removed",
                "log_lines_removed", "documents_removed", "documents_kept", "labels_removed"]


@cli.group(cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def ingest() -> None:
    """Load production query logs or a corpus into the database.

    Example:

        labeler ingest logs prod-2026-11.jsonl.gz
    """


def _ingest_summary(r: dict[str, Any]) -> str:
    line = (f"{r['path']}: {r['records']} records: {r['new']} new, {r['merged']} merged, "
            f"{r['unchanged']} unchanged, {r['rejected']} rejected")
    if r["kind"] == "logs":
        line += f"; {r['retrievals']} retrievals, {r['documents_new']} new documents"
        if r["documents_without_text"]:
            line += (f"; {r['documents_without_text']} documents have no text yet "
                     "(ingest a corpus file with their text)")
    for note in r.get("notes") or []:
        line += f"\n  {note}"
    if r.get("rejects_path"):
        line += f"\nrejected records and reasons: {r['rejects_path']}"
    return line


def _run_ingest(ctx: click.Context, files: tuple[str, ...], fmt: str | None, output_format: str,
                ingest_file: Callable[..., Any]) -> Output:
    """Ingest each file with ``ingest_file(db, path, fmt, name, progress)``; a summary line per file."""
    if files.count(stdio.DASH) > 1:
        raise click.BadParameter("- (standard input) can be given once", param_hint="FILES")
    db = open_db(ctx, create=True)
    results: list[dict[str, Any]] = []
    lines: list[str] = []
    try:
        for f in files:
            with stdio.input_file(f, sys.stdin.buffer, fmt) as (path, name, file_fmt):
                update, close = progress_bar(name or Path(f).name)
                try:
                    result = ingest_file(db, path, file_fmt, name, update if sys.stderr.isatty() else None)
                finally:
                    close()
                if name and result.rejects_path:
                    result.rejects_path = stdio.keep_rejects(result.rejects_path)
            results.append(result.to_dict())
            lines.append(_ingest_summary(results[-1]))
            lines += [Note(f"  {p}") for p in result.problems[:20]]
    except LabelerError:
        if output_format == "text":  # the files before the failing one stay loaded: say what they loaded
            render(Output(None, [], text=lines), output_format)
        raise
    return Output(results if len(results) > 1 else results[0], INGEST_COLUMNS, results, text=lines)


def redact_option(f: Callable) -> Callable:
    f = click.option("--redact-pattern", "redact_patterns", multiple=True, metavar="TYPE=REGEX",
                     help="Also replace what this regular expression matches, by [TYPE_n] (added to the "
                          "setting redact_patterns), e.g. --redact-pattern CUSTOMER=CUST-\\d{6}.")(f)
    return click.option("--redact/--no-redact", default=None,
                        help="Replace personal data and secrets with placeholders before storing (default: "
                             "on, unless the setting redact is off).")(f)


# file formats, then the tools whose reader --format may force (ingest.formats' registry)
LOG_FORMATS = [*FILE_FORMATS, *ingest_tools()]

@ingest.command("logs", context_settings=CONTEXT_SETTINGS)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True))
@click.option("--format", "fmt", type=click.Choice(LOG_FORMATS),
              help="File format (default: from the extension; .gz is decompressed; for - from the first "
                   "bytes), or the tool that wrote the file, to force its reader (default: recognised "
                   "per record).")
@click.option("--map", "maps", multiple=True, metavar="FIELD=PATH",
              help="Read a field from a (dotted) path, e.g. --map question=inputs.query.")
@click.option("--lenient", is_flag=True,
              help="Write the valid records; write rejects with reasons to FILE.rejects.jsonl.")
@click.option("--max-line-mb", type=click.IntRange(1, 1024), default=16, show_default=True,
              help="Reject records longer than this.")
@redact_option
@click.option("--sample", type=float, metavar="RATE|N",
              help="Keep a uniform sample: a rate below 1 (e.g. 0.05, picked by a hash of the query id and "
                   "--seed, the same in every file and re-ingest) or a number of records per file (a seeded "
                   "reservoir, e.g. 50000).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --sample.")
@output_options()
@click.pass_context
def ingest_logs_cmd(ctx: click.Context, files: tuple[str, ...], fmt: str | None, maps: tuple[str, ...],
                    lenient: bool, max_line_mb: int, redact: bool | None, redact_patterns: tuple[str, ...],
                    sample: float | None, seed: int, output_format: str) -> Output:
    """Ingest production query logs (JSONL, JSON, CSV/TSV, Parquet) or what tools wrote: Phoenix /
    OpenInference spans, OpenTelemetry console or OTLP/JSON spans, LangSmith runs, LangChain
    Documents, LlamaIndex nodes, Ragas and Hugging Face datasets.

    Each record needs a question and the retrieved chunks (ids, optional text, score, title); a
    chunk without an id gets one made from its text. Spans and runs that are not retrievals are
    skipped and counted. Strict by default: any invalid record means nothing from that file is
    written. --map chunk.id=metadata.source reaches inside each chunk. FILE - reads standard input
    (named <stdin> in messages; format from --format, else from its first bytes: [ JSON array,
    { JSON lines, PAR1 Parquet; gzip is decompressed). Email addresses, phone, card and national
    id numbers, IBANs, IP addresses and secrets become placeholders such as [EMAIL_1] before
    anything is stored (--no-redact keeps them).

    Example:

        labeler ingest logs logs.jsonl --map question=inputs.query --map retrieved=outputs.documents

        labeler ingest logs big-*.jsonl.gz --sample 0.05 --seed 7
    """
    from ..ingest import LogIngestOptions, ingest_logs

    tool = fmt if fmt in ingest_tools() else None  # the file's format still comes from its name or bytes
    options = LogIngestOptions(tool=tool, mapping=maps, lenient=lenient, max_line_bytes=max_line_mb * 1024 * 1024,
                               redact=redact, redact_patterns=redact_patterns, sample=sample, seed=seed)

    def ingest_file(db: Any, path: Path, file_fmt: str | None, name: str | None, progress: Any) -> Any:
        return ingest_logs(db, path, options=dataclasses.replace(options, fmt=file_fmt, name=name),
                           progress=progress)

    return _run_ingest(ctx, files, None if tool else fmt, output_format, ingest_file)


@ingest.command("corpus", context_settings=CONTEXT_SETTINGS)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True))
@click.option("--format", "fmt", type=click.Choice(FILE_FORMATS),
              help="File format (default: from the extension; for - from the first bytes).")
@click.option("--lenient", is_flag=True, help="Write the valid records; write rejects to FILE.rejects.jsonl.")
@redact_option
@output_options()
@click.pass_context
def ingest_corpus_cmd(ctx: click.Context, files: tuple[str, ...], fmt: str | None, lenient: bool,
                      redact: bool | None, redact_patterns: tuple[str, ...], output_format: str) -> Output:
    """Ingest the corpus: chunk records with id, text and optional title and source.

    FILE - reads standard input, as for labeler ingest logs.

    Example:

        labeler ingest corpus chunks.jsonl
    """
    from ..ingest import ingest_corpus
    from ..privacy import parse_patterns

    patterns = parse_patterns(redact_patterns)

    def ingest_file(db: Any, path: Path, file_fmt: str | None, name: str | None, progress: Any) -> Any:
        return ingest_corpus(db, path, fmt=file_fmt, name=name, progress=progress, lenient=lenient, redact=redact,
                             redact_patterns=patterns)

    return _run_ingest(ctx, files, fmt, output_format, ingest_file)


@ingest.command("list", context_settings=CONTEXT_SETTINGS)
@output_options(nl=True)
@click.pass_context
def ingest_list_cmd(ctx: click.Context, output_format: str) -> Output:
    """Every ingest, oldest first: id, file, sha256, time, who ran it, state (done, running,
    undoing, undone) and counts (queries and documents it created, retrievals, skipped records).

    Example:

        labeler ingest list --json
    """
    from ..ingest.undo import list_ingests

    rows = [r.to_dict() for r in list_ingests(open_db(ctx))]
    return Output(rows, LIST_COLUMNS, rows, empty="no ingests yet: labeler ingest logs FILE")


@ingest.command("undo", context_settings=CONTEXT_SETTINGS)
@click.argument("ingest_id", type=int)
@click.option("--force", is_flag=True, help="Also remove queries that have labels, with their labels.")
@click.option("--dry-run", is_flag=True, help="Only count what would be removed.")
@output_options()
@click.pass_context
def ingest_undo_cmd(ctx: click.Context, ingest_id: int, force: bool, dry_run: bool, output_format: str) -> Output:
    """Remove the queries, retrievals, log lines and documents that only ingest INGEST_ID brought
    (rows another ingest logged too stay). Refused when any query to remove has labels, unless
    --force. Writes in short transactions (annotators keep saving meanwhile); if interrupted, the
    ingest shows as undoing and running this again finishes it. Undoing twice changes nothing.

    Example:

        labeler ingest undo 3 --dry-run
    """
    from ..ingest.undo import undo_ingest

    result = undo_ingest(open_db(ctx), ingest_id, force=force, dry_run=dry_run)
    return Output(result.to_dict(), UNDO_COLUMNS, [result.to_dict()], text=[result.summary()])


@cli.group("queries", cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def queries() -> None:
    """Manage single queries (items).

    Example:

        labeler queries remove q-1234 q-5678
    """


@queries.command("remove", context_settings=CONTEXT_SETTINGS)
@click.argument("query_ids", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="Also remove queries that have labels, with their labels.")
@output_options()
@click.pass_context
def queries_remove_cmd(ctx: click.Context, query_ids: tuple[str, ...], force: bool, output_format: str) -> Output:
    """Remove QUERY_IDS with their retrievals, log lines and the documents nothing else uses
    (corpus documents stay). Refused when any has labels, unless --force.

    Example:

        labeler queries remove q-1234 --force
    """
    from ..ingest.undo import remove_queries

    result = remove_queries(open_db(ctx), query_ids, force=force)
    return Output(result.to_dict(), UNDO_COLUMNS, [result.to_dict()], text=[result.summary()])
