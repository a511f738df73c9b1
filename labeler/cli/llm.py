"""``labeler llm``: the Batch API runs that ``judge run --batch`` and ``synth generate --batch`` submit
(``batches``, ``collect``, ``cancel``; ``collect --file``: a local runner's results of ``judge run
--batch-file``), and the ``--wait`` progress shared by those commands."""

from __future__ import annotations

import sys
from typing import Any

import click

from .common import CONTEXT_SETTINGS, LabelerGroup, open_db, progress_bar, secrets_toml
from .group import cli
from .output import Output, output_options

BATCH_COLUMNS = ["batch", "run", "state", "requests", "completed", "failed", "cost", "age", "collected_at"]
COLLECT_COLUMNS = ["batches", "ok", "failed", "retried", "rebatched", "run_direct", "finished_runs", "waiting",
                   "busy"]


def _config() -> Any:
    from ..llm import LLMConfig

    return LLMConfig.from_env(secrets_toml())


def wait_for(db: Any, config: Any, owner: str, run_id: int, poll_s: float) -> None:
    """Poll a run's batches until all are finished, with a progress bar on request counts."""
    from ..llm import batch

    update, close = progress_bar(f"{owner} run {run_id} (batch)")
    try:
        batch.wait(db, config, owner=owner, run_id=run_id, poll_s=poll_s,
                   progress=update if sys.stderr.isatty() else None)
    finally:
        close()


def collect_summary(result: Any) -> str:
    line = (f"collected {len(result.batches)} batch(es): {result.ok} answers stored, {result.failed} failed, "
            f"{result.retried} retried directly")
    if result.rebatched:
        line += f", {result.rebatched} sent again in a new batch"
    if result.run_direct:
        line += f", {result.run_direct} run directly"
    finished = [(kind, run) for kind, run in result.finished_runs if kind != "judge.align"]
    if finished:
        line += "; finished " + ", ".join(f"{kind} run {run}" for kind, run in finished)
    for _, run in [(k, r) for k, r in result.finished_runs if k == "judge.align"]:
        # an alignment goes in rounds: its batches are answered, the alignment is not done yet
        line += (f"; the answers of judge.align run {run} are stored: run the same `labeler judge align` "
                 "command again to go on (what is stored is not paid again)")
    if result.waiting:
        line += f"; {len(result.waiting)} batch(es) still running"
    if result.busy:
        line += f"; {len(result.busy)} batch(es) being collected by another process ({', '.join(result.busy)})"
    return line


@cli.group("llm", cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def llm_group() -> None:
    """Batch API runs: list the batches, collect finished ones, cancel one.

    `labeler judge run --batch` and `labeler synth generate --batch` submit them;
    `labeler judge run --batch-file` writes them for a local runner (vllm run-batch), and
    `labeler llm collect --file` stores its results.

    Example:

        labeler llm collect --all
    """


@llm_group.command("batches", context_settings=CONTEXT_SETTINGS)
@click.option("--offline", is_flag=True, help="Show what the database holds; do not ask the provider.")
@output_options(nl=True)
@click.pass_context
def llm_batches_cmd(ctx: click.Context, offline: bool, output_format: str) -> Output:
    """List the batches (state, request counts, cost, age), asking the provider for the state of
    unfinished ones first.

    Example:

        labeler llm batches --json
    """
    from ..llm import batch

    db = open_db(ctx)
    batches = batch.list_batches(db) if offline else batch.refresh(db, _config())
    ages = batch.ages(batches)
    rows = [{**b.to_dict(), "batch": b.batch_id or b.key, "run": f"{b.owner}:{b.run_id}", "age": ages[b.key]}
            for b in batches]
    return Output([b.to_dict() for b in batches], BATCH_COLUMNS, rows,
                  empty="no batches yet: labeler judge run --batch, or labeler synth generate --batch")


@llm_group.command("collect", context_settings=CONTEXT_SETTINGS)
@click.argument("run", required=False)
@click.option("--all", "collect_all", is_flag=True, help="Collect every finished batch.")
@click.option("--direct-rest", is_flag=True,
              help="Run the requests an expired batch never ran directly instead of in a new batch.")
@click.option("--wait", "wait_s", type=click.FloatRange(min=0.1), metavar="SECONDS",
              help="First poll every SECONDS until the run's batches are finished.")
@click.option("--file", "results_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Store a local runner's output file (vllm run-batch -o FILE) of requests written with "
              "judge run --batch-file, instead of asking the Batch API.")
@click.option("--price-per-1k", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="USD",
              help="With --file: the ledger's price per 1,000 tokens (input and output) of the local runner.")
@output_options()
@click.pass_context
def llm_collect_cmd(ctx: click.Context, run: str | None, collect_all: bool, direct_rest: bool, wait_s: float | None,
                    results_file: str | None, price_per_1k: float, output_format: str) -> Output:
    """Download finished batches, store every answer in the LLM cache and finish their runs.

    RUN is judge:ID, synth:ID or judge.align:ID (a bare number is a judge run; an alignment goes
    on when `labeler judge align` runs again). Collecting twice changes nothing.
    With --file, the lines of a local runner's output file are stored the same way (no API is
    asked; a bad or missing line is recorded as failed, and a later run writes it again).

    Example:

        labeler llm collect judge:12
        labeler llm collect --file results.jsonl --price-per-1k 0.0002
    """
    from ..llm import batch

    if results_file is not None:
        if run is not None or collect_all or direct_rest or wait_s is not None:
            raise click.UsageError("--file collects a results file: give it without RUN, --all, --direct-rest "
                                   "and --wait")
        result = batch.collect_file(open_db(ctx), _config(), results_file, price_per_1k=price_per_1k)
        document = result.to_dict()
        return Output(document, COLLECT_COLUMNS, [document], text=[collect_summary(result)],
                      notes=[f"  {note}" for note in result.notes])
    if (run is None) == (not collect_all):
        raise click.UsageError("give a RUN (judge:12, synth:3), --all or --file")
    owner = run_id = None
    if run is not None:
        kind, _, number = run.rpartition(":")
        if not number.isdigit() or kind not in ("", "judge", "synth", "judge.align"):
            raise click.BadParameter(f"{run!r}: use judge:ID, synth:ID or judge.align:ID", param_hint="RUN")
        owner, run_id = kind or "judge", int(number)
    db = open_db(ctx)
    config = _config()
    if wait_s is not None and owner is not None:
        wait_for(db, config, owner, run_id, wait_s)
    result = batch.collect(db, config, owner=owner, run_id=run_id, direct_rest=direct_rest)
    document = result.to_dict()
    return Output(document, COLLECT_COLUMNS, [document], text=[collect_summary(result)],
                  notes=[f"  {note}" for note in result.notes])


@llm_group.command("cancel", context_settings=CONTEXT_SETTINGS)
@click.argument("batch_id")
@click.pass_context
def llm_cancel_cmd(ctx: click.Context, batch_id: str) -> None:
    """Cancel a batch; what it finished is still collected, the rest is recorded as failed.

    Example:

        labeler llm cancel batch_abc123
    """
    from ..llm import batch

    b = batch.cancel(open_db(ctx), _config(), batch_id)
    click.echo(f"{b.batch_id}: {b.state}")
