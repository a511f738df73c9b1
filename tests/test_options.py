"""The option objects of ``evaluate`` (``labeler.harness.options``) and of ``ingest_logs``
(``LogIngestOptions``): each rejects a bad value with one line that names the option and the fix, and
a call with the objects does exactly what the same call with keywords does."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import labeler
from labeler import db as store
from labeler.harness import (
    BaselineError,
    GateOptions,
    GoldenError,
    GoldenOptions,
    JudgeOptions,
    OutputOptions,
    PipelineError,
    RunOptions,
    ScoringOptions,
    evaluate,
)
from labeler.ingest import LogIngestOptions, ingest_logs
from labeler.metrics import MetricError
from tests.conftest import tiny_records


def one_line(info: pytest.ExceptionInfo, *words: str) -> str:
    message = str(info.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, (word, message)
    return message


BAD_EVAL_OPTIONS = [
    # (make the object, error class, words the message must hold: the option, then the fix)
    (lambda: RunOptions(concurrency=-1), PipelineError, ["--concurrency", ">= 1", "e.g. 8", "-1"]),
    (lambda: RunOptions(concurrency=2.5), PipelineError, ["--concurrency", "whole number"]),
    (lambda: RunOptions(timeout=0), PipelineError, ["--timeout", "positive number of seconds", "e.g. 30"]),
    (lambda: RunOptions(pipeline="m:f", endpoint="http://localhost:1/"), PipelineError,
     ["--pipeline or --endpoint, not both"]),
    (lambda: RunOptions(pipeline=42), PipelineError, ["'module:function', a function or a Pipeline", "int"]),
    (lambda: RunOptions(headers=["no colon"]), PipelineError, ["--header 'no colon'", "e.g. 'Authorization"]),
    (lambda: RunOptions(mapping=["retrieved"]), labeler.IngestError, ["--map 'retrieved'", "FIELD=PATH"]),
    (lambda: RunOptions(mapping="retrieved=docs"), labeler.LabelerError, ["--map", "list of strings"]),
    (lambda: GoldenOptions(threshold=0), GoldenError, ["threshold", ">= 1", "got 0"]),
    (lambda: GoldenOptions(strict="yes"), labeler.LabelerError, ["strict", "True or False"]),
    (lambda: ScoringOptions(metrics=["nope@3"]), MetricError, ["unknown metric 'nope'", "known metrics:", "ndcg"]),
    (lambda: ScoringOptions(metrics="ndcg@10"), MetricError, ["metrics", "a list of metric specs", "ndcg@10"]),
    (lambda: ScoringOptions(k=0), MetricError, ["-k", "positive whole number", "e.g. -k 5"]),
    (lambda: ScoringOptions(n_resamples=0), MetricError, ["n_resamples", "positive whole number", "e.g. 1000"]),
    (lambda: ScoringOptions(seed=1.5), MetricError, ["--seed", "whole number"]),
    (lambda: GateOptions(n_permutations=0), MetricError, ["--permutations", "positive whole number", "e.g. 10000"]),
    (lambda: GateOptions(n_permutations=True), MetricError, ["--permutations", "got True"]),
    (lambda: GateOptions(max_drop=["mrr=0.02"]), labeler.LabelerError, ["--max-drop needs --baseline"]),
    (lambda: GateOptions(max_drop={"mrr": 0.02}), labeler.LabelerError, ["--max-drop needs --baseline"]),
    (lambda: GateOptions(baseline="b.json", max_drop=["mrr=lots"]), BaselineError, ["--max-drop 'mrr=lots'",
                                                                                     "e.g. recall@5=0.02"]),
    (lambda: GateOptions(baseline="b.json", max_drop=["mrr=-1"]), BaselineError, ["tolerance must be a number >= 0"]),
    (lambda: GateOptions(baseline="b.json", max_drop="mrr=0.02"), BaselineError, ["--max-drop takes a list"]),
    (lambda: GateOptions(baseline="b.json", alpha=1.5), BaselineError, ["--alpha", "between 0 and 1", "e.g. 0.05"]),
    (lambda: GateOptions(baseline=7), BaselineError, ["--baseline", "path of a baseline file"]),
    (lambda: OutputOptions(output=3), labeler.LabelerError, ["--output", "file path", "e.g. report.json"]),
    (lambda: OutputOptions(save_baseline=" "), labeler.LabelerError, ["--save-baseline", "file path"]),
    (lambda: JudgeOptions(runs=["three"]), labeler.LabelerError, ["--judge-run 'three'", "labeler judge list"]),
    (lambda: JudgeOptions(runs=[2.5]), labeler.LabelerError, ["--judge-run 2.5", "whole number"]),
]


@pytest.mark.parametrize(("make", "error", "words"), BAD_EVAL_OPTIONS)
def test_an_eval_option_object_rejects_a_bad_value_in_one_line(make, error, words):
    with pytest.raises(error) as info:
        make()
    one_line(info, *words)


def test_eval_option_objects_hold_their_values_normalized():
    run = RunOptions(endpoint="http://localhost:1/", mapping=["retrieved=result.docs"],
                     headers=["Authorization: Bearer t"])
    assert run.mapping == {"retrieved": "result.docs"} and run.headers == {"Authorization": "Bearer t"}
    gate = GateOptions(baseline="b.json", max_drop={"P@5": 0.01, "*": 0.02})
    assert gate.max_drop == ("P@5=0.01", "0.02")
    assert gate.tolerances == {"precision@5": 0.01, "*": 0.02} and gate.gated == ["precision@5"]
    scoring = ScoringOptions(metrics=["P@10"])
    assert scoring.metrics == ("P@10",) and scoring.reported_k is None
    assert [s.spec for s in scoring.specs(gate.gated)] == ["precision@10", "precision@5"]
    assert ScoringOptions().reported_k == 10 and ScoringOptions(k=5, metrics=["mrr"]).reported_k == 5
    assert JudgeOptions(runs=[3, "4"]).runs == (3, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        gate.alpha = 0.1  # type: ignore[misc]


# --- evaluate with objects is evaluate with keywords ------------------------------------------

RECORDS = tiny_records(6, 3)


def answer(question: str) -> tuple[list[str], str]:
    """Item 0 to 5's chunks; every other question gets its relevant chunk second, the rest first."""
    i = int(question.removeprefix("What is item q").removesuffix("?"))
    ids = [f"q{i:03d}-c{j}" for j in range(3)]
    return (ids if i % 2 else [ids[1], ids[0], ids[2]]), f"Item q{i} is a thing."


