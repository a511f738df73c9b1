"""labeler judge align against the fake OpenAI server through the real openai client: a judge whose
accuracy rises with correct examples in its prompt gets a new version (paired CI above 0), a random
judge never does; the holdout is looked at once per winner and the look is counted; candidates are
built from selection pairs only; reruns pay nothing; the estimate; the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from labeler import db as store
from labeler import judge
from labeler.cli import cli
from labeler.errors import JudgeError
from labeler.holdout import DEV, looks, set_split, split_of
from labeler.judge.align import align_judge
from labeler.judge.candidates import EXAMPLES_HEADER, pick_examples, with_examples
from tests.fake_openai import example_learning_responder, prompt_examples, random_responder
from tests.test_judge import KEY, build, make_config


def dev_queries(db) -> set[str]:
    return {q for (q,) in db.execute("SELECT query_id FROM queries") if split_of(q, 0.2, 7) == DEV}


@pytest.fixture
def labeled(db, ingest_tiny):
    _, truth = build(db, ingest_tiny, n=90, overlap=0)
    set_split(db, 0.2, seed=7)
    return truth


def test_pick_examples_is_stratified_and_prefers_mistakes():
    grades = np.array([0, 0, 0, 1, 1, 2, 2, 3, 3, 3])
    wrong = np.array([False, True, False, False, True, True, False, False, False, True])
    picked = pick_examples(grades, wrong, 4, np.random.default_rng(0))
    assert sorted(grades[picked].tolist()) == [0, 1, 2, 3] and wrong[picked].all()
    assert len(pick_examples(grades, wrong, 8, np.random.default_rng(0))) == 8
    text = with_examples("Rubric.", [{"question": "Q?", "text": "a\nb", "grade": 2}])
    assert text == f"Rubric.\n\n{EXAMPLES_HEADER}\nExample 1 (grade 2)\nQuestion: Q?\nChunk: a b"
    assert prompt_examples({"messages": [{"role": "system", "content": text}]}) == [(2, "Q?", "a b")]
    assert with_examples(text, []) == "Rubric."


def test_a_judge_that_learns_from_examples_gets_a_new_version(db, labeled, server):
    server.responder = example_learning_responder(labeled)
    config = make_config(server)
    assert looks(db)["count"] == 0
    result = align_judge(db, config, "relevance.v1", shots=4, candidates=2, revisions=1, seed=0)
    assert [c.name for c in result.candidates] == ["examples-1", "examples-2", "revision-1"]
    assert result.confidence == pytest.approx(1 - 0.05 / 3)
    best = next(c for c in result.candidates if c.name == result.winner)
    assert best.kind == "examples" and best.difference["cohen_kappa"]["value"] > 0.4
    assert best.decision["cohen_kappa"]["ci_low"] > 0
    for key in ("cohen_kappa", "kappa_linear", "kappa_quadratic", "krippendorff_alpha"):
        stat = best.statistics[key]
        assert stat["ci_low"] <= stat["value"] <= stat["ci_high"] and stat["n"] == best.n
    revision = result.candidates[-1]
    assert revision.kind == "revision" and revision.decision["cohen_kappa"]["ci_low"] <= 0

    # registered with its parent and examples; the examples come from dev selection pairs the
    # current judge got wrong, one per grade
    assert result.registered == "relevance.v1/r2"
    r2 = judge.get_rubric(db, "relevance.v1", 2)
    assert (r2.parent, r2.origin) == (1, "align") and r2.text == best.text
    assert sorted(e["grade"] for e in r2.examples) == [0, 1, 2, 3]
    assert all(e["judge_grade"] != e["grade"] for e in r2.examples)
    from labeler.judge.align import _validation_side

    assert all(e["query_id"] in dev_queries(db) and not _validation_side(e["query_id"], 0, 0.5) for e in r2.examples)

    # the winner was scored once on the holdout, and that look was counted
    assert looks(db)["count"] == 1 == result.holdout_looks
    assert "judge align relevance.v1" in looks(db)["recent"][0]["what"]
    assert result.holdout["n"] > 20 and result.holdout["difference"]["cohen_kappa"]["value"] > 0
    stored = judge.list_checks(db, "align")
    assert stored[0]["id"] == result.id and stored[0]["result"]["registered"] == "relevance.v1/r2"

    # a rerun of the same alignment pays nothing, registers nothing new, and its look counts too
    before = server.total
    again = align_judge(db, config, "relevance.v1/r1", shots=4, candidates=2, revisions=1, seed=0)
    assert (again.requests, server.total) == (0, before) and again.cached > 0
    assert again.registered == "relevance.v1/r2" and len(judge.rubrics(db, "relevance.v1")) == 2
    assert looks(db)["count"] == 2


def test_a_random_judge_never_gets_a_new_version(db, labeled, server):
    server.responder = random_responder()
    config = make_config(server)
    for seed in (0, 1):
        result = align_judge(db, config, "relevance.v1", shots=4, candidates=3, revisions=1, seed=seed)
        assert result.winner is None and result.registered is None
        assert "nothing changed" in result.message and "holdout was not looked at" in result.message
        assert all(c.decision["cohen_kappa"]["ci_low"] <= 0 for c in result.candidates)
    assert [r.name for r in judge.rubrics(db, "relevance.v1")] == ["relevance.v1/r1"]
    assert looks(db)["count"] == 0


def test_estimate_user_errors_and_no_split(db, ingest_tiny, server):
    _, truth = build(db, ingest_tiny, n=40, overlap=0)
    config = make_config(server)
    with pytest.raises(JudgeError, match="set the split first"):
        align_judge(db, config, "relevance.v1")
    set_split(db, 0.2, seed=7)
    dry = align_judge(db, config, "relevance.v1", shots=2, candidates=2, revisions=1, dry_run=True)
    e = dry.estimate
    dev_pairs = dry.selection["pairs"] + dry.validation["pairs"]
    holdout_pairs = 120 - dev_pairs
    # current on dev and holdout, 3 candidates on validation, 1 revision, the winner on the holdout
    assert e.to_request == dev_pairs + 3 * dry.validation["pairs"] + 1 + 2 * holdout_pairs
    assert e.input_tokens > 0 and server.total == 0 and looks(db)["count"] == 0
    with pytest.raises(JudgeError, match="relevance judges"):
        align_judge(db, config, "faithfulness.v1")
    with pytest.raises(JudgeError, match="at least one candidate"):
        align_judge(db, config, "relevance.v1", candidates=0, revisions=0)
    with pytest.raises(JudgeError, match="statistic"):
        align_judge(db, config, "relevance.v1", statistic="f1")


def test_cli_align(tmp_path, ingest_tiny, server, monkeypatch):
    path = tmp_path / "cli.db"
    database = store.connect(path)
    _, truth = build(database, ingest_tiny, n=90, overlap=0)
    set_split(database, 0.2, seed=7)
    database.close()
    server.responder = example_learning_responder(truth)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("LABELER_MODEL", "fake-model")
    runner = CliRunner()
    r = runner.invoke(cli, ["--db", str(path), "judge", "align", "relevance.v1", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("dry run: align relevance.v1/r1 with fake-model") and server.total == 0
    r = runner.invoke(cli, ["--db", str(path), "judge", "align", "relevance.v1", "--candidates", "1",
                            "--revisions", "0"], input="n\n")
    assert r.exit_code == 1 and "nothing was sent" in r.output and server.total == 0
    r = runner.invoke(cli, ["--db", str(path), "judge", "align", "relevance.v1", "--candidates", "1",
                            "--revisions", "0", "--yes", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["registered"] == "relevance.v1/r2" and data["holdout_looks"] == 1
    r = runner.invoke(cli, ["--db", str(path), "judge", "align", "relevance.v1/r1", "--candidates", "1",
                            "--revisions", "0", "--yes"])
    assert r.exit_code == 0, r.output
    assert "registered as relevance.v1/r2 (parent relevance.v1/r1)" in r.output
    assert "holdout looks so far: 2" in r.output and "0 requests sent" in r.output


def test_batch_alignment_goes_on_after_each_collect(db, labeled):
    from labeler.llm import batch
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI(batch_auto="completed") as server:
        server.responder = example_learning_responder(labeled)
        config = make_config(server)
        rounds, result = [], None
        for _ in range(6):
            result = align_judge(db, config, "relevance.v1", candidates=2, revisions=1, seed=0, batch=True)
            if result.status != "submitted":
                break
            rounds.append(result.message)
            again = align_judge(db, config, "relevance.v1", candidates=2, revisions=1, seed=0, batch=True)
            assert again.status == "submitted" and "waits for" in again.message  # nothing sent twice
            batch.collect(db, config, owner="judge.align", run_id=result.id)
    assert len(rounds) == 4, rounds  # current on dev, the revision, the candidates, the holdout
    assert ["(grade step)" in rounds[0], "(revision step)" in rounds[1], "(validate step)" in rounds[2],
            "(holdout step)" in rounds[3]] == [True] * 4
    assert result.status == "done" and result.registered == "relevance.v1/r2" and result.requests == 0
    assert looks(db)["count"] == 1  # the holdout was looked at once, after its answers were in
    assert all(b.collected_at for b in batch.list_batches(db, owner="judge.align", run_id=result.id))
    assert [c["id"] for c in judge.list_checks(db, "align")] == [result.id]


def test_cli_align_batch_then_collect(tmp_path, ingest_tiny, monkeypatch):
    """Submit, collect, run again, through the CLI: every request is sent once in all (as many as
    the estimate says and a direct alignment sends), a run before the collect sends nothing, and
    the finished alignment run again pays nothing."""
    from tests.fake_openai import FakeOpenAI

    path = tmp_path / "cli.db"
    database = store.connect(path)
    _, truth = build(database, ingest_tiny, n=90, overlap=0)
    set_split(database, 0.2, seed=7)
    database.close()
    runner = CliRunner()
    with FakeOpenAI(batch_auto="completed") as server:
        server.responder = example_learning_responder(truth)
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("LABELER_MODEL", "fake-model")
        options = ["--candidates", "1", "--revisions", "0"]
        dry = runner.invoke(cli, ["--db", str(path), "judge", "align", "relevance.v1", *options, "--dry-run", "--json"])
        assert dry.exit_code == 0, dry.output
        to_request = json.loads(dry.output)["estimate"]["to_request"]
        args = ["--db", str(path), "judge", "align", "relevance.v1", *options, "--yes", "--batch"]
        sent = []
        for _ in range(5):
            r = runner.invoke(cli, args)
            assert r.exit_code == 0, r.output
            if "registered as" in r.output:
                break
            assert "labeler llm collect judge.align:1" in r.output
            sent.append(server.total)
            before = (server.total, server.batch.uploads)
            again = runner.invoke(cli, args)  # not collected yet: nothing is sent
            assert again.exit_code == 0 and "waits for 1 batch(es)" in again.output, again.output
            assert (server.total, server.batch.uploads) == before
            c = runner.invoke(cli, ["--db", str(path), "llm", "collect", "judge.align:1"])
            assert c.exit_code == 0, c.output
            assert server.total == before[0]  # collecting answers nothing again
            # the alignment goes on when it is run again: the collect says so, not "finished"
            assert "finished" not in c.output and "run the same `labeler judge align` command again" in c.output
        assert "registered as relevance.v1/r2" in r.output and "holdout looks so far: 1" in r.output
        # three rounds (the current version on dev, the candidate on validation, the holdout), each
        # sending only its own requests: every request once, as many as estimated
        assert len(sent) == 3 and sent[0] < sent[1] < sent[2] == server.total == to_request
        # a pair's user message went out once per version that graded it: the current one, and the
        # candidate (validation) or the winner (holdout)
        assert max(server.by_prompt.values()) == 2
        r = runner.invoke(cli, ["--db", str(path), "judge", "align", "relevance.v1/r1", *options, "--yes", "--batch"])
        assert r.exit_code == 0, r.output
        assert "0 requests sent" in r.output and server.total == to_request and server.batch.uploads == 3

    # the same alignment without --batch sends exactly as many requests
    direct = tmp_path / "direct.db"
    database = store.connect(direct)
    build(database, ingest_tiny, n=90, overlap=0)
    set_split(database, 0.2, seed=7)
    database.close()
    with FakeOpenAI() as server:
        server.responder = example_learning_responder(truth)
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        r = runner.invoke(cli, ["--db", str(direct), "judge", "align", "relevance.v1", *options, "--yes"])
        assert r.exit_code == 0 and "registered as relevance.v1/r2" in r.output, r.output
        assert server.total == to_request
