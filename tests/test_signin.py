"""Signing in under attack: 40 sessions guessing at once against the throttle (only the free
failures are hashed, then one per wait window), the cost of a hash for known and unknown names,
old hashes upgraded, and removed accounts that try to come back by email, legacy row or typed name;
sign-in links and role changes end the account's sessions."""

from __future__ import annotations

import hashlib
import threading
from datetime import datetime

import pytest

import labeler
import labeler.labels as labels
from labeler import accounts
from labeler import db as store
from labeler.accounts import manage
from labeler.audit import audit_log
from tests.test_accounts import T0, at


@pytest.fixture
def team(db):
    accounts.add_user(db, "lena", "lead", password="lena-password")
    accounts.add_user(db, "bob", "annotator", password="bob-password")
    return db

# --- the throttle under parallel guesses, and what a hash costs ----------------------------------------

class ScryptCalls:
    """Every hashlib.scrypt computation (its N), observed from outside: how many passwords were checked."""

    def __init__(self, monkeypatch):
        self.costs: list[int] = []
        self.lock = threading.Lock()
        real = hashlib.scrypt

        def counted(*args, **kwargs):
            with self.lock:
                self.costs.append(kwargs["n"])
            return real(*args, **kwargs)

        monkeypatch.setattr(hashlib, "scrypt", counted)


