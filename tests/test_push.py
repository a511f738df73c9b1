"""``labeler push`` (labeler.sources.push): consolidated human grades sent back to the source a query
was synced from, against the loopback stores of tests/fake_tracestores.py: Phoenix document and span
annotations (HUMAN, one per retrieved document), Langfuse scores on the observation, LangSmith
feedback on the run; a second push sends nothing, a changed grade updates, 429/500 are retried, an
item the store refuses is reported and sent again by the next push, keys are never printed, and
pushing is for leads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import labeler
from labeler import sources
from labeler.cli import cli
from labeler.errors import RoleError
from labeler.export.write import export_golden
from labeler.labels.writes import set_grade, set_status
from labeler.sources.push import push_source
from tests.fake_tracestores import PROJECT_ID, FakeStore, langfuse_from_run, langsmith_trace, phoenix_trace
from tests.optional import required
from tests.test_sources import ENV, FAST, LF_KEYS, LS_KEY, PX_KEY, at, sync

NO_SECRETS = Path("/nonexistent")


def push(db, name: str, **kw):
    return push_source(db, name, env=ENV, secrets=NO_SECRETS, **{**FAST, **kw})


def records(kind: str, n: int) -> list[dict]:
    if kind == "phoenix":
        return [s for i in range(n) for s in phoenix_trace(i, at(i), chunks=3)]
    runs = [r for i in range(n) for r in langsmith_trace(i, at(i), chunks=3)]
    return runs if kind == "langsmith" else [langfuse_from_run(r) for r in runs]


def fake(kind: str) -> FakeStore:
    key = {"phoenix": PX_KEY, "langsmith": LS_KEY, "langfuse": LF_KEYS}[kind]
    return FakeStore(kind, key=key, page_size=2)


def grade(db, query_id: str, grades: dict[int, int], annotator: str = "ann") -> None:
    """``annotator`` grades the chunks at these ranks of ``query_id`` and submits it."""
    pk = db.execute("SELECT pk FROM queries WHERE query_id = ?", [query_id]).fetchone()[0]
    for rank, g in grades.items():
        doc = db.execute("SELECT doc_pk FROM retrievals WHERE query_pk = ? AND rank = ?", [pk, rank]).fetchone()[0]
        set_grade(db, pk, doc, annotator, g)
    set_status(db, pk, annotator, "submitted")


def synced(db, store: FakeStore) -> list[str]:
    sources.add_source(db, store.kind, "src", url=store.url, project="rag")
    r = sync(db, "src")
    assert r.ok and r.new == 3, r.to_dict()
    return [q for (q,) in db.execute("SELECT query_id FROM queries ORDER BY query_id")]


@pytest.fixture
def db(tmp_path):
    database = labeler.connect(tmp_path / "p.db")
    yield database
    database.close()


def test_phoenix_gets_one_human_document_annotation_per_graded_document_and_a_span_annotation(db):
    with fake("phoenix") as store:
        store.add(records("phoenix", 3))
        retrieval, *_ = synced(db, store)
        grade(db, retrieval, {1: 3, 2: 0, 3: 2})
        r = push(db, "src")
        assert r.ok and (r.queries, r.items, r.sent, r.updated, r.failed) == (1, 4, 4, 0, 0), r.to_dict()
        docs = {k[3]: v for k, v in store.annotations.items() if k[3] is not None}
        assert sorted(docs) == [0, 1, 2]  # document_position is the rank less one
        assert all(v["span_id"] == retrieval and v["annotator_kind"] == "HUMAN" and v["name"] == "relevance"
                   and v["identifier"] == "" for v in docs.values())
        assert docs[0]["result"] == {"label": "highly relevant", "score": 3.0}
        assert docs[1]["result"] == {"label": "irrelevant", "score": 0.0}
        assert docs[2]["metadata"]["doc_id"] == "doc-0-2"
        assert docs[2]["metadata"]["golden_set_version"] == "unversioned"
        span = store.annotations[("golden precision", retrieval, "", None)]
        assert span["result"] == {"label": "2 of 3 relevant", "score": pytest.approx(2 / 3)}
        posted = [q for q in store.requests if q["method"] == "POST"]
        assert {q["path"] for q in posted} == {"/v1/document_annotations", "/v1/span_annotations"}
        assert all(q["query"] == {"sync": ["true"]} for q in posted)


@pytest.mark.parametrize("kind", ["phoenix", "langfuse", "langsmith"])
def test_a_second_push_sends_nothing_and_a_changed_grade_updates(db, kind):
    with fake(kind) as store:
        store.add(records(kind, 3))
        first, second, _ = synced(db, store)
        grade(db, first, {1: 3, 2: 1})
        grade(db, second, {1: 0})
        r1 = push(db, "src")
        assert r1.ok and (r1.items, r1.sent) == (5, 5), r1.to_dict()
        sent = len(store.requests)
        r2 = push(db, "src")
        assert r2.ok and (r2.sent, r2.updated, r2.unchanged, r2.requests) == (0, 0, 5, 0), r2.to_dict()
        assert len(store.requests) == sent  # nothing new went out
        grade(db, first, {2: 2})  # the annotator changes one grade: the document and the span's precision
        r3 = push(db, "src")
        assert r3.ok and (r3.sent, r3.updated, r3.unchanged) == (0, 2, 3), r3.to_dict()
        stored = {"phoenix": store.annotations, "langfuse": store.scores, "langsmith": store.feedback}[kind]
        assert len(stored) == 5  # updated in place, never a second copy
        if kind == "langfuse":
            doc = next(s for s in store.scores.values() if s["metadata"].get("doc_id") == "doc-0-1")
            assert (doc["value"], doc["observationId"], doc["dataType"]) == (2.0, first, "NUMERIC")
            assert doc["traceId"] and doc["metadata"]["golden_set_version"] == "unversioned"
        elif kind == "langsmith":
            doc = next(f for f in store.feedback.values() if f["feedback_source"]["metadata"].get("doc_id") == "doc-0-1")
            assert (doc["score"], doc["value"], doc["run_id"], doc["key"]) == (2.0, "relevant", first, "relevance")
            assert any(q["method"] == "PATCH" for q in store.requests)
        else:
            assert store.annotations[("relevance", first, "", 1)]["result"]["score"] == 2.0


def test_the_golden_set_version_goes_in_the_metadata(db, tmp_path):
    with fake("langfuse") as store:
        store.add(records("langfuse", 3))
        first, *_ = synced(db, store)
        grade(db, first, {1: 3})
        export_golden(db, tmp_path / "golden.jsonl")
        version = db.execute("SELECT version, sha256 FROM exports").fetchone()
        r = push(db, "src")
        assert r.golden_set_version == f"v{version[0]} sha256:{version[1][:12]}"
        assert {s["metadata"]["golden_set_version"] for s in store.scores.values()} == {r.golden_set_version}


@pytest.mark.parametrize("kind", ["phoenix", "langfuse", "langsmith"])
def test_429_and_500_are_retried(db, kind):
    with fake(kind) as store:
        store.add(records(kind, 3))
        first, *_ = synced(db, store)
        grade(db, first, {1: 3, 2: 2})
        store.faults = ["429", "500"]
        r = push(db, "src")
        assert r.ok and r.sent == 3 and r.retries == 2, r.to_dict()


def test_an_item_the_store_refuses_is_reported_and_the_next_push_sends_it(db):
    with fake("phoenix") as store:
        store.add(records("phoenix", 3))
        first, second, third = synced(db, store)
        for q in (first, second, third):
            grade(db, q, {1: 2})
        gone = store.records.pop(next(i for i, r in enumerate(store.records) if r["context"]["span_id"] == second))
        r = push(db, "src")
        assert not r.ok and (r.sent, r.failed) == (4, 2), r.to_dict()  # the other spans' annotations went
        assert any(second in e and "404" in e for e in r.errors) and "push src" in r.error
        assert db.execute("SELECT count(*) FROM source_pushes WHERE error IS NOT NULL").fetchone()[0] == 2
        store.add([gone])  # the store has it again: the next push resumes with what failed
        again = push(db, "src")
        assert again.ok and (again.sent, again.unchanged, again.failed) == (2, 4, 0), again.to_dict()
        assert db.execute("SELECT count(*) FROM source_pushes WHERE error IS NOT NULL").fetchone()[0] == 0


def test_a_store_that_keeps_failing_is_reported_without_a_key_and_resumed(db):
    with fake("langsmith") as store:
        store.add(records("langsmith", 3))
        first, *_ = synced(db, store)
        grade(db, first, {1: 1})
        store.faults = ["500-echo"] * 5  # every attempt of the project look-up; the body repeats the key
        r = push(db, "src")
        assert not r.ok and (r.sent, r.failed) == (0, 0) and "GET /sessions: HTTP 500: key ***" in r.error
        assert r.summary().startswith("src: FAILED: ")
        store.faults = [None] + ["500-echo"] * 5  # the project is found; every attempt of the first item fails
        r = push(db, "src")
        assert not r.ok and (r.sent, r.failed) == (1, 1), r.to_dict()
        assert LS_KEY not in json.dumps(r.to_dict()) and "***" in r.errors[0]
        assert LS_KEY not in str(db.execute("SELECT group_concat(error) FROM source_pushes").fetchone()[0])
        again = push(db, "src")
        assert again.ok and (again.sent, again.unchanged) == (1, 1), again.to_dict()


def test_a_missing_key_says_where_to_put_it_and_sends_nothing(db):
    with fake("langfuse") as store:
        store.add(records("langfuse", 3))
        first, *_ = synced(db, store)
        grade(db, first, {1: 3})
        r = push_source(db, "src", env={}, secrets=NO_SECRETS)
        assert not r.ok and "no LANGFUSE_PUBLIC_KEY" in r.error and r.summary().startswith("src: FAILED: ")
        assert not store.scores and db.execute("SELECT count(*) FROM source_pushes").fetchone()[0] == 0


def test_a_langsmith_feedback_sent_but_not_recorded_is_updated(db):
    with fake("langsmith") as store:
        store.add(records("langsmith", 3))
        first, *_ = synced(db, store)
        grade(db, first, {1: 1})
        assert push(db, "src").sent == 2
        db.execute("DELETE FROM source_pushes")  # a push killed after sending, before recording
        db.conn.commit()
        r = push(db, "src")
        assert r.ok and r.sent == 2 and len(store.feedback) == 2, r.to_dict()


def test_a_source_removed_and_added_again_is_sent_everything_again(db):
    with fake("langfuse") as store:
        store.add(records("langfuse", 3))
        first, *_ = synced(db, store)
        grade(db, first, {1: 3})
        assert push(db, "src").sent == 2
        sources.remove_source(db, "src")
        assert db.execute("SELECT count(*) FROM source_pushes").fetchone()[0] == 0
        # what the removed source ingested stays, and a query belongs to the source by name (its
        # ingests read "sync src ..."): the source added again under the name is sent those grades
        sources.add_source(db, "langfuse", "src", url=store.url)
        assert push(db, "src").sent == 2 and len(store.scores) == 2  # the same ids: replaced, not doubled


def test_dry_run_sends_and_records_nothing_and_needs_no_key(db):
    with fake("langfuse") as store:
        store.add(records("langfuse", 3))
        first, *_ = synced(db, store)
        grade(db, first, {1: 3, 3: 0})
        before = len(store.requests)
        r = push_source(db, "src", dry_run=True, env={}, secrets=NO_SECRETS)
        assert r.ok and r.dry_run and (r.items, r.sent) == (3, 3) and len(store.requests) == before
        assert db.execute("SELECT count(*) FROM source_pushes").fetchone()[0] == 0


def test_only_the_sources_own_queries_and_retrieved_chunks_are_pushed(db, tmp_path):
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"query_id": "file-q", "question": "from a file?",
                                 "retrieved": [{"id": "f1", "text": "x"}]}) + "\n")
    labeler.ingest_logs(db, other)
    with fake("langsmith") as store:
        store.add(records("langsmith", 3))
        first, *_ = synced(db, store)
        grade(db, first, {1: 2})
        grade(db, "file-q", {1: 3})
        pk = db.execute("SELECT pk FROM queries WHERE query_id = ?", [first]).fetchone()[0]
        doc = db.execute("SELECT pk FROM documents WHERE doc_id = 'f1'").fetchone()[0]
        set_grade(db, pk, doc, "ann", 3)  # a chunk found by search: no position in the run
        r = push(db, "src")
        assert r.ok and (r.queries, r.items, r.not_retrieved) == (1, 2, 1), r.to_dict()
        assert {f["run_id"] for f in store.feedback.values()} == {first}


def test_pushing_is_for_leads(db):
    from labeler.accounts import add_user

    add_user(db, "lee", role="lead")
    add_user(db, "ann2", role="annotator")
    sources.add_source(db, "phoenix", "px", url="http://127.0.0.1:9", project="rag", by="lee")
    with pytest.raises(RoleError):
        push_source(db, "px", by="ann2", dry_run=True)
    assert push_source(db, "px", by="lee", dry_run=True).items == 0


def test_cli_push_dry_run_json_table_and_keys_never_printed(tmp_path, monkeypatch):
    db_path = tmp_path / "c.db"
    runner = CliRunner()
    base = ["--db", str(db_path)]
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", LF_KEYS[0])
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", LF_KEYS[1])
    monkeypatch.chdir(tmp_path)
    with fake("langfuse") as store:
        store.add(records("langfuse", 3))
        assert runner.invoke(cli, [*base, "source", "add", "langfuse", "lf", "--url", store.url]).exit_code == 0
        assert runner.invoke(cli, [*base, "sync", "lf", "--since", "2026-12-05T00:00:00Z"]).exit_code == 0
        db = labeler.connect(db_path)
        first = db.execute("SELECT query_id FROM queries ORDER BY query_id").fetchone()[0]
        grade(db, first, {1: 3})
        db.close()
        dry = runner.invoke(cli, [*base, "push", "lf", "--dry-run", "--json"])
        assert dry.exit_code == 0, dry.output
        assert json.loads(dry.output)["sent"] == 2 and not store.scores
        done = runner.invoke(cli, [*base, "push", "lf"])
        assert done.exit_code == 0 and done.output.startswith("lf: 1 graded queries"), done.output
        table = runner.invoke(cli, [*base, "push", "lf", "--table"])
        assert table.exit_code == 0 and "unchanged" in table.output
        store.faults = ["echo-key"]
        grade(labeler.connect(db_path), first, {1: 2})
        failed = runner.invoke(cli, [*base, "push", "lf"])
        assert failed.exit_code == 1 and "HTTP 401" in failed.output, failed.output
    for out in (dry.output, done.output, table.output, failed.output):
        assert LF_KEYS[0] not in out and LF_KEYS[1] not in out
    assert runner.invoke(cli, [*base, "push", "nope"]).exit_code == 1


def test_the_fake_langsmith_takes_feedback_as_the_langsmith_sdk_sends_it(db):
    """The real SDK's create_feedback and update_feedback go to the loopback LangSmith, and push
    sends no field the SDK's FeedbackCreate does not have."""
    Client = required("langsmith").Client
    FeedbackCreate = required("langsmith.schemas").FeedbackCreate

    with fake("langsmith") as store:
        store.add(records("langsmith", 3))
        first, *_ = synced(db, store)
        client = Client(api_url=store.url, api_key=LS_KEY, auto_batch_tracing=False)
        made = client.create_feedback(first, key="relevance", score=2, value="relevant", comment="sdk",
                                      feedback_id="11111111-1111-4111-8111-111111111111", session_id=PROJECT_ID)
        client.update_feedback(made.id, score=3, comment="sdk again")
        sdk_body = next(q["body"] for q in store.requests if q["method"] == "POST" and q["path"] == "/feedback")
        assert store.feedback[str(made.id)]["score"] == 3 and store.feedback[str(made.id)]["comment"] == "sdk again"
        grade(db, first, {1: 2})
        assert push(db, "src").ok
        ours = [q["body"] for q in store.requests if q["method"] == "POST" and q["path"] == "/feedback"][1:]
    fields = set(FeedbackCreate.model_fields)
    assert ours and all(set(body) <= fields for body in ours) and set(sdk_body) <= fields
    assert all(body["session_id"] == PROJECT_ID and body["start_time"] for body in ours)
    assert all(body["feedback_source"]["type"] == sdk_body["feedback_source"]["type"] for body in ours)


def test_a_smithdb_only_langsmith_gets_feedback_with_its_project(db):
    with FakeStore("langsmith", key=LS_KEY, page_size=2, smithdb_only=True) as store:
        store.add(records("langsmith", 3))
        first, *_ = synced(db, store)
        grade(db, first, {1: 2, 2: 0})
        r = push(db, "src")
        assert r.ok and r.sent == 3 and len(store.feedback) == 3, r.to_dict()
