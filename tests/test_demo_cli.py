"""After ``labeler demo``, the next command in the same folder finds the demo's database, or says
which file it is and the ``--db`` to pass."""

from __future__ import annotations

import json

from click.testing import CliRunner

from labeler.cli import cli


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_metrics_after_demo_names_the_demo_database_and_the_command_that_opens_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LABELER_DB", raising=False)
    built = _run("demo", "--no-app")
    assert built.exit_code == 0, built.output
    assert (tmp_path / "labeler-demo.db").is_file() and not (tmp_path / "labeler.db").exists()

    after = _run("metrics")
    assert after.exit_code == 1
    assert after.output == ("Error: no database at labeler.db; labeler demo built labeler-demo.db here: pass "
                            "--db labeler-demo.db (labeler --db labeler-demo.db metrics)\n")
    assert not (tmp_path / "labeler.db").exists()  # the hint did not create an empty database either

    # the command the error gives works as written
    again = _run("--db", "labeler-demo.db", "metrics", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["n_queries"] == 50  # the demo's 50 labeled questions


def test_a_missing_database_without_a_demo_beside_it_keeps_the_plain_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LABELER_DB", raising=False)
    r = _run("metrics")
    assert r.exit_code == 1
    assert r.output == "Error: no database at labeler.db; run labeler ingest or labeler demo first\n"


def test_a_nested_command_gets_the_hint_with_its_full_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LABELER_DB", raising=False)
    assert _run("demo", "--no-app").exit_code == 0
    r = _run("judge", "list")
    assert r.exit_code == 1
    assert "(labeler --db labeler-demo.db judge list)" in r.output
