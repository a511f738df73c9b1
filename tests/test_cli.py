"""The CLI contract: help with examples, exit codes, one-line errors, --json documents, README coverage."""

from __future__ import annotations

import json
import re
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
    assert run("stats").exit_code == 0
    assert (tmp_path / "env.db").exists()


def test_user_error_is_one_clear_line_and_exit_1(tmp_path):
    r = run("ingest", "logs", str(tmp_path / "missing.jsonl"), db=tmp_path / "x.db")
    assert r.exit_code == 1
    assert r.output.strip() == f"Error: {tmp_path / 'missing.jsonl'}: no such file"
    assert "Traceback" not in r.output


def test_db_in_missing_folder_exit_1(tmp_path):
    r = run("stats", db=tmp_path / "nope" / "x.db")
    assert r.exit_code == 1
    assert "folder" in r.output and "does not exist" in r.output


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
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "labeler", "--db", str(tmp_path / "m.db"), "stats", "--json"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["queries"] == 0
