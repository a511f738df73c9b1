"""labeler.llm.batch against the fake OpenAI server's /v1/files and /v1/batches: requests built as the
direct path builds them, the cache shared with direct runs, splitting, and every fault of the
issue (failed at validation, expired, cancelled, bad lines, an interrupted download, a process
killed between upload and create); then judge and synth runs through the CLI."""

from __future__ import annotations

import json

import pydantic
import pytest
from click.testing import CliRunner

from labeler import db as store
from labeler import judge, llm
from labeler.cli import cli
from labeler.errors import LLMError
from labeler.llm import batch
from labeler.llm.batch import submitting as batch_submitting
from tests.fake_openai import FakeOpenAI, prompt_key
from tests.test_judge import build, make_config, perfect

KEY = "sk-test-batch"


class Grade(pydantic.BaseModel):
    grade: int = pydantic.Field(ge=0, le=3)
    why: str


FINISHED: list[int] = []
batch.register_owner(batch.BatchOwner("demo", lambda db, run_id: Grade, lambda db, config, run_id: FINISHED.append(run_id)))


def tasks(n: int, prefix: str = "q") -> list[llm.Task]:
    return [llm.Task(f"{prefix}{i}", [{"role": "system", "content": "Grade it."},
                                      {"role": "user", "content": f"question {prefix} {i}"}], Grade) for i in range(n)]


def config(server: FakeOpenAI, **overrides) -> llm.LLMConfig:
    values = dict(base_url=server.url, api_key=KEY, model="gpt-4o-mini", timeout_s=5, max_retries=1,
                  backoff_base_s=0.001, backoff_max_s=0.01)
    values.update(overrides)
    return llm.LLMConfig(**values)


def calls(db) -> list[tuple]:
    return db.execute("SELECT hash, status, parsed, error, prompt_tokens, completion_tokens, cost, requests "
                      "FROM llm_calls ORDER BY hash").fetchall()


def advance_all(server: FakeOpenAI, sub: batch.Submitted, status: str = "completed", **kw) -> None:
    for b in sub.batches:
        server.batch.advance(b.batch_id, status, **kw)


@pytest.fixture
def server():
    with FakeOpenAI() as s:
        yield s


@pytest.fixture(autouse=True)
def _clear():
    FINISHED.clear()


# --- requests and the cache ---------------------------------------------------------------------------

def test_a_batch_line_is_the_direct_request_and_its_custom_id_the_cache_key(server):
    cfg = config(server)
    task = llm.Task("k", [{"role": "user", "content": "hi"}], Grade, {"seed": 3, "top_k": 5})
    direct = llm.request_body(cfg, task, task.messages, "json_schema")
    direct.update(direct.pop("extra_body"))  # the client sends extra_body fields inline
    h = llm.task_hash(cfg, task)
    line = json.loads(batch.batch_line(h, llm.cache.request_record(cfg, task, "json_schema")))
    assert line["body"] == direct and line["custom_id"] == h
    assert line["method"] == "POST" and line["url"] == "/v1/chat/completions"


def test_submit_skips_cached_requests_splits_and_stores_the_batches_before_returning(db, server):
    cfg = config(server)
    llm.run_tasks(db, cfg, tasks(2))  # two answered directly before
    sub = batch.submit(db, cfg, tasks(10), owner="demo", run_id=1, max_lines=3)
    assert sub.cached == 2 and sub.sent == 8 and len(sub.batches) == 3
    assert [b.requests for b in sub.batches] == [3, 3, 2]
    assert server.batch.uploads == 3 and all(f["purpose"] == "batch" for f in server.batch.files.values())
    stored = batch.list_batches(db, owner="demo", run_id=1)
    assert [b.batch_id for b in stored] == [b.batch_id for b in sub.batches]
    assert {b.state for b in stored} == {"validating"}
    x = tasks(4, "x")
    size = len(batch.batch_line(llm.task_hash(cfg, x[0]), llm.cache.request_record(cfg, x[0], "json_schema"))) + 1
    by_bytes = batch.submit(db, cfg, x, owner="demo", run_id=2, max_bytes=int(size * 2.5))
    assert [b.requests for b in by_bytes.batches] == [2, 2] and all(b.bytes <= size * 2.5 for b in by_bytes.batches)


