"""Accounts: passwords, sign-in links, throttling, sessions, OIDC emails, the role rules of every
lead-only library call (refused for an annotator, nothing written), the audit trail and the CLI."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

import labeler
import labeler.labels as labels
from labeler import accounts, export, judge, llm, synth
from labeler.audit import audit_log
from labeler.cli import cli
from labeler.errors import LabelerError, RoleError

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def team(db):
    accounts.add_user(db, "lena", "lead", password="lena-password")
    accounts.add_user(db, "bob", "annotator", password="bob-password")
    return db


def snapshot(db) -> dict[str, list]:
    """Every table's rows except the append-only logs of refusals and sign-ins."""
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                       "AND name NOT IN ('signin_failures', 'audit_events')")]
    return {t: db.execute(f"SELECT * FROM [{t}]").fetchall() for t in tables}


# --- passwords and sign-in -------------------------------------------------------------------------

@pytest.mark.real_scrypt
def test_passwords_are_salted_scrypt_hashes_at_owasp_cost(team):
    assert accounts.SCRYPT_COST == {"n": 2 ** 17, "r": 8, "p": 1}
    stored = team.execute("SELECT password_hash FROM annotators WHERE name = 'lena'").fetchone()[0]
    assert stored.startswith("scrypt$131072$8$1$") and "lena-password" not in stored
    assert accounts.verify_password(stored, "lena-password")
    assert not accounts.verify_password(stored, "lena-passwort")
    assert accounts.hash_password("same") != accounts.hash_password("same")  # a fresh salt each time
    assert not accounts.verify_password(None, "")
    assert not accounts.verify_password("garbage", "x")


def test_sign_in_gives_one_message_for_a_wrong_name_or_password(team):
    assert accounts.authenticate(team, "lena", "lena-password").role == "lead"
    assert accounts.authenticate(team, "  bob ", "bob-password").name == "bob"
    for name, password in (("lena", "nope"), ("nobody", "lena-password"), ("", "")):
        with pytest.raises(accounts.SignInError, match="^wrong name or password$"):
            accounts.authenticate(team, name, password)


def test_failed_sign_ins_are_throttled_per_name_with_a_growing_delay(team, caplog):
    for i in range(accounts.FREE_FAILURES):
        with pytest.raises(accounts.SignInError, match="wrong name or password"):
            accounts.authenticate(team, "lena", "guess", now=at(i))
    # the right password waits too: 2 s after the 5th failure
    with pytest.raises(accounts.SignInError, match=r"too many failed sign-ins for lena; try again in 1 s"):
        accounts.authenticate(team, "lena", "lena-password", now=at(5))
    assert accounts.authenticate(team, "bob", "bob-password", now=at(5)).name == "bob"  # per name
    with pytest.raises(accounts.SignInError, match="wrong name or password"):
        accounts.authenticate(team, "lena", "guess", now=at(6.5))  # 6th failure: now 4 s
    with pytest.raises(accounts.SignInError, match="try again in 4 s"):
        accounts.authenticate(team, "LENA", "lena-password", now=at(6.5))  # names fold case here
    assert accounts.authenticate(team, "lena", "lena-password", now=at(10.6)).name == "lena"
    # a success clears the count
    with pytest.raises(accounts.SignInError, match="wrong name or password"):
        accounts.authenticate(team, "lena", "guess", now=at(11))
    assert any("failed sign-in for 'lena'" in r.getMessage() for r in caplog.records)


def test_the_delay_is_capped(team):
    for i in range(30):
        try:
            accounts.authenticate(team, "bob", "guess", now=at(i * 10_000))
        except accounts.SignInError:
            pass
    with pytest.raises(accounts.SignInError, match=r"try again in 900 s"):
        accounts.authenticate(team, "bob", "bob-password", now=at(29 * 10_000))


def test_shared_password_is_throttled_too(db):
    for _ in range(accounts.FREE_FAILURES):
        with pytest.raises(accounts.SignInError, match="wrong password"):
            accounts.check_shared_password(db, "guess", "s3cret", now=T0)
    with pytest.raises(accounts.SignInError, match="too many failed sign-ins for the shared password"):
        accounts.check_shared_password(db, "s3cret", "s3cret", now=T0)
    accounts.check_shared_password(db, "s3cret", "s3cret", now=at(3))