def worse(question: str) -> tuple[list[str], str]:
    ids, text = answer(question)
    return ids[::-1], text


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    path = tmp_path / "golden.jsonl"
    path.write_text("".join(json.dumps({"query_id": r["query_id"], "question": r["question"],
                                        "relevant_ids": [f"{r['query_id']}-c0"]}) + "\n" for r in RECORDS))
    return path


def same_report(a: labeler.harness.EvalResult, b: labeler.harness.EvalResult) -> None:
    ra, rb = dict(a.report), dict(b.report)
    for r in (ra, rb):
        r.pop("created_at")
        r.pop("timings")
    assert ra == rb
    strip = [[{k: v for k, v in row.items() if k != "seconds"} for row in result.questions] for result in (a, b)]
    assert strip[0] == strip[1]
    assert a.exit_code == b.exit_code


def test_evaluate_with_option_objects_gives_the_keywords_report(golden, tmp_path):
    first = evaluate(golden, pipeline=answer, k=2, threshold=1, save_baseline=tmp_path / "baseline.json")
    assert first.status == "no baseline"
    keywords = evaluate(golden, pipeline=worse, k=2, metrics=["P@1"], threshold=1, concurrency=2, timeout=5,
                        baseline=tmp_path / "baseline.json", max_drop=["recall@2=0.1", "mrr=0"], alpha=0.2,
                        n_permutations=200, n_resamples=50, seed=3, output=tmp_path / "k.json",
                        save_baseline=tmp_path / "k-baseline.json")
    objects = evaluate(
        golden,
        run=RunOptions(pipeline=worse, concurrency=2, timeout=5),
        golden_options=GoldenOptions(threshold=1),
        scoring=ScoringOptions(k=2, metrics=["P@1"], n_resamples=50, seed=3),
        gate=GateOptions(baseline=tmp_path / "baseline.json", max_drop=["recall@2=0.1", "mrr=0"], alpha=0.2,
                         n_permutations=200),
        outputs=OutputOptions(output=tmp_path / "o.json", save_baseline=tmp_path / "o-baseline.json"))
    # settings name the baseline as given; everything else is the same run
    assert keywords.report["settings"]["permutations"] == 200 and keywords.report["settings"]["seed"] == 3
    assert keywords.report["comparison"]["metrics"]["mrr"]["max_drop"] == 0
    same_report(keywords, objects)
    assert (tmp_path / "k.json").exists() and (tmp_path / "o.json").exists()
    assert (tmp_path / "k-baseline.json").exists() == (tmp_path / "o-baseline.json").exists()
    # a group may mix with the keywords of the other groups
    mixed = evaluate(golden, pipeline=worse, concurrency=2, timeout=5, threshold=1,
                     scoring=ScoringOptions(k=2, metrics=["P@1"], n_resamples=50, seed=3),
                     baseline=tmp_path / "baseline.json", max_drop={"recall@2": 0.1, "mrr": 0}, alpha=0.2,
                     n_permutations=200)
    same_report(keywords, mixed)