def test_collected_answers_are_cache_hits_for_a_direct_run_at_batch_price_and_collecting_twice_changes_nothing(db, server):
    cfg = config(server)
    sub = batch.submit(db, cfg, tasks(6), owner="demo", run_id=1)
    assert batch.collect(db, cfg).waiting == [sub.batches[0].batch_id] and calls(db) == []
    advance_all(server, sub)
    result = batch.collect(db, cfg)
    assert result.ok == 6 and result.failed == 0 and result.finished_runs == [("demo", 1)] and FINISHED == [1]
    rows = calls(db)
    assert len(rows) == 6 and {r[1] for r in rows} == {"ok"} and {r[7] for r in rows} == {1}
    direct_in, direct_out = cfg.prices()
    assert cfg.batch_prices() == (direct_in / 2, direct_out / 2)
    assert all(r[6] == pytest.approx(cfg.cost(r[4], r[5], batch=True)) for r in rows)
    before = server.total
    summary = llm.run_tasks(db, cfg, tasks(6))
    assert summary.cached == 6 and summary.requests_made == 0 and server.total == before
    again = batch.collect(db, cfg)
    assert again.batches == [] and calls(db) == rows and FINISHED == [1]
    info = batch.list_batches(db)[0]
    assert info.collected == 6 and info.cost == pytest.approx(sum(r[6] for r in rows))


def test_configured_batch_prices_and_the_estimate_shows_both(db, server):
    cfg = config(server, batch_input_price_per_1m=0.1, batch_output_price_per_1m=0.2)
    assert cfg.batch_prices() == (0.1, 0.2)
    e = llm.estimate(db, config(server), tasks(3))
    assert e.cost_batch == pytest.approx(e.cost / 2) and e.cost_batch_max == pytest.approx(e.cost_max / 2)


# --- faults -----------------------------------------------------------------------------------------------

def test_a_batch_failed_at_validation_fails_its_items_with_the_line_named(db, server):
    cfg = config(server)
    ts = tasks(4)
    server.batch.line_faults[llm.task_hash(cfg, ts[2])] = "invalid"
    sub = batch.submit(db, cfg, ts, owner="demo", run_id=1)
    server.batch.advance(sub.batches[0].batch_id, "in_progress")
    result = batch.collect(db, cfg)
    assert result.failed == 4 and "line 3" in result.notes[0] and "failed validation" in result.notes[0]
    summary = llm.run_tasks(db, cfg, ts, cached_only=True)
    assert len(summary.failed) == 4 and all("line 3: body.messages" in reason for _, reason in summary.failed)
    assert server.total == 0  # nothing was answered, nothing paid


def test_an_expired_batch_keeps_its_partial_output_and_sends_the_rest_again(db, server):
    cfg = config(server)
    sub = batch.submit(db, cfg, tasks(6), owner="demo", run_id=1)
    server.batch.advance(sub.batches[0].batch_id, "expired", done=4)
    result = batch.collect(db, cfg)
    assert result.ok == 4 and result.rebatched == 2 and FINISHED == [] and server.total == 4
    rest = [b for b in batch.list_batches(db) if not b.collected_at]
    assert len(rest) == 1 and rest[0].requests == 2 and rest[0].part == 1
    server.batch.advance(rest[0].batch_id, "completed")
    result = batch.collect(db, cfg)
    assert result.ok == 2 and FINISHED == [1]
    assert llm.run_tasks(db, cfg, tasks(6)).cached == 6


def test_an_expired_batch_rest_runs_directly_with_direct_rest(db, server):
    cfg = config(server)
    sub = batch.submit(db, cfg, tasks(6), owner="demo", run_id=1)
    server.batch.advance(sub.batches[0].batch_id, "expired", done=1)
    result = batch.collect(db, cfg, direct_rest=True)
    assert result.ok == 6 and result.run_direct == 5 and result.rebatched == 0 and FINISHED == [1]
    assert len(batch.list_batches(db)) == 1
    direct = [r for r in calls(db) if r[6] is not None]
    assert len(direct) == 6


