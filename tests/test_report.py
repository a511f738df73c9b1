"""labeler.report and `labeler metrics`: hand-computed values from labels made through the public
API, filters and segments, reuse that never hides a new label, the diagnosis, the CI arithmetic, a
paired comparison of two retrievers, and real data (CISI + a TF-IDF retriever) against pytrec_eval."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval
from click.testing import CliRunner

import labeler
from labeler import labels as L
from labeler import metrics as M
from labeler import report as R
from labeler.cli import cli
from labeler.errors import LabelerError
from labeler.export import import_golden
from labeler.ingest import ingest_corpus, ingest_logs
from tests import cisi


def chunks(prefix: str, n: int = 3) -> list[dict]:
    return [{"id": f"{prefix}{i}", "text": f"chunk {prefix}{i}", "score": round(1 - i / 10, 2)} for i in range(1, n + 1)]


RECORDS = [{"query_id": q, "question": f"question {q}?", "answer": f"answer {q}", "retrieved": chunks(q[1])}
           for q in ("qa", "qb", "qc", "qd", "qe", "qf")]
GRADES = {  # what alice submits (qf she skips, qe nobody labels)
    "qa": {"a1": 3, "a2": 0, "a3": 2},
    "qb": {"b1": 1, "b2": 2, "b3": 0},
    "qc": {"c1": 0, "c2": 0, "c3": 0},
    "qd": {"d1": 0, "d2": 0, "d3": 0, "missed": 3},
    "qf": {"f1": 3, "f2": 3, "f3": 3},
}
NDCG_QA = 4 / (3 + 2 / math.log2(3))
NDCG_QB = (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def pk(db, query_id: str) -> int:
    return db.execute("SELECT pk FROM queries WHERE query_id = ?", [query_id]).fetchone()[0]


def doc(db, doc_id: str) -> int:
    return db.execute("SELECT pk FROM documents WHERE doc_id = ?", [doc_id]).fetchone()[0]


def label(db, query_id: str, grades: dict[str, int], annotator: str = "alice", status: str = "submitted",
          now=None, **fields) -> None:
    q = pk(db, query_id)
    for d, g in grades.items():
        L.set_grade(db, q, doc(db, d), annotator, g, now=now)
    if fields:
        L.set_query_fields(db, q, annotator, now=now, **fields)
    L.set_status(db, q, annotator, status, now=now)


def build(db, tmp_path: Path) -> None:
    labeler.set_setting(db, "overlap_fraction", 0)
    ingest_logs(db, write(tmp_path / "logs.jsonl", RECORDS))
    ingest_corpus(db, write(tmp_path / "corpus.jsonl", [{"id": "missed", "text": "the chunk the retriever missed"}]))
    for q, grades in GRADES.items():
        label(db, q, grades, status="skipped" if q == "qf" else "submitted", now="2026-03-02T10:00:00Z")


@pytest.fixture
def small(db, tmp_path):
    build(db, tmp_path)
    return db


@pytest.fixture
def small_file(file_db, tmp_path):
    build(file_db, tmp_path)
    return file_db


def cli_json(db_path: Path, *args: str) -> dict:
    r = CliRunner().invoke(cli, ["--db", str(db_path), "metrics", *args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


# --- hand-computed values --------------------------------------------------------------------------

def test_hand_computed_values_and_counts(small):
    rep = R.retrieval_report(small, ["recall@1", "recall@3", "P@3", "mrr", "ndcg@3", "hit@1"])
    assert (rep.n_queries, rep.n_without_relevant, rep.threshold, rep.retriever) == (4, 1, 2, "production")
    pq = rep.per_query.set_index("query_id")
    assert list(pq.index) == ["qa", "qb", "qc", "qd"]  # skipped and unlabeled queries do not count
    assert pq.loc["qa", ["recall@1", "recall@3", "P@3", "mrr", "hit@1"]].tolist() == [0.5, 1.0, 2 / 3, 1.0, 1.0]
    assert pq.loc["qb", ["recall@1", "recall@3", "mrr", "hit@1"]].tolist() == [0.0, 1.0, 0.5, 0.0]
    assert pq.loc["qa", "ndcg@3"] == pytest.approx(NDCG_QA, abs=1e-12)
    assert pq.loc["qb", "ndcg@3"] == pytest.approx(NDCG_QB, abs=1e-12)
    assert pq.loc["qc", ["recall@1", "mrr"]].isna().all()  # no relevant chunk: left out
    assert pq.loc["qd", ["recall@3", "mrr", "ndcg@3"]].tolist() == [0.0, 0.0, 0.0]  # the missed chunk counts
    assert pq.loc["qd", "n_relevant"] == 1 and pq.loc["qd", "n_retrieved"] == 3
    assert set(pq["origin"]) == {"log"}
    assert rep.metrics["recall@3"]["mean"] == pytest.approx(2 / 3)
    assert rep.metrics["mrr"]["mean"] == pytest.approx(0.5)
    assert rep.metrics["ndcg@3"]["mean"] == pytest.approx((NDCG_QA + NDCG_QB) / 3)
    assert all(v["n"] == 3 for v in rep.metrics.values())
    assert all(v["ci_low"] <= v["mean"] <= v["ci_high"] for v in rep.metrics.values())
    assert rep.judged == {"judged@1": {"mean": 1.0, "n": 4}, "judged@3": {"mean": 1.0, "n": 4}}


def test_default_specs_and_expansion():
    assert R.expand_specs() == ["recall@1", "recall@3", "recall@5", "recall@10", "ndcg@1", "ndcg@3", "ndcg@5",
                                "ndcg@10", "mrr"]
    assert R.expand_specs(["P", "recall@7", "mrr", "ap", "P@5"], [5, 10]) == ["P@5", "P@10", "recall@7", "mrr", "ap"]
    with pytest.raises(LabelerError, match="unknown metric 'rcall'"):
        R.expand_specs(["rcall"])
    with pytest.raises(LabelerError, match="positive whole number"):
        R.expand_specs(["recall"], [0])


def test_per_query_records_and_file(small, tmp_path):
    rep = R.retrieval_report(small, ["recall@3", "mrr"])
    records = rep.per_query_records()
    assert records[:2] == [{"query_id": "qa", "metric": "recall@3", "value": 1.0},
                           {"query_id": "qa", "metric": "mrr", "value": 1.0}]
    assert {"query_id": "qc", "metric": "mrr", "value": None} in records
    assert rep.write_per_query(tmp_path / "pq.jsonl") == 8
    assert [json.loads(x) for x in (tmp_path / "pq.jsonl").read_text().splitlines()] == records


def test_unknown_retriever_and_origin_are_clear_errors(small):
    with pytest.raises(LabelerError, match="retriever 'bm99' logged no rankings; logged: production"):
        R.retrieval_report(small, retriever="bm99")
    with pytest.raises(LabelerError, match="origin 'web' is unknown"):
        R.retrieval_report(small, origin="web")


def test_empty_database_is_an_error_not_an_empty_report(db, tmp_path):
    with pytest.raises(LabelerError, match="no retriever logged any rankings yet"):
        R.retrieval_report(db, ["recall@5"])
    # logged but nothing labeled: an empty report of the retriever that logged
    ingest_logs(db, write(tmp_path / "logs.jsonl", RECORDS[:1]))
    rep = R.retrieval_report(db, ["recall@5"])
    assert rep.to_dict() == {"n_queries": 0, "n_without_relevant": 0, "threshold": 2, "retriever": "production",
                             "metrics": {"recall@5": {"mean": None, "ci_low": None, "ci_high": None, "n": 0}},
                             "judged": {"judged@5": None}}
    assert rep.diagnosis().verdict == "not_enough_data"
    assert rep.curve().empty


def test_threshold_setting_is_used(small):
    labeler.set_setting(small, "threshold", 1)
    rep = R.retrieval_report(small, ["recall@1"])
    # qb's grade-1 chunk b1 at rank 1 is now relevant: qb recall@1 = 1/2
    assert rep.threshold == 1
    assert rep.per_query.set_index("query_id").loc["qb", "recall@1"] == 0.5


# --- filters and segments ---------------------------------------------------------------------------

def test_annotator_and_date_filters(small):
    labeler.set_setting(small, "overlap_fraction", 1.0)
    L.sync_queue(small, force=True)
    label(small, "qe", {"e1": 2, "e2": 0, "e3": 0}, annotator="bob", now="2026-03-05T10:00:00Z")
    assert R.retrieval_report(small, ["mrr"]).n_queries == 5
    assert R.retrieval_report(small, ["mrr"], annotator="bob").n_queries == 1
    assert R.retrieval_report(small, ["mrr"], since="2026-03-03").n_queries == 1
    assert R.retrieval_report(small, ["mrr"], until="2026-03-03").n_queries == 4
    assert R.retrieval_report(small, ["mrr"], annotator="alice", until="2026-03-03").metrics["mrr"]["mean"] == 0.5


def add_synthetic(db, tmp_path, question: str = "synthetic one?") -> int:
    """A synthetic question labeled by carol, with the candidates synth stores as the production list."""
    import_golden(db, write(tmp_path / "s.jsonl", [
        {"question": question, "relevance": {"missed": 3, "a2": 0}, "origin": "synthetic"}]), annotator="carol")
    q = db.execute("SELECT pk FROM queries WHERE question = ?", [question]).fetchone()[0]
    db.execute("INSERT INTO retrievals (query_pk, retriever, rank, doc_pk, score) VALUES (?, 'production', 1, ?, 1.0), "
               "(?, 'production', 2, ?, 0.5)", [q, doc(db, "a2"), q, doc(db, "missed")])
    return q


def test_origin_filter_and_segments(small, tmp_path):
    add_synthetic(small, tmp_path)
    rep = R.retrieval_report(small, ["recall@3", "mrr"])
    assert (rep.n_queries, rep.n_not_run) == (5, 0)
    segments = rep.segments()
    assert list(segments) == ["log", "synthetic"]
    assert segments["log"]["n_queries"] == 4 and segments["log"]["n_without_relevant"] == 1
    assert segments["log"]["metrics"]["mrr"]["mean"] == pytest.approx(0.5)
    assert segments["synthetic"]["metrics"]["mrr"] == {"mean": 0.5, "ci_low": 0.5, "ci_high": 0.5, "n": 1}
    only_log = R.retrieval_report(small, ["recall@3", "mrr"], origin="log")
    assert only_log.to_dict()["metrics"] == {s: segments["log"]["metrics"][s] for s in ("recall@3", "mrr")}
    assert R.retrieval_report(small, ["mrr"], origin="import").n_queries == 0


def test_queries_the_retriever_never_ran_are_left_out(small, tmp_path):
    # an imported question production never saw: not scored 0, left out and counted
    import_golden(small, write(tmp_path / "g.jsonl", [{"question": "brand new?", "relevant_ids": ["missed"]}]),
                  annotator="carol")
    rep = R.retrieval_report(small, ["mrr"])
    assert (rep.n_queries, rep.n_not_run, rep.metrics["mrr"]["mean"]) == (4, 1, 0.5)
    assert R.retrieval_report(small, ["mrr"], origin="import").n_not_run == 1
    # a logged empty list is a ranking: the query counts (and scores 0)
    # (a file in which no record has a chunk is refused as a mistake: this one has another record)
    ingest_logs(small, write(tmp_path / "empty.jsonl", [{"query_id": "qz", "question": "nothing found?",
                                                           "retrieved": []},
                                                          {"query_id": "qy", "question": "unlabeled",
                                                           "retrieved": [{"id": "d-y"}]}]))
    import_golden(small, write(tmp_path / "z.jsonl", [{"query_id": "qz", "question": "x", "relevant_ids": ["missed"]}]),
                  annotator="carol")
    rep = R.retrieval_report(small, ["mrr"])
    assert (rep.n_queries, rep.n_not_run, rep.metrics["mrr"]["mean"]) == (5, 1, pytest.approx(0.5 * 3 / 4))


def test_synthetic_questions_count_only_once_accepted(small, tmp_path):
    add_synthetic(small, tmp_path)
    assert R.retrieval_report(small, ["mrr"], origin="synthetic").n_queries == 1
    small.execute("UPDATE queries SET review_state = 'rejected' WHERE origin = 'synthetic'")
    assert R.retrieval_report(small, ["mrr"], origin="synthetic").n_queries == 0


# --- reuse while unchanged ---------------------------------------------------------------------------

def test_reuse_returns_the_same_report_until_anything_is_committed(small_file, db_path):
    first = R.retrieval_report(small_file, ["mrr"], reuse=True)
    assert R.retrieval_report(small_file, ["mrr"], reuse=True) is first
    other = labeler.connect(db_path)  # another connection, as another annotator's session would be
    labeler.set_setting(other, "overlap_fraction", 1.0)
    L.sync_queue(other, force=True)
    label(other, "qe", {"e1": 2, "e2": 0, "e3": 0}, annotator="bob")
    second = R.retrieval_report(small_file, ["mrr"], reuse=True)
    assert second is not first and second.n_queries == first.n_queries + 1
    assert second.to_dict() == R.retrieval_report(small_file, ["mrr"]).to_dict()
    # a change made on the reading connection itself is seen too
    L.set_grade(small_file, pk(small_file, "qe"), doc(small_file, "e1"), "bob", 0)
    third = R.retrieval_report(small_file, ["mrr"], reuse=True)
    assert third.n_without_relevant == second.n_without_relevant + 1


def test_a_refresh_after_new_labels_equals_a_full_reload(small_file, db_path, monkeypatch):
    """Only the queries with new label events are re-read, and the report is the same as reading all."""
    from labeler.report import load

    specs = ["recall@1", "recall@3", "ndcg@3", "mrr", "judged@3"]
    R.clear_cache()
    R.retrieval_report(small_file, specs, reuse=True)
    other = labeler.connect(db_path)
    label(other, "qe", {"e1": 2, "e2": 3}, annotator="bob")  # a new submitted query
    L.set_grade(other, pk(other, "qa"), doc(other, "a2"), "alice", 3)  # an edit of a submitted one
    L.set_status(other, pk(other, "qc"), "alice", "discarded")  # a query that stops counting
    L.set_grade(other, pk(other, "qd"), doc(other, "d1"), "alice", 2)
    full_loads = []
    real_load = load._load
    monkeypatch.setattr(load, "_load", lambda *a, **k: full_loads.append(1) or real_load(*a, **k))
    refreshed = R.retrieval_report(small_file, specs, reuse=True)
    assert full_loads == []  # patched, not reloaded
    # what was loaded and computed under the older version is dropped, not kept in memory
    token = R.data_token(small_file)
    assert [k[0] for k in load._LOADED.items] == [token]
    assert all(k[0] == token for k in load.REPORTS.items if isinstance(k[0], tuple))
    monkeypatch.setattr(load, "_load", real_load)
    R.clear_cache()
    reloaded = R.retrieval_report(small_file, specs, reuse=True)
    assert refreshed.to_dict() == reloaded.to_dict()
    assert refreshed.per_query_records() == reloaded.per_query_records()
    assert refreshed.n_queries == 4  # qa, qb, qd and the new qe; qc was discarded
    # a settings change is not a label event: it reloads everything
    labeler.set_setting(other, "threshold", 3)
    R.retrieval_report(small_file, specs, reuse=True)
    assert R.retrieval_report(small_file, specs, reuse=True).threshold == 3


def test_reuse_never_applies_to_in_memory_databases(small):
    assert R.data_token(small) is None
    assert R.retrieval_report(small, ["mrr"], reuse=True) is not R.retrieval_report(small, ["mrr"], reuse=True)


# --- more labels, curve, worst, diagnosis --------------------------------------------------------------

def test_more_needed_is_the_normal_approximation(small):
    rep = R.retrieval_report(small, ["recall@3", "recall@1"])
    values = np.array([1.0, 1.0, 0.0])
    sd = values.std(ddof=1)
    expected = math.ceil((1.96 * sd / 0.05) ** 2 - 3)
    assert rep.more_needed()["recall@3"] == {"n": 3, "sd": pytest.approx(sd), "half_width": pytest.approx(
        1.96 * sd / math.sqrt(3)), "more_needed": expected}
    assert rep.more_needed(half_width=10)["recall@3"]["more_needed"] == 0
    with pytest.raises(LabelerError, match="half_width must be positive"):
        rep.more_needed(0)


def test_curve_and_worst_queries(small):
    rep = R.retrieval_report(small, ["recall@3"])
    curve = rep.curve(names=["recall", "precision"], ks=[1, 3])
    assert curve[["metric", "k", "mean", "n"]].to_dict("records") == [
        {"metric": "recall", "k": 1, "mean": pytest.approx(1 / 6), "n": 3},
        {"metric": "recall", "k": 3, "mean": pytest.approx(2 / 3), "n": 3},
        {"metric": "precision", "k": 1, "mean": pytest.approx(1 / 3), "n": 3},
        {"metric": "precision", "k": 3, "mean": pytest.approx(1 / 3), "n": 3}]
    # the band is the same CI the tiles show for that spec
    tile = R.retrieval_report(small, ["recall@1"]).metrics["recall@1"]
    assert curve.iloc[0][["ci_low", "ci_high"]].tolist() == [tile["ci_low"], tile["ci_high"]]
    assert (curve["ci_low"] <= curve["mean"]).all() and (curve["mean"] <= curve["ci_high"]).all()
    assert list(rep.curve()["k"].unique()) == [1, 2, 3]  # up to the deepest logged rank
    worst = R.worst_queries(small, rep, "recall@3", limit=2)
    # qa and qb tie at 1.0: qb's first relevant chunk sits deeper (rank 2 against 1), so it is worse
    assert worst[["query_id", "value", "question", "first_relevant_rank", "missing_relevant"]].to_dict("records") == [
        {"query_id": "qd", "value": 0.0, "question": "question qd?", "first_relevant_rank": None,
         "missing_relevant": 1},
        {"query_id": "qb", "value": 1.0, "question": "question qb?", "first_relevant_rank": 2,
         "missing_relevant": 0}]
    assert R.worst_ties(rep, "recall@3", worst) == "2 queries at 1.000, showing 1"
    assert R.worst_ties(rep, "recall@3", R.worst_queries(small, rep, "recall@3", limit=3)) is None
    with pytest.raises(LabelerError, match="has no metric 'mrr'"):
        R.worst_queries(small, rep, "mrr")
    hist = rep.histogram("recall@3", bins=4)
    assert hist.to_dict("list") == {"start": [0.0, 0.25, 0.5, 0.75], "end": [0.25, 0.5, 0.75, 1.0],
                                    "queries": [1, 0, 0, 2]}


def test_worst_query_ties_break_on_rank_then_missing_chunks(db, tmp_path):
    """Twelve queries at recall@1 = 0: the one retrieving nothing relevant comes first, then the
    deeper first relevant rank, then more relevant chunks missing from the top 1; the note says the
    list cuts through the tie."""
    labeler.set_setting(db, "overlap_fraction", 0)
    records = [{"query_id": f"t{i:02d}", "question": f"tie {i}?", "retrieved": chunks(f"t{i:02d}_", 4)}
               for i in range(12)]
    ingest_logs(db, write(tmp_path / "ties.jsonl", records))
    plan = {0: {2: 3}, 1: {4: 3}, 2: {3: 3}, 3: {2: 3, 3: 3, 4: 3}, 4: {}}  # chunk number -> grade
    for i in range(12):
        q = f"t{i:02d}"
        grades = {f"{q}_{c}": 0 for c in range(1, 5)}
        for c, g in plan.get(i, {2: 3}).items():
            grades[f"{q}_{c}"] = g
        if i == 4:  # nothing relevant retrieved: the relevant chunk is one the retriever missed
            ingest_corpus(db, write(tmp_path / "missed.jsonl", [{"id": "t04_missed", "text": "missed"}]))
            grades["t04_missed"] = 3
        label(db, q, grades)
    rep = R.retrieval_report(db, ["recall@1"])
    worst = R.worst_queries(db, rep, "recall@1", limit=10)
    assert worst["value"].tolist() == [0.0] * 10
    assert worst["query_id"].tolist()[:4] == ["t04", "t01", "t02", "t03"]
    assert worst["first_relevant_rank"].tolist()[:4] == [None, 4, 3, 2]
    assert worst["missing_relevant"].tolist()[:4] == [1, 1, 1, 3][:3] + [3]
    assert worst["query_id"].tolist()[4:] == ["t00", "t05", "t06", "t07", "t08", "t09"]  # then by query id
    assert R.worst_ties(rep, "recall@1", worst) == "12 queries at 0.000, showing 10"


def test_diagnosis_states_a_verdict_only_when_the_ci_is_below(small):
    rep = R.retrieval_report(small, ["mrr"])
    # recall@1 = 1/6 with its whole CI below 0.8: a verdict
    d = rep.diagnosis(R.Thresholds(k=1, min_queries=1))
    assert (d.verdict, d.n_queries) == ("retrieval", 3)
    recall = d.checks[0]
    assert recall.name == "recall@1" and recall.reading == "fails" and recall.ci_high < 0.8
    assert "recall@1 = 0.17 < 0.8" in d.advice and "hybrid search" in d.advice
    # recall@3 = 0.67, below 0.8, but its CI contains 0.8: no verdict, and how many more labels tell
    t = R.Thresholds(k=3, min_queries=1)
    d = rep.diagnosis(t)
    recall = d.checks[0]
    assert recall.ci_low < 0.8 < recall.ci_high and recall.reading == "undecided"
    assert d.verdict == "undecided" and d.title == "Not enough labels to tell" and d.thresholds == t
    sd = np.array([1.0, 1.0, 0.0]).std(ddof=1)
    expected = math.ceil((1.96 * sd / (0.8 - 2 / 3)) ** 2) - 3
    assert d.more_needed == recall.more_needed == expected == R.more_to_decide(2 / 3, sd, 3, 0.8)
    assert f"not enough labels to tell (need about {expected} more labeled queries with a relevant chunk)" in d.advice
    assert "< 0.8" not in d.advice and "Retrieval is the bottleneck" not in d.title
    assert d.values["recall@3"] == pytest.approx(2 / 3) and d.values["faithfulness"] is None
    assert d.checks[3].reading == "unknown" and d.checks[3].shown() == "unknown (no answers judged)"
    assert R.more_to_decide(0.8, 0.3, 10, 0.8) is None  # on the threshold: no count settles it
    assert R.more_to_decide(0.5, 0.0, 10, 0.8) == 1  # never "0 more" for an undecided check


def test_diagnosis_follows_the_decision_tree(small):
    rep = R.retrieval_report(small, ["mrr"])
    mrr = rep.aggregate(["mrr"])["mrr"]
    d = rep.diagnosis(R.Thresholds(k=3, recall=0.0, mrr=mrr["ci_high"] + 0.01, ndcg=0.0, min_queries=1))
    assert d.verdict == "ranking" and "MRR = 0.50 <" in d.advice and "reranker" in d.advice
    d = rep.diagnosis(R.Thresholds(k=3, recall=0.0, mrr=0.0, ndcg=0.0, min_queries=1))
    assert d.verdict == "healthy" and "faithfulness unknown (no answers judged)" in d.advice
    assert rep.diagnosis(R.Thresholds(k=3)).verdict == "not_enough_data"  # 3 < 10 queries
    assert rep.diagnosis(R.Thresholds(k=3, recall=0.0, mrr=0.4, ndcg=0.0, min_queries=1)).verdict == "undecided"


def test_diagnosis_points_at_generation_when_answers_are_unfaithful(small):
    for q, judgment in (("qa", "no"), ("qb", "partly"), ("qd", "no")):
        L.set_query_fields(small, pk(small, q), "alice", answer_faithful=judgment)
    rep = R.retrieval_report(small, ["mrr"])
    assert rep.answers == {"yes": 0, "partly": 1, "no": 2}
    assert rep.faithfulness == pytest.approx(0.5 / 3)
    d = rep.diagnosis(R.Thresholds(k=3, recall=0.0, mrr=0.0, ndcg=0.0, faithfulness=0.8, min_queries=1))
    faith = d.checks[3]
    assert faith.value == pytest.approx(0.5 / 3) and faith.ci_high <= 0.5 and faith.n == 3
    assert d.verdict == "generation" and "17% of the answers are faithful" in d.advice
    d = rep.diagnosis(R.Thresholds(k=3, recall=0.0, mrr=0.0, ndcg=0.0, faithfulness=0.3, min_queries=1))
    assert d.verdict == "undecided" and "more judged answers" in d.advice


# --- two retrievers ----------------------------------------------------------------------------------

def test_compare_retrievers_with_a_paired_test(small, tmp_path):
    reversed_runs = [{"query_id": r["query_id"], "question": r["question"], "retriever": "bm25",
                      "retrieved": list(reversed(r["retrieved"]))} for r in RECORDS]
    ingest_logs(small, write(tmp_path / "bm25.jsonl", reversed_runs))
    assert R.retrievers(small) == ["bm25", "production"]
    c = R.compare_retrievers(small, "production", "bm25", ["mrr", "recall@3"])
    # bm25: qa ranks a3 (grade 2) first -> mrr 1; qb b2 stays at 2 -> 0.5; qd 0
    assert c.metrics["mrr"]["a"] == pytest.approx(0.5) and c.metrics["mrr"]["b"] == pytest.approx(0.5)
    assert c.metrics["mrr"]["diff"] == 0 and c.metrics["mrr"]["p_value"] == 1.0
    assert c.metrics["recall@3"]["n"] == 3 and c.n_queries == 4
    bm = R.retrieval_report(small, ["mrr"], retriever="bm25")
    assert bm.retriever == "bm25" and bm.metrics["mrr"]["mean"] == pytest.approx(0.5)
    with pytest.raises(LabelerError, match="two different retrievers"):
        R.compare_retrievers(small, "bm25", "bm25")


# --- CLI -----------------------------------------------------------------------------------------------

def test_cli_json_document_is_exactly_the_issue_shape(small_file, db_path, tmp_path):
    out = cli_json(db_path, "--k", "1,3", "--metric", "recall", "--metric", "mrr", "--per-query",
                   str(tmp_path / "pq.jsonl"))
    assert list(out) == ["n_queries", "n_without_relevant", "threshold", "retriever", "metrics", "judged"]
    # judged@k for the cutoffs reported: qa-qd all fully graded in their top 3, judged@1 too
    assert out["judged"] == {"judged@1": 1.0, "judged@3": 1.0}
    assert (out["n_queries"], out["n_without_relevant"], out["threshold"], out["retriever"]) == (4, 1, 2, "production")
    assert list(out["metrics"]) == ["recall@1", "recall@3", "mrr"]
    for v in out["metrics"].values():
        assert list(v) == ["mean", "ci_low", "ci_high", "n"]
        assert all(isinstance(v[k], float) for k in ("mean", "ci_low", "ci_high")) and isinstance(v["n"], int)
    lines = [json.loads(x) for x in (tmp_path / "pq.jsonl").read_text().splitlines()]
    assert len(lines) == 12 and set(lines[0]) == {"query_id", "metric", "value"}
    default = cli_json(db_path)
    assert list(default["metrics"]) == R.expand_specs()


def test_cli_text_and_errors(small_file, db_path):
    r = CliRunner().invoke(cli, ["--db", str(db_path), "metrics", "--k", "3", "--metric", "P"])
    assert r.exit_code == 0, r.output
    assert "production: 4 labeled queries, threshold 2; 1 without a relevant chunk" in r.output
    assert "P@3" in r.output and "judged@3" in r.output
    bad = CliRunner().invoke(cli, ["--db", str(db_path), "metrics", "--metric", "rcall@5"])
    assert bad.exit_code == 1 and bad.output.startswith("Error: unknown metric 'rcall'") and "Traceback" not in bad.output
    assert len(bad.output.strip().splitlines()) == 1
    usage = CliRunner().invoke(cli, ["--db", str(db_path), "metrics", "--k", "a,b"])
    assert usage.exit_code == 2


# --- real data: CISI with a TF-IDF retriever ------------------------------------------------------------

TREC = {"recall@5": "recall_5", "recall@10": "recall_10", "P@5": "P_5", "success@5": "success_5",
        "mrr": "recip_rank", "ndcg@10": "ndcg_cut_10", "ndcg@5": "ndcg_cut_5", "map": "map", "map@10": "map_cut_10"}


def cisi_golden() -> list[dict]:
    """CISI.REL as this tool's golden lines: every relevant document grade 1 (the documented scale),
    every retrieved one that is not relevant grade 0; the relevant ones the retriever missed are in."""
    run = cisi.tfidf_run(10)
    lines = []
    for q, relevant in sorted(cisi.qrels().items(), key=lambda kv: int(kv[0])):
        relevance = {d: 0 for d, _ in run[q]} | dict.fromkeys(relevant, 1)
        lines.append({"query_id": f"cisi-{q}", "question": cisi.queries()[q], "relevance": relevance})
    # two labeled queries without any relevant document: counted apart, left out of the means
    for q in [q for q in cisi.queries() if q not in cisi.qrels()][:2]:
        lines.append({"query_id": f"cisi-{q}", "question": cisi.queries()[q], "relevance": {d: 0 for d, _ in run[q]}})
    return lines


@pytest.fixture(scope="module")
def cisi_db(tmp_path_factory):
    cisi.require_cisi()
    tmp = tmp_path_factory.mktemp("cisi")
    db_path = tmp / "cisi.db"
    db = labeler.connect(db_path)
    ingest_logs(db, cisi.write_logs(tmp / "logs.jsonl"))
    ingest_corpus(db, cisi.write_corpus(tmp / "corpus.jsonl"))
    labeler.set_setting(db, "threshold", 1)
    result = import_golden(db, write(tmp / "cisi-golden.jsonl", cisi_golden()), annotator="cisi")
    assert (result.records, result.merged, result.rejected) == (78, 78, 0)
    return db_path


def pytrec_reference(threshold: int = 1) -> dict[str, dict[str, float]]:
    """pytrec_eval on the same labels and the logged ranking (score = 11 - rank, so ties cannot reorder)."""
    qrels = {line["query_id"]: line["relevance"] for line in cisi_golden()}
    run = {f"cisi-{q}": {d: float(11 - rank) for rank, (d, _) in enumerate(docs, 1)}
           for q, docs in cisi.tfidf_run(10).items() if f"cisi-{q}" in qrels}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, set(TREC.values()), relevance_level=threshold)
    return evaluator.evaluate(run)


def test_cisi_metrics_equal_pytrec_eval_per_query(cisi_db, tmp_path):
    out = cli_json(cisi_db, *[a for spec in TREC for a in ("--metric", spec)], "--per-query",
                   str(tmp_path / "pq.jsonl"))
    reference = pytrec_reference()
    assert (out["n_queries"], out["n_without_relevant"], out["threshold"]) == (78, 2, 1)
    per_query: dict[tuple[str, str], float | None] = {}
    for line in (tmp_path / "pq.jsonl").read_text().splitlines():
        r = json.loads(line)
        per_query[(r["query_id"], r["metric"])] = r["value"]
    relevant = {q for q, rel in cisi.qrels().items()}
    assert len(relevant) == 76
    for q in reference:
        for spec, measure in TREC.items():
            value = per_query[(q, spec)]
            if q.removeprefix("cisi-") not in relevant:
                assert value is None  # no relevant document: left out, as counted above
                continue
            assert value == pytest.approx(reference[q][measure], abs=1e-9), (q, spec)
    for spec, measure in TREC.items():
        expected = np.mean([reference[f"cisi-{q}"][measure] for q in relevant])
        assert out["metrics"][spec]["mean"] == pytest.approx(expected, abs=1e-9)
        assert out["metrics"][spec]["n"] == 76


def _bench_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_metrics_page", Path(__file__).parent / "bench" / "bench_metrics_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_patched_report_equals_a_full_recompute_at_scale(tmp_path):
    """Thousands of queries in two origins; after label changes the kept per-query values and
    bootstrap sums are patched, and every number equals a report computed from nothing."""
    path = _bench_module().build_db(tmp_path / "big.db", 3000, seed=5)
    db = labeler.connect(path)
    specs = ["recall@1", "recall@5", "ndcg@10", "mrr", "precision@3"]
    R.clear_cache()
    before = R.retrieval_report(db, specs, reuse=True)
    before.segments()
    before.curve()
    assert before.n_queries == 3000 and set(before.per_query["origin"]) == {"log", "synthetic"}
    # the report's intervals are those of metrics.aggregate on its per-query values
    agg = M.aggregate(before.per_query.set_index("query_pk")[[*specs, "n_relevant", "n_retrieved"]])
    for s in specs:
        assert before.metrics[s] == pytest.approx(agg[s], abs=1e-12)
    other = labeler.connect(path)
    rng = np.random.default_rng(1)
    # one label of each of 40 distinct queries, drawn with the seeded generator (SQLite's random()
    # is not seeded, and two picks of one query made the discarded count vary)
    rows = other.execute("SELECT query_pk, min(doc_pk), grade FROM relevance_labels GROUP BY query_pk "
                         "ORDER BY query_pk").fetchall()
    picked = [rows[i] for i in rng.choice(len(rows), 40, replace=False)]
    for q, d, g in picked[:30]:
        L.set_grade(other, q, d, "bench", int((g + 1 + rng.integers(0, 3)) % 4))
    for q, _, _ in picked[30:33]:
        L.set_status(other, q, "bench", "discarded")  # stops counting
    for q, _, _ in picked[33:40]:
        unjudged = other.execute("SELECT doc_pk FROM retrievals WHERE query_pk = ? AND doc_pk NOT IN "
                                 "(SELECT doc_pk FROM relevance_labels WHERE query_pk = ?) LIMIT 1", [q, q]).fetchone()
        if unjudged:
            L.set_grade(other, q, unjudged[0], "bench", 3)
    patched = R.retrieval_report(db, specs, reuse=True)
    assert patched is not before and patched.n_queries == 2997
    R.clear_cache()
    full = R.retrieval_report(db, specs, reuse=True)
    assert patched.per_query_records() == full.per_query_records()
    assert _close(patched.to_dict(), full.to_dict())
    for origin in ("log", "synthetic"):
        a, b = patched.segments()[origin], full.segments()[origin]
        assert a["n_queries"] == b["n_queries"] and _close(a["metrics"], b["metrics"])
    pc, fc = patched.curve(), full.curve()  # the bands' sums were patched: equal up to float rounding
    assert pc[["metric", "k", "mean", "n"]].equals(fc[["metric", "k", "mean", "n"]])
    assert np.allclose(pc[["ci_low", "ci_high"]].to_numpy(float), fc[["ci_low", "ci_high"]].to_numpy(float),
                       rtol=0, atol=1e-9)
    synthetic = R.retrieval_report(db, specs, origin="synthetic", reuse=True)
    assert _close(synthetic.metrics, full.segments()["synthetic"]["metrics"])


def _close(a, b, tol=1e-9) -> bool:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), (a.keys(), b.keys())
        return all(_close(a[k], b[k], tol) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        assert abs(a - b) <= tol, (a, b)
        return True
    assert a == b, (a, b)
    return True


def test_concurrent_first_requests_load_once(small_file, db_path, monkeypatch):
    """Two sessions opening the Metrics page together wait for one computation, not two."""
    import threading
    import time

    from labeler.report import load

    R.clear_cache()
    loads = []
    real = load._load

    def slow_load(*a, **k):
        loads.append(1)
        time.sleep(0.3)
        return real(*a, **k)

    monkeypatch.setattr(load, "_load", slow_load)
    results = []

    def visit():
        db = labeler.connect(db_path)
        results.append(R.retrieval_report(db, ["mrr"], reuse=True))

    threads = [threading.Thread(target=visit) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1 and len(results) == 3 and results[0] is results[1] is results[2]
