"""All-traffic estimates end to end: a judge over all traffic (the fake OpenAI server), labels drawn by
the queue under a recorded design, the report and its refusals, the active draw, the CLI."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from click.testing import CliRunner

import labeler.labels as labels
from labeler import db as store
from labeler import judge
from labeler.accounts.settings import set_setting
from labeler.cli import cli
from labeler.estimate import active
from labeler.estimate.ppi import EstimateError
from labeler.estimate.report import all_traffic_report
from tests.conftest import tiny_records
from tests.fake_openai import FakeOpenAI, grade_responder
from tests.test_judge import make_config

N, CHUNKS = 120, 4


def true_grade(i: int, j: int) -> int:
    return (i * 7 + j * 3 + i // 5) % 4


@pytest.fixture
def server():
    with FakeOpenAI() as s:
        yield s


def traffic(db, ingest_tiny):
    """N logged queries x CHUNKS chunks; {(question, chunk text): true grade} and the pks."""
    records = tiny_records(N, CHUNKS)
    pks = ingest_tiny(db, records=records)
    truth = {}
    for i, r in enumerate(records):
        for j, c in enumerate(r["retrieved"]):
            truth[(r["question"], c["text"])] = true_grade(i, j)
    return pks, truth


def noisy(truth, p: float = 0.7, seed: int = 1):
    """The true grade with probability p, else a random one (seeded per pair)."""

    def grade(q, c):
        g = truth.get((q, c))
        if g is None:
            return None
        rng = random.Random(f"{seed}:{q}:{c}")
        return g if rng.random() < p else rng.randrange(4)

    return grade_responder(grade)


def label_from_queue(db, truth, n: int, annotator: str = "alice") -> list[int]:
    """``annotator`` takes ``n`` items from the queue and grades them truthfully."""
    done = []
    for _ in range(n):
        pk = labels.next_item(db, annotator)
        if pk is None:
            break
        item = labels.get_item(db, pk, annotator)
        for c in item.chunks:
            labels.set_grade(db, pk, c.doc_pk, annotator, truth[(item.question, c.text)])
        labels.set_status(db, pk, annotator, "submitted")
        done.append(pk)
    return done


def judge_all(db, server, truth):
    server.responder = noisy(truth)
    return judge.run_judge(db, make_config(server), "relevance.v1", on="all")


def test_judge_runs_on_all_traffic_without_a_gate_and_makes_no_suggestions(db, ingest_tiny, server):
    pks, truth = traffic(db, ingest_tiny)
    label_from_queue(db, truth, 10)
    run = judge_all(db, server, truth)
    assert run.on_set == "all" and run.items == N * CHUNKS and run.failed == 0
    assert db.execute("SELECT count(*) FROM suggestions").fetchone()[0] == 0
    with pytest.raises(Exception, match="gate|calibrat"):
        judge.run_judge(db, make_config(server), "relevance.v1", on="unlabeled")


def test_report_uniform_shape_and_values(db, ingest_tiny, server):
    pks, truth = traffic(db, ingest_tiny)
    labeled = label_from_queue(db, truth, 40)
    run = judge_all(db, server, truth)
    rep = all_traffic_report(db, run.id)
    out = rep.to_dict()
    assert (out["population"], out["n_labeled"], out["judge_run"], out["design"]) == (N, 40, run.id, "uniform")
    r5 = out["metrics"]["recall@5"]
    assert set(r5) == {"estimate", "ci_low", "ci_high", "lambda", "effective_n", "human_only", "judge_only"}
    assert set(r5["human_only"]) == {"mean", "ci_low", "ci_high"} and set(r5["judge_only"]) == {"mean"}
    assert len(out["metrics"]) == 9
    for v in out["metrics"].values():
        assert v["ci_low"] <= v["estimate"] <= v["ci_high"] and 0 <= v["lambda"] <= 1
    # the queue recorded the design of every hand-out
    recorded = dict(db.execute("SELECT query_pk, design FROM queue_designs").fetchall())
    assert {recorded[p] for p in labeled} == {"random"}
    assert out["agreement"]["pairs"] == 40 * CHUNKS
    assert 0.6 < out["agreement"]["exact"] < 0.9
    # the truth over all traffic (every query's true grades) lies in most CIs
    truth_values = _true_means(db, pks, truth)
    inside = sum(out["metrics"][s]["ci_low"] <= truth_values[s] <= out["metrics"][s]["ci_high"]
                 for s in out["metrics"])
    assert inside >= 7


def _true_means(db, pks, truth):
    import pandas as pd

    from labeler import metrics as m

    run = pd.DataFrame(db.execute("SELECT query_pk, doc_pk, rank FROM retrievals").fetchall(),
                       columns=["query", "doc", "rank"])
    rows = db.execute("SELECT r.query_pk, r.doc_pk, q.question, d.text FROM retrievals r JOIN queries q "
                      "ON q.pk = r.query_pk JOIN documents d ON d.pk = r.doc_pk").fetchall()
    qrels = pd.DataFrame([(q, d, truth[(qq, t)]) for q, d, qq, t in rows], columns=["query", "doc", "grade"])
    specs = ["recall@5", "recall@10", "P@5", "P@10", "hit@5", "hit@10", "mrr", "ndcg@5", "ndcg@10"]
    per = m.per_query(run, qrels, specs, threshold=2)
    return {s: float(per[s].mean()) for s in specs}


def test_ratio_when_every_query_has_a_relevant_chunk_is_the_plain_ppi_mean(db, ingest_tiny, server):
    from labeler.estimate import ppi
    from labeler.estimate.traffic import human_values, judged_traffic, submitted_pks

    pks, truth = traffic(db, ingest_tiny)
    truth = {k: max(v, 2) if k[1].startswith("chunk 0") else v for k, v in truth.items()}  # all relevant
    label_from_queue(db, truth, 30)
    server.responder = grade_responder(lambda q, c: truth.get((q, c)) if c.startswith("chunk 0") else 1)
    run = judge.run_judge(db, make_config(server), "relevance.v1", on="all")
    rep = all_traffic_report(db, run.id, ["ndcg@5"])
    judged = judged_traffic(db, run.id, ["ndcg@5"])
    used = submitted_pks(db, judged.pks)
    hv, hr = human_values(db, judged, used, ["ndcg@5"])
    assert hr.all() and judged.relevant.all()
    rows = np.searchsorted(judged.pks, used)
    rest = np.setdiff1d(np.arange(judged.pks.size), rows)
    plain = ppi.ppi_mean(hv["ndcg@5"], judged.values["ndcg@5"][rows], judged.values["ndcg@5"][rest])
    got = rep.metrics["ndcg@5"]
    assert (got["estimate"], got["ci_low"], got["ci_high"], got["lambda"]) == pytest.approx(
        (plain.estimate, plain.ci_low, plain.ci_high, plain.lam), abs=1e-12)


def test_refusals(db, ingest_tiny, server, write_log, tmp_path):
    pks, truth = traffic(db, ingest_tiny)
    with pytest.raises(EstimateError, match="labeler judge run --judge relevance.v1 --on all"):
        all_traffic_report(db, None)
    label_from_queue(db, truth, 20)
    run = judge_all(db, server, truth)
    set_setting(db, "queue_order", "oldest")
    label_from_queue(db, truth, 5)
    with pytest.raises(EstimateError, match=r"not a probability sample of the traffic \(5 queue order oldest first\).*--random-only"):
        all_traffic_report(db, run.id)
    assert all_traffic_report(db, run.id, random_only=True).n_labeled == 20
    # imported labels: a golden file for queries nobody was handed
    free = [p for p in pks if db.execute("SELECT 1 FROM query_labels WHERE query_pk = ?", [p]).fetchone() is None]
    qid, question = db.execute("SELECT query_id, question FROM queries WHERE pk = ?", [free[0]]).fetchone()
    path = tmp_path / "golden.jsonl"
    path.write_text(json.dumps({"query_id": qid, "question": question, "relevance": {f"{qid}-c0": 3}}) + "\n")
    from labeler.export import import_golden

    import_golden(db, path, annotator="importer")
    with pytest.raises(EstimateError, match=r"1 not handed out by the queue \(opened by hand or imported\)"):
        all_traffic_report(db, run.id)
    assert all_traffic_report(db, run.id, random_only=True).n_labeled == 20


def test_cli_all_traffic_and_refusal(tmp_path, write_log, server):
    from labeler.ingest import ingest_logs

    path = tmp_path / "t.db"
    db = store.connect(path)
    records = tiny_records(N, CHUNKS)
    ingest_logs(db, write_log(records))
    truth = {(r["question"], c["text"]): true_grade(i, j) for i, r in enumerate(records)
             for j, c in enumerate(r["retrieved"])}
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", str(path), "metrics", "--all-traffic"])
    assert result.exit_code == 1 and "labeler judge run --judge relevance.v1 --on all" in result.output
    assert len(result.output.strip().splitlines()) == 1
    label_from_queue(db, truth, 30)
    run = judge_all(db, server, truth)
    result = runner.invoke(cli, ["--db", str(path), "metrics", "--all-traffic", "--judge-run", str(run.id), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["population"] == N and out["n_labeled"] == 30 and out["design"] == "uniform"
    result = runner.invoke(cli, ["--db", str(path), "metrics", "--all-traffic", "--judge-run", str(run.id)])
    assert result.exit_code == 0 and "recall@5" in result.output and "judge-only" in result.output
    db.close()


def test_active_draw_queue_and_estimate(db, ingest_tiny, server):
    pks, truth = traffic(db, ingest_tiny)
    label_from_queue(db, truth, 25)  # uniform labels first: the uncertainty model is fitted on them
    run = judge_all(db, server, truth)
    draw = active.draw_active(db, run.id, budget=30, seed=5)
    assert draw.population == N and draw.fitted_on == 25 and 0 < draw.label_ratio <= 1
    stored = db.execute("SELECT count(*), sum(drawn), sum(inclusion_prob) FROM active_draw_items WHERE draw_id = ?",
                        [draw.id]).fetchone()
    assert stored[0] == N and stored[1] == draw.drawn and stored[2] == pytest.approx(30)
    pi = [r[0] for r in db.execute("SELECT inclusion_prob FROM active_draw_items WHERE draw_id = ?", [draw.id])]
    assert min(pi) >= 0.05 * np.mean(pi) - 1e-12
    # the same seed draws the same queries
    again = active.draw_active(db, run.id, budget=30, seed=5)
    same = db.execute("SELECT count(*) FROM active_draw_items a JOIN active_draw_items b ON a.query_pk = b.query_pk "
                      "AND a.drawn = b.drawn WHERE a.draw_id = ? AND b.draw_id = ?", [draw.id, again.id]).fetchone()
    assert same[0] == N
    set_setting(db, "queue_order", "active")
    drawn = {r[0] for r in db.execute("SELECT query_pk FROM active_draw_items WHERE draw_id = ? AND drawn = 1",
                                      [again.id])}
    got = label_from_queue(db, truth, N, annotator="bob")
    assert set(got) <= drawn and len(got) >= 1
    rows = db.execute("SELECT design, inclusion_prob, draw_id FROM queue_designs WHERE query_pk IN "
                      "(SELECT value FROM json_each(?))", [json.dumps(got)]).fetchall()
    fresh = [r for r in rows if r[0] == "active"]
    assert fresh and all(r[1] > 0 and r[2] == again.id for r in fresh)
    rep = all_traffic_report(db, run.id)
    assert rep.design == "active" and rep.n_labeled == len(fresh)
    uni = all_traffic_report(db, run.id, design="uniform")
    assert uni.design == "uniform" and uni.n_labeled == 25
    runner = CliRunner()
    assert "active" in runner.invoke(cli, ["queue", "--help"]).output


def test_share_of_relevant_answers_over_all_traffic(db, ingest_tiny, server):
    from tests.fake_openai import prompt_blocks

    pks, truth = traffic(db, ingest_tiny)
    good = {f"What is item q{i}?": i % 3 != 0 for i in range(N)}  # the true verdict of each production answer
    for _ in range(30):
        pk = labels.next_item(db, "alice")
        item = labels.get_item(db, pk, "alice")
        for c in item.chunks:
            labels.set_grade(db, pk, c.doc_pk, "alice", truth[(item.question, c.text)])
        labels.set_query_fields(db, pk, "alice", answer_relevant="yes" if good[item.question] else "no")
        labels.set_status(db, pk, "alice", "submitted")
    run = judge_all(db, server, truth)

    def verdicts(request):
        question = prompt_blocks(request)["Question"]
        right = random.Random(question).random() < 0.8
        return {"rationale": "r", "verdict": "yes" if good[question] == right else "no"}

    server.responder = verdicts
    answers = judge.run_judge(db, make_config(server), "answer-relevance.v1", on="all")
    assert answers.items == N
    out = all_traffic_report(db, run.id).to_dict()
    share = out["metrics"]["relevant_answers"]
    assert (share["population"], share["n_labeled"], share["judge_run"]) == (N, 30, answers.id)
    assert share["ci_low"] <= sum(good.values()) / N <= share["ci_high"]
    assert set(share["human_only"]) == {"mean", "ci_low", "ci_high"}


def test_export_manifest_cites_the_estimate(tmp_path, write_log, server):
    from labeler.ingest import ingest_logs

    path = tmp_path / "t.db"
    db = store.connect(path)
    records = tiny_records(N, CHUNKS)
    ingest_logs(db, write_log(records))
    truth = {(r["question"], c["text"]): true_grade(i, j) for i, r in enumerate(records)
             for j, c in enumerate(r["retrieved"])}
    label_from_queue(db, truth, 20)
    run = judge_all(db, server, truth)
    out = tmp_path / "golden.jsonl"
    result = CliRunner().invoke(cli, ["--db", str(path), "export", "-o", str(out), "--judge-run", str(run.id)])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "golden.jsonl.manifest.json").read_text())
    assert manifest["all_traffic"]["judge_run"] == run.id and manifest["all_traffic"]["n_labeled"] == 20
    assert "recall@5" in manifest["all_traffic"]["metrics"]
    assert len(out.read_text().splitlines()) == 20  # the golden set itself: the human-labeled queries only
    db.close()


def test_eval_judge_run_cites_the_estimate(tmp_path, write_log, server):
    """`labeler eval --judge-run RUN` with a relevance run over all traffic: the report cites the
    all-traffic estimate of the production retriever under ``all_traffic`` (the numbers the library
    gives); the golden set's own metrics and the answer judges are as without it."""
    from labeler.ingest import ingest_logs

    path = tmp_path / "t.db"
    db = store.connect(path)
    records = tiny_records(N, CHUNKS)
    ingest_logs(db, write_log(records))
    truth = {(r["question"], c["text"]): true_grade(i, j) for i, r in enumerate(records)
             for j, c in enumerate(r["retrieved"])}
    label_from_queue(db, truth, 20)
    run = judge_all(db, server, truth)
    golden = tmp_path / "golden.jsonl"
    assert CliRunner().invoke(cli, ["--db", str(path), "export", "-o", str(golden)]).exit_code == 0
    base = ["--db", str(path), "eval", "--golden", str(golden), "-k", "5", "--json"]
    plain = CliRunner().invoke(cli, base)
    cited = CliRunner().invoke(cli, [*base, "--judge-run", str(run.id)])
    assert plain.exit_code == 0 and cited.exit_code == 0, cited.output
    before, after = json.loads(plain.stdout), json.loads(cited.stdout)
    assert "all_traffic" not in before and after["judges"] == []
    assert after["metrics"] == before["metrics"]  # the golden set stays human-only
    at = after["all_traffic"]
    assert (at["judge_run"], at["n_labeled"], at["population"], at["design"]) == (run.id, 20, N, "uniform")
    assert "not the evaluated pipeline" in at["about"]
    expected = all_traffic_report(db, run.id, list(after["settings"]["metrics"]), random_only=True).to_dict()
    assert set(at["metrics"]) == set(after["settings"]["metrics"]) == {"recall@5", "precision@5", "hit@5", "mrr", "ndcg@5"}
    for spec, v in expected["metrics"].items():
        assert at["metrics"][spec]["estimate"] == pytest.approx(v["estimate"], abs=1e-12)
        assert at["metrics"][spec]["ci_high"] == pytest.approx(v["ci_high"], abs=1e-12)
    text = CliRunner().invoke(cli, [*base[:-1], "--judge-run", str(run.id)])
    assert "All production traffic (not this pipeline)" in text.output and f"judge run {run.id}" in text.output
    db.close()