def test_a_cancelled_batch_keeps_what_ran_and_records_the_rest_as_failed(db, server):
    cfg = config(server)
    sub = batch.submit(db, cfg, tasks(5), owner="demo", run_id=1)
    info = batch.cancel(db, cfg, sub.batches[0].batch_id)
    assert info.state == "cancelling"
    server.batch.advance(sub.batches[0].batch_id, "cancelled", done=2)
    result = batch.collect(db, cfg)
    assert result.ok == 2 and FINISHED == [1]
    summary = llm.run_tasks(db, cfg, tasks(5), cached_only=True)
    assert len(summary.results) == 2 and len(summary.failed) == 3
    assert all("was cancelled" in reason for _, reason in summary.failed)
    with pytest.raises(LLMError, match="no batch 'batch-nope'"):
        batch.cancel(db, cfg, "batch-nope")


def test_bad_lines_are_retried_once_directly_then_failed_with_the_reason(db, server):
    cfg = config(server)
    ts = tasks(6)
    ts[5].messages[1]["content"] += " [[fault:500]]"  # fails in the batch and directly
    h = [llm.task_hash(cfg, t) for t in ts]
    server.batch.line_faults.update({h[0]: "500", h[1]: "invalid_json", h[2]: "garbled", h[3]: "drop"})
    sub = batch.submit(db, cfg, ts, owner="demo", run_id=1)
    advance_all(server, sub)
    batch_requests = server.total
    result = batch.collect(db, cfg)
    assert result.retried == 5 and result.ok == 5 and result.failed == 1
    assert server.total - batch_requests == 5  # one direct request each: a fresh one, or the repair
    assert server.by_prompt[prompt_key(ts[1].messages)] == 2  # the batch line, then its repair
    rows = {r[0]: r for r in calls(db)}
    assert rows[h[1]][1] == "ok" and rows[h[1]][7] == 2  # the batch answer plus its repair
    assert rows[h[5]][1] == "failed" and "HTTP 500" in rows[h[5]][3]
    summary = llm.run_tasks(db, cfg, ts, cached_only=True)
    assert [k for k, _ in summary.failed] == ["q5"]


def test_an_interrupted_download_is_collected_again_without_counting_twice(db, server):
    cfg = config(server)
    sub = batch.submit(db, cfg, tasks(40), owner="demo", run_id=1)
    advance_all(server, sub)
    out = server.batch.batches[sub.batches[0].batch_id]["output_file_id"]
    server.batch.interrupt[out] = server.batch.files[out]["bytes"] // 2
    with pytest.raises(LLMError, match="interrupted after"):
        batch.collect(db, cfg)
    half = calls(db)
    assert 0 < len(half) < 40
    result = batch.collect(db, cfg)
    assert result.ok == 40 - len(half) and FINISHED == [1]
    rows = calls(db)
    assert len(rows) == 40 and {r[7] for r in rows} == {1}
    assert all(r in rows for r in half)  # the first half untouched
    info = batch.list_batches(db)[0]
    assert info.prompt_tokens == sum(r[4] for r in rows) and info.collected == 40


