"""The exports as their consumers read them: TREC files under pytrec_eval and ir_measures, the golden
JSONL under pandas and Hugging Face `datasets`, the BEIR folder loaded and scored the way BEIR does
it, the Ragas JSONL as Ragas' own EvaluationDataset and ID-based metrics, and the CSV as a
spreadsheet would see it (formula cells neutralised).

Every number a consumer computes is compared with `labeler metrics` on the same database: the demo
data (50 labeled questions, grades 0-3, threshold 2), where a grade-1 chunk is not relevant to us but
is to any tool that counts every grade > 0. ir_measures and datasets come with the ``consumers``
extra (``[test]`` installs it; the lowest-versions CI step does not, since datasets needs a newer
pyarrow than the lowest one the package allows); Ragas pins an older openai, so CI runs its test in
a venv of its own (``.ci/run``). ``LABELER_REQUIRE_CONSUMERS`` (comma-separated names) makes a
missing consumer a failure instead of a skip: CI sets it wherever a consumer is installed.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import warnings
from pathlib import Path

import pandas as pd
import pytest
import pytrec_eval
from click.testing import CliRunner

from labeler import export as E
from labeler.cli import cli
from tests.optional import required as consumer
from tests.test_report import label


def run_cli(db: Path, *args: str):
    r = CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("demo") / "demo.db"
    run_cli(db, "demo", "--no-app")
    return db


def ours(db: Path, *specs: str) -> dict[str, float]:
    """`labeler metrics --json` means."""
    args = [a for s in specs for a in ("--metric", s)]
    out = json.loads(run_cli(db, "metrics", *args, "--json").output)
    return {s: out["metrics"][s]["mean"] for s in specs}


def export(db: Path, fmt: str, path: Path) -> Path:
    run_cli(db, "export", "--format", fmt, "-o", str(path))
    return path


def read_trec(folder: Path) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels.txt").read_text().splitlines():
        q, _, d, g = line.split()
        qrels.setdefault(q, {})[d] = int(g)
    run: dict[str, dict[str, float]] = {}
    for line in (folder / "run.production.txt").read_text().splitlines():
        q, _, d, _, score, _ = line.split()
        run.setdefault(q, {})[d] = float(score)
    return qrels, run


# --- TREC: pytrec_eval and ir_measures -------------------------------------------------------------

def test_trec_under_pytrec_eval_gives_labeler_metrics(demo, tmp_path):
    qrels, run = read_trec(export(demo, "trec", tmp_path / "trec"))
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"recall_5", "P_5", "ndcg_cut_10", "recip_rank"},
                                            relevance_level=2).evaluate(run)
    mean = {m: sum(s[m] for s in scores.values()) / len(scores) for m in ("recall_5", "P_5", "ndcg_cut_10",
                                                                          "recip_rank")}
    expected = ours(demo, "recall@5", "P@5", "ndcg@10", "mrr")
    assert len(scores) == 50
    assert mean == pytest.approx({"recall_5": expected["recall@5"], "P_5": expected["P@5"],
                                  "ndcg_cut_10": expected["ndcg@10"], "recip_rank": expected["mrr"]}, abs=1e-12)


def test_trec_under_ir_measures_gives_labeler_metrics(demo, tmp_path):
    ir_measures = consumer("ir_measures")
    from ir_measures import RR, P, R, nDCG

    folder = export(demo, "trec", tmp_path / "trec")
    qrels = list(ir_measures.read_trec_qrels(str(folder / "qrels.txt")))
    run = list(ir_measures.read_trec_run(str(folder / "run.production.txt")))
    got = ir_measures.calc_aggregate([R(rel=2) @ 5, P(rel=2) @ 5, nDCG @ 10, RR(rel=2), R @ 5], qrels, run)
    expected = ours(demo, "recall@5", "P@5", "ndcg@10", "mrr")
    assert got[R(rel=2) @ 5] == pytest.approx(expected["recall@5"], abs=1e-12)
    assert got[P(rel=2) @ 5] == pytest.approx(expected["P@5"], abs=1e-12)
    assert got[nDCG @ 10] == pytest.approx(expected["ndcg@10"], abs=1e-12)
    assert got[RR(rel=2)] == pytest.approx(expected["mrr"], abs=1e-12)
    # without rel=2 (the threshold, as docs/exports.md says) grade 1 counts as relevant: another number
    assert got[R @ 5] < expected["recall@5"] - 0.01


# --- golden JSONL: pandas and Hugging Face datasets ---------------------------------------------------

def test_golden_jsonl_under_pandas(demo, tmp_path):
    path = export(demo, "jsonl", tmp_path / "golden.jsonl")
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    df = pd.read_json(path, lines=True)
    assert len(df) == len(lines) == 50
    assert list(df.columns) == list(lines[0])
    assert df["query_id"].tolist() == [x["query_id"] for x in lines]
    assert df["relevant_ids"].tolist() == [x["relevant_ids"] for x in lines]
    assert df["relevance"].tolist() == [x["relevance"] for x in lines]


def test_golden_jsonl_under_pandas_keeps_number_like_ids_with_dtype_false(db, tmp_path, ingest_tiny):
    """pandas turns "0042" into 42 unless told not to guess types (docs/exports.md says so)."""
    records = [{"query_id": "0042", "question": "what is 42?", "retrieved": [{"id": "007", "text": "seven"}]}]
    ingest_tiny(db, records=records)
    label(db, "0042", {"007": 3})
    E.export_golden(db, tmp_path / "golden.jsonl")
    assert pd.read_json(tmp_path / "golden.jsonl", lines=True)["query_id"].tolist() == [42]
    df = pd.read_json(tmp_path / "golden.jsonl", lines=True, dtype=False)
    assert df["query_id"].tolist() == ["0042"] and df["relevant_ids"].tolist() == [["007"]]


def test_golden_jsonl_under_hugging_face_datasets(demo, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    datasets = consumer("datasets")
    path = export(demo, "jsonl", tmp_path / "golden.jsonl")
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    ds = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    assert ds.num_rows == 50 and ds.column_names == list(lines[0])
    rows = ds.to_list()
    for row, line in zip(rows, lines, strict=True):
        assert row["query_id"] == line["query_id"] and row["question"] == line["question"]
        assert row["relevant_ids"] == line["relevant_ids"]
        # each line's own {chunk id: grade}, not a union of every line's keys
        assert row["relevance"] == line["relevance"]
        assert row["expected_answer"] == line["expected_answer"]


# --- BEIR: the folder loaded and scored as beir 2.2.0 does --------------------------------------------
# Mirrors of beir.datasets.data_loader.GenericDataLoader.load and
# beir.retrieval.evaluation.EvaluateRetrieval.evaluate (beir needs torch via sentence-transformers, too
# heavy for a test dependency). Same reads, same pytrec_eval call (default relevance_level=1), same
# averaging over the evaluated queries and the same rounding to 5 decimals.

def beir_load(folder: Path, split: str = "test") -> tuple[dict, dict, dict]:
    corpus, queries, qrels = {}, {}, {}
    with open(folder / "corpus.jsonl", encoding="utf8") as f:
        for line in f:
            line = json.loads(line)
            corpus[line.get("_id")] = {"text": line.get("text"), "title": line.get("title")}
    with open(folder / "queries.jsonl", encoding="utf8") as f:
        for line in f:
            line = json.loads(line)
            queries[line.get("_id")] = line.get("text")
    with open(folder / "qrels" / f"{split}.tsv", encoding="utf-8") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_MINIMAL)
        next(reader)
        for row in reader:
            query_id, corpus_id, score = row[0], row[1], int(row[2])
            qrels.setdefault(query_id, {})[corpus_id] = score
    queries = {qid: queries[qid] for qid in qrels}
    return corpus, queries, qrels


def beir_evaluate(qrels: dict, results: dict, k_values: list[int], ignore_identical_ids: bool = True):
    if ignore_identical_ids:
        for qid, rels in results.items():
            for pid in list(rels):
                if qid == pid:
                    results[qid].pop(pid)
    ndcg = {f"NDCG@{k}": 0.0 for k in k_values}
    _map = {f"MAP@{k}": 0.0 for k in k_values}
    recall = {f"Recall@{k}": 0.0 for k in k_values}
    precision = {f"P@{k}": 0.0 for k in k_values}
    ks = ",".join(str(k) for k in k_values)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {f"map_cut.{ks}", f"ndcg_cut.{ks}", f"recall.{ks}", f"P.{ks}"})
    scores = evaluator.evaluate(results)
    for query_id in scores:
        for k in k_values:
            ndcg[f"NDCG@{k}"] += scores[query_id][f"ndcg_cut_{k}"]
            _map[f"MAP@{k}"] += scores[query_id][f"map_cut_{k}"]
            recall[f"Recall@{k}"] += scores[query_id][f"recall_{k}"]
            precision[f"P@{k}"] += scores[query_id][f"P_{k}"]
    for k in k_values:
        ndcg[f"NDCG@{k}"] = round(ndcg[f"NDCG@{k}"] / len(scores), 5)
        _map[f"MAP@{k}"] = round(_map[f"MAP@{k}"] / len(scores), 5)
        recall[f"Recall@{k}"] = round(recall[f"Recall@{k}"] / len(scores), 5)
        precision[f"P@{k}"] = round(precision[f"P@{k}"] / len(scores), 5)
    return ndcg, _map, recall, precision


def test_beir_folder_under_beirs_evaluator_gives_labeler_metrics(demo, tmp_path):
    folder = export(demo, "beir", tmp_path / "beir")
    corpus, queries, qrels = beir_load(folder)
    _, run = read_trec(export(demo, "trec", tmp_path / "trec"))  # the logged ranking as BEIR results
    results = {q: dict(docs) for q, docs in run.items() if q in queries}
    assert len(queries) == len(results) == 50 and all(d in corpus for q in qrels.values() for d in q)
    ndcg, _map, recall, precision = beir_evaluate(qrels, results, [1, 5, 10])
    expected = ours(demo, "recall@5", "recall@10", "P@5", "map@10", "ndcg@5")
    assert recall["Recall@5"] == pytest.approx(expected["recall@5"], abs=5e-6)
    assert recall["Recall@5"] == pytest.approx(0.76667, abs=5e-6)
    assert recall["Recall@10"] == pytest.approx(expected["recall@10"], abs=5e-6)
    assert precision["P@5"] == pytest.approx(expected["P@5"], abs=5e-6)
    assert _map["MAP@10"] == pytest.approx(expected["map@10"], abs=5e-6)
    # test.tsv leaves out the grades below the threshold, so BEIR's nDCG misses their gain; the
    # graded file has them, and BEIR's nDCG on it is ours (its binary metrics then are not)
    assert ndcg["NDCG@5"] != pytest.approx(expected["ndcg@5"], abs=1e-4)
    _, _, graded_qrels = beir_load(folder, "test.graded")
    assert set(graded_qrels) == set(qrels)
    graded_ndcg, _, graded_recall, _ = beir_evaluate(graded_qrels, {q: dict(d) for q, d in results.items()}, [5])
    assert graded_ndcg["NDCG@5"] == pytest.approx(expected["ndcg@5"], abs=5e-6)
    assert graded_recall["Recall@5"] == pytest.approx(0.73833, abs=5e-6)  # grade 1 counted relevant


# --- Ragas: EvaluationDataset and the ID-based context metrics ----------------------------------------

def test_ragas_jsonl_under_ragas(demo, tmp_path):
    consumer("ragas")
    from ragas.dataset_schema import EvaluationDataset, SingleTurnSample

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy metric classes still work in 0.4
        from ragas.metrics import IDBasedContextPrecision, IDBasedContextRecall

    path = export(demo, "ragas", tmp_path / "ragas.jsonl")
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    dataset = EvaluationDataset.from_jsonl(path)
    assert len(dataset) == 50 and all(isinstance(s, SingleTurnSample) for s in dataset)
    for sample, line in zip(dataset, lines, strict=True):
        assert sample.retrieved_context_ids == line["retrieved_context_ids"]
        assert sample.reference_context_ids == line["reference_context_ids"]
        assert len(sample.retrieved_context_ids) == len(sample.retrieved_contexts)
        assert len(sample.reference_context_ids) == len(sample.reference_contexts)
    assert {"retrieved_context_ids", "reference_context_ids"} <= set(dataset.features())
    recall_metric, precision_metric = IDBasedContextRecall(), IDBasedContextPrecision()

    async def score_all() -> tuple[list[float], list[float]]:
        r = [await recall_metric.single_turn_ascore(s) for s in dataset]
        p = [await precision_metric.single_turn_ascore(s) for s in dataset]
        return r, p

    recall, precision = asyncio.run(score_all())
    # every demo query retrieved 8 chunks: Ragas' ID-based recall and precision are ours at 8
    assert {len(x["retrieved_context_ids"]) for x in lines} == {8}
    expected = ours(demo, "recall@8", "P@8")
    assert sum(recall) / len(recall) == pytest.approx(expected["recall@8"], abs=1e-12)
    assert sum(precision) / len(precision) == pytest.approx(expected["P@8"], abs=1e-12)


# --- CSV: formula cells neutralised -------------------------------------------------------------------

INJECTIONS = ['=HYPERLINK("http://x","y")', "+1", "-2+3", "@SUM(A1)"]


def test_csv_formula_cells_are_neutralised(db, tmp_path, ingest_tiny):
    records = [{"query_id": f"q{i}", "question": q,
                "retrieved": [{"id": "=cmd|' /C calc'!A0" if i == 0 else f"d{i}", "text": "t", "score": -0.5}]}
               for i, q in enumerate(INJECTIONS)]
    ingest_tiny(db, records=records)
    for i, r in enumerate(records):
        label(db, f"q{i}", {r["retrieved"][0]["id"]: 2})
    E.export_golden(db, tmp_path / "pairs.csv", "csv")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "pairs.csv").read_text(encoding="utf-8"))))
    assert [r["question"] for r in rows] == ["'" + q for q in INJECTIONS]
    assert rows[0]["doc_id"] == "'=cmd|' /C calc'!A0"
    assert [r["score"] for r in rows] == ["-0.5"] * 4  # numbers stay numbers
    text_columns = ("query_id", "question", "doc_id", "origin")
    assert not any(r[c].startswith(("=", "+", "-", "@", "\t", "\r")) for r in rows for c in text_columns)


@pytest.mark.parametrize("cell", ['=HYPERLINK("http://x","y")', "+1", "-2+3", "@SUM(A1)", "\tfoo", "\rfoo"])
def test_spreadsheet_safe_prefixes_formula_starts(cell):
    assert E.spreadsheet_safe(cell) == "'" + cell
    # read back through the csv module, the cell still starts with the quote
    out = io.StringIO()
    csv.writer(out).writerow([E.spreadsheet_safe(cell), "-0.5"])
    assert next(csv.reader(io.StringIO(out.getvalue()))) == ["'" + cell, "-0.5"]


@pytest.mark.parametrize("cell", ["how do I export?", "a=b", "", "'quoted", "1-2"])
def test_spreadsheet_safe_leaves_other_text_alone(cell):
    assert E.spreadsheet_safe(cell) == cell