def test_a_sign_in_link_sets_the_password_once(team):
    made = accounts.add_user(team, "cara", by="lena", now=T0)
    assert made.token and made.account.invite_pending and not made.account.has_password
    stored = team.execute("SELECT invite_hash FROM annotators WHERE name = 'cara'").fetchone()[0]
    assert made.token not in stored  # only the hash is kept
    assert accounts.invite_name(team, made.token, now=at(60)) == "cara"
    with pytest.raises(LabelerError, match="at least 8 characters"):
        accounts.redeem_invite(team, made.token, "short", now=at(60))
    assert accounts.redeem_invite(team, made.token, "cara-password", now=at(60)).has_password
    with pytest.raises(accounts.SignInError, match="unknown, used or expired"):
        accounts.redeem_invite(team, made.token, "other-password", now=at(61))
    assert accounts.authenticate(team, "cara", "cara-password").name == "cara"


def test_a_sign_in_link_expires(team):
    token = accounts.add_user(team, "cara", now=T0).token
    with pytest.raises(accounts.SignInError, match="expired"):
        accounts.redeem_invite(team, token, "cara-password", now=T0 + timedelta(hours=73))
    fresh = accounts.new_invite(team, "cara", by="lena", now=T0 + timedelta(hours=73))
    assert accounts.redeem_invite(team, fresh, "cara-password", now=T0 + timedelta(hours=74)).has_password


def test_sessions_survive_a_reload_and_end_on_sign_out_password_change_or_removal(team):
    token = accounts.start_session(team, "bob", now=T0)
    assert accounts.session_account(team, token, now=at(60)).name == "bob"
    assert accounts.session_account(team, token, now=T0 + timedelta(hours=13)) is None  # expired
    assert accounts.session_account(team, "forged", now=at(60)) is None
    accounts.end_session(team, token)
    assert accounts.session_account(team, token, now=at(60)) is None
    token = accounts.start_session(team, "bob", now=T0)
    accounts.set_password(team, "bob", "new-bob-password", by="bob", now=at(1))
    assert accounts.session_account(team, token, now=at(2)) is None
    token = accounts.start_session(team, "bob", now=T0)
    accounts.remove_user(team, "bob", by="lena", now=at(1))
    assert accounts.session_account(team, token, now=at(2)) is None


def test_removed_accounts_cannot_sign_in_and_their_labels_stay(team, ingest_tiny):
    pk = ingest_tiny(team, n=1)[0]
    doc = labels.get_item(team, pk, "bob").chunks[0].doc_pk
    labels.set_grade(team, pk, doc, "bob", 2)
    accounts.remove_user(team, "bob", by="lena")
    with pytest.raises(accounts.SignInError):
        accounts.authenticate(team, "bob", "bob-password")
    assert team.execute("SELECT annotator, grade FROM relevance_labels").fetchall() == [("bob", 2)]
    assert [a.name for a in accounts.list_accounts(team)] == ["lena"]
    assert accounts.get_account(team, "bob").removed
    with pytest.raises(RoleError, match="no active account"):
        accounts.require(team, "bob", "label", "grading")


def test_the_last_lead_stays(team):
    with pytest.raises(LabelerError, match="only lead"):
        accounts.set_role(team, "lena", "annotator", by="lena")
    with pytest.raises(LabelerError, match="only lead"):
        accounts.remove_user(team, "lena")
    accounts.set_role(team, "bob", "lead", by="lena")
    assert accounts.set_role(team, "lena", "annotator", by="bob").role == "annotator"


def test_an_existing_account_is_not_overwritten(team):
    with pytest.raises(LabelerError, match="already exists"):
        accounts.add_user(team, "bob", "lead", password="stolen-password")
    assert accounts.authenticate(team, "bob", "bob-password").role == "annotator"


def test_a_name_that_labeled_before_becomes_an_account(db):
    labels.add_annotator(db, "alice")
    assert not accounts.accounts_enabled(db)
    made = accounts.add_user(db, "alice", "lead", password="alice-password")
    assert made.account.has_password and accounts.accounts_enabled(db)


def test_oidc_emails_map_to_accounts(db):
    first = accounts.account_for_email(db, "Ann@Example.com")  # nobody yet: the first becomes lead
    assert (first.name, first.role, first.email) == ("ann@example.com", "lead", "ann@example.com")
    with pytest.raises(accounts.SignInError, match="has no account here"):
        accounts.account_for_email(db, "eve@example.com")
    accounts.add_user(db, "bob", email="bob@example.com", by="ann@example.com")
    assert accounts.account_for_email(db, "BOB@example.com").name == "bob"
    labeler.set_setting(db, "oidc_create_accounts", True, by="ann@example.com")
    assert accounts.account_for_email(db, "eve@example.com").role == "annotator"