def test_a_process_killed_between_upload_and_create_never_pays_twice(db, server):
    cfg = config(server)
    client = batch.client_for(cfg)
    # killed after the upload, before its id was stored: the file is found by name and reused
    [key] = batch_submitting.write_parts(db, cfg, iter([(llm.task_hash(cfg, t), llm.cache.request_record(cfg, t, "json_schema"))
                                              for t in tasks(3)]), owner="demo", run_id=1, max_lines=10, max_bytes=10**6)
    data = b"".join(batch_submitting.file_lines(db, key))
    client.files.create(file=(f"{key}.jsonl", data), purpose="batch")
    assert batch.recover(db, client) == [key]
    assert server.batch.uploads == 1 and len(server.batch.batches) == 1
    # a partial upload is deleted and the file sent again
    [key2] = batch_submitting.write_parts(db, cfg, iter([(llm.task_hash(cfg, t), llm.cache.request_record(cfg, t, "json_schema"))
                                               for t in tasks(3, "y")]), owner="demo", run_id=2, max_lines=10,
                                max_bytes=10**6)
    partial = client.files.create(file=(f"{key2}.jsonl", b"".join(batch_submitting.file_lines(db, key2))[:100]), purpose="batch")
    batch.recover(db, client)
    assert partial.id in server.batch.deleted and server.batch.uploads == 3 and len(server.batch.batches) == 2
    # killed after creating the batch, before its id was stored: the batch is adopted, not created again
    [key3] = batch_submitting.write_parts(db, cfg, iter([(llm.task_hash(cfg, t), llm.cache.request_record(cfg, t, "json_schema"))
                                               for t in tasks(2, "z")]), owner="demo", run_id=3, max_lines=10,
                                max_bytes=10**6)
    f = client.files.create(file=(f"{key3}.jsonl", b"".join(batch_submitting.file_lines(db, key3))), purpose="batch")
    db.execute("UPDATE llm_batches SET state = 'uploaded', input_file_id = ? WHERE key = ?", [f.id, key3])
    created = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h",
                                    metadata={"labeler_key": key3})
    batch.recover(db, client)
    assert len(server.batch.batches) == 3 and batch.list_batches(db, run_id=3)[0].batch_id == created.id
    client.close()


# --- judge and synth runs ---------------------------------------------------------------------------------

