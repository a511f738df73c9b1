"""Ingest production query logs and corpus files into the store, validated, deduplicated, idempotent.

A log record is mapped to the canonical shape ``{"query_id"?, "question", "retrieved": [{"id",
"text"?, "score"?, "title"?}], "answer"?, "timestamp"?, "retriever"?}``: the records tools write
(Phoenix/OpenInference and OpenTelemetry spans, OTLP/JSON, LangSmith runs) are recognised one by
one in ``formats`` (spans that are not retrievals are skipped and counted); plain records through
field aliases and ``--map`` paths (``mapping``); every unmapped field is kept in ``meta``. Records are written in short transactions into rows that stay invisible until
the ingest's final commit (``staging``), so other writers never wait long and readers see a file
all at once or not at all: in strict mode (the default) one bad record means nothing from the file
is written (what was staged is deleted); in lenient mode the valid records are written and the
rejects go to ``FILE.rejects.jsonl`` with their reasons.

Modules: ``readers`` (JSONL/JSON/CSV/Parquet files as records), ``formats`` (one module per tool),
``mapping`` (aliases, ``--map``), ``validate`` (field checks, chunk shapes, content ids, normalized
question), ``times`` (timestamps to UTC), ``batches`` (reading a file as batches, optionally in a forked parser, redacted with
``labeler.privacy``), ``sampling`` (``--sample``, records seen: ``population``), ``writer``
(classify and write log records), ``staging`` (claim, short transactions, commit, clean-up),
``logs`` and ``corpus`` (the two entry points; ``logs.LogIngestOptions`` groups a log ingest's options), ``common`` (problems, results, strict/lenient).

Deduplication: a record with a ``query_id`` seen before with identical content changes nothing; with
different content it is an error naming both places. Without an id, records with the same
normalized question and the same retrieved list merge into one query whose ``occurrences`` counts
the distinct log lines (a line is identified by its content plus its ordinal among identical lines
of its file), so re-ingesting a file changes nothing.
"""


from .common import MAX_ERRORS_SHOWN, FieldError, IngestResult, Problem, ProblemList, check_problems
from .corpus import CORPUS_ALIASES, ingest_corpus
from .formats import register_tool
from .formats import tool_names as ingest_tools
from .logs import LogIngestOptions, ingest_logs
from .mapping import CHUNK_ALIASES, LOG_ALIASES, LOG_FIELDS, canonical, parse_mapping
from .sampling import population
from .validate import DEFAULT_RETRIEVER, normalize_question, validate_log

__all__ = [
    "CHUNK_ALIASES", "CORPUS_ALIASES", "DEFAULT_RETRIEVER", "LOG_ALIASES", "LOG_FIELDS", "MAX_ERRORS_SHOWN",
    "FieldError", "IngestResult", "LogIngestOptions", "Problem", "ProblemList", "canonical", "check_problems", "ingest_corpus",
    "ingest_logs", "ingest_tools", "normalize_question", "parse_mapping", "population", "register_tool", "validate_log",
]
