"""labeler.synth end to end: the real openai client against the fake server on 127.0.0.1."""

from __future__ import annotations

import json
import threading

import pytest
from click.testing import CliRunner

import labeler.labels as labels
from labeler import llm, synth
from labeler.cli import cli
from labeler.db import connect
from labeler.errors import LabelError, SynthError
from labeler.ingest import ingest_corpus, ingest_logs
from tests import cisi
from tests.fake_openai import FakeOpenAI, prompt_chunks, synth_responder

KEY = "sk-test-NEVER-STORE-synth-4411"
TOPICS = ["invoice", "webhook", "password", "export", "billing", "calendar", "payroll", "receipt", "refund",
          "report", "backup", "language"]
SOURCES = ["help", "billing", "api"]


def corpus_records() -> list[dict]:
    return [{"id": f"doc-{t}", "title": f"About {t}s", "source": SOURCES[i % 3],
             "text": f"The {t} settings live under Settings, {t.title()}s. "
                     f"Admins can change every {t} option for their workspace{i}. "
                     f"If a {t} fails, Tallyhive retries it{i} three times and then emails the owner."}
            for i, t in enumerate(TOPICS)]


LOGS = [{"query_id": f"log-{i}", "question": q, "retrieved": [{"id": f"doc-{TOPICS[i]}", "score": 0.5}]}
        for i, q in enumerate(["how do i send an invoice", "webhook not firing??", "reset my password pls",
                               "export to csv", "why was i billed twice", "calendar sync broken"])]


@pytest.fixture
def server():
    with FakeOpenAI(responder=synth_responder()) as s:
        yield s


