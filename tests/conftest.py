"""Shared fixtures: small and composable.

- ``db``: a migrated in-memory database.
- ``db_path`` / ``file_db``: a database file in tmp_path (for WAL, several connections, processes).
- ``write_log``: write records as a JSONL log file in tmp_path and return its path.
- ``ingest_tiny``: ingest a tiny generated log into a database and return the new query pks.

The app's background warm-up of the Metrics page is off in tests (a thread left running by one
test would read through another test's monkeypatches); the test of the warm-up turns it on.

Passwords are hashed at a low scrypt cost in tests: the suite makes and checks a few hundred
hashes, about 0.4 s each at the real cost. Tests marked ``real_scrypt`` keep the real cost.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from labeler import db as store
from labeler.accounts import manage as account_store
from labeler.ingest import ingest_logs


@pytest.fixture(autouse=True)
def _no_background_warmup(monkeypatch):
    monkeypatch.setenv("LABELER_WARM_METRICS", "0")
    monkeypatch.setenv("LABELER_BACKGROUND_SYNC", "0")


TEST_SCRYPT_COST = {"n": 2 ** 10, "r": 8, "p": 1}


@pytest.fixture(autouse=True)
def _cheap_password_hashes(request, monkeypatch):
    if request.node.get_closest_marker("real_scrypt") is None:
        monkeypatch.setattr(account_store, "SCRYPT_COST", TEST_SCRYPT_COST)


def tiny_records(n: int = 6, chunks: int = 3, *, prefix: str = "q") -> list[dict[str, Any]]:
    """``n`` logged queries ``{prefix}000..``, each with ``chunks`` retrieved chunks of its own."""
    return [
        {
            "query_id": f"{prefix}{i:03d}",
            "question": f"What is item {prefix}{i}?",
            "answer": f"Item {prefix}{i} is a thing.",
            "timestamp": f"2026-01-{1 + i % 28:02d}T00:00:00Z",
            "retrieved": [
                {"id": f"{prefix}{i:03d}-c{j}", "text": f"chunk {j} about {prefix}{i}", "score": 0.9 - j / 10}
                for j in range(chunks)
            ],
        }
        for i in range(n)
    ]


@pytest.fixture
def db():
    database = store.connect(":memory:")
    yield database
    database.close()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "labeler.db"


@pytest.fixture
def file_db(db_path: Path):
    database = store.connect(db_path)
    yield database
    database.close()


def log_writer(folder: Path) -> Callable[..., Path]:
    """``write(records, name=None)``: the records as a JSONL log file in ``folder``; its path."""
    counter = iter(range(1_000_000))

    def write(records: Iterable[dict[str, Any]], name: str | None = None) -> Path:
        path = folder / (name or f"log{next(counter)}.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")
        return path

    return write


def tiny_ingester(write_log: Callable[..., Path]) -> Callable[..., list[int]]:
    """``ingest(db, n=6, chunks=3, prefix="q", records=None)`` -> the pks of those queries."""

    def ingest(database, n: int = 6, chunks: int = 3, *, prefix: str = "q",
               records: list[dict[str, Any]] | None = None) -> list[int]:
        records = records if records is not None else tiny_records(n, chunks, prefix=prefix)
        ingest_logs(database, write_log(records))
        ids = [r["query_id"] for r in records]
        pks = dict(database.execute(
            "SELECT query_id, pk FROM queries WHERE query_id IN (SELECT value FROM json_each(?))",
            [json.dumps(ids)]).fetchall())
        return [pks[i] for i in ids]

    return ingest


@pytest.fixture
def write_log(tmp_path: Path) -> Callable[..., Path]:
    return log_writer(tmp_path)


@pytest.fixture
def ingest_tiny(write_log: Callable[..., Path]) -> Callable[..., list[int]]:
    """``ingest_tiny(db, n=6, chunks=3, prefix="q", records=None)`` -> the pks of those queries."""
    return tiny_ingester(write_log)


def copy_db(src: Path, dest: Path) -> Path:
    """A copy of the database file ``src`` (closed, so its WAL is in the file) at ``dest``: a
    template built once per session, given to each test as its own file."""
    shutil.copyfile(src, dest)
    return dest


# --- the Judge page's database: 60 labeled queries and two judge runs (tests/test_app_*.py) ----

@pytest.fixture
def server():
    """A fake OpenAI-compatible server on 127.0.0.1 (``tests.fake_openai``) for this test."""
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI() as s:
        yield s


@pytest.fixture(scope="session")
def judged_template(tmp_path_factory):
    """Built once per session (two judge runs, 360 requests to a fake server of its own): a file
    database with 60 labeled queries (30 overlapped) and two calibration runs: #1 a perfect judge,
    #2 one that grades one higher (rubric r2). Each test gets a copy (``judged``)."""
    from labeler import judge
    from tests.fake_openai import FakeOpenAI
    from tests.test_judge import build, make_config, perfect

    folder = tmp_path_factory.mktemp("judged")
    path = folder / "judge.db"
    db = store.connect(path)
    pks, truth = build(db, tiny_ingester(log_writer(folder)))
    with FakeOpenAI() as server:
        server.responder = perfect(truth)
        judge.run_judge(db, make_config(server), "relevance.v1")
        judge.save_rubric(db, "relevance.v1", "Be generous.")
        server.responder = perfect(truth, shift=1)
        judge.run_judge(db, make_config(server), "relevance.v1")
        assert server.total == 360
    db.close()
    return path, pks, truth


@pytest.fixture
def judged(judged_template, tmp_path, server, monkeypatch):
    """A copy of the session's judged database for this test; the page's LLM is this test's fake
    server, answering as the template's second judge did (one grade higher)."""
    from tests.test_judge import KEY, perfect

    src, pks, truth = judged_template
    path = copy_db(src, tmp_path / "judge.db")
    server.responder = perfect(truth, shift=1)
    monkeypatch.setenv("LABELER_DB", str(path))
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("LABELER_MODEL", "fake-model")
    return {"path": path, "pks": pks, "truth": truth}
