"""The ``labeler`` command line: each command parses options, calls one library function, prints.

Exit codes: 0 success, 1 a user error (one line on stderr, no traceback), 2 a usage error.

The click group is ``group.cli``; each module below adds its commands to it (``labeler --help``
lists them by name, in click's sorted order, whatever the order here). The commands are imported
back so that ``labeler.cli.NAME`` keeps naming them: ``labeler.cli.synth`` and ``labeler.cli.app``
are the click commands, as before, not the modules of the same name (``sys.modules["labeler.cli.synth"]``
or ``from labeler.cli.synth import ...`` reach those).
"""

from __future__ import annotations

from . import collect as _collect  # noqa: F401 - registers `labeler collect`
from . import ingests as _ingests  # noqa: F401 - registers `labeler ingest` and `queries remove`
from . import items as _items  # noqa: F401 - registers `labeler items`
from . import llm as _llm  # noqa: F401 - registers `labeler llm`
from . import route as _route  # noqa: F401 - registers `labeler route`
from . import search as _search  # noqa: F401 - registers `labeler search`
from . import sources as _sources  # noqa: F401 - registers `labeler source` and `labeler sync`
from . import topics as _topics  # noqa: F401 - registers topics, coverage, drift and split
from . import users as _users  # noqa: F401 - registers `labeler users` and `labeler audit`
from .app import app, demo  # noqa: F401 - `labeler app` and `demo`
from .common import (  # noqa: F401 - the command modules' shared public helpers
    CONTEXT_SETTINGS,
    ORIGIN_CHOICE,
    IngestError,
    LabelerError,
    LabelerGroup,
)
from .export import EXPORT_FORMATS, export_cmd, import_golden_cmd, import_group  # noqa: F401
from .group import cli  # noqa: F401 - the `labeler` group (the console script's entry point)
from .ingests import (  # noqa: F401
    FILE_FORMATS,
    LOG_FORMATS,
    ingest,
    ingest_corpus_cmd,
    ingest_logs_cmd,
    ingest_tools,
    redact_option,
)
from .judge import (  # noqa: F401
    judge_agreement_cmd,
    judge_compare_cmd,
    judge_group,
    judge_list_cmd,
    judge_run_cmd,
)
from .metrics import eval_cmd, metrics_cmd  # noqa: F401
from .output import Output, output_options, render  # noqa: F401 - the one output of reporting commands
from .synth import synth, synth_generate_cmd, synth_report_cmd  # noqa: F401
from .team import annotators, queue, stats  # noqa: F401 - `labeler stats`, `annotators`, `queue`
