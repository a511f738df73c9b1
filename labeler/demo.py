"""Build the demo database from the bundled data set in ``data/``."""

from __future__ import annotations

from pathlib import Path

from . import db as store
from .errors import LabelerError
from .export import import_golden
from .ingest import ingest_corpus, ingest_logs


def data_dir() -> Path:
    """The bundled ``data/`` folder (next to the package in a checkout, or in the current folder)."""
    for candidate in (Path(__file__).resolve().parent.parent / "data", Path.cwd() / "data"):
        if (candidate / "corpus.jsonl").exists():
            return candidate
    raise LabelerError("cannot find the demo data folder data/ (run from a checkout of labeler)")


def build_demo(db_path: str | Path) -> str:
    """Create the demo database at ``db_path`` unless it already holds queries; return a summary."""
    db = store.connect(db_path)
    if db.execute("SELECT count(*) FROM queries").fetchone()[0]:
        return f"{db_path}: demo database already built"
    data = data_dir()
    corpus = ingest_corpus(db, data / "corpus.jsonl")
    logs = ingest_logs(db, data / "logs.jsonl")
    # labels the project wrote for 50 of the questions, so the Metrics page has numbers at once
    golden = import_golden(db, data / "golden.jsonl", annotator="demo")
    return (f"{db_path}: demo database built: {corpus.new} chunks, {logs.new} queries "
            f"({logs.records} log lines), {golden.records} labeled by annotator demo")
