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

from .. import db as store
from ..errors import IngestError, LabelerError
from ..ingest import ingest_tools
from ..ingest.readers import FORMATS as FILE_FORMATS
from . import stdio

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


def _open(ctx: click.Context, *, create: bool = False):
    """The --db database. Only commands that write data of their own (ingest, import, demo, users add,
    app) may create it; for every other command a missing file is an error (``store.connect``),
    so that a mistyped --db is not a new, empty database that reads as zeros."""
    return store.connect(ctx.obj["db_path"], create=create)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from ..version import version  # importlib.metadata costs ~40 ms: only when asked

    click.echo(f"labeler, version {version()}")
    ctx.exit()


def _print_json(value: Any, *, err: bool = False) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str), err=err)


@click.group(cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
@click.option("--db", "db_path", envvar="LABELER_DB", default="labeler.db", show_default=True,
              type=click.Path(dir_okay=False), help="The SQLite database file (env LABELER_DB).")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version of rag-labeler and exit.")
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
    for note in r.get("notes") or []:
        line += f"\n  {note}"
    if r.get("rejects_path"):
        line += f"\nrejected records and reasons: {r['rejects_path']}"
    return line


def _run_ingest(ctx: click.Context, files: tuple[str, ...], fmt: str | None, as_json: bool, fn: Callable,
                **kwargs: Any) -> None:
    if files.count(stdio.DASH) > 1:
        raise click.BadParameter("- (standard input) can be given once", param_hint="FILES")
    db = _open(ctx, create=True)
    results = []
    for f in files:
        with stdio.input_file(f, sys.stdin.buffer, fmt) as (path, name, file_fmt):
            update, close = _progress_bar(name or Path(f).name)
            try:
                result = fn(db, path, fmt=file_fmt, name=name, progress=update if sys.stderr.isatty() else None,
                            **kwargs)
            finally:
                close()
            if name and result.rejects_path:
                result.rejects_path = stdio.keep_rejects(result.rejects_path)
        results.append(result.to_dict())
        if not as_json:
            click.echo(_ingest_summary(results[-1]))
            for p in result.problems[:20]:
                click.echo(f"  {p}", err=True)
    if as_json:
        _print_json(results if len(results) > 1 else results[0])


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
@json_option
@click.pass_context
def ingest_logs_cmd(ctx: click.Context, files: tuple[str, ...], fmt: str | None, maps: tuple[str, ...],
                    lenient: bool, max_line_mb: int, redact: bool | None, redact_patterns: tuple[str, ...],
                    sample: float | None, seed: int, as_json: bool) -> None:
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
    from ..ingest import ingest_logs, parse_mapping
    from ..privacy import parse_patterns

    mapping = parse_mapping(maps)
    tool = fmt if fmt in ingest_tools() else None  # the file's format still comes from its name or bytes
    _run_ingest(ctx, files, None if tool else fmt, as_json, ingest_logs, mapping=mapping, lenient=lenient, tool=tool,
                max_line_bytes=max_line_mb * 1024 * 1024, redact=redact,
                redact_patterns=parse_patterns(redact_patterns), sample=sample, seed=seed)


@ingest.command("corpus", context_settings=CONTEXT_SETTINGS)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True))
@click.option("--format", "fmt", type=click.Choice(FILE_FORMATS),
              help="File format (default: from the extension; for - from the first bytes).")
@click.option("--lenient", is_flag=True, help="Write the valid records; write rejects to FILE.rejects.jsonl.")
@redact_option
@json_option
@click.pass_context
def ingest_corpus_cmd(ctx: click.Context, files: tuple[str, ...], fmt: str | None, lenient: bool,
                      redact: bool | None, redact_patterns: tuple[str, ...], as_json: bool) -> None:
    """Ingest the corpus: chunk records with id, text and optional title and source.

    FILE - reads standard input, as for labeler ingest logs.

    Example:

        labeler ingest corpus chunks.jsonl
    """
    from ..ingest import ingest_corpus
    from ..privacy import parse_patterns

    _run_ingest(ctx, files, fmt, as_json, ingest_corpus, lenient=lenient, redact=redact,
                redact_patterns=parse_patterns(redact_patterns))


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
    """Per-annotator counts (submitted, skipped, flagged, discarded, grades) and time spent; with
    --json also items per hour, kappa vs the consolidated label and vs the others (with 95% CIs),
    skip and flag shares (defined in the README, "Annotators").

    Example:

        labeler annotators --json
    """
    from ..labels import annotator_stats

    db = _open(ctx)
    rows = annotator_stats(db)
    if as_json:
        from ..labels.coaching import annotator_performance

        extra = {r["annotator"]: r for r in annotator_performance(db)}
        _print_json([{**extra.get(r["annotator"], {}), **r} for r in rows])
        return
    if not rows:
        click.echo("no annotators yet (they appear when they sign in to the app)")
    for r in rows:
        median = f"{r['median_seconds']:.0f} s" if r["median_seconds"] is not None else "-"
        click.echo(f"{r['annotator']:<20} {r['role'] or '-':<9} submitted {r['submitted']:>5}  skipped {r['skipped']:>4}  "
                   f"flagged {r['flagged']:>4}  discarded {r['discarded']:>4}  grades {r['grades']:>6}  "
                   f"time {r['seconds'] / 3600:.1f} h  median/item {median}")


