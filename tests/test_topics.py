"""labeler.topics: clusters recover planted topics (purity, clean and with the noise of real logs:
typos, short questions, generic words; 6 and 12 topics), the --json says why that k, c-TF-IDF
labels (hand-computed weights; planted words, not generic ones), a held-out topic and a grown
topic show as drift (file and ingest), coverage numbers on a hand-made case, the CLI commands."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from click.testing import CliRunner

from labeler.cli import cli
from labeler.ingest import ingest_logs
from labeler.topics import TopicsError, build_topics, coverage, drift
from labeler.topics.ctfidf import ctfidf, ctfidf_terms
from tests import planted
from tests.test_report import label

SIX = list(planted.TOPICS)[:6]
NOISE = set(planted.FILLER) | set(planted.GENERIC)


def topics_of(db) -> tuple[list[str], list[int]]:
    rows = db.execute("SELECT q.meta, t.topic FROM query_topics t JOIN queries q ON q.pk = t.query_pk "
                      "ORDER BY q.pk").fetchall()
    return [json.loads(m)["topic"] for m, _ in rows], [t for _, t in rows]


@pytest.fixture
def traffic(file_db, write_log):
    ingest_logs(file_db, write_log(planted.records(1200, SIX, seed=1)))
    return file_db


def test_auto_k_recovers_the_planted_topics(traffic):
    summary = build_topics(traffic, seed=0)
    truth, found = topics_of(traffic)
    score = planted.purity(truth, found)
    print(f"planted 6 topics, k chosen {summary['k']}, purity {score:.3f}")
    assert 5 <= summary["k"] <= 7
    assert score >= 0.9
    # every topic is labeled by its most distinctive terms and a medoid that is one of its questions
    for t in summary["topics"]:
        assert len(t["terms"]) >= 3 and t["label"] == " · ".join(t["terms"][:3])
        planted_topic = max(SIX, key=lambda name: len(set(t["terms"]) & set(planted.TOPICS[name])))
        assert set(t["terms"][:3]) <= set(planted.TOPICS[planted_topic])
        assert t["medoid"] and t["questions"] > 0


def majority_topics(summary: dict, truth: list[str], found: list[int]) -> dict[int, str]:
    votes: dict[int, dict[str, int]] = {}
    for name, topic in zip(truth, found, strict=True):
        votes.setdefault(topic, {}).setdefault(name, 0)
        votes[topic][name] += 1
    return {t: max(v, key=v.__getitem__) for t, v in votes.items() if t >= 0}


def assert_labels_name_the_planted_topics(summary: dict, truth: list[str], found: list[int]) -> None:
    """Each topic's top 3 c-TF-IDF terms are words of its majority planted topic, never a filler
    or generic word that every topic's questions use."""
    majority = majority_topics(summary, truth, found)
    for t in summary["topics"]:
        if t["topic"] < 0:
            continue
        top = t["terms"][:3]
        assert len(top) == 3 and not set(top) & NOISE, t
        assert set(top) <= set(planted.VOCABULARY[majority[t["topic"]]]), (t, majority[t["topic"]])


