"""labeler: turn RAG production logs into a golden dataset, with honest numbers."""

from .db import connect, get_settings, set_setting, stats
from .errors import DatabaseError, IngestError, LabelerError
from .ingest import IngestResult, Problem, ingest_corpus, ingest_logs, ingest_tools, parse_mapping

__all__ = [
    "DatabaseError",
    "IngestError",
    "IngestResult",
    "LabelerError",
    "Problem",
    "connect",
    "get_settings",
    "ingest_corpus",
    "ingest_logs",
    "ingest_tools",
    "parse_mapping",
    "set_setting",
    "stats",
]
