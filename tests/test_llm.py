"""labeler.llm end to end: the real openai client against the fake server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Literal

import pydantic
import pytest

from labeler import llm
from labeler.db import connect
from labeler.errors import LLMError
from tests.fake_openai import FAULT_KINDS, FakeOpenAI, Fault, prompt_key

KEY = "sk-test-NEVER-STORE-7f3a9c1e5b"
ROOT = Path(__file__).resolve().parents[1]


class Support(pydantic.BaseModel):
    doc_id: str
    quote: str = pydantic.Field(min_length=1)


class Judgment(pydantic.BaseModel):
    """A nested schema exercising enums, bounds, lists, optionals and $defs."""

    grade: Literal[0, 1, 2, 3]
    confidence: float = pydantic.Field(ge=0, le=1)
    rationale: str
    kind: Literal["fact", "how-to", "troubleshooting"]
    support: list[Support]
    note: str | None = None


class Strict(pydantic.BaseModel):
    """Only ever satisfied by a custom responder: the default answer fails validation."""

    answer: Literal["yes", "no"]


def make_tasks(n: int, marker: dict[int, str] | None = None, schema: type = Judgment,
               prefix: str = "question") -> list[llm.Task]:
    marker = marker or {}
    return [llm.Task(key=f"q{i}", schema=schema, messages=[
        {"role": "system", "content": "You grade retrieved chunks."},
        {"role": "user", "content": f"{prefix} {i}" + (f" [[fault:{marker[i]}]]" if i in marker else "")},
    ]) for i in range(n)]


def make_config(server: FakeOpenAI, **overrides) -> llm.LLMConfig:
    values = dict(base_url=server.url, api_key=KEY, model="fake-model", timeout_s=2, max_retries=2,
                  backoff_base_s=0.001, backoff_max_s=0.01, concurrency=4)
    values.update(overrides)
    return llm.LLMConfig(**values)


@pytest.fixture
def server():
    with FakeOpenAI() as s:
        yield s


@pytest.fixture
def db(tmp_path):
    """A file database (WAL, bytes on disk to inspect), unlike conftest's in-memory one."""
    database = connect(tmp_path / "llm.db")
    yield database
    database.close()


def rows(db) -> list[dict]:
    return list(db["llm_calls"].rows)


def assert_all_accounted(db, summary: llm.RunSummary, tasks: list[llm.Task]) -> None:
    """Every task is done, cached or failed-with-reason; no ok row holds output that fails validation."""
    keys = {t.key for t in tasks}
    ok = set(summary.results)
    failed = {k for k, _ in summary.failed}
    assert ok | failed == keys and not ok & failed and summary.cancelled == []
    assert all(reason for _, reason in summary.failed)
    schema = {t.key: t.schema for t in tasks}
    by_hash = {r["hash"]: r for r in rows(db)}
    for key in keys:
        row = by_hash[summary.hashes[key]]
        if key in ok:
            assert row["status"] == "ok" and row["error"] is None
            assert schema[key].model_validate_json(row["parsed"]) == summary.results[key]
        else:
            assert row["status"] == "failed" and row["error"] and row["parsed"] is None


# --- structured output ------------------------------------------------------------------------

def test_structured_output_validates_into_the_pydantic_model(server, db):
    tasks = make_tasks(5)
    summary = llm.run_tasks(db, make_config(server), tasks)
    assert (summary.done, summary.cached, summary.failed, summary.requests_made) == (5, 0, [], 5)
    assert all(isinstance(summary.results[t.key], Judgment) for t in tasks)
    assert summary.mode == "json_schema"
    assert {e["format"] for e in server.log} == {"json_schema"}
    stored = rows(db)
    assert len(stored) == 5 and all(r["status"] == "ok" and r["requests"] == 1 for r in stored)
    request = json.loads(stored[0]["request"])
    assert request["model"] == "fake-model" and request["schema_name"] == "Judgment"
    assert json.loads(stored[0]["response"])["choices"][0]["message"]["content"]
    # Deterministic: the same prompt always gets the same answer.
    again = llm.run_tasks(connect(":memory:"), make_config(server), tasks)
    assert again.results == summary.results


