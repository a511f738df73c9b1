"""The CLI's one output (labeler/cli/output.py): every reporting command takes --json, --csv and
--table (and --nl where its rows are records), rendered by one function.

For each command, on a small database built through the public API: --json prints the library's
own document (what the command printed before), --csv parses with the csv module into the
expected header and rows, --table shows the same header and values, --nl lines parse as JSON and
carry the CSV's values. A walk over click's command tree checks that no reporting command skips the
decorator."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import labeler
import labeler.labels as labels
from labeler import accounts, judge
from labeler import db as store
from labeler import report as R
from labeler.cli import cli
from labeler.cli.output import Note, Output, output_options, render, table
from labeler.export import export_golden
from labeler.ingest import ingest_logs
from tests.conftest import tiny_records
from tests.fake_openai import FakeOpenAI, grade_responder
from tests.test_all_traffic import label_from_queue
from tests.test_judge import make_config

N, CHUNKS, LABELED = 24, 3, 12
KEY = "sk-test-output"


def grade_of(i: int, j: int) -> int:
    return (i * 5 + j * 3) % 4


# --- a walk over the command tree ---------------------------------------------------------------------

def commands(group: click.Group = cli, prefix: str = "") -> list[tuple[str, click.Command]]:
    out = []
    for name, cmd in sorted(group.commands.items()):
        out.append((f"{prefix}{name}", cmd))
        if isinstance(cmd, click.Group):
            out.extend(commands(cmd, f"{prefix}{name} "))
    return out


def without_output_options(group: click.Group) -> list[str]:
    """The commands that take --json but not --csv and --table."""
    missing = []
    for name, cmd in commands(group):
        flags = {opt for p in cmd.params for opt in p.opts}
        if "--json" in flags and not {"--csv", "--table"} <= flags:
            missing.append(name)
    return missing


def test_every_reporting_command_has_csv_and_table():
    reporting = [name for name, cmd in commands() if any("--json" in p.opts for p in cmd.params)]
    assert len(reporting) >= 30 and "metrics" in reporting and "items" in reporting
    assert without_output_options(cli) == []


def test_the_walk_finds_a_command_that_skips_the_decorator():
    @click.group()
    def group() -> None:
        """A group."""

    @group.command("listing")
    @click.option("--json", "as_json", is_flag=True)
    def listing(as_json: bool) -> None:
        """Only --json."""

    @group.command("decorated")
    @output_options()
    def decorated(output_format: str) -> Output:
        """All of them."""
        return Output({}, [])

    assert without_output_options(group) == ["listing"]


# --- render and the decorator --------------------------------------------------------------------------

NOTE = " ".join(["word"] * 20)  # 99 characters: --table cuts it


@click.command()
@output_options(nl=True)
def _sample(output_format: str) -> Output:
    rows = [{"name": "recall@5", "mean": 0.83333333, "n": 12, "ok": True, "ids": ["a", "b"], "note": None},
            {"name": "a name,\nwith \"quotes\"", "mean": 0.5, "n": 3, "ok": False, "ids": [], "note": NOTE}]
    return Output({"rows": rows}, ["name", "mean", "n", "ok", "ids", "note"], rows,
                  before=["two rows"], after=[Note("a hint"), "the end"], notes=["Warning: careful"], exit_code=3)


def test_render_every_format():
    runner = CliRunner()
    r = runner.invoke(_sample, ["--json"])
    assert r.exit_code == 3 and json.loads(r.stdout)["rows"][0]["mean"] == 0.83333333 and r.stderr == ""
    r = runner.invoke(_sample, ["--csv"])
    assert list(csv.reader(io.StringIO(r.stdout))) == [
        ["name", "mean", "n", "ok", "ids", "note"],
        ["recall@5", "0.83333333", "12", "true", '["a","b"]', ""],
        ['a name,\nwith "quotes"', "0.5", "3", "false", "[]", NOTE]]
    assert r.stderr == "Warning: careful\n"
    r = runner.invoke(_sample, ["--nl"])
    assert [json.loads(line)["n"] for line in r.stdout.splitlines()] == [12, 3]
    r = runner.invoke(_sample, ["--table"])
    assert r.stdout.splitlines() == [
        "name                     mean   n  ok   ids   note",
        "---------------------  ------  --  ---  ----  " + "-" * 60,
        "recall@5               0.8333  12  yes  a, b  -",
        'a name, with "quotes"  0.5000   3  no         ' + NOTE[:59] + "…"]  # decimals line up; cut at 60
    header = r.stdout.splitlines()[0]
    r = runner.invoke(_sample, [])
    assert r.stdout.splitlines()[0] == "two rows" and r.stdout.splitlines()[-1] == "the end"
    assert r.stdout.splitlines()[1] == header and "a hint" not in r.stdout
    assert r.stderr == "a hint\nWarning: careful\n" and r.exit_code == 3


def test_one_format_at_a_time():
    r = CliRunner().invoke(_sample, ["--json", "--csv"])
    assert r.exit_code == 2 and "give one of --json, --csv, --table, --nl (got --json and --csv)" in r.output


def test_render_refuses_an_unknown_format_and_prints_empty_and_err():
    with pytest.raises(ValueError, match="unknown output format 'xml'"):
        render(Output({}, ["a"]), "xml")

    @click.command()
    @output_options()
    def empty(output_format: str) -> Output:
        return Output([], ["a", "b"], [], empty="nothing yet", err=True)

    r = CliRunner().invoke(empty, [])
    assert r.stdout == "" and r.stderr == "nothing yet\n"
    r = CliRunner().invoke(empty, ["--csv"])
    assert r.stdout == "" and r.stderr == "a,b\n"
    assert table(["a", "b"], []) == "a  b\n-  -"


# --- what each command prints, on a small database ----------------------------------------------------

@pytest.fixture(scope="module")
def team(tmp_path_factory) -> dict[str, Any]:
    """A file database: N logged queries x CHUNKS chunks by two retrievers (production; bm25 ranks
    them reversed), alice labeled LABELED of them from the queue, judge runs 1 (perfect) and 2 (one
    grade higher) on the labeled items and 3 over all traffic, two topics, a lead, a golden export."""
    folder = tmp_path_factory.mktemp("team")
    path = folder / "team.db"
    db = store.connect(path)
    records = tiny_records(N, CHUNKS)
    (folder / "logs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    ingest_logs(db, folder / "logs.jsonl")
    bm25 = [{**r, "retriever": "bm25", "retrieved": list(reversed(r["retrieved"]))} for r in records]
    (folder / "bm25.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bm25))
    ingest_logs(db, folder / "bm25.jsonl")
    truth = {(r["question"], c["text"]): grade_of(i, j) for i, r in enumerate(records)
             for j, c in enumerate(r["retrieved"])}
    label_from_queue(db, truth, LABELED)
    with FakeOpenAI() as server:
        server.responder = grade_responder(lambda q, c: truth.get((q, c)))
        config = make_config(server)
        runs = [judge.run_judge(db, config, "relevance.v1", on="labeled").id]
        server.responder = grade_responder(lambda q, c: truth.get((q, c)), shift=1)
        runs.append(judge.run_judge(db, make_config(server, model="fake-model-2"), "relevance.v1", on="labeled").id)
        runs.append(judge.run_judge(db, config, "relevance.v1", on="all").id)
    from labeler.topics import build_topics

    build_topics(db, k=2, seed=1)
    accounts.add_user(db, "lena", "lead", password="lena-password")
    export_golden(db, folder / "golden.jsonl")
    db.close()
    return {"path": path, "folder": folder, "runs": runs, "records": records}


def run(path: Path, *args: str, input: str | None = None):
    r = CliRunner().invoke(cli, ["--db", str(path), *args], catch_exceptions=False, input=input)
    assert r.exit_code == 0, r.output
    return r


def parse_table(text: str) -> tuple[list[str], list[list[str]]]:
    """Header and cells of a --table: the rule's dashes mark where each column starts."""
    lines = text.rstrip("\n").splitlines()
    starts = [m.start() for m in re.finditer(r"-+", lines[1])] + [None]

    def cells(line: str) -> list[str]:
        return [line[starts[i]:starts[i + 1]].strip() for i in range(len(starts) - 1)]

    return cells(lines[0]), [cells(line) for line in lines[2:]]


