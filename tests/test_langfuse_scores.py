"""Langfuse scores as outcome signals: each sync reads the scores of the traces it ingests (the v3
scores list, batched by trace and paged by cursor; the v2 one on an older deployment; none when a
deployment has neither) from the fake Langfuse (tests/fake_tracestores.py, tests/fake_scores.py);
the users' scores (source API or ANNOTATION) on the retrieval, on the trace's root or on the whole
trace route their query always, an evaluator's (EVAL) and labeler's own grades never; 5xx and 429
on the scores list are retried and a lasting failure fails that source only; a file of whole traces
with their scores gives the same signals; a score's text stays plain text."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import labeler
from labeler import sources
from labeler.ingest.formats.langfuse import user_scores
from labeler.labels import routing_rules
from labeler.signals import query_signals
from labeler.sources import langfuse as langfuse_source
from tests.fake_scores import langfuse_score, v1_score, v3_score
from tests.fake_tracestores import FakeStore, langfuse_from_run, langsmith_trace, phoenix_trace
from tests.optional import required

LF_KEYS = ("pk-lf-public-0003", "sk-lf-secret-0004")
ENV = {"LANGFUSE_PUBLIC_KEY": LF_KEYS[0], "LANGFUSE_SECRET_KEY": LF_KEYS[1]}
T0 = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
FAST = {"backoff": 0.0, "sleep": lambda s: None}
V3, V2 = "/api/public/v3/scores", "/api/public/v2/scores"


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def trace(n: int) -> str:  # the trace's id, and its root observation's (langfuse_from_run of a LangSmith trace)
    return f"00000000-0000-4000-8000-{n:012x}"


def retrieval(n: int) -> str:  # the retriever observation's id: the query id
    return f"00000000-0000-4000-9000-{n:012x}"


def observations(numbers) -> list[dict]:
    return [langfuse_from_run(r) for n in numbers for r in langsmith_trace(n, at(n))]


SCORES = [
    # the browser SDK's thumbs down, on the whole trace; an earlier thumbs up of the same name is older
    langfuse_score(trace(1), "user-feedback", True, data_type="BOOLEAN", timestamp="2026-12-05T09:10:00.000Z",
                   score_id="early-1"),
    langfuse_score(trace(1), "user-feedback", False, data_type="BOOLEAN", timestamp="2026-12-05T09:20:00.000Z"),
    langfuse_score(trace(1), "correctness", 0, source="EVAL"),  # a judge's (the v2 list has it: not asked by source)
    langfuse_score(trace(2), "user_feedback", 0, observation=retrieval(2)),  # a 0 on the retrieval itself
    langfuse_score(trace(3), "quality", "bad", data_type="CATEGORICAL", source="ANNOTATION",
                   observation=trace(3)),  # a reviewer's label on the root observation
    langfuse_score(trace(4), "rating", 1),  # a low rating
    langfuse_score(trace(5), "user-feedback", 0, source="EVAL"),  # an LLM judge's: not the user's
    langfuse_score(trace(6), "user-feedback", True, data_type="BOOLEAN"),  # a thumbs up
    langfuse_score(trace(7), "thumbs_down", True, data_type="BOOLEAN",
                   metadata={"golden_set_version": "v1"}),  # labeler's own grade, sent back by labeler push
    langfuse_score(trace(8), "user-feedback", 0, observation="a-generation"),  # another observation's
    # the root says thumbs down, the retrieval "helpful": both count for the query
    langfuse_score(trace(9), "thumbs_down", True, data_type="BOOLEAN", source="ANNOTATION", observation=trace(9)),
    langfuse_score(trace(9), "helpful", True, data_type="BOOLEAN", observation=retrieval(9)),
]
ROUTED = {retrieval(n) for n in (1, 2, 3, 4, 9)}
NUMBERS = range(1, 11)  # trace 10 has no score


@pytest.fixture
def db(tmp_path):
    database = labeler.connect(tmp_path / "t.db")
    yield database
    database.close()


def sync(db, fake: FakeStore, name: str = "lf", **kw) -> sources.SyncResult:
    if name not in {s.name for s in sources.list_sources(db)}:
        sources.add_source(db, "langfuse", name, url=fake.url)
    return sources.sync_source(db, name, env=ENV, secrets=Path("/nonexistent"), now=T0 + timedelta(hours=2),
                               **{**FAST, **kw})


def decisions(db) -> dict[str, tuple]:
    return {q: (bool(r), p, reason) for q, r, p, reason in db.execute(
        "SELECT q.query_id, d.routed, d.inclusion_prob, d.reason FROM routing_decisions d "
        "JOIN queries q ON q.pk = d.query_pk")}


def signals_by_query(db) -> dict[str, dict]:
    ids = dict(db.execute("SELECT pk, query_id FROM queries").fetchall())
    return {ids[pk]: s for pk, s in query_signals(db).items()}


def scores_asked(fake: FakeStore, path: str) -> list[dict]:
    return [q["query"] for q in fake.requests if q["path"] == path]


def test_users_scores_route_their_query_always_and_an_evaluators_never(db, monkeypatch):
    monkeypatch.setattr(langfuse_source, "TRACES_PER_SCORE_REQUEST", 3)
    routing_rules.set_rules(db, rate=0.0)  # the rate routes nothing: only signals do
    with FakeStore("langfuse", key=LF_KEYS, page_size=2) as fake:
        fake.add(observations(NUMBERS))
        fake.add_scores(SCORES)
        r = sync(db, fake)
    assert r.ok and r.new == 10, r.to_dict()
    made = decisions(db)
    assert {q for q, (ok, _, _) in made.items() if ok} == ROUTED
    assert all(made[q] == (True, 1.0, "signal") for q in ROUTED)
    assert r.routing == {"signal": 5, "not-sampled": 5}
    found = signals_by_query(db)
    assert found[retrieval(1)] == {"negative": True}  # the newer of the two user-feedback scores
    assert found[retrieval(4)] == {"rating": 1.0}
    assert found[retrieval(6)] == {"negative": False}
    for n in (5, 7, 8, 10):  # the judge's, labeler's own, another observation's, none
        assert retrieval(n) not in found
    meta = json.loads(db.execute("SELECT meta FROM queries WHERE query_id = ?", [retrieval(9)]).fetchone()[0])
    assert meta["signals"] == {"thumbs_down": True, "helpful": True}
    # the v3 list: the traces of each page in batches, users' scores only, paged by cursor
    asked = scores_asked(fake, V3)
    assert asked and not scores_asked(fake, V2)
    ids = [i for q in asked for i in q["traceId"][0].split(",")]
    assert all(len(q["traceId"][0].split(",")) <= 3 for q in asked) and set(ids) == {trace(n) for n in NUMBERS}
    assert {(q["source"][0], q["fields"][0], q["limit"][0]) for q in asked} == {("API,ANNOTATION", "details,subject",
                                                                                 "100")}
    assert any("cursor" in q for q in asked)  # traces 1 and 2's three users' scores fill two pages


@pytest.mark.parametrize(("apis", "routed"), [(("v2",), ROUTED), (("v3",), ROUTED), ((), set())])
def test_an_older_deployment_is_read_through_v2_and_one_without_scores_syncs_as_before(db, apis, routed):
    routing_rules.set_rules(db, rate=0.0)
    with FakeStore("langfuse", key=LF_KEYS, page_size=2, score_apis=apis) as fake:
        fake.add(observations(NUMBERS))
        fake.add_scores(SCORES)
        r = sync(db, fake)
    assert r.ok and r.new == 10, r.to_dict()
    assert {q for q, (ok, _, _) in decisions(db).items() if ok} == routed
    v3, v2 = scores_asked(fake, V3), scores_asked(fake, V2)
    if apis == ("v2",):
        assert len(v3) == 1  # asked once: the client remembers the deployment has no v3 list
        assert all(len(q["traceId"]) == 1 and "," not in q["traceId"][0] for q in v2)
        assert any(q["page"] == ["2"] for q in v2)  # trace 1's three scores fill two pages
        assert signals_by_query(db)[retrieval(1)] == {"negative": True}
    elif apis == ("v3",):
        assert v3 and not v2
    else:
        assert (len(v3), len(v2)) == (1, 1)


def test_5xx_and_429_on_the_scores_list_are_retried_and_a_lasting_failure_fails_that_source_only(db):
    routing_rules.set_rules(db, rate=0.0)
    with FakeStore("langfuse", key=LF_KEYS, page_size=50) as fake:
        fake.add(observations(NUMBERS))
        fake.add_scores(SCORES)
        fake.route_faults[V3] = ["500", "429"]
        r = sync(db, fake)
        assert r.ok and r.retries == 2 and r.new == 10, r.to_dict()
    assert {q for q, (ok, _, _) in decisions(db).items() if ok} == ROUTED


def test_a_scores_list_still_failing_fails_the_source_and_the_next_sync_reads_it(db):
    routing_rules.set_rules(db, rate=0.0)
    with FakeStore("langfuse", key=LF_KEYS, page_size=50) as fake, FakeStore("phoenix", page_size=50) as px:
        fake.add(observations(NUMBERS))
        fake.add_scores(SCORES)
        px.add([s for n in range(3) for s in phoenix_trace(n, at(n))])
        sources.add_source(db, "langfuse", "a-lf", url=fake.url)
        sources.add_source(db, "phoenix", "b-px", url=px.url, project="rag")
        fake.route_faults[V3] = ["500"] * 3
        results = sources.sync_sources(db, env=ENV, secrets=Path("/nonexistent"), now=T0 + timedelta(hours=2),
                                       retries=2, **FAST)
        assert [(x.name, x.ok) for x in results] == [("a-lf", False), ("b-px", True)]
        failed = results[0]
        assert failed.error.startswith("a-lf: GET /api/public/v3/scores: HTTP 500") and failed.new == 0
        assert sources.get_source(db, "a-lf").last_error == failed.error
        again = sync(db, fake, "a-lf")
    assert again.ok and again.resumed and again.new == 10, again.to_dict()
    assert {q for q, (ok, _, _) in decisions(db).items() if ok} == ROUTED


def test_a_file_of_whole_traces_with_their_scores_gives_the_same_signals_as_the_sync(db, tmp_path):
    with FakeStore("langfuse", key=LF_KEYS, page_size=3) as fake:
        fake.add(observations(NUMBERS))
        fake.add_scores(SCORES)
        assert sync(db, fake).ok
    # GET /api/public/traces/{traceId} of each trace: its observations and every score of it (the
    # evaluator's and another observation's too), as ScoreV1
    lines = []
    for n in NUMBERS:
        root, *_ = [o for o in observations([n]) if o["parentObservationId"] is None]
        lines.append({"id": trace(n), "name": "RunnableSequence", "timestamp": at(n), "input": root["input"],
                      "output": root["output"], "htmlPath": f"/project/p/traces/{trace(n)}",
                      "observations": observations([n]),
                      "scores": [v1_score(s) for s in SCORES if s["traceId"] == trace(n)]})
    file = tmp_path / "traces.jsonl"
    file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    from_file = labeler.connect(tmp_path / "file.db")
    done = labeler.ingest_logs(from_file, file, tool="langfuse")
    assert done.new == 10
    assert signals_by_query(from_file) == signals_by_query(db) and len(signals_by_query(db)) == 6
    assert {q for q, s in signals_by_query(from_file).items() if s.get("negative") or s.get("rating")} == ROUTED


def test_a_scores_text_stays_plain_text_and_its_comment_is_not_kept(db):
    hostile = "<img src=x onerror=alert(1)> **wrong** [see](javascript:alert(2))"
    comment = "<script>alert('comment')</script> _really_ bad"
    scores = [langfuse_score(trace(1), "feedback_text", hostile, data_type="TEXT", comment=comment),
              langfuse_score(trace(1), "user-feedback", False, data_type="BOOLEAN", comment=comment)]
    routing_rules.set_rules(db, rate=0.0)
    with FakeStore("langfuse", key=LF_KEYS, page_size=50) as fake:
        fake.add(observations([1, 2]))
        fake.add_scores(scores)
        r = sync(db, fake)
    assert r.ok and r.new == 2
    assert signals_by_query(db)[retrieval(1)] == {"negative": True, "feedback": hostile}  # as given, not rendered
    assert decisions(db)[retrieval(1)] == (True, 1.0, "signal")
    dump = "\n".join(db.conn.iterdump())
    assert "alert('comment')" not in dump and hostile.replace("'", "''") in dump
    assert hostile not in r.summary()


def test_the_same_score_read_from_v3_and_v2_means_the_same():
    """The reader reads a score in either API's shape (v2: ``value``/``stringValue`` and the ids; v3: a
    polymorphic value and a ``subject``), on the observation it is about or on its trace."""
    read = 0
    for score in SCORES:
        v3 = v3_score(score, ["core", "details", "subject"])
        for obs in observations(NUMBERS):
            two = user_scores({**obs, "scores": [score]})
            three = user_scores({**obs, "scores": [v3]})
            assert two == three, (score["name"], obs["id"])
            read += two is not None
    # the users' scores on a trace count on both of its observations (traces 1, 4, 6: 4 + 2 + 2), one
    # on an observation on that one only (2, 3, and 9's two); another observation's nowhere
    assert read == 12


def test_the_langfuse_sdk_reads_the_fakes_scores_list():
    """The fake's v3 list in the real SDK's models (``scores.get_many``, langfuse 5): a check of the
    fake, skipped where the SDK is not installed (it is not in the test extra)."""
    langfuse_api = required("langfuse.api.client", reason="the langfuse SDK is not installed")
    with FakeStore("langfuse", key=LF_KEYS, page_size=2) as fake:
        fake.add_scores(SCORES)
        api = langfuse_api.LangfuseAPI(base_url=fake.url, username=LF_KEYS[0], password=LF_KEYS[1])
        got, cursor = [], None
        while True:
            page = api.scores.get_many(trace_id=",".join(trace(n) for n in NUMBERS), source="API,ANNOTATION",
                                       fields="details,subject", limit=100, cursor=cursor)
            got += page.data
            cursor = page.meta.cursor
            if not cursor:
                break
    assert len(got) == sum(s["source"] != "EVAL" for s in SCORES)
    by_id = {s.id: s for s in got}
    feedback = by_id["score-" + trace(1) + "-trace-user-feedback-API"]
    assert (feedback.value, feedback.subject.kind, feedback.subject.id) == (False, "trace", trace(1))
    quality = next(s for s in got if s.name == "quality")
    assert (quality.value, quality.subject.kind, quality.subject.trace_id) == ("bad", "observation", trace(3))