def test_strict_schema_closes_objects_and_requires_every_property():
    schema = llm.json_schema_for(Judgment)
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == set(Judgment.model_fields)
    support = schema["$defs"]["Support"]
    assert support["additionalProperties"] is False and support["required"] == ["doc_id", "quote"]
    assert "default" not in schema["properties"]["note"]


def test_json_schema_rejected_falls_back_to_json_object_once(db):
    with FakeOpenAI(reject_json_schema=True) as server:
        tasks = make_tasks(6)
        summary = llm.run_tasks(db, make_config(server, concurrency=1), tasks)
        assert summary.done == 6 and summary.failed == []
        assert summary.mode == "json_object"
        formats = [e["format"] for e in server.log]
        assert formats == ["json_schema"] + ["json_object"] * 6  # remembered for the rest of the run
        assert any("json_object" in note for note in summary.notes)
    assert_all_accounted(db, summary, tasks)
    assert json.loads(rows(db)[0]["request"])["mode"] == "json_object"


def test_server_without_any_response_format_gets_the_schema_in_the_prompt(db):
    with FakeOpenAI(reject_json_schema=True, reject_json_object=True) as server:
        summary = llm.run_tasks(db, make_config(server, concurrency=1), make_tasks(3))
        assert summary.done == 3 and summary.mode == "prompt"
        assert [e["format"] for e in server.log] == ["json_schema", "json_object", None, None, None]


# --- faults ---------------------------------------------------------------------------------

# kind -> (reason of a permanent fault, recovers within the run when transient)
FAULTS = {
    "429": ("rate limited (HTTP 429)", True),
    "500": ("server error (HTTP 500)", True),
    "503": ("server error (HTTP 503)", True),
    "hang": ("timeout after 1 s", True),
    "invalid_json": ("invalid output after one repair attempt", True),
    "truncated_json": ("truncated output (finish_reason=length)", True),
    "refusal": ("refusal: I'm sorry", False),
    "empty": ("refusal: empty response", False),
}
assert set(FAULTS) == set(FAULT_KINDS)


@pytest.mark.parametrize("permanent", [False, True], ids=["first-attempt", "permanent"])
@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_every_injected_fault_ends_stored_or_failed_with_reason(db, kind, permanent):
    reason, recovers = FAULTS[kind]
    marker = f"{kind}{'' if permanent else '*1'} ra=0.01"
    tasks = make_tasks(4, {2: marker})
    with FakeOpenAI(hang_s=3.0) as server:
        config = make_config(server, timeout_s=1.0, max_retries=1)
        summary = llm.run_tasks(db, config, tasks)
        assert_all_accounted(db, summary, tasks)
        if permanent or not recovers:
            assert [k for k, _ in summary.failed] == ["q2"]
            assert reason in summary.failed[0][1]
        else:
            assert summary.done == 4 and summary.failed == []
        assert summary.done == 4 - len(summary.failed)
        # A rerun retries only the failure (a failure does not poison the cache).
        before = server.total
        rerun = llm.run_tasks(db, config, tasks)
        assert rerun.cached == summary.done
        assert rerun.requests_made == server.total - before
        assert (rerun.requests_made > 0) == bool(summary.failed)
        if summary.failed and not permanent:
            assert rerun.done == 1 and rerun.failed == []
        assert_all_accounted(db, rerun, tasks)


