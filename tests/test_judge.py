"""labeler.judge end to end against the fake OpenAI server: perfect, +1-biased and random judges,
the gate, suggestions, faithfulness claims, caching/resume through labeler.llm, rubrics, the CLI."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest
from click.testing import CliRunner

import labeler.labels as labels
from labeler import agreement, judge, llm
from labeler import db as store
from labeler.accounts.settings import set_setting
from labeler.cli import cli
from labeler.errors import GateError, JudgeError
from tests.conftest import tiny_records
from tests.fake_openai import FakeOpenAI, grade_responder, prompt_blocks

KEY = "sk-test-judge"


def make_config(server: FakeOpenAI, **overrides) -> llm.LLMConfig:
    values = dict(base_url=server.url, api_key=KEY, model="fake-model", timeout_s=5, max_retries=1,
                  backoff_base_s=0.001, backoff_max_s=0.01, concurrency=4)
    values.update(overrides)
    return llm.LLMConfig(**values)


def human_grade(i: int, j: int) -> int:
    return (i + j) % 4


def build(db, ingest_tiny, *, n: int = 60, chunks: int = 3, overlap: int = 30, bob_noise: bool = False,
          records: list[dict] | None = None, submit: int | None = None,
          grade: Callable[[int, int], int] = human_grade) -> tuple[list[int], dict[tuple[str, str], int]]:
    """``n`` queries x ``chunks``; alice grades and submits the first ``submit`` (default all),
    bob the first ``overlap`` (the same grades, or off by one on every 5th pair with ``bob_noise``).
    Returns the query pks and {(question, chunk text): alice's grade} for a perfect judge."""
    set_setting(db, "overlap_fraction", 1.0)
    pks = ingest_tiny(db, n, chunks, records=records)
    truth: dict[tuple[str, str], int] = {}
    for i, pk in enumerate(pks[: n if submit is None else submit]):
        item = labels.get_item(db, pk, "alice")
        # j is the chunk's rank in the logged ranking (tiny ids end in -c{rank}): with two retrievers
        # the item shows their pool, interleaved, so the display position is not the rank
        for j, c in sorted((int(c.doc_id.rsplit("-c", 1)[1]), c) for c in item.chunks):
            labels.set_grade(db, pk, c.doc_pk, "alice", grade(i, j))
            truth[(item.question, c.text)] = grade(i, j)
            if i < overlap:
                g = grade(i, j)
                if bob_noise and (i * chunks + j) % 5 == 0:
                    g = (g + 1) % 4
                labels.set_grade(db, pk, c.doc_pk, "bob", g)
        labels.set_status(db, pk, "alice", "submitted")
        if i < overlap:
            labels.set_status(db, pk, "bob", "submitted")
    return pks, truth


def perfect(truth: dict[tuple[str, str], int], shift: int = 0) -> Callable:
    return grade_responder(lambda q, c: truth.get((q, c)), shift=shift)


@pytest.fixture
def server():
    with FakeOpenAI() as s:
        yield s


# --- registry and rubrics -----------------------------------------------------------------------------

def test_unknown_judge_lists_the_known_ones():
    with pytest.raises(JudgeError) as e:
        judge.get_judge("relevance.v9")
    assert "answer-relevance.v1, faithfulness.v1, relevance.v1" in str(e.value)


def test_register_a_judge_like_the_built_ins():
    base = judge.get_judge("relevance.v1")
    custom = judge.register_judge(judge.Judge("strict-relevance.v1", "relevance", "pair", "Only exact answers count.",
                                              base.schema, base.messages, base.parse))
    try:
        assert judge.get_judge("strict-relevance.v1") is custom
        with pytest.raises(JudgeError, match="already registered"):
            judge.register_judge(custom)
        with pytest.raises(JudgeError, match="version"):
            judge.register_judge(judge.Judge("Relevance", "relevance", "pair", "x", base.schema, base.messages,
                                             base.parse))
    finally:
        judge.JUDGES.pop("strict-relevance.v1")


def test_rubric_edits_are_new_versions_named_and_hashed(db):
    first = judge.get_rubric(db, "relevance.v1")
    assert (first.name, first.text) == ("relevance.v1/r1", judge.RELEVANCE_RUBRIC_V1)
    edited = judge.save_rubric(db, "relevance.v1", "Grade strictly.\nA partial answer is grade 1.", author="lead")
    assert edited.name == "relevance.v1/r2" and len(edited.hash) == 12 and edited.hash != first.hash
    assert judge.save_rubric(db, "relevance.v1", "Grade strictly.\nA partial answer is grade 1.\n").version == 2
    assert judge.save_rubric(db, "relevance.v1", judge.RELEVANCE_RUBRIC_V1).version == 1
    assert judge.get_rubric(db, "relevance.v1").version == 2
    assert judge.get_rubric(db, "relevance.v1", "relevance.v1/r1").text == first.text
    assert [r.name for r in judge.rubrics(db, "relevance.v1")] == ["relevance.v1/r1", "relevance.v1/r2"]
    with pytest.raises(JudgeError, match="versions: relevance.v1/r1, relevance.v1/r2"):
        judge.get_rubric(db, "relevance.v1", 7)
    with pytest.raises(JudgeError, match="empty"):
        judge.save_rubric(db, "relevance.v1", "  ")


def test_prompt_carries_the_scale_the_rubric_and_the_plain_texts(db, ingest_tiny):
    build(db, ingest_tiny, n=2, overlap=0)
    set_setting(db, "grade_help", ["no", "meh", "good", "best"])
    items = judge.select_items(db, "relevance.v1")
    j = judge.get_judge("relevance.v1")
    messages = j.messages(items[0], "MY RUBRIC", store.get_settings(db))
    assert "MY RUBRIC" in messages[0]["content"] and "3 = highly relevant: best" in messages[0]["content"]
    assert prompt_blocks({"messages": messages}) == {"Question": "What is item q0?", "Chunk": "chunk 0 about q0"}
    schema = llm.json_schema_for(j.schema(store.get_settings(db)))
    assert schema["properties"]["relevance_grade"]["enum"] == [0, 1, 2, 3]
    assert list(schema["properties"]) == ["rationale", "relevance_grade"]  # the reasoning comes first
    claim = llm.json_schema_for(judge.FaithfulnessJudgment)["$defs"]["Claim"]["properties"]
    assert list(claim) == ["claim", "evidence_chunk", "supported"]


# --- perfect, biased, random judges -----------------------------------------------------------------------

def test_perfect_judge_agrees_fully_and_passes_the_gate(db, ingest_tiny, server):
    _, truth = build(db, ingest_tiny)
    server.responder = perfect(truth)
    run = judge.run_judge(db, make_config(server), "relevance.v1", on="labeled")
    assert (run.status, run.items, run.done, run.failed) == ("done", 180, 180, 0)
    assert (run.model, run.temperature, run.rubric, run.on_set) == ("fake-model", 0, "relevance.v1/r1", "labeled")
    stored = db.execute("SELECT rubric_text, rubric_hash FROM judge_runs WHERE id = ?", [run.id]).fetchone()
    assert stored == (judge.RELEVANCE_RUBRIC_V1, judge.get_rubric(db, "relevance.v1").hash)
    label = db.execute("SELECT grade, rationale, call_hash FROM judge_labels WHERE run_id = ? LIMIT 1", [run.id]).fetchone()
    assert label[1].startswith("grade ") and json.loads(db.execute(
        "SELECT response FROM llm_calls WHERE hash = ?", [label[2]]).fetchone()[0])["choices"]

    a = agreement.run_agreement(db, run.id)
    for name in ("exact_agreement", "cohen_kappa", "kappa_quadratic", "kappa_collapsed", "krippendorff_alpha"):
        assert (a.statistics[name].value, a.statistics[name].n) == (pytest.approx(1), 180), name
    assert a.statistics["bias"].value == 0
    assert a.human_human["cohen_kappa"].value == pytest.approx(1) and a.human_human["cohen_kappa"].n == 90
    assert a.retrievers["kendall_tau"]["recall@10"].value is None  # only one retriever logged
    result = judge.gate(db, run.id)
    assert result.passed, result.reasons
    assert "meets the bar" in result.reasons[0]


def test_judge_biased_by_one_grade_is_detected_and_fails_the_gate(db, ingest_tiny, server):
    _, truth = build(db, ingest_tiny)
    server.responder = perfect(truth, shift=1)
    run = judge.run_judge(db, make_config(server), "relevance.v1")
    a = agreement.run_agreement(db, run.id)
    bias = a.statistics["bias"]
    assert bias.value == pytest.approx(135 / 180)  # +1 on every pair except the grade-3 ones
    assert bias.ci_low > 0.5 and a.statistics["under_grading"].value == 0
    assert a.statistics["over_grading"].value == pytest.approx(0.75)
    assert a.statistics["precision"].value < 0.8 and a.statistics["recall"].value == 1
    result = judge.gate(db, run.id)
    assert not result.passed
    assert "misses the bar" in result.reasons[0] and "stays below the human-human kappa" in result.reasons[1]


def test_random_judge_has_kappa_near_zero(db, ingest_tiny, server):
    build(db, ingest_tiny)  # the default responder picks grades from a hash of the prompt
    run = judge.run_judge(db, make_config(server), "relevance.v1")
    a = agreement.run_agreement(db, run.id)
    assert abs(a.statistics["cohen_kappa"].value) < 0.15
    assert a.statistics["cohen_kappa"].ci_low < 0 < a.statistics["cohen_kappa"].ci_high
    assert not judge.gate(db, run.id).passed


def test_gate_settings_and_the_human_ceiling_clause(db, ingest_tiny, server):
    _, truth = build(db, ingest_tiny, bob_noise=True)
    server.responder = perfect(truth, shift=1)
    run = judge.run_judge(db, make_config(server), "relevance.v1")
    assert not judge.gate(db, run.id).passed
    judge.set_gate_settings(db, min_value=0.3, min_ci_low=0.2)
    assert judge.gate(db, run.id).passed
    judge.set_gate_settings(db, min_value=0.6, min_ci_low=0.45, min_pairs=500)
    result = judge.gate(db, run.id)
    assert not result.passed and "only 180 pairs" in result.reasons[0]
    with pytest.raises(JudgeError, match="unknown gate setting"):
        judge.set_gate_settings(db, kappa=1)
    with pytest.raises(JudgeError, match="-1 to 1"):
        judge.set_gate_settings(db, min_value=5)


# --- runs through labeler.llm: cache, resume, failures, dry run -------------------------------------------

def test_dry_run_estimates_and_sends_nothing(db, ingest_tiny, server):
    build(db, ingest_tiny, n=10)
    run = judge.run_judge(db, make_config(server), "relevance.v1", dry_run=True, limit=12)
    assert run.id is None and run.items == 12 and run.estimate.to_request == 12 and run.estimate.input_tokens > 0
    assert server.total == 0 and judge.list_runs(db) == []


def test_rerun_is_free_and_a_cancelled_run_resumes_without_paying_twice(db, ingest_tiny, server):
    _, truth = build(db, ingest_tiny, n=20, overlap=0)
    server.responder = perfect(truth)
    config = make_config(server, concurrency=1)
    cancel = threading.Event()
    seen = []

    def progress(p: llm.Progress) -> None:
        seen.append(p.status)
        if len(seen) == 10:
            cancel.set()

    run = judge.run_judge(db, config, "relevance.v1", progress=progress, cancel=cancel)
    assert run.status == "cancelled" and run.done == 10 and run.cancelled == 50
    assert server.total == 10
    done = judge.resume_run(db, config, run.id)
    assert (done.status, done.done, done.cancelled, done.failed) == ("done", 60, 0, 0)
    assert server.total == 60  # nothing paid twice
    again = judge.run_judge(db, config, "relevance.v1")
    assert (again.cached, again.done, server.total) == (60, 0, 60)
    assert agreement.run_agreement(db, again.id).statistics["cohen_kappa"].value == pytest.approx(1)


def test_a_progress_callback_that_raises_cancels_stores_and_reraises(db, ingest_tiny, server):
    _, truth = build(db, ingest_tiny, n=10, overlap=0)
    server.responder = perfect(truth)

    class Rerun(Exception):
        pass

    def progress(p: llm.Progress) -> None:
        if p.completed == 3:
            raise Rerun

    with pytest.raises(Rerun):
        judge.run_judge(db, make_config(server, concurrency=1), "relevance.v1", progress=progress)
    run = judge.list_runs(db)[0]
    assert run.status == "cancelled" and run.done >= 3 and run.cancelled > 0


def test_failures_keep_their_reason_and_chunks_without_text_are_not_sent(db, ingest_tiny, server):
    records = tiny_records(6, 2)
    records[0]["retrieved"][0]["text"] = None
    records[1]["question"] += " [[fault:500]]"
    _, truth = build(db, ingest_tiny, n=6, chunks=2, overlap=0, records=records)
    server.responder = perfect(truth)
    run = judge.run_judge(db, make_config(server), "relevance.v1")
    assert (run.status, run.done, run.failed) == ("done", 9, 3)
    reasons = dict(run.failures)
    assert any("no text" in r for r in reasons.values())
    assert sum("HTTP 500" in r for r in reasons.values()) == 2
    rows = db.execute("SELECT status, error FROM judge_labels WHERE run_id = ? AND status = 'failed'", [run.id]).fetchall()
    assert len(rows) == 3 and all(e for _, e in rows)
    assert agreement.run_agreement(db, run.id).excluded["failed"] == 3


def test_a_rejected_key_marks_the_run_failed(db, ingest_tiny):
    build(db, ingest_tiny, n=3, overlap=0)
    with FakeOpenAI(api_key="the-right-key") as s:
        with pytest.raises(llm.LLMError, match="refused the API key"):
            judge.run_judge(db, make_config(s), "relevance.v1")
    run = judge.list_runs(db)[0]
    assert run.status == "failed" and "API key" in run.error


def test_limit_is_a_seeded_sample(db, ingest_tiny, server):
    build(db, ingest_tiny, n=20, overlap=0)
    a = [i.key for i in judge.select_items(db, "relevance.v1", limit=7, seed=1)]
    b = [i.key for i in judge.select_items(db, "relevance.v1", limit=7, seed=1)]
    c = [i.key for i in judge.select_items(db, "relevance.v1", limit=7, seed=2)]
    assert a == b != c and len(a) == 7 and a == sorted(a, key=lambda k: tuple(map(int, k.split(":"))))
    with pytest.raises(JudgeError, match="labeled"):
        judge.select_items(db, "relevance.v1", on="everything")



def test_two_retrievers_ranked_alike_by_judge_and_humans(db, ingest_tiny, server):
    records = tiny_records(40, 3)
    swapped = [dict(r, retriever="bm25", retrieved=list(reversed(r["retrieved"]))) for r in records]
    _, truth = build(db, ingest_tiny, n=40, records=records + swapped, submit=40, overlap=0,
                     grade=lambda i, j: 3 if j == 0 else (i + j) % 2)  # production's top chunk is the answer
    assert db.execute("SELECT count(DISTINCT retriever) FROM retrievals").fetchone()[0] == 2
    server.responder = perfect(truth)
    run = judge.run_judge(db, make_config(server), "relevance.v1")
    section = agreement.run_agreement(db, run.id, k=1, n_resamples=200).retrievers
    assert section["retrievers"] == ["bm25", "production"]
    for r in section["retrievers"]:
        by = section["metrics"][r]["recall@1"]
        assert by["human"].value == pytest.approx(by["judge"].value) and by["human"].n == by["judge"].n
    assert section["kendall_tau"]["recall@1"].value == pytest.approx(1)
    assert section["kendall_tau"]["ndcg@1"].value == pytest.approx(1)

# --- the gate in front of pre-labeling, and suggestions ------------------------------------------------------

def test_only_a_passing_run_pre_labels_and_suggestions_need_a_human(db, ingest_tiny, server):
    pks, truth = build(db, ingest_tiny, n=60, overlap=30)
    extra = ingest_tiny(db, 3, 2, prefix="u")  # unlabeled queries
    config = make_config(server)
    with pytest.raises(GateError, match="run it on labeled items first"):
        judge.run_judge(db, config, "relevance.v1", on="unlabeled")
    server.responder = perfect(truth, shift=1)
    biased = judge.run_judge(db, config, "relevance.v1")
    with pytest.raises(GateError, match=f"run {biased.id}: kappa at the threshold"):
        judge.run_judge(db, config, "relevance.v1", on="unlabeled")
    assert db.execute("SELECT count(*) FROM suggestions").fetchone()[0] == 0

    server.responder = grade_responder(lambda q, c: truth.get((q, c), 2 if c.startswith("chunk 0") else 0))
    # another token limit is another cache key (a fresh run, not the cached biased answers), and the
    # gate only matches rubric, model and temperature
    good = judge.run_judge(db, make_config(server, max_tokens=999), "relevance.v1")
    assert judge.gate(db, good.id).passed
    with pytest.raises(GateError, match="model"):
        judge.run_judge(db, make_config(server, model="other-model"), "relevance.v1", on="unlabeled")
    pre = judge.run_judge(db, config, "relevance.v1", on="unlabeled")
    assert (pre.calibration_run, pre.items, pre.done) == (good.id, 6, 6)

    suggestions = judge.suggestions_for(db, extra[0])
    assert sorted(s.grade for s in suggestions.values()) == [0, 2]
    s = next(s for s in suggestions.values() if s.grade == 2)
    assert s.judge == "relevance.v1" and s.run_id == pre.id and s.rationale
    assert db.execute("SELECT count(*) FROM relevance_labels WHERE query_pk = ?", [extra[0]]).fetchone()[0] == 0

    assert judge.accept_suggestion(db, extra[0], s.doc_pk, "carol") == 2
    row = db.execute("SELECT grade, origin FROM relevance_labels WHERE query_pk = ? AND doc_pk = ? AND annotator = ?",
                     [extra[0], s.doc_pk, "carol"]).fetchone()
    assert row == (2, "suggestion")
    assert db.execute("SELECT field FROM label_events WHERE query_pk = ? AND annotator = 'carol' ORDER BY id",
                      [extra[0]]).fetchall() == [("grade",), ("origin",)]
    golden = labels.golden_labels(db)
    assert extra[0] not in set(golden["query_pk"])  # not golden until a human submits the item
    labels.set_status(db, extra[0], "carol", "submitted")
    assert extra[0] in set(labels.golden_labels(db)["query_pk"])
    with pytest.raises(JudgeError, match="no judge suggestion"):
        judge.accept_suggestion(db, pks[0], 999, "carol")


def test_accepting_a_grade_the_human_already_gave_keeps_it_human(db, ingest_tiny, server):
    _, truth = build(db, ingest_tiny, n=60, overlap=30)
    extra = ingest_tiny(db, 1, 1, prefix="u")
    server.responder = grade_responder(lambda q, c: truth.get((q, c), 1))
    calib = judge.run_judge(db, make_config(server), "relevance.v1")
    assert judge.gate(db, calib.id).passed
    judge.run_judge(db, make_config(server), "relevance.v1", on="unlabeled")
    (doc_pk, s), = judge.suggestions_for(db, extra[0]).items()
    labels.set_grade(db, extra[0], doc_pk, "dan", 1)
    judge.accept_suggestion(db, extra[0], doc_pk, "dan")
    assert db.execute("SELECT origin FROM relevance_labels WHERE query_pk = ? AND annotator = 'dan'",
                      [extra[0]]).fetchone() == ("human",)


# --- faithfulness and answer relevance ---------------------------------------------------------------------

def test_faithfulness_claim_scoring():
    v = judge.faithfulness_verdict([{"claim": "a", "supported": True, "evidence_chunk": 1},
                                    {"claim": "b", "supported": False, "evidence_chunk": None},
                                    {"claim": "c", "supported": True, "evidence_chunk": 2}], "two of three")
    assert (v.score, v.grade, v.label) == (pytest.approx(2 / 3), 1, "partly")
    assert [c["claim"] for c in v.detail] == ["a", "b", "c"]
    assert judge.faithfulness_verdict([{"claim": "a", "supported": True}]).label == "yes"
    assert judge.faithfulness_verdict([{"claim": "a", "supported": False}] * 3).label == "no"
    assert judge.faithfulness_verdict([{"claim": "a", "supported": True}, {"claim": "b", "supported": False}]).label == "partly"
    empty = judge.faithfulness_verdict([], "no claims")
    assert empty.grade is None and empty.score is None


def answers(db, ingest_tiny, n: int = 30) -> list[int]:
    """n queries with answers; alice judges them: yes for i % 3 == 0, partly for 1, no for 2."""
    set_setting(db, "overlap_fraction", 1.0)
    pks = ingest_tiny(db, n, 2)
    for i, pk in enumerate(pks):
        for c in labels.get_item(db, pk, "alice").chunks:
            labels.set_grade(db, pk, c.doc_pk, "alice", 1)
        verdict = judge.VERDICTS[2 - i % 3]
        labels.set_query_fields(db, pk, "alice", answer_faithful=verdict, answer_relevant=verdict)
        labels.set_status(db, pk, "alice", "submitted")
    return pks


def claims_responder(request: dict) -> dict:
    """Supports 2 of 2 claims for item i % 3 == 0, 1 of 2 for 1, 0 of 3 for 2 (i from the question)."""
    blocks = prompt_blocks(request)
    i = int(blocks["Question"].split("q")[-1].rstrip("?"))
    assert "[1] chunk 0 about q" in blocks["Chunks"] and blocks["Answer"].startswith("Item q")
    supported = [[True, True], [True, False], [False, False, False]][i % 3]
    return {"claims": [{"claim": f"claim {k}", "supported": s, "evidence_chunk": 1 if s else None}
                       for k, s in enumerate(supported)], "rationale": f"{sum(supported)} supported"}


def test_faithfulness_run_scores_claims_and_agrees_with_the_annotators(db, ingest_tiny, server):
    answers(db, ingest_tiny)
    server.responder = claims_responder
    run = judge.run_judge(db, make_config(server), "faithfulness.v1")
    assert (run.kind, run.items, run.done) == ("faithfulness", 30, 30)
    score, label, detail = db.execute("SELECT score, label, detail FROM judge_labels WHERE run_id = ? "
                                      "ORDER BY query_pk LIMIT 1 OFFSET 1", [run.id]).fetchone()
    assert (score, label) == (0.5, "partly") and len(json.loads(detail)) == 2
    a = agreement.run_agreement(db, run.id)
    assert a.statistics["exact_agreement"].value == 1 and a.statistics["cohen_kappa"].value == pytest.approx(1)
    assert a.statistics["roc_auc"].value == 1 and a.levels == ["no", "partly", "yes"]
    assert a.retrievers is None
    assert json.loads(json.dumps(a.to_dict()))["roc_auc"]["n"] == 30


def test_answer_relevance_run(db, ingest_tiny, server):
    answers(db, ingest_tiny, n=12)
    server.responder = lambda request: {"rationale": "addresses it", "verdict": "yes"}
    run = judge.run_judge(db, make_config(server), "answer-relevance.v1")
    a = agreement.run_agreement(db, run.id)
    assert a.statistics["exact_agreement"].value == pytest.approx(1 / 3)
    assert a.statistics["cohen_kappa"].value == pytest.approx(0)
    assert a.statistics["bias"].value == pytest.approx(1)  # yes (2) vs 2, 1, 0


# --- browsing, tagging, comparing, drift, stability ----------------------------------------------------------

def test_disagreements_tags_comparison_and_drift(db, ingest_tiny, server):
    _, truth = build(db, ingest_tiny)
    server.responder = perfect(truth)
    a = judge.run_judge(db, make_config(server), "relevance.v1")
    judge.save_rubric(db, "relevance.v1", "A stricter rubric.")
    server.responder = perfect(truth, shift=1)
    b = judge.run_judge(db, make_config(server), "relevance.v1")
    assert b.rubric == "relevance.v1/r2"

    total, page = judge.disagreements(db, b.id, human=1, judge=2, limit=5)
    assert total == 45 and len(page) == 5
    d = page[0]
    assert (d.human, d.judge, d.human_grades["alice"]) == (1, 2, 1) and d.text.startswith("chunk")
    assert d.question.startswith("What is item") and d.rationale.startswith("grade 2")
    assert judge.disagreements(db, b.id)[0] == 135  # every differing pair
    judge.tag_item(db, b.id, d.query_pk, d.doc_pk, "rubric_ambiguous", "alice", note="1 vs 2 unclear")
    assert judge.tag_counts(db, b.id) == {"judge_wrong": 0, "human_wrong": 0, "rubric_ambiguous": 1}
    assert judge.disagreements(db, b.id, human=1, judge=2, limit=1)[1][0].tag == "rubric_ambiguous"
    judge.tag_item(db, b.id, d.query_pk, d.doc_pk, None, "alice")
    assert judge.tag_counts(db, b.id)["rubric_ambiguous"] == 0
    with pytest.raises(JudgeError, match="unknown"):
        judge.tag_item(db, b.id, d.query_pk, d.doc_pk, "wrong", "alice")

    c = agreement.compare_runs(db, a.id, b.id, n_resamples=200)
    assert c.common == 180
    assert c.difference["cohen_kappa"].value < 0 and c.difference["cohen_kappa"].ci_high < 0
    assert c.difference["bias"].value == pytest.approx(0.75)
    assert c.between["exact_agreement"].value == pytest.approx(0.25)

    trend = agreement.drift(db)
    assert [t["run_id"] for t in trend] == [a.id, b.id]
    assert trend[0]["kappa_vs_humans"] == pytest.approx(1) and trend[0]["previous_run"] is None
    assert trend[1]["agreement_vs_previous"] == pytest.approx(0.25) and trend[1]["n_vs_previous"] == 180


def test_stability_reruns_bypass_the_cache(db, ingest_tiny, server):
    _, truth = build(db, ingest_tiny, n=10, overlap=0)
    server.responder = perfect(truth)
    run = judge.run_judge(db, make_config(server), "relevance.v1")
    before = server.total
    steady = judge.stability(db, make_config(server), run.id, k=3, sample=8)
    assert (steady.n, steady.identical, steady.same_as_run) == (8, 1.0, 1.0)
    assert server.total == before + 24  # every rerun was sent: the seed nonce changes the request

    def jittery(request: dict) -> dict:
        grade = truth[(prompt_blocks(request)["Question"], prompt_blocks(request)["Chunk"])]
        return {"rationale": "r", "relevance_grade": (grade + request["seed"]) % 4 if request["seed"] % 2 else grade}

    server.responder = jittery
    shaky = judge.stability(db, make_config(server), run.id, k=2, sample=8, seed=5)
    assert shaky.identical == 0 and shaky.same_as_run == 0
    assert all(len(item["reruns"]) == 2 for item in shaky.items)


# --- the CLI --------------------------------------------------------------------------------------------------

@pytest.fixture
def cli_db(tmp_path, ingest_tiny, server, monkeypatch):
    path = tmp_path / "cli.db"
    database = store.connect(path)
    _, truth = build(database, ingest_tiny)
    database.close()
    server.responder = perfect(truth)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("LABELER_MODEL", "fake-model")
    return path


def invoke(path, *args: str):
    return CliRunner().invoke(cli, ["--db", str(path), "judge", *args], catch_exceptions=False)


def test_cli_run_agreement_compare_list(cli_db, server):
    r = invoke(cli_db, "run", "--judge", "relevance.v1", "--on", "labeled", "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["estimate"]["to_request"] == 180 and server.total == 0
    r = invoke(cli_db, "run", "--judge", "relevance.v1", "--on", "labeled", "--limit", "160")
    assert r.exit_code == 0, r.output
    assert "run 1" in r.output and "160 labeled items: 160 done" in r.output
    r = invoke(cli_db, "run", "--judge", "relevance.v1", "--model", "fake-model-2", "--json")
    second = json.loads(r.output)
    assert (second["id"], second["model"], second["done"]) == (2, "fake-model-2", 180)

    r = invoke(cli_db, "agreement", "1", "--json")
    data = json.loads(r.output)
    assert set(agreement.STATISTICS) <= set(data)
    for name in agreement.STATISTICS:
        assert {"value", "ci_low", "ci_high", "n"} <= set(data[name]), name
    assert data["cohen_kappa"]["value"] == pytest.approx(1) and data["cohen_kappa"]["n"] == 160
    assert data["gate"]["passed"] is True and data["human_human"]["cohen_kappa"]["n"] == 90
    text = invoke(cli_db, "agreement", "1").output
    assert "Cohen's kappa" in text and "kappa, relevant vs not" in text and "human-human" in text
    assert "cohen_kappa" not in text and "gate: passed" in text  # raw keys only in JSON

    r = invoke(cli_db, "compare", "1", "2", "--json")
    cmp = json.loads(r.output)
    assert cmp["common_pairs"] == 160 and cmp["difference"]["cohen_kappa"]["value"] == pytest.approx(0)
    assert "run 1" in invoke(cli_db, "compare", "1", "2").output

    listed = json.loads(invoke(cli_db, "list", "--json").output)
    assert [r["id"] for r in listed] == [2, 1]
    assert "relevance.v1/r1" in invoke(cli_db, "list").output


def test_cli_user_errors_are_one_line(cli_db):
    r = CliRunner().invoke(cli, ["--db", str(cli_db), "judge", "agreement", "42"])
    assert r.exit_code == 1 and r.output.strip() == \
        "Error: judge run 42 does not exist; `labeler judge list` shows the runs"
    r = CliRunner().invoke(cli, ["--db", str(cli_db), "judge", "run", "--judge", "nope.v1"])
    assert r.exit_code == 1 and "known judges: answer-relevance.v1" in r.output
    r = CliRunner().invoke(cli, ["--db", str(cli_db), "judge", "run", "--on", "unlabeled"])
    assert r.exit_code == 1 and r.output == "Error: no unlabeled items for relevance.v1: everything is labeled\n"
    r = CliRunner().invoke(cli, ["--db", str(cli_db), "judge", "run", "--on", "sideways"])
    assert r.exit_code == 2



def test_a_killed_judge_run_shows_interrupted_and_resume_finishes_it(cli_db, server):
    import os
    import signal
    import subprocess
    import sys

    server.latency = 0.05
    child = subprocess.Popen([sys.executable, "-c", "import sys; from labeler.cli import cli; cli(sys.argv[1:])",
                              "--db", str(cli_db), "judge", "run", "--judge", "relevance.v1", "--on", "labeled"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert server.wait_for_requests(20, timeout=60), "the judge run never started"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    db = store.connect(cli_db)
    (run,) = judge.list_runs(db)
    assert run.status == "interrupted" and judge.get_run(db, run.id).status == "interrupted"
    assert db.execute("SELECT status FROM judge_runs").fetchone()[0] == "running"  # as the killed process left it
    r = invoke(cli_db, "list")
    assert "interrupted" in r.output and "running" not in r.output
    server.latency = 0.0
    r = invoke(cli_db, "run", "--resume", str(run.id), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["status"] == "done"
    assert judge.get_run(db, run.id).status == "done"


def test_a_run_of_a_live_process_is_running(db):
    from labeler import owners

    assert owners.alive(owners.current()) and owners.is_me(owners.current())
    assert not owners.alive(json.dumps({"pid": 2 ** 22 + 12345, "host": __import__("socket").gethostname()}))
    assert owners.alive(None) and owners.alive(json.dumps({"pid": 1, "host": "another-host"}))
