"""Several retrievers through the public surface: the default retriever in `labeler metrics`,
`export` and `eval` (one retriever not called production works without --retriever; two without
production are a one-line error), one trec run file per retriever equal to `labeler metrics` under
pytrec_eval, `labeler metrics --compare` on a hand-computed case, and CISI with two real retrievers
labeled on their pooled top 10."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval
from click.testing import CliRunner

import labeler
from labeler import export as E
from labeler import labels as L
from labeler import metrics as M
from labeler import report as R
from labeler.cli import cli
from labeler.ingest import ingest_logs
from tests import cisi
from tests.test_report import TREC, write

# Each query q1..q4 has a relevant chunk r (grade 2) and two irrelevant ones n1, n2 (grade 0); u is
# never labeled. Rankings (chunk names without the query prefix):
TFIDF = {"q1": ["r", "n1", "n2"], "q2": ["r", "n1", "n2"], "q3": ["n1", "r", "n2"], "q4": ["n1", "n2", "r"]}
BM25 = {"q1": ["n1", "r", "n2"], "q2": ["n1", "n2", "r"], "q3": ["r", "n1", "u"], "q4": ["n1", "n2", "u"]}
# mrr     tfidf 1, 1, 1/2, 1/3 (mean 17/24)   bm25 1/2, 1/3, 1, 0 (mean 11/24)   diff 1/2, 2/3, -1/2, 1/3
# recall@1 tfidf 1, 1, 0, 0                    bm25 0, 0, 1, 0                    diff 1, 1, -1, 0
# judged@3 tfidf 1                             bm25 1, 1, 2/3, 2/3 (mean 5/6 < 0.9: a warning)


def records(rankings: dict[str, list[str]], retriever: str) -> list[dict]:
    return [{"query_id": q, "question": f"question {q}?", "retriever": retriever,
             "retrieved": [{"id": f"{q}-{c}", "text": f"chunk {c} of {q}", "score": round(1 - i / 10, 2)}
                           for i, c in enumerate(chunks)]} for q, chunks in rankings.items()]


def grade_all(db) -> None:
    labeler.set_setting(db, "overlap_fraction", 0)
    for q in TFIDF:
        query_pk = db.execute("SELECT pk FROM queries WHERE query_id = ?", [q]).fetchone()[0]
        for c, g in (("r", 2), ("n1", 0), ("n2", 0)):
            doc_pk = db.execute("SELECT pk FROM documents WHERE doc_id = ?", [f"{q}-{c}"]).fetchone()[0]
            L.set_grade(db, query_pk, doc_pk, "alice", g)
        L.set_status(db, query_pk, "alice", "submitted")


@pytest.fixture
def one(file_db, db_path, tmp_path):
    """Only `tfidf` logged rankings."""
    ingest_logs(file_db, write(tmp_path / "tfidf.jsonl", records(TFIDF, "tfidf")))
    grade_all(file_db)
    return db_path


@pytest.fixture
def two(file_db, db_path, tmp_path):
    """`tfidf` and `bm25` logged rankings for the same queries; no `production`."""
    ingest_logs(file_db, write(tmp_path / "tfidf.jsonl", records(TFIDF, "tfidf")))
    ingest_logs(file_db, write(tmp_path / "bm25.jsonl", records(BM25, "bm25")))
    grade_all(file_db)
    return db_path


def cli_run(db_path: Path, *args: str):
    return CliRunner().invoke(cli, ["--db", str(db_path), *args])


def read_trec(path: Path, columns: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        assert len(parts) == columns
        q, d, value = (parts[0], parts[2], parts[3]) if columns == 4 else (parts[0], parts[2], parts[4])
        out.setdefault(q, {})[d] = int(value) if columns == 4 else float(value)
    return out


# --- one retriever not called production -----------------------------------------------------------

def test_a_single_retriever_named_tfidf_needs_no_retriever_option(one, tmp_path):
    r = cli_run(one, "metrics", "--metric", "mrr", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["retriever"] == "tfidf" and out["metrics"]["mrr"]["mean"] == pytest.approx(17 / 24)
    assert out["judged"] == {"judged@10": 1.0}  # its top 10 is 3 chunks, all graded: no warning
    assert "Warning" not in cli_run(one, "metrics").output
    r = cli_run(one, "export", "--format", "trec", "-o", str(tmp_path / "trec"))
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "trec").iterdir()) == ["qrels.txt", "run.tfidf.txt"]
    assert (tmp_path / "trec" / "run.tfidf.txt").read_text().splitlines()[0] == "q1 Q0 q1-r 1 3 tfidf"
    r = cli_run(one, "export", "-o", str(tmp_path / "golden.jsonl"))
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "golden.jsonl.manifest.json").read_text())
    assert manifest["filters"]["retriever"] == "tfidf" and manifest["metrics"]["retriever"] == "tfidf"
    r = cli_run(one, "eval", "--golden", str(tmp_path / "golden.jsonl"), "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["pipeline"]["retriever"] == "tfidf"
    assert report["metrics"]["mrr"]["mean"] == pytest.approx(17 / 24)


# --- two retrievers, none called production --------------------------------------------------------

AMBIGUOUS = ("Error: several retrievers logged rankings (bm25, tfidf) and none is called 'production'; "
             "name one with --retriever\n")


def test_two_retrievers_without_production_are_a_one_line_error(two, tmp_path):
    golden = tmp_path / "golden.jsonl"
    assert cli_run(two, "export", "-o", str(golden)).exit_code == 0  # jsonl embeds no ranking
    for args in (["metrics"], ["metrics", "--json"], ["export", "--format", "csv", "-o", str(tmp_path / "g.csv")],
                 ["export", "--format", "ragas", "-o", str(tmp_path / "r.jsonl")], ["eval", "--golden", str(golden)]):
        r = cli_run(two, *args)
        assert (r.exit_code, r.output) == (1, AMBIGUOUS), args
    # naming one works everywhere
    assert cli_run(two, "metrics", "--retriever", "bm25").exit_code == 0
    assert cli_run(two, "export", "--format", "csv", "--retriever", "bm25", "-o", str(tmp_path / "g.csv")).exit_code == 0
    r = cli_run(two, "eval", "--golden", str(golden), "--retriever", "bm25", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["metrics"]["mrr"]["mean"] == pytest.approx(11 / 24)


def test_a_retriever_that_logged_nothing_is_the_same_error_everywhere(two, tmp_path):
    message = "Error: retriever 'dense' logged no rankings; logged: bm25, tfidf\n"
    for args in (["metrics", "--retriever", "dense"],
                 ["export", "--retriever", "dense", "-o", str(tmp_path / "g.jsonl")],
                 ["export", "--format", "trec", "--retriever", "dense", "-o", str(tmp_path / "trec")]):
        r = cli_run(two, *args)
        assert (r.exit_code, r.output) == (1, message), args
    assert not (tmp_path / "g.jsonl").exists() and not (tmp_path / "trec").exists()


def test_trec_run_files_of_both_retrievers_equal_labeler_metrics(two, tmp_path):
    r = cli_run(two, "export", "--format", "trec", "-o", str(tmp_path / "trec"))
    assert r.exit_code == 0, r.output
    assert "as trec; runs: run.bm25.txt, run.tfidf.txt; export version" in r.output
    folder = tmp_path / "trec"
    assert sorted(p.name for p in folder.iterdir()) == ["qrels.txt", "run.bm25.txt", "run.tfidf.txt"]
    qrels = read_trec(folder / "qrels.txt", 4)
    assert qrels["q3"] == {"q3-n1": 0, "q3-n2": 0, "q3-r": 2}
    manifest = json.loads((tmp_path / "trec.manifest.json").read_text())
    assert manifest["metrics"] is None and sorted(manifest["run_metrics"]) == ["bm25", "tfidf"]
    specs = ["recall@1", "recall@3", "P@3", "mrr", "ndcg@3", "map"]
    measures = [TREC.get(s, {"recall@1": "recall_1", "recall@3": "recall_3", "P@3": "P_3", "ndcg@3": "ndcg_cut_3"}.get(s))
                for s in specs]
    for retriever in ("tfidf", "bm25"):
        run = read_trec(folder / f"run.{retriever}.txt", 6)
        scores = pytrec_eval.RelevanceEvaluator(qrels, set(measures), relevance_level=2).evaluate(run)
        r = cli_run(two, "metrics", "--retriever", retriever, *[a for s in specs for a in ("--metric", s)], "--json")
        out = json.loads(r.output)
        for spec, measure in zip(specs, measures, strict=True):
            expected = np.mean([s[measure] for s in scores.values()])
            assert out["metrics"][spec]["mean"] == pytest.approx(expected, abs=1e-12), (retriever, spec)
        assert manifest["run_metrics"][retriever]["metrics"]["mrr"] == pytest.approx(
            json.loads(cli_run(two, "metrics", "--retriever", retriever, "--json").output)["metrics"]["mrr"])
    r = cli_run(two, "export", "--format", "trec", "--retriever", "bm25", "-o", str(tmp_path / "only"))
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "only").iterdir()) == ["qrels.txt", "run.bm25.txt"]
    assert (tmp_path / "only" / "qrels.txt").read_bytes() == (folder / "qrels.txt").read_bytes()


def test_run_file_names_are_safe_and_distinct():
    assert E.run_file_name("bm25-v2.1_x") == "run.bm25-v2.1_x.txt"
    odd = E.run_file_name("my retriever/v2")
    assert odd.startswith("run.my_retriever_v2-") and odd.endswith(".txt") and len(odd) == len("run.my_retriever_v2-.txt") + 8
    assert E.run_file_name("my retriever/v2") != E.run_file_name("my_retriever/v2")
    assert "/" not in E.run_file_name("../x") and E.run_file_name("..") != "run....txt"


# --- --compare ---------------------------------------------------------------------------------------

def test_compare_json_on_a_hand_computed_case(two):
    r = cli_run(two, "metrics", "--compare", "tfidf,bm25", "--k", "1,3", "--metric", "recall", "--metric", "mrr",
                "--seed", "7", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert list(out) == ["a", "b", "n_queries", "n_without_relevant", "threshold", "seed", "n_resamples",
                         "n_permutations", "metrics", "judged", "warnings"]
    assert (out["a"], out["b"], out["n_queries"], out["n_without_relevant"], out["seed"]) == ("tfidf", "bm25", 4, 0, 7)
    assert list(out["metrics"]) == ["recall@1", "recall@3", "mrr"]
    mrr = out["metrics"]["mrr"]
    assert list(mrr) == ["a", "b", "diff", "ci_low", "ci_high", "p_value", "n"]
    assert (mrr["a"], mrr["b"], mrr["diff"], mrr["n"]) == pytest.approx((17 / 24, 11 / 24, 1 / 4, 4))
    # exact over all 2^4 sign flips of (3, 4, -3, 2)/6: |sum| >= 6/6 for 8 of 16
    assert mrr["p_value"] == 0.5
    # recall@1: differences (1, 1, -1, 0): every flip has |sum| >= 1
    assert out["metrics"]["recall@1"]["diff"] == pytest.approx(0.25) and out["metrics"]["recall@1"]["p_value"] == 1.0
    # the CI is the seeded Poisson bootstrap of the mean difference, keyed by query pk
    db = labeler.connect(two)
    pks = [db.execute("SELECT pk FROM queries WHERE query_id = ?", [q]).fetchone()[0] for q in TFIDF]
    import pandas as pd

    ci = M.aggregate(pd.DataFrame({"d": [1 / 2, 2 / 3, -1 / 2, 1 / 3]}, index=pd.Index(pks)), seed=7)["d"]
    assert (mrr["ci_low"], mrr["ci_high"]) == pytest.approx((ci["ci_low"], ci["ci_high"]))
    assert mrr["ci_low"] <= mrr["diff"] <= mrr["ci_high"]
    assert out["judged"] == {"tfidf": {"judged@1": 1.0, "judged@3": 1.0},
                             "bm25": {"judged@1": 1.0, "judged@3": pytest.approx(5 / 6)}}
    assert out["warnings"] == [R.judged_warning("bm25", "judged@3", 5 / 6)]
    text = cli_run(two, "metrics", "--compare", "tfidf,bm25", "--k", "3")
    assert text.exit_code == 0 and "tfidf vs bm25: 4 labeled queries both ran" in text.output
    assert "Warning: bm25: judged@3 = 0.83 < 0.9" in text.output
    for bad in ("tfidf", "tfidf,tfidf", "tfidf,dense"):
        r = cli_run(two, "metrics", "--compare", bad)
        assert r.exit_code in (1, 2) and "Traceback" not in r.output, bad
    assert "logged no rankings" in cli_run(two, "metrics", "--compare", "tfidf,dense").output


def test_metrics_warns_when_judged_is_low(two):
    r = cli_run(two, "metrics", "--retriever", "bm25", "--k", "3")
    assert r.exit_code == 0
    assert "Warning: bm25: judged@3 = 0.83 < 0.9: its metrics count the unjudged chunks" in r.output
    assert "Warning" not in cli_run(two, "metrics", "--retriever", "tfidf", "--k", "3").output


def test_exact_sign_flip_test_enumerates_every_assignment():
    a, b = np.array([1.0, 1.0, 0.5, 1 / 3]), np.array([0.5, 1 / 3, 1.0, 0.0])
    assert M.paired_test(a, b, exact=True) == 0.5
    assert M.paired_test(np.ones(5), np.zeros(5), exact=True) == 2 / 32  # only all-kept and all-flipped
    # too few permutations asked for an exact answer: the seeded sampled test
    assert M.paired_test(np.ones(5), np.zeros(5), n_resamples=16, exact=True) != 2 / 32


# --- CISI: two real retrievers, labeled on their pooled top 10 ------------------------------------------

@pytest.fixture(scope="module")
def titles_run() -> dict[str, list[tuple[str, float]]]:
    """A second, different retriever: TF-IDF over the titles only (ties by doc id)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    docs = cisi.documents()
    ids = list(docs)
    vec = TfidfVectorizer(stop_words="english", sublinear_tf=True)
    matrix = vec.fit_transform([docs[i]["title"] for i in ids])
    qids = list(cisi.queries())
    sims = (vec.transform([cisi.queries()[q] for q in qids]) @ matrix.T).toarray()
    run = {}
    for qi, q in enumerate(qids):
        order = np.lexsort((np.array([int(i) for i in ids]), -np.round(sims[qi], 6)))[:10]
        run[q] = [(ids[j], round(float(sims[qi, j]), 6)) for j in order]
    return run


