"""Signing in: passwords checked against their scrypt hashes with per-name throttling, the shared
password, one-time sign-in links, identity-provider (OIDC) emails, and browser sessions.

Failed sign-ins are throttled per name: after 5 failures each further attempt must wait 2, 4, 8 ...
seconds (at most 15 minutes) after the last failure; failures are logged.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from datetime import timedelta

import sqlite_utils

from .. import db as store
from ..labels._common import When, check_name, parse_time, stamp
from .manage import (
    FREE_FAILURES,
    MAX_DELAY_S,
    SESSION_HOURS,
    Account,
    SignInError,
    _check_password,
    _token_hash,
    accounts_enabled,
    audit,
    get_account,
    hash_password,
    verify_password,
)

log = logging.getLogger(__name__)


# --- signing in -----------------------------------------------------------------------------------

def _wait_left(conn, key: str, at: str) -> float:
    row = conn.execute("SELECT failures, last_at FROM signin_failures WHERE name = ?", [key]).fetchone()
    if row is None or row[0] < FREE_FAILURES:
        return 0.0
    delay = min(2.0 ** (row[0] - FREE_FAILURES + 1), MAX_DELAY_S)
    waited = (parse_time(at) - parse_time(row[1])).total_seconds()
    return max(0.0, delay - waited)


def _throttled(db: sqlite_utils.Database, key: str, shown: str, at: str) -> None:
    with store.transaction(db):
        wait = _wait_left(db.conn, key, at)
    if wait > 0:
        log.warning("sign-in for %r refused: throttled for %.0f s more", shown, wait)
        raise SignInError(f"too many failed sign-ins for {shown}; try again in {wait:.0f} s")


def _record(db: sqlite_utils.Database, key: str, shown: str, ok: bool, at: str) -> None:
    with store.transaction(db):
        if ok:
            db.conn.execute("DELETE FROM signin_failures WHERE name = ?", [key])
        else:
            db.conn.execute("INSERT INTO signin_failures (name, failures, last_at) VALUES (?, 1, ?) "
                            "ON CONFLICT (name) DO UPDATE SET failures = failures + 1, last_at = excluded.last_at",
                            [key, at])
    if not ok:
        log.warning("failed sign-in for %r", shown)


def authenticate(db: sqlite_utils.Database, name: str, password: str, *, now: When = None) -> Account:
    """The account if ``password`` is ``name``'s, else ``SignInError`` (one message for a wrong
    name or a wrong password). Throttled per name after 5 failures; every failure is logged."""
    name = " ".join(str(name or "").split())
    key, at = name.casefold(), stamp(now)
    _throttled(db, key, name, at)
    row = db.execute("SELECT password_hash FROM annotators WHERE name = ? AND removed_at IS NULL",
                     [name]).fetchone() if name else None
    ok = verify_password(row[0] if row else None, str(password or ""))
    _record(db, key, name, ok, at)
    if not ok:
        raise SignInError("wrong name or password")
    with store.transaction(db):
        audit(db.conn, at, name, "sign_in", name)
    return get_account(db, name)


def check_shared_password(db: sqlite_utils.Database, entered: str, expected: str, *, now: When = None) -> None:
    """The shared-password gate (secrets.toml ``password``), throttled like a name: ``SignInError``
    unless ``entered`` equals ``expected`` (constant-time comparison)."""
    key, at = "\x00shared password", stamp(now)
    _throttled(db, key, "the shared password", at)
    ok = hmac.compare_digest(str(entered or "").encode(), str(expected).encode())
    _record(db, key, "the shared password", ok, at)
    if not ok:
        raise SignInError("wrong password")


def redeem_invite(db: sqlite_utils.Database, token: str, password: str, *, now: When = None) -> Account:
    """Set the password of the account whose one-time sign-in token this is; the token is used up."""
    _check_password(password)
    at = stamp(now)
    with store.transaction(db):
        row = db.conn.execute("SELECT name FROM annotators WHERE invite_hash = ? AND invite_expires > ? "
                              "AND removed_at IS NULL", [_token_hash(str(token or "")), at]).fetchone()
        if row is None:
            raise SignInError("this sign-in link is unknown, used or expired; ask a lead for a new one")
        db.conn.execute("UPDATE annotators SET password_hash = ?, invite_hash = NULL, invite_expires = NULL "
                        "WHERE name = ?", [hash_password(password), row[0]])
        audit(db.conn, at, row[0], "password_set", row[0], "sign-in link")
    return get_account(db, row[0])


def invite_name(db: sqlite_utils.Database, token: str, *, now: When = None) -> str | None:
    """Whose valid one-time sign-in token this is (None when unknown, used or expired)."""
    row = db.execute("SELECT name FROM annotators WHERE invite_hash = ? AND invite_expires > ? "
                     "AND removed_at IS NULL", [_token_hash(str(token or "")), stamp(now)]).fetchone()
    return row[0] if row else None


def account_for_email(db: sqlite_utils.Database, email: str, *, now: When = None) -> Account:
    """The account of an identity provider's (OIDC) email. Unknown emails are refused, unless the
    lead allowed them in Settings (``oidc_create_accounts``: created as annotators) or no account
    exists at all yet (the first one becomes the lead)."""
    email = str(email or "").strip().lower()
    if not email:
        raise SignInError("the identity provider gave no email")
    at = stamp(now)
    with store.transaction(db):
        conn = db.conn
        row = conn.execute("SELECT name FROM annotators WHERE email = ? AND removed_at IS NULL", [email]).fetchone()
        if row is None:
            first = not accounts_enabled(db)
            if not first and not store.get_setting(db, "oidc_create_accounts"):
                log.warning("sign-in refused for unknown email %r", email)
                raise SignInError(f"{email} has no account here; ask a lead to add it "
                                  f"(labeler users add NAME --email {email})")
            if conn.execute("SELECT 1 FROM annotators WHERE name = ?", [email]).fetchone():
                conn.execute("UPDATE annotators SET email = ?, removed_at = NULL WHERE name = ?", [email, email])
            else:
                conn.execute("INSERT INTO annotators (name, role, email, created_at) VALUES (?, ?, ?, ?)",
                             [email, "lead" if first else "annotator", email, at])
            audit(conn, at, email, "account_add", email, "identity provider")
            row = (email,)
        audit(conn, at, row[0], "sign_in", row[0], "identity provider")
    return get_account(db, row[0])


# --- sessions (the app's "stay signed in on reload") -----------------------------------------------

def start_session(db: sqlite_utils.Database, name: str, *, hours: float = SESSION_HOURS, now: When = None) -> str:
    """A new session token for ``name`` (kept by the browser as a cookie; only its hash is stored)."""
    token = secrets.token_urlsafe(32)
    at = stamp(now)
    with store.transaction(db):
        db.conn.execute("DELETE FROM sessions WHERE expires_at <= ?", [at])
        db.conn.execute("INSERT INTO sessions (token_hash, name, created_at, expires_at) VALUES (?, ?, ?, ?)",
                        [_token_hash(token), check_name(name), at,
                         stamp(parse_time(at) + timedelta(hours=hours))])
    return token


def session_account(db: sqlite_utils.Database, token: str | None, *, now: When = None) -> Account | None:
    """The active account a session token belongs to, or None (unknown, expired, removed)."""
    if not token:
        return None
    row = db.execute("SELECT s.name FROM sessions s JOIN annotators a ON a.name = s.name "
                     "WHERE s.token_hash = ? AND s.expires_at > ? AND a.removed_at IS NULL",
                     [_token_hash(token), stamp(now)]).fetchone()
    return get_account(db, row[0]) if row else None


def end_session(db: sqlite_utils.Database, token: str | None) -> None:
    """Sign a browser out: its session token stops working."""
    if token:
        with store.transaction(db):
            db.conn.execute("DELETE FROM sessions WHERE token_hash = ?", [_token_hash(token)])
