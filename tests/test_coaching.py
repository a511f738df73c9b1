"""The lead's Annotators table (labeler.labels.coaching), `labeler annotators --json`, and its page."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from sklearn.metrics import cohen_kappa_score
from streamlit.testing.v1 import AppTest

import labeler
from labeler import accounts
from labeler.app import state
from labeler.cli import cli
from labeler.labels import add_seconds, set_grade, set_status
from labeler.labels.coaching import annotator_performance, pairwise_agreement
from tests.conftest import tiny_records
from tests.test_app_label import APP

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
ALICE = [g % 4 for g in range(36)]  # 12 items x 3 chunks
BOB = [g if i % 5 else (g + 1) % 4 for i, g in enumerate(ALICE)]  # disagrees on every fifth chunk


def build(db, write_log) -> None:
    labeler.ingest_logs(db, write_log(tiny_records(14, 3)))
    db.execute("INSERT INTO settings (key, value) VALUES ('overlap_fraction', '1.0'), ('overlap_annotators', '3')")
    pks = [r[0] for r in db.execute("SELECT pk FROM queries ORDER BY pk")]
    docs = {q: [r[0] for r in db.execute("SELECT doc_pk FROM retrievals WHERE query_pk = ? ORDER BY rank", [q])]
            for q in pks}
    # alice: 6 items a minute apart, an hour's break, 6 more a minute apart; 30 s each, one item left
    # open 20 minutes (left out of the median)
    minutes = [0, 1, 2, 3, 4, 5, 65, 66, 67, 68, 69, 70]
    for n, (q, m) in enumerate(zip(pks[:12], minutes, strict=True)):
        at = T0 + timedelta(minutes=m)
        for d, g in zip(docs[q], ALICE[3 * n:3 * n + 3], strict=True):
            set_grade(db, q, d, "alice", g, now=at)
        add_seconds(db, q, "alice", 1200 if n == 3 else 30 + n, now=at)
        set_status(db, q, "alice", "submitted", now=at)
    # bob grades the same 12 items, all at one moment (as an import would): no time counted
    for n, q in enumerate(pks[:12]):
        for d, g in zip(docs[q], BOB[3 * n:3 * n + 3], strict=True):
            set_grade(db, q, d, "bob", g, now=T0)
        set_status(db, q, "bob", "submitted", now=T0)
    # carol: one submitted, one skipped, one flagged, one discarded
    for q, status in zip(pks[:4], ["submitted", "skipped", "flagged", "discarded"], strict=True):
        for d in docs[q] if status == "submitted" else []:
            set_grade(db, q, d, "carol", 1, now=T0)
        set_status(db, q, "carol", status, reason="unclear" if status == "flagged" else None,
                   now=T0 + timedelta(hours=5))


@pytest.fixture
def team(db, write_log):
    build(db, write_log)
    return db


def test_speed_shares_and_kappas_follow_the_documented_rules(team):
    rows = {r["annotator"]: r for r in annotator_performance(team, n_resamples=200)}
    alice, bob, carol = rows["alice"], rows["bob"], rows["carol"]
    # 10 counted gaps of a minute (the hour's break is not counted): 60 items per hour
    assert alice["items_per_hour"] == pytest.approx(60.0) and alice["active_hours"] == pytest.approx(10 / 60)
    assert alice["median_item_seconds"] == pytest.approx(sorted(30 + n for n in range(12) if n != 3)[5])
    assert alice["timed"] == 11
    assert bob["items_per_hour"] is None and bob["median_item_seconds"] is None  # imported-like
    # kappa vs the other annotators equals sklearn's on the same chunk pairs
    both = cohen_kappa_score(ALICE, BOB)
    assert alice["kappa_others"] == pytest.approx(cohen_kappa_score(ALICE + ALICE[:3], BOB + [1, 1, 1]))
    assert alice["kappa_others_n"] == 36 + 3  # 36 with bob, 3 with carol on her submitted item
    assert alice["kappa_others_low"] < alice["kappa_others"] < alice["kappa_others_high"]
    assert alice["kappa_consolidated"] is not None and alice["kappa_consolidated_n"] == 36
    assert carol["kappa_others"] is None and "fewer than 10" in carol["kappa_others_reason"]
    assert (carol["finished"], carol["skip_share"], carol["flag_share"]) == (4, 0.25, 0.25)
    pairs = {(p["first"], p["second"]): p for p in pairwise_agreement(team, n_resamples=200)}
    assert pairs[("alice", "bob")]["kappa"] == pytest.approx(both) and pairs[("alice", "bob")]["n"] == 36
    assert pairs[("alice", "carol")]["kappa"] is None


def test_items_one_annotator_submitted_change_no_kappa(team):
    """Only items two or more annotators submitted can be agreed on (the page reads just those:
    at 100k items each labeled once, 8.1 s -> 0.3 s): items alice alone submits change her counts
    and no kappa."""
    kappas = ("kappa_consolidated", "kappa_consolidated_n", "kappa_others", "kappa_others_n", "kappa_others_low")
    before = {r["annotator"]: r for r in annotator_performance(team, n_resamples=100)}
    pairs_before = pairwise_agreement(team, n_resamples=100)
    for q in [r[0] for r in team.execute("SELECT pk FROM queries ORDER BY pk")][12:]:
        for i, (d,) in enumerate(team.execute("SELECT doc_pk FROM retrievals WHERE query_pk = ? ORDER BY rank", [q])):
            set_grade(team, q, d, "alice", (i + q) % 4, now=T0 + timedelta(hours=2))
        set_status(team, q, "alice", "submitted", now=T0 + timedelta(hours=2))
    after = {r["annotator"]: r for r in annotator_performance(team, n_resamples=100)}
    assert after["alice"]["submitted"] == before["alice"]["submitted"] + 2
    for name in ("alice", "bob", "carol"):
        assert {k: after[name][k] for k in kappas} == {k: before[name][k] for k in kappas}
    assert pairwise_agreement(team, n_resamples=100) == pairs_before


def test_idle_limit_changes_what_counts(team):
    rows = {r["annotator"]: r for r in annotator_performance(team, idle_minutes=90, n_resamples=50)}
    # the hour's break now counts: 11 items over 70 minutes
    assert rows["alice"]["items_per_hour"] == pytest.approx(11 / (70 / 60))
    assert rows["alice"]["timed"] == 12


def test_cli_annotators_json_has_the_new_columns(db_path, write_log):
    db = labeler.connect(db_path)
    build(db, write_log)
    db.close()
    out = CliRunner().invoke(cli, ["--db", str(db_path), "annotators", "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["annotator"]: r for r in json.loads(out.output)}
    assert rows["alice"]["items_per_hour"] == pytest.approx(60.0)
    assert rows["alice"]["submitted"] == 12 and rows["alice"]["kappa_others"] is not None
    assert rows["carol"]["flag_share"] == 0.25


@pytest.fixture
def team_file(db_path, write_log, monkeypatch):
    db = labeler.connect(db_path)
    accounts.add_user(db, "lena", "lead", password="lena-password")
    accounts.add_user(db, "alice", "annotator", password="alice-password")
    build(db, write_log)
    db.close()
    monkeypatch.setenv("LABELER_DB", str(db_path))
    return db_path


def page(name: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[state.ANNOTATOR] = name
    at.run()
    if name == "lena":
        at.switch_page("views/annotators.py")
        at.run()
    assert not at.exception, at.exception
    return at


def test_annotators_page_for_the_lead(team_file):
    at = page("lena")
    table = at.dataframe[0].value
    alice = table[table["annotator"] == "alice"].iloc[0]
    assert alice["items per hour"] == "60.0"
    assert alice["kappa vs others"].startswith(f"{cohen_kappa_score(ALICE + ALICE[:3], BOB + [1, 1, 1]):.2f} [")
    assert table[table["annotator"] == "carol"].iloc[0]["flagged"] == "25%"
    assert table[table["annotator"] == "bob"].iloc[0]["items per hour"] == "-"
    pairs = at.dataframe[1].value
    assert "alice / bob" in list(pairs["annotators"])
    at.number_input(key="annotators_idle").set_value(90).run()
    table = at.dataframe[0].value
    assert table[table["annotator"] == "alice"].iloc[0]["items per hour"] == f"{11 / (70 / 60):.1f}"


def test_annotators_page_is_not_for_annotators(team_file):
    at = page("alice")
    assert "views/annotators.py" not in str(at._tree)
    direct = AppTest.from_file(str(__import__("pathlib").Path(APP).parent / "views" / "annotators.py"),
                               default_timeout=60)
    direct.session_state[state.ANNOTATOR] = "alice"
    direct.run()
    assert not direct.dataframe