def test_exposure_needs_some_sign_in(db):
    accounts.check_exposure(db, "127.0.0.1")
    accounts.check_exposure(db, "localhost")
    accounts.check_exposure(db, "::1")
    for host in ("0.0.0.0", "192.168.1.5", "::", "example.org"):
        with pytest.raises(LabelerError, match=f"refusing to serve on {host} without sign-in"):
            accounts.check_exposure(db, host)
    accounts.check_exposure(db, "0.0.0.0", password=True)
    accounts.check_exposure(db, "0.0.0.0", oidc=True)
    accounts.add_user(db, "lena", "lead", password="lena-password")
    accounts.check_exposure(db, "0.0.0.0")


# --- every lead-only library call refuses an annotator and writes nothing ----------------------------

def _config() -> llm.LLMConfig:
    return llm.LLMConfig(model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="sk-test")


def guarded_calls(db, tmp_path, log_path, corpus_path, golden_path):
    """(what, call) for each lead-only (or LLM) action, made as ``by``."""
    return [
        ("setting", lambda by: labeler.set_setting(db, "threshold", 3, by=by)),
        ("guidelines", lambda by: labeler.set_setting(db, "guidelines", "# mine", by=by)),
        ("role via add_annotator", lambda by: labels.add_annotator(db, "bob", "lead", by=by)),
        ("add account", lambda by: accounts.add_user(db, "mallory", "lead", password="mallory-pw", by=by)),
        ("role", lambda by: accounts.set_role(db, "bob", "lead", by=by)),
        ("grant llm", lambda by: accounts.grant_llm(db, "bob", by=by)),
        ("other's password", lambda by: accounts.set_password(db, "lena", "taken-over!", by=by)),
        ("sign-in link", lambda by: accounts.new_invite(db, "lena", by=by)),
        ("remove", lambda by: accounts.remove_user(db, "lena", by=by)),
        ("ingest logs", lambda by: labeler.ingest_logs(db, log_path, by=by)),
        ("ingest corpus", lambda by: labeler.ingest_corpus(db, corpus_path, by=by)),
        ("export", lambda by: export.export_golden(db, tmp_path / "out.jsonl", by=by)),
        ("download", lambda by: export.export_archive(db, "jsonl", by=by)),
        ("import", lambda by: export.import_golden(db, golden_path, annotator="bob", by=by)),
        ("rubric", lambda by: judge.save_rubric(db, "relevance.v1", "Grade it my way.", by=by)),
        ("gate", lambda by: judge.set_gate_settings(db, min_value=0.0, by=by)),
        ("judge run", lambda by: judge.run_judge(db, _config(), "relevance.v1", by=by)),
        ("synth", lambda by: synth.generate(db, _config(), synth.SynthOptions(n=1), by=by)),
    ]


def test_every_lead_only_call_refuses_an_annotator_and_writes_nothing(team, tmp_path, ingest_tiny, write_log):
    pks = ingest_tiny(team, n=3)
    for pk in pks:
        item = labels.get_item(team, pk, "lena")
        for c in item.chunks:
            labels.set_grade(team, pk, c.doc_pk, "lena", 2)
        labels.set_status(team, pk, "lena", "submitted")
    log_path = write_log([{"query_id": "new", "question": "new?", "retrieved": [{"id": "n1", "text": "t"}]}])
    corpus_path = write_log([{"id": "c1", "text": "corpus text"}], name="corpus.jsonl")
    golden_path = write_log([{"question": "What is item q0?", "relevant_ids": ["q000-c0"]}], name="golden.jsonl")
    before = snapshot(team)
    calls = guarded_calls(team, tmp_path, log_path, corpus_path, golden_path)
    for what, call in calls:
        with pytest.raises(RoleError, match="bob is|bob is not allowed"):
            call("bob")
        assert snapshot(team) == before, what
    assert not (tmp_path / "out.jsonl").exists()
    # a removed or unknown name is refused the same way
    with pytest.raises(RoleError, match="has no active account"):
        calls[0][1]("nobody")


def test_a_granted_annotator_may_run_llm_jobs_and_nothing_else(team):
    accounts.grant_llm(team, "bob", by="lena")
    accounts.require(team, "bob", "llm", "running a judge")
    with pytest.raises(RoleError):
        accounts.require(team, "bob", "lead", "changing the gate")
    accounts.grant_llm(team, "bob", False, by="lena")
    with pytest.raises(RoleError, match="not allowed"):
        accounts.require(team, "bob", "llm", "running a judge")


def test_a_lead_and_the_local_operator_pass(team):
    labeler.set_setting(team, "threshold", 3, by="lena")
    labeler.set_setting(team, "threshold", 2)  # the CLI: holding the file is full access
    assert labeler.get_settings(team)["threshold"] == 2


