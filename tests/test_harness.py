"""``labeler eval``: a real TF-IDF retriever over CISI as the pipeline, its degraded and noisy variants,
an HTTP pipeline on a loopback server, failing and hanging pipelines, bad golden files, baselines,
the GitHub step summary, and the production retrieval stored in a database."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import labeler
from labeler import db as store
from labeler import metrics
from labeler.cli import cli
from labeler.harness import (
    Answer,
    GoldenError,
    OutputError,
    PipelineError,
    callable_pipeline,
    evaluate,
    load_golden,
    read_output,
    run_pipeline,
)
from labeler.ingest import ingest_logs, validate_log
from tests import cisi, pipelines

GOLDEN_LINES = 76  # CISI queries with judgments


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch):
    # the tests may themselves run in GitHub Actions: never write into the real step summary
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def cisi_golden(path: Path, *, with_ids: bool = True, manifest: bool = True) -> Path:
    """The golden set from CISI.REL: every judged doc has grade 2, threshold 2, plus a manifest."""
    cisi.require_cisi()
    with open(path, "w", encoding="utf-8") as f:
        for q, rel in sorted(cisi.qrels().items(), key=lambda kv: int(kv[0])):
            ids = sorted(rel, key=int)
            line = {"question": cisi.queries()[q], "relevant_ids": ids, "relevance": dict.fromkeys(ids, 2),
                    "expected_answer": None, "origin": "log", "annotators": ["cisi"], "conflict": False}
            if with_ids:
                line = {"query_id": f"cisi-{q}", **line}
            f.write(json.dumps(line) + "\n")
    if manifest:
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        Path(str(path) + ".manifest.json").write_text(json.dumps(
            {"sha256": {path.name: sha}, "threshold": 2, "counts": {"queries": GOLDEN_LINES}}))
    return path


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """The CISI golden set and a baseline of the TF-IDF pipeline, made once for the module."""
    root = tmp_path_factory.mktemp("eval")
    golden = cisi_golden(root / "golden.jsonl")
    baseline = root / "baseline.json"
    r = run("eval", "--golden", str(golden), "--pipeline", "tests.pipelines:tfidf", "-k", "5",
            "--save-baseline", str(baseline), "-o", str(root / "first.json"))
    assert r.exit_code == 0, r.output
    return {"golden": golden, "baseline": baseline, "report": root / "first.json"}


def run(*args: str, db: Path | None = None):
    argv = (["--db", str(db)] if db else []) + list(args)
    return CliRunner().invoke(cli, argv, catch_exceptions=False)


def gate(shared, pipeline: str, tmp_path: Path, *extra: str):
    out = tmp_path / "report.json"
    r = run("eval", "--golden", str(shared["golden"]), "--pipeline", pipeline, "-k", "5",
            "--baseline", str(shared["baseline"]), "--max-drop", "recall@5=0.02", "--max-drop", "mrr=0.02",
            "--alpha", "0.05", "-o", str(out), *extra)
    report = json.loads(out.read_text()) if out.exists() else None
    return r, report


def questions(report_path: Path) -> list[dict]:
    path = report_path.with_name(report_path.stem + ".questions.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- the pipeline's numbers are metrics.py's numbers ----------------------------------------

def test_metrics_are_the_metrics_module_on_the_same_run(shared):
    report = json.loads(shared["report"].read_text())
    run_rows = [(f"cisi-{q}", d, r) for q, docs in cisi.tfidf_run(10).items() if q in cisi.qrels()
                for r, (d, _) in enumerate(docs, 1)]
    qrels_rows = [(f"cisi-{q}", d, 2) for q, rel in cisi.qrels().items() for d in rel]
    per_q = metrics.per_query(pd.DataFrame(run_rows, columns=["query", "doc", "rank"]),
                              pd.DataFrame(qrels_rows, columns=["query", "doc", "grade"]),
                              ["recall@5", "precision@5", "hit@5", "mrr", "ndcg@5"], threshold=2)
    assert list(report["metrics"]) == ["recall@5", "precision@5", "hit@5", "mrr", "ndcg@5"]
    for spec, agg in report["metrics"].items():
        assert agg["mean"] == pytest.approx(per_q[spec].mean(), abs=1e-12)
        assert agg["n"] == GOLDEN_LINES
        assert agg["ci_low"] <= agg["mean"] <= agg["ci_high"]
    assert report["golden"]["sha256_source"] == "manifest"
    assert report["golden"]["sha256"] == hashlib.sha256(shared["golden"].read_bytes()).hexdigest()
    assert report["pipeline"] == {"id": "tests.pipelines:tfidf", "kind": "callable"}
    assert report["status"] == "no baseline" and report["errors"] == []
    assert report["timings"]["latency_seconds"]["p95"] is not None
    rows = questions(shared["report"])
    assert len(rows) == GOLDEN_LINES
    assert rows[0]["query_id"] == "cisi-1" and rows[0]["retrieved"] == [d for d, _ in cisi.tfidf_run(10)["1"]]
    assert rows[0]["metrics"]["mrr"] == pytest.approx(per_q.loc["cisi-1", "mrr"])


# --- the gate ------------------------------------------------------------------------------

def test_degraded_retriever_fails_the_gate_and_names_the_questions(shared, tmp_path):
    r, report = gate(shared, "tests.pipelines:degraded", tmp_path)
    assert r.exit_code == 3, r.output
    assert "FAIL" in r.output and "Questions that got worse" in r.output
    comparison = report["comparison"]
    assert comparison["failed"] and report["status"] == "fail"
    failed = [s for s, c in comparison["metrics"].items() if c["failed"]]
    assert failed, comparison
    for spec in failed:
        c = comparison["metrics"][spec]
        assert c["drop"] > c["max_drop"] and c["p_value"] < 0.05
    # every listed regression really got worse, and every question that got worse on a failed metric is listed
    rows = {row["query_id"]: row for row in questions(tmp_path / "report.json")}
    listed = {(x["query_id"], x["metric"]) for x in comparison["regressions"]}
    for qid, row in rows.items():
        for spec in failed:
            worse = row["metrics"][spec] < row["baseline"][spec]
            assert ((qid, spec) in listed) == worse
    top = comparison["regressions"][0]
    assert f"`{top['query_id']}`" in r.output
    assert top["baseline"] > top["current"]


def test_rerun_of_the_same_pipeline_passes(shared, tmp_path):
    r, report = gate(shared, "tests.pipelines:tfidf", tmp_path)
    assert r.exit_code == 0, r.output
    assert "PASS" in r.output
    for c in report["comparison"]["metrics"].values():
        assert c["drop"] == 0 and c["p_value"] == 1.0 and c["worse"] == 0
    assert report["comparison"]["regressions"] == []


def test_noise_level_change_is_not_flagged(shared, tmp_path):
    r, report = gate(shared, "tests.pipelines:noisy", tmp_path)
    assert r.exit_code == 0, r.output
    mrr = report["comparison"]["metrics"]["mrr"]
    assert mrr["worse"] == 2 and mrr["drop"] > 0  # the change is real, just tiny
    assert report["comparison"]["metrics"]["recall@5"]["drop"] == 0
    # even with no tolerance at all, two changed questions are no evidence of a regression
    r = run("eval", "--golden", str(shared["golden"]), "--pipeline", "tests.pipelines:noisy", "-k", "5",
            "--baseline", str(shared["baseline"]))
    assert r.exit_code == 0, r.output


def test_save_baseline_then_compare_with_a_regression_not_saved(shared, tmp_path):
    baseline = tmp_path / "b.json"
    r = run("eval", "--golden", str(shared["golden"]), "--pipeline", "tests.pipelines:tfidf", "-k", "5",
            "--save-baseline", str(baseline))
    assert r.exit_code == 0, r.output
    doc = json.loads(baseline.read_text())
    assert doc["labeler_baseline"] == 1 and doc["golden"]["sha256"] == json.loads(
        shared["baseline"].read_text())["golden"]["sha256"]
    assert len(doc["questions"]) == GOLDEN_LINES and set(doc["questions"][0]["values"]) >= {"recall@5", "mrr"}
    before = baseline.read_text()
    r = run("eval", "--golden", str(shared["golden"]), "--pipeline", "tests.pipelines:degraded", "-k", "5",
            "--baseline", str(baseline), "--max-drop", "0.02", "--save-baseline", str(baseline))
    assert r.exit_code == 3
    assert "baseline not saved" in r.output
    assert baseline.read_text() == before


def test_baseline_of_another_golden_set_is_refused_unless_allowed(shared, tmp_path):
    golden = tmp_path / "g.jsonl"
    lines = shared["golden"].read_text().splitlines()[:40]
    golden.write_text("\n".join(lines) + "\n")
    args = ["eval", "--golden", str(golden), "--pipeline", "tests.pipelines:tfidf", "-k", "5",
            "--baseline", str(shared["baseline"]), "-o", str(tmp_path / "r.json")]
    r = run(*args)
    assert r.exit_code == 1
    assert "--allow-golden-change" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "r.json").exists()  # refused before running anything
    r = run(*args, "--allow-golden-change")
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["comparison"]["matched"] == 40 and report["comparison"]["only_baseline"] == GOLDEN_LINES - 40
    assert any("golden set sha256" in w for w in report["warnings"])


def test_gate_option_errors_are_one_line(shared, tmp_path):
    base = ["eval", "--golden", str(shared["golden"]), "--pipeline", "tests.pipelines:tfidf"]
    with_baseline = [*base, "--baseline", str(shared["baseline"])]
    cases = [
        ([*base, "--max-drop", "mrr=0.02"], "--max-drop needs --baseline"),
        ([*with_baseline, "--max-drop", "map=0.02"], "has no values for ap"),
        ([*with_baseline, "--max-drop", "mrr=lots"], "is not a number"),
        ([*base, "--baseline", str(tmp_path / "missing.json")], "no such baseline"),
        ([*base, "--metric", "nope@3"], "unknown metric"),
    ]
    for args, message in cases:
        r = run(*args)
        assert r.exit_code == 1 and message in r.output, (args, r.output)
        assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_aliases_and_max_drop_metrics_are_canonical_and_added(shared, tmp_path):
    out = tmp_path / "r.json"
    r = run("eval", "--golden", str(shared["golden"]), "--pipeline", "tests.pipelines:tfidf", "-k", "5",
            "--metric", "P@10", "--metric", "recip_rank", "--baseline", str(shared["baseline"]),
            "--max-drop", "success@5=0.05", "-o", str(out))
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    assert list(report["metrics"]) == ["recall@5", "precision@5", "hit@5", "mrr", "ndcg@5", "precision@10"]
    assert report["comparison"]["metrics"]["hit@5"]["gated"]
    assert not report["comparison"]["metrics"]["mrr"]["gated"]
    assert "precision@10" not in report["comparison"]["metrics"]  # not in the baseline: reported, not compared


def test_paired_test_with_10000_permutations_is_seeded_and_in_range():
    """Its speed (10k permutations of 1,000 pairs) is measured by tests/bench/bench_eval.py."""
    rng = np.random.default_rng(1)
    a = rng.random(1000)
    b = np.clip(a - rng.normal(0.01, 0.1, 1000), 0, 1)
    p = metrics.paired_test(a, b, n_resamples=10000, seed=0)
    assert 0 < p <= 1
    assert metrics.paired_test(a, b, n_resamples=10000, seed=0) == p  # the seed fixes it
    assert metrics.paired_test(a, a, n_resamples=10000, seed=0) == 1.0  # no difference at all


# --- pipelines that misbehave --------------------------------------------------------------

def test_a_pipeline_that_raises_counts_misses_and_completes(shared, tmp_path):
    out = tmp_path / "r.json"
    r = run("eval", "--golden", str(shared["golden"]), "--pipeline", "tests.pipelines:flaky", "-k", "5",
            "-o", str(out))
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    rows = questions(out)
    expected = {row["query_id"] for row in rows if pipelines.flaky_kind(row["question"])}
    assert {e["query_id"] for e in report["errors"]} == expected and len(expected) == 12
    assert report["counts"]["errors"] == 12 and report["counts"]["evaluated"] == GOLDEN_LINES
    for row in rows:
        kind = pipelines.flaky_kind(row["question"])
        if kind:
            assert row["status"] == "error" and row["retrieved"] == [] and row["metrics"]["recall@5"] == 0
            assert ("ConnectionError: vector store unavailable" in row["error"]) == (kind == "raise")
            assert ("got int" in row["error"]) == (kind == "garbage")
        else:
            assert row["status"] == "ok" and len(row["retrieved"]) == 10
    assert "**Errors** (12 questions counted as misses)" in r.output
    assert "vector store unavailable" in r.output


def test_a_hanging_pipeline_times_out_and_the_run_goes_on(shared, tmp_path):
    pipelines.RELEASE.clear()
    out = tmp_path / "r.json"
    try:
        start = time.perf_counter()
        r = run("eval", "--golden", str(shared["golden"]), "--pipeline", "tests.pipelines:hanging", "-k", "5",
                "--timeout", "0.5", "--concurrency", "4", "-o", str(out))
        elapsed = time.perf_counter() - start
    finally:
        pipelines.RELEASE.set()  # let the abandoned threads finish
    assert r.exit_code == 0, r.output
    rows = questions(out)
    hung = [row for row in rows if pipelines.hangs(row["question"])]
    assert len(hung) == 8
    assert all(row["status"] == "timeout" and row["error"] == "timed out after 0.5 s" for row in hung)
    assert all(row["status"] == "ok" for row in rows if not pipelines.hangs(row["question"]))
    assert json.loads(out.read_text())["counts"]["timeouts"] == 8
    # 8 hangs of 0.5 s over 4 slots: a freed slot goes to the next question at once
    assert elapsed < 10


def test_run_pipeline_keeps_order_and_bounds_concurrency():
    active, peak = 0, 0
    lock = threading.Lock()
    gate_ = threading.Barrier(3, timeout=10)

    def call(question: str):
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        if int(question) < 3:
            gate_.wait()  # the first three must run at the same time
        with lock:
            active -= 1
        return [f"d{question}"], question

    from labeler.harness import Pipeline

    answers = run_pipeline(Pipeline("t", "callable", call), [str(i) for i in range(30)], concurrency=3)
    assert [a.docs for a in answers] == [[f"d{i}"] for i in range(30)]
    assert peak == 3


def test_pipeline_import_errors_are_one_line(shared, tmp_path, monkeypatch):
    (tmp_path / "broken_rag.py").write_text("import numpy\nraise RuntimeError('missing OPENAI_API_KEY')\n")
    (tmp_path / "good_rag.py").write_text("VALUE = 3\ndef answer(q):\n    return [{'id': '1'}], 'a'\n")
    monkeypatch.chdir(tmp_path)  # like uvicorn, the current directory is importable
    cases = {
        "nocolon": "expected MODULE:FUNCTION",
        "no_such_module_xyz:answer": "cannot import 'no_such_module_xyz': ModuleNotFoundError",
        "broken_rag:answer": "RuntimeError: missing OPENAI_API_KEY",
        "good_rag:missing": "has no attribute 'missing'",
        "good_rag:VALUE": "not a function",
    }
    for spec, message in cases.items():
        r = run("eval", "--golden", str(shared["golden"]), "--pipeline", spec)
        assert r.exit_code == 1, (spec, r.output)
        assert message in r.output and len(r.output.strip().splitlines()) == 1, r.output
    r = run("eval", "--golden", str(shared["golden"]), "--pipeline", "good_rag:answer")
    assert r.exit_code == 0, r.output


def test_every_question_failing_is_a_user_error(shared, tmp_path):
    import socket

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "r.json"
    r = run("eval", "--golden", str(shared["golden"]), "--endpoint", f"http://127.0.0.1:{port}/rag",
            "--save-baseline", str(tmp_path / "b.json"), "-o", str(out))
    assert r.exit_code == 1
    assert f"all {GOLDEN_LINES} questions failed" in r.output and "cannot reach" in r.output
    assert out.exists() and not (tmp_path / "b.json").exists()


# --- HTTP pipelines ------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):
        if self.headers.get("Authorization") != "Bearer s3cret":
            return self._send(401, {"error": "unauthorized"})
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        question = body["question"]
        if pipelines.flaky_kind(question) == "raise":
            return self._send(500, {"error": "model overloaded"})
        docs, answer = pipelines.tfidf(question)
        if self.path == "/rag":
            return self._send(200, {"response": answer,
                                    "contexts": [{"doc_id": d["id"], "content": d["text"]} for d in docs]})
        return self._send(200, {"result": {"docs": [{"key": d["id"]} for d in docs], "text": answer}})

    def _send(self, code: int, payload: dict):
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_http_pipeline_on_a_loopback_server(shared, server, tmp_path):
    out = tmp_path / "r.json"
    r = run("eval", "--golden", str(shared["golden"]), "--endpoint", f"{server}/rag", "-k", "5",
            "--header", "Authorization: Bearer s3cret", "--baseline", str(shared["baseline"]),
            "--max-drop", "recall@5=0.5", "-o", str(out))
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    assert report["pipeline"] == {"id": f"{server}/rag", "kind": "http"}
    rows = questions(out)
    errors = [row for row in rows if row["status"] == "error"]
    assert {row["query_id"] for row in errors} == {row["query_id"] for row in rows
                                                   if pipelines.flaky_kind(row["question"]) == "raise"}
    assert all(row["error"].startswith("HTTP 500") and "model overloaded" in row["error"] for row in errors)
    first = questions(shared["report"])
    for row, same in zip(rows, first, strict=True):
        if row["status"] == "ok":  # the same retriever behind HTTP gives the same lists and values
            assert row["retrieved"] == same["retrieved"] and row["metrics"] == same["metrics"]
            assert row["answer"] == same["answer"]


def test_http_pipeline_with_a_field_mapping(shared, server, tmp_path):
    out = tmp_path / "r.json"
    args = ["eval", "--golden", str(shared["golden"]), "--endpoint", f"{server}/nested", "-k", "5",
            "--header", "Authorization: Bearer s3cret", "-o", str(out)]
    r = run(*args, "--map", "retrieved=result.docs", "--map", "answer=result.text")
    assert r.exit_code == 1  # docs keyed "key" are no chunk ids: every question is unreadable
    assert "retrieved[0].id" not in r.output and "docs[0].id: missing" in r.output
    r = run(*args[:-2], "--map", "retrieved=result.nothing")
    assert r.exit_code == 1 and "no retrieved chunks" in r.output
    r = run("eval", "--golden", str(shared["golden"]), "--endpoint", f"{server}/rag", "--timeout", "5")
    assert r.exit_code == 1 and "HTTP 401" in r.output  # no Authorization header


def test_http_pipeline_mapping_reads_nested_ids(shared, tmp_path):
    class Nested(_Handler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            docs, answer = pipelines.tfidf(body["question"])
            self._send(200, {"result": {"docs": [{"chunk_id": d["id"]} for d in docs], "text": answer}})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Nested)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "r.json"
        r = run("eval", "--golden", str(shared["golden"]), "--endpoint",
                f"http://127.0.0.1:{httpd.server_address[1]}/x", "-k", "5", "--map", "retrieved=result.docs",
                "--map", "answer=result.text", "-o", str(out))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["metrics"] == json.loads(shared["report"].read_text())["metrics"]


# --- outputs -------------------------------------------------------------------------------

def test_step_summary_is_appended(shared, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    r, _ = gate(shared, "tests.pipelines:degraded", tmp_path)
    assert r.exit_code == 3
    text = summary.read_text()
    assert text.startswith("# earlier step\n### labeler eval: FAIL")
    assert "| recall@5 |" in text and "Questions that got worse" in text
    assert text.strip() == ("# earlier step\n" + r.output).strip()


def test_json_output_is_the_report(shared, tmp_path):
    r = run("eval", "--golden", str(shared["golden"]), "--pipeline", "tests.pipelines:tfidf", "-k", "5", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["metrics"] == json.loads(shared["report"].read_text())["metrics"]
    assert doc["settings"]["concurrency"] == 8 and doc["settings"]["seed"] == 0


def test_objects_like_langchain_documents(shared):
    result = evaluate(shared["golden"], pipeline="tests.pipelines:langchain_style", k=5)
    assert result.report["metrics"] == json.loads(shared["report"].read_text())["metrics"]
    assert result.questions[0]["answer"] == questions(shared["report"])[0]["answer"]
    # a plain function works from Python too
    direct = evaluate(shared["golden"], pipeline=pipelines.tfidf, k=5)
    assert direct.report["metrics"] == result.report["metrics"]
    assert direct.report["pipeline"]["id"] == "tests.pipelines:tfidf"


def test_async_functions_and_python_gate_options(shared):
    result = evaluate(shared["golden"], pipeline="tests.pipelines:async_tfidf", k=5, baseline=shared["baseline"],
                      max_drop={"P@5": 0.01})
    assert result.exit_code == 0 and result.status == "pass"
    assert result.report["metrics"] == json.loads(shared["report"].read_text())["metrics"]
    gated = {s for s, c in result.report["comparison"]["metrics"].items() if c["gated"]}
    assert gated == {"precision@5"} and result.report["settings"]["max_drop"] == {"precision@5": 0.01}
    assert result.per_query.loc[0, "mrr"] == result.questions[0]["metrics"]["mrr"]


def test_read_output_shapes():
    assert read_output(([{"id": "a"}, {"doc_id": 7}, {"metadata": {"chunk_id": "c"}}], "x")) == (["a", "7", "c"], "x")
    assert read_output([{"id": "a"}, {"id": "a"}, {"id": "b"}]) == (["a", "b"], None)  # repeats count once
    assert read_output({"output": "y", "documents": [{"chunk_id": "z"}]}) == (["z"], "y")
    assert read_output({"data": {"hits": [{"id": "q"}]}, "out": "w"}, {"retrieved": "data.hits", "answer": "out"}) \
        == (["q"], "w")
    # a bare string is identified by its content exactly as ingest does, so logs and runs line up
    logged = validate_log({"question": "q", "retrieved": ["some context"], "query_id": None, "answer": None,
                           "timestamp": None, "retriever": None, "meta": None})["ids"][0]
    assert read_output((["some context"], None))[0] == [logged]
    for bad, message in [(("not a list", None), "docs must be a list"), (([{"title": "t"}], None), "docs[0].id"),
                         (([object()], None), "no id attribute"), ({"answer": "a"}, "no retrieved chunks"),
                         (3.5, "got float")]:
        with pytest.raises(OutputError, match=message.replace("[", r"\[").replace("]", r"\]")):
            read_output(bad)


def test_callable_pipeline_spec_errors():
    with pytest.raises(PipelineError, match="expected MODULE:FUNCTION"):
        callable_pipeline("tests.pipelines")
    assert callable_pipeline("tests.pipelines:tfidf").call(cisi.queries()["1"])[0][0] == "1281"


# --- golden files --------------------------------------------------------------------------

def test_golden_file_with_bad_lines_is_a_strict_error(tmp_path):
    golden = tmp_path / "bad.jsonl"
    golden.write_text("\n".join([
        json.dumps({"query_id": "a", "question": "fine", "relevant_ids": ["1"], "relevance": {"1": 3, "2": 0}}),
        "{not json",
        json.dumps({"query_id": "b", "relevant_ids": ["1"]}),
        json.dumps({"query_id": "c", "question": "q", "relevance": {"1": "high"}}),
        json.dumps({"query_id": "d", "question": "q2", "relevant_ids": ["9"], "relevance": {"1": 2}}),
        json.dumps({"query_id": "a", "question": "other", "relevant_ids": ["1"]}),
        json.dumps({"question": "  FINE ", "relevant_ids": ["1"]}),
        json.dumps({"question": "no ids"}),
        json.dumps({"question": "x", "relevant_ids": "1"}),
    ]) + "\n")
    r = run("eval", "--golden", str(golden), "--pipeline", "tests.pipelines:tfidf")
    assert r.exit_code == 1
    for expected in [f"{golden}:2: json: invalid JSON", f"{golden}:3: question: missing",
                     f"{golden}:4: relevance.1: expected a whole number", f"{golden}:5: relevant_ids[0]: '9' has no grade",
                     f"{golden}:6: query_id: duplicate of line 1", f"{golden}:7: question: same question as line 1",
                     f"{golden}:8: relevant_ids: missing", f"{golden}:9: relevant_ids: expected a list"]:
        assert expected in r.output, (expected, r.output)
    assert "8 invalid line(s)" in r.output and "Traceback" not in r.output
    with pytest.raises(GoldenError) as info:
        load_golden(golden)
    assert len(info.value.problems) == 8
    lenient = load_golden(golden, strict=False)
    assert [q.query_id for q in lenient.queries] == ["a"] and len(lenient.problems) == 8
    assert lenient.warnings and "skipped 8 invalid line(s)" in lenient.warnings[0]


def test_golden_file_missing_or_empty(tmp_path):
    r = run("eval", "--golden", str(tmp_path / "none.jsonl"), "--pipeline", "tests.pipelines:tfidf")
    assert r.exit_code == 1 and "no such golden file" in r.output
    (tmp_path / "empty.jsonl").write_text("\n")
    r = run("eval", "--golden", str(tmp_path / "empty.jsonl"), "--pipeline", "tests.pipelines:tfidf")
    assert r.exit_code == 1 and "empty golden file" in r.output


def test_minimal_golden_format_and_manifest(tmp_path):
    golden = tmp_path / "mini.jsonl"
    golden.write_text(json.dumps({"question": "What is a thesaurus?", "relevant_ids": ["5", "3"],
                                  "expected_answer": "A controlled vocabulary."}) + "\n"
                      + json.dumps({"question": "Nothing relevant here", "relevant_ids": []}) + "\n")
    g = load_golden(golden)
    assert g.threshold == 2 and g.sha256_source == "computed" and g.manifest is None
    assert g.queries[0].relevance == {"5": 3, "3": 3} and g.queries[0].relevant_ids(2) == ["5", "3"]
    assert g.queries[0].key == "q:what is a thesaurus?" and g.queries[0].expected_answer == "A controlled vocabulary."
    manifest = Path(str(golden) + ".manifest.json")
    manifest.write_text(json.dumps({"sha256": g.sha256, "threshold": 3}))
    g3 = load_golden(golden)
    assert g3.threshold == 3 and g3.sha256_source == "manifest" and not g3.warnings
    assert load_golden(golden, threshold=1).threshold == 1
    manifest.write_text(json.dumps({"sha256": "0" * 64, "threshold": 2}))
    stale = load_golden(golden)
    assert stale.sha256 == g.sha256 and stale.sha256_source == "computed"
    assert "changed since it was exported" in stale.warnings[0]
    manifest.write_text(json.dumps({"sha256": g.sha256, "threshold": 0}))
    with pytest.raises(GoldenError, match="threshold must be a whole number >= 1"):
        load_golden(golden)

    def answer(question):
        return [{"id": "3"}, {"id": "4"}], "ok"

    result = evaluate(golden, pipeline=answer, k=2, threshold=2)
    # the question without relevant chunks is reported but not averaged
    assert result.report["metrics"]["recall@2"] == {"mean": 0.5, "ci_low": 0.5, "ci_high": 0.5, "n": 1}
    assert result.report["counts"]["without_relevant"] == 1
    assert result.questions[1]["metrics"]["recall@2"] is None


def test_graded_relevance_uses_grades_as_gains(tmp_path):
    golden = tmp_path / "graded.jsonl"
    golden.write_text(json.dumps({"query_id": "g1", "question": "q",
                                  "relevance": {"a": 3, "b": 1, "c": 2, "d": 0}}) + "\n")
    result = evaluate(golden, pipeline=lambda q: ([{"id": "b"}, {"id": "c"}, {"id": "a"}], None),
                      metrics=["ndcg@3", "recall@2", "mrr"])
    got = result.report["metrics"]
    ideal = 3 + 2 / np.log2(3) + 1 / np.log2(4)
    assert got["ndcg@3"]["mean"] == pytest.approx((1 + 2 / np.log2(3) + 3 / np.log2(4)) / ideal)
    assert got["recall@2"]["mean"] == 0.5 and got["mrr"]["mean"] == 0.5  # b (grade 1) is below threshold 2


# --- the stored production retrieval -------------------------------------------------------

@pytest.fixture(scope="module")
def cisi_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("db")
    path = root / "cisi.db"
    db = store.connect(path)
    ingest_logs(db, cisi.write_logs(root / "logs.jsonl", k=10))
    db.close()
    return path


def test_no_pipeline_evaluates_the_logged_production_retrieval(shared, cisi_db, tmp_path):
    out = tmp_path / "r.json"
    r = run("eval", "--golden", str(shared["golden"]), "-k", "5", "-o", str(out),
            "--save-baseline", str(tmp_path / "prod.json"), db=cisi_db)
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    assert report["pipeline"] == {"id": f"{cisi_db}#production", "kind": "database", "retriever": "production"}
    # production logs were written by the same TF-IDF retriever: the same numbers
    assert report["metrics"] == json.loads(shared["report"].read_text())["metrics"]
    assert [row["retrieved"] for row in questions(out)] == [row["retrieved"] for row in questions(shared["report"])]
    # the seeded baseline then gates the pipeline
    r = run("eval", "--golden", str(shared["golden"]), "--pipeline", "tests.pipelines:tfidf", "-k", "5",
            "--baseline", str(tmp_path / "prod.json"), "--max-drop", "0.01")
    assert r.exit_code == 0 and "PASS" in r.output, r.output


def test_no_pipeline_matches_by_question_text_and_skips_unknown_questions(cisi_db, tmp_path):
    golden = cisi_golden(tmp_path / "noids.jsonl", with_ids=False, manifest=False)
    with open(golden, "a") as f:
        f.write(json.dumps({"question": "A question production never saw", "relevant_ids": ["1"]}) + "\n")
    out = tmp_path / "r.json"
    r = run("eval", "--golden", str(golden), "-k", "5", "-o", str(out), db=cisi_db)
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    assert report["counts"] == {"questions": GOLDEN_LINES + 1, "evaluated": GOLDEN_LINES, "skipped": 1,
                                "errors": 0, "timeouts": 0, "without_relevant": 0}
    assert report["skipped"] == [{"query_id": None, "question": "A question production never saw",
                                  "error": "not in the database"}]
    assert report["metrics"]["recall@5"]["n"] == GOLDEN_LINES
    r = run("eval", "--golden", str(golden), "--retriever", "bm25", db=cisi_db)
    # the same one-line message as `labeler metrics --retriever bm25`
    assert r.exit_code == 1 and r.output == "Error: retriever 'bm25' logged no rankings; logged: production\n"


def test_no_pipeline_without_a_database_is_a_user_error(shared, tmp_path):
    r = run("eval", "--golden", str(shared["golden"]), db=tmp_path / "absent.db")
    assert r.exit_code == 1 and "does not exist" in r.output
    assert not (tmp_path / "absent.db").exists()


def test_answers_from_a_stored_run_are_plain_answers(cisi_db, shared):
    from labeler.harness import stored_run

    db = store.connect(cisi_db)
    try:
        answers = stored_run(db, load_golden(shared["golden"]))
    finally:
        db.close()
    assert all(isinstance(a, Answer) and a.status == "ok" for a in answers)
    assert answers[0].docs == [d for d, _ in cisi.tfidf_run(10)["1"]]


def test_a_golden_set_exported_by_labeler_export_evaluates_as_its_source(shared, tmp_path):
    from labeler.export import export_golden, import_golden

    db = store.connect(tmp_path / "x.db")
    try:
        ingest_logs(db, cisi.write_logs(tmp_path / "logs.jsonl", k=10))
        import_golden(db, shared["golden"], annotator="cisi")
        export_golden(db, tmp_path / "exported.jsonl")
    finally:
        db.close()
    golden = load_golden(tmp_path / "exported.jsonl")
    assert golden.sha256_source == "manifest" and not golden.warnings  # the manifest's files entry matches
    assert golden.threshold == 2 and len(golden.queries) == GOLDEN_LINES
    result = evaluate(golden, pipeline="tests.pipelines:tfidf", k=5)
    source = json.loads(shared["report"].read_text())["metrics"]
    for spec, agg in result.report["metrics"].items():  # export sorts by query id: same means, other order
        assert agg["mean"] == pytest.approx(source[spec]["mean"], abs=1e-12) and agg["n"] == GOLDEN_LINES
    assert result.report["golden"]["export"]["version"] == 1


def test_answers_judged_with_a_calibration_run(tmp_path, ingest_tiny):
    """--judge-run: the pipeline's answers get a faithfulness score through the judge, rubric and model
    of a calibration run; the report names the run, its agreement, and warns when the gate failed."""
    from labeler import judge
    from tests.fake_openai import FakeOpenAI
    from tests.test_judge import answers, claims_responder, make_config

    db_path = tmp_path / "judged.db"
    db = labeler.connect(db_path)
    pks = answers(db, ingest_tiny, n=30)
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(json.dumps({"question": f"What is item q{i}?", "relevant_ids": [f"q{i:03d}-c0"]}) + "\n"
                              for i in range(len(pks))))
    with FakeOpenAI() as server:
        server.responder = claims_responder
        config = make_config(server)
        run = judge.run_judge(db, config, "faithfulness.v1")
        before = server.total
        result = evaluate(golden, pipeline="tests.pipelines:tiny_items", db=db_path, judge_runs=[run.id],
                          llm_config=config, k=1)
        assert server.total - before == 0  # the same prompts as the calibration run: answered from the cache
    faith = result.report["metrics"]["faithfulness"]
    # claims_responder supports 2/2, 1/2, 0/3 claims for i % 3 == 0, 1, 2
    expected = np.mean([[1.0, 0.5, 0.0][i % 3] for i in range(30)])
    assert faith["mean"] == pytest.approx(expected) and faith["n"] == 30
    assert faith["ci_low"] <= expected <= faith["ci_high"]
    (info,) = result.report["judges"]
    assert (info["run_id"], info["judge"], info["model"]) == (run.id, "faithfulness.v1", "fake-model")
    assert info["calibration_kappa"]["value"] == pytest.approx(1.0)
    assert info["gate_passed"] is False and any("did not pass the calibration gate" in w for w in result.report["warnings"])
    assert result.questions[1]["metrics"]["faithfulness"] == 0.5


def test_judge_run_needs_a_database(tmp_path):
    golden = tmp_path / "g.jsonl"
    golden.write_text(json.dumps({"question": "What is item q1?", "relevant_ids": ["q001-c0"]}) + "\n")
    with pytest.raises(labeler.LabelerError, match="--judge-run needs --db"):
        evaluate(golden, pipeline="tests.pipelines:tiny_items", judge_runs=[1])