def test_mixed_fault_rate_loses_nothing_and_reruns_only_failures(db):
    tasks = make_tasks(40)
    with FakeOpenAI(fault_rate=0.5, fault_seed=3, permanent_fraction=0.3, hang_s=3.0, retry_after=0.01) as server:
        config = make_config(server, timeout_s=1.0, concurrency=8)
        summary = llm.run_tasks(db, config, tasks)
        assert_all_accounted(db, summary, tasks)
        assert summary.failed and summary.done > 20
        assert len(set(server.by_outcome) - {"ok"}) >= 5  # many kinds really happened
        rerun = llm.run_tasks(db, config, tasks)
        assert rerun.cached == summary.done
        assert rerun.requests_made >= len(summary.failed)
        assert_all_accounted(db, rerun, tasks)
        assert rerun.done + rerun.cached + len(rerun.failed) == 40


def test_retry_after_is_honoured(server, db):
    tasks = make_tasks(1, {0: "429*1 ra=0.4"})
    summary = llm.run_tasks(db, make_config(server, backoff_base_s=0.001), tasks)
    assert summary.done == 1
    first, second = server.log
    assert (first["outcome"], second["outcome"]) == ("429", "ok")
    assert second["t"] - first["t"] >= 0.4
    assert json.loads(rows(db)[0]["response"])  # the successful response is what is stored
    assert rows(db)[0]["requests"] == 2


def test_backoff_gives_up_after_max_retries(server, db):
    summary = llm.run_tasks(db, make_config(server, max_retries=3), make_tasks(1, {0: "503"}))
    assert summary.failed == [("q0", summary.failed[0][1])]
    assert "gave up after 4 attempts" in summary.failed[0][1]
    assert server.total == 4 and rows(db)[0]["requests"] == 4


def test_output_that_never_validates_is_repaired_once_then_failed(db):
    with FakeOpenAI(responder=lambda request: {"answer": "maybe"}) as server:
        summary = llm.run_tasks(db, make_config(server), make_tasks(1, schema=Strict))
        (key, reason), = summary.failed
        assert "invalid output after one repair attempt" in reason and "answer" in reason
        assert server.total == 2
        repair_request = json.loads(rows(db)[0]["request"])["repair"]
        assert repair_request["bad_output"] == '{"answer": "maybe"}'


def test_fenced_json_from_weak_servers_is_accepted(db):
    with FakeOpenAI(responder=lambda request: '```json\n{"answer": "yes"}\n```') as server:
        summary = llm.run_tasks(db, make_config(server), make_tasks(1, schema=Strict))
        assert summary.results["q0"] == Strict(answer="yes") and server.total == 1


def test_fault_plan_by_request_number(db):
    with FakeOpenAI(plan={1: Fault("500", times=1)}) as server:
        summary = llm.run_tasks(db, make_config(server, concurrency=1), make_tasks(2))
        assert summary.done == 2 and [e["outcome"] for e in server.log] == ["500", "ok", "ok"]


# --- cache, resume, ledger ------------------------------------------------------------------

def test_cache_hits_make_no_requests(server, db):
    tasks = make_tasks(10)
    first = llm.run_tasks(db, make_config(server), tasks)
    assert server.total == 10
    second = llm.run_tasks(db, make_config(server), tasks)
    assert server.total == 10
    assert (second.done, second.cached, second.requests_made, second.prompt_tokens) == (0, 10, 0, 0)
    assert second.results == first.results
    # Other parameters or another schema are another request.
    other = llm.run_tasks(db, make_config(server, temperature=0.7), tasks[:1])
    assert other.done == 1 and server.total == 11


def test_a_burst_of_new_connections_is_answered_on_the_first_attempt(db):
    # Each run opens a fresh client and up to `concurrency` connections at once. With
    # socketserver's listen backlog of 5, the fake server (in a process of its own, as the
    # benchmarks run it) dropped some of them: a connection error and a retry each, so the
    # requests a run sent were not the requests it asked for.
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--port", "0",
                               "--latency", "0.02"], stdout=subprocess.PIPE, text=True)
    try:
        url = json.loads(server.stdout.readline())["url"]
        config = llm.LLMConfig(base_url=url, api_key=KEY, model="fake-model", concurrency=32, max_retries=3,
                               backoff_base_s=0.001, backoff_max_s=0.01)
        attempts = []
        for run in range(3):
            summary = llm.run_tasks(db, config, make_tasks(48, prefix=f"burst {run}"))
            assert summary.done == 48
            attempts.append(summary.requests_made)
        assert attempts == [48] * 3
    finally:
        server.terminate()
        server.wait(10)