def guess_at_once(db_path, n: int, now: datetime) -> list[str]:
    """``n`` sessions (threads, each with its own connection) guess lena's password at the same time."""
    start, out, lock = threading.Barrier(n), [], threading.Lock()

    def guess() -> None:
        conn = labeler.connect(db_path, migrate=False)
        start.wait()
        try:
            accounts.authenticate(conn, "lena", "guess", now=now)
            result = "signed in"
        except accounts.SignInError as e:
            result = str(e)
        finally:
            conn.close()
        with lock:
            out.append(result)

    threads = [threading.Thread(target=guess) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_forty_parallel_guesses_check_only_the_free_failures_then_one_per_window(file_db, db_path, monkeypatch):
    accounts.add_user(file_db, "lena", "lead", password="lena-password")
    calls = ScryptCalls(monkeypatch)
    results = guess_at_once(db_path, 40, T0)
    assert len(calls.costs) == accounts.FREE_FAILURES  # only these were hashed and compared
    assert results.count("wrong name or password") == accounts.FREE_FAILURES
    assert sum(r.startswith("too many failed sign-ins for lena; try again in") for r in results) == 40 - 5
    for window in range(3):  # each wait that runs out lets exactly one of 40 guesses through
        T = at(sum(2.0 ** (k + 1) for k in range(window + 1)))
        results = guess_at_once(db_path, 40, T)
        assert len(calls.costs) == accounts.FREE_FAILURES + window + 1
        assert results.count("wrong name or password") == 1
        assert sum(r.startswith("too many failed sign-ins") for r in results) == 39
    failures = file_db.execute("SELECT failures FROM signin_failures WHERE name = 'lena'").fetchone()[0]
    assert failures == accounts.FREE_FAILURES + 3


def test_a_throttled_attempt_computes_no_hash_even_with_the_right_password(team, monkeypatch):
    for i in range(accounts.FREE_FAILURES):
        with pytest.raises(accounts.SignInError):
            accounts.authenticate(team, "lena", "guess", now=at(i))
    calls = ScryptCalls(monkeypatch)
    with pytest.raises(accounts.SignInError, match="too many failed sign-ins"):
        accounts.authenticate(team, "lena", "lena-password", now=at(5))
    assert calls.costs == []


def test_parallel_shared_password_guesses_are_throttled_too(file_db, db_path):
    start, out, lock = threading.Barrier(20), [], threading.Lock()

    def guess() -> None:
        conn = labeler.connect(db_path, migrate=False)
        start.wait()
        try:
            accounts.check_shared_password(conn, "guess", "s3cret", now=T0)
        except accounts.SignInError as e:
            with lock:
                out.append(str(e))
        finally:
            conn.close()

    threads = [threading.Thread(target=guess) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out.count("wrong password") == accounts.FREE_FAILURES
    assert sum(r.startswith("too many failed sign-ins for the shared password") for r in out) == 15


def test_an_unknown_name_costs_as_much_as_a_known_one(team, monkeypatch):
    calls = ScryptCalls(monkeypatch)
    for name in ("lena", "nobody"):
        with pytest.raises(accounts.SignInError, match="wrong name or password"):
            accounts.authenticate(team, name, "guess")
    assert calls.costs == [manage.SCRYPT_COST["n"]] * 2


@pytest.mark.real_scrypt
def test_an_old_hash_is_upgraded_at_the_next_successful_sign_in(team, monkeypatch):
    with monkeypatch.context() as m:  # a password set before the cost was raised
        m.setattr(manage, "SCRYPT_COST", {"n": 2 ** 14, "r": 8, "p": 1})
        accounts.set_password(team, "bob", "bob-password", by="lena")
    stored = lambda: team.execute("SELECT password_hash FROM annotators WHERE name = 'bob'").fetchone()[0]  # noqa: E731
    assert stored().startswith("scrypt$16384$8$1$") and accounts.needs_rehash(stored())
    with pytest.raises(accounts.SignInError):
        accounts.authenticate(team, "bob", "wrong-password")
    assert stored().startswith("scrypt$16384$")  # a wrong password changes nothing
    assert accounts.authenticate(team, "bob", "bob-password").name == "bob"
    assert stored().startswith("scrypt$131072$8$1$") and not accounts.needs_rehash(stored())
    assert accounts.authenticate(team, "bob", "bob-password").name == "bob"
    assert "password rehashed at the current cost" in [e.new for e in audit_log(team, annotator="bob")]


# --- removed accounts stay removed; sessions end -------------------------------------------------------

def test_a_removed_oidc_lead_does_not_come_back_with_its_role(db):
    """The first provider sign-in became lead, was promoted and removed; with "create accounts for
    unknown emails" on, the email is refused (not revived as lead) until a lead adds it again."""
    accounts.account_for_email(db, "ann@example.com", now=T0)  # the first one: lead
    labeler.set_setting(db, "oidc_create_accounts", True, by="ann@example.com")
    mal = accounts.account_for_email(db, "mal@example.com", now=T0)
    accounts.set_role(db, mal.name, "lead", by="ann@example.com")
    accounts.remove_user(db, mal.name, by="ann@example.com", now=at(1))
    for _ in range(2):
        with pytest.raises(accounts.SignInError, match="the account of mal@example.com was removed; ask a lead"):
            accounts.account_for_email(db, "MAL@example.com", now=at(2))
    account = accounts.get_account(db, "mal@example.com")
    assert account.removed and account.role == "lead"  # still removed; nothing came back
    assert [a.name for a in accounts.list_accounts(db)] == ["ann@example.com"]
    refused = [e for e in audit_log(db) if e.action == "sign_in_refused"]
    assert [(e.actor, e.target) for e in refused] == [("mal@example.com", "mal@example.com")] * 2
    assert "the account was removed" in refused[0].new
    # a lead adds it again, as an annotator: now it signs in, with that role and no grants
    accounts.add_user(db, "mal@example.com", "annotator", email="mal@example.com", by="ann@example.com")
    back = accounts.account_for_email(db, "mal@example.com", now=at(3))
    assert (back.name, back.role, back.may_run_llm) == ("mal@example.com", "annotator", False)


def test_a_removed_account_with_an_email_is_not_reborn_as_a_fresh_row(db):
    accounts.add_user(db, "ann", "lead", password="ann-password")
    accounts.add_user(db, "alice", "lead", email="alice@example.com", by="ann")
    labeler.set_setting(db, "oidc_create_accounts", True, by="ann")
    accounts.remove_user(db, "alice", by="ann")
    with pytest.raises(accounts.SignInError, match="was removed"):
        accounts.account_for_email(db, "alice@example.com")
    assert accounts.get_account(db, "alice@example.com") is None  # no new account made for it
    assert [a.name for a in accounts.list_accounts(db)] == ["ann"]
    # the lead may give the email to another account: the removed one lets go of it
    accounts.add_user(db, "alice2", email="alice@example.com", by="ann")
    assert accounts.account_for_email(db, "alice@example.com").name == "alice2"


def test_a_row_removed_by_an_older_version_is_not_revived(db):
    """Removals before this version cleared the email; the provider-made account is named by it."""
    accounts.add_user(db, "ann", "lead", password="ann-password")
    labeler.set_setting(db, "oidc_create_accounts", True, by="ann")
    accounts.account_for_email(db, "old@example.com")
    accounts.set_role(db, "old@example.com", "lead", by="ann")
    accounts.remove_user(db, "old@example.com", by="ann")
    with store.transaction(db):
        db.conn.execute("UPDATE annotators SET email = NULL WHERE name = 'old@example.com'")
    with pytest.raises(accounts.SignInError, match="was removed"):
        accounts.account_for_email(db, "old@example.com")
    assert accounts.get_account(db, "old@example.com").removed


def test_typing_a_removed_leads_name_signs_nobody_in(db):
    """Local mode (nobody has a password): a removed lead's name is refused, never lead again."""
    accounts.sign_in_by_name(db, "lena")  # the first one in: lead
    accounts.sign_in_by_name(db, "bob")
    accounts.set_role(db, "bob", "lead", by="lena")
    accounts.remove_user(db, "lena", by="bob")
    with pytest.raises(accounts.SignInError, match="the account lena was removed; ask a lead to add it again"):
        accounts.sign_in_by_name(db, "lena")
    assert labels.add_annotator(db, "lena").name == "lena"  # registering does not revive it
    assert accounts.get_account(db, "lena").removed and not accounts.is_lead(db, "lena")
    assert ("lena", "sign_in_refused") in [(e.actor, e.action) for e in audit_log(db)]
    assert accounts.sign_in_by_name(db, "cara").role == "annotator"


def test_a_sign_in_link_and_a_role_change_end_the_accounts_sessions(team):
    token = accounts.start_session(team, "bob", now=T0)
    link = accounts.new_invite(team, "bob", by="lena", now=T0)
    accounts.redeem_invite(team, link, "bob-new-password", now=at(1))
    assert accounts.session_account(team, token, now=at(2)) is None
    token = accounts.start_session(team, "bob", now=at(3))
    other = accounts.start_session(team, "lena", now=at(3))
    accounts.set_role(team, "bob", "lead", by="lena", now=at(4))
    assert accounts.session_account(team, token, now=at(5)) is None
    assert accounts.session_account(team, other, now=at(5)).name == "lena"  # only bob's sessions
