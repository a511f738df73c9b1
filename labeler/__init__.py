"""labeler: turn RAG production logs into a golden dataset, with honest numbers."""

# The store first: it imports sqlite-utils without pandas (``db._import_sqlite_utils``), which saves
# every command about 0.2 s of start-up; a module importing sqlite-utils before it would load pandas.
from . import db  # noqa: F401

# isort: split
from .accounts.settings import set_setting
from .db import connect, get_settings, stats
from .errors import DatabaseError, IngestError, LabelerError
from .ingest import (
    IngestResult,
    LogIngestOptions,
    Problem,
    ingest_corpus,
    ingest_logs,
    ingest_tools,
    parse_mapping,
    population,
)
from .privacy import parse_patterns as parse_redact_patterns
from .privacy import redaction_enabled, set_redaction

__all__ = [
    "DatabaseError",
    "IngestError",
    "IngestResult",
    "LabelerError",
    "LogIngestOptions",
    "Problem",
    "connect",
    "get_settings",
    "ingest_corpus",
    "ingest_logs",
    "ingest_tools",
    "parse_mapping",
    "parse_redact_patterns",
    "population",
    "redaction_enabled",
    "set_redaction",
    "set_setting",
    "stats",
]