@pytest.fixture
def synth_db(db, tmp_path):
    """The in-memory db with 12 corpus chunks (3 sources) and 6 logged questions."""
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus_records()))
    (tmp_path / "logs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LOGS))
    ingest_corpus(db, tmp_path / "corpus.jsonl")
    ingest_logs(db, tmp_path / "logs.jsonl")
    return db


def config(server: FakeOpenAI, **overrides) -> llm.LLMConfig:
    values = dict(base_url=server.url, api_key=KEY, model="fake-model", timeout_s=2, max_retries=2,
                  backoff_base_s=0.001, backoff_max_s=0.01, concurrency=4)
    values.update(overrides)
    return llm.LLMConfig(**values)


def recording(responder):
    """Wrap a responder so the test can read every request the server got."""
    requests: list[dict] = []

    def respond(request):
        requests.append(request)
        return responder(request)

    respond.requests = requests
    return respond


def synthetic_rows(db) -> list[dict]:
    return [dict(zip(("pk", "query_id", "question", "review_state", "seed_doc_ids", "generator", "meta", "answer"), r,
                     strict=True))
            for r in db.execute("SELECT pk, query_id, question, review_state, seed_doc_ids, generator, meta, answer "
                                "FROM queries WHERE origin = 'synthetic' ORDER BY pk")]


# --- generation --------------------------------------------------------------------------------

def test_generate_stores_pending_questions_with_provenance_and_candidates(synth_db, server):
    result = synth.generate(synth_db, config(server), synth.SynthOptions(n=6, per_chunk=2, seed=3))
    assert (len(result.plan.seeds), server.total, result.summary.done) == (3, 3, 3)
    assert len(result.stored) == 6 and result.rejected == [] and result.status == "finished"
    rows = synthetic_rows(synth_db)
    assert len(rows) == 6
    for row in rows:
        assert row["review_state"] == "pending"
        assert row["answer"] is None  # no production answer; the proposed one is in meta
        meta, generator = json.loads(row["meta"]), json.loads(row["generator"])
        seeds = json.loads(row["seed_doc_ids"])
        assert len(seeds) == 1 and seeds[0].startswith("doc-")
        assert meta["expected_answer"] and meta["quotes"] and meta["question_type"] == "fact"
        assert meta["llm_call"] == result.summary.hashes[seeds[0]]
        assert generator["model"] == "fake-model"
        assert generator["prompt_version"] == synth.SYNTH_PROMPT_VERSION == "synth-questions.v1"
        assert generator["seed"] == 3 and generator["run_id"] == result.run_id
        assert generator["options"]["per_chunk"] == 2 and generator["setting"] == result.plan.setting
        assert generator["candidates"] == {"retriever": "production", "method": "tfidf corpus search", "k": 10}
        assert KEY not in row["generator"]
        # the chunks to judge: corpus search, seed chunk included, shown by the Label page's retriever
        candidates = [r[0] for r in synth_db.execute(
            "SELECT d.doc_id FROM retrievals r JOIN documents d ON d.pk = r.doc_pk WHERE r.query_pk = ? "
            "AND r.retriever = 'production' ORDER BY rank", [row["pk"]])]
        assert len(candidates) > 1 and seeds[0] in candidates
    run = synth.runs(synth_db)[0]
    assert (run["status"], run["summary"]["stored"], run["summary"]["llm"]["done"]) == ("finished", 6, 3)
    assert not synth.rejections(synth_db)


def test_prompt_has_the_chunk_style_examples_and_options(synth_db, server):
    server.responder = recording(synth_responder())
    options = synth.SynthOptions(n=2, per_chunk=2, seed=1, question_types=("how-to", "troubleshooting"),
                                 persona="a new admin", language="German", n_examples=3)
    synth.generate(synth_db, config(server), options)
    (request,) = server.responder.requests
    system, user = request["messages"][0]["content"], request["messages"][1]["content"]
    assert system == synth.SYNTH_SYSTEM_V1
    assert "Write 2 question(s)" in user and "how-to, troubleshooting" in user
    assert "a new admin" in user and "in German" in user
    logged = {r["question"] for r in LOGS}
    examples = [line[2:] for line in user.splitlines() if line.startswith("- ") and line[2:] in logged]
    assert len(examples) == 3  # a seeded sample of real logged questions
    ((doc_id, text),) = prompt_chunks(request)
    assert text == next(r["text"] for r in corpus_records() if r["id"] == doc_id)
    assert request["response_format"]["type"] == "json_schema"


def test_language_defaults_to_the_setting_then_the_corpus():
    assert synth.detect_language(["Der Export ist nicht mit der Datei verbunden und die Rechnung fehlt."]) == "German"
    assert synth.detect_language(["Le mot de passe est dans les paramètres de la page."]) == "French"
    assert synth.detect_language(["The export is in the settings of the workspace."]) == "English"
    assert synth.detect_language([]) == "English"


def test_language_setting_is_used_when_no_option(synth_db, server):
    from labeler.accounts.settings import set_setting

    set_setting(synth_db, "synth_language", "Dutch")
    plan = synth.plan_generation(synth_db, config(server), synth.SynthOptions(n=2))
    assert plan.language == "Dutch" and "in Dutch" in plan.tasks[0].messages[1]["content"]
    assert server.total == 0


def test_rerun_makes_no_new_request_and_stores_nothing_twice(synth_db, server):
    options = synth.SynthOptions(n=8, per_chunk=2)
    first = synth.generate(synth_db, config(server), options)
    requests = server.total
    again = synth.generate(synth_db, config(server), options)
    assert server.total == requests == 4
    assert (again.summary.cached, again.summary.requests_made, again.stored) == (4, 0, [])
    assert again.already == len(first.stored) + len(first.rejected) == 8
    assert len(synthetic_rows(synth_db)) == 8
    # a new seed covers new chunks: chunks used by the other seed's run come last
    other = synth.plan_generation(synth_db, config(server), synth.SynthOptions(n=8, per_chunk=2, seed=99))
    used = {s.key for s in first.plan.seeds}
    assert not used & {s.key for s in other.seeds}


def test_dry_run_estimates_and_sends_nothing(synth_db, server, tmp_path, monkeypatch):
    plan = synth.plan_generation(synth_db, config(server), synth.SynthOptions(n=10, per_chunk=2))
    assert (plan.estimate.to_request, plan.estimate.tasks) == (5, 5)
    assert plan.estimate.input_tokens > 0 and plan.estimate.output_tokens > 0
    path = tmp_path / "cli.db"
    file_db = connect(path)
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus_records()))
    ingest_corpus(file_db, tmp_path / "c.jsonl")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    runner = CliRunner()
    r = runner.invoke(cli, ["--db", str(path), "synth", "generate", "--n", "6", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "dry run: 3 request(s)" in r.output and "nothing was sent" in r.output
    r = runner.invoke(cli, ["--db", str(path), "synth", "generate", "--n", "6", "--model", "gpt-4o-mini",
                            "--dry-run", "--json"])
    doc = json.loads(r.stdout)
    assert doc["estimate"]["to_request"] == 3 and doc["estimate"]["cost"] > 0 and doc["model"] == "gpt-4o-mini"
    assert server.total == 0
    assert KEY not in r.output
    assert file_db.execute("SELECT count(*) FROM synth_runs").fetchone()[0] == 0


def test_cli_generate_then_report(tmp_path, server, monkeypatch):
    path = tmp_path / "cli.db"
    file_db = connect(path)
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus_records()))
    (tmp_path / "l.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LOGS))
    ingest_corpus(file_db, tmp_path / "c.jsonl")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    runner = CliRunner()
    r = runner.invoke(cli, ["--db", str(path), "synth", "report"])
    assert r.exit_code == 1 and r.output.startswith("Error: nothing to compare") and "Traceback" not in r.output
    ingest_logs(file_db, tmp_path / "l.jsonl")
    r = runner.invoke(cli, ["--db", str(path), "synth", "generate", "--n", "6", "--per-chunk", "2", "--seed", "7",
                            "--model", "fake-model", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["stored"] == 6 and doc["llm"]["requests"] == 3 and doc["status"] == "finished"
    r = runner.invoke(cli, ["--db", str(path), "synth", "generate", "--n", "6", "--model", "fake-model"])
    assert r.exit_code == 0 and "stored 0" in r.output and "already stored 6" in r.output and "3 cached" in r.output
    assert server.total == 3
    r = runner.invoke(cli, ["--db", str(path), "synth", "report", "--json"])
    report = json.loads(r.stdout)
    assert report["n"] == {"log": 6, "synthetic": 6} and report["classifier"]["auc"] is not None
    r = runner.invoke(cli, ["--db", str(path), "synth", "report"])
    assert r.exit_code == 0 and "classifier AUC" in r.output
    r = runner.invoke(cli, ["--db", str(path), "synth", "generate", "--types", "poems"])
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "question types" in r.output


def test_no_api_key_is_one_clear_error(synth_db, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(llm.LLMError, match="OPENAI_API_KEY"):
        synth.generate(synth_db, llm.LLMConfig.from_env(), synth.SynthOptions(n=2))
    assert synth.runs(synth_db)[0]["status"] == "failed"


def test_json_object_fallback(synth_db):
    with FakeOpenAI(responder=synth_responder(), reject_json_schema=True) as server:
        result = synth.generate(synth_db, config(server), synth.SynthOptions(n=4, per_chunk=2))
    assert result.summary.mode == "json_object" and len(result.stored) == 4


# --- checks ------------------------------------------------------------------------------------

def transform(fn):
    """A responder that edits synth_responder's questions: fn(request, questions) -> questions."""
    base = synth_responder()

    def respond(request):
        return {"questions": fn(request, base(request)["questions"])}

    return respond


def test_quote_check_normalizes_space_case_and_quotes_and_rejects_invented_quotes(synth_db):
    def mutate(request, questions):
        questions[0]["quotes"] = ["  " + questions[0]["quotes"][0].upper().replace(" ", "\n  ") + "  "]
        questions[1]["quotes"] = ["Tallyhive deletes everything at midnight."]
        return questions

    with FakeOpenAI(responder=transform(mutate)) as server:
        result = synth.generate(synth_db, config(server), synth.SynthOptions(n=4, per_chunk=2))
    assert len(result.stored) == 2
    assert [r["reason"] for r in result.rejected] == ["quote_not_found"] * 2
    stored = synth.rejections(synth_db)
    assert {r.reason for r in stored} == {"quote_not_found"} and len(stored) == 2
    assert "tallyhive deletes everything at midnight" in stored[0].detail
    assert stored[0].question and stored[0].quotes == ["Tallyhive deletes everything at midnight."]
    assert stored[0].run_id == result.run_id and stored[0].seed_doc_ids


def test_curly_quotes_and_ellipsis_in_a_quote_still_match():
    seed = synth.Seed((1,), ("d",), (None,), ("It's the \"owner\" who pays - always.",))
    item = synth.GeneratedQuestion(question="who pays?", answer="the owner",
                                   quotes=["\u201cIt\u2019s the \u201cowner\u201d who pays \u2013 always\u2026\u201d"],
                                   type="fact")
    assert synth.check_item(item, seed, synth.SynthOptions()) is None


def test_duplicates_of_stored_and_of_each_other_are_rejected(synth_db):
    def mutate(request, questions):
        (doc_id, _), = prompt_chunks(request)
        if doc_id == "doc-invoice":
            questions[0]["question"] = "How do I send an invoice"  # a logged question, other case
        questions[1]["question"] = questions[0]["question"]
        return questions

    with FakeOpenAI(responder=transform(mutate)) as server:
        options = synth.SynthOptions(n=24, per_chunk=2)
        result = synth.generate(synth_db, config(server), options)
    reasons = [(r["reason"], r["detail"]) for r in result.rejected]
    assert ("duplicate", "cosine 1.000 with log-0") in reasons
    # per seed the second question twins the first; for doc-invoice both twin the logged question
    assert [r for r, _ in reasons] == ["duplicate"] * 13
    assert sum(d == "cosine 1.000 with log-0" for _, d in reasons) == 2
    assert sum(d.startswith("cosine 1.000 with new question") for _, d in reasons) == 11
    assert len(result.stored) == 11
    assert {r.reason for r in synth.rejections(synth_db)} == {"duplicate"}


def test_duplicate_threshold_is_configurable(synth_db):
    def mutate(request, questions):
        questions[1]["question"] = questions[0]["question"] + " today"
        return questions

    with FakeOpenAI(responder=transform(mutate)) as server:
        strict = synth.generate(synth_db, config(server), synth.SynthOptions(n=2, per_chunk=2, seed=1,
                                                                              duplicate_threshold=0.99))
        assert len(strict.stored) == 2
    with FakeOpenAI(responder=transform(mutate)) as server:
        loose = synth.generate(synth_db, config(server), synth.SynthOptions(n=2, per_chunk=2, seed=2,
                                                                             duplicate_threshold=0.6))
        assert [r["reason"] for r in loose.rejected] == ["duplicate"]


def test_empty_overlong_and_too_many_are_rejected_with_reasons(synth_db):
    def mutate(request, questions):
        questions[0]["question"] = "   "
        questions[1]["question"] = "why " * 100
        return questions + [dict(questions[0], question="an extra one")]

    with FakeOpenAI(responder=transform(mutate)) as server:
        result = synth.generate(synth_db, config(server), synth.SynthOptions(n=2, per_chunk=2))
    got = sorted((r["reason"], r["detail"]) for r in result.rejected)
    assert got == [("empty", "empty question"), ("overlong", "question has 399 characters (max 300)"),
                   ("too_many", "question 3 of a batch asked for 2")]
    assert result.stored == []
    assert synth_db.execute("SELECT count(*) FROM synth_rejections").fetchone()[0] == 3


def test_multi_hop_seeds_pair_neighbours_and_need_quotes_from_both(synth_db, server):
    server.responder = recording(synth_responder())
    result = synth.generate(synth_db, config(server), synth.SynthOptions(n=4, per_chunk=1, multi_hop=1.0))
    assert all(s.multi_hop for s in result.plan.seeds)
    assert all(len(prompt_chunks(r)) == 2 for r in server.responder.requests)
    assert "need information from both chunks" in server.responder.requests[0]["messages"][1]["content"]
    assert len(result.stored) == 4
    assert all(len(json.loads(r["seed_doc_ids"])) == 2 for r in synthetic_rows(synth_db))

    def one_chunk_only(request, questions):
        for q in questions:
            q["quotes"] = q["quotes"][:1]
        return questions

    with FakeOpenAI(responder=transform(one_chunk_only)) as other:
        single = synth.generate(synth_db, config(other), synth.SynthOptions(n=2, per_chunk=1, multi_hop=1.0, seed=5))
    assert {r["reason"] for r in single.rejected} == {"not_multi_hop"}


# --- seeds -------------------------------------------------------------------------------------

def test_seed_selection_is_seeded_and_puts_covered_chunks_last(synth_db):
    first = [s.key for s in synth.select_seeds(synth_db, 12, seed=1)]
    assert first == [s.key for s in synth.select_seeds(synth_db, 12, seed=1)]
    assert first != [s.key for s in synth.select_seeds(synth_db, 12, seed=2)]
    assert sorted(first) == sorted(f"doc-{t}" for t in TOPICS)
    # label two chunks relevant for a logged query: they go to the end
    pk = synth_db.execute("SELECT pk FROM queries WHERE query_id = 'log-0'").fetchone()[0]
    docs = dict(synth_db.execute("SELECT doc_id, pk FROM documents").fetchall())
    labels.set_grade(synth_db, pk, docs[first[0]], "alice", 3)
    labels.set_grade(synth_db, pk, docs[first[1]], "alice", 1)  # not relevant: still uncovered
    labels.set_status(synth_db, pk, "alice", "submitted")
    after = [s.key for s in synth.select_seeds(synth_db, 12, seed=1)]
    assert after[-1] == first[0] and after[:11] == [k for k in first if k != first[0]]
    assert [s.key for s in synth.select_seeds(synth_db, 12, seed=1, strategy="random")] == first


def test_stratified_seeds_round_robin_over_sources(synth_db):
    seeds = synth.select_seeds(synth_db, 6, seed=4, strategy="stratified")
    source = {r["id"]: r["source"] for r in corpus_records()}
    got = [source[s.key] for s in seeds]
    assert sorted(got[:3]) == sorted(SOURCES) and sorted(got[3:]) == sorted(SOURCES)


def test_short_chunks_are_skipped_and_an_empty_corpus_is_an_error(db, tmp_path):
    with pytest.raises(SynthError, match="corpus is empty"):
        synth.select_seeds(db, 3)
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": "short", "text": "Too short."}) + "\n"
                                      + json.dumps({"id": "long", "text": "A long enough chunk. " * 10}) + "\n")
    ingest_corpus(db, tmp_path / "c.jsonl")
    assert [s.key for s in synth.select_seeds(db, 5)] == ["long"]


def test_options_are_validated():
    for bad in (dict(n=0), dict(per_chunk=50), dict(question_types=("poem",)), dict(strategy="best"),
                dict(multi_hop=2.0), dict(duplicate_threshold=0)):
        with pytest.raises(SynthError, match="option"):
            synth.SynthOptions(**bad)


# --- faults, cancel, resume --------------------------------------------------------------------

def test_faults_end_stored_or_failed_with_reason_and_a_rerun_retries_only_failures(synth_db):
    with FakeOpenAI(responder=synth_responder(), fault_rate=0.6, fault_seed=3, retry_after=0.01,
                    fault_kinds=("429", "500", "invalid_json", "truncated_json", "refusal", "empty"),
                    permanent_fraction=0.6) as server:
        options = synth.SynthOptions(n=24, per_chunk=2)
        result = synth.generate(synth_db, config(server, max_retries=1), options)
        s = result.summary
        assert s.failed, "the fault rate should leave some items failed"
        assert s.done + s.cached + len(s.failed) == s.total == 12
        assert all(reason for _, reason in s.failed)
        assert len(result.stored) + len(result.rejected) == 2 * s.done
        # every stored question is valid: its quote is in its seed chunk
        texts = {r["id"]: r["text"].lower() for r in corpus_records()}
        for row in synthetic_rows(synth_db):
            meta, seeds = json.loads(row["meta"]), json.loads(row["seed_doc_ids"])
            assert all(q.lower() in texts[seeds[0]] for q in meta["quotes"])
        run = synth.runs(synth_db)[0]["summary"]
        assert sorted(f["key"] for f in run["llm"]["failed"]) == sorted(k for k, _ in s.failed)
        server.fault_rate = 0.0
        before = server.total
        rerun = synth.generate(synth_db, config(server), options)
    assert rerun.summary.requests_made == server.total - before == len(s.failed)
    assert rerun.summary.cached == s.done and not rerun.summary.failed
    assert len(synthetic_rows(synth_db)) == 24


def test_cancel_stores_what_finished_and_a_rerun_resumes(synth_db):
    cancel = threading.Event()
    with FakeOpenAI(responder=synth_responder(), latency=0.05) as server:
        options = synth.SynthOptions(n=12, per_chunk=2)

        def progress(p):
            if p.completed >= 2:
                cancel.set()

        result = synth.generate(synth_db, config(server, concurrency=1), options, progress=progress, cancel=cancel)
        assert result.status == "cancelled" and result.summary.cancelled
        done = result.summary.done
        assert len(result.stored) == 2 * done and done < 6
        assert synth.runs(synth_db)[0]["status"] == "cancelled"
        before = server.total
        rest = synth.generate(synth_db, config(server), options)
    assert rest.summary.cached == done and server.total - before == 6 - done
    assert len(synthetic_rows(synth_db)) == 12


def test_a_progress_callback_that_raises_stops_stores_and_reraises(synth_db, server):
    class Stop(Exception):
        pass

    def progress(p):
        if p.completed == 2:
            raise Stop()

    with pytest.raises(Stop):
        synth.generate(synth_db, config(server, concurrency=1), synth.SynthOptions(n=8, per_chunk=2),
                       progress=progress)
    run = synth.runs(synth_db)[0]
    assert run["status"] == "cancelled" and run["summary"]["stored"] == len(synthetic_rows(synth_db)) >= 4


# --- review ------------------------------------------------------------------------------------

@pytest.fixture
def generated(db, tmp_path, server):
    """Only a corpus (no logged questions) and 6 pending synthetic questions: the queue is theirs alone."""
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus_records()))
    ingest_corpus(db, tmp_path / "corpus.jsonl")
    result = synth.generate(db, config(server), synth.SynthOptions(n=6, per_chunk=2))
    return db, result.stored


def test_only_accepted_questions_enter_the_labeling_queue(generated):
    db, pks = generated
    assert labels.next_item(db, "alice") is None  # all pending
    assert labels.queue_counts(db)["pending_review"] == 6
    synth.review(db, pks[0], "reject", reviewer="lead")
    accepted = synth.review(db, pks[1], "accept", reviewer="lead")
    assert accepted.review_state == "accepted" and accepted.decision == "accepted" and accepted.reviewer == "lead"
    assert labels.next_item(db, "alice") == pks[1]
    item = labels.get_item(db, pks[1], "alice")
    seed = json.loads(db.execute("SELECT seed_doc_ids FROM queries WHERE pk = ?", [pks[1]]).fetchone()[0])[0]
    assert len(item.chunks) > 1 and seed in {c.doc_id for c in item.chunks}
    with pytest.raises(LabelError, match="not in the labeling queue"):
        labels.set_grade(db, pks[0], item.chunks[0].doc_pk, "bob", 2)
    assert labels.next_item(db, "bob") is None  # alice holds the only accepted one (overlap 1)
    assert synth.review_counts(db) == {"pending": 4, "accepted": 1, "rejected": 1}
    assert [q.query_pk for q in synth.list_questions(db)] == pks[2:]
    assert synth.is_reviewed("accepted") and synth.is_reviewed("rejected") and not synth.is_reviewed("pending")
    assert synth.counts_as_golden("log", None) and not synth.counts_as_golden("synthetic", "pending")


def test_edit_changes_question_and_answer_accepts_and_keeps_history(generated):
    db, pks = generated
    before = synth.get_question(db, pks[2])
    q = synth.review(db, pks[2], "edit", reviewer="lead", question="  how do i  change webhook options ",
                     answer="Under Settings, Webhooks.")
    assert (q.question, q.expected_answer, q.review_state, q.decision) == (
        "how do i change webhook options", "Under Settings, Webhooks.", "accepted", "edited")
    norm = db.execute("SELECT norm_question FROM queries WHERE pk = ?", [pks[2]]).fetchone()[0]
    assert norm == "how do i change webhook options"
    events = db.execute("SELECT annotator, field, old, new FROM label_events WHERE query_pk = ? ORDER BY id",
                        [pks[2]]).fetchall()
    assert events == [("lead", "question", before.question, "how do i change webhook options"),
                      ("lead", "synth_expected_answer", before.expected_answer, "Under Settings, Webhooks."),
                      ("lead", "review_state", "pending", "accepted")]
    assert synth.review(db, pks[2], "accept", reviewer="lead").decision == "edited"
    reset = synth.review(db, pks[2], "reset", reviewer="lead")
    assert (reset.review_state, reset.decision) == ("pending", None)
    # once labeled, the wording is fixed
    synth.review(db, pks[2], "accept", reviewer="lead")
    assert labels.next_item(db, "alice") == pks[2]
    labels.set_grade(db, pks[2], labels.get_item(db, pks[2], "alice").chunks[0].doc_pk, "alice", 3)
    with pytest.raises(SynthError, match="already has relevance labels"):
        synth.review(db, pks[2], "edit", reviewer="lead", question="another wording")
    synth.review(db, pks[2], "edit", reviewer="lead", answer="A better answer.")  # the answer may change


def test_review_errors_are_clear(generated):
    db, pks = generated
    for bad, match in ((dict(decision="maybe"), "unknown"), (dict(decision="edit"), "needs a new question"),
                       (dict(decision="edit", question="  "), "empty")):
        with pytest.raises(SynthError, match=match):
            synth.review(db, pks[0], reviewer="lead", **bad)
    with pytest.raises(SynthError, match="reviewer"):
        synth.review(db, pks[0], "accept", reviewer=" ")
    with pytest.raises(SynthError, match="not a synthetic question"):
        synth.review(db, 10_000, "accept", reviewer="lead")
    with pytest.raises(SynthError, match="review state"):
        synth.list_questions(db, state="maybe")


def test_acceptance_rate_per_generator_setting(generated, server):
    db, pks = generated
    synth.review(db, pks[0], "accept", reviewer="lead")
    synth.review(db, pks[1], "edit", reviewer="lead", answer="Better.")
    synth.review(db, pks[2], "reject", reviewer="lead")
    synth.review(db, pks[3], "accept", reviewer="lead")
    other = synth.generate(db, config(server), synth.SynthOptions(n=2, per_chunk=1, seed=8, question_types=("how-to",)))
    synth.review(db, other.stored[0], "reject", reviewer="lead")
    rates = {r["setting"]: r for r in synth.acceptance_rates(db)}
    assert len(rates) == 2
    first = next(r for r in rates.values() if r["options"]["per_chunk"] == 2)
    assert (first["generated"], first["accepted"], first["edited"], first["rejected"], first["pending"]) == (6, 2, 1, 1, 2)
    assert first["acceptance_rate"] == pytest.approx(3 / 4) and first["edit_rate"] == pytest.approx(1 / 4)
    second = rates[other.plan.setting]
    assert (second["generated"], second["rejected"], second["acceptance_rate"]) == (2, 1, 0.0)
    assert second["options"]["question_types"] == ["how-to"] and second["model"] == "fake-model"


# --- the distribution shift report --------------------------------------------------------------

@pytest.fixture(scope="module")
def cisi_db(tmp_path_factory):
    """CISI queries ingested as logs, CISI abstracts as the corpus, and 80 questions generated from
    the abstracts by the test server in a terse keyword style nothing like the logged ones."""
    cisi.require_cisi()
    tmp = tmp_path_factory.mktemp("cisi")
    database = connect(tmp / "cisi.db")
    ingest_logs(database, cisi.write_logs(tmp / "logs.jsonl"))
    ingest_corpus(database, cisi.write_corpus(tmp / "corpus.jsonl"))
    with FakeOpenAI(responder=synth_responder("terse")) as server:
        result = synth.generate(database, config(server, concurrency=8), synth.SynthOptions(n=80, per_chunk=2))
    assert len(result.stored) >= 70
    return database


def test_shift_report_tells_terse_synthetic_questions_from_cisi_queries(cisi_db):
    report = synth.shift_report(cisi_db, seed=0)
    c = report["classifier"]
    assert report["n"]["log"] == len(cisi.queries()) == 112 and report["n"]["synthetic"] >= 70
    assert c["auc"] > 0.9 and c["ci_low"] <= c["auc"] <= c["ci_high"] and c["ci_low"] > 0.8
    assert c["n_splits"] == 5 and c["seed"] == 0
    assert report == synth.shift_report(cisi_db, seed=0)  # seeded: the same report again
    w = report["wording"]
    assert w["log"]["words_mean"] > 3 * w["synthetic"]["words_mean"]
    assert w["synthetic"]["ends_with_question_mark"] == 0 and w["log"]["ends_with_question_mark"] > 0
    assert 0 < w["synthetic_words_seen_in_logs"] <= 1
    log_terms = {t["term"] for t in report["terms"]["log"]}
    assert {"the", "?"} & log_terms  # function words and "?" give the logged questions away
    assert all(t["weight"] > 0 for t in report["terms"]["synthetic"])


def test_two_sample_auc_of_one_distribution_split_in_half_is_near_half():
    cisi.require_cisi()
    questions = list(cisi.queries().values())
    result = synth.two_sample_auc(questions[::2], questions[1::2], seed=1)
    assert result["ci_low"] < 0.5 < result["ci_high"] and abs(result["auc"] - 0.5) < 0.1
    tiny = synth.two_sample_auc(["a question"], ["b", "c"])
    assert tiny["auc"] is None and "at least 2" in tiny["note"]


def test_shift_report_retrieval_metrics_by_origin_side_by_side(cisi_db):
    db = cisi_db
    log_pks = [r[0] for r in db.execute("SELECT pk FROM queries WHERE origin = 'log' ORDER BY pk LIMIT 3")]
    synthetic = synth.list_questions(db, limit=3)
    for q in synthetic:
        synth.review(db, q.query_pk, "accept", reviewer="carol")
    for pk in log_pks + [q.query_pk for q in synthetic]:
        item = labels.get_item(db, pk, "carol")
        labels.set_grade(db, pk, item.chunks[0].doc_pk, "carol", 3)
        for c in item.chunks[1:]:
            labels.set_grade(db, pk, c.doc_pk, "carol", 0)
        labels.set_status(db, pk, "carol", "submitted")
    r = synth.shift_report(db)["retrieval"]
    assert r["retriever"] == "production" and r["log"]["queries"] == 3 and r["synthetic"]["queries"] == 3
    for origin in ("log", "synthetic"):
        assert r[origin]["metrics"]["mrr"] == {"mean": 1.0, "ci_low": 1.0, "ci_high": 1.0, "n": 3}
        assert set(r[origin]["metrics"]) == {"recall@10", "mrr", "ndcg@10"}


def test_a_synth_run_whose_process_died_shows_interrupted(tmp_path):
    import subprocess
    import sys

    db = connect(tmp_path / "s.db")
    gone = subprocess.run([sys.executable, "-c", "from labeler import owners; print(owners.current())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # a process that has exited
    from labeler import owners

    for owner in (gone, owners.current()):
        db.execute("INSERT INTO synth_runs (setting, generator, status, created_at, owner) "
                   "VALUES ('s', '{}', 'running', '2026-01-01', ?)", [owner])
    assert [r["status"] for r in synth.runs(db)] == ["running", "interrupted"]  # newest first
