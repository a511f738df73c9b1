"""labeler.holdout: a deterministic dev/holdout split by query id, stable under re-ingest and new
labels, locked (--force + audit), carried by exports, and `labeler eval` gating on dev with the
holdout only on request (and every look counted)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import labeler
from labeler import export as E
from labeler.audit import audit_log
from labeler.cli import cli
from labeler.harness import evaluate
from labeler.holdout import HoldoutError, set_split, split_counts, split_of
from labeler.ingest import ingest_logs
from tests.conftest import tiny_records
from tests.test_report import label

N = 40


@pytest.fixture
def golden_db(file_db, write_log):
    labeler.set_setting(file_db, "overlap_fraction", 0)
    log = write_log(tiny_records(N))
    ingest_logs(file_db, log)
    for i in range(30):
        qid = f"q{i:03d}"
        label(file_db, qid, {f"{qid}-c0": 3 if i % 2 else 0, f"{qid}-c1": 2})
    file_db.log_path = log
    return file_db


def sides(db) -> dict[str, str]:
    rows = db.execute("SELECT query_id FROM queries ORDER BY query_id").fetchall()
    now = split_counts(db)["split"]
    return {q: split_of(q, now["fraction"], now["seed"]) for (q,) in rows}


def test_split_is_a_pure_function_of_seed_and_query_id():
    ids = [f"query-{i}" for i in range(4000)]
    held = [q for q in ids if split_of(q, 0.2, 7) == "holdout"]
    assert 0.17 < len(held) / len(ids) < 0.23
    assert held == [q for q in ids if split_of(q, 0.2, 7) == "holdout"]
    assert held != [q for q in ids if split_of(q, 0.2, 8) == "holdout"]
    # a larger share keeps every question already held out
    assert set(held) <= {q for q in ids if split_of(q, 0.3, 7) == "holdout"}


def test_stable_under_reingest_and_new_labels(golden_db, write_log):
    counts = set_split(golden_db, 0.25, seed=3)
    before = sides(golden_db)
    assert counts["labeled"]["dev"] + counts["labeled"]["holdout"] == 30 and counts["labeled"]["holdout"] > 0
    ingest_logs(golden_db, golden_db.log_path)  # the same file again
    ingest_logs(golden_db, write_log(tiny_records(N + 10)))  # and more traffic
    for i in range(30, N):
        label(golden_db, f"q{i:03d}", {f"q{i:03d}-c0": 2})
    after = sides(golden_db)
    assert {q: after[q] for q in before} == before
    assert split_counts(golden_db)["labeled"]["dev"] + split_counts(golden_db)["labeled"]["holdout"] == N


def test_locked_split_needs_force_and_is_audited(golden_db):
    set_split(golden_db, 0.2, seed=1)
    set_split(golden_db, 0.2, seed=1)  # the same rule again: nothing changes
    with pytest.raises(HoldoutError, match="locked.*--force"):
        set_split(golden_db, 0.3, seed=1)
    set_split(golden_db, 0.3, seed=1, force=True)
    events = [e for e in audit_log(golden_db) if e.action == "holdout split"]
    assert [e.new for e in events] == ["holdout 0.2 seed 1", "holdout 0.3 seed 1 (was 0.2 seed 1, forced)"]
    with pytest.raises(HoldoutError, match="between 0 and 1"):
        set_split(golden_db, 1.5, seed=1, force=True)


def test_split_is_for_leads(golden_db):
    from labeler.accounts import add_user
    from labeler.errors import RoleError

    add_user(golden_db, "bob", role="annotator")
    with pytest.raises(RoleError):
        set_split(golden_db, 0.2, seed=1, by="bob")


def test_exports_carry_the_split(golden_db, tmp_path):
    E.export_golden(golden_db, tmp_path / "before.jsonl", "jsonl")
    assert "split" not in json.loads((tmp_path / "before.jsonl").read_text().splitlines()[0])
    set_split(golden_db, 0.25, seed=3)
    E.export_golden(golden_db, tmp_path / "golden.jsonl", "jsonl")
    lines = [json.loads(x) for x in (tmp_path / "golden.jsonl").read_text().splitlines()]
    expected = sides(golden_db)
    assert [x["split"] for x in lines] == [expected[x["query_id"]] for x in lines]
    E.export_golden(golden_db, tmp_path / "pairs.csv", "csv")
    header, first = (tmp_path / "pairs.csv").read_text().splitlines()[:2]
    assert header.endswith(",split") and first.split(",")[-1] == expected[first.split(",")[0]]


def test_eval_gates_on_dev_and_counts_holdout_looks(golden_db, db_path, tmp_path):
    set_split(golden_db, 0.25, seed=3)
    golden = tmp_path / "golden.jsonl"
    E.export_golden(golden_db, golden, "jsonl")
    held = [q for q, s in sides(golden_db).items() if s == "holdout" and int(q[1:]) < 30]
    dev = evaluate(golden, db=golden_db)
    assert dev.report["counts"]["questions"] == 30 - len(held)
    assert dev.report["split"] == {"evaluated": "dev", "holdout_excluded": len(held)}
    assert not {r["query_id"] for r in dev.questions} & set(held)
    assert f"{len(held)} holdout questions left out" in dev.markdown
    assert split_counts(golden_db)["looks"]["count"] == 0
    peek = evaluate(golden, db=golden_db, holdout=True)
    assert {r["query_id"] for r in peek.questions} == set(held)
    assert peek.report["split"]["holdout_looks"] == 1 and "looked at 1 time(s)" in peek.markdown
    # the CLI: dev by default, --holdout counts the look in --db
    runner = CliRunner()
    out = runner.invoke(cli, ["--db", str(db_path), "eval", "--golden", str(golden), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["counts"]["questions"] == 30 - len(held)
    out = runner.invoke(cli, ["--db", str(db_path), "eval", "--golden", str(golden), "--holdout", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["split"]["holdout_looks"] == 2
    shown = runner.invoke(cli, ["--db", str(db_path), "split"])
    assert "holdout looked at 2 time(s)" in shown.output
    assert [x["what"] for x in split_counts(golden_db)["looks"]["recent"]] == [f"eval {golden}"] * 2


def test_holdout_without_a_split_is_an_error(golden_db, tmp_path):
    golden = tmp_path / "golden.jsonl"
    E.export_golden(golden_db, golden, "jsonl")
    with pytest.raises(labeler.LabelerError, match="no holdout questions: set a split"):
        evaluate(golden, db=golden_db, holdout=True)


def test_cli_split(golden_db, db_path):
    runner = CliRunner()
    assert "no split" in runner.invoke(cli, ["--db", str(db_path), "split"]).output
    out = runner.invoke(cli, ["--db", str(db_path), "split", "--holdout", "0.2", "--seed", "5", "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["split"]["seed"] == 5
    again = runner.invoke(cli, ["--db", str(db_path), "split", "--holdout", "0.3", "--seed", "5"])
    assert again.exit_code == 1 and "pass --force" in again.output
    forced = runner.invoke(cli, ["--db", str(db_path), "split", "--holdout", "0.3", "--seed", "5", "--force"])
    assert forced.exit_code == 0 and "holdout 0.3, seed 5" in forced.output
    half = runner.invoke(cli, ["--db", str(db_path), "split", "--holdout", "0.3"])
    assert half.exit_code == 2
