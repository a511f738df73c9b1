"""Estimates from routed labels (issue 27): the labeled set routing draws (negative signals always, a
rate for the rest) is weighted by 1 / inclusion probability in the labeled report's weighted
figures (labeler.estimate.weighted), the all-traffic ``routed`` design and the stratified design
under routing (labeler.estimate.routed_report). Checked: the estimators by hand and by simulation
with a daily cap; the reports the Metrics page calls over 200 routing seeds on a real database (the
labeled set's plain mean is far off, the weighted ones hit the truth and their CIs cover it); the
CLI and the Metrics page on a database built by ``labeler route set`` and a sync; mixed designs."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

import numpy as np
import pytest
from click.testing import CliRunner

import labeler
import labeler.labels as labels
from labeler import judge
from labeler.app.widgets import escape_markdown
from labeler.cli import cli
from labeler.estimate import ppi
from labeler.estimate.ppi import EstimateError
from labeler.estimate.report import all_traffic_report
from labeler.estimate.routed import hajek_ratio, routed_mean, routed_sample, weighted_stratified_ratio
from labeler.ingest import ingest_logs
from labeler.labels import routing, routing_rules
from labeler.labels.routing import Candidate, decide
from labeler.labels.routing_rules import Rules
from labeler.report import retrieval_report
from labeler.topics import build_topics
from tests import planted
from tests.fake_openai import FakeOpenAI, grade_responder
from tests.fake_tracestores import phoenix_trace
from tests.test_judge import make_config
from tests.test_routing import at, sync_px, unhappy_trace

# --- the estimators --------------------------------------------------------------------------------------


def test_hajek_ratio_by_hand_and_as_the_one_stratum_weighted_estimate():
    a = np.array([0.2, 0.9, 0.5, 0.0, 0.7])
    b = np.array([1.0, 1.0, 1.0, 0.0, 1.0])
    pi = np.array([1.0, 0.1, 0.1, 0.25, 0.5])
    w = 1 / pi
    theta = (w * a).sum() / (w * b).sum()
    var = ((1 - pi) * w ** 2 * (a - theta * b) ** 2).sum() / (w * b).sum() ** 2
    est = hajek_ratio(a, b, pi)
    assert est.estimate == pytest.approx(theta) and est.se == pytest.approx(np.sqrt(var))
    assert est.ci_low == pytest.approx(theta - ppi.Z95 * np.sqrt(var)) and est.N == round(w.sum())
    assert hajek_ratio(a, None, pi).estimate == pytest.approx(routed_mean(a, pi))
    # a census (every probability 1) has no sampling variance
    assert hajek_ratio(a, b, np.ones(5)).se == 0.0
    # the same with the stratified estimator: one stratum, no judge (unlabeled queries are not read)
    xi = np.array([True] * 5 + [False] * 3)
    full = np.r_[a, [np.nan] * 3]
    one, _ = weighted_stratified_ratio([(full, None, np.r_[b, [np.nan] * 3], None, np.r_[pi, [0.5] * 3], xi)])
    assert one.estimate == pytest.approx(theta) and one.se == pytest.approx(np.sqrt(var)) and one.lam == 0.0
    with pytest.raises(EstimateError, match="needs 2 in each"):
        weighted_stratified_ratio([(full, None, None, None, np.r_[pi, [0.5] * 3], np.r_[True, [False] * 7])])


def test_with_a_perfect_judge_the_weighted_stratified_estimate_is_the_truth():
    rng = np.random.default_rng(3)
    y = rng.uniform(size=400)
    xi = rng.uniform(size=400) < 0.1
    pi = np.full(400, 0.1)
    stratum = (np.where(xi, y, np.nan), y, None, None, pi, xi)
    est, _ = weighted_stratified_ratio([stratum], lam=1.0)
    # no correction left: the standard error is the judge's part alone, var / N as in stratified_ratio
    assert est.estimate == pytest.approx(y.mean()) and est.se == pytest.approx(np.std(y) / np.sqrt(400))
    # tuned, it trusts the judge about as PPI++ does, 1 / (1 + n/N) (the judge's own variance counts)
    _, parts = weighted_stratified_ratio([stratum])
    assert 0.8 < parts.lams[0] < 1


def _shares(pi: np.ndarray, xi: np.ndarray, keys: list[tuple]) -> np.ndarray:
    """The probability of being labeled: recorded probability x the labeled share of its class."""
    out = pi.copy()
    cls: dict[tuple, list[int]] = {}
    for i, k in enumerate(keys):
        if k is not None:
            cls.setdefault(k, []).append(i)
    for members in cls.values():
        m = np.array(members)
        out[m[xi[m]]] = pi[m[xi[m]]] * xi[m].mean()
    return out


def test_weighted_estimators_are_unbiased_and_cover_under_a_daily_cap_and_partial_labeling():
    """2,000 queries over two days, 10% unhappy with a lower metric; signals always, 8% of the rest
    until 60 a day, 3% after; labeled: all signals, all sampled after the cap (a class of a few per
    topic: the estimates refuse a class without a label) and 70% of the others. Over 300 routing seeds the
    plain mean of the labeled set is off by > 0.15; the Hajek, the active-inference and the
    stratified weighted estimates hit the truth within Monte Carlo error and cover it >= 92%."""
    rng = np.random.default_rng(0)
    n = 2000
    bad = rng.random(n) < 0.1
    topic = rng.integers(0, 3, n)
    rel = rng.random(n) < np.where(bad, 0.5, 0.9)  # has a relevant chunk
    y = np.where(bad, rng.beta(2, 5, n), rng.beta(5, 2, n)) * rel
    yhat = np.clip(y + rng.normal(0.1, 0.15, n), 0, 1) * rel  # a biased, noisy judge
    truth = y.sum() / rel.sum()
    cands = [Candidate(i, f"q{i:05d}", "2026-12-05" if i < n // 2 else "2026-12-06", unhappy=bool(bad[i]))
             for i in range(n)]
    got: dict[str, list[float]] = {k: [] for k in ("plain", "hajek", "active", "stratified")}
    covered = dict.fromkeys(got, 0)
    sims = 300
    for seed in range(sims):
        out = decide(Rules(rate=0.08, daily_cap=60, rate_after_cap=0.03, seed=seed), cands)
        routed = np.array([d.routed for d in out])
        prob = np.array([d.inclusion_prob for d in out])
        reason = [d.reason for d in out]
        labeled = np.random.default_rng(10**6 + seed).random(n) < 0.7
        xi = routed & (np.array([r == "signal" for r in reason]) | (prob < 0.08) | labeled)
        pi = _shares(prob, xi, [(r, p) if ok else None for r, p, ok in zip(reason, prob, routed, strict=True)])
        pi_t = _shares(prob, xi, [(t, r, p) if ok else None
                                  for t, r, p, ok in zip(topic, reason, prob, routed, strict=True)])
        a, b = np.where(xi, y, 0.0), np.where(xi, rel, 0.0).astype(float)
        plain = y[xi].sum() / rel[xi].sum()
        half = 1.96 * np.std(y[xi & rel], ddof=1) / np.sqrt((xi & rel).sum())
        ests = {"plain": (plain, plain - half, plain + half)}
        e = hajek_ratio(y[xi], rel[xi].astype(float), pi[xi])
        ests["hajek"] = (e.estimate, e.ci_low, e.ci_high)
        e = ppi.active_ratio(a, yhat, b, rel.astype(float), pi, xi)
        ests["active"] = (e.estimate, e.ci_low, e.ci_high)
        e, _ = weighted_stratified_ratio([(a[topic == t], yhat[topic == t], b[topic == t], rel[topic == t] * 1.0,
                                           pi_t[topic == t], xi[topic == t]) for t in range(3)])
        ests["stratified"] = (e.estimate, e.ci_low, e.ci_high)
        for k, (est, low, high) in ests.items():
            got[k].append(est)
            covered[k] += low <= truth <= high
    summary = {k: (round(np.mean(v) - truth, 4), round(np.std(v) / np.sqrt(sims), 4), covered[k] / sims)
               for k, v in got.items()}
    print(f"truth {truth:.4f}; (bias, Monte Carlo se, coverage): {summary}")
    assert np.mean(got["plain"]) < truth - 0.15 and covered["plain"] / sims < 0.05
    for k in ("hajek", "active", "stratified"):
        bias, mcse, cover = summary[k]
        assert abs(bias) < 3 * mcse + 1e-3, (k, summary[k])
        assert cover >= 0.92, (k, summary[k])


# --- the reports over 200 routing seeds (the Metrics page's calls) ----------------------------------------

N_SIM = 450
T_SIM = datetime(2026, 12, 5, 12, tzinfo=UTC)


def sim_records() -> list[dict]:
    """Questions of the three planted topics, 12% of them with a thumbs down."""
    rng = random.Random(5)
    names = list(planted.TOPICS)
    out = []
    for i in range(N_SIM):
        words = " ".join(rng.sample(planted.TOPICS[names[i % 3]], 4))
        record = {"query_id": f"r{i:04d}", "question": f"{words} number {i}?", "timestamp": "2026-12-05T09:00:00Z",
                  "retrieved": [{"id": f"r{i:04d}-{j}", "text": f"chunk {j} of query {i}", "score": 1 - j / 10}
                                for j in range(3)]}
        if rng.random() < 0.12:
            record["thumbs_down"] = True
        out.append(record)
    return out


def sim_grade(unhappy: set[str]):
    """The true grade of a chunk: an unhappy query's answer sits deep, if anywhere."""

    def grade(question: str, chunk: str) -> int:
        words = chunk.split()
        i, j = int(words[4]), int(words[1])
        rng = random.Random(f"g{i}:{j}")
        if question in unhappy:
            return [0, rng.choice([0, 1]), rng.choice([0, 2, 3])][j]
        return [rng.choice([0, 1, 2, 3, 3]), rng.choice([0, 1, 2, 3]), rng.choice([0, 1, 2])][j]

    return grade


