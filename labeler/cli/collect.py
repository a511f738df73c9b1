"""``labeler collect``: receive OpenTelemetry traces from an instrumented app (``labeler.sources.collector``)."""

from __future__ import annotations

import json
import re
import signal
import threading
from typing import Any

import click

from .common import CONTEXT_SETTINGS, open_db
from .group import cli
from .ingests import redact_option
from .output import Note, Output, output_options

FLUSH_COLUMNS = ["number", "at", "ingest_id", "spans", "traces", "without_root", "records", "new", "merged",
                 "unchanged", "rejected", "retrievals", "documents_new", "seconds", "error"]
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class Duration(click.ParamType):
    """``2s``, ``500ms``, ``1m``, or a number of seconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, int | float):
            return float(value)
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", str(value))
        if not m or float(m[1]) <= 0:
            self.fail(f"{value!r} is not a duration > 0 such as 2s, 500ms or 1m", param, ctx)
        return float(m[1]) * _UNITS[m[2] or "s"]


def flush_line(f: Any) -> str:
    """One flush as the plain text shows it."""
    head = f"{f.at[11:19]} #{f.number}" + (f" (ingest {f.ingest_id})" if f.ingest_id is not None else "")
    if f.error is not None:
        return f"{head}: {f.spans} spans of {f.traces} traces NOT written: {f.error}"
    line = (f"{head}: {f.spans} spans of {f.traces} traces: {f.records} retrievals: {f.new} new, {f.merged} merged, "
            f"{f.unchanged} unchanged, {f.rejected} rejected; {f.documents_new} new documents in {f.seconds:.2f} s")
    if f.without_root:
        line += f"; {f.without_root} traces without their root (question and answer)"
    if f.redactions:
        line += "; redacted " + ", ".join(f"{k} {n}" for k, n in sorted(f.redactions.items()))
    return line


@cli.command("collect", context_settings=CONTEXT_SETTINGS)
@click.option("--otlp", "address", required=True, metavar="HOST:PORT",
              help="Listen for OTLP/HTTP traces (POST /v1/traces, protobuf or JSON, gzip or not) here, "
                   "e.g. 127.0.0.1:4318 (port 0: any free port, printed at start).")
@click.option("--flush-every", type=Duration(), default="2s", show_default=True,
              help="Write what is ready at least this often.")
@click.option("--batch", type=click.IntRange(1), default=5000, show_default=True,
              help="Write as soon as this many spans are ready; at most this many per ingest.")
@click.option("--hold", type=Duration(), default="30s", show_default=True,
              help="How long a trace's retrievals wait for its root span (the question and the answer) "
                   "before they are written without it.")
@click.option("--max-buffer-mb", type=click.FloatRange(1), default=64, show_default=True,
              help="Spans held in memory, at most; past it a request is refused with 429 and Retry-After.")
@redact_option
@click.option("--sample", type=click.FloatRange(0, 1, min_open=True, max_open=True), metavar="RATE",
              help="Keep a uniform sample of the retrievals, e.g. 0.05 (by a hash of the span id and --seed).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --sample.")
@output_options(nl=True)
@click.pass_context
def collect_cmd(ctx: click.Context, address: str, flush_every: float, batch: int, hold: float, max_buffer_mb: float,
                redact: bool | None, redact_patterns: tuple[str, ...], sample: float | None, seed: int,
                output_format: str) -> Output | None:
    """Receive OpenTelemetry traces straight from an app instrumented with OpenInference (or
    OpenLLMetry's LangChain instrumentation) and store its retriever spans as they arrive, until
    Ctrl-C or SIGTERM (then what is held is written).

    Point the app's OTLP/HTTP exporter at http://HOST:PORT/v1/traces. Retriever spans are held
    until their trace's root span (the question and the final answer) arrives, then written in
    batches, each an ingest of its own (labeler ingest list shows it, labeler ingest undo ID removes
    it) with the same validation and redaction as labeler ingest logs; other spans are counted and
    dropped. The address goes to stderr at start; then one line per write (--nl: one JSON line),
    or with --json / --csv / --table the summary or the writes at the end. Protobuf requests need
    the otlp extra (pip install 'rag-labeler[otlp]'); JSON ones do not. A payload that cannot be
    read gets 400 with the reason.

    Example:

        labeler collect --otlp 127.0.0.1:4318

        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces python app.py
    """
    import labeler.topics  # noqa: F401 - routing quotas and new topics need the topic assigner (it runs for long)

    from ..sources.collect_options import CollectOptions
    from ..sources.collector import parse_address, serve
    from ..sources.otlp_proto import OTLP_EXTRA, protobuf_available

    host, port = parse_address(address)
    options = CollectOptions(batch=batch, flush_every=flush_every, hold=hold, max_buffer_mb=max_buffer_mb,
                             max_request_mb=min(16.0, max_buffer_mb), redact=redact,
                             redact_patterns=list(redact_patterns) or None, sample=sample, seed=seed)
    db = open_db(ctx, create=True)
    live = output_format in ("text", "nl")

    def on_start(collector: Any) -> None:
        # on stderr in every format: with port 0 it is the only way to learn the port
        click.echo(Note(f"collecting OTLP traces on {collector.url} (Ctrl-C to stop)"), err=True)
        if not protobuf_available():
            click.echo(Note(f"only JSON requests can be read: protobuf needs {OTLP_EXTRA}"), err=True)

    def on_flush(flush: Any) -> None:
        if output_format == "nl":
            click.echo(json.dumps(flush.to_dict(), ensure_ascii=False))
        elif output_format == "text":
            click.echo(flush_line(flush), err=flush.error is not None)
            for problem in flush.problems:
                click.echo(f"  {problem}", err=True)

    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) \
        if threading.current_thread() is threading.main_thread() else None
    try:
        summary = serve(db, host, port, options=options, on_flush=on_flush, on_start=on_start, stop=stop)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if output_format == "nl":
        return None
    rows = [f.to_dict() for f in summary.flushes]
    text = [f"{summary.address}: {summary.requests} requests ({summary.refused} refused, {summary.bad_requests} "
            f"bad), {summary.spans_received} spans: {summary.spans_written} written in {summary.flush_count} "
            f"ingests, {summary.spans_dropped} were not retrievals; {summary.new} new queries, {summary.merged} "
            f"merged, {summary.unchanged} unchanged, {summary.rejected} rejected"] if live else None
    return Output(summary.to_dict(), FLUSH_COLUMNS, rows, text=text, empty="nothing was written")