def shown(table_cell: str, csv_cell: str) -> bool:
    """Whether a --table cell shows the value of a --csv cell."""
    if csv_cell == "":
        return table_cell == "-"
    if csv_cell in ("true", "false"):
        return table_cell == {"true": "yes", "false": "no"}[csv_cell]
    try:
        value = float(csv_cell)
    except ValueError:
        pass
    else:
        return table_cell == "-" if value != value else abs(float(table_cell) - value) <= 0.5e-4
    if csv_cell.startswith(("[", "{")):
        return True  # lists and objects: the table joins them, the CSV keeps JSON
    flat = " ".join(csv_cell.split())
    return table_cell == flat or (table_cell.endswith("…") and flat.startswith(table_cell[:-1]))


def carried(json_value: Any, csv_cell: str) -> bool:
    """Whether an --nl value is the value of a --csv cell."""
    if json_value is None:
        return csv_cell == ""
    if isinstance(json_value, bool):
        return csv_cell == str(json_value).lower()
    if isinstance(json_value, int | float):
        return float(csv_cell) == json_value
    if isinstance(json_value, list | dict):
        return json.loads(csv_cell) == json_value
    return csv_cell == str(json_value)


def formats(path: Path, *args: str, header: list[str], nl: bool = False) -> tuple[Any, list[dict[str, str]]]:
    """Run a command with --json, --csv, --table (and --nl); check that they agree; return the JSON
    document and the CSV rows."""
    document = json.loads(run(path, *args, "--json").stdout)
    parsed = list(csv.reader(io.StringIO(run(path, *args, "--csv").stdout)))
    assert parsed[0] == header
    rows = [dict(zip(header, row, strict=True)) for row in parsed[1:]]
    t_header, t_rows = parse_table(run(path, *args, "--table").stdout)
    assert t_header == header and len(t_rows) == len(rows)
    for cells, row in zip(t_rows, rows, strict=True):
        for cell, column in zip(cells, header, strict=True):
            assert shown(cell, row[column]), (column, cell, row[column])
    if nl:
        lines = [json.loads(line) for line in run(path, *args, "--nl").stdout.splitlines()]
        assert len(lines) == len(rows)
        for line, row in zip(lines, rows, strict=True):
            for column in header:
                assert carried(line.get(column), row[column]), (column, line.get(column), row[column])
    else:
        r = CliRunner().invoke(cli, ["--db", str(path), *args, "--nl"])
        # rows that do not stream: no --nl (click 8.3 writes "No such option: --nl", 8.5 "No such option '--nl'")
        assert r.exit_code == 2 and re.search(r"No such option:? '?--nl'?", r.output), r.output
    return document, rows