def test_reports_stay_unbiased_under_routing_over_200_seeds(file_db, write_log):
    """Every query of the traffic is graded once (the truth); per routing seed the rules decide the
    traffic afresh (signals always, 15% of the rest), the labels of all signals and of a random 75%
    of the sampled are the submitted ones, and the Metrics page's calls estimate nDCG@10: the
    labeled report's weighted figure (no judge), the all-traffic routed and stratified designs
    (a judge right 70% of the time)."""
    db = file_db
    records = sim_records()
    truth_of = sim_grade({r["question"] for r in records if r.get("thumbs_down")})
    ingest_logs(db, write_log(records))
    build_topics(db, k=3, seed=1)
    pks = [r[0] for r in db.execute("SELECT pk FROM queries ORDER BY pk")]
    for pk in pks:  # every query graded through the library's writes: the truth, and the labels to draw from
        item = labels.get_item(db, pk, "alice")
        for c in item.chunks:
            labels.set_grade(db, pk, c.doc_pk, "alice", truth_of(item.question, c.text))
        labels.set_status(db, pk, "alice", "submitted")
    truth = retrieval_report(db, ["ndcg@10"], n_resamples=10).metrics["ndcg@10"]["mean"]

    def noisy(question: str, chunk: str) -> int | None:
        if not chunk.startswith("chunk"):
            return None
        rng = random.Random(f"judge:{question}:{chunk}")
        return truth_of(question, chunk) if rng.random() < 0.7 else rng.randrange(4)

    with FakeOpenAI() as server:
        server.responder = grade_responder(noisy)
        run = judge.run_judge(db, make_config(server), "relevance.v1", on="all")
    routing_rules.set_rules(db, rate=0.15, seed=0)
    got: dict[str, list[float]] = {k: [] for k in ("plain", "labeled", "routed", "stratified")}
    covered = dict.fromkeys(got, 0)
    sims = 200
    for seed in range(sims):
        db.execute("DELETE FROM routing_decisions")
        db.conn.commit()
        routing_rules.set_rules(db, seed=seed)
        routing.route_queries(db, pks, now=T_SIM)
        rng = random.Random(seed)
        chosen = [pk for pk, reason in db.execute("SELECT query_pk, reason FROM routing_decisions WHERE routed = 1")
                  if reason == "signal" or rng.random() < 0.75]
        db.execute("UPDATE query_labels SET status = CASE WHEN query_pk IN (SELECT value FROM json_each(?)) "
                   "THEN 'submitted' ELSE 'in_progress' END", [json.dumps(chosen)])
        db.conn.commit()
        routed = all_traffic_report(db, run.id, ["ndcg@10"]).to_dict()
        assert routed["design"] == "routed"
        stratified = all_traffic_report(db, run.id, ["ndcg@10"], design="stratified").metrics["ndcg@10"]
        weighted = retrieval_report(db, ["ndcg@10"], n_resamples=100).weighted["metrics"]["ndcg@10"]
        r = routed["metrics"]["ndcg@10"]
        for k, (est, low, high) in {
                "plain": (r["human_only"]["mean"], r["human_only"]["ci_low"], r["human_only"]["ci_high"]),
                "labeled": (weighted["mean"], weighted["ci_low"], weighted["ci_high"]),
                "routed": (r["estimate"], r["ci_low"], r["ci_high"]),
                "stratified": (stratified["estimate"], stratified["ci_low"], stratified["ci_high"])}.items():
            got[k].append(est)
            covered[k] += low <= truth <= high
    summary = {k: (round(np.mean(v) - truth, 4), round(np.std(v) / np.sqrt(sims), 4), covered[k] / sims)
               for k, v in got.items()}
    print(f"truth nDCG@10 {truth:.4f}; (bias, Monte Carlo se, coverage): {summary}")
    assert np.mean(got["plain"]) < truth - 0.08 and covered["plain"] / sims < 0.05  # the plain mean is far off
    for k in ("labeled", "routed", "stratified"):
        bias, mcse, cover = summary[k]
        assert abs(bias) < 3 * mcse + 1e-3, (k, summary[k])
        assert cover >= 0.90, (k, summary[k])