def test_judge_run_batch_via_the_cli_returns_at_once_then_collect_finishes_it(tmp_path, ingest_tiny, monkeypatch):
    path = tmp_path / "j.db"
    db = store.connect(path)
    _, truth = build(db, ingest_tiny, n=8, overlap=0)
    with FakeOpenAI(responder=perfect(truth)) as s:
        monkeypatch.setenv("OPENAI_BASE_URL", s.url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        runner = CliRunner()
        r = runner.invoke(cli, ["--db", str(path), "judge", "run", "--model", "gpt-4o-mini", "--dry-run"])
        assert r.exit_code == 0 and "; as a batch $" in r.output, r.output
        r = runner.invoke(cli, ["--db", str(path), "judge", "run", "--model", "fake-model", "--batch", "--json"])
        assert r.exit_code == 0, r.output
        run = json.loads(r.stdout)
        assert run["status"] == "submitted" and len(run["batches"]) == 1 and s.total == 0
        r = runner.invoke(cli, ["--db", str(path), "llm", "batches", "--json"])
        [b] = json.loads(r.stdout)
        assert b["batch_id"] == run["batches"][0] and b["requests"] == 24 and b["state"] == "validating"
        r = runner.invoke(cli, ["--db", str(path), "llm", "collect", f"judge:{run['id']}"])
        assert r.exit_code == 0 and "1 batch(es) still running" in r.output
        r = runner.invoke(cli, ["--db", str(path), "judge", "run", "--resume", str(run["id"])])
        assert r.exit_code == 1 and "waiting for its batches" in r.output and s.total == 0
        s.batch.advance(b["batch_id"], "completed")
        r = runner.invoke(cli, ["--db", str(path), "llm", "collect", f"judge:{run['id']}"])
        assert r.exit_code == 0 and f"finished judge run {run['id']}" in r.output, r.output
        done = judge.get_run(db, run["id"])
        assert done.status == "done" and done.done == 24 and done.failed == 0
        grades = dict(((q, d), g) for q, d, g in db.execute(
            "SELECT query_pk, doc_pk, grade FROM judge_labels WHERE run_id = ?", [run["id"]]))
        assert len(grades) == 24 and None not in grades.values()
        r = runner.invoke(cli, ["--db", str(path), "llm", "collect", "--all"])
        assert r.exit_code == 0 and "collected 0 batch(es)" in r.output
        # a later direct run of the same judge pays nothing
        again = judge.run_judge(db, make_config(s), "relevance.v1")
        assert again.cached == 24 and s.total == 24
        r = runner.invoke(cli, ["--db", str(path), "llm", "collect"])
        assert r.exit_code == 2 and "give a RUN" in r.output


def test_judge_run_batch_wait_polls_until_done(tmp_path, ingest_tiny, monkeypatch):
    path = tmp_path / "w.db"
    db = store.connect(path)
    _, truth = build(db, ingest_tiny, n=4, overlap=0)
    with FakeOpenAI(responder=perfect(truth), batch_auto="completed") as s:
        monkeypatch.setenv("OPENAI_BASE_URL", s.url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        r = CliRunner().invoke(cli, ["--db", str(path), "judge", "run", "--model", "fake-model", "--batch", "--wait"])
        assert r.exit_code == 0, r.output
        assert "finished judge run" in r.output and "12 done" in r.output


def test_synth_generate_batch_stores_questions_when_collected(db, tmp_path):
    from labeler import synth
    from labeler.ingest import ingest_corpus, ingest_logs
    from tests.fake_openai import synth_responder
    from tests.test_synth import LOGS, corpus_records
    from tests.test_synth import config as synth_config

    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus_records()))
    (tmp_path / "logs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LOGS))
    ingest_corpus(db, tmp_path / "corpus.jsonl")
    ingest_logs(db, tmp_path / "logs.jsonl")
    synth_db = db

    with FakeOpenAI(responder=synth_responder()) as s:
        cfg = synth_config(s)
        options = synth.SynthOptions(n=6, per_chunk=2, seed=7)
        result = synth.generate(synth_db, cfg, options, batch=True)
        assert result.status == "submitted" and len(result.batches) == 1 and result.stored == []
        s.batch.advance(result.batches[0], "completed")
        collected = batch.collect(synth_db, cfg)
        assert collected.finished_runs == [("synth", result.run_id)]
        stored = synth_db.execute("SELECT count(*) FROM queries WHERE origin = 'synthetic'").fetchone()[0]
        status = synth_db.execute("SELECT status FROM synth_runs WHERE id = ?", [result.run_id]).fetchone()[0]
        assert stored == 6 and status == "finished"
        direct = synth.generate(synth_db, cfg, options)
        assert direct.summary.cached == 3 and direct.already == 6 and s.total == 3


def test_a_synth_batch_stores_what_was_sent_though_the_corpus_changed_meanwhile(db, tmp_path):
    from labeler import synth
    from labeler.ingest import ingest_corpus, ingest_logs
    from tests.fake_openai import synth_responder
    from tests.test_synth import LOGS, corpus_records
    from tests.test_synth import config as synth_config

    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus_records()))
    (tmp_path / "logs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LOGS))
    ingest_corpus(db, tmp_path / "corpus.jsonl")
    ingest_logs(db, tmp_path / "logs.jsonl")
    with FakeOpenAI(responder=synth_responder()) as s:
        cfg = synth_config(s)
        result = synth.generate(db, cfg, synth.SynthOptions(n=6, per_chunk=2, seed=7), batch=True)
        seeds = result.plan.seeds
        assert len(seeds) == 3 and not any(seed.multi_hop for seed in seeds)
        # while the batch runs: a seed chunk is rewritten (a plan made now would ask something else),
        # another is removed, and new chunks arrive
        changed, removed = seeds[0].doc_ids[0], seeds[1].doc_pks[0]
        (tmp_path / "more.jsonl").write_text(
            json.dumps({"id": changed, "text": "Rewritten: exports now run nightly at 02:00 UTC."}) + "\n"
            + "".join(json.dumps({"id": f"new-{i}", "text": f"A new help article number {i} about invoices, "
                                  "reminders and late fees for every plan."}) + "\n" for i in range(6)))
        ingest_corpus(db, tmp_path / "more.jsonl")
        db.execute("DELETE FROM documents WHERE pk = ?", [removed])
        store.index_pending(db.conn)
        s.batch.advance(result.batches[0], "completed")
        collected = batch.collect(db, cfg)
        assert collected.finished_runs == [("synth", result.run_id)] and collected.failed == 0
        stored = db.execute("SELECT seed_doc_ids FROM queries WHERE origin = 'synthetic'").fetchall()
        assert sorted(json.loads(r[0])[0] for r in stored) == sorted([seeds[0].doc_ids[0]] * 2 + [seeds[2].doc_ids[0]] * 2)
        reasons = db.execute("SELECT reason, detail FROM synth_rejections").fetchall()
        assert [r[0] for r in reasons] == ["seed_removed"] * 2 and seeds[1].doc_ids[0] in reasons[0][1]
        summary = json.loads(db.execute("SELECT summary FROM synth_runs WHERE id = ?", [result.run_id]).fetchone()[0])
        assert summary["stored"] == 4 and summary["llm"]["failed"] == []


def test_cli_lists_and_cancels_batches(tmp_path, server, monkeypatch):
    path = tmp_path / "c.db"
    db = store.connect(path)
    sub = batch.submit(db, config(server), tasks(3), owner="demo", run_id=7)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    runner = CliRunner()
    r = runner.invoke(cli, ["--db", str(path), "llm", "batches"])
    assert r.exit_code == 0, r.output
    header, _, row = r.output.splitlines()  # the table: batch, run (owner:id, as llm collect takes it), ...
    assert header.split()[:4] == ["batch", "run", "state", "requests"]
    assert row.split()[:2] == [sub.batches[0].batch_id, "demo:7"] and row.split()[3] == "3"
    r = runner.invoke(cli, ["--db", str(path), "llm", "cancel", sub.batches[0].batch_id])
    assert r.exit_code == 0 and r.output.strip() == f"{sub.batches[0].batch_id}: cancelling"
    r = runner.invoke(cli, ["--db", str(path), "llm", "cancel", "batch-unknown"])
    assert r.exit_code == 1 and "no batch 'batch-unknown'" in r.output and "Traceback" not in r.output
    server.batch.advance(sub.batches[0].batch_id, "cancelled", done=1)
    r = runner.invoke(cli, ["--db", str(path), "llm", "batches", "--offline", "--json"])
    assert json.loads(r.stdout)[0]["state"] == "cancelling"  # offline: what the database holds
    r = runner.invoke(cli, ["--db", str(path), "llm", "collect", "--all", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["ok"] == 1


# --- two collects at once -----------------------------------------------------------------------------

def test_a_batch_held_by_another_collect_is_left_to_it_until_its_hold_runs_out(db, server):
    cfg = config(server)
    ts = tasks(3)
    server.batch.line_faults[llm.task_hash(cfg, ts[0])] = "500"  # one line to retry directly
    sub = batch.submit(db, cfg, ts, owner="demo", run_id=1)
    advance_all(server, sub)
    before = server.total
    db.execute("UPDATE llm_batches SET collector = 'other', collecting_until = '2999-01-01T00:00:00.000000Z'")
    result = batch.collect(db, cfg)
    assert result.busy == [sub.batches[0].batch_id] and result.batches == [] and result.ok == 0
    assert server.total == before and calls(db) == []  # nothing paid, nothing stored
    db.execute("UPDATE llm_batches SET collecting_until = '2000-01-01T00:00:00.000000Z'")  # that collect was killed
    result = batch.collect(db, cfg)
    assert result.busy == [] and result.ok == 3 and result.retried == 1 and server.total == before + 1
    assert db.execute("SELECT collector, collecting_until FROM llm_batches").fetchall() == [(None, None)]


def test_two_collects_at_once_retry_each_bad_line_once(tmp_path):
    import threading

    with FakeOpenAI(latency=0.3) as slow:
        cfg = config(slow)
        path = tmp_path / "two.db"
        first = store.connect(path)
        ts = tasks(4)
        for t in ts[:2]:
            slow.batch.line_faults[llm.task_hash(cfg, t)] = "invalid_json"
        sub = batch.submit(first, cfg, ts, owner="demo", run_id=1)
        advance_all(slow, sub)
        before = slow.total
        results: list = []
        errors: list = []

        def collect() -> None:
            try:
                results.append(batch.collect(store.connect(path), cfg))
            except Exception as e:  # noqa: BLE001 - reported by the assertion below
                errors.append(e)

        threads = [threading.Thread(target=collect) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert slow.total - before == 2  # each bad line repaired once, by one of the two
        assert sum(len(r.batches) for r in results) == 1  # collected by one; the other left it alone
        assert sum(r.ok for r in results) == 4
        assert first.execute("SELECT count(*) FROM llm_calls WHERE status = 'ok'").fetchone()[0] == 4