def test_identical_requests_in_one_run_are_sent_once(server, db):
    task = make_tasks(1)[0]
    twin = llm.Task(key="twin", messages=task.messages, schema=task.schema)
    summary = llm.run_tasks(db, make_config(server), [task, twin])
    assert server.total == 1 and summary.done == 2
    assert summary.results["q0"] == summary.results["twin"]
    assert summary.hashes["q0"] == summary.hashes["twin"]


def test_failure_does_not_poison_the_cache_and_the_ledger_adds_up(server, db):
    tasks = make_tasks(1, {0: "refusal*1"})
    first = llm.run_tasks(db, make_config(server), tasks)
    assert first.failed and rows(db)[0]["status"] == "failed"
    second = llm.run_tasks(db, make_config(server), tasks)
    assert second.done == 1
    row = rows(db)[0]
    assert row["status"] == "ok" and row["error"] is None and row["requests"] == 2
    assert row["prompt_tokens"] == first.prompt_tokens + second.prompt_tokens


RESUME_SCRIPT = """
import sys
from labeler import llm
from labeler.db import connect
from tests.test_llm import make_resume_config, make_tasks
llm.run_tasks(connect(sys.argv[1]), make_resume_config(sys.argv[2]), make_tasks(40))
"""


def make_resume_config(url: str) -> llm.LLMConfig:
    return llm.LLMConfig(base_url=url, api_key=KEY, model="fake-model", concurrency=4)


def test_resume_after_a_killed_run_repeats_no_completed_request(tmp_path):
    path = tmp_path / "killed.db"
    connect(path)  # migrate up front, so the child only writes results
    tasks = make_tasks(40)
    with FakeOpenAI(latency=0.1) as server:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        child = subprocess.Popen([sys.executable, "-c", RESUME_SCRIPT, str(path), server.url], env=env,
                                 stderr=subprocess.PIPE)
        try:
            # With 4 slots, the 13th request starts only after 9 results were stored.
            assert server.wait_for_requests(13, timeout=30), child.stderr.read() if child.poll() else ""
        finally:
            child.kill()  # SIGKILL: no cleanup, no flush
            child.wait()
        assert child.returncode == -9
        db = connect(path)
        stored = {r["hash"] for r in rows(db) if r["status"] == "ok"}
        assert 9 <= len(stored) < 40
        config = make_resume_config(server.url)
        done_before = [t for t in tasks if llm.task_hash(config, t) in stored]
        counts_before = server.stats()["by_prompt"]
        summary = llm.run_tasks(db, config, tasks)
        counts_after = server.stats()["by_prompt"]
    assert summary.cached == len(done_before) and summary.done == 40 - len(done_before)
    assert summary.requests_made == 40 - len(done_before) and summary.failed == []
    for task in done_before:  # completed before the kill: never requested again
        key = prompt_key(task.messages)
        assert counts_before[key] == counts_after[key] == 1
    assert sum(1 for r in rows(db) if r["status"] == "ok") == 40


def test_tokens_and_cost_are_recorded(server, db):
    config = make_config(server, model="gpt-4o-mini")
    summary = llm.run_tasks(db, config, make_tasks(3))
    stored = rows(db)
    assert summary.prompt_tokens == sum(r["prompt_tokens"] for r in stored) > 0
    assert summary.completion_tokens == sum(r["completion_tokens"] for r in stored) > 0
    expected = (summary.prompt_tokens * 0.15 + summary.completion_tokens * 0.60) / 1e6
    assert summary.cost == pytest.approx(expected)
    assert sum(r["cost"] for r in stored) == pytest.approx(expected)
    usage = json.loads(stored[0]["response"])["usage"]
    assert (stored[0]["prompt_tokens"], stored[0]["completion_tokens"]) == (
        usage["prompt_tokens"], usage["completion_tokens"])