@cli.command(context_settings=CONTEXT_SETTINGS)
@click.option("--order", type=click.Choice(["random", "oldest", "lowest_score", "frequent", "active", "stratified"]),
              help="Set the queue order first (a lead's setting). active draws the queries to label with "
                   "probabilities from the judge's uncertainty (needs --judge-run); stratified fills the topics "
                   "in proportion to their traffic (needs labeler topics build).")
@click.option("--target", "targets", multiple=True, metavar="TOPIC=SHARE",
              help="With --order stratified: the share of labels a topic should get instead of its traffic share "
                   "(repeatable; topics left out get none).")
@click.option("--judge-run", "judge_run", type=int, metavar="RUN",
              help="With --order active: a relevance run over all traffic (labeler judge run --on all).")
@click.option("--budget", type=click.FloatRange(min=0, min_open=True),
              help="With --order active: expected labels to draw (default: the label_budget setting, else 100).")
@click.option("--seed", type=int, default=0, show_default=True, help="With --order active: seed of the draw.")
@json_option
@click.pass_context
def queue(ctx: click.Context, order: str | None, targets: tuple[str, ...], judge_run: int | None,
          budget: float | None, seed: int, as_json: bool) -> None:
    """Items in the labeling queue by state (open, leased, done), open slots, overlap, statuses.

    With --order, set the queue order instead; `--order active --judge-run RUN` draws the queries
    to label next (seeded, recorded) for the all-traffic estimates.

    Example:

        labeler queue --json

    \b
        labeler queue --order active --judge-run 3 --budget 200

    \b
        labeler queue --order stratified --target 0=0.5 --target 2=0.5
    """
    from ..labels import queue_counts

    if order is not None:
        from .estimate import set_order

        set_order(_open(ctx), order, judge_run=judge_run, budget=budget, seed=seed, as_json=as_json,
                  targets=list(targets))
        return
    if targets:
        raise click.UsageError("--target goes with --order stratified")
    counts = queue_counts(_open(ctx))
    if as_json:
        _print_json(counts)
        return
    for key, value in counts.items():
        click.echo(f"{key:<15} {value}")


def _streamlit(db_path: str, port: int | None, headless: bool, host: str = "127.0.0.1") -> None:
    from ..accounts import check_exposure
    from ..app.launch import streamlit_command

    secrets = _secrets_toml()
    check_exposure(store.connect(db_path), host, password=bool(secrets.get("password")),
                   oidc=bool(secrets.get("auth")))
    cmd = streamlit_command(host=host, port=port, headless=headless)
    env = dict(os.environ, LABELER_DB=str(Path(db_path).resolve()))
    raise SystemExit(subprocess.call(cmd, env=env))


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
    _open(ctx, create=True).conn.close()
    _streamlit(ctx.obj["db_path"], port, headless, host)


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
        else "labeler-demo.db"
    summary = build_demo(db_path)
    click.echo(summary, err=True)
    if not no_app:
        _streamlit(db_path, port, headless, host)


# --- synth: synthetic questions (labeler.synth) ---------------------------------------------

def _eval_llm_config() -> Any:
    from ..llm import LLMConfig

    return LLMConfig.from_env(_secrets_toml())  # the judge run's own model and temperature are used


def _secrets_toml() -> dict[str, Any]:
    """``.streamlit/secrets.toml`` of the working directory (where the app reads it), if any."""
    import tomllib

    path = Path(".streamlit") / "secrets.toml"
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise LabelerError(f"cannot read {path}: {e}") from None


