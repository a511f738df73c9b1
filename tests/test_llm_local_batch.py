"""Local judges: ``labeler judge run --batch-file`` writes the Batch API's request lines for
``vllm run-batch``, and ``labeler llm collect --file`` stores its output lines (vLLM's
BatchRequestOutput: id, custom_id, response {status_code, request_id, body}, error) as a collected
batch is stored. The results files are made here in vLLM's format from the loopback fake server's
answers to each request line's body."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from labeler import db as store
from labeler import judge
from labeler.cli import cli
from labeler.errors import LLMError
from labeler.llm import batch
from labeler.llm.batch import submitting as batch_submitting
from tests.fake_openai import FakeOpenAI
from tests.test_judge import build, make_config, perfect

KEY = "sk-test-local"


def vllm_results(server: FakeOpenAI, requests: Path, out: Path, *, faults: dict[int, str] | None = None) -> list[dict]:
    """What ``vllm run-batch -i requests -o out`` writes, answered by the fake server: one line per
    request line. ``faults`` by 0-based line: ``error`` (vLLM's string error, status 400, no body),
    ``error_object`` (its ErrorResponse), ``invalid_json`` (an answer that is not JSON), ``drop`` (no line)."""
    faults = faults or {}
    lines = []
    for n, raw in enumerate(requests.read_text().splitlines()):
        request = json.loads(raw)
        fault = faults.get(n)
        if fault == "drop":
            continue
        line = {"id": f"vllm-{n:04d}", "custom_id": request["custom_id"], "response": None, "error": None}
        if fault == "error":
            line["response"] = {"status_code": 400, "request_id": f"vllm-batch-{n}"}
            line["error"] = "The model `other-model` does not exist."
        elif fault == "error_object":
            line["response"] = {"status_code": 400, "request_id": f"vllm-batch-{n}", "body": None}
            line["error"] = {"error": {"message": "context length exceeded", "type": "BadRequestError",
                                       "param": None, "code": 400}}
        else:
            code, body, _ = server.complete(request["body"], wait=False)
            if fault == "invalid_json":
                body["choices"][0]["message"]["content"] = "grade: maybe {"
            line["response"] = {"status_code": code, "request_id": f"vllm-batch-{n}", "body": body}
        lines.append(line)
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return lines


def labels(db, run_id: int) -> dict[tuple[int, int], tuple]:
    return {(q, d): (status, grade, rationale) for q, d, status, grade, rationale in db.execute(
        "SELECT query_pk, doc_pk, status, grade, rationale FROM judge_labels WHERE run_id = ?", [run_id])}


@pytest.fixture
def env(tmp_path, ingest_tiny, monkeypatch):
    path = tmp_path / "local.db"
    db = store.connect(path)
    _, truth = build(db, ingest_tiny, n=8, overlap=0)
    with FakeOpenAI(responder=perfect(truth)) as s:
        monkeypatch.setenv("OPENAI_BASE_URL", s.url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        yield {"path": path, "db": db, "server": s, "truth": truth, "tmp": tmp_path}


def cli_run(path: Path, *args: str):
    return CliRunner().invoke(cli, ["--db", str(path), *args])


def test_the_batch_file_holds_the_lines_the_batch_api_would_get_and_nothing_is_sent(env, monkeypatch):
    path, db, s, tmp = env["path"], env["db"], env["server"], env["tmp"]
    requests = tmp / "requests.jsonl"
    r = cli_run(path, "judge", "run", "--model", "fake-model", "--batch-file", str(requests), "--json")
    assert r.exit_code == 0, r.output
    run = json.loads(r.stdout)
    assert run["status"] == "submitted" and s.total == 0 and s.batch.uploads == 0
    [b] = batch.list_batches(db, owner="judge", run_id=run["id"])
    assert b.state == "local" and b.requests == 24 and b.batch_id is None
    assert b.input_file_id == str(requests.resolve())
    # byte for byte the file the Batch API path uploads for these items
    assert requests.read_bytes() == b"".join(batch_submitting.file_lines(db, b.key))
    lines = [json.loads(line) for line in requests.read_text().splitlines()]
    assert len(lines) == 24 and {frozenset(line) for line in lines} == {frozenset(("custom_id", "method", "url", "body"))}
    assert {(line["method"], line["url"]) for line in lines} == {("POST", "/v1/chat/completions")}
    assert all(line["body"]["model"] == "fake-model" and line["body"]["response_format"]["type"] == "json_schema"
               for line in lines)
    r = cli_run(path, "judge", "run", "--model", "fake-model", "--batch-file", str(requests))
    assert r.exit_code == 0 and "vllm run-batch -i" in r.output and "labeler llm collect --file" in r.output
    # the API collect leaves a local batch alone (it waits for its results file)
    r = cli_run(path, "llm", "collect", "--all", "--json")
    collected = json.loads(r.stdout)
    assert r.exit_code == 0 and collected["batches"] == [] and s.total == 0
    assert f"{b.key} waits for the results of {requests.resolve()}: labeler llm collect --file RESULTS" \
        in collected["notes"] and len(collected["notes"]) == 2  # the second run wrote the same requests again
    r = cli_run(path, "judge", "run", "--resume", str(run["id"]))
    assert r.exit_code == 1 and "labeler llm collect --file RESULTS" in r.output
    # its results answer both runs' requests, stored (and paid) once
    vllm_results(s, requests, tmp / "results.jsonl")
    r = cli_run(path, "llm", "collect", "--file", str(tmp / "results.jsonl"), "--json")
    assert r.exit_code == 0, r.output
    collected = json.loads(r.stdout)
    assert collected["ok"] == 24 and len(collected["batches"]) == 2 and len(collected["finished_runs"]) == 2
    assert db.execute("SELECT count(*), sum(requests) FROM llm_calls").fetchone() == (24, 24)
    runs = [judge.get_run(db, run_id) for _, run_id in collected["finished_runs"]]
    assert [(r.status, r.done, r.failed) for r in runs] == [("done", 24, 0)] * 2
    r = cli_run(path, "judge", "run", "--batch", "--batch-file", str(requests))
    assert r.exit_code == 2 and "without --batch" in r.output
    # a team that runs only local batches needs no API key to list them
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    r = cli_run(path, "llm", "batches", "--json")
    assert r.exit_code == 0, r.output
    assert {b["state"] for b in json.loads(r.stdout)} == {"completed"}


def test_collected_results_are_stored_as_a_collected_batch_and_a_rerun_pays_nothing(env, tmp_path, ingest_tiny):
    path, db, s, tmp = env["path"], env["db"], env["server"], env["tmp"]
    requests, results = tmp / "requests.jsonl", tmp / "results.jsonl"
    r = cli_run(path, "judge", "run", "--model", "fake-model", "--batch-file", str(requests), "--json")
    run_id = json.loads(r.stdout)["id"]
    lines = vllm_results(s, requests, results, faults={3: "error", 7: "error_object", 11: "invalid_json", 15: "drop"})
    answered = s.total
    assert answered == 21 and len(lines) == 23
    r = cli_run(path, "llm", "collect", "--file", str(results), "--price-per-1k", "0.5", "--json")
    assert r.exit_code == 0, r.output
    collected = json.loads(r.stdout)
    assert collected["ok"] == 20 and collected["failed"] == 4 and collected["retried"] == 0
    assert collected["finished_runs"] == [["judge", run_id]] and s.total == answered  # no direct retry
    done = judge.get_run(db, run_id)
    assert done.status == "done" and done.done == 20 and done.failed == 4
    # the ledger at the local price, per call; each fault recorded with its reason
    rows = db.execute("SELECT hash, status, error, prompt_tokens, completion_tokens, cost, requests, request "
                      "FROM llm_calls").fetchall()
    assert len(rows) == 24
    ok = [row for row in rows if row[1] == "ok"]
    assert len(ok) == 20 and all(row[5] == pytest.approx((row[3] + row[4]) * 0.5 / 1000) and row[3] > 0 for row in ok)
    assert all(json.loads(row[7])["engine"] == "local" for row in rows if row[1] == "ok")
    errors = {json.loads(requests.read_text().splitlines()[n])["custom_id"]: n for n in (3, 7, 11, 15)}
    reasons = {errors[row[0]]: row[2] for row in rows if row[0] in errors}
    assert reasons[3] == "The model `other-model` does not exist."
    assert reasons[7] == "400: context length exceeded"
    assert "invalid output from the batch" in reasons[11]
    assert reasons[15] == f"no line in {results} answers this request"
    [b] = batch.list_batches(db, owner="judge", run_id=run_id)
    assert b.state == "completed" and b.collected_at and b.completed == 20 and b.failed == 4
    assert b.cost == pytest.approx(sum(row[5] or 0 for row in rows)) and b.cost > sum(row[5] for row in ok)  # the bad answer used tokens too
    # collecting the same file again changes nothing
    r = cli_run(path, "llm", "collect", "--file", str(results), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["batches"] == [] and "collected before" in r.output
    assert db.execute("SELECT count(*), sum(requests) FROM llm_calls").fetchone() == (24, 23)  # the dropped: 0
    # the failed requests are retryable: resumed into a batch file, which holds those four only
    retry = tmp / "retry.jsonl"
    r = cli_run(path, "judge", "run", "--resume", str(run_id), "--batch-file", str(retry), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["status"] == "submitted", r.output
    assert sorted(json.loads(line)["custom_id"] for line in retry.read_text().splitlines()) == sorted(errors)
    vllm_results(s, retry, tmp / "retry-results.jsonl")
    r = cli_run(path, "llm", "collect", "--file", str(tmp / "retry-results.jsonl"), "--price-per-1k", "0.5")
    assert r.exit_code == 0 and f"finished judge run {run_id}" in r.output
    resumed = judge.get_run(db, run_id)
    assert (resumed.status, resumed.done, resumed.failed) == ("done", 24, 0)
    # its ledger counts each batch once
    pt, ct, cost, _ = batch.run_spend(db, "judge", run_id)
    assert (resumed.prompt_tokens, resumed.completion_tokens) == (pt, ct) and resumed.cost == pytest.approx(cost)
    # a new run of the same judge writes nothing and finishes at once from the cache
    before = s.total
    r = cli_run(path, "judge", "run", "--model", "fake-model", "--batch-file", str(tmp / "again.jsonl"), "--json")
    second = json.loads(r.stdout)["id"]
    assert (tmp / "again.jsonl").read_text() == "" and json.loads(r.stdout)["status"] == "done"
    assert (judge.get_run(db, second).done, judge.get_run(db, second).failed, s.total) == (24, 0, before)
    # and a direct rerun of the judge makes no request at all
    before = s.total
    again = judge.run_judge(db, make_config(s), "relevance.v1")
    assert again.cached == 24 and again.done == 0 and s.total == before
    # the same labels as the Batch API path stores for the same items
    api_path = tmp_path / "api.db"
    api = store.connect(api_path)
    build(api, ingest_tiny, n=8, overlap=0)
    with FakeOpenAI(responder=perfect(env["truth"]), batch_auto="completed") as s2:
        submitted = judge.run_judge(api, make_config(s2), "relevance.v1", batch=True)
        batch.collect(api, make_config(s2))
    assert labels(api, submitted.id) == labels(db, second)
    assert dict(api.execute("SELECT hash, parsed FROM llm_calls")) == dict(db.execute("SELECT hash, parsed FROM llm_calls"))


def test_a_malformed_results_file_names_file_line_and_field_and_stores_nothing(env):
    path, db, s, tmp = env["path"], env["db"], env["server"], env["tmp"]
    requests, results = tmp / "requests.jsonl", tmp / "results.jsonl"
    cli_run(path, "judge", "run", "--model", "fake-model", "--batch-file", str(requests))
    lines = vllm_results(s, requests, results)
    bad = [json.dumps(line) for line in lines]
    del lines[2]["custom_id"]
    bad[2] = json.dumps(lines[2])
    lines[5]["response"]["status_code"] = "200"
    bad[5] = json.dumps(lines[5])
    bad[8] = bad[8][: len(bad[8]) // 2]
    results.write_text("\n".join(bad) + "\n")
    r = cli_run(path, "llm", "collect", "--file", str(results))
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"{results}:3: custom_id: missing" in r.output
    assert f"{results}:6: response.status_code: must be a whole number; got '200'" in r.output
    assert f"{results}:9: not JSON" in r.output
    assert db.execute("SELECT count(*) FROM llm_calls").fetchone()[0] == 0
    with pytest.raises(LLMError, match="no such results file"):
        batch.collect_file(db, make_config(s), tmp / "nope.jsonl")
    other = tmp / "other.jsonl"
    other.write_text(json.dumps({"id": "x", "custom_id": "not-ours", "response": {"status_code": 200, "body": {}},
                                 "error": None}) + "\n")
    with pytest.raises(LLMError, match="no line of .* answers a request"):
        batch.collect_file(db, make_config(s), other)
    r = cli_run(path, "llm", "collect", "--file", str(results), "--all")
    assert r.exit_code == 2 and "--file collects a results file" in r.output