def test_cisi_two_retrievers_on_the_pooled_labels_equal_pytrec_eval(tmp_path, titles_run):
    cisi.require_cisi()
    runs = {"tfidf": cisi.tfidf_run(10), "titles": titles_run}
    docs = cisi.documents()
    db = labeler.connect(tmp_path / "cisi.db")
    labeler.set_setting(db, "overlap_fraction", 0)
    for name, run in runs.items():
        ingest_logs(db, write(tmp_path / f"{name}.jsonl", [
            {"query_id": f"cisi-{q}", "question": question, "retriever": name,
             "retrieved": [{"id": d, "score": s, "title": docs[d]["title"], "text": docs[d]["text"]} for d, s in run[q]]}
            for q, question in cisi.queries().items()]))
    assert R.retrievers(db) == ["tfidf", "titles"]
    # the pool: the union of both top 10s; relevant in CISI.REL -> grade 2, else 0
    qrels: dict[str, dict[str, int]] = {}
    doc_pk = dict(db.execute("SELECT doc_id, pk FROM documents").fetchall())
    for q in cisi.queries():
        pool = dict.fromkeys(d for run in runs.values() for d, _ in run[q])
        grades = {d: 2 if d in cisi.qrels().get(q, set()) else 0 for d in pool}
        qrels[f"cisi-{q}"] = grades
        query_pk = db.execute("SELECT pk FROM queries WHERE query_id = ?", [f"cisi-{q}"]).fetchone()[0]
        for d, g in grades.items():
            L.set_grade(db, query_pk, doc_pk[d], "cisi", g)
        L.set_status(db, query_pk, "cisi", "submitted")
    with_relevant = {q for q, grades in qrels.items() if max(grades.values()) == 2}
    assert 0 < len(with_relevant) < len(qrels)
    overlap = np.mean([len(set(d for d, _ in runs["tfidf"][q]) & set(d for d, _ in runs["titles"][q]))
                       for q in cisi.queries()])
    assert overlap < 7  # two different retrievers: their top 10s differ
    specs = list(TREC)
    for name, run in runs.items():
        report = R.retrieval_report(db, specs, retriever=name)
        assert report.judged["judged@10"]["mean"] == 1.0 and report.judged_warnings() == []
        reference = pytrec_eval.RelevanceEvaluator(
            {q: qrels[q] for q in with_relevant}, set(TREC.values()), relevance_level=2).evaluate(
            {f"cisi-{q}": {d: float(11 - rank) for rank, (d, _) in enumerate(docs_, 1)}
             for q, docs_ in run.items() if f"cisi-{q}" in with_relevant})
        assert report.n_queries - report.n_without_relevant == len(reference) == len(with_relevant)
        per_query = report.per_query.set_index("query_id")
        for q, values in reference.items():
            for spec, measure in TREC.items():
                assert per_query.loc[q, spec] == pytest.approx(values[measure], abs=1e-9), (name, q, spec)
        for spec, measure in TREC.items():
            assert report.metrics[spec]["mean"] == pytest.approx(
                np.mean([v[measure] for v in reference.values()]), abs=1e-12)
    c = R.compare_retrievers(db, "tfidf", "titles", ["recall@10", "ndcg@10"], ks=[10])
    assert c.judged == {"tfidf": {"judged@10": 1.0}, "titles": {"judged@10": 1.0}} and c.warnings == []
    assert c.n_queries == len(qrels) and c.metrics["recall@10"]["n"] == len(with_relevant)
