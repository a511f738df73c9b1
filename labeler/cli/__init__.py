"""The ``labeler`` command line: each command parses options, calls one library function, prints.

Exit codes: 0 success, 1 a user error (one line on stderr, no traceback), 2 a usage error.
"""

from __future__ import annotations

import click

from .common import (  # noqa: F401 - the command modules' shared helpers, also importable from here
    CONTEXT_SETTINGS,
    ORIGIN_CHOICE,
    IngestError,
    LabelerError,
    LabelerGroup,
    _fmt_value,
    _open,
    _progress_bar,
    _secrets_toml,
)
from .output import Output, output_options, render  # noqa: F401 - the one output of reporting commands


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from ..version import version  # importlib.metadata costs ~40 ms: only when asked

    click.echo(f"labeler, version {version()}")
    ctx.exit()


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


# Each module below adds its commands to ``cli`` (``labeler --help`` lists them by name, in click's
# sorted order, whatever the order here). The commands and helpers that used to be defined in this
# file are imported back, so that ``labeler.cli.NAME`` keeps naming them: ``labeler.cli.synth`` and
# ``labeler.cli.app`` are the click commands, as before, not the modules of the same name
# (``sys.modules["labeler.cli.synth"]`` or ``from labeler.cli.synth import ...`` reach those).
from . import ingests as _ingests  # noqa: E402,F401 - registers `labeler ingest` and `queries remove`
from . import items as _items  # noqa: E402,F401 - registers `labeler items`
from . import llm as _llm  # noqa: E402,F401 - registers `labeler llm`
from . import search as _search  # noqa: E402,F401 - registers `labeler search`
from . import topics as _topics  # noqa: E402,F401 - registers topics, coverage, drift and split
from . import users as _users  # noqa: E402,F401 - registers `labeler users` and `labeler audit`
from .app import _app_options, _streamlit, app, demo  # noqa: E402,F401 - `labeler app` and `demo`
from .export import EXPORT_FORMATS, export_cmd, import_golden_cmd, import_group  # noqa: E402,F401
from .ingests import (  # noqa: E402,F401
    FILE_FORMATS,
    LOG_FORMATS,
    _ingest_summary,
    _run_ingest,
    ingest,
    ingest_corpus_cmd,
    ingest_logs_cmd,
    ingest_tools,
    redact_option,
)
from .judge import (  # noqa: E402,F401
    judge_agreement_cmd,
    judge_compare_cmd,
    judge_group,
    judge_list_cmd,
    judge_run_cmd,
)
from .metrics import _compare, _eval_llm_config, _parse_ks, eval_cmd, metrics_cmd  # noqa: E402,F401
from .synth import synth, synth_generate_cmd, synth_report_cmd  # noqa: E402,F401
from .team import annotators, queue, stats  # noqa: E402,F401 - `labeler stats`, `annotators`, `queue`