def test_evaluate_of_the_logged_retrieval_with_option_objects(golden, tmp_path, write_log):
    db_path = tmp_path / "team.db"
    database = store.connect(db_path)
    ingest_logs(database, write_log(RECORDS), redact=False)
    database.close()
    keywords = evaluate(golden, db=db_path, retriever="production", k=3, seed=1, n_resamples=40)
    objects = evaluate(golden, db=db_path, run=RunOptions(retriever="production"),
                       scoring=ScoringOptions(k=3, seed=1, n_resamples=40))
    assert keywords.report["pipeline"] == {"id": f"{db_path}#production", "kind": "database",
                                           "retriever": "production"}
    same_report(keywords, objects)


def test_evaluate_takes_a_group_as_object_or_keywords_not_both(golden):
    with pytest.raises(labeler.LabelerError) as info:
        evaluate(golden, pipeline=answer, run=RunOptions(pipeline=answer, concurrency=2))
    one_line(info, "run=RunOptions(...)", "(pipeline)", "not both")
    with pytest.raises(labeler.LabelerError) as info:
        evaluate(golden, pipeline=answer, n_permutations=5, alpha=0.1, gate=GateOptions())
    one_line(info, "gate=GateOptions(...)", "alpha, n_permutations", "not both")
    with pytest.raises(labeler.LabelerError) as info:
        evaluate(golden, judge_runs=[1], judges=JudgeOptions())
    one_line(info, "judges=JudgeOptions(...)", "(judge_runs)")
    with pytest.raises(labeler.LabelerError) as info:
        evaluate(golden, pipeline=answer, scoring={"k": 5})
    one_line(info, "scoring= takes a ScoringOptions(...)", "dict")


def test_evaluate_checks_the_options_before_any_question_runs(golden):
    asked: list[str] = []

    def counted(question: str):
        asked.append(question)
        return answer(question)

    with pytest.raises(labeler.LabelerError, match="--judge-run needs --db"):
        evaluate(golden, pipeline=counted, judges=JudgeOptions(runs=[1]))
    with pytest.raises(PipelineError, match="--concurrency"):
        evaluate(golden, pipeline=counted, concurrency=0)
    assert asked == []


# --- ingest_logs with LogIngestOptions -------------------------------------------------------

BAD_INGEST_OPTIONS = [
    (lambda: LogIngestOptions(tool="nope"), ["unknown tool format 'nope'", "use one of", "phoenix"]),
    (lambda: LogIngestOptions(max_line_bytes=0), ["max_line_bytes", ">= 1", "e.g. 16777216"]),
    (lambda: LogIngestOptions(sample=0), ["--sample 0", "a rate between 0 and 1"]),
    (lambda: LogIngestOptions(sample=2.5), ["--sample 2.5", "whole number"]),
    (lambda: LogIngestOptions(sample="half"), ["--sample", "e.g. 0.05", "'half'"]),
    (lambda: LogIngestOptions(sample=0.5, seed="7"), ["--seed", "whole number"]),
    (lambda: LogIngestOptions(mapping=["question"]), ["--map 'question'", "FIELD=PATH"]),
    (lambda: LogIngestOptions(redact_patterns=["CUSTOMER"]), ["redaction pattern 'CUSTOMER'", "TYPE=REGEX"]),
    (lambda: LogIngestOptions(fmt=3), ["format", "e.g. jsonl"]),
]


