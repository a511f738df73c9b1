"""Live sources (labeler.sources, ``labeler source`` and ``labeler sync``) against loopback servers that
answer as Phoenix, Langfuse and LangSmith do (tests/fake_tracestores.py): a sync stores what
ingesting the tool's export stores; pages, late spans, late roots, 429/5xx and a server dropping a
page mid-way neither skip nor duplicate a span; a sync is an ingest (listed, undone, redacted); a
failing source does not block the others; keys are never stored or printed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

import labeler
from labeler import sources
from labeler.cli import cli
from labeler.errors import RoleError, SourceError
from labeler.sources import store as source_store
from labeler.sources import sync as source_sync
from labeler.sources.http import retry_after
from tests.fake_tracestores import FakeStore, langfuse_from_run, langsmith_trace, phoenix_root, phoenix_trace
from tests.optional import required
from tests.test_tool_logs import TOOLS, stored

PX_KEY = "px-secret-key-0001"
LS_KEY = "lsv2_secret_key_0002"
LF_KEYS = ("pk-lf-public-0003", "sk-lf-secret-0004")
ENV = {"PHOENIX_API_KEY": PX_KEY, "LANGSMITH_API_KEY": LS_KEY, "LANGFUSE_PUBLIC_KEY": LF_KEYS[0],
       "LANGFUSE_SECRET_KEY": LF_KEYS[1]}
T0 = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
FAST = {"backoff": 0.0, "sleep": lambda s: None}


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def sync(db, name: str, *, now_min: float = 60, **kw):
    kw = {**FAST, **kw}
    return sources.sync_source(db, name, env=ENV, secrets=Path("/nonexistent"), now=T0 + timedelta(minutes=now_min),
                               **kw)


def query_ids(db) -> list[str]:
    return sorted(q for (q,) in db.execute("SELECT query_id FROM queries"))


@pytest.fixture
def db(tmp_path):
    database = labeler.connect(tmp_path / "t.db")
    yield database
    database.close()


@pytest.fixture
def page_per_ingest(monkeypatch):
    """Each page is its own ingest (by default pages are gathered up to BATCH_RECORDS records)."""
    monkeypatch.setattr(source_sync, "BATCH_RECORDS", 1)


@pytest.fixture(autouse=True)
def _no_keys_in_env(monkeypatch):
    for k in [*ENV, "LANGCHAIN_API_KEY"]:
        monkeypatch.delenv(k, raising=False)


# --- same as the export file ------------------------------------------------------------------------

def test_phoenix_sync_stores_what_its_rest_export_stores(db, tmp_path):
    files = ["langchain_spans_rest.json", "llamaindex_spans_rest.json"]
    with FakeStore("phoenix", key=PX_KEY, page_size=1) as fake:
        for f in files:
            fake.add(json.loads((TOOLS / "phoenix" / f).read_text())["data"])
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag")
        r = sources.sync_source(db, "px", env=ENV, secrets=Path("/nonexistent"), **FAST)
    # LlamaIndex nests a retriever span without documents in each retrieval: 6 retriever spans, 4 retrievals
    assert r.ok and r.pages == r.spans == 6 and (r.new, r.rejected) == (4, 0), r.to_dict()
    assert len(r.ingest_ids) == 1  # the pages gathered into one ingest
    exported = labeler.connect(tmp_path / "file.db")
    for f in files:
        labeler.ingest_logs(exported, TOOLS / "phoenix" / f)
    assert stored(db) == stored(exported)
    assert len(stored(db)) == 4


def test_a_page_of_retriever_spans_without_documents_makes_no_ingest(db, tmp_path, page_per_ingest):
    """LlamaIndex logs a retriever span without documents inside each retrieval: synced a page (a
    span) per ingest, those pages make no ingest, the others one each, as the export's file does."""
    spans = json.loads((TOOLS / "phoenix" / "llamaindex_spans_rest.json").read_text())["data"]
    with FakeStore("phoenix", key=PX_KEY, page_size=1) as fake:
        fake.add(spans)
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag")
        r = sources.sync_source(db, "px", env=ENV, secrets=Path("/nonexistent"), **FAST)
    exported = labeler.connect(tmp_path / "file.db")
    labeler.ingest_logs(exported, TOOLS / "phoenix" / "llamaindex_spans_rest.json")
    assert r.ok and r.new == len(stored(exported)) > 0, r.to_dict()
    assert r.pages > r.new  # the pages of spans without documents
    assert len(r.ingest_ids) == r.new  # one ingest a retrieval: none for a page without one
    assert db.execute("SELECT count(*) FROM ingests").fetchone()[0] == r.new
    assert stored(db) == stored(exported)


