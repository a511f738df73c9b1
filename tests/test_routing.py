"""Routing (labeler.labels.routing, ``labeler route``): which live queries enter the queue. Rules
validation with one-line errors; decisions deterministic (seeded hash of the query id) and made
once; signals always in (read from the traces: OpenInference span metadata, span status ERROR,
LangSmith run errors); the rate honoured statistically; the daily cap lowers the rate and records
it; quotas; the queue leaves out what was not routed; preview writes nothing; roles; and the
estimate over all traffic stays unbiased with the recorded probabilities while the labeled set's
naive mean does not."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import labeler
from labeler import sources
from labeler.cli import cli
from labeler.errors import LabelError, RoleError
from labeler.estimate.routed import routed_mean, routing_weights
from labeler.labels import routing, routing_rules
from labeler.labels.queue import next_item, sync_queue
from labeler.labels.routing import Candidate, DayCounts, decide
from labeler.labels.routing_rules import Rules, check_rules
from labeler.labels.writes import set_status
from labeler.signals import normalise, unhappy
from tests.fake_tracestores import FakeStore, langsmith_trace, phoenix_trace

PX_KEY = "px-secret-key-0001"
ENV = {"PHOENIX_API_KEY": PX_KEY, "LANGSMITH_API_KEY": "lsv2_secret_key_0002"}
T0 = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
FAST = {"backoff": 0.0, "sleep": lambda s: None}


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


@pytest.fixture
def db(tmp_path):
    database = labeler.connect(tmp_path / "t.db")
    yield database
    database.close()


def unhappy_trace(n: int, start: str, how: str) -> list[dict]:
    """A Phoenix trace whose root carries a negative signal: ``metadata`` JSON or status ERROR."""
    spans = phoenix_trace(n, start)
    root = spans[1]
    if how == "metadata":
        root["attributes"]["metadata"] = json.dumps({"thumbs_down": True, "user": "u1"})
    else:
        root["status_code"] = "ERROR"
        root["status_message"] = "upstream timeout"
    return spans


def sync_px(db, traces: list[dict], *, now_min: float = 200, name: str = "px") -> sources.SyncResult:
    with FakeStore("phoenix", key=PX_KEY, page_size=50) as fake:
        fake.add(traces)
        if name not in {s.name for s in sources.list_sources(db)}:
            sources.add_source(db, "phoenix", name, url=fake.url, project="rag")
        else:
            db.execute("UPDATE sources SET url = ? WHERE name = ?", [fake.url, name])
            db.conn.commit()
        return sources.sync_source(db, name, env=ENV, secrets=Path("/nonexistent"),
                                   now=T0 + timedelta(minutes=now_min), **FAST)


def decisions(db) -> dict[str, tuple]:
    return {q: (bool(r), p, reason) for q, r, p, reason in db.execute(
        "SELECT q.query_id, d.routed, d.inclusion_prob, d.reason FROM routing_decisions d "
        "JOIN queries q ON q.pk = d.query_pk")}


# --- rules ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("values", "message"), [
    ({"rate": 1.5}, "routing rate 1.5 must be a number from 0 to 1"),
    ({"rate": "half"}, "routing rate 'half' must be a number from 0 to 1"),
    ({"daily_cap": 0}, "routing daily cap 0 must be a whole number >= 1"),
    ({"rate": 0.1, "rate_after_cap": 0.2}, "rate after the cap 0.2 must be a number from 0 to 0.1"),
    ({"rate": 0.1, "daily_cap": 5, "rate_after_cap": 0}, "must be above 0"),
    ({"quotas": {"x": 3}}, "quota topic 'x' is not a topic id"),
    ({"quotas": {"3": 0}}, "quota of topic 3 0 must be a whole number >= 1"),
    ({"new_topics": "yes"}, "new_topics 'yes' must be true or false"),
    ({"speed": 3}, "unknown routing rule(s) speed"),
])
def test_bad_rules_are_one_line_errors(values, message):
    with pytest.raises(LabelError) as e:
        check_rules(values)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_set_rules_keeps_what_is_not_given_and_is_for_leads(db):
    from labeler.accounts import add_user

    add_user(db, "lee", role="lead")
    add_user(db, "ann", role="annotator")
    assert routing_rules.get_rules(db) is None
    routing_rules.set_rules(db, rate=0.2, daily_cap=50, by="lee")
    rules = routing_rules.set_rules(db, quotas={3: 10}, by="lee")
    assert (rules.rate, rules.daily_cap, rules.quotas, rules.always_signals) == (0.2, 50, {3: 10}, True)
    assert routing_rules.set_rules(db, daily_cap=0, by="lee").daily_cap is None  # 0: no cap
    with pytest.raises(RoleError):
        routing_rules.set_rules(db, rate=1.0, by="ann")
    with pytest.raises(RoleError):
        routing_rules.clear_rules(db, by="ann")
    assert routing_rules.get_rules(db).rate == 0.2
    routing_rules.clear_rules(db, by="lee")
    assert routing_rules.get_rules(db) is None


# --- deciding (pure) --------------------------------------------------------------------------------------

def _cands(n: int, day: str = "2026-12-05", **kw) -> list[Candidate]:
    return [Candidate(i, f"q{i:05d}", day, **kw) for i in range(n)]


def test_decisions_are_deterministic_and_signals_always_in():
    rules = Rules(rate=0.1, seed=7)
    cands = _cands(500) + [Candidate(1000 + i, f"bad{i}", "2026-12-05", unhappy=True) for i in range(20)]
    first, again = decide(rules, cands), decide(rules, list(cands))
    assert first == again
    bad = [d for d in first if d.pk >= 1000]
    assert all(d.routed and d.inclusion_prob == 1.0 and d.reason == "signal" for d in bad)
    assert not all(d.routed for d in decide(Rules(rate=0.1, seed=8), cands) if d.pk < 1000) and \
        [d.routed for d in decide(Rules(rate=0.1, seed=8), cands)] != [d.routed for d in first]  # the seed matters
    off = decide(Rules(rate=0.1, always_signals=False, seed=7), cands)
    assert {d.reason for d in off if d.pk >= 1000} <= {"sampled", "not-sampled"}


def test_the_rate_is_honoured():
    n = 20000
    routed = sum(d.routed for d in decide(Rules(rate=0.05, seed=3), _cands(n)))
    # binomial(20000, 0.05): sd ~ 31
    assert abs(routed - 0.05 * n) < 4 * (n * 0.05 * 0.95) ** 0.5
    assert all(d.inclusion_prob == 0.05 for d in decide(Rules(rate=0.05), _cands(50)))


def test_the_daily_cap_lowers_the_rate_for_the_rest_of_the_day_and_records_it():
    rules = Rules(rate=0.5, daily_cap=30, rate_after_cap=0.01, seed=1)
    out = decide(rules, _cands(400) + _cands(400, day="2026-12-06"))
    for day in ("2026-12-05", "2026-12-06"):
        mine = [d for d in out if d.day == day]
        cut = next(i for i, d in enumerate(mine) if d.inclusion_prob == 0.01)
        assert sum(d.routed for d in mine[:cut]) == 30  # the rate drops right after the 30th
        assert all(d.inclusion_prob == 0.5 for d in mine[:cut])
        assert sum(d.routed for d in mine[cut:]) <= 12
    # signals are never capped, and a day's earlier decisions count
    counts = DayCounts({"2026-12-05": 30})
    later = decide(rules, [Candidate(1, "x", "2026-12-05", unhappy=True), *_cands(5)], counts)
    assert later[0].routed and later[0].reason == "signal"
    assert all(d.inclusion_prob == 0.01 for d in later[1:])


def test_quotas_route_the_first_n_of_a_topic_each_day_and_new_topics_all():
    rules = Rules(rate=0.0, quotas={3: 4}, new_topics=True)
    cands = [Candidate(i, f"q{i}", "2026-12-05", topic=3 if i % 2 else 5, far=i == 10) for i in range(20)]
    out = decide(rules, cands)
    assert [d.pk for d in out if d.reason == "quota"] == [1, 3, 5, 7]
    assert [d.pk for d in out if d.reason == "new-topic"] == [10]
    assert sum(d.routed for d in out) == 5 and all(d.inclusion_prob == 0.0 for d in out if not d.routed)


# --- signals from traces ----------------------------------------------------------------------------------

def test_the_file_readers_read_signals_from_span_metadata_and_status(db, tmp_path):
    path = tmp_path / "spans.jsonl"
    spans = unhappy_trace(1, at(1), "metadata") + unhappy_trace(2, at(2), "status") + phoenix_trace(3, at(3))
    path.write_text("\n".join(json.dumps(s) for s in spans) + "\n")
    labeler.ingest_logs(db, path, tool="phoenix")
    found = {q: unhappy(normalise(json.loads(m))) for q, m in db.execute("SELECT query_id, meta FROM queries")}
    assert found == {"000000000001bbbb": True, "000000000002bbbb": True, "000000000003bbbb": False}


def test_langsmith_run_errors_and_metadata_are_signals(db, tmp_path):
    runs = langsmith_trace(1, at(1)) + langsmith_trace(2, at(2))
    runs[1]["extra"] = {"metadata": {"thumbs": "down", "ls_provider": "openai"}}
    runs[3]["error"] = "RateLimitError: too many requests"
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in runs) + "\n")
    labeler.ingest_logs(db, path, tool="langsmith")
    metas = [json.loads(m) for (m,) in db.execute("SELECT meta FROM queries ORDER BY query_id")]
    assert [unhappy(normalise(m)) for m in metas] == [True, True]


# --- live: a sync routes, the queue follows ---------------------------------------------------------------

def test_a_sync_routes_signals_and_a_sample_and_the_queue_leaves_out_the_rest(db):
    routing_rules.set_rules(db, rate=0.25, seed=5)
    traces = [s for n in range(40) for s in phoenix_trace(n, at(n))]
    traces += unhappy_trace(100, at(50), "metadata") + unhappy_trace(101, at(51), "status")
    r = sync_px(db, traces)
    assert r.ok and r.new == 42, r.to_dict()
    got = decisions(db)
    assert len(got) == 42 and r.routing["signal"] == 2
    assert got["000000000064bbbb"] == (True, 1.0, "signal") and got["000000000065bbbb"] == (True, 1.0, "signal")
    sampled = [q for q, (routed, p, reason) in got.items() if reason == "sampled"]
    assert all(got[q][1] == 0.25 for q in sampled) and 2 <= len(sampled) <= 20
    assert "routed" in r.summary()
    sync_queue(db)
    queued = {q for (q,) in db.execute("SELECT q.query_id FROM queue u JOIN queries q ON q.pk = u.query_pk")}
    assert queued == {q for q, (routed, _, _) in got.items() if routed}
    # a re-sync of the same window decides nothing again
    again = sync_px(db, traces, now_min=201)
    assert again.ok and again.new == 0 and decisions(db) == got
    # the queue hands out routed items only
    handed = set()
    while (pk := next_item(db, "ann")) is not None:
        handed.add(db.execute("SELECT query_id FROM queries WHERE pk = ?", [pk]).fetchone()[0])
        set_status(db, pk, "ann", "skipped")
    assert handed == queued


def test_file_ingests_and_syncs_without_rules_are_not_routed(db, ingest_tiny):
    ingest_tiny(db, n=5)
    r = sync_px(db, [s for n in range(5) for s in phoenix_trace(n, at(n))])
    assert r.ok and r.new == 5 and r.routing == {}
    assert db.execute("SELECT count(*) FROM routing_decisions").fetchone()[0] == 0
    sync_queue(db)
    assert db.execute("SELECT count(*) FROM queue").fetchone()[0] == 10


def test_preview_decides_the_last_day_without_writing(db):
    sync_px(db, [s for n in range(30) for s in phoenix_trace(n, at(n))] + unhappy_trace(99, at(40), "metadata"))
    found = routing.preview(db, now=T0 + timedelta(hours=2), rules=Rules(rate=0.5, seed=2))
    assert found["queries"] == 31 and found["by_reason"]["signal"] == 1
    assert found["routed"] == sum(q["routed"] for q in found["queries_detail"])
    assert db.execute("SELECT count(*) FROM routing_decisions").fetchone()[0] == 0
    assert routing.preview(db, now=T0 + timedelta(days=3), rules=Rules(rate=0.5))["queries"] == 0


def test_cli_route_set_show_preview_and_errors(tmp_path):
    path = tmp_path / "c.db"
    runner = CliRunner()
    r = runner.invoke(cli, ["--db", str(path), "route", "set", "--rate", "0.1", "--daily-cap", "100",
                            "--quota", "3=20", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert (doc["rate"], doc["daily_cap"], doc["quotas"], doc["after_cap"]) == (0.1, 100, {"3": 20}, pytest.approx(0.01))
    r = runner.invoke(cli, ["--db", str(path), "route", "set", "--rate", "2"])
    assert r.exit_code == 1 and "routing rate 2.0 must be a number from 0 to 1" in r.output
    r = runner.invoke(cli, ["--db", str(path), "route", "set", "--quota", "three"])
    assert r.exit_code == 1 and "quota 'three' must be TOPIC=N" in r.output
    r = runner.invoke(cli, ["--db", str(path), "route", "show"])
    assert r.exit_code == 0 and "0.1 of the rest" in r.output
    r = runner.invoke(cli, ["--db", str(path), "route", "preview", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["queries"] == 0
    r = runner.invoke(cli, ["--db", str(path), "route", "preview", "--table"])
    assert r.exit_code == 0
    r = runner.invoke(cli, ["--db", str(path), "route", "clear"])
    assert r.exit_code == 0 and "every live query is queued" in r.output


# --- the estimates stay unbiased --------------------------------------------------------------------------

def test_routing_keeps_the_all_traffic_estimate_unbiased_and_the_naive_mean_is_not():
    """A synthetic population: 10% unhappy queries with a lower metric. Signals always + rate r for
    the rest, the cap lowering the rate mid-day; over many seeds the Horvitz-Thompson and Hajek
    means with the recorded probabilities hit the truth, the labeled set's mean does not."""
    rng = np.random.default_rng(0)
    n = 4000
    bad = rng.random(n) < 0.1
    y = np.where(bad, rng.beta(2, 5, n), rng.beta(5, 2, n))  # e.g. a query's recall@10
    truth = y.mean()
    cands = [Candidate(i, f"q{i:05d}", "2026-12-05" if i < n // 2 else "2026-12-06", unhappy=bool(bad[i]))
             for i in range(n)]
    ht, hajek, naive = [], [], []
    for seed in range(300):
        out = decide(Rules(rate=0.08, daily_cap=120, rate_after_cap=0.03, seed=seed), cands)
        pick = np.array([d.pk for d in out if d.routed])
        pi = np.array([d.inclusion_prob for d in out if d.routed])
        ht.append(routed_mean(y[pick], pi, population=n))
        hajek.append(routed_mean(y[pick], pi))
        naive.append(y[pick].mean())
    se = np.std(ht) / np.sqrt(len(ht))
    assert abs(np.mean(ht) - truth) < 3 * se + 1e-3, (np.mean(ht), truth, se)
    assert abs(np.mean(hajek) - truth) < 0.005
    assert truth - np.mean(naive) > 0.05  # the unhappy queries pull the labeled set's mean down


def test_routing_weights_read_the_recorded_probabilities(db):
    routing_rules.set_rules(db, rate=0.5, seed=4)
    sync_px(db, [s for n in range(20) for s in phoenix_trace(n, at(n))] + unhappy_trace(50, at(30), "status"))
    rows = db.execute("SELECT query_pk, inclusion_prob FROM routing_decisions WHERE routed = 1").fetchall()
    weights = routing_weights(db, [pk for pk, _ in rows])
    assert weights.tolist() == [1 / p for _, p in rows]
    assert 1.0 in weights.tolist() and 2.0 in weights.tolist()
    assert routing_weights(db, [10**6]).tolist() == [1.0]


# --- quotas and new topics, with real topics ------------------------------------------------------------

def test_a_sync_routes_quota_topics_and_new_topics_with_the_topic_model(db, write_log):
    from labeler.ingest import ingest_logs
    from labeler.topics import build_topics
    from tests import planted

    six = list(planted.TOPICS)[:6]
    old = planted.records(600, six, seed=1)
    ingest_logs(db, write_log(old))
    build_topics(db, k=6, seed=0)
    pk_of = dict(db.execute("SELECT query_id, pk FROM queries").fetchall())
    topic_of = dict(db.execute("SELECT query_pk, topic FROM query_topics").fetchall())
    votes: dict[int, dict[str, int]] = {}
    for r in old:
        t = topic_of[pk_of[r["query_id"]]]
        votes.setdefault(t, {}).setdefault(r["topic"], 0)
        votes[t][r["topic"]] += 1
    timesheet = max(votes, key=lambda t: votes[t].get("timesheet", 0))
    routing_rules.set_rules(db, rate=0.0, quotas={timesheet: 5}, new_topics=True, always_signals=True)
    new = planted.records(80, [*six, "garden"], seed=2, prefix="n", weights=[1, 1, 1, 1, 1, 3, 3])
    traces = [s for i, r in enumerate(new) for s in phoenix_trace(1000 + i, at(i * 0.5), question=r["question"])]
    res = sync_px(db, traces)
    assert res.ok and res.new == 80, res.to_dict()
    got = decisions(db)
    assert len(got) == 80
    assert res.routing["quota"] == 5  # the first 5 of the day of the under-covered topic
    assert {t for (t,) in db.execute("SELECT t.topic FROM routing_decisions d JOIN query_topics t "
                                     "ON t.query_pk = d.query_pk WHERE d.reason = 'quota'")} == {timesheet}
    garden = {f"{1000 + i:012x}bbbb" for i, r in enumerate(new) if r["topic"] == "garden"}
    routed_new = {q for q, (_, _, reason) in got.items() if reason == "new-topic"}
    assert len(routed_new & garden) >= 0.8 * len(garden) and len(routed_new - garden) <= 2
    assert all(p == 1.0 for routed, p, _ in got.values() if routed)


# --- no annotator gets a live query before it is decided --------------------------------------------------

def test_a_live_ingest_holds_its_queries_until_they_are_decided(db, monkeypatch):
    from labeler.ingest import logs as ingest_logs_module

    routing_rules.set_rules(db, rate=0.0, always_signals=True)
    sync_queue(db)  # a queue in use: the ingest brings it up to date itself
    seen_between = []
    decide_now = ingest_logs_module.route_ingest

    def late(database, ingest_id, **kw):  # another annotator asks for an item between commit and routing
        sync_queue(database)
        seen_between.append(database.execute("SELECT count(*) FROM queue").fetchone()[0])
        return decide_now(database, ingest_id, **kw)

    monkeypatch.setattr(ingest_logs_module, "route_ingest", late)
    r = sync_px(db, [s for n in range(6) for s in phoenix_trace(n, at(n))] + unhappy_trace(9, at(9), "status"))
    assert r.ok and r.new == 7 and r.routing == {"signal": 1, "not-sampled": 6}
    assert seen_between == [0]  # visible, but pending: nothing queued
    sync_queue(db)
    assert [q for (q,) in db.execute("SELECT q.query_id FROM queue u JOIN queries q ON q.pk = u.query_pk")] == \
        ["000000000009bbbb"]


def test_what_a_stopped_sync_left_pending_is_decided_by_the_next(db, monkeypatch):
    from labeler.ingest import logs as ingest_logs_module

    routing_rules.set_rules(db, rate=1.0)
    monkeypatch.setattr(ingest_logs_module, "route_ingest", lambda *a, **k: {})  # stopped before deciding
    assert sync_px(db, [s for n in range(4) for s in phoenix_trace(n, at(n))]).ok
    assert {reason for _, _, reason in decisions(db).values()} == {"pending"}
    sync_queue(db)
    assert db.execute("SELECT count(*) FROM queue").fetchone()[0] == 0
    monkeypatch.undo()
    assert sync_px(db, [], now_min=300).ok
    assert {reason for _, _, reason in decisions(db).values()} == {"sampled"}
    sync_queue(db)
    assert db.execute("SELECT count(*) FROM queue").fetchone()[0] == 4
    # rules removed meanwhile: what waits is released, as every live query is queued then
    routing_rules.set_rules(db, rate=0.5)
    monkeypatch.setattr(ingest_logs_module, "route_ingest", lambda *a, **k: {})
    assert sync_px(db, [s for n in range(10, 13) for s in phoenix_trace(n, at(350 + n))], now_min=400).new == 3
    routing_rules.clear_rules(db)
    monkeypatch.undo()
    assert sync_px(db, [], now_min=500).ok
    sync_queue(db)
    assert db.execute("SELECT count(*) FROM queue").fetchone()[0] == 7


def test_routed_labels_are_not_read_as_a_uniform_sample_by_the_all_traffic_estimates(db):
    from labeler.estimate.designs import PROBABILITY_DESIGNS, labeled_designs

    routing_rules.set_rules(db, rate=0.5, seed=1)
    sync_px(db, [s for n in range(12) for s in phoenix_trace(n, at(n))] + unhappy_trace(40, at(40), "metadata"))
    pks = []
    while (pk := next_item(db, "ann")) is not None:
        set_status(db, pk, "ann", "submitted")
        pks.append(pk)
    assert len(pks) == db.execute("SELECT count(*) FROM routing_decisions WHERE routed = 1").fetchone()[0] >= 2
    d = labeled_designs(db, np.array(sorted(pks)))
    assert set(d.design.tolist()) == {"routed"} and "routed" in PROBABILITY_DESIGNS  # weighted, never uniform
    # rules that route everything (rate 1) change nothing: the queue's own design stands
    routing_rules.set_rules(db, rate=1.0)
    db.execute("UPDATE routing_decisions SET inclusion_prob = 1, routed = 1")
    db.conn.commit()
    assert set(labeled_designs(db, np.array(sorted(pks))).design.tolist()) == {"random"}


# --- the store's own user feedback: Phoenix span annotations ---------------------------------------------

class AnnotatingPhoenix(FakeStore):
    """The fake Phoenix, also answering ``GET /v1/projects/{project}/span_annotations`` as Phoenix's
    ``routers/v1/annotations.py`` does: the annotations of the ``span_ids`` asked for, newest first,
    ``limit`` per page with ``next_cursor``."""

    def __init__(self, annotations: list[dict], **kw) -> None:
        super().__init__("phoenix", **kw)
        self.given = annotations  # (the fake keeps what labeler push sends in ``annotations``)
        self.asked: list[list[str]] = []

    def answer(self, method, path, query, body):
        if method == "GET" and path == f"/v1/projects/{self.project}/span_annotations":
            ids = query.get("span_ids") or []
            self.asked.append(ids)
            limit = int((query.get("limit") or ["10"])[-1])
            start = int((query.get("cursor") or ["0"])[-1])
            found = [a for a in self.given if a["span_id"] in ids]
            page = found[start:start + limit]
            more = start + limit < len(found)
            return 200, {"data": page, "next_cursor": str(start + limit) if more else None}
        return super().answer(method, path, query, body)


def annotation(span_id: str, name: str, *, label=None, score=None, kind: str = "HUMAN") -> dict:
    return {"id": f"U3BhbkFubm90YXRpb246{span_id}{name}", "span_id": span_id, "name": name,
            "annotator_kind": kind, "result": {"label": label, "score": score, "explanation": None},
            "metadata": {}, "identifier": "", "source": "API", "user_id": None,
            "created_at": "2026-12-05T09:30:00+00:00", "updated_at": "2026-12-05T09:30:00+00:00"}


def test_phoenix_annotations_by_people_are_signals_and_route(db):
    notes = [annotation(f"{1:012x}aaaa", "user_feedback", label="thumbs-down", score=0),  # on the root
             annotation(f"{2:012x}bbbb", "thumbs_down", score=1),  # on the retriever span
             annotation(f"{3:012x}aaaa", "rating", score=1),
             annotation(f"{4:012x}aaaa", "hallucination", label="hallucinated", score=1, kind="LLM"),
             annotation(f"{5:012x}aaaa", "user_feedback", label="thumbs-up", score=1),
             {**annotation(f"{6:012x}bbbb", "rating", score=0), "metadata": {"golden_set_version": 3}}]
    routing_rules.set_rules(db, rate=0.0)
    with AnnotatingPhoenix(notes, key=PX_KEY, page_size=50) as fake:
        fake.add([s for n in range(1, 7) for s in phoenix_trace(n, at(n))])
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag")
        r = sources.sync_source(db, "px", env=ENV, secrets=Path("/nonexistent"), now=T0 + timedelta(hours=2), **FAST)
    assert r.ok and r.new == 6, r.to_dict()
    assert fake.asked and all(len(ids) <= 100 for ids in fake.asked)
    routed = {q for q, (ok, _, reason) in decisions(db).items() if ok}
    # not: the LLM's evaluation, a thumbs up, labeler's own grade sent back by labeler push
    assert routed == {f"{n:012x}bbbb" for n in (1, 2, 3)}
    meta = json.loads(db.execute("SELECT meta FROM queries WHERE query_id = ?", [f"{1:012x}bbbb"]).fetchone()[0])
    assert meta["signals"] == {"user_feedback": "thumbs-down"}


def test_a_phoenix_without_annotations_syncs_as_before(db):
    routing_rules.set_rules(db, rate=1.0)
    r = sync_px(db, [s for n in range(3) for s in phoenix_trace(n, at(n))])  # the plain fake: 404
    assert r.ok and r.new == 3 and r.routing == {"sampled": 3}


# --- the store's own user feedback: LangSmith feedback ----------------------------------------------------

class FeedbackLangSmith(FakeStore):
    """The fake LangSmith, also answering ``GET /feedback?run=...&limit=&offset=`` as the SDK's
    ``list_feedback`` reads it: a list, paged by offset."""

    def __init__(self, feedback: list[dict], **kw) -> None:
        super().__init__("langsmith", **kw)
        self.given = feedback  # (the fake keeps what labeler push sends in ``feedback``)

    def answer(self, method, path, query, body):
        if method == "GET" and path == "/feedback":
            runs = set(query.get("run") or [])
            limit, offset = int(query["limit"][-1]), int(query["offset"][-1])
            return 200, [f for f in self.given if f["run_id"] in runs][offset:offset + limit]
        return super().answer(method, path, query, body)


def feedback(run_id: str, key: str, *, score=None, value=None, source: str = "api") -> dict:
    return {"id": f"f-{run_id}-{key}", "created_at": "2026-12-05T09:30:00", "modified_at": "2026-12-05T09:30:00",
            "run_id": run_id, "trace_id": run_id, "key": key, "score": score, "value": value, "comment": None,
            "correction": None, "feedback_source": {"type": source, "metadata": {}, "user_id": None}}


def test_langsmith_feedback_not_made_by_a_model_is_a_signal_and_routes(db):
    trace = "00000000-0000-4000-8000-{:012x}".format
    notes = [feedback(trace(1), "thumbs_down", score=1),  # on the root run
             feedback(trace(2), "user_rating", score=1),
             feedback(trace(3), "correctness", score=0, source="model"),
             feedback(trace(4), "thumbs_down", score=0),
             {**feedback(trace(5), "rating", score=0), "extra": {"golden_set_version": "v1"}}]
    routing_rules.set_rules(db, rate=0.0)
    with FeedbackLangSmith(notes, key=ENV["LANGSMITH_API_KEY"], page_size=50) as fake:
        fake.add([r for n in range(1, 6) for r in langsmith_trace(n, at(n))])
        sources.add_source(db, "langsmith", "ls", url=fake.url, project="rag")
        r = sources.sync_source(db, "ls", env=ENV, secrets=Path("/nonexistent"), now=T0 + timedelta(hours=2), **FAST)
    assert r.ok and r.new == 5, r.to_dict()
    routed = {q for q, (ok, _, _) in decisions(db).items() if ok}
    assert routed == {f"00000000-0000-4000-9000-{n:012x}" for n in (1, 2)}


def test_queries_are_decided_in_the_order_they_were_first_seen(db):
    routing_rules.set_rules(db, rate=0.0, quotas={7: 2})
    # query ids in the opposite order of their times
    rows = [(f"z{9 - i}", f"2026-12-05T0{i}:00:00Z") for i in range(5)]
    pks = []
    for qid, seen in rows:
        pks.append(db.execute("INSERT INTO queries (query_id, question, norm_question, origin, first_seen, created_at) "
                              "VALUES (?, ?, ?, 'log', ?, ?)", [qid, qid, qid, seen, seen]).lastrowid)
    db.conn.commit()
    got = [c.query_id for c in routing.candidates(db, routing_rules.get_rules(db), pks, at="2026-12-06T00:00:00Z")]
    assert got == ["z9", "z8", "z7", "z6", "z5"]