@cli.group(cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def synth() -> None:
    """Generate synthetic questions from the corpus and compare them with logged ones.

    Generated questions wait for review on the app's Review page before they are labeled.

    Example:

        labeler synth generate --n 50 --dry-run
    """


@synth.command("generate", context_settings=CONTEXT_SETTINGS)
@click.option("--n", "n", type=click.IntRange(1, 100_000), default=50, show_default=True,
              help="Questions to ask for in all.")
@click.option("--per-chunk", type=click.IntRange(1, 20), default=2, show_default=True,
              help="Questions per seed chunk.")
@click.option("--seed", type=int, default=7, show_default=True, help="Seed of the chunk and example sampling.")
@click.option("--model", help="Model name (default: env LABELER_MODEL, else gpt-4o-mini).")
@click.option("--types", default="fact,how-to,troubleshooting,comparison", show_default=True,
              help="Comma-separated question types.")
@click.option("--persona", help='Who asks, e.g. "a new admin of a small team".')
@click.option("--language", help="Language of the questions (default: setting synth_language, else detected).")
@click.option("--strategy", type=click.Choice(["uncovered", "random", "stratified"]), default="uncovered",
              show_default=True, help="How seed chunks are picked.")
@click.option("--multi-hop", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Share of seeds that pair two related chunks.")
@click.option("--duplicate-threshold", type=click.FloatRange(0, 1, min_open=True), default=0.85,
              show_default=True, help="TF-IDF cosine at which a question is a near-duplicate.")
@click.option("--concurrency", type=click.IntRange(1, 256), help="Parallel requests (default 8).")
@click.option("--dry-run", is_flag=True, help="Print the token and cost estimate; send nothing.")
@click.option("--batch", "as_batch", is_flag=True,
              help="Send through the Batch API (half price, results within 24 h); returns at once.")
@click.option("--wait", "wait", is_flag=True, help="With --batch: poll until the batches finish, then collect.")
@json_option
@click.pass_context
def synth_generate_cmd(ctx: click.Context, n: int, per_chunk: int, seed: int, model: str | None, types: str,
                       persona: str | None, language: str | None, strategy: str, multi_hop: float,
                       duplicate_threshold: float, concurrency: int | None, dry_run: bool, as_batch: bool,
                       wait: bool, as_json: bool) -> None:
    """Generate synthetic questions from seed chunks; they are stored pending review.

    Needs OPENAI_API_KEY (and OPENAI_BASE_URL for another endpoint) in the environment or in
    .streamlit/secrets.toml. A rerun with the same options resumes: finished requests come from
    the cache and cost nothing.

    Example:

        labeler synth generate --n 50 --per-chunk 2 --seed 7 --model gpt-4o-mini --dry-run
    """
    from .. import llm
    from .. import synth as synthesis

    options = synthesis.SynthOptions(
        n=n, per_chunk=per_chunk, seed=seed, question_types=tuple(t.strip() for t in types.split(",") if t.strip()),
        persona=persona, language=language, strategy=strategy, multi_hop=multi_hop,
        duplicate_threshold=duplicate_threshold)
    config = llm.LLMConfig.from_env(_secrets_toml(), model=model, concurrency=concurrency)
    db = _open(ctx)
    if dry_run:
        plan = synthesis.plan_generation(db, config, options)
        if as_json:
            _print_json(plan.to_dict())
            return
        e = plan.estimate
        cost = "unknown cost (no price for this model)" if e.cost is None else \
            f"about ${e.cost:.4f} (at most ${e.cost_max:.4f}; ${e.cost_batch:.4f} as a batch)"
        click.echo(f"dry run: {e.to_request} request(s) to {e.model} ({e.cached} cached) for up to "
                   f"{len(plan.seeds) * per_chunk} questions from {len(plan.seeds)} seed(s): ~{e.input_tokens} input + "
                   f"~{e.output_tokens} output tokens, {cost}; nothing was sent")
        for note in plan.notes + e.notes:
            click.echo(f"note: {note}", err=True)
        return
    if as_batch:
        result = synthesis.generate(db, config, options, batch=True)
        if wait and result.status == "submitted":
            from .llm import collect_summary, wait_for

            wait_for(db, config, "synth", result.run_id, 30)
            click.echo(collect_summary(llm.batch.collect(db, config, owner="synth", run_id=result.run_id)))
            return
        if as_json:
            _print_json(result.to_dict())
        elif result.status == "submitted":
            click.echo(f"synth run {result.run_id} submitted as {len(result.batches)} batch(es): "
                       f"{', '.join(result.batches)}; collect with: labeler llm collect synth:{result.run_id}")
        else:
            click.echo(f"synth run {result.run_id}: everything was cached; stored {len(result.stored)} question(s)")
        return
    update, close = _progress_bar("generating")
    try:
        result = synthesis.generate(
            db, config, options,
            progress=(lambda p: update(p.completed, p.total)) if sys.stderr.isatty() else None)
    finally:
        close()
    r = result.to_dict()
    if as_json:
        _print_json(r)
        return
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(r["rejected_by_reason"].items()))
    m = r["llm"]
    cost = "unknown" if m["cost"] is None else f"${m['cost']:.4f}"
    click.echo(f"stored {r['stored']} synthetic question(s) pending review; rejected {r['rejected']}"
               + (f" ({reasons})" if reasons else "") + f"; already stored {r['already_stored']}; "
               f"{len(m['failed'])} failed; {m['requests']} request(s), {m['cached']} cached; cost {cost}")
    for f in m["failed"][:20]:
        click.echo(f"  failed {f['key']}: {f['reason']}", err=True)
    for rej in r["rejections"][:20]:
        click.echo(f"  rejected ({rej['reason']}: {rej['detail']}): {rej['question'][:100]}", err=True)


@synth.command("report", context_settings=CONTEXT_SETTINGS)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the folds and the bootstrap.")
@click.option("--all", "include_rejected", is_flag=True, help="Include synthetic questions rejected in review.")
@json_option
@click.pass_context
def synth_report_cmd(ctx: click.Context, seed: int, include_rejected: bool, as_json: bool) -> None:
    """Distribution shift: synthetic vs logged questions (wording, classifier AUC, terms, metrics).

    Example:

        labeler synth report --json
    """
    from ..synth import shift_report

    report = shift_report(_open(ctx), seed=seed, review_states=None if include_rejected else ("pending", "accepted"))
    if as_json:
        _print_json(report)
        return
    c, w = report["classifier"], report["wording"]
    click.echo(f"questions          {report['n']['log']} logged, {report['n']['synthetic']} synthetic")
    click.echo(f"mean length        {w['log']['words_mean']} vs {w['synthetic']['words_mean']} words")
    if c["auc"] is None:
        click.echo(f"classifier AUC     - ({c.get('note')})")
    else:
        click.echo(f"classifier AUC     {c['auc']:.3f} (95% CI {c['ci_low']:.3f}-{c['ci_high']:.3f}; "
                   "0.5 = indistinguishable)")
    click.echo("synthetic terms    " + ", ".join(t["term"] for t in report["terms"]["synthetic"][:10]))
    click.echo("logged terms       " + ", ".join(t["term"] for t in report["terms"]["log"][:10]))
    for origin in ("log", "synthetic"):
        r = report["retrieval"][origin]
        values = ", ".join(f"{k} {v['mean']:.3f}" for k, v in r["metrics"].items() if v["mean"] is not None)
        click.echo(f"{origin + ' metrics':<19}{values or '-'} ({r['queries']} labeled queries)")


@cli.command("eval", context_settings=CONTEXT_SETTINGS)
@click.option("--golden", required=True, type=click.Path(dir_okay=False),
              help="The golden set: JSONL from labeler export, or lines {question, relevant_ids}.")
@click.option("--pipeline", metavar="MODULE:FUNCTION",
              help="A function taking a question and returning (docs, answer), e.g. mypkg.rag:answer.")
@click.option("--endpoint", metavar="URL", help='An HTTP pipeline: POST {"question": ...}, JSON response.')
@click.option("--map", "maps", multiple=True, metavar="FIELD=PATH",
              help="Read the endpoint's response from (dotted) paths, as in ingest: --map retrieved=result.docs.")
@click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'",
              help="An HTTP header for --endpoint (repeatable), e.g. 'Authorization: Bearer $TOKEN'.")