def test_langsmith_sync_stores_what_its_run_dump_stores(db, tmp_path):
    runs = [json.loads(line) for line in (TOOLS / "langsmith" / "runs.jsonl").read_text().splitlines()]
    with FakeStore("langsmith", key=LS_KEY, page_size=1) as fake:
        fake.add(runs)
        sources.add_source(db, "langsmith", "ls", url=fake.url, project="rag")
        r = sources.sync_source(db, "ls", env=ENV, secrets=Path("/nonexistent"), **FAST)
        assert {q["headers"].get("x-api-key") for q in fake.requests} == {LS_KEY}
    assert r.ok and (r.new, r.rejected) == (2, 0), r.to_dict()
    exported = labeler.connect(tmp_path / "file.db")
    labeler.ingest_logs(exported, TOOLS / "langsmith" / "runs.jsonl")
    assert stored(db) == stored(exported) and len(stored(db)) == 2


def test_langfuse_sync_stores_what_its_observations_file_and_the_same_langsmith_runs_store(db, tmp_path):
    runs = [json.loads(line) for line in (TOOLS / "langsmith" / "runs.jsonl").read_text().splitlines()]
    observations = [langfuse_from_run(r) for r in runs]
    with FakeStore("langfuse", key=LF_KEYS, page_size=1) as fake:
        fake.add(observations)
        sources.add_source(db, "langfuse", "lf", url=fake.url)
        r = sources.sync_source(db, "lf", env=ENV, secrets=Path("/nonexistent"), **FAST)
    assert r.ok and (r.new, r.rejected) == (2, 0), r.to_dict()
    file = tmp_path / "observations.jsonl"
    file.write_text("".join(json.dumps(o) + "\n" for o in observations))
    from_file = labeler.connect(tmp_path / "file.db")
    labeler.ingest_logs(from_file, file, tool="langfuse")
    from_langsmith = labeler.connect(tmp_path / "ls.db")
    labeler.ingest_logs(from_langsmith, TOOLS / "langsmith" / "runs.jsonl")
    assert stored(db) == stored(from_file) == stored(from_langsmith)


# --- paging, late spans, idempotence ----------------------------------------------------------------

@pytest.mark.parametrize("kind", ["phoenix", "langfuse", "langsmith"])
def test_pages_and_late_spans_are_neither_skipped_nor_duplicated(db, kind):
    def trace(n: int, minute: float) -> list[dict]:
        if kind == "phoenix":
            return phoenix_trace(n, at(minute))
        runs = langsmith_trace(n, at(minute))
        return runs if kind == "langsmith" else [langfuse_from_run(r) for r in runs]

    with FakeStore(kind, key=LF_KEYS if kind == "langfuse" else PX_KEY if kind == "phoenix" else LS_KEY,
                   page_size=4) as fake:
        fake.add([s for n in range(10) for s in trace(n, n)])  # 10 traces, minutes 0..9
        sources.add_source(db, kind, "s", url=fake.url, project="rag", overlap_s=300)
        first = sync(db, "s", now_min=20)
        assert first.ok and first.new == 10 and first.pages == 3, first.to_dict()
        # late: a span that started at minute 17 (before the last sync's end at 20) arrives now;
        # and new ones at 21..24
        fake.add(trace(100, 17))
        fake.add([s for n in range(11, 15) for s in trace(n, n + 10)])
        second = sync(db, "s", now_min=30)
        assert second.ok and second.new == 5, second.to_dict()
        third = sync(db, "s", now_min=31)  # the overlap is read again: nothing new, no ingest
        assert third.ok and (third.new, third.ingest_ids) == (0, []), third.to_dict()
    ids = query_ids(db)
    assert len(ids) == len(set(ids)) == 15
    assert db.execute("SELECT count(*) FROM retrievals").fetchone()[0] == 30
    src = sources.get_source(db, "s")
    assert src.high_water == "2026-12-05T09:31:00.000000Z"
    assert (src.cursor, src.window_start, src.queries_new, src.syncs) == (None, None, 15, 3)