@pytest.mark.parametrize(("make", "words"), BAD_INGEST_OPTIONS)
def test_a_log_ingest_option_rejects_a_bad_value_in_one_line(make, words):
    with pytest.raises(labeler.LabelerError) as info:
        make()
    one_line(info, *words)


def test_log_ingest_options_hold_their_values_normalized():
    options = LogIngestOptions(fmt="Phoenix", mapping=["question=inputs.query"], redact_patterns=["CUST=CUST-\\d+"])
    assert (options.fmt, options.tool) == (None, "phoenix")
    assert options.mapping == {"question": "inputs.query"} and options.redact_patterns == {"CUST": "CUST-\\d+"}
    assert LogIngestOptions(sample=0.5, seed=7).sampling == {"rate": 0.5, "seed": 7}
    assert LogIngestOptions(sample=3).sampling == {"size": 3, "seed": 0} and LogIngestOptions().sampling is None


def ingested(database) -> list[tuple]:
    return database.execute("SELECT query_id, question, occurrences FROM queries ORDER BY query_id").fetchall()


@pytest.mark.parametrize("sample", [None, 0.5, 4])
def test_ingest_logs_with_options_is_ingest_logs_with_keywords(tmp_path, write_log, sample):
    records = [*tiny_records(8, 2), {"question": "", "retrieved": []}, {"span_kind": "LLM", "name": "chat"}]
    records[0]["question"] = "Mail alice@example.com about item q0?"
    path = write_log(records)
    by_keywords, by_options = store.connect(":memory:"), store.connect(":memory:")
    a = ingest_logs(by_keywords, path, lenient=True, sample=sample, seed=5, redact=True, name="prod.jsonl",
                    max_line_bytes=1 << 20, parallel=False, mapping={"answer": "answer"})
    rejects = [json.loads(line) for line in Path(a.rejects_path).read_text().splitlines()]
    Path(a.rejects_path).unlink()
    b = ingest_logs(by_options, path, options=LogIngestOptions(
        lenient=True, sample=sample, seed=5, redact=True, name="prod.jsonl", max_line_bytes=1 << 20,
        parallel=False, mapping=["answer=answer"]))
    assert [json.loads(line) for line in Path(b.rejects_path).read_text().splitlines()] == rejects
    # the invalid record is listed with its line, field, reason and the record itself
    assert [(r["line"], r["field"], r["record"]) for r in rejects] == [(9, "question", records[8])]
    da, db_ = a.to_dict(), b.to_dict()
    assert da == db_ and da["rejected"] == 1 and da["skipped"] == 1
    assert ingested(by_keywords) == ingested(by_options)
    assert len(ingested(by_options)) == {None: 8, 0.5: da["records"] - 1 - da["sampled_out"], 4: 4}[sample]
    if sample is None:  # (a sample may leave q0 out)
        assert da["redactions"] == {"EMAIL": 1} and "[EMAIL_1]" in ingested(by_options)[0][1]


def test_ingest_logs_takes_options_or_keywords_not_both(db, write_log):
    path = write_log(tiny_records(2))
    with pytest.raises(labeler.IngestError) as info:
        ingest_logs(db, path, lenient=True, seed=3, options=LogIngestOptions())
    one_line(info, "options=LogIngestOptions(...)", "(lenient, seed)", "not both")
    with pytest.raises(labeler.IngestError) as info:
        ingest_logs(db, path, options={"lenient": True})
    one_line(info, "options= takes a LogIngestOptions(...)", "dict")
    assert db.execute("SELECT count(*) FROM queries").fetchone()[0] == 0
    # progress and by stay keywords beside the options
    seen: list[tuple[int, int]] = []
    result = ingest_logs(db, path, options=LogIngestOptions(redact=False), progress=lambda d, t: seen.append((d, t)))
    assert result.new == 2 and seen[-1][0] == seen[-1][1] == path.stat().st_size