def close(a: str, b: float | None) -> bool:
    return (a == "" and b is None) or (b is not None and a != "" and abs(float(a) - b) < 1e-9)


def test_metrics(team):
    path = team["path"]
    document, rows = formats(path, "metrics", "--k", "1,3", header=["metric", "mean", "ci_low", "ci_high", "n"])
    db = labeler.connect(path)
    report = R.retrieval_report(db, None, ks=(1, 3), seed=0)
    assert document == json.loads(json.dumps(report.to_dict()))
    expected = report.to_dict()["metrics"]
    assert [r["metric"] for r in rows] == [*expected, "judged@1", "judged@3"]
    for row in rows[:-2]:
        v = expected[row["metric"]]
        assert close(row["mean"], v["mean"]) and close(row["ci_low"], v["ci_low"]) and int(row["n"]) == v["n"]
    assert [float(r["mean"]) for r in rows[-2:]] == [report.judged[s]["mean"] for s in ("judged@1", "judged@3")]
    text = run(path, "metrics", "--k", "1,3").stdout.splitlines()
    assert text[0].startswith(f"production: {report.n_queries} labeled queries, threshold 2")
    assert text[1].split() == ["metric", "mean", "ci_low", "ci_high", "n"]
    assert text[3].split()[:2] == ["recall@1", f"{expected['recall@1']['mean']:.4f}"]


