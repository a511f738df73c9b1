"""Golden-set export (JSONL, TREC, BEIR, Ragas, CSV) with a manifest, and import of golden files.

Export reads the consolidated human labels (:func:`labeler.labels.golden_labels`) of the queries
that count (synthetic questions only once accepted in review, unless asked), writes one of the
registered formats byte-for-byte deterministically (sorted by query id, then chunk id; fixed JSON
layout), writes ``PATH.manifest.json`` (format version, sha256 of every file, created_at, filters,
threshold, counts and the retrieval metrics at export time) and records the export in the
``exports`` table. A format is a plain function registered in ``FORMATS`` that returns
{relative file name: bytes}; built-ins register the same way an extension would.

Import reads this tool's golden JSONL or the minimal ``{"question", "relevant_ids", "expected_answer"?}``
form (every listed id gets the top grade), matches each line to a query (by ``query_id``, else by
the normalized question, else creates it), and stores the grades and answers as one annotator's
submitted labels, with audit events. Bad lines follow the ingest rules: strict writes nothing and
lists ``FILE:LINE: field: message``; lenient writes the valid lines and the rejects to
``FILE.rejects.jsonl``. Export, import into a new database, export again: the same bytes.

Modules: ``golden`` (what is exported: :class:`GoldenSet`), ``formats`` (the registry and the
built-in writers), ``write`` (files, manifest, the ``exports`` row, downloads), ``importer``.
"""

from .formats import CSV_COLUMNS, FORMATS, ExportFormat, register_format, run_file_name, spreadsheet_safe
from .golden import ExportError, GoldenSet, golden_set
from .importer import ImportResult, import_golden
from .write import (
    MANIFEST_VERSION,
    ExportResult,
    archive_name,
    export_archive,
    export_counts,
    export_data,
    export_golden,
)

__all__ = [
    "CSV_COLUMNS",
    "FORMATS",
    "MANIFEST_VERSION",
    "ExportError",
    "ExportFormat",
    "ExportResult",
    "GoldenSet",
    "ImportResult",
    "archive_name",
    "export_archive",
    "export_counts",
    "export_data",
    "export_golden",
    "golden_set",
    "import_golden",
    "register_format",
    "run_file_name",
    "spreadsheet_safe",
]
