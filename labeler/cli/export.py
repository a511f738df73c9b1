"""``labeler export`` (the golden set with a manifest) and ``labeler import golden``, from ``labeler.export``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from . import stdio
from .common import CONTEXT_SETTINGS, ORIGIN_CHOICE, LabelerGroup, open_db
from .group import cli
from .output import Note, Output, output_options

EXPORT_COLUMNS = ["path", "format", "version", "queries", "judged_pairs", "relevant_pairs", "manifest_path", "sha256"]
IMPORT_COLUMNS = ["path", "annotator", "records", "new", "merged", "unchanged", "rejected", "rejects_path"]

EXPORT_FORMATS = ["jsonl", "trec", "beir", "ragas", "csv"]


@cli.command("export", context_settings=CONTEXT_SETTINGS)
@click.option("--format", "fmt", type=click.Choice(EXPORT_FORMATS), default="jsonl", show_default=True,
              help="jsonl (golden set), trec (qrels + run), beir, ragas, csv.")
@click.option("-o", "--output", "path", required=True, type=click.Path(allow_dash=True),
              help="The file to write (a folder for trec and beir); PATH.manifest.json goes next to it. "
                   "- writes jsonl, ragas or csv to standard output (the summary goes to stderr).")
@click.option("--origin", type=ORIGIN_CHOICE, help="Only queries of this origin.")
@click.option("--min-annotators", type=click.IntRange(1), default=1, show_default=True,
              help="Only queries submitted by at least N annotators.")
@click.option("--include-unreviewed-synthetic", is_flag=True,
              help="Also export synthetic questions still pending review.")
@click.option("--retriever", help="The ranking in ragas and csv (default: the only retriever, else production); "
              "trec writes run.<retriever>.txt for every retriever, or only this one's.")
@click.option("--judge-run", "judge_run", type=int, metavar="RUN",
              help="Cite the all-traffic estimate of this run over all traffic in the manifest (labels drawn at "
                   "random only); the golden set stays human-only.")
@output_options()
@click.pass_context
def export_cmd(ctx: click.Context, fmt: str, path: str, origin: str | None, min_annotators: int,
               include_unreviewed_synthetic: bool, retriever: str | None, judge_run: int | None,
               output_format: str) -> Output:
    """Export the golden set (deterministic bytes) with a manifest, recorded in the database.

    With -o - the data goes to standard output and only it (the summary, or --json's document with
    the manifest, goes to stderr); the folder formats trec and beir need a folder.

    Example:

        labeler export --format trec -o golden-trec --origin log
    """
    from ..export import FORMATS, export_data, export_golden

    filters = {"origin": origin, "min_annotators": min_annotators,
               "include_unreviewed_synthetic": include_unreviewed_synthetic, "retriever": retriever}
    to_stdout = path == stdio.DASH
    if to_stdout and FORMATS[fmt].directory:
        raise click.BadParameter(f"- (standard output) takes one file; the {fmt} format writes a folder: "
                                 "give a folder path", param_hint="'-o'")
    db = open_db(ctx)
    if judge_run is not None and to_stdout:
        raise click.UsageError("--judge-run cites the estimate in the manifest file; give -o a path, not -")
    if to_stdout:
        data, result = export_data(db, fmt, target="stdout", **filters)
        out = sys.stdout.buffer
        out.write(data)
        out.flush()
    else:
        result = export_golden(db, path, fmt, judge_run=judge_run, **filters)
    c = result.counts
    where = f"manifest {result.manifest_path}" if result.manifest_path else f"sha256 {result.manifest['sha256']}"
    runs = ""
    if FORMATS[fmt].runs == "each":
        names = [Path(n).name for n in result.files if Path(n).name.startswith("run.")]
        runs = f"; runs: {', '.join(names)}" if names else "; no run (no retriever logged rankings)"
    row = {"path": result.path, "format": fmt, "version": result.version, "queries": c["queries"],
           "judged_pairs": c["judged_pairs"], "relevant_pairs": c["relevant_pairs"],
           "manifest_path": result.manifest_path, "sha256": result.manifest["sha256"]}
    return Output(result.to_dict(), EXPORT_COLUMNS, [row],
                  text=[f"{result.path}: {c['queries']} queries, {c['judged_pairs']} judged pairs "
                        f"({c['relevant_pairs']} relevant) as {fmt}{runs}; export version {result.version}, {where}"],
                  err=to_stdout)


@cli.group("import", cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def import_group() -> None:
    """Import labels made elsewhere.

    Example:

        labeler import golden golden.jsonl --annotator alice
    """


@import_group.command("golden", context_settings=CONTEXT_SETTINGS)
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--annotator", required=True, help="Whose submitted labels the file's grades become.")
@click.option("--lenient", is_flag=True, help="Write the valid lines; write rejects to FILE.rejects.jsonl.")
@output_options()
@click.pass_context
def import_golden_cmd(ctx: click.Context, file: str, annotator: str, lenient: bool, output_format: str) -> Output:
    """Import a golden set: this tool's golden JSONL or {"question", "relevant_ids", "expected_answer"?}.

    Lines match queries by query_id, else by question (new ones are created); the grades become
    the annotator's submitted labels. Strict by default: one bad line and nothing is written.

    Example:

        labeler import golden golden.jsonl --annotator alice
    """
    from ..export import import_golden

    result = import_golden(open_db(ctx, create=True), file, annotator=annotator, lenient=lenient)
    line = (f"{result.path}: {result.records} lines: {result.new} new queries, {result.merged} updated, "
            f"{result.unchanged} unchanged, {result.rejected} rejected; labels of {result.annotator}")
    if result.rejects_path:
        line += f"\nrejected lines and reasons: {result.rejects_path}"
    document = result.to_dict()
    return Output(document, IMPORT_COLUMNS, [document],
                  text=[line, *(Note(f"  {p}") for p in result.problems[:20])],
                  notes=[f"Warning: {w}" for w in result.warnings])
