"""The CLI contract: help with examples, exit codes, one-line errors, --json documents, README coverage."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from labeler.cli import cli

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


def test_every_command_is_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for name, cmd in all_commands():
        if not isinstance(cmd, click.Group) or not cmd.commands:
            assert f"labeler {name}" in readme or re.search(rf"labeler \[[^\]]*\] {name}", readme), name


def test_every_metric_name_and_alias_is_in_the_readme():
    from labeler.metrics import METRICS

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Metrics"):]
    for name, definition in METRICS.items():
        for spelling in (name, *definition.aliases):
            assert re.search(rf"`{re.escape(spelling)}(@k)?`", table), spelling


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

CREATE = {"ingest logs", "ingest corpus", "import golden", "users add", "demo", "app"}
READ = {  # command -> the arguments it needs to get as far as opening the database
    "stats": [], "annotators": [], "queue": [], "metrics": [], "export": ["-o", "golden.jsonl"],
    "audit": [], "users list": [], "users passwd": ["bob", "--link"], "users role": ["bob", "lead"],
    "users grant-llm": ["bob"], "users remove": ["bob"], "synth generate": ["--dry-run"], "synth report": [],
    "judge run": ["--dry-run"], "judge agreement": ["1"], "judge compare": ["1", "2"], "judge list": [],
    "eval": ["--golden", "golden.jsonl"],
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
    import labeler.cli

    opened = []
    monkeypatch.setattr(labeler.cli, "_streamlit", lambda db_path, *a, **kw: opened.append(db_path))
    r = run("app", "--headless", db=tmp_path / "new.db")
    assert r.exit_code == 0, r.output
    assert r.stderr == f"new database {tmp_path / 'new.db'}: add data on the Data page or with labeler ingest logs\n"
    assert opened == [str(tmp_path / "new.db")] and (tmp_path / "new.db").exists()
    assert run("app", "--headless", db=tmp_path / "new.db").stderr == ""


def test_python_dash_m(tmp_path):
    (tmp_path / "log.jsonl").write_text(json.dumps({"question": "q", "retrieved": [{"id": "a"}]}) + "\n")
    out = subprocess.run([sys.executable, "-m", "labeler", "--db", str(tmp_path / "m.db"), "ingest", "logs",
                          "log.jsonl", "--json"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["new"] == 1
    out = subprocess.run([sys.executable, "-m", "labeler", "--db", str(tmp_path / "typo.db"), "stats"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == f"Error: no database at {tmp_path / 'typo.db'}; run labeler ingest or labeler demo first\n"