# --- audit ------------------------------------------------------------------------------------------

def test_the_audit_names_who_did_what(team, ingest_tiny):
    pk = ingest_tiny(team, n=1)[0]
    doc = labels.get_item(team, pk, "bob").chunks[0].doc_pk
    labels.set_grade(team, pk, doc, "bob", 3)
    labeler.set_setting(team, "threshold", 3, by="lena")
    accounts.set_role(team, "bob", "lead", by="lena")
    events = audit_log(team)
    assert [e.at for e in events] == sorted(e.at for e in events)
    grade = next(e for e in events if e.action == "grade")
    assert (grade.actor, grade.query_id, grade.doc_id, grade.old, grade.new) == ("bob", "q000", "q000-c0", None, "3")
    assert ("lena", "role", "bob", "annotator -> lead") in [(e.actor, e.action, e.target, e.new) for e in events]
    assert {e.actor for e in audit_log(team, annotator="bob")} == {"bob"}
    assert [e.action for e in audit_log(team, annotator="lena")] == ["setting", "role"]
    assert audit_log(team, limit=1) == events[-1:]
    assert audit_log(team, since="2999-01-01") == []


# --- CLI --------------------------------------------------------------------------------------------

def run(db_path, *args, input: str | None = None):
    return CliRunner().invoke(cli, ["--db", str(db_path), *args], input=input)


def test_cli_users_and_audit(db_path):
    r = run(db_path, "users", "add", "lena", "--role", "lead", "--password-stdin", input="lena-password\n")
    assert r.exit_code == 0, r.output
    assert r.output == "added lena (lead)\n"
    r = run(db_path, "users", "add", "bob", "--url", "http://labels.internal:8501", "--json")
    made = json.loads(r.output)
    assert made["role"] == "annotator" and made["signin_link"].startswith("http://labels.internal:8501/?invite=")
    token = made["signin_link"].rsplit("=", 1)[1]
    db = labeler.connect(db_path)
    assert accounts.redeem_invite(db, token, "bob-password").name == "bob"
    listed = json.loads(run(db_path, "users", "list", "--json").output)
    assert [(a["name"], a["role"], a["has_password"]) for a in listed] == [("lena", "lead", True), ("bob", "annotator", True)]
    assert run(db_path, "users", "role", "bob", "lead").output == "bob is lead\n"
    assert run(db_path, "users", "grant-llm", "bob").output == "bob may run LLM jobs\n"
    r = run(db_path, "users", "passwd", "bob", "--password-stdin", input="bob-password-2\n")
    assert r.exit_code == 0 and accounts.authenticate(db, "bob", "bob-password-2")
    assert "?invite=" in run(db_path, "users", "passwd", "bob", "--link").output
    assert run(db_path, "users", "remove", "bob").output == "removed bob; their labels stay\n"
    r = run(db_path, "users", "remove", "lena")
    assert r.exit_code == 1 and r.output.startswith("Error: lena is the only lead") and "Traceback" not in r.output
    r = run(db_path, "users", "add", "x", "--password-stdin", input="short\n")
    assert r.exit_code == 1 and "at least 8 characters" in r.output
    events = json.loads(run(db_path, "audit", "--json").output)
    events = [e for e in events if e["action"] not in ("ingest_logs", "export")]
    assert [e["action"] for e in events] == ["account_add", "account_add", "password_set", "role", "may_run_llm",
                                            "password_set", "sign_in", "invite", "account_remove"]
    assert {e["actor"] for e in events} - {"bob"} == {accounts.local_operator()}
    text = run(db_path, "audit", "--annotator", "bob").output
    assert "password_set" in text and "sign-in link" in text


def test_ingest_export_and_import_are_audited_with_who_did_them(team, tmp_path, write_log):
    log = write_log([{"query_id": "a1", "question": "a?", "retrieved": [{"id": "d1", "text": "t"}]}])
    labeler.ingest_logs(team, log, by="lena")
    golden = write_log([{"question": "a?", "relevant_ids": ["d1"]}], name="golden.jsonl")
    export.import_golden(team, golden, annotator="bob", by="lena")
    export.export_golden(team, tmp_path / "out.jsonl")  # the local operator
    rows = [(e.actor, e.action, e.target) for e in audit_log(team) if e.query_id is None
            and e.action in ("ingest_logs", "import_golden", "export")]
    assert rows == [("lena", "ingest_logs", str(log)), ("lena", "import_golden", "bob"),
                    (accounts.local_operator(), "export", str(tmp_path / "out.jsonl"))]