def test_a_retrieval_waits_for_its_trace_root_then_carries_its_question(db):
    with FakeStore("phoenix", page_size=10) as fake:
        fake.add(phoenix_trace(1, at(58), question="What is the refund policy?", root=False))
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag", overlap_s=300)
        waiting = sync(db, "px", now_min=60)
        assert waiting.ok and (waiting.new, waiting.waiting) == (0, 1), waiting.to_dict()
        fake.add([phoenix_root(1, at(58), "What is the refund policy?")])
        done = sync(db, "px", now_min=61)
        assert (done.new, done.waiting) == (1, 0), done.to_dict()
    question, answer = db.execute("SELECT question, answer FROM queries").fetchone()
    assert (question, answer) == ("What is the refund policy?", "answer 1")


def test_a_retrieval_whose_root_never_comes_goes_in_once_older_than_the_overlap(db):
    with FakeStore("phoenix", page_size=10) as fake:
        fake.add(phoenix_trace(2, at(58), question="asked of the retriever", root=False))
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag", overlap_s=300)
        assert sync(db, "px", now_min=60).waiting == 1
        late = sync(db, "px", now_min=64)
        assert (late.new, late.waiting) == (1, 0), late.to_dict()
    assert db.execute("SELECT question FROM queries").fetchone()[0] == "asked of the retriever"


# --- faults ------------------------------------------------------------------------------------------

def test_a_5xx_body_that_echoes_the_key_is_neither_logged_nor_stored(db, caplog):
    with FakeStore("phoenix", key=PX_KEY) as fake:
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag")
        fake.faults = ["echo-key"]  # a 401 first: the key goes nowhere
        assert PX_KEY not in sync(db, "px").error
        with caplog.at_level("INFO", logger="labeler.sources"):
            fake.faults = ["500-echo"] * 3
            r = sync(db, "px", retries=2)
    assert not r.ok and "***" in r.error and PX_KEY not in r.error
    assert caplog.records and not any(PX_KEY in rec.getMessage() for rec in caplog.records)
    assert not any(PX_KEY in line for line in db.conn.iterdump())


def test_429_with_retry_after_and_5xx_are_retried(db):
    waits: list[float] = []
    with FakeStore("langsmith", key=LS_KEY, page_size=2) as fake:
        fake.add([r for n in range(4) for r in langsmith_trace(n, at(n))])
        sources.add_source(db, "langsmith", "ls", url=fake.url, project="rag")
        fake.retry_after = "7"
        fake.faults = ["429", None, "500", "503", None, "429"]
        r = sync(db, "ls", sleep=waits.append)
    assert r.ok and r.new == 4, r.to_dict()
    assert r.retries == 4 and waits.count(7.0) == 2, waits
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0 and retry_after("x") is None


def test_a_page_dropped_mid_way_fails_the_sync_and_the_next_one_resumes_at_its_cursor(db, page_per_ingest):
    with FakeStore("langfuse", key=LF_KEYS, page_size=3) as fake:
        fake.add([langfuse_from_run(r) for n in range(9) for r in langsmith_trace(n, at(n))])
        sources.add_source(db, "langfuse", "lf", url=fake.url)
        # page 1, its roots and its traces' scores answer; then the server drops the next page on every attempt
        fake.faults = [None] * 5 + ["drop"] * 3
        broken = sync(db, "lf", retries=2)
        assert not broken.ok and "attempts" in broken.error and broken.new == 3, broken.to_dict()
        src = sources.get_source(db, "lf")
        assert src.cursor is not None and src.last_error == broken.error and src.failures == 1
        fake.faults = []
        resumed = sync(db, "lf", now_min=61)
    assert resumed.ok and resumed.resumed and resumed.new == 6, resumed.to_dict()
    assert resumed.window_end == broken.window_end  # the same window, from its cursor
    ids = query_ids(db)
    assert len(ids) == len(set(ids)) == 9
    assert sources.get_source(db, "lf").last_error is None