@click.option("--retriever", help="Without --pipeline/--endpoint: the logged retriever in --db to evaluate "
              "(default: the only one, else production).")
@click.option("-k", "k", type=click.IntRange(1), help="Cutoff of the default metrics recall@k, precision@k, "
              "hit@k, mrr, ndcg@k (default 10).")
@click.option("--metric", "metric_specs", multiple=True, metavar="SPEC", help="Another metric, e.g. ndcg@10.")
@click.option("--threshold", type=click.IntRange(1), help="Lowest relevant grade (default: manifest's, else 2).")
@click.option("--concurrency", type=click.IntRange(1, 1024), default=8, show_default=True,
              help="Questions in flight at once.")
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=30.0, show_default=True,
              help="Seconds per question; a slower question counts as a miss.")
@click.option("--baseline", type=click.Path(dir_okay=False), help="A baseline (--save-baseline) to compare with.")
@click.option("--max-drop", "max_drops", multiple=True, metavar="METRIC=TOL",
              help="Fail when METRIC's mean drops by more than TOL and p < alpha (TOL alone: every metric; "
              "none: every metric at 0).")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="Significance level of the paired randomization test.")
@click.option("--permutations", type=click.IntRange(1), default=10000, show_default=True,
              help="Sign flips of the randomization test.")
@click.option("--allow-golden-change", is_flag=True,
              help="Compare with a baseline made on another golden set (on the shared questions).")
@click.option("--save-baseline", type=click.Path(dir_okay=False), help="Write this run as a baseline.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write report.json here and per-question records to <stem>.questions.jsonl.")
@click.option("--lenient", is_flag=True, help="Skip invalid golden lines with a warning instead of stopping.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap and the test.")
@click.option("--judge-run", "judge_runs", multiple=True, type=int, metavar="RUN_ID",
              help="Also judge the answers (faithfulness / answer relevance) with the judge, rubric and model of "
              "this calibration run in --db (labeler judge list); repeatable. A relevance run over all traffic "
              "(judge run --on all) is cited instead: the report's all_traffic holds its all-traffic estimate.")
@click.option("--holdout", is_flag=True, help="Evaluate the holdout questions only (labeler split); the look "
              "is counted in --db.")
@json_option
@click.pass_context
def eval_cmd(ctx: click.Context, golden: str, pipeline: str | None, endpoint: str | None, maps: tuple[str, ...],
             headers: tuple[str, ...], retriever: str | None, k: int | None, metric_specs: tuple[str, ...],
             threshold: int | None, concurrency: int, timeout: float, baseline: str | None,
             max_drops: tuple[str, ...], alpha: float, permutations: int, allow_golden_change: bool,
             save_baseline: str | None, output: str | None, lenient: bool, seed: int, judge_runs: tuple[int, ...],
             holdout: bool, as_json: bool) -> None:
    """Run a RAG pipeline on the golden set; with --baseline, fail on a real regression.

    Without --pipeline or --endpoint, evaluates the retrieval logged in --db by --retriever (default:
    the only retriever, else production) to seed a first baseline. Prints a markdown summary (also appended to $GITHUB_STEP_SUMMARY when set).
    Exit 0: no regression; 3: a metric dropped by more than its --max-drop with p < --alpha (the
    questions that got worse are listed); 1: a user error.

    Example:

    \b
        labeler eval --golden golden.jsonl --pipeline mypkg.rag:answer -k 5 \\
            --baseline baseline.json --max-drop recall@5=0.02 --max-drop mrr=0.02 -o report.json
    """
    from ..harness import append_step_summary, evaluate, parse_headers
    from ..ingest import parse_mapping

    update, close = _progress_bar("questions")
    try:
        result = evaluate(
            golden, pipeline=pipeline, endpoint=endpoint, mapping=parse_mapping(maps),
            headers=parse_headers(headers),
            db=ctx.obj["db_path"] if judge_runs or holdout or not (pipeline or endpoint) else None,
            retriever=retriever, k=k, metrics=metric_specs, threshold=threshold, strict=not lenient,
            concurrency=concurrency, timeout=timeout, baseline=baseline, max_drop=max_drops, alpha=alpha,
            allow_golden_change=allow_golden_change, n_permutations=permutations, seed=seed, output=output,
            save_baseline=save_baseline, progress=update if sys.stderr.isatty() else None,
            judge_runs=judge_runs, llm_config=_eval_llm_config() if judge_runs else None, holdout=holdout)
    finally:
        close()
    if as_json:
        _print_json(result.report)
    else:
        click.echo(result.markdown, nl=False)
    append_step_summary(result.markdown, os.environ.get("GITHUB_STEP_SUMMARY"))
    ctx.exit(result.exit_code)


# --- metrics, export and import (labeler.report, labeler.export) -------------------------------

ORIGIN_CHOICE = click.Choice(["log", "synthetic", "import"])
EXPORT_FORMATS = ["jsonl", "trec", "beir", "ragas", "csv"]