def test_metrics_compare(team):
    path = team["path"]
    document, rows = formats(path, "metrics", "--compare", "production,bm25", "--k", "3", "--metric", "mrr",
                             "--metric", "recall", header=["metric", "production", "bm25", "diff", "ci_low",
                                                           "ci_high", "p_value", "n"])
    c = R.compare_retrievers(labeler.connect(path), "production", "bm25", ["mrr", "recall"], ks=(3,), seed=0)
    assert document == json.loads(json.dumps(c.to_dict()))
    assert [r["metric"] for r in rows] == list(c.metrics) == ["mrr", "recall@3"]
    for row in rows:
        v = c.metrics[row["metric"]]
        assert close(row["production"], v["a"]) and close(row["bm25"], v["b"]) and close(row["diff"], v["diff"])
        assert close(row["p_value"], v["p_value"]) and int(row["n"]) == v["n"]


def test_metrics_all_traffic(team):
    from labeler.estimate.report import all_traffic_report

    path = team["path"]
    run_id = str(team["runs"][2])
    header = ["metric", "estimate", "ci_low", "ci_high", "lambda", "effective_n", "human_only", "human_only_ci_low",
              "human_only_ci_high", "judge_only"]
    document, rows = formats(path, "metrics", "--all-traffic", "--judge-run", run_id, "--metric", "recall@3",
                             "--metric", "mrr", header=header)
    rep = all_traffic_report(labeler.connect(path), int(run_id), ["recall@3", "mrr"])
    assert document == json.loads(json.dumps(rep.to_dict(), default=str))
    assert [r["metric"] for r in rows] == ["recall@3", "mrr"]
    for row in rows:
        v = rep.metrics[row["metric"]]
        assert close(row["estimate"], v["estimate"]) and close(row["ci_high"], v["ci_high"])
        assert close(row["human_only"], v["human_only"]["mean"]) and close(row["judge_only"], v["judge_only"]["mean"])
    text = run(path, "metrics", "--all-traffic", "--judge-run", run_id).stdout
    assert "judge-only means are biased" in text and text.splitlines()[1].split()[:2] == ["metric", "estimate"]


def test_items(team):
    path = team["path"]
    header = ["query_id", "origin", "relevant", "conflict", "discarded", "adjudication_requested", "question",
              "statuses"]
    document, rows = formats(path, "items", "--status", "submitted", "--limit", "5", "--page", "2", header=header,
                             nl=True)
    page = labels.list_items(labeler.connect(path), status="submitted", page=2, page_size=5)
    assert document == json.loads(json.dumps(page.to_dict()))
    assert [r["query_id"] for r in rows] == [r.query_id for r in page.rows] and len(rows) == 5
    assert [r["statuses"] for r in rows] == [r.statuses for r in page.rows]
    nl = [json.loads(line) for line in run(path, "items", "--status", "submitted", "--limit", "5", "--page", "2",
                                           "--nl").stdout.splitlines()]
    assert nl == document["items"]  # --nl: the --json document's items, one a line


