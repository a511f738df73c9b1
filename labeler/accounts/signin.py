"""Signing in: passwords checked against their scrypt hashes with per-name throttling, the shared
password, one-time sign-in links, identity-provider (OIDC) emails, and browser sessions.

Failed sign-ins are throttled per name: after 5 failures each further attempt must wait 2, 4, 8 ...
seconds (at most 15 minutes) after the last failure; failures are logged. Each attempt is claimed
(the wait checked, the attempt counted) in one write transaction before any hash is computed, so
parallel attempts cannot slip past the wait. Removed accounts stay out on every path (password,
link, email, typed name, session) until a lead adds them again.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from datetime import timedelta

import sqlite_utils

from .. import db as store
from ..core.names import check_name
from ..core.times import When, parse_time, stamp
from .manage import (
    FREE_FAILURES,
    MAX_DELAY_S,
    SESSION_HOURS,
    Account,
    SignInError,
    accounts_enabled,
    audit,
    check_password,
    ensure_annotator,
    get_account,
    hash_password,
    needs_rehash,
    token_hash,
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


def _claim(db: sqlite_utils.Database, key: str, shown: str, at: str) -> None:
    """Take one attempt for ``key``: in one write transaction, refuse it while the wait runs, else
    count it as a failure before any password is checked (a success clears the count). Two
    sessions signing in at once are serialised here, so N parallel guesses count N and none of
    them skips the wait."""
    with store.transaction(db):
        wait = _wait_left(db.conn, key, at)
        if wait <= 0:
            db.conn.execute("INSERT INTO signin_failures (name, failures, last_at) VALUES (?, 1, ?) "
                            "ON CONFLICT (name) DO UPDATE SET failures = failures + 1, last_at = excluded.last_at",
                            [key, at])
    if wait > 0:
        log.warning("sign-in for %r refused: throttled for %.0f s more", shown, wait)
        raise SignInError(f"too many failed sign-ins for {shown}; try again in {wait:.0f} s")


def authenticate(db: sqlite_utils.Database, name: str, password: str, *, now: When = None) -> Account:
    """The account if ``password`` is ``name``'s, else ``SignInError`` (one message for a wrong
    name or a wrong password). Throttled per name after 5 failures: a refused attempt computes no
    hash. Every failure is logged. A hash made at an older cost is replaced by one at the current
    cost (:data:`~labeler.accounts.manage.SCRYPT_COST`) once the password is right."""
    name = " ".join(str(name or "").split())
    key, at = name.casefold(), stamp(now)
    _claim(db, key, name, at)
    row = db.execute("SELECT password_hash FROM annotators WHERE name = ? AND removed_at IS NULL",
                     [name]).fetchone() if name else None
    stored, password = (row[0] if row else None), str(password or "")
    if not verify_password(stored, password):
        log.warning("failed sign-in for %r", name)
        raise SignInError("wrong name or password")
    fresh = hash_password(password) if needs_rehash(stored) else None
    with store.transaction(db):
        db.conn.execute("DELETE FROM signin_failures WHERE name = ?", [key])
        if fresh is not None:  # only if nobody changed the password meanwhile
            db.conn.execute("UPDATE annotators SET password_hash = ? WHERE name = ? AND password_hash = ?",
                            [fresh, name, stored])
        audit(db.conn, at, name, "sign_in", name, "password rehashed at the current cost" if fresh else None)
    return get_account(db, name)


def check_shared_password(db: sqlite_utils.Database, entered: str, expected: str, *, now: When = None) -> None:
    """The shared-password gate (secrets.toml ``password``), throttled like a name: ``SignInError``
    unless ``entered`` equals ``expected`` (constant-time comparison)."""
    key, at = "\x00shared password", stamp(now)
    _claim(db, key, "the shared password", at)
    if not hmac.compare_digest(str(entered or "").encode(), str(expected).encode()):
        log.warning("failed sign-in for %r", "the shared password")
        raise SignInError("wrong password")
    with store.transaction(db):
        db.conn.execute("DELETE FROM signin_failures WHERE name = ?", [key])


def redeem_invite(db: sqlite_utils.Database, token: str, password: str, *, now: When = None) -> Account:
    """Set the password of the account whose one-time sign-in token this is; the token is used up
    and the account's sessions end (the caller starts the new one)."""
    check_password(password)
    at = stamp(now)
    hashed = hash_password(password)  # before the write lock: scrypt takes a while at this cost
    with store.transaction(db):
        row = db.conn.execute("SELECT name FROM annotators WHERE invite_hash = ? AND invite_expires > ? "
                              "AND removed_at IS NULL", [token_hash(str(token or "")), at]).fetchone()
        if row is None:
            raise SignInError("this sign-in link is unknown, used or expired; ask a lead for a new one")
        db.conn.execute("UPDATE annotators SET password_hash = ?, invite_hash = NULL, invite_expires = NULL "
                        "WHERE name = ?", [hashed, row[0]])
        # a reset link is how a lost or stolen password is replaced: every other browser signs in again
        db.conn.execute("DELETE FROM sessions WHERE name = ?", [row[0]])
        audit(db.conn, at, row[0], "password_set", row[0], "sign-in link")
    return get_account(db, row[0])


