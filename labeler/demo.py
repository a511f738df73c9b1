"""Build the demo database from the data set bundled in the package (``labeler/demo_data/``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from . import db as store
from .errors import LabelerError
from .export.importer import import_golden
from .ingest.corpus import ingest_corpus
from .ingest.logs import ingest_logs

DEMO_FILES = ("corpus.jsonl", "logs.jsonl", "golden.jsonl")


@contextlib.contextmanager
def demo_files() -> Iterator[dict[str, Path]]:
    """The demo files as paths on disk, by name, wherever labeler is installed (a checkout, an
    editable install or a wheel; a zipped install gets temporary copies for the duration)."""
    folder = resources.files("labeler.demo_data")
    with contextlib.ExitStack() as stack:
        paths = {name: stack.enter_context(resources.as_file(folder / name)) for name in DEMO_FILES}
        missing = [name for name, path in paths.items() if not path.is_file()]
        if missing:
            raise LabelerError(f"the demo data file {missing[0]} is missing from the installed labeler package "
                               f"({folder}); reinstall it: pip install --force-reinstall rag-labeler")
        yield paths


def build_demo(db_path: str | Path) -> str:
    """Create the demo database at ``db_path`` unless it already holds queries; return a summary."""
    db = store.connect(db_path)
    if db.execute("SELECT count(*) FROM queries").fetchone()[0]:
        return f"{db_path}: demo database already built"
    with demo_files() as data:
        # written by this project (a made-up company's support addresses, no one's data): kept as
        # written, so that the demo's golden answers quote what its chunks say
        corpus = ingest_corpus(db, data["corpus.jsonl"], redact=False)
        logs = ingest_logs(db, data["logs.jsonl"], redact=False)
        # labels the project wrote for 50 of the questions, so the Metrics page has numbers at once
        golden = import_golden(db, data["golden.jsonl"], annotator="demo")
    return (f"{db_path}: demo database built: {corpus.new} chunks, {logs.new} queries "
            f"({logs.records} log lines), {golden.records} labeled by annotator demo")