def test_ingest_list_undo_and_remove(team, tmp_path):
    path = tmp_path / "copy.db"
    shutil.copy(team["path"], path)
    header = ["id", "created_at", "kind", "state", "by", "queries", "retrievals", "documents", "skipped", "sha256",
              "path"]
    document, rows = formats(path, "ingest", "list", header=header, nl=True)
    from labeler.ingest.undo import list_ingests

    assert document == [i.to_dict() for i in list_ingests(labeler.connect(path))]
    assert [(r["id"], r["kind"], r["queries"], r["retrievals"]) for r in rows] == [
        ("1", "logs", str(N), str(N * CHUNKS)), ("2", "logs", "0", str(N * CHUNKS))]
    header = ["ingest_id", "dry_run", "already_undone", "queries_removed", "queries_kept", "retrievals_removed",
              "log_lines_removed", "documents_removed", "documents_kept", "labels_removed"]
    document, rows = formats(path, "ingest", "undo", "2", "--dry-run", header=header)
    assert rows == [{key: "true" if document[key] is True else "false" if document[key] is False else str(document[key])
                     for key in header}]
    assert (rows[0]["dry_run"], rows[0]["retrievals_removed"]) == ("true", str(N * CHUNKS))
    r = run(path, "queries", "remove", "q023", "--csv")
    removed = dict(zip(*csv.reader(io.StringIO(r.stdout)), strict=True))
    assert (removed["queries_removed"], removed["retrievals_removed"]) == ("1", str(2 * CHUNKS))


def test_ingest_logs_and_corpus(team, tmp_path):
    path = tmp_path / "copy.db"
    shutil.copy(team["path"], path)
    log = tmp_path / "more.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in tiny_records(3, 2, prefix="n")))
    header = ["path", "kind", "format", "records", "new", "merged", "unchanged", "rejected", "retrievals",
              "documents_new", "documents_without_text", "rejects_path"]
    document, rows = formats(path, "ingest", "logs", str(log), header=header)
    assert document["new"] == 3  # --json ran first; --csv and --table ingest the same file again: unchanged
    assert rows == [{"path": str(log), "kind": "logs", "format": "jsonl", "records": "3", "new": "0", "merged": "0",
                     "unchanged": "3", "rejected": "0", "retrievals": "0", "documents_new": "0",
                     "documents_without_text": "0", "rejects_path": ""}]
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps(r) + "\n" for r in tiny_records(2, 1, prefix="o")))
    r = run(path, "ingest", "logs", str(log), str(other), "--csv")
    assert [row[0] for row in csv.reader(io.StringIO(r.stdout))] == ["path", str(log), str(other)]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "extra", "text": "an extra chunk"}) + "\n")
    r = run(path, "ingest", "corpus", str(corpus), "--table")
    t_header, t_rows = parse_table(r.stdout)
    assert t_header == header and t_rows[0][:5] == [str(corpus), "corpus", "jsonl", "1", "1"]


