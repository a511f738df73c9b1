"""Queue order stratified (labeler.labels.strata) and the stratified all-traffic estimate
(labeler.estimate.ppi.stratified_ratio, labeler.estimate.stratified): topics filled in proportion to
traffic or a lead's targets, refusal without topics, the design recorded with its stratum, the
estimator against a hand computation and against PPI++ with one stratum, coverage by simulation, the
report end to end with mixed designs."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from click.testing import CliRunner

import labeler
import labeler.labels as labels
from labeler import accounts, judge
from labeler.cli import cli
from labeler.errors import LabelerError, LabelError
from labeler.estimate import ppi
from labeler.estimate.ppi import EstimateError
from labeler.estimate.report import all_traffic_report
from labeler.ingest import ingest_logs
from labeler.labels import strata
from labeler.topics import build_topics
from tests import planted
from tests.fake_openai import FakeOpenAI, grade_responder
from tests.test_judge import make_config

THREE = ["billing", "sso", "export"]


def three_topics(n: int, shares=(0.6, 0.3, 0.1), *, seed: int = 0) -> list[dict]:
    """``n`` records, exactly ``share * n`` of each planted topic, shuffled; questions of topic
    words only, so that the clustering recovers the topics exactly."""
    rng = random.Random(seed)
    topics = [t for t, s in zip(THREE, shares, strict=True) for _ in range(round(s * n))]
    rng.shuffle(topics)
    return [{"query_id": f"s{i:05d}", "question": " ".join(rng.sample(planted.TOPICS[t], 4)), "topic": t,
             "retrieved": [{"id": f"{t}-{j}", "text": f"{t} chunk {j}", "score": 1 - j / 10} for j in range(3)]}
            for i, t in enumerate(topics)]


@pytest.fixture
def traffic(file_db, write_log):
    labeler.set_setting(file_db, "overlap_fraction", 0)
    ingest_logs(file_db, write_log(three_topics(500)))
    build_topics(file_db, k=3, seed=1)
    rows = file_db.execute("SELECT q.meta, t.topic FROM query_topics t JOIN queries q ON q.pk = t.query_pk").fetchall()
    assert planted.purity([json.loads(m)["topic"] for m, _ in rows], [t for _, t in rows]) == 1.0
    return file_db


def planted_of(db, pk: int) -> str:
    return json.loads(db.execute("SELECT meta FROM queries WHERE pk = ?", [pk]).fetchone()[0])["topic"]


def topic_ids(db) -> dict[str, int]:
    """{planted topic: topic id} (the majority topic of its questions)."""
    out = {}
    for name in THREE:
        rows = db.execute("SELECT t.topic, count(*) FROM query_topics t JOIN queries q ON q.pk = t.query_pk "
                          "WHERE json_extract(q.meta, '$.topic') = ? GROUP BY t.topic ORDER BY 2 DESC", [name])
        out[name] = rows.fetchone()[0]
    return out


def take(db, n: int, annotator: str = "alice", status: str = "submitted") -> list[int]:
    got = []
    for _ in range(n):
        pk = labels.next_item(db, annotator)
        if pk is None:
            break
        labels.set_status(db, pk, annotator, status)
        got.append(pk)
    return got


def counts(db, pks) -> dict[str, int]:
    out = dict.fromkeys(THREE, 0)
    for pk in pks:
        out[planted_of(db, pk)] += 1
    return out


def test_order_fills_topics_in_proportion_to_traffic_and_records_the_stratum(traffic, db_path):
    result = CliRunner().invoke(cli, ["--db", str(db_path), "queue", "--order", "stratified", "--json"])
    assert result.exit_code == 0, result.output
    shares = json.loads(result.output)["shares"]
    assert sorted(round(v, 2) for v in shares.values()) == [0.1, 0.3, 0.6]
    got = take(traffic, 30)
    c = counts(traffic, got)
    assert abs(c["billing"] - 18) <= 1 and abs(c["sso"] - 9) <= 1 and abs(c["export"] - 3) <= 1, c
    # every hand-out recorded under design stratified with its topic and the topic model
    model = traffic.execute("SELECT max(id) FROM topic_models").fetchone()[0]
    rows = traffic.execute("SELECT d.query_pk, d.design, d.stratum, d.topic_model, t.topic FROM queue_designs d "
                           "JOIN query_topics t ON t.query_pk = d.query_pk").fetchall()
    assert len(rows) == 30
    assert all(design == "stratified" and stratum == topic and m == model for _, design, stratum, m, topic in rows)
    # within a topic, the queue follows the seeded random order of the query ids (the random order's hash)
    ids = topic_ids(traffic)
    billing = [pk for pk in got if planted_of(traffic, pk) == "billing"]
    keys = dict(traffic.execute("SELECT query_pk, sort_key FROM queue").fetchall())
    assert [keys[p] for p in billing] == sorted(keys[p] for p in billing)
    assert all(strata.stratum_of_key(keys[p]) == ids["billing"] for p in billing)


def test_a_skipped_item_keeps_its_topic_due(traffic):
    labeler.set_setting(traffic, "queue_order", "stratified")
    take(traffic, 20)
    before = strata.handed_counts(traffic.conn)
    skipped = take(traffic, 1, status="skipped")
    assert strata.handed_counts(traffic.conn) == before  # a skip does not count as labeled
    again = labels.next_item(traffic, "bob")
    assert planted_of(traffic, again) == planted_of(traffic, skipped[0])


def test_lead_targets_override_the_traffic_shares(traffic, db_path):
    ids = topic_ids(traffic)
    args = ["--db", str(db_path), "queue", "--order", "stratified", "--target", f"{ids['sso']}=1",
            "--target", f"{ids['export']}=1"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "lead's targets" in result.output
    c = counts(traffic, take(traffic, 20))
    assert c == {"billing": 0, "sso": 10, "export": 10}, c
    # a topic left out of the targets comes only once the targeted ones are exhausted
    assert strata.stratum_order({1: 0.5, 2: 0.5}, {1: 9, 2: 30}, [0, 1, 2]) == [1, 2, 0]
    # the setter is lead-only and checks its input
    accounts.add_user(traffic, "lena", "lead", password="lena-password")
    accounts.add_user(traffic, "ann", "annotator", password="ann-password")
    with pytest.raises(LabelerError, match="lead"):
        strata.set_stratified_targets(traffic, {ids["sso"]: 1}, by="ann")
    with pytest.raises(LabelError, match="not in the current topic model"):
        strata.set_stratified_targets(traffic, {99: 1})
    with pytest.raises(LabelError, match="TOPIC=SHARE"):
        strata.parse_targets(["sso:1"])
    assert strata.set_stratified_targets(traffic, None) is None  # back to traffic shares
    assert labeler.db.get_setting(traffic, "stratified_targets") is None


def test_refused_without_topics(file_db, db_path, write_log):
    ingest_logs(file_db, write_log(three_topics(50)))
    result = CliRunner().invoke(cli, ["--db", str(db_path), "queue", "--order", "stratified"])
    assert result.exit_code == 1
    assert "labeler topics build" in result.output and "Traceback" not in result.output
    assert labeler.db.get_setting(file_db, "queue_order") == "random"
    with pytest.raises(LabelError, match="labeler topics build"):
        strata.require_topics(file_db)


def test_queries_that_arrived_after_the_build_form_their_own_stratum(traffic, write_log):
    new = three_topics(100, seed=5)
    for r in new:
        r["query_id"] = "new" + r["query_id"]
    ingest_logs(traffic, write_log(new))
    labeler.set_setting(traffic, "queue_order", "stratified")
    got = take(traffic, 12)
    recorded = [traffic.execute("SELECT stratum FROM queue_designs WHERE query_pk = ?", [p]).fetchone()[0]
                for p in got]
    # 100 of 600 occurrences: 2 of 12 hand-outs
    assert recorded.count(strata.UNASSIGNED) == 2


# --- the estimator -------------------------------------------------------------------------------------------

def test_one_stratum_is_exactly_ppi_plus_plus():
    rng = np.random.default_rng(3)
    b_all = (rng.uniform(size=400) < 0.8).astype(float)
    bh_all = np.where(rng.uniform(size=400) < 0.9, b_all, 1 - b_all)
    a_all = rng.uniform(size=400) * b_all
    ah_all = np.clip(a_all + rng.normal(0, 0.1, 400), 0, 1) * bh_all
    lab = np.zeros(400, dtype=bool)
    lab[rng.choice(400, 60, replace=False)] = True
    one = (a_all[lab], ah_all[lab], ah_all[~lab], b_all[lab], bh_all[lab], bh_all[~lab])
    est, parts = ppi.stratified_ratio([one])
    ref = ppi.ppi_ratio(*one)
    for field in ("estimate", "se", "ci_low", "ci_high", "lam", "n", "N", "effective_n"):
        assert getattr(est, field) == pytest.approx(getattr(ref, field), abs=1e-12), field
    assert parts.weights == (1.0,)
    mean, _ = ppi.stratified_ratio([one[:3] + (None, None, None)])
    assert mean.estimate == pytest.approx(ppi.ppi_mean(*one[:3]).estimate, abs=1e-12)


def test_stratified_mean_by_hand():
    # stratum 1: 4 queries, 2 labeled; stratum 2: 6 queries, 3 labeled; lam fixed at 1 (plain PPI)
    s1 = (np.array([1.0, 0.0]), np.array([1.0, 1.0]), np.array([1.0, 0.0]), None, None, None)
    s2 = (np.array([0.5, 0.5, 1.0]), np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.0, 1.0]), None, None, None)
    est, parts = ppi.stratified_ratio([s1, s2], lam=1.0)
    # stratum means: 1 = mean(1, 0) + mean(0, -1) = 0; 2 = 1/3 + mean(0.5, 0, 0) = 1/2
    assert parts.weights == pytest.approx((0.4, 0.6))
    assert est.estimate == pytest.approx(0.4 * 0.0 + 0.6 * 0.5)
    # var_1 = var(1, 0) / 2 + var(0, -1) / 2 = 1/8 + 1/8; var_2 = var(0, 0, 1) / 3 + var(.5, 0, 0) / 3
    var1 = 0.25 / 2 + 0.25 / 2
    var2 = (2 / 9) / 3 + (1 / 18) / 3
    assert est.se == pytest.approx(math.sqrt(0.4 ** 2 * var1 + 0.6 ** 2 * var2))
    assert (est.n, est.N) == (5, 10)
    human, _ = ppi.stratified_ratio([s1, s2], lam=0.0)
    assert human.estimate == pytest.approx(0.4 * 0.5 + 0.6 * (2 / 3))


def test_stratum_with_one_label_refuses():
    s1 = (np.array([1.0]), np.array([1.0]), np.array([1.0, 0.0]), None, None, None)
    s2 = (np.array([0.5, 0.5]), np.array([0.0, 0.5]), np.array([0.0]), None, None, None)
    with pytest.raises(EstimateError, match="at least 2"):
        ppi.stratified_ratio([s1, s2])


def test_stratified_ci_covers_the_truth_in_simulation():
    rng = np.random.default_rng(2026)
    sizes, means, alloc = (600, 300, 100), (0.2, 0.5, 0.8), (24, 12, 8)
    covered = 0
    sims = 500
    for _ in range(sims):
        parts, truth = [], 0.0
        for n_h, m_h, k_h in zip(sizes, means, alloc, strict=True):
            y = np.clip(rng.normal(m_h, 0.2, n_h), 0, 1)
            yhat = np.clip(y + rng.normal(0.1, 0.15, n_h), 0, 1)  # a biased, noisy judge
            truth += y.sum()
            lab = np.zeros(n_h, dtype=bool)
            lab[rng.choice(n_h, k_h, replace=False)] = True
            parts.append((y[lab], yhat[lab], yhat[~lab], None, None, None))
        est, _ = ppi.stratified_ratio(parts)
        covered += est.ci_low <= truth / sum(sizes) <= est.ci_high
    print(f"stratified CI coverage {covered / sims:.3f} over {sims} sets")
    assert covered / sims >= 0.93


# --- the report end to end -------------------------------------------------------------------------------

def true_grade(question: str, chunk: str) -> int:
    j = int(chunk.rsplit(" ", 1)[1])
    base = {"billing": 3, "sso": 2, "export": 1}[chunk.split(" ")[0]]
    return min(3, max(0, base - j + (len(question) % 2)))


def test_report_weights_by_stratum_and_handles_mixed_designs(traffic, db_path, monkeypatch):
    with FakeOpenAI() as server:
        server.responder = grade_responder(
            lambda q, c: (true_grade(q, c) + (len(q) % 3 == 0)) % 4 if c and c[-1].isdigit() else None)
        labeler.set_setting(traffic, "queue_order", "random")
        take_graded(traffic, 6)
        labeler.set_setting(traffic, "queue_order", "stratified")
        take_graded(traffic, 40)
        run = judge.run_judge(traffic, make_config(server), "relevance.v1", on="all")
    rep = all_traffic_report(traffic, run.id, ["ndcg@10", "hit@5"])
    out = rep.to_dict()
    assert out["design"] == "stratified" and out["n_labeled"] == 40 and out["labels_left_out"] == 6
    assert any("outside the design" in n for n in out["notes"])
    assert sorted(s["judged"] for s in out["strata"]) == [50, 150, 300]
    assert sum(s["weight"] for s in out["strata"]) == pytest.approx(1.0)
    assert sum(s["labeled"] for s in out["strata"]) == 40
    for v in out["metrics"].values():
        if "lambda" in v:
            assert v["ci_low"] <= v["estimate"] <= v["ci_high"]
    # the Metrics page's section says how it was estimated
    from tests.test_app_all_traffic import estimates_table, metrics_page

    monkeypatch.setenv("LABELER_DB", str(db_path))
    page = metrics_page()
    assert any("stratified PPI++" in c.value and "3 topics" in c.value for c in page.caption)
    assert len(estimates_table(page)) >= 2
    # the uniform design uses only the 6 labels drawn at random
    uniform = all_traffic_report(traffic, run.id, ["ndcg@10"], design="uniform")
    assert uniform.design == "uniform" and uniform.n_labeled == 6 and uniform.ignored == 40
    # rebuilding the topics makes other strata: the stratified labels are refused, saying why
    build_topics(traffic, k=3, seed=2)
    with pytest.raises(EstimateError, match="topic model"):
        all_traffic_report(traffic, run.id, ["ndcg@10"], design="stratified")


def test_report_refuses_a_topic_short_of_labels(traffic):
    ids = topic_ids(traffic)
    strata.set_stratified_targets(traffic, {ids["billing"]: 1})
    labeler.set_setting(traffic, "queue_order", "stratified")
    with FakeOpenAI() as server:
        server.responder = grade_responder(lambda q, c: true_grade(q, c) if c and c[-1].isdigit() else None)
        take_graded(traffic, 8)
        run = judge.run_judge(traffic, make_config(server), "relevance.v1", on="all")
    with pytest.raises(EstimateError, match=f"topic {ids['sso']}: 150 judged, 0 labeled"):
        all_traffic_report(traffic, run.id, ["ndcg@10"])
    result = CliRunner().invoke(cli, ["--db", traffic.conn.execute("PRAGMA database_list").fetchone()[2],
                                      "metrics", "--all-traffic", "--judge-run", str(run.id), "--design",
                                      "stratified"])
    assert result.exit_code == 1 and "every topic needs 2 labels" in result.output


def take_graded(db, n: int, annotator: str = "alice") -> None:
    for _ in range(n):
        pk = labels.next_item(db, annotator)
        item = labels.get_item(db, pk, annotator)
        for c in item.chunks:
            labels.set_grade(db, pk, c.doc_pk, annotator, true_grade(item.question, c.text))
        labels.set_status(db, pk, annotator, "submitted")


def test_settings_page_stratified_order_needs_topics_then_takes_targets(file_db, db_path, write_log, monkeypatch):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from labeler.app import state

    ingest_logs(file_db, write_log(three_topics(100)))
    monkeypatch.setenv("LABELER_DB", str(db_path))
    at = AppTest.from_file(str(Path(labeler.__file__).parent / "app" / "streamlit_app.py"), default_timeout=60)
    at.session_state[state.ANNOTATOR] = "alice"
    at.run()
    at.switch_page("views/settings.py").run()
    assert not at.exception, at.exception
    at.selectbox(key="set_order").set_value("stratified")
    at.button(key="FormSubmitter:settings_form-Save settings").click().run()
    assert any("labeler topics build" in e.value for e in at.error), [e.value for e in at.error]
    assert labeler.db.get_setting(file_db, "queue_order") == "random"  # refused before anything changed
    build_topics(file_db, k=3, seed=1)
    at.selectbox(key="set_order").set_value("stratified")
    at.text_input(key="set_stratified_targets").set_value("0=3, 1=1")
    at.button(key="FormSubmitter:settings_form-Save settings").click().run()
    assert not at.error, [e.value for e in at.error]
    assert labeler.db.get_setting(file_db, "queue_order") == "stratified"
    assert labeler.db.get_setting(file_db, "stratified_targets") == {"0": 0.75, "1": 0.25}