def test_auto_k_recovers_six_noisy_topics_through_the_cli(file_db, db_path, write_log):
    # 100 questions of each of 6 topics with typos, 1-3 word questions and generic words: the
    # old rule (the first peak of the silhouette) made 40 topics of them
    ingest_logs(file_db, write_log(planted.balanced(100, SIX, seed=1)))
    out = CliRunner().invoke(cli, ["--db", str(db_path), "topics", "build", "--json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    truth, found = topics_of(file_db)
    score = planted.purity(truth, found)
    print(f"6 noisy topics: k chosen {summary['k']}, purity {score:.3f}")
    assert 5 <= summary["k"] <= 7 and score >= 0.8
    assert_labels_name_the_planted_topics(summary, truth, found)
    # why that k: the criterion, the score of every candidate, the chosen one (the best score)
    why = summary["k_choice"]
    assert why["rule"] == "ward-jump" and why["chosen"] == summary["k"] and "Ward" in why["criterion"]
    scores = {s["k"]: s["jump"] for s in why["scores"]}
    assert list(scores) == list(range(2, 41)) and max(scores, key=scores.__getitem__) == summary["k"]
    assert f"k={summary['k']}" in why["reason"]
    # the text output says it too
    shown = CliRunner().invoke(cli, ["--db", str(db_path), "topics", "show"])
    assert shown.exit_code == 0 and why["reason"] in shown.output


def test_auto_k_recovers_twelve_noisy_topics(file_db, write_log):
    ingest_logs(file_db, write_log(planted.records(2000, planted.TWELVE, seed=2, noisy=True)))
    summary = build_topics(file_db, seed=0)
    truth, found = topics_of(file_db)
    score = planted.purity(truth, found)
    print(f"12 noisy topics: k chosen {summary['k']}, purity {score:.3f}")
    assert 10 <= summary["k"] <= 14 and score >= 0.8
    assert_labels_name_the_planted_topics(summary, truth, found)
    assert summary["params"]["k_choice"] == summary["k_choice"]


def test_k_is_forced_with_k(file_db, db_path, write_log):
    ingest_logs(file_db, write_log(planted.balanced(100, SIX, seed=1)))
    out = CliRunner().invoke(cli, ["--db", str(db_path), "topics", "build", "--k", "9", "--json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    assert summary["k"] == 9 and len([t for t in summary["topics"] if t["topic"] >= 0]) == 9
    assert summary["k_choice"] == {"rule": "given", "criterion": "k given (--k)", "scores": [], "chosen": 9,
                                   "reason": "k=9 given with --k"}
    assert len(set(topics_of(file_db)[1]) - {-1}) == 9


def test_labels_are_distinctive_not_frequent(file_db, write_log):
    # "help" is in 40% of every topic's questions, each of a topic's 25 words in about 12%: by
    # mean TF-IDF (the old labels) "help" was among the top 3 terms; by c-TF-IDF it is in none
    rng = random.Random(5)
    words = {name: [*planted.TOPICS[name], *(f"{name}x{chr(97 + j)}" for j in range(15))] for name in SIX}
    recs = []
    for i in range(600):
        name = SIX[i % 6]
        text = " ".join(rng.sample(words[name], 3)) + (" help" if rng.random() < 0.4 else "")
        recs.append({"query_id": f"h{i}", "question": text, "topic": name, "retrieved": [{"id": "d", "text": "x"}]})
    ingest_logs(file_db, write_log(recs))
    summary = build_topics(file_db, k=6, seed=0)
    truth, found = topics_of(file_db)
    majority = majority_topics(summary, truth, found)
    for t in summary["topics"]:
        assert "help" not in t["terms"][:3] and set(t["terms"][:3]) <= set(words[majority[t["topic"]]]), t


def test_ctfidf_weights_by_hand():
    # terms: help, invoice, okta; topic 0 = questions 0, 1; topic 1 = question 2 (asked twice)
    counts = [[1, 2, 0], [1, 1, 0], [1, 0, 3]]
    weights = [1, 1, 2]
    # tf: topic 0 = [2, 3, 0]; topic 1 = 2 x [1, 0, 3] = [2, 0, 6]; f = [4, 3, 6];
    # words per topic 5 and 8, A = 6.5
    expected = np.array([[2 * math.log(1 + 6.5 / 4), 3 * math.log(1 + 6.5 / 3), 0],
                [2 * math.log(1 + 6.5 / 4), 0, 6 * math.log(1 + 6.5 / 6)]])
    assert ctfidf(counts, [0, 0, 1], 2, weights) == pytest.approx(expected)
    assert ctfidf_terms(counts, [0, 0, 1], 2, ["help", "invoice", "okta"], weights) == \
        [["invoice", "help"], ["okta", "help"]]
    # a question without a topic (-1) counts nowhere, not even in A and f
    assert ctfidf([*counts, [9, 9, 9]], [0, 0, 1, -1], 2, [*weights, 1]) == pytest.approx(expected)


def test_given_k_is_seeded_and_reproducible(traffic):
    first = build_topics(traffic, k=6, seed=3)
    assignment = topics_of(traffic)[1]
    again = build_topics(traffic, k=6, seed=3)
    assert [t["label"] for t in first["topics"]] == [t["label"] for t in again["topics"]]
    assert topics_of(traffic)[1] == assignment
    assert planted.purity(topics_of(traffic)[0], assignment) >= 0.95
    assert again["model"] == first["model"] + 1 and again["params"]["k_rule"] == "given"


def test_held_out_topic_and_a_grown_topic_show_as_drift(traffic, write_log):
    build_topics(traffic, k=6, seed=0)
    # new traffic: the garden topic was never seen, timesheet questions are 4x as frequent
    new = planted.records(300, [*SIX, "garden"], seed=2, prefix="n", weights=[1, 1, 1, 1, 1, 4, 3])
    path = write_log(new)
    report = drift(traffic, str(path))
    garden = [r for r in new if r["topic"] == "garden"]
    assert report["occurrences"] == 300 and report["far_share"] >= 0.8 * len(garden) / 300
    assert len(report["new_topics"]) == 1
    candidate = report["new_topics"][0]
    assert set(candidate["terms"][:3]) <= set(planted.TOPICS["garden"])
    assert candidate["questions"] >= 0.8 * len(garden)
    assert all(any(w in e for w in planted.TOPICS["garden"]) for e in candidate["examples"])
    grew = [t for t in report["topics"] if t["grew"]]
    assert len(grew) == 1 and set(grew[0]["label"].split(" · ")) <= set(planted.TOPICS["timesheet"])
    assert grew[0]["ci_low"] > grew[0]["baseline_share"] and grew[0]["ratio"] >= 1.5
    # the same file ingested: the ingest against the traffic before it says the same
    ingest_logs(traffic, path)
    by_ingest = drift(traffic, 2)
    assert by_ingest["source"] == "ingest 2" and by_ingest["occurrences"] == 300
    assert [t["label"] for t in by_ingest["topics"] if t["grew"]] == [grew[0]["label"]]
    assert [t["label"] for t in by_ingest["new_topics"]] == [candidate["label"]]


def test_traffic_like_the_old_shows_no_drift(traffic, write_log):
    build_topics(traffic, k=6, seed=0)
    report = drift(traffic, str(write_log(planted.records(300, SIX, seed=5, prefix="s"))))
    assert not any(t["grew"] for t in report["topics"]) and report["new_topics"] == []


def test_coverage_on_a_hand_made_case(file_db, write_log):
    # two subjects without a shared word: the topics cannot be in doubt
    billing = [" ".join(random.Random(i).sample(planted.TOPICS["billing"], 3)) for i in range(30)]
    sso = [" ".join(random.Random(100 + i).sample(planted.TOPICS["sso"], 3)) for i in range(10)]
    records = [{"query_id": f"b{i}", "question": q, "retrieved": [{"id": f"b{i}-1", "text": "x"},
                                                                    {"id": f"b{i}-2", "text": "y"}]}
               for i, q in enumerate(billing)]
    records += [{"query_id": f"s{i}", "question": q, "retrieved": [{"id": f"s{i}-1", "text": "x"}]}
                for i, q in enumerate(sso)]
    # sso's first question is logged 11 more times (lines without an id count as occurrences)
    records += [{"question": sso[0], "retrieved": [{"id": "s0-1", "text": "x"}]}] * 11
    ingest_logs(file_db, write_log(records))
    build_topics(file_db, k=2, seed=0)
    for i in range(6):  # 6 billing questions labeled: relevant chunk at rank 1 for 4, rank 2 for 2
        label(file_db, f"b{i}", {f"b{i}-1": 3 if i < 4 else 0, f"b{i}-2": 0 if i < 4 else 2})
    report = coverage(file_db, specs=["recall@1", "mrr"])
    topics = {frozenset(t["terms"]) & frozenset(planted.TOPICS["billing"]) != frozenset(): t for t in report["topics"]}
    b, s = topics[True], topics[False]
    assert report["logged_queries"] == 40 + 1 and report["occurrences"] == 30 + 10 + 11 + 1 - 1
    assert (b["queries"], b["occurrences"], s["occurrences"]) == (30, 30, 21)
    assert b["traffic_share"] == pytest.approx(30 / 51) and s["traffic_share"] == pytest.approx(21 / 51)
    assert (b["labeled"], b["golden_share"], s["labeled"], s["golden_share"]) == (6, 1.0, 0, 0.0)
    assert report["uncovered_share"] == pytest.approx(21 / 51) and report["uncovered_topics"] == [s["topic"]]
    assert b["n_measured"] == 6 and b["metrics"]["recall@1"]["mean"] == pytest.approx(4 / 6)
    assert b["metrics"]["mrr"]["mean"] == pytest.approx((4 + 2 * 0.5) / 6)
    assert b["metrics"]["mrr"]["ci_low"] <= b["metrics"]["mrr"]["mean"] <= b["metrics"]["mrr"]["ci_high"]
    assert s["metrics"] is None
    # a question logged after the build gets its topic when coverage runs
    ingest_logs(file_db, write_log([{"query_id": "late", "question": billing[0] + " later",
                                     "retrieved": [{"id": "z", "text": "z"}]}]))
    assert coverage(file_db)["topics"][0]["queries"] + coverage(file_db)["topics"][1]["queries"] == 42


def test_errors_name_the_fix(file_db, write_log):
    with pytest.raises(TopicsError, match="labeler topics build"):
        coverage(file_db)
    with pytest.raises(TopicsError, match="too few"):
        build_topics(file_db, k=3)
    ingest_logs(file_db, write_log(planted.records(40, SIX[:2], seed=1)))
    with pytest.raises(TopicsError, match="k must be"):
        build_topics(file_db, k=1)
    build_topics(file_db, k=2)
    with pytest.raises(TopicsError, match="ingest 9 not found"):
        drift(file_db, 9)


def test_build_is_for_leads(traffic):
    from labeler.accounts import add_user
    from labeler.errors import RoleError

    add_user(traffic, "bob", role="annotator")
    with pytest.raises(RoleError):
        build_topics(traffic, k=6, by="bob")


def test_cli_topics_coverage_drift(traffic, db_path, write_log):
    runner = CliRunner()
    out = runner.invoke(cli, ["--db", str(db_path), "topics", "build", "--k", "6", "--seed", "1", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["k"] == 6
    shown = runner.invoke(cli, ["--db", str(db_path), "topics", "show"])
    assert shown.exit_code == 0 and "6 topics" in shown.output
    cov = runner.invoke(cli, ["--db", str(db_path), "coverage", "--json"])
    assert cov.exit_code == 0 and json.loads(cov.stdout)["uncovered_share"] == pytest.approx(1.0)
    assert "not covered by any labeled question: 100.0%" in runner.invoke(cli, ["--db", str(db_path), "coverage"]).output
    path = write_log(planted.records(200, [*SIX, "garden"], seed=2, prefix="n"))
    text = runner.invoke(cli, ["--db", str(db_path), "drift", str(path)])
    assert text.exit_code == 0 and "new   " in text.output
    missing = runner.invoke(cli, ["--db", str(db_path), "drift", "nope.jsonl"])
    assert missing.exit_code == 1 and "no such file or ingest id" in missing.output


def test_two_held_out_topics_become_two_candidates(file_db, write_log):
    ingest_logs(file_db, write_log(planted.records(1000, SIX[:5], seed=1)))
    build_topics(file_db, k=5, seed=0)
    new = planted.records(300, [*SIX[:5], "timesheet", "garden"], seed=4, prefix="n", weights=[1, 1, 1, 1, 1, 3, 3])
    report = drift(file_db, str(write_log(new)))
    found = sorted(max(("timesheet", "garden"), key=lambda name: len(set(t["terms"]) & set(planted.TOPICS[name])))
                   for t in report["new_topics"])
    assert found == ["garden", "timesheet"]


def test_topics_with_the_embeddings_model(file_db, write_log):
    from labeler import llm
    from tests.fake_openai import FakeOpenAI

    # the fake model is a bag of hashed words without idf: template words would outweigh the topic
    # words, so these questions are topic words only
    rng = random.Random(3)
    recs = []
    for i in range(300):
        topic = rng.choice(SIX)
        recs.append({"query_id": f"e{i}", "question": " ".join(rng.sample(planted.TOPICS[topic], 3)), "topic": topic,
                     "retrieved": [{"id": f"{topic}-0", "text": "x"}]})
    ingest_logs(file_db, write_log(recs))
    traffic = file_db
    with FakeOpenAI() as server:
        config = llm.LLMConfig(base_url=server.url, api_key="k", embedding_model="fake-embed")
        summary = build_topics(traffic, k=6, seed=0, config=config)
        assert summary["method"] == "embeddings" and summary["params"]["embedding_model"] == "fake-embed"
        truth, found = topics_of(traffic)
        score = planted.purity(truth, found)
        print(f"embeddings (fake bag of hashed words): purity {score:.3f}")
        assert score >= 0.6  # the fake hashes 60 words into 64 dimensions: they collide
        assert all(t["terms"] for t in summary["topics"])  # labels still come from TF-IDF terms
        requests = server.stats()["embedding_requests"]
        build_topics(traffic, k=6, seed=0, config=config)  # every question's vector is cached
        assert server.stats()["embedding_requests"] == requests
        report = drift(traffic, str(write_log(planted.records(50, SIX, seed=9, prefix="e"))), config=config)
        assert report["occurrences"] == 50 and server.stats()["embedding_requests"] > requests
    with pytest.raises(TopicsError, match="embeddings model"):
        coverage(traffic)  # without the config the model's space cannot be rebuilt