def test_topics_coverage_drift_split(team, tmp_path):
    path = tmp_path / "copy.db"
    shutil.copy(team["path"], path)
    from labeler.holdout import split_counts
    from labeler.topics import coverage, topic_summary

    db = labeler.connect(path)
    document, rows = formats(path, "topics", "show", header=["topic", "questions", "label", "medoid"], nl=True)
    summary = topic_summary(db)
    assert document == json.loads(json.dumps(summary))
    assert [(int(r["topic"]), int(r["questions"])) for r in rows] == [(t["topic"], t["questions"])
                                                                       for t in summary["topics"]]
    assert sum(int(r["questions"]) for r in rows) == N
    header = ["topic", "traffic_share", "labeled", "golden_share", "metric", "mean", "ci_low", "ci_high", "label"]
    document, rows = formats(path, "coverage", header=header)
    report = coverage(db)
    assert document == json.loads(json.dumps(report))
    assert sum(int(r["labeled"]) for r in rows) == LABELED and {r["metric"] for r in rows} == {report["specs"][0]}
    for row, t in zip(rows, report["topics"], strict=True):
        assert close(row["traffic_share"], t["traffic_share"])
    header = ["kind", "topic", "label", "questions", "occurrences", "baseline_share", "new_share", "ci_low",
              "ci_high", "grew"]
    log = tmp_path / "new.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in tiny_records(6, 2, prefix="d")))
    document, rows = formats(path, "drift", str(log), header=header)
    from labeler.topics import drift

    assert document == json.loads(json.dumps(drift(db, str(log))))
    assert [r["kind"] for r in rows] == ["topic"] * len(document["topics"]) + ["new"] * len(document["new_topics"])
    assert all(close(r["new_share"], t["new_share"]) for r, t in zip(rows, document["topics"], strict=False))
    header = ["fraction", "seed", "created_at", "labeled_dev", "labeled_holdout", "holdout_looks"]
    document, rows = formats(path, "split", header=header)
    assert document == split_counts(db) and rows == [{key: "" for key in header} | {"holdout_looks": "0"}]
    document, rows = formats(path, "split", "--holdout", "0.25", "--seed", "3", "--force", header=header)
    assert rows[0]["fraction"] == "0.25" and int(rows[0]["labeled_dev"]) + int(rows[0]["labeled_holdout"]) == LABELED
    r = run(path, "topics", "build", "--k", "3", "--seed", "2", "--csv")
    assert len(list(csv.reader(io.StringIO(r.stdout)))) - 1 == len(topic_summary(db)["topics"])


def test_stats_queue_annotators(team, tmp_path):
    path = team["path"]
    db = labeler.connect(path)
    document, rows = formats(path, "stats", header=["name", "value"])
    assert document == store.stats(db)
    values = {r["name"]: r["value"] for r in rows}
    assert (values["queries"], values["retrievals"], values["queries_log"]) == (str(N), str(2 * N * CHUNKS), str(N))
    assert values["retrievers"] == "bm25, production"
    document, rows = formats(path, "queue", header=["state", "count"])
    assert document == labels.queue_counts(db)
    assert {r["state"]: int(r["count"]) for r in rows} == document
    header = ["annotator", "role", "submitted", "skipped", "flagged", "discarded", "grades", "hours", "median_seconds"]
    document, rows = formats(path, "annotators", header=header, nl=True)
    assert [a["annotator"] for a in document] == [r["annotator"] for r in rows]
    alice = next(r for r in rows if r["annotator"] == "alice")
    assert (alice["submitted"], alice["grades"]) == (str(LABELED), str(LABELED * CHUNKS))
    copy = tmp_path / "copy.db"
    shutil.copy(path, copy)
    document, rows = formats(copy, "queue", "--order", "oldest", header=["queue_order"])
    assert document == {"queue_order": "oldest"} and rows == [{"queue_order": "oldest"}]
    document, rows = formats(copy, "queue", "--order", "stratified", header=["queue_order", "topic", "share"])
    assert [(int(r["topic"]), float(r["share"])) for r in rows] == [(int(t), v) for t, v in document["shares"].items()]
    r = run(copy, "queue", "--order", "active", "--judge-run", str(team["runs"][2]), "--budget", "5", "--csv")
    [head, row] = list(csv.reader(io.StringIO(r.stdout)))
    draw = dict(zip(head, row, strict=True))
    assert head[:2] == ["queue_order", "id"] and draw["queue_order"] == "active" and draw["population"] == str(N)


