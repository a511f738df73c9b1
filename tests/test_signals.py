"""labeler.signals: log fields mapped through aliases and --map signal.X=PATH, normalised; the queue's
signals_first order; metrics split into unhappy vs other questions."""

from __future__ import annotations

import pytest

import labeler
import labeler.labels as L
from labeler.ingest import ingest_logs, parse_mapping
from labeler.report.signals import signal_metrics
from labeler.signals import normalise, query_signals, signal_counts, unhappy
from tests.conftest import tiny_records
from tests.test_report import label

FIELDS = {
    "q000": {"thumbs_down": True},
    "q001": {"rating": 1},
    "q002": {"feedback": {"thumbs": "down", "comment": "wrong plan"}},
    "q003": {"escalated": "yes"},
    "q004": {"retry_count": 2},
    "q005": {"error": "timeout after 30 s"},
    "q006": {"rating": 5, "feedback": "great"},
    "q007": {"thumbs": "up"},
}


def records(n: int = 12) -> list[dict]:
    out = tiny_records(n)
    for r in out:
        r.update(FIELDS.get(r["query_id"], {}))
    return out


def pks(db) -> dict[str, int]:
    return dict(db.execute("SELECT query_id, pk FROM queries").fetchall())


def test_aliases_are_normalised(file_db, write_log):
    ingest_logs(file_db, write_log(records()))
    found = {qid: query_signals(file_db).get(pk) for qid, pk in pks(file_db).items()}
    assert found["q000"] == {"negative": True}
    assert found["q001"] == {"rating": 1.0}
    assert found["q002"] == {"negative": True, "feedback": "wrong plan"}
    assert found["q003"] == {"escalated": True}
    assert found["q004"] == {"retried": True}
    assert found["q005"] == {"error": True}
    assert found["q006"] == {"rating": 5.0, "feedback": "great"}
    assert found["q007"] == {"negative": False}
    assert found["q008"] is None and found["q011"] is None
    assert [q for q, s in found.items() if s and unhappy(s)] == [f"q00{i}" for i in range(6)]
    counts = signal_counts(file_db)
    assert (counts["queries_with_signals"], counts["unhappy"], counts["negative"], counts["rating"]) == (8, 6, 3, 2)


def test_map_names_a_signal_anywhere_in_the_record(file_db, write_log):
    recs = tiny_records(3)
    recs[0]["user"] = {"verdict": "bad", "stars": 2}
    recs[1]["user"] = {"verdict": "", "stars": 4}
    mapping = parse_mapping(["signal.negative=user.verdict", "signal.rating=user.stars"])
    ingest_logs(file_db, write_log(recs), mapping=mapping)
    found = query_signals(file_db)
    p = pks(file_db)
    assert found[p["q000"]] == {"negative": True, "rating": 2.0}
    assert found[p["q001"]] == {"negative": False, "rating": 4.0}
    assert p["q002"] not in found
    with pytest.raises(labeler.LabelerError, match="signal.negative"):
        parse_mapping(["signal.mood=user.verdict"])


@pytest.mark.parametrize(("meta", "expected"), [
    ({"thumbs": -1}, True), ({"vote": 1}, False), ({"rating": 0.2}, True), ({"rating": 0.9}, False),
    ({"rating": 3}, False), ({"rating": 2}, True), ({"error": None}, None), ({"error": ""}, False),
    ({"signals": {"escalated": 1}}, True), ({"metadata": {"retried": "false"}}, False),
])
def test_normalised_values(meta, expected):
    found = normalise(meta)
    assert (unhappy(found) if found else None) == expected


@pytest.mark.parametrize(("meta", "expected"), [
    # names match ignoring case, with - and spaces as _
    ({"Thumbs-Down": True}, {"negative": True}), ({"signals": {"User Rating": 1}}, {"rating": 1.0}),
    # a yes/no or a number under a name that means "the user was happy": false, 0 or less is negative
    ({"signals": {"user-feedback": False}}, {"negative": True}),
    ({"signals": {"user-feedback": True}}, {"negative": False}),
    ({"signals": {"user_feedback": 0}}, {"negative": True}), ({"feedback": -1}, {"negative": True}),
    ({"helpful": False}, {"negative": True}), ({"thumbs_up": 1}, {"negative": False}),
    # text under the same names stays feedback text
    ({"user_feedback": "thumbs-down"}, {"feedback": "thumbs-down", "negative": True}),
    ({"user_feedback": "slow but right"}, {"feedback": "slow but right"}),
    # a store's own feedback: a person's label "bad" under any name is negative, a model-ish name no matter
    ({"signals": {"quality": "bad"}}, {"negative": True}),
    ({"signals": {"quality": "good", "thumbs": "up"}}, {"negative": False}),
    ({"signals": {"thumbs": "up", "answer quality": "Negative"}}, {"negative": True}),
    # ... but only there: a log field named anything else with the text "bad" is no signal
    ({"quality": "bad"}, {}), ({"metadata": {"quality": "bad"}}, {}),
    ({"signals": {"hallucination": True}}, {}),
])
def test_names_votes_and_store_labels(meta, expected):
    assert normalise(meta) == expected


def test_queue_signals_first(file_db, write_log):
    labeler.set_setting(file_db, "overlap_fraction", 0)
    labeler.set_setting(file_db, "queue_order", "signals_first")
    ingest_logs(file_db, write_log(records()))
    by_pk = {v: k for k, v in pks(file_db).items()}
    order = []
    while (pk := L.next_item(file_db, "alice")) is not None:
        order.append(by_pk[pk])
        L.set_status(file_db, pk, "alice", "skipped")
    assert sorted(order[:6]) == [f"q00{i}" for i in range(6)]  # unhappy first
    assert sorted(order[6:8]) == ["q006", "q007"]  # then other signals
    assert sorted(order[8:]) == ["q008", "q009", "q010", "q011"]
    assert order[:6] != sorted(order[:6]) or order[8:] != sorted(order[8:])  # random (seeded) within a tier


def test_metrics_split_by_signal(file_db, write_log):
    ingest_logs(file_db, write_log(records(12)))
    for i in range(12):  # unhappy q000-q005: relevant chunk at rank 2; the others at rank 1
        qid = f"q{i:03d}"
        label(file_db, qid, {f"{qid}-c0": 0 if i < 6 else 3, f"{qid}-c1": 3 if i < 6 else 0})
    result = signal_metrics(file_db, specs=["recall@1", "mrr"])
    unhappy_g, others = result["groups"]["unhappy"], result["groups"]["others"]
    assert (unhappy_g["n_queries"], others["n_queries"]) == (6, 6)
    assert unhappy_g["metrics"]["recall@1"]["mean"] == 0.0 and unhappy_g["metrics"]["mrr"]["mean"] == 0.5
    assert others["metrics"]["recall@1"]["mean"] == 1.0
    assert others["metrics"]["mrr"]["ci_low"] == others["metrics"]["mrr"]["ci_high"] == 1.0