def test_judged_values_are_the_metrics_module_on_the_runs_rows(db, ingest_tiny, server):
    """The fast reader (one text per column) gives, query by query, what labeler.metrics gives on the
    run's rows read one by one: failed calls count as unjudged chunks, and are counted."""
    import pandas as pd

    from labeler import metrics as m
    from labeler.estimate.traffic import DEFAULT_SPECS, judged_traffic

    pks, truth = traffic(db, ingest_tiny)
    run = judge_all(db, server, truth)
    pairs = db.execute("SELECT query_pk, min(doc_pk) FROM judge_labels WHERE run_id = ? GROUP BY query_pk "
                       "ORDER BY query_pk LIMIT 2", [run.id]).fetchall()
    with store.transaction(db):  # two calls failed (as a timeout would leave them)
        for q, d in pairs:
            db.execute("UPDATE judge_labels SET status = 'failed', grade = NULL WHERE run_id = ? AND query_pk = ? "
                       "AND doc_pk = ?", [run.id, q, d])
    judged = judged_traffic(db, run.id)
    ranking = pd.DataFrame(db.execute("SELECT query_pk, doc_pk, rank FROM retrievals ORDER BY rank DESC").fetchall(),
                           columns=["query", "doc", "rank"])
    qrels = pd.DataFrame(db.execute("SELECT query_pk, doc_pk, grade FROM judge_labels WHERE run_id = ? AND "
                                    "status = 'ok'", [run.id]).fetchall(), columns=["query", "doc", "grade"])
    per = m.per_query(ranking, qrels, list(DEFAULT_SPECS), threshold=2)
    assert judged.n_failed == 2 and list(judged.pks) == sorted(pks) == list(per.index)
    assert (judged.relevant == (per["n_relevant"].to_numpy() > 0)).all()
    for spec in DEFAULT_SPECS:
        np.testing.assert_array_equal(judged.values[spec], per[spec].to_numpy(float))
    grades = qrels.groupby("query")["grade"].apply(lambda g: int(g.isin([1, 2]).sum()))
    assert list(judged.border) == grades.reindex(judged.pks, fill_value=0).tolist()
