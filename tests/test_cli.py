"""The CLI contract: help with examples, exit codes, one-line errors, --json documents, docs coverage."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import labeler
from labeler.cli import cli
from tests.test_report import build

ROOT = Path(__file__).resolve().parents[1]


def all_commands(group: click.Group = cli, prefix: str = "") -> list[tuple[str, click.Command]]:
    out = []
    for name, cmd in sorted(group.commands.items()):
        full = f"{prefix}{name}"
        out.append((full, cmd))
        if isinstance(cmd, click.Group):
            out.extend(all_commands(cmd, full + " "))
    return out


def run(*args: str, db: Path | None = None, **kw):
    argv = (["--db", str(db)] if db else []) + list(args)
    return CliRunner().invoke(cli, argv, catch_exceptions=False, **kw)


@pytest.mark.parametrize("name", [n for n, _ in all_commands()])
def test_every_command_has_help_with_an_example(name):
    result = run(*name.split(), "-h")
    assert result.exit_code == 0, result.output
    assert "Example:" in result.output


def _manual() -> str:
    """The hand-written pages of docs/ (not the generated CLI reference, which lists every command by
    construction, nor the home page, a copy of the README)."""
    return "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))
                     if p.name not in ("cli.md", "index.md"))


def test_every_command_is_in_the_docs():
    manual = _manual()
    for name, cmd in all_commands():
        if not isinstance(cmd, click.Group) or not cmd.commands:
            assert f"labeler {name}" in manual or re.search(rf"labeler \[[^\]]*\] {name}", manual), (
                f"labeler {name} is described nowhere in docs/ (add it to docs/commands.md and its page)")


def test_every_metric_name_and_alias_is_in_the_docs():
    from labeler.metrics import METRICS

    page = (ROOT / "docs" / "metrics.md").read_text()
    for name, definition in METRICS.items():
        for spelling in (name, *definition.aliases):
            assert re.search(rf"`{re.escape(spelling)}(@k)?`", page), (
                f"{spelling} is not in docs/metrics.md: run python docs/generate.py")


def test_ingest_and_stats_json(tmp_path):
    log = tmp_path / "logs.jsonl"
    log.write_text(json.dumps({"question": "q", "retrieved": [{"id": "a", "text": "A"}]}) + "\n")
    db = tmp_path / "x.db"
    r = run("ingest", "logs", str(log), "--json", db=db)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["new"] == 1
    r = run("stats", "--json", db=db)
    stats = json.loads(r.output)
    assert (stats["queries"], stats["documents"], stats["retrievals"]) == (1, 1, 1)
    assert stats["queries_by_origin"] == {"log": 1, "synthetic": 0, "import": 0}


def test_db_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LABELER_DB", str(tmp_path / "env.db"))
    log = tmp_path / "logs.jsonl"
    log.write_text(json.dumps({"question": "q", "retrieved": [{"id": "a"}]}) + "\n")
    assert run("ingest", "logs", str(log)).exit_code == 0
    assert (tmp_path / "env.db").exists()
    assert json.loads(run("stats", "--json").output)["queries"] == 1


def test_user_error_is_one_clear_line_and_exit_1(tmp_path):
    r = run("ingest", "logs", str(tmp_path / "missing.jsonl"), db=tmp_path / "x.db")
    assert r.exit_code == 1
    assert r.output.strip() == f"Error: {tmp_path / 'missing.jsonl'}: no such file"
    assert "Traceback" not in r.output


def test_db_in_missing_folder_exit_1(tmp_path):
    log = tmp_path / "logs.jsonl"
    log.write_text(json.dumps({"question": "q", "retrieved": []}) + "\n")
    r = run("ingest", "logs", str(log), db=tmp_path / "nope" / "x.db")
    assert r.exit_code == 1
    assert "folder" in r.output and "does not exist" in r.output


# --- a missing database: only commands that write data of their own create it -----------------------

CREATE = {"ingest logs", "ingest corpus", "import golden", "users add", "demo", "app", "source add", "collect",
          "route set"}
READ = {  # command -> the arguments it needs to get as far as opening the database
    "stats": [], "annotators": [], "queue": [], "metrics": [], "export": ["-o", "golden.jsonl"],
    "audit": [], "users list": [], "users passwd": ["bob", "--link"], "users role": ["bob", "lead"],
    "users grant-llm": ["bob"], "users remove": ["bob"], "synth generate": ["--dry-run"], "synth report": [],
    "judge run": ["--dry-run"], "judge agreement": ["1"], "judge compare": ["1", "2"], "judge list": [],
    "judge stress": ["--dry-run"], "judge align": ["--dry-run"],
    "eval": ["--golden", "golden.jsonl"], "search text": ["okta"], "search missed": [], "search embed": [],
    "items": [],
    "topics build": [], "topics show": [], "coverage": [], "drift": ["new.jsonl"], "split": [],
    "ingest list": [], "ingest undo": ["1"], "queries remove": ["q1"],
    "llm batches": [], "llm collect": ["--all"], "llm cancel": ["batch_1"],
    "source list": [], "source remove": ["prod"], "sync": [], "push": ["prod"],
    "route show": [], "route preview": [], "route clear": [],
}


def test_every_command_either_creates_the_database_or_needs_it():
    leaves = {n for n, c in all_commands() if not isinstance(c, click.Group)}
    assert leaves == CREATE | set(READ) and not CREATE & set(READ)


@pytest.mark.parametrize("name", sorted(READ))
def test_read_command_on_a_missing_database_exits_1_and_creates_nothing(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    (tmp_path / "golden.jsonl").write_text(json.dumps({"question": "q", "relevant_ids": ["a"]}) + "\n")
    db = tmp_path / "typo.db"
    r = run(*name.split(), *READ[name], db=db)
    assert r.exit_code == 1, r.output
    if name == "eval":  # without a pipeline, eval reads the logged retrievals and says so
        assert "database " + str(db) + " does not exist: pass --pipeline" in r.output
    else:
        assert r.output == f"Error: no database at {db}; run labeler ingest or labeler demo first\n"
    assert not db.exists() and not (tmp_path / "golden.jsonl.manifest.json").exists()


def test_commands_that_write_data_create_the_database(tmp_path):
    r = run("users", "add", "alice", "--role", "lead", db=tmp_path / "a.db")
    assert r.exit_code == 0, r.output
    (tmp_path / "g.jsonl").write_text(json.dumps({"question": "q", "relevant_ids": ["a"]}) + "\n")
    r = run("import", "golden", str(tmp_path / "g.jsonl"), "--annotator", "alice", db=tmp_path / "b.db")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "a.db").exists() and (tmp_path / "b.db").exists()


def test_app_creates_a_missing_database_and_says_so(tmp_path, monkeypatch):
    import labeler.cli  # noqa: F401 - loads the command modules

    opened = []
    monkeypatch.setattr(sys.modules["labeler.cli.app"], "serve_app", lambda db_path, *a, **kw: opened.append(db_path))
    r = run("app", "--headless", db=tmp_path / "new.db")
    assert r.exit_code == 0, r.output
    assert r.stderr == f"new database {tmp_path / 'new.db'}: add data on the Data page or with labeler ingest logs\n"
    assert opened == [str(tmp_path / "new.db")] and (tmp_path / "new.db").exists()
    assert run("app", "--headless", db=tmp_path / "new.db").stderr == ""


# --- - as standard input (ingest) and standard output (export) ----------------------------------------

LOG = [{"query_id": "q1", "question": "how do I export?", "retrieved": [{"id": "a", "text": "A", "score": 0.5}]},
       {"query_id": "q2", "question": "who can cancel?", "retrieved": [{"id": "b", "text": "B"}]}]


def test_ingest_logs_reads_jsonl_from_stdin(tmp_path):
    db = tmp_path / "x.db"
    r = run("ingest", "logs", "-", db=db, input="".join(json.dumps(x) + "\n" for x in LOG))
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("<stdin>: 2 records: 2 new, 0 merged, 0 unchanged, 0 rejected; 2 retrievals")
    r = run("ingest", "logs", "-", "--json", db=db, input="".join(json.dumps(x) + "\n" for x in LOG))
    out = json.loads(r.stdout)
    assert (out["path"], out["format"], out["unchanged"]) == ("<stdin>", "jsonl", 2)  # the same data again


@pytest.mark.parametrize("text, fmt", [
    ("\n  " + json.dumps(LOG), "json"),                              # [ : a JSON array
    (json.dumps(LOG, indent=2), "json"),                             # pretty-printed, as jq prints it
    ("".join(json.dumps(x) + "\n" for x in LOG), "jsonl"),          # { and a whole JSON value on line 1
])
def test_ingest_stdin_format_from_its_first_bytes(tmp_path, text, fmt):
    r = run("ingest", "logs", "-", "--json", db=tmp_path / "x.db", input=text.encode())
    assert r.exit_code == 0, r.output
    assert (json.loads(r.stdout)["format"], json.loads(r.stdout)["new"]) == (fmt, 2)


def test_ingest_stdin_pretty_single_object_and_gzip(tmp_path):
    r = run("ingest", "logs", "-", "--json", db=tmp_path / "x.db", input=json.dumps(LOG[0], indent=2))
    assert r.exit_code == 0, r.output
    assert (json.loads(r.stdout)["format"], json.loads(r.stdout)["new"]) == ("json", 1)
    data = gzip.compress("".join(json.dumps(x) + "\n" for x in LOG).encode())
    r = run("ingest", "logs", "-", "--json", db=tmp_path / "x.db", input=data)
    assert r.exit_code == 0, r.output
    assert (json.loads(r.stdout)["format"], json.loads(r.stdout)["records"]) == ("jsonl", 2)


def test_ingest_stdin_messages_name_stdin_lines(tmp_path):
    text = json.dumps(LOG[0]) + "\n" + json.dumps({"question": ""}) + "\n"
    r = run("ingest", "logs", "-", db=tmp_path / "x.db", input=text)
    assert r.exit_code == 1
    assert "<stdin>:2: question: is empty" in r.output and "Traceback" not in r.output


def test_ingest_stdin_csv_needs_format(tmp_path):
    text = 'question,retrieved\nhow?,"[{""id"": ""a""}]"\n'
    r = run("ingest", "logs", "-", db=tmp_path / "x.db", input=text)
    assert r.exit_code == 1
    assert r.output == ("Error: <stdin>: cannot tell the format from its first character 'q' (JSON starts with "
                        "[ or {); give --format csv, tsv, jsonl, json or parquet\n")
    r = run("ingest", "logs", "-", "--format", "csv", "--json", db=tmp_path / "x.db", input=text)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["new"] == 1


def test_ingest_stdin_empty_twice_and_lenient(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run("ingest", "logs", "-", db=tmp_path / "x.db", input=" \n")
    assert r.exit_code == 1 and r.output == "Error: <stdin>: standard input is empty; pipe a log file into it\n"
    r = run("ingest", "logs", "-", "-", db=tmp_path / "x.db", input="")
    assert r.exit_code == 2 and "can be given once" in r.output
    text = json.dumps(LOG[0]) + "\n{oops\n"
    r = run("ingest", "logs", "-", "--lenient", db=tmp_path / "x.db", input=text)
    assert r.exit_code == 0, r.output
    assert "1 new" in r.output and "1 rejected" in r.output
    assert "rejected records and reasons: stdin.rejects.jsonl" in r.output
    assert json.loads((tmp_path / "stdin.rejects.jsonl").read_text())["line"] == 2


def test_ingest_corpus_reads_stdin(tmp_path):
    db = tmp_path / "x.db"
    run("ingest", "logs", "-", db=db, input="".join(json.dumps(x) + "\n" for x in LOG))
    r = run("ingest", "corpus", "-", "--json", db=db, input=json.dumps({"id": "b", "text": "B, corpus"}) + "\n")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["path"] == "<stdin>"
    assert json.loads(run("stats", "--json", db=db).stdout)["documents_without_text"] == 0


@pytest.fixture
def labeled_db(tmp_path):
    db = labeler.connect(tmp_path / "labeled.db")
    build(db, tmp_path)
    db.close()
    return tmp_path / "labeled.db"


@pytest.mark.parametrize("fmt", ["jsonl", "ragas", "csv"])
def test_export_to_stdout_is_only_the_data(labeled_db, tmp_path, monkeypatch, fmt):
    monkeypatch.chdir(tmp_path)
    r = run("export", "--format", fmt, "-o", "-", db=labeled_db)
    assert r.exit_code == 0, r.output
    assert run("export", "--format", fmt, "-o", str(tmp_path / "file"), db=labeled_db).exit_code == 0
    assert r.stdout_bytes == (tmp_path / "file").read_bytes()
    assert r.stderr.startswith(f"stdout: 4 queries, 13 judged pairs (4 relevant) as {fmt}; export version 1, sha256 ")
    assert not (tmp_path / "-").exists() and not (tmp_path / "-.manifest.json").exists()


def test_export_to_stdout_json_goes_to_stderr(labeled_db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run("export", "-o", "-", "--json", db=labeled_db)
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["query_id"] for x in r.stdout.splitlines()] == ["qa", "qb", "qc", "qd"]
    result = json.loads(r.stderr)
    assert (result["path"], result["manifest_path"], result["version"]) == ("stdout", None, 1)
    assert result["manifest"]["files"] == {"stdout": hashlib.sha256(r.stdout_bytes).hexdigest()}
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("fmt", ["trec", "beir"])
def test_export_folder_format_to_stdout_is_a_usage_error(labeled_db, tmp_path, monkeypatch, fmt):
    monkeypatch.chdir(tmp_path)
    r = run("export", "--format", fmt, "-o", "-", db=labeled_db)
    assert r.exit_code == 2
    assert f"the {fmt} format writes a folder" in r.output and not (tmp_path / "-").exists()


def test_invalid_lines_listed_and_nothing_written(tmp_path):
    log = tmp_path / "bad.jsonl"
    log.write_text('{"question": "ok", "retrieved": []}\n{"question": ""}\n')
    db = tmp_path / "x.db"
    r = run("ingest", "logs", str(log), db=db)
    assert r.exit_code == 1
    assert f"{log}:2: question: is empty" in r.output
    assert json.loads(run("stats", "--json", db=db).output)["queries"] == 0


def test_usage_error_exit_2(tmp_path):
    r = run("ingest", "logs", db=tmp_path / "x.db")
    assert r.exit_code == 2
    r = run("ingest", "logs", "x.jsonl", "--format", "xml", db=tmp_path / "x.db")
    assert r.exit_code == 2


def test_bad_map_is_a_user_error(tmp_path):
    log = tmp_path / "a.jsonl"
    log.write_text("{}\n")
    r = run("ingest", "logs", str(log), "--map", "nonsense", db=tmp_path / "x.db")
    assert r.exit_code == 1
    assert "expected FIELD=PATH" in r.output


def test_lenient_reports_rejects_file(tmp_path):
    log = tmp_path / "a.jsonl"
    log.write_text('{"question": "ok", "retrieved": []}\n{oops\n')
    r = run("ingest", "logs", str(log), "--lenient", db=tmp_path / "x.db")
    assert r.exit_code == 0
    assert "1 new" in r.output and "1 rejected" in r.output
    assert (tmp_path / "a.jsonl.rejects.jsonl").exists()


def test_demo_builds_database_without_app(tmp_path):
    db = tmp_path / "demo.db"
    r = run("demo", "--no-app", db=db)
    assert r.exit_code == 0, r.output
    stats = json.loads(run("stats", "--json", db=db).output)
    assert stats["queries"] >= 150 and stats["documents"] >= 80
    again = run("demo", "--no-app", db=db)
    assert "already built" in again.output


def test_python_dash_m(tmp_path):
    out = subprocess.run([sys.executable, "-m", "labeler", "--db", str(tmp_path / "m.db"), "ingest", "logs", "-",
                          "--json"], input=json.dumps(LOG[0]) + "\n", capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["new"] == 1
    out = subprocess.run([sys.executable, "-m", "labeler", "--db", str(tmp_path / "typo.db"), "stats"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == f"Error: no database at {tmp_path / 'typo.db'}; run labeler ingest or labeler demo first\n"