def test_killed_between_an_ingest_and_its_cursor_the_page_is_read_again_without_duplicates(db, monkeypatch,
                                                                                          page_per_ingest):
    with FakeStore("phoenix", page_size=2) as fake:
        fake.add([s for n in range(6) for s in phoenix_trace(n, at(n))])
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag")
        real = source_store.save_cursor
        calls = []

        def crash_on_second(*args, **kw):
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt  # the process dies after page 2 was ingested
            return real(*args, **kw)

        monkeypatch.setattr(source_store, "save_cursor", crash_on_second)
        with pytest.raises(KeyboardInterrupt):
            sync(db, "px")
        monkeypatch.setattr(source_store, "save_cursor", real)
        assert len(query_ids(db)) == 4
        again = sync(db, "px", now_min=61)
    assert again.ok and again.resumed and (again.new, again.known) == (2, 2), again.to_dict()
    ids = query_ids(db)
    assert len(ids) == len(set(ids)) == 6


def test_pages_gathered_into_one_ingest_are_read_again_when_the_sync_fails_before_it(db):
    with FakeStore("phoenix", page_size=2) as fake:
        fake.add([s for n in range(6) for s in phoenix_trace(n, at(n))])
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag")
        fake.faults = [None, None, "500", "500"]  # page 1 and its roots, then page 2 fails twice
        broken = sync(db, "px", retries=1)
        assert not broken.ok and broken.new == 0 and query_ids(db) == []
        assert sources.get_source(db, "px").cursor is None  # nothing ingested: the window starts again
        again = sync(db, "px", now_min=61)
    assert again.ok and again.resumed and again.new == 6 and len(again.ingest_ids) == 1, again.to_dict()


def test_a_failing_source_is_reported_and_does_not_block_the_others(db):
    with FakeStore("phoenix", page_size=5) as good, FakeStore("langsmith", key=LS_KEY) as bad:
        good.add([s for n in range(3) for s in phoenix_trace(n, at(n))])
        sources.add_source(db, "langsmith", "a-broken", url=bad.url, project="rag")
        sources.add_source(db, "phoenix", "b-good", url=good.url, project="rag")
        bad.faults = ["500"] * 10
        results = sources.sync_sources(db, env=ENV, secrets=Path("/nonexistent"), now=T0 + timedelta(hours=1),
                                       retries=2, **FAST)
    assert [(r.name, r.ok) for r in results] == [("a-broken", False), ("b-good", True)]
    assert "HTTP 500" in results[0].error and results[1].new == 3
    status = {s["name"]: s for s in sources.source_status(db)}
    assert status["a-broken"]["failures"] == 1 and status["b-good"]["last_error"] is None


# --- a sync is an ingest -------------------------------------------------------------------------------