def test_unknown_model_has_no_cost_and_says_so(server, db):
    summary = llm.run_tasks(db, make_config(server, model="llama3.1:8b"), make_tasks(1))
    assert summary.cost is None and rows(db)[0]["cost"] is None
    assert "no price known for model 'llama3.1:8b'" in summary.notes[0]
    priced = make_config(server, model="llama3.1:8b", input_price_per_1m=1.0, output_price_per_1m=2.0)
    assert priced.prices() == (1.0, 2.0)
    assert llm.LLMConfig(model="gpt-4o-mini-2024-07-18").prices() == llm.PRICES["gpt-4o-mini"]
    assert llm.LLMConfig(model="gpt-4o-2024-08-06").prices() == llm.PRICES["gpt-4o"]


def test_estimate_counts_tokens_cost_and_cached(server, db):
    config = make_config(server, model="gpt-4o-mini")
    tasks = make_tasks(5)
    before = llm.estimate(db, config, tasks)
    assert (before.tasks, before.cached, before.to_request) == (5, 0, 5)
    assert before.input_tokens > 5 * 20 and before.output_tokens == 5 * 256
    assert before.cost == pytest.approx(config.cost(before.input_tokens, before.output_tokens))
    assert before.cost_max > before.cost
    llm.run_tasks(db, config, tasks[:2])
    after = llm.estimate(db, config, tasks)
    assert (after.cached, after.to_request) == (2, 3) and after.input_tokens < before.input_tokens
    assert server.total == 2  # estimating sends nothing
    unknown = llm.estimate(None, make_config(server, model="local"), tasks)
    assert unknown.cost is None and unknown.notes


# --- secrets ----------------------------------------------------------------------------------

def test_the_api_key_never_reaches_the_db_logs_or_repr(db, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    with FakeOpenAI(api_key=KEY, hang_s=3.0) as server:
        config = make_config(server, timeout_s=1.0, max_retries=1)
        tasks = make_tasks(6, {1: "500", 2: "invalid_json", 3: "refusal", 4: "429*1 ra=0.01"})
        summary = llm.run_tasks(db, config, tasks)
        assert summary.done == 3 and len(summary.failed) == 3
    db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("llm.db"))
    assert b"sk-test" not in data and KEY.encode() not in data
    assert KEY not in caplog.text
    for text in (repr(config), str(config), repr(summary), json.dumps(vars(config), default=str)):
        assert KEY not in text
    assert "api_key='***'" in repr(config)


def test_wrong_key_stops_the_run_with_a_clear_error(db):
    with FakeOpenAI(api_key="sk-the-right-one") as server:
        with pytest.raises(LLMError, match="refused the API key") as raised:
            llm.run_tasks(db, make_config(server), make_tasks(5))
        assert KEY not in str(raised.value)
        assert server.total <= 4  # the run stops instead of failing every item


def test_missing_key_without_base_url_is_a_user_error(db):
    with pytest.raises(LLMError, match="OPENAI_API_KEY"):
        llm.run_tasks(db, llm.LLMConfig(api_key=None), make_tasks(1))