# --- the design: class shares and refusals ----------------------------------------------------------------

def test_routed_sample_scales_by_the_labeled_share_and_refuses_what_it_cannot_speak_for(file_db):
    db = file_db
    routing_rules.set_rules(db, rate=0.5, seed=2)
    sync_px(db, [s for n in range(30) for s in phoenix_trace(n, at(n))]
            + unhappy_trace(90, at(40), "metadata") + unhappy_trace(91, at(41), "status"))
    pks = np.array(sorted(r[0] for r in db.execute("SELECT pk FROM queries")))
    rows = db.execute("SELECT query_pk, reason, inclusion_prob FROM routing_decisions WHERE routed = 1 "
                      "ORDER BY query_pk").fetchall()
    sampled = [pk for pk, reason, _ in rows if reason == "sampled"]
    signals = [pk for pk, reason, _ in rows if reason == "signal"]
    assert len(signals) == 2 and len(sampled) >= 6
    used = np.array(sorted(signals + sampled[: len(sampled) // 2]))
    s = routed_sample(db, pks, used)
    at_ = np.searchsorted(pks, used)
    expected = [1.0 if pk in signals else 0.5 * (len(sampled) // 2) / len(sampled) for pk in used]
    assert s.pi[at_].tolist() == pytest.approx(expected)
    assert s.n_labeled == used.size and s.not_routed == 32 - len(rows)
    text = s.describe()
    assert text.startswith("routed: 2 by a negative signal (p=1), ") and \
        f"{len(sampled) // 2} of {len(sampled)} by a 50% rate (p=0.5)" in text and "labeled share" in text
    assert any("no submitted label yet" in n for n in s.notes)
    # a class without a label, a pending decision, a rate of 0: each refuses with its fix
    with pytest.raises(EstimateError, match=rf"no label to speak for it \({len(sampled)} queries routed by a 50% rate\); "
                                            "label some of them from the queue"):
        routed_sample(db, pks, np.array(sorted(signals)))
    db.execute("UPDATE routing_decisions SET reason = 'pending' WHERE query_pk = ?", [int(sampled[0])])
    with pytest.raises(EstimateError, match="wait for their routing decision.*labeler sync"):
        routed_sample(db, pks, used)
    db.execute("UPDATE routing_decisions SET reason = 'sampled' WHERE query_pk = ?", [int(sampled[0])])
    db.execute("UPDATE routing_decisions SET inclusion_prob = 0 WHERE routed = 0")
    with pytest.raises(EstimateError, match="decided at rate 0.*--rate 0.01"):
        routed_sample(db, pks, used)


# --- a database routed by `labeler route set` and a sync: the CLI and the Metrics page --------------------

def live_grade(question: str, chunk: str) -> int:
    """Phoenix traces "question N?" with chunks "text of chunk I for question N": an unhappy query's
    (N >= 100) relevant chunk sits at rank 3, the others' mostly at rank 1."""
    n = int(question.split()[1].rstrip("?"))
    i = int(chunk.split()[3])
    if n >= 100:
        return 2 if i == 2 else 0
    return [3 if n % 4 else 1, 2 if n % 3 == 0 else 0, 1][i]


def unhappy_question(question: str) -> bool:
    return int(question.split()[1].rstrip("?")) >= 100


@pytest.fixture
def routed_db(file_db, db_path, monkeypatch):
    """40 live queries and 8 unhappy ones synced under `labeler route set --rate 0.3`; every routed
    query labeled from the queue (its grades, and whether the production answer is relevant: not
    for the unhappy ones); a judge run over all of it."""
    result = CliRunner().invoke(cli, ["--db", str(db_path), "route", "set", "--rate", "0.3", "--seed", "4"])
    assert result.exit_code == 0, result.output
    traces = [s for n in range(40) for s in phoenix_trace(n, at(n), chunks=3)]
    for n in range(100, 108):
        spans = unhappy_trace(n, at(n - 50), "metadata")
        traces += [s for s in phoenix_trace(n, at(n - 50), chunks=3) if s["span_kind"] == "RETRIEVER"] + spans[1:]
    r = sync_px(file_db, traces)
    assert r.ok and r.new == 48, r.to_dict()
    while (pk := labels.next_item(file_db, "alice")) is not None:
        item = labels.get_item(file_db, pk, "alice")
        for c in item.chunks:
            labels.set_grade(file_db, pk, c.doc_pk, "alice", live_grade(item.question, c.text))
        labels.set_query_fields(file_db, pk, "alice", answer_relevant="no" if unhappy_question(item.question) else "yes")
        labels.set_status(file_db, pk, "alice", "submitted")
    with FakeOpenAI() as server:
        server.responder = grade_responder(lambda q, c: live_grade(q, c) if c.startswith("text") else None)
        run = judge.run_judge(file_db, make_config(server), "relevance.v1", on="all")
    monkeypatch.setenv("LABELER_DB", str(db_path))
    return file_db, run.id


def _hand_hajek(db, spec: str) -> float:
    rep = retrieval_report(db, [spec])
    prob = dict(db.execute("SELECT query_pk, inclusion_prob FROM routing_decisions WHERE routed = 1").fetchall())
    num = den = 0.0
    for pk, value in zip(rep.per_query["query_pk"], rep.per_query[spec], strict=True):
        if value == value:  # a relevant chunk
            num += value / prob[int(pk)]
            den += 1 / prob[int(pk)]
    return num / den


def test_cli_metrics_gives_the_weighted_estimate_and_how_the_set_was_drawn(routed_db, db_path):
    db, run_id = routed_db
    signals = db.execute("SELECT count(*) FROM routing_decisions WHERE reason = 'signal'").fetchone()[0]
    sampled = db.execute("SELECT count(*) FROM routing_decisions WHERE reason = 'sampled'").fetchone()[0]
    assert signals == 8 and 4 <= sampled <= 25
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", str(db_path), "metrics", "--metric", "ndcg@10", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    w = doc["weighted"]
    assert w["text"] == (f"routed: 8 by a negative signal (p=1), {sampled} by a 30% rate (p=0.3); "
                         f"{48 - 8 - sampled} not routed (left out of the queue); weighted by 1/p")
    assert (w["population"], w["n_labeled"], w["left_out"], w["error"]) == (48, 8 + sampled, 0, None)
    weighted, plain = w["metrics"]["ndcg@10"], doc["metrics"]["ndcg@10"]
    assert weighted["mean"] == pytest.approx(_hand_hajek(db, "ndcg@10"))
    assert weighted["ci_low"] < weighted["mean"] < weighted["ci_high"]
    assert weighted["mean"] > plain["mean"] + 0.1  # the unhappy queries pull the plain mean down
    text = runner.invoke(cli, ["--db", str(db_path), "metrics", "--metric", "ndcg@10"])
    assert text.exit_code == 0 and f"labeled set {w['text']}; weighted = over the 48 live queries" in text.output
    header, row = (next(line for line in text.output.splitlines() if line.startswith(m)) for m in ("metric", "ndcg@10"))
    assert header.split()[5:8] == ["weighted", "weighted_ci_low", "weighted_ci_high"]
    assert row.split()[5:8] == [f"{weighted[k]:.4f}" for k in ("mean", "ci_low", "ci_high")]
    # all traffic: the routed design, the same sentence, the weighted human-only beside the plain mean
    result = runner.invoke(cli, ["--db", str(db_path), "metrics", "--all-traffic", "--judge-run", str(run_id),
                                 "--metric", "ndcg@10", "--json"])
    assert result.exit_code == 0, result.output
    at_all = json.loads(result.output)
    assert at_all["design"] == "routed" and at_all["how_drawn"]["text"] == w["text"]
    m = at_all["metrics"]["ndcg@10"]
    assert m["human_weighted"]["mean"] == pytest.approx(weighted["mean"])  # the same labels, the same traffic
    assert m["human_only"]["mean"] == pytest.approx(plain["mean"])
    assert m["ci_low"] <= m["estimate"] <= m["ci_high"]
    table = runner.invoke(cli, ["--db", str(db_path), "metrics", "--all-traffic", "--judge-run", str(run_id),
                                "--metric", "ndcg@10", "--csv"])
    assert table.exit_code == 0 and "human_weighted" in table.output.splitlines()[0]
    # the uniform design refuses in one line, naming the design that weighs
    bad = runner.invoke(cli, ["--db", str(db_path), "metrics", "--all-traffic", "--judge-run", str(run_id),
                              "--design", "uniform"])
    assert bad.exit_code == 1 and "routing sampled this traffic" in bad.output and "--design routed" in bad.output
    assert "Traceback" not in bad.output and len(bad.output.strip().splitlines()) == 1


def test_metrics_page_says_how_the_set_was_drawn_and_shows_the_weighted_figures(routed_db):
    from tests.test_app_all_traffic import estimates_table, metrics_page

    db, run_id = routed_db
    expected = retrieval_report(db, ["ndcg@10"]).weighted
    page = metrics_page()
    captions = [c.value for c in page.caption]
    assert expected["text"].startswith("routed: 8 by a negative signal (p=1), ")
    assert escape_markdown(f"Labeled set {expected['text']}.") in captions, captions
    table = next(d.value for d in page.dataframe if "weighted by 1/p" in d.value.columns)
    row = table[table["metric"] == "ndcg@10"].iloc[0]
    assert row["weighted by 1/p"] == pytest.approx(expected["metrics"]["ndcg@10"]["mean"])
    assert row["weighted by 1/p"] > row["labeled mean (plain)"] + 0.1
    # the all-traffic section: the routed design, its sentence, the weighted human-only column
    assert any("routed live queries weighted by 1/probability" in c for c in captions)
    assert any(c.startswith(escape_markdown(f"Labeled set {expected['text']}. Human-only = the plain mean"))
               for c in captions)
    at_table = estimates_table(page)
    rep = all_traffic_report(db, run_id)
    assert at_table[at_table["metric"] == "ndcg@10"].iloc[0]["human-only weighted"] == \
        pytest.approx(rep.metrics["ndcg@10"]["human_weighted"]["mean"])


def test_share_of_relevant_answers_under_routing_is_weighted(routed_db):
    from tests.fake_openai import prompt_blocks

    db, run_id = routed_db
    with FakeOpenAI() as server:
        server.responder = lambda request: {"rationale": "r", "verdict": "no" if unhappy_question(
            prompt_blocks(request)["Question"]) else "yes"}
        answers = judge.run_judge(db, make_config(server), "answer-relevance.v1", on="all")
    share = all_traffic_report(db, run_id, ["ndcg@10"]).metrics["relevant_answers"]
    sampled = db.execute("SELECT count(*) FROM routing_decisions WHERE reason = 'sampled'").fetchone()[0]
    assert (share["population"], share["n_labeled"], share["judge_run"]) == (48, 8 + sampled, answers.id)
    assert share["human_only"]["mean"] == pytest.approx(sampled / (8 + sampled))  # the labeled set's plain share
    assert share["human_weighted"]["mean"] == pytest.approx((sampled / 0.3) / (8 + sampled / 0.3))
    assert share["estimate"] == pytest.approx(40 / 48)  # the judge is right everywhere: the truth


# --- mixed designs ------------------------------------------------------------------------------------------

def test_routed_and_random_queue_labels_combine_and_other_mixes_refuse(file_db, db_path, write_log):
    """A history ingested from a file (never routed) and live traffic synced under routing: the random
    queue's labels of the history and the routed queries' labels make one sample (the history a
    class of its own, probability = its labeled share); the uniform and active designs refuse; a
    history without a random label refuses naming the fix; labels in order oldest refuse unless
    --random-only."""
    db = file_db
    labeler.set_setting(db, "overlap_fraction", 0)
    history = [{"query_id": f"h{i:03d}", "question": f"question {200 + i}?",
                "retrieved": [{"id": f"h{i}-{j}", "text": f"text of chunk {j} for question {200 + i}"}
                              for j in range(3)]} for i in range(30)]
    ingest_logs(db, write_log(history))
    routing_rules.set_rules(db, rate=0.4, seed=1)
    traces = [s for n in range(40) for s in phoenix_trace(n, at(n), chunks=3)]
    traces += [s for n in range(100, 104) for s in unhappy_trace(n, at(n - 50), "metadata")]
    assert sync_px(db, traces).new == 44
    routed = [pk for (pk,) in db.execute("SELECT query_pk FROM routing_decisions WHERE routed = 1")]
    hist = [pk for (pk,) in db.execute("SELECT pk FROM queries WHERE query_id LIKE 'h%'")]

    def label(pk: int, annotator: str) -> None:
        item = labels.get_item(db, pk, annotator)
        for c in item.chunks:
            labels.set_grade(db, pk, c.doc_pk, annotator, live_grade(item.question, c.text))
        labels.set_status(db, pk, annotator, "submitted")

    for pk in routed:  # opened by hand: routing, not the queue, drew them
        label(pk, "alice")
    with FakeOpenAI() as server:
        server.responder = grade_responder(lambda q, c: live_grade(q, c) if c.startswith("text") else None)
        run = judge.run_judge(db, make_config(server), "relevance.v1", on="all")
    with pytest.raises(EstimateError, match=r"no label to speak for it \(30 queries that came without routing "
                                            r"\(file ingests, syncs before the rules\)\); label some in queue order random"):
        all_traffic_report(db, run.id, ["ndcg@10"])
    # the random queue hands out the history (design random): the routed queries are labeled already
    took = []
    while len(took) < 12 and (pk := labels.next_item(db, "bob")) is not None:
        label(pk, "bob")
        took.append(pk)
    assert set(took) <= set(hist) and len(took) == 12
    rep = all_traffic_report(db, run.id, ["ndcg@10"])
    out = rep.to_dict()
    assert out["design"] == "routed" and out["n_labeled"] == len(routed) + 12 and out["labels_left_out"] == 0
    queued = [c for c in out["how_drawn"]["classes"] if c["reason"] == "queued"]
    assert queued == [{"reason": "queued", "probability": 1.0, "queries": 30, "labeled": 12}]
    assert "12 of 30 drawn at random from the queries that came without routing" in out["how_drawn"]["text"]
    # by hand: the active-inference estimator with each label's probability
    pks = np.array(sorted(r[0] for r in db.execute("SELECT pk FROM queries")))
    prob = dict(db.execute("SELECT query_pk, inclusion_prob FROM routing_decisions WHERE routed = 1").fetchall())
    pi = np.ones(pks.size)
    xi = np.isin(pks, np.array(routed + took))
    for i, pk in enumerate(pks.tolist()):
        pi[i] = prob.get(pk, 12 / 30 if pk in hist else 1.0) if xi[i] else 1.0
    from labeler.estimate.traffic import human_values, judged_traffic

    judged = judged_traffic(db, run.id, ["ndcg@10"])
    used = pks[xi]
    hv, hr = human_values(db, judged, used, ["ndcg@10"])
    a, b = np.zeros(pks.size), np.zeros(pks.size)
    a[xi] = np.where(hr, np.nan_to_num(hv["ndcg@10"]), 0.0)
    b[xi] = hr
    by_hand = ppi.active_ratio(a, judged.numerators("ndcg@10"), b, judged.relevant.astype(float), pi, xi)
    assert out["metrics"]["ndcg@10"]["estimate"] == pytest.approx(by_hand.estimate)
    assert out["metrics"]["ndcg@10"]["ci_high"] == pytest.approx(by_hand.ci_high)
    # the designs that read the queue's labels as drawn from all traffic refuse, in one line
    for design in ("uniform", "active"):
        with pytest.raises(EstimateError, match=f"routing sampled this traffic .*so the {design} design.*"
                                                "--design routed"):
            all_traffic_report(db, run.id, ["ndcg@10"], design=design)
    # a label taken in order oldest is not a probability sample: refused, or left out with --random-only
    labeler.set_setting(db, "queue_order", "oldest")
    pk = labels.next_item(db, "carol")
    labels.set_status(db, pk, "carol", "submitted")
    with pytest.raises(EstimateError, match="not a probability sample.*--random-only"):
        all_traffic_report(db, run.id, ["ndcg@10"])
    kept = all_traffic_report(db, run.id, ["ndcg@10"], random_only=True)
    assert kept.design == "routed" and kept.ignored == 1