def test_a_sync_is_listed_and_undone_like_any_ingest(db, tmp_path):
    with FakeStore("phoenix", page_size=10) as fake:
        fake.add([s for n in range(3) for s in phoenix_trace(n, at(n))])
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag")
        r = sync(db, "px")
    db_path = tmp_path / "t.db"
    runner = CliRunner()
    listed = runner.invoke(cli, ["--db", str(db_path), "ingest", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert [row["id"] for row in rows] == r.ingest_ids and rows[0]["path"].startswith("sync px ")
    undone = runner.invoke(cli, ["--db", str(db_path), "ingest", "undo", str(r.ingest_ids[0])])
    assert undone.exit_code == 0, undone.output
    assert query_ids(db) == []


def test_synced_text_is_redacted_before_it_is_stored(db):
    with FakeStore("phoenix", page_size=10) as fake:
        spans = phoenix_trace(5, at(1), question="Why was jane.doe@example.com charged twice?")
        spans[0]["attributes"]["retrieval.documents.0.document.content"] = "Call +44 20 7946 0958 for refunds"
        fake.add(spans)
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag")
        assert sync(db, "px").new == 1
    question = db.execute("SELECT question FROM queries").fetchone()[0]
    texts = " ".join(t for (t,) in db.execute("SELECT text FROM documents"))
    assert "jane.doe@example.com" not in question and "[EMAIL_1]" in question
    assert "7946" not in texts and "[PHONE_" in texts


def test_a_sampled_source_keeps_the_same_queries_as_ingest_sample(db, tmp_path):
    with FakeStore("phoenix", page_size=7) as fake:
        spans = [s for n in range(40) for s in phoenix_trace(n, at(n / 2))]
        fake.add(spans)
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag", sample=0.5, seed=3)
        r = sync(db, "px", now_min=20)
        again = sync(db, "px", now_min=21)  # the overlap again: the left-out ones are neither ingested nor counted
    file = tmp_path / "spans.jsonl"
    file.write_text("".join(json.dumps(s) + "\n" for s in spans))
    other = labeler.connect(tmp_path / "file.db")
    labeler.ingest_logs(other, file, tool="phoenix", sample=0.5, seed=3)
    assert 0 < r.new < 40 and query_ids(db) == query_ids(other)
    assert (again.new, again.known, again.ingest_ids) == (0, 10, []), again.to_dict()
    assert labeler.population(db)["records_seen"] == labeler.population(other)["records_seen"] == 40


# --- keys, roles, the CLI ------------------------------------------------------------------------------

def test_keys_are_never_stored_or_printed(tmp_path, monkeypatch):
    db_path = tmp_path / "k.db"
    runner = CliRunner()
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "secrets.toml").write_text(f'LANGSMITH_API_KEY = "{LS_KEY}"\n')
    with FakeStore("langsmith", key=LS_KEY, page_size=2) as fake:
        fake.add([r for n in range(3) for r in langsmith_trace(n, at(n))])
        out = runner.invoke(cli, ["--db", str(db_path), "source", "add", "langsmith", "prod", "--url", fake.url,
                                  "--project", "rag", "--every", "5m"])
        assert out.exit_code == 0, out.output
        synced = runner.invoke(cli, ["--db", str(db_path), "sync", "--json"])
        assert synced.exit_code == 0, synced.output
        assert json.loads(synced.output)[0]["new"] == 3
        fake.faults = ["echo-key"]  # the store's error repeats the key it got
        failed = runner.invoke(cli, ["--db", str(db_path), "sync", "prod", "--since", "2h"])
        assert failed.exit_code == 1 and "HTTP 401" in failed.output and "check the key" in failed.output
        listed = runner.invoke(cli, ["--db", str(db_path), "source", "list", "--json"])
        table = runner.invoke(cli, ["--db", str(db_path), "source", "list", "--table"])
    error = json.loads(listed.output)[0]["last_error"]
    assert error.startswith("prod: GET /info: HTTP 401: key *** is not valid"), error
    for output in (out.output, synced.output, failed.output, listed.output, table.output):
        assert LS_KEY not in output
    database = labeler.connect(db_path)
    assert not any(LS_KEY in line for line in database.conn.iterdump())


def test_a_missing_key_or_a_bad_source_says_how_to_fix_it(db, tmp_path):
    with pytest.raises(SourceError, match="--project"):
        sources.add_source(db, "phoenix", "px")
    with pytest.raises(SourceError, match="no user or key in the URL"):
        sources.add_source(db, "langfuse", "lf", url=f"https://{LF_KEYS[0]}:{LF_KEYS[1]}@cloud.langfuse.com")
    sources.add_source(db, "langfuse", "lf", url="http://127.0.0.1:9")
    r = sources.sync_source(db, "lf", env={}, secrets=tmp_path / "none.toml")
    assert not r.ok and "no LANGFUSE_PUBLIC_KEY" in r.error and "secrets.toml" in r.error
    with pytest.raises(SourceError, match="exists already"):
        sources.add_source(db, "langfuse", "lf")
    with pytest.raises(SourceError, match="no source named 'nope'; the sources are lf"):
        sources.sync_sources(db, "nope")


def test_adding_removing_and_syncing_sources_is_for_leads(db):
    from labeler.accounts import add_user

    add_user(db, "lee", role="lead")
    add_user(db, "ann", role="annotator")
    sources.add_source(db, "phoenix", "px", url="http://127.0.0.1:9", project="rag", by="lee")
    with pytest.raises(RoleError):
        sources.add_source(db, "phoenix", "px2", url="http://127.0.0.1:9", project="rag", by="ann")
    with pytest.raises(RoleError):
        sources.sync_sources(db, by="ann")
    with pytest.raises(RoleError):
        sources.remove_source(db, "px", by="ann")
    sources.remove_source(db, "px", by="lee")
    assert sources.list_sources(db) == []


def test_cli_source_list_remove_and_sync_every(tmp_path):
    db_path = tmp_path / "c.db"
    runner = CliRunner()
    base = ["--db", str(db_path)]
    with FakeStore("phoenix", page_size=3) as fake:
        fake.add([s for n in range(4) for s in phoenix_trace(n, at(n))])
        assert runner.invoke(cli, [*base, "source", "add", "phoenix", "px", "--url", fake.url,
                                   "--project", "rag"]).exit_code == 0
        empty = runner.invoke(cli, [*base, "sync", "--every", "5m", "--rounds", "1", "--json"])
        assert empty.exit_code == 0, empty.output
        assert json.loads(empty.output)[0]["new"] == 4
        csv_out = runner.invoke(cli, [*base, "source", "list", "--csv"])
        assert csv_out.output.splitlines()[0].startswith("name,kind,url,project,every_s")
        text = runner.invoke(cli, [*base, "sync", "px"])
        assert text.exit_code == 0 and text.output.startswith("px: "), text.output
    assert runner.invoke(cli, [*base, "sync", "--rounds", "2"]).exit_code == 2
    bad = runner.invoke(cli, [*base, "source", "add", "phoenix", "p2", "--project", "x", "--every", "soon"])
    assert bad.exit_code == 2 and "interval" in bad.output
    removed = runner.invoke(cli, [*base, "source", "remove", "px"])
    assert removed.exit_code == 0 and "what it ingested stays" in removed.output
    nothing = runner.invoke(cli, [*base, "sync"])
    assert nothing.exit_code == 1 and "no sources yet" in nothing.output


def test_sync_every_sleeps_between_rounds_and_parses_intervals(db):
    waits: list[float] = []
    with FakeStore("phoenix", page_size=3) as fake:
        fake.add(phoenix_trace(1, at(1)))
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag", every_s=60)
        rounds = list(sources.sync_every(db, 300, rounds=2, sleep=waits.append, env=ENV,
                                         secrets=Path("/nonexistent")))
    assert [r[0].ok for r in rounds] == [True, True] and len(waits) == 1 and 290 < waits[0] <= 300
    assert [sources.parse_interval(t) for t in ("30s", "5m", "2h", "1d", "90")] == [30, 300, 7200, 86400, 90]
    assert sources.parse_since("2026-12-01T00:00:00Z") == "2026-12-01T00:00:00.000000Z"


def test_a_langfuse_page_file_is_recognised_and_io_as_json_text_is_read(tmp_path):
    observations = [langfuse_from_run(r) for r in langsmith_trace(7, at(1), question="Where is my parcel?")]
    for o in observations:  # what the API returns without parseIoAsJson
        o["input"], o["output"] = json.dumps(o["input"]), json.dumps(o["output"])
    file = tmp_path / "page.json"
    file.write_text(json.dumps({"data": observations, "meta": {}}))
    db = labeler.connect(tmp_path / "p.db")
    r = labeler.ingest_logs(db, file)  # a page of the API: recognised without --format
    assert (r.new, r.rejected, r.tool) == (1, 0, None)
    question, answer = db.execute("SELECT question, answer FROM queries").fetchone()
    assert (question, answer) == ("Where is my parcel?", "answer 7")
    assert [d for (d,) in db.execute("SELECT doc_id FROM documents ORDER BY pk")] == ["doc-7-0", "doc-7-1"]


@pytest.mark.filterwarnings("ignore:list_runs\\(\\) is deprecated")
def test_the_fake_langsmith_answers_as_the_langsmith_sdk_expects():
    """The loopback LangSmith is read by the real SDK's list_runs (cursor paging, the project by
    name, Run objects), so the client under test is tested against the shapes the SDK reads."""
    Client = required("langsmith").Client

    with FakeStore("langsmith", key=LS_KEY, page_size=2) as fake:
        fake.add([r for n in range(5) for r in langsmith_trace(n, at(n))])
        client = Client(api_url=fake.url, api_key=LS_KEY, auto_batch_tracing=False)
        runs = list(client.list_runs(project_name="rag", run_type="retriever"))
        bodies = [q["body"] for q in fake.requests if q["path"] == "/runs/query"]
    assert sorted(str(r.id)[-12:] for r in runs) == [f"{n:012x}" for n in range(5)]
    assert all(r.run_type == "retriever" and r.outputs["documents"] for r in runs)
    assert len(bodies) == 3 and "cursor" in bodies[1] and bodies[0]["session"] == [fake_project_id()]


def fake_project_id() -> str:
    from tests.fake_tracestores import PROJECT_ID

    return PROJECT_ID


def test_a_store_that_pages_in_a_circle_is_stopped(db, monkeypatch):
    from labeler.sources.page import Page
    from labeler.sources.phoenix import PhoenixClient

    def circle(self, start, end, cursor):
        while True:
            yield Page(phoenix_trace(1, at(1))[:1], "same-cursor")

    monkeypatch.setattr(PhoenixClient, "pages", circle)
    monkeypatch.setattr(PhoenixClient, "roots", lambda self, traces: {})
    monkeypatch.setattr(PhoenixClient, "attach_feedback", lambda self, records: None)
    sources.add_source(db, "phoenix", "px", url="http://127.0.0.1:9", project="rag")
    r = sync(db, "px")
    assert not r.ok and "cursor of an earlier page" in r.error and r.pages == 2


def test_a_langsmith_that_serves_only_the_v2_query_is_read_through_it(db, tmp_path):
    runs = [json.loads(line) for line in (TOOLS / "langsmith" / "runs.jsonl").read_text().splitlines()]
    with FakeStore("langsmith", key=LS_KEY, page_size=1, smithdb_only=True) as fake:
        fake.add(runs)
        sources.add_source(db, "langsmith", "ls", url=fake.url, project="rag")
        r = sources.sync_source(db, "ls", env=ENV, secrets=Path("/nonexistent"), **FAST)
        paths = {q["path"] for q in fake.requests}
    assert r.ok and (r.new, r.rejected) == (2, 0), r.to_dict()
    assert "/api/v2/runs/query" in paths and "/runs/query" not in paths
    exported = labeler.connect(tmp_path / "file.db")
    labeler.ingest_logs(exported, TOOLS / "langsmith" / "runs.jsonl")
    assert stored(db) == stored(exported)


def test_the_fake_v2_runs_query_answers_as_the_langsmith_sdk_expects():
    Client = required("langsmith").Client

    with FakeStore("langsmith", key=LS_KEY, page_size=2, smithdb_only=True) as fake:
        fake.add([r for n in range(5) for r in langsmith_trace(n, at(n))])
        client = Client(api_url=fake.url, api_key=LS_KEY, auto_batch_tracing=False)
        # (Client.runs is the async resource; the sync one is what Client itself pages with)
        pager = client._get_langsmith_api_sync().runs.query_v2(project_ids=[fake_project_id()], run_type="RETRIEVER",
                                     min_start_time=at(-60), max_start_time=at(60),
                                     selects=["ID", "RUN_TYPE", "PARENT_RUN_IDS", "OUTPUTS", "TRACE_ID"])
        runs = list(pager)
    assert len(runs) == 5 and all(r.run_type == "RETRIEVER" and r.parent_run_ids == [r.trace_id] for r in runs)
    assert all(r.outputs["documents"] for r in runs)


def test_a_clock_set_back_never_moves_the_high_water_mark_back(db):
    with FakeStore("phoenix", page_size=5) as fake:
        fake.add([s for n in range(3) for s in phoenix_trace(n, at(n))])
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag")
        assert sync(db, "px", now_min=60).new == 3
        mark = sources.get_source(db, "px").high_water
        back = sync(db, "px", now_min=30)  # the clock says half an hour earlier
    assert back.ok and back.spans == 0 and back.window_start == back.window_end  # an empty window
    assert sources.get_source(db, "px").high_water == back.high_water == mark