def test_users_and_audit(team, tmp_path):
    path = tmp_path / "copy.db"
    shutil.copy(team["path"], path)
    document, rows = formats(path, "users", "list", header=["name", "role", "state", "email", "may_run_llm",
                                                            "created_at"], nl=True)
    assert document == [a._asdict() for a in accounts.list_accounts(labeler.connect(path))]
    assert [(r["name"], r["role"], r["state"], r["may_run_llm"]) for r in rows] == [
        ("alice", "lead", "no password", "true"), ("lena", "lead", "password", "true")]
    r = run(path, "users", "add", "bob", "--csv")
    [head, row] = list(csv.reader(io.StringIO(r.stdout)))
    made = dict(zip(head, row, strict=True))
    assert made["name"] == "bob" and made["role"] == "annotator" and "?invite=" in made["signin_link"]
    from labeler.audit import audit_log

    header = ["at", "actor", "action", "query_id", "doc_id", "target", "old", "new"]
    document, rows = formats(path, "audit", "--annotator", "alice", "--limit", "5", header=header, nl=True)
    assert document == [e.to_dict() for e in audit_log(labeler.connect(path), annotator="alice", limit=5)]
    assert [r["action"] for r in rows] == [e["action"] for e in document] and len(rows) == 5


def test_judge_list_agreement_compare(team):
    path = team["path"]
    first, second, everything = team["runs"]
    header = ["id", "created_at", "judge", "rubric", "model", "on_set", "items", "done", "cached", "failed",
              "status", "cost"]
    document, rows = formats(path, "judge", "list", header=header, nl=True)
    assert document == [r.to_dict() for r in judge.list_runs(labeler.connect(path))]
    assert [int(r["id"]) for r in rows] == [everything, second, first]
    assert [r["items"] for r in rows] == [str(N * CHUNKS), str(LABELED * CHUNKS), str(LABELED * CHUNKS)]
    header = ["statistic", "value", "ci_low", "ci_high", "n", "human_human", "reason"]
    document, rows = formats(path, "judge", "agreement", str(first), "--resamples", "50", header=header)
    from labeler.agreement import compare_runs, run_agreement

    db = labeler.connect(path)
    result = run_agreement(db, first, n_resamples=50)
    assert document == json.loads(json.dumps({**result.to_dict(), "gate": judge.gate(db, first, agreement=result)
                                              .to_dict()}))
    names = {r["statistic"]: r for r in rows}
    assert float(names["Cohen's kappa"]["value"]) == pytest.approx(1)
    assert names["Cohen's kappa"]["n"] == str(document["cohen_kappa"]["n"]) == str(LABELED * CHUNKS)
    text = run(path, "judge", "agreement", str(first), "--resamples", "50").stdout
    assert "Cohen's kappa" in text and "cohen_kappa" not in text and "gate: " in text
    header = ["statistic", "a", "b", "difference", "ci_low", "ci_high", "n"]
    document, rows = formats(path, "judge", "compare", str(first), str(second), "--resamples", "50", header=header)
    assert document == json.loads(json.dumps(compare_runs(db, first, second, n_resamples=50).to_dict()))
    kappa = next(r for r in rows if r["statistic"] == "Cohen's kappa")
    assert close(kappa["difference"], document["difference"]["cohen_kappa"]["value"])
    assert float(kappa["a"]) == pytest.approx(1) and float(kappa["b"]) < 1