def _parse_ks(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(k) for k in value.split(",") if k.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: give whole numbers separated by commas, e.g. 1,3,5,10") from None
    if not ks or min(ks) < 1:
        raise click.BadParameter(f"{value!r}: give positive cutoffs, e.g. 1,3,5,10")
    return ks


@cli.command("metrics", context_settings=CONTEXT_SETTINGS)
@click.option("--k", "ks", default="1,3,5,10", show_default=True, callback=_parse_ks, metavar="K,K,...",
              help="Cutoffs for the default metrics and for --metric names given without @k.")
@click.option("--metric", "metric_specs", multiple=True, metavar="SPEC",
              help="A metric spec (recall@5, P@10, mrr, ndcg...); repeatable. Default: recall, ndcg, mrr.")
@click.option("--retriever", help="Whose logged ranking to score (default: the only retriever, else production).")
@click.option("--compare", metavar="A,B", help="Compare two retrievers on the queries both ran: means, the paired "
              "difference with a bootstrap CI, a sign-flip p-value, judged@k.")
@click.option("--origin", type=ORIGIN_CHOICE, help="Only queries of this origin.")
@click.option("--annotator", help="Only this annotator's submitted grades.")
@click.option("--since", metavar="TIME", help="Only labels submitted at or after TIME (ISO 8601).")
@click.option("--until", metavar="TIME", help="Only labels submitted before TIME (ISO 8601).")
@click.option("--per-query", "per_query", type=click.Path(dir_okay=False),
              help='Write every query\'s values as JSONL {"query_id", "metric", "value"}.')
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap CIs.")
@click.option("--all-traffic", "all_traffic", is_flag=True,
              help="Estimate over all traffic from a judge run plus the human labels (prediction-powered).")
@click.option("--judge-run", "judge_run", type=int, metavar="RUN",
              help="With --all-traffic: a relevance run over all traffic (labeler judge run --on all).")
@click.option("--design", type=click.Choice(["uniform", "active", "stratified"]),
              help="With --all-traffic: which labels (default: active when the active draw has labels, else "
                   "stratified when the stratified queue has, else uniform).")
@click.option("--random-only", "random_only", is_flag=True,
              help="With --all-traffic: use only labels drawn at random, leaving out the others.")
@json_option
@click.pass_context
def metrics_cmd(ctx: click.Context, ks: tuple[int, ...], metric_specs: tuple[str, ...], retriever: str | None,
                compare: str | None, origin: str | None, annotator: str | None, since: str | None,
                until: str | None, per_query: str | None, seed: int, all_traffic: bool, judge_run: int | None,
                design: str | None, random_only: bool, as_json: bool) -> None:
    """Retrieval metrics of the labeled queries, identical to trec_eval, with 95% bootstrap CIs.

    Scores the logged ranking of --retriever against the consolidated human labels of submitted
    queries; relevant = grade >= the project's threshold. Queries without a relevant chunk are
    left out of the means and counted. judged@k (the share of the top k with a label) under 0.9
    prints a warning: the metrics then count unjudged chunks as irrelevant.

    Example:

        labeler metrics --k 5,10 --metric recall --metric mrr --origin log --json

    \b
        labeler metrics --compare production,bm25 --k 10 --json

    --all-traffic estimates every metric over all logged traffic: a judge run over all of it
    (`labeler judge run --on all`), corrected by the human labels of a random or active sample
    (PPI++ / active inference), with 95% CIs, beside the human-only and the judge-only means.

    \b
        labeler metrics --all-traffic --judge-run 3 --json
    """
    from ..report import retrieval_report

    if all_traffic:
        from .estimate import print_all_traffic

        if compare is not None or per_query or origin or annotator or since or until:
            raise click.UsageError("--all-traffic takes --metric, --retriever, --judge-run, --design, --random-only")
        print_all_traffic(_open(ctx), judge_run, list(metric_specs) or None, retriever=retriever, design=design,
                          random_only=random_only, as_json=as_json)
        return
    if judge_run is not None or design is not None or random_only:
        raise click.UsageError("--judge-run, --design and --random-only go with --all-traffic")

    if compare is not None:
        if retriever is not None or per_query:
            raise click.UsageError("--compare names both retrievers; it takes neither --retriever nor --per-query")
        _compare(ctx, compare, list(metric_specs) or None, ks=ks, origin=origin, annotator=annotator, since=since,
                 until=until, seed=seed, as_json=as_json)
        return
    report = retrieval_report(_open(ctx), list(metric_specs) or None, ks=ks, retriever=retriever, origin=origin,
                              annotator=annotator, since=since, until=until, seed=seed)
    if per_query:
        report.write_per_query(per_query)
    if as_json:
        _print_json(report.to_dict())
        return
    click.echo(f"{report.retriever}: {report.n_queries} labeled queries, threshold {report.threshold}; "
               f"{report.n_without_relevant} without a relevant chunk (left out of the means)"
               + (f"; {report.n_not_run} more it never ran (left out)" if report.n_not_run else ""))
    click.echo(f"{'metric':<14}{'mean':>8}  {'95% CI':<18}{'n':>7}")
    for spec, v in report.to_dict()["metrics"].items():
        if v["mean"] is None:
            click.echo(f"{spec:<14}{'-':>8}  {'':<18}{v['n']:>7}")
        else:
            ci = f"[{v['ci_low']:.3f}, {v['ci_high']:.3f}]"
            click.echo(f"{spec:<14}{v['mean']:>8.3f}  {ci:<18}{v['n']:>7}")
    for spec, v in report.judged.items():
        if v["mean"] is not None:
            click.echo(f"{spec:<14}{v['mean']:>8.3f}  (share of the top k with a human label)")
    for line in report.judged_warnings():
        click.echo(f"Warning: {line}", err=True)


def _compare(ctx: click.Context, names: str, specs: list[str] | None, *, ks: tuple[int, ...], origin: str | None,
             annotator: str | None, since: str | None, until: str | None, seed: int, as_json: bool) -> None:
    from ..report import compare_retrievers

    pair = [n.strip() for n in names.split(",")]
    if len(pair) != 2 or not all(pair):
        raise click.BadParameter(f"{names!r}: give two retrievers separated by a comma, e.g. production,bm25",
                                 param_hint="'--compare'")
    c = compare_retrievers(_open(ctx), pair[0], pair[1], specs, ks=ks, origin=origin, annotator=annotator,
                           since=since, until=until, seed=seed)
    if as_json:
        _print_json(c.to_dict())
    else:
        click.echo(f"{c.a} vs {c.b}: {c.n_queries} labeled queries both ran, threshold {c.threshold}; "
                   f"{c.n_without_relevant} without a relevant chunk (left out); 95% bootstrap CI of the "
                   f"difference (seed {c.seed}), paired sign-flip p-value")
        click.echo(f"{'metric':<14}{c.a[:10]:>10}{c.b[:10]:>10}{'diff':>9}  {'95% CI':<18}{'p':>7}{'n':>6}")
        for spec, v in c.metrics.items():
            if v["n"] == 0:
                click.echo(f"{spec:<14}{'-':>10}{'-':>10}{'-':>9}  {'':<18}{'-':>7}{0:>6}")
                continue
            ci = f"[{v['ci_low']:+.3f}, {v['ci_high']:+.3f}]"
            click.echo(f"{spec:<14}{v['a']:>10.3f}{v['b']:>10.3f}{v['diff']:>+9.3f}  {ci:<18}{v['p_value']:>7.4f}"
                       f"{v['n']:>6}")
        for r, judged in c.judged.items():
            click.echo(f"{r}: " + ", ".join(f"{s} {_fmt_value(v)}" for s, v in judged.items()))
        for line in c.warnings:  # --json carries them in "warnings"
            click.echo(f"Warning: {line}", err=True)


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
@json_option
@click.pass_context
def export_cmd(ctx: click.Context, fmt: str, path: str, origin: str | None, min_annotators: int,
               include_unreviewed_synthetic: bool, retriever: str | None, judge_run: int | None,
               as_json: bool) -> None:
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
    db = _open(ctx)
    if judge_run is not None and to_stdout:
        raise click.UsageError("--judge-run cites the estimate in the manifest file; give -o a path, not -")
    if to_stdout:
        data, result = export_data(db, fmt, target="stdout", **filters)
        out = sys.stdout.buffer
        out.write(data)
        out.flush()
    else:
        result = export_golden(db, path, fmt, judge_run=judge_run, **filters)
    if as_json:
        _print_json(result.to_dict(), err=to_stdout)
        return
    c = result.counts
    where = f"manifest {result.manifest_path}" if result.manifest_path else f"sha256 {result.manifest['sha256']}"
    runs = ""
    if FORMATS[fmt].runs == "each":
        names = [Path(n).name for n in result.files if Path(n).name.startswith("run.")]
        runs = f"; runs: {', '.join(names)}" if names else "; no run (no retriever logged rankings)"
    click.echo(f"{result.path}: {c['queries']} queries, {c['judged_pairs']} judged pairs "
               f"({c['relevant_pairs']} relevant) as {fmt}{runs}; export version {result.version}, {where}",
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
@json_option
@click.pass_context
def import_golden_cmd(ctx: click.Context, file: str, annotator: str, lenient: bool, as_json: bool) -> None:
    """Import a golden set: this tool's golden JSONL or {"question", "relevant_ids", "expected_answer"?}.

    Lines match queries by query_id, else by question (new ones are created); the grades become
    the annotator's submitted labels. Strict by default: one bad line and nothing is written.

    Example:

        labeler import golden golden.jsonl --annotator alice
    """
    from ..export import import_golden

    result = import_golden(_open(ctx, create=True), file, annotator=annotator, lenient=lenient)
    if as_json:
        _print_json(result.to_dict())
        return
    line = (f"{result.path}: {result.records} lines: {result.new} new queries, {result.merged} updated, "
            f"{result.unchanged} unchanged, {result.rejected} rejected; labels of {result.annotator}")
    if result.rejects_path:
        line += f"\nrejected lines and reasons: {result.rejects_path}"
    click.echo(line)
    for p in result.problems[:20]:
        click.echo(f"  {p}", err=True)
    for w in result.warnings:
        click.echo(f"Warning: {w}", err=True)


# --- judge: LLM judges calibrated against human labels (labeler.judge, labeler.agreement) -------

@cli.group("judge", cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def judge_group() -> None:
    """LLM judges calibrated against the human labels: run, agreement, compare, list.

    Example:

        labeler judge run --judge relevance.v1 --on labeled --limit 200
    """


def _fmt_value(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def _stat_text(name: str, stat: dict[str, Any], ceiling: dict[str, Any] | None = None) -> str:
    if stat["value"] is None:
        line = f"{name:<28} undefined: {stat.get('reason', '')}"
    else:
        ci = f"[{_fmt_value(stat['ci_low'])}, {_fmt_value(stat['ci_high'])}]" if stat["ci_low"] is not None else ""
        line = f"{name:<28} {_fmt_value(stat['value']):>7} {ci:<17} n={stat['n']}"
    if ceiling is not None and ceiling.get("value") is not None:
        line += f"   human-human {_fmt_value(ceiling['value'])}"
    return line


@judge_group.command("run", context_settings=CONTEXT_SETTINGS)
@click.option("--judge", "judge_name", default="relevance.v1", show_default=True,
              help="A registered judge: relevance.v1, faithfulness.v1, answer-relevance.v1.")
@click.option("--on", "on_set", type=click.Choice(["labeled", "unlabeled", "all"]), default="labeled", show_default=True,
              help="labeled = calibrate on human-labeled items; unlabeled = pre-label (needs a passing gate); "
                   "all = every logged query, for `labeler metrics --all-traffic` (no gate needed).")
@click.option("--limit", type=click.IntRange(1), help="A seeded random sample of this many items.")
@click.option("--model", help="The model (default: LABELER_MODEL, else gpt-4o-mini).")
@click.option("--rubric", help="A rubric version such as relevance.v1/r2 (default: the latest).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the --limit sample.")
@click.option("--resume", "resume_id", type=int, metavar="RUN_ID", help="Finish a cancelled or failed run instead.")
@click.option("--dry-run", is_flag=True, help="Only estimate tokens and cost; send nothing.")
@click.option("--batch", "as_batch", is_flag=True,
              help="Send through the Batch API (half price, results within 24 h); returns at once.")
@click.option("--wait", "wait", is_flag=True, help="With --batch: poll until the batches finish, then collect.")
@json_option
@click.pass_context
def judge_run_cmd(ctx: click.Context, judge_name: str, on_set: str, limit: int | None, model: str | None,
                  rubric: str | None, seed: int, resume_id: int | None, dry_run: bool, as_batch: bool, wait: bool,
                  as_json: bool) -> None:
    """Run a judge over the human-labeled items (to calibrate) or the unlabeled ones (to pre-label).

    Pre-labeling needs a calibration run of the same judge, rubric, model and temperature that
    passes the gate; its grades become suggestions that annotators accept or not. Reads
    OPENAI_API_KEY, OPENAI_BASE_URL and LABELER_MODEL (environment or .streamlit/secrets.toml).
    Answers are cached: a rerun pays only for what is missing.

    Example:

        labeler judge run --judge relevance.v1 --on labeled --limit 200 --model gpt-4o-mini

    `--on all` judges every logged query, labeled or not, whatever the gate says: the all-traffic
    estimates (`labeler metrics --all-traffic`) correct the judge's bias with the human labels.
    """
    from ..judge import resume_run, run_judge
    from ..llm import LLMConfig

    db = _open(ctx)
    config = LLMConfig.from_env(_secrets_toml(), model=model)
    update, close = _progress_bar(judge_name)
    progress = (lambda p: update(p.completed, p.total)) if sys.stderr.isatty() else None
    try:
        if resume_id is not None:
            run = resume_run(db, config, resume_id, progress=progress)
        else:
            run = run_judge(db, config, judge_name, on=on_set, limit=limit, rubric=rubric, seed=seed,
                            progress=None if as_batch else progress, dry_run=dry_run, batch=as_batch)
    finally:
        close()
    if run.status == "submitted" and wait:
        from ..llm import batch
        from .llm import collect_summary, wait_for

        wait_for(db, config, "judge", run.id, 30)
        click.echo(collect_summary(batch.collect(db, config, owner="judge", run_id=run.id)), err=as_json)
        from ..judge import get_run

        run = get_run(db, run.id)
    if run.status == "submitted":
        if as_json:
            _print_json(run.to_dict())
        else:
            click.echo(f"run {run.id}: {run.judge} on {run.items} {run.on_set} items submitted as "
                       f"{len(run.batches)} batch(es): {', '.join(run.batches)}; "
                       f"collect with: labeler llm collect judge:{run.id}")
        return
    if as_json:
        _print_json(run.to_dict())
        return
    if run.estimate is not None:
        e = run.estimate
        cost = f"${e.cost:.4f} (at most ${e.cost_max:.4f}); as a batch ${e.cost_batch:.4f}" \
            if e.cost is not None else "unknown"
        click.echo(f"dry run of {run.judge} ({run.rubric}) on {run.items} {run.on_set} items with {e.model}: "
                   f"{e.to_request} requests to send, {e.cached} cached; ~{e.input_tokens} input and "
                   f"~{e.output_tokens} output tokens; cost {cost}")
        for note in e.notes:
            click.echo(f"  {note}", err=True)
        return
    cost = f"${run.cost:.4f}" if run.cost is not None else "unknown"
    click.echo(f"run {run.id}: {run.judge} ({run.rubric}, {run.model}) on {run.items} {run.on_set} items: "
               f"{run.done} done, {run.cached} cached, {run.failed} failed, {run.cancelled} not run; cost {cost}; "
               f"{run.status}")
    for key, reason in run.failures[:20]:
        click.echo(f"  {key}: {reason}", err=True)
    if run.on_set == "labeled":
        click.echo(f"next: labeler judge agreement {run.id}")
    elif run.on_set == "all":
        click.echo(f"next: labeler metrics --all-traffic --judge-run {run.id}")


@judge_group.command("agreement", context_settings=CONTEXT_SETTINGS)
@click.argument("run_id", type=int)
@click.option("--resamples", type=click.IntRange(0), default=1000, show_default=True, help="Bootstrap resamples.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap.")
@click.option("--k", type=click.IntRange(1), default=10, show_default=True,
              help="Cutoff of recall@k and nDCG@k when several retrievers are logged.")
@json_option
@click.pass_context
def judge_agreement_cmd(ctx: click.Context, run_id: int, resamples: int, seed: int, k: int, as_json: bool) -> None:
    """Agreement of a judge run with the human labels (95% bootstrap CIs), the human-human
    ceiling, retrievers by judge vs by humans, and the calibration gate.

    With --json: one key per statistic, each {"value", "ci_low", "ci_high", "n"} (value null and a
    "reason" when undefined), then human_human, retrievers, run, gate.

    Example:

        labeler judge agreement 3 --json
    """
    from ..agreement import display_name, run_agreement
    from ..judge import gate

    db = _open(ctx)
    result = run_agreement(db, run_id, n_resamples=resamples, seed=seed, k=k)
    verdict = gate(db, run_id, agreement=result)
    out = result.to_dict()
    out["gate"] = verdict.to_dict()
    if as_json:
        _print_json(out)
        return
    run = result.run
    click.echo(f"run {run.id}: {run.judge} ({run.rubric}, {run.model}) vs human labels; 95% CIs from "
               f"{resamples} resamples")
    for name, stat in result.statistics.items():
        if name != "confusion_matrix":
            ceiling = result.human_human.get(name)
            click.echo(_stat_text(display_name(name), stat.to_dict(), ceiling.to_dict() if ceiling else None))
    matrix = result.statistics["confusion_matrix"].value
    click.echo("confusion matrix (rows human, columns judge): " + " | ".join(" ".join(map(str, r)) for r in matrix))
    if out["retrievers"] and out["retrievers"]["metrics"]:
        for name, tau in out["retrievers"]["kendall_tau"].items():
            click.echo(_stat_text(f"{display_name('kendall_tau')} {name}", tau))
    if any(result.excluded.values()):
        click.echo("left out: " + ", ".join(f"{v} {k}" for k, v in result.excluded.items() if v))
    click.echo(f"gate: {'passed' if verdict.passed else 'failed'}: " + "; ".join(verdict.reasons))


@judge_group.command("compare", context_settings=CONTEXT_SETTINGS)
@click.argument("run_a", type=int)
@click.argument("run_b", type=int)
@click.option("--resamples", type=click.IntRange(0), default=1000, show_default=True, help="Bootstrap resamples.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap.")
@json_option
@click.pass_context
def judge_compare_cmd(ctx: click.Context, run_a: int, run_b: int, resamples: int, seed: int, as_json: bool) -> None:
    """Compare two runs of the same kind (rubric v1 vs v2, model A vs B): each against humans,
    the paired difference B - A with a CI on the items both judged, and A vs B themselves.

    Example:

        labeler judge compare 3 4 --json
    """
    from ..agreement import compare_runs, display_name

    result = compare_runs(_open(ctx), run_a, run_b, n_resamples=resamples, seed=seed)
    if as_json:
        _print_json(result.to_dict())
        return
    a, b = result.a.run, result.b.run
    click.echo(f"run {a.id}: {a.judge} ({a.rubric}, {a.model})  vs  run {b.id}: {b.judge} ({b.rubric}, {b.model}); "
               f"{result.common} common human-labeled items")
    for name, stat in result.difference.items():
        sa, sb = result.a.statistics[name], result.b.statistics[name]
        d = stat.to_dict()
        ci = f"[{_fmt_value(d['ci_low'])}, {_fmt_value(d['ci_high'])}]" if d["ci_low"] is not None else ""
        click.echo(f"{display_name(name):<28} {_fmt_value(sa.value):>7} {_fmt_value(sb.value):>7}   "
                   f"B-A {_fmt_value(d['value']):>7} {ci}")
    click.echo(f"A vs B exact agreement {_fmt_value(result.between['exact_agreement'].value)}, "
               f"Cohen's kappa {_fmt_value(result.between['cohen_kappa'].value)} (n={result.between['cohen_kappa'].n})")


@judge_group.command("list", context_settings=CONTEXT_SETTINGS)
@json_option
@click.pass_context
def judge_list_cmd(ctx: click.Context, as_json: bool) -> None:
    """Every judge run, newest first: judge, rubric, model, items, status, cost.

    Example:

        labeler judge list --json
    """
    from ..judge import list_runs

    runs = list_runs(_open(ctx))
    if as_json:
        _print_json([r.to_dict() for r in runs])
        return
    if not runs:
        click.echo("no judge runs yet: labeler judge run --judge relevance.v1 --on labeled")
    for r in runs:
        cost = f"${r.cost:.4f}" if r.cost is not None else "-"
        click.echo(f"{r.id:>4}  {r.created_at[:19]}  {r.judge:<20} {r.rubric:<22} {r.model:<16} {r.on_set:<9} "
                   f"{r.items:>6} items  {r.failed:>4} failed  {r.status:<9} {cost}")


from . import ingests as _ingests  # noqa: E402,F401 - registers `ingest list/undo` and `queries remove`
from . import items as _items  # noqa: E402,F401 - registers `labeler items`
from . import llm as _llm  # noqa: E402,F401 - registers `labeler llm`
from . import search as _search  # noqa: E402,F401 - registers `labeler search`
from . import topics as _topics  # noqa: E402,F401 - registers topics, coverage, drift and split
from . import users as _users  # noqa: E402,F401 - registers `labeler users` and `labeler audit`