def invite_name(db: sqlite_utils.Database, token: str, *, now: When = None) -> str | None:
    """Whose valid one-time sign-in token this is (None when unknown, used or expired)."""
    row = db.execute("SELECT name FROM annotators WHERE invite_hash = ? AND invite_expires > ? "
                     "AND removed_at IS NULL", [token_hash(str(token or "")), stamp(now)]).fetchone()
    return row[0] if row else None


def account_for_email(db: sqlite_utils.Database, email: str, *, now: When = None) -> Account:
    """The account of an identity provider's (OIDC) email. Unknown emails are refused, unless the
    lead allowed them in Settings (``oidc_create_accounts``: created as annotators) or no account
    exists at all yet (the first one becomes the lead). The email of a removed account is refused
    whatever the setting, until a lead adds the account again; the audit records the refusal."""
    email = str(email or "").strip().lower()
    if not email:
        raise SignInError("the identity provider gave no email")
    at = stamp(now)
    with store.transaction(db):
        conn = db.conn
        # a removed account keeps its email; an account the provider created is named by its email
        row = conn.execute("SELECT name, removed_at FROM annotators WHERE email = ? UNION ALL "
                           "SELECT name, removed_at FROM annotators WHERE name = ? AND email IS NULL",
                           [email, email]).fetchone()
        if row is not None and row[1] is not None:
            audit(conn, at, email, "sign_in_refused", row[0], "identity provider: the account was removed; "
                  "a lead can add it again")
            refused = row[0]
        else:
            refused = None
            if row is None:
                first = not accounts_enabled(db)
                if not first and not store.get_setting(db, "oidc_create_accounts"):
                    log.warning("sign-in refused for unknown email %r", email)
                    raise SignInError(f"{email} has no account here; ask a lead to add it "
                                      f"(labeler users add NAME --email {email})")
                conn.execute("INSERT INTO annotators (name, role, email, created_at) VALUES (?, ?, ?, ?)",
                             [email, "lead" if first else "annotator", email, at])
                audit(conn, at, email, "account_add", email, "identity provider")
            else:
                conn.execute("UPDATE annotators SET email = ? WHERE name = ?", [email, row[0]])
            audit(conn, at, row[0] if row else email, "sign_in", row[0] if row else email, "identity provider")
    if refused is not None:
        log.warning("sign-in refused for %r: the account %r was removed", email, refused)
        raise SignInError(f"the account of {email} was removed; ask a lead to add it again "
                          f"(labeler users add {refused} --email {email})")
    return get_account(db, row[0] if row else email)


def sign_in_by_name(db: sqlite_utils.Database, name: str, *, now: When = None) -> Account:
    """Sign in with a name alone (the app's local mode, nobody has a password): register ``name``
    on first use (the first one becomes the lead). The name of a removed account is refused until
    a lead adds it again, so typing a removed lead's name never makes anyone lead again."""
    name = check_name(" ".join(str(name or "").split()))
    at = stamp(now)
    with store.transaction(db):
        row = db.conn.execute("SELECT removed_at FROM annotators WHERE name = ?", [name]).fetchone()
        if row is not None and row[0] is not None:
            audit(db.conn, at, name, "sign_in_refused", name, "typed name: the account was removed; "
                  "a lead can add it again")
        elif row is None:
            ensure_annotator(db.conn, name, at)
    if row is not None and row[0] is not None:
        log.warning("sign-in refused for %r: the account was removed", name)
        raise SignInError(f"the account {name} was removed; ask a lead to add it again "
                          f"(labeler users add {name})")
    return get_account(db, name)


# --- sessions (the app's "stay signed in on reload") -----------------------------------------------

def start_session(db: sqlite_utils.Database, name: str, *, hours: float = SESSION_HOURS, now: When = None) -> str:
    """A new session token for ``name`` (kept by the browser as a cookie; only its hash is stored)."""
    token = secrets.token_urlsafe(32)
    at = stamp(now)
    with store.transaction(db):
        db.conn.execute("DELETE FROM sessions WHERE expires_at <= ?", [at])
        db.conn.execute("INSERT INTO sessions (token_hash, name, created_at, expires_at) VALUES (?, ?, ?, ?)",
                        [token_hash(token), check_name(name), at,
                         stamp(parse_time(at) + timedelta(hours=hours))])
    return token


def session_account(db: sqlite_utils.Database, token: str | None, *, now: When = None) -> Account | None:
    """The active account a session token belongs to, or None (unknown, expired, removed)."""
    if not token:
        return None
    row = db.execute("SELECT s.name FROM sessions s JOIN annotators a ON a.name = s.name "
                     "WHERE s.token_hash = ? AND s.expires_at > ? AND a.removed_at IS NULL",
                     [token_hash(token), stamp(now)]).fetchone()
    return get_account(db, row[0]) if row else None


def end_session(db: sqlite_utils.Database, token: str | None) -> None:
    """Sign a browser out: its session token stops working."""
    if token:
        with store.transaction(db):
            db.conn.execute("DELETE FROM sessions WHERE token_hash = ?", [token_hash(token)])