def test_from_env_reads_env_then_secrets_then_overrides(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.invalid/v1")
    monkeypatch.delenv("LABELER_MODEL", raising=False)
    config = llm.LLMConfig.from_env()
    assert config.api_key.get_secret_value() == "sk-from-env" and config.base_url == "http://env.invalid/v1"
    assert config.model == llm.DEFAULT_MODEL and "sk-from-env" not in repr(config)
    config = llm.LLMConfig.from_env({"OPENAI_API_KEY": "sk-from-secrets", "openai": {"model": "gpt-4.1"}},
                                    concurrency=3, model=None)
    assert config.api_key.get_secret_value() == "sk-from-secrets"
    assert (config.model, config.concurrency) == ("gpt-4.1", 3)
    with pytest.raises(LLMError, match="concurrency"):
        llm.LLMConfig(concurrency=0)


# --- cancel, progress, event loops --------------------------------------------------------------

def test_cancel_leaves_unstarted_tasks_undone(server, db):
    cancel = threading.Event()
    seen: list[llm.Progress] = []

    def progress(p: llm.Progress) -> None:
        seen.append(p)
        if p.completed == 3:
            cancel.set()

    summary = llm.run_tasks(db, make_config(server, concurrency=1), make_tasks(10), progress=progress,
                            cancel=cancel)
    assert (summary.done, summary.failed, len(summary.cancelled)) == (3, [], 7)
    assert server.total == 3 and len(rows(db)) == 3
    assert [p.completed for p in seen] == list(range(1, 11)) and seen[-1].status == "cancelled"
    # The rerun picks up where the cancel stopped.
    rerun = llm.run_tasks(db, make_config(server), make_tasks(10))
    assert (rerun.cached, rerun.done) == (3, 7)


def test_cancel_before_start_sends_nothing(server, db):
    cancel = threading.Event()
    cancel.set()
    summary = llm.run_tasks(db, make_config(server), make_tasks(4), cancel=cancel)
    assert len(summary.cancelled) == 4 and server.total == 0 and rows(db) == []


def test_callable_from_inside_a_running_event_loop(server, db):
    caller = threading.get_ident()
    threads: set[int] = set()

    async def app() -> llm.RunSummary:
        return llm.run_tasks(db, make_config(server), make_tasks(3),
                             progress=lambda p: threads.add(threading.get_ident()))

    summary = asyncio.run(app())
    assert summary.done == 3 and threads == {caller}  # progress stays on the caller's thread


def test_a_raising_progress_callback_stops_the_run_and_propagates(server, db):
    def progress(p: llm.Progress) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        llm.run_tasks(db, make_config(server, concurrency=1), make_tasks(5), progress=progress)
    assert server.total == 1 and len(rows(db)) == 1  # the paid answer is kept


def test_server_specific_params_pass_through_and_reserved_ones_are_refused(db):
    seen: list[dict] = []

    def responder(request: dict) -> dict:
        seen.append(request)
        return {"answer": "yes"}

    with FakeOpenAI(responder=responder) as server:
        task = llm.Task("q0", [{"role": "user", "content": "hi"}], Strict, params={"top_k": 5, "seed": 7})
        assert llm.run_tasks(db, make_config(server, max_tokens=50), [task]).done == 1
        assert seen[0]["top_k"] == 5 and seen[0]["seed"] == 7 and seen[0]["max_tokens"] == 50
        assert seen[0]["temperature"] == 0 and seen[0]["response_format"]["json_schema"]["strict"] is True
        with pytest.raises(LLMError, match="sets model, stream in params"):
            llm.run_tasks(db, make_config(server), [llm.Task("q1", task.messages, Strict,
                                                             params={"stream": True, "model": "x"})])


def test_duplicate_keys_are_rejected(db, server):
    tasks = make_tasks(2)
    tasks[1].key = tasks[0].key
    with pytest.raises(LLMError, match="duplicate task key 'q0'"):
        llm.run_tasks(db, make_config(server), tasks)


def test_equal_numeric_parameters_give_the_same_cache_key():
    task = llm.Task("q0", [{"role": "user", "content": "hi"}], Judgment)
    as_int, as_float = llm.LLMConfig(model="m", temperature=0), llm.LLMConfig(model="m", temperature=0.0)
    assert llm.task_hash(as_int, task) == llm.task_hash(as_float, task)
    assert llm.task_hash(llm.LLMConfig(model="m", temperature=0.7), task) != llm.task_hash(as_int, task)
    seeded = llm.Task("q0", task.messages, Judgment, params={"temperature": 1})
    assert llm.task_hash(as_int, seeded) == llm.task_hash(as_int, llm.Task("q0", task.messages, Judgment,
                                                                           params={"temperature": 1.0}))