def test_judge_run_synth_llm_and_search(team, tmp_path, monkeypatch):
    path = tmp_path / "copy.db"
    shutil.copy(team["path"], path)
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("LABELER_MODEL", "fake-model")
        monkeypatch.setenv("LABELER_EMBEDDING_MODEL", "text-embedding-3-small")
        estimate = json.loads(run(path, "judge", "run", "--limit", "4", "--dry-run", "--json").stdout)["estimate"]
        document, rows = formats(path, "judge", "run", "--limit", "4", "--dry-run",
                                 header=["judge", "rubric", "on_set", "items", *estimate])
        assert rows[0]["to_request"] == str(document["estimate"]["to_request"]) and rows[0]["items"] == "4"
        r = run(path, "judge", "run", "--limit", "2", "--csv")
        [head, row] = list(csv.reader(io.StringIO(r.stdout)))
        done = dict(zip(head, row, strict=True))
        assert head[:3] == ["id", "created_at", "judge"] and (done["items"], done["status"]) == ("2", "done")
        plan = json.loads(run(path, "synth", "generate", "--n", "2", "--dry-run", "--json").stdout)
        document, rows = formats(path, "synth", "generate", "--n", "2", "--dry-run",
                                 header=["seeds", *plan["estimate"]])
        assert rows[0]["seeds"] == str(plan["seeds"]) and rows[0]["to_request"] == str(plan["estimate"]["to_request"])
        header = ["batch", "run", "state", "requests", "completed", "failed", "cost", "age", "collected_at"]
        document, rows = formats(path, "llm", "batches", "--offline", header=header, nl=True)
        assert document == [] and rows == []
        header = ["batches", "ok", "failed", "retried", "rebatched", "run_direct", "finished_runs", "waiting", "busy"]
        document, rows = formats(path, "llm", "collect", "--all", header=header)
        assert rows == [{"batches": "[]", "ok": "0", "failed": "0", "retried": "0", "rebatched": "0",
                         "run_direct": "0", "finished_runs": "[]", "waiting": "[]", "busy": "[]"}]
        document, rows = formats(path, "search", "embed", header=["embedded"])
        assert document == {"embedded": N * CHUNKS} and rows == [{"embedded": "0"}]  # --json embedded them all
        document, rows = formats(path, "search", "text", "chunk 2 about q7", "--k", "3",
                                 header=["rank", "score", "doc_id", "text"], nl=True)
        from labeler.search import search_text

        hits = search_text(labeler.connect(path), "chunk 2 about q7", 3)
        assert document == [{"doc_id": h.doc_id, "score": round(h.score, 6)} for h in hits]
        assert [(r["doc_id"], float(r["score"])) for r in rows] == [(d["doc_id"], d["score"]) for d in document]
        assert rows[0]["rank"] == "1" and rows[0]["text"].startswith("chunk")
        document, rows = formats(path, "search", "missed", "q000", "q001", "--k", "2",
                                 header=["query_id", "rank", "score", "doc_id", "text"], nl=True)
        assert [(r["query_id"], r["doc_id"]) for r in rows] == [(q, d["doc_id"]) for q, found in document.items()
                                                               for d in found]


def test_export_import_and_eval(team, tmp_path):
    path = tmp_path / "copy.db"
    shutil.copy(team["path"], path)
    header = ["path", "format", "version", "queries", "judged_pairs", "relevant_pairs", "manifest_path", "sha256"]
    r = run(path, "export", "-o", str(tmp_path / "g.jsonl"), "--csv")
    [row] = [dict(zip(header, values, strict=True)) for values in list(csv.reader(io.StringIO(r.stdout)))[1:]]
    manifest = json.loads((tmp_path / "g.jsonl.manifest.json").read_text())
    assert (row["queries"], row["sha256"], row["format"]) == (str(manifest["counts"]["queries"]), manifest["sha256"],
                                                              "jsonl")
    r = run(path, "export", "-o", "-", "--table")  # the data on stdout, the table on stderr
    assert len(r.stdout.splitlines()) == int(row["queries"]) and r.stderr.splitlines()[0].split() == header
    header = ["path", "annotator", "records", "new", "merged", "unchanged", "rejected", "rejects_path"]
    document, rows = formats(path, "import", "golden", str(tmp_path / "g.jsonl"), "--annotator", "carol",
                             header=header)
    assert rows[0]["records"] == row["queries"] and rows[0]["annotator"] == "carol"
    golden = team["folder"] / "golden.jsonl"
    header = ["metric", "mean", "ci_low", "ci_high", "n"]
    document, rows = formats(path, "eval", "--golden", str(golden), "-k", "3", "--retriever", "production",
                             header=header)
    assert [r["metric"] for r in rows] == list(document["metrics"])
    for r in rows:
        assert close(r["mean"], document["metrics"][r["metric"]]["mean"]) and r["n"] == str(
            document["metrics"][r["metric"]]["n"])
