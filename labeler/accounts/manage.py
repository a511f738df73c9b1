"""Accounts and the role rules: who may sign in, with which password, and what each role may do.

An account is a row of ``annotators`` with a role (``annotator`` or ``lead``), an optional salted
``hashlib.scrypt`` password hash, an optional OIDC email and the grant ``may_run_llm``. Once any
account has a password, a pending sign-in link or an email, the app asks for name and password
(or the identity provider) and nothing else signs anyone in.

Roles are checked here, in the library call that acts, not by hiding a page: every lead-only
function takes ``by=NAME`` (the signed-in account) and calls :func:`require`. ``by=None`` is the
local operator (the CLI, or Python with the database file in hand: holding the file is already
full access); the app always passes the signed-in account.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import logging
import secrets
import sqlite3
from datetime import timedelta
from typing import NamedTuple

import sqlite_utils

from .. import db as store
from ..core.names import ROLES, check_name
from ..core.times import When, parse_time, stamp
from ..errors import LabelerError, LabelError, RoleError

log = logging.getLogger(__name__)

PERMISSIONS = ("lead", "llm", "label")
MIN_PASSWORD = 8
FREE_FAILURES = 5
MAX_DELAY_S = 900.0
INVITE_HOURS = 72
SESSION_HOURS = 12
# OWASP's current recommendation for scrypt (about 0.4 s per hash on a small server: measured by
# tests/bench/bench_signin.py). The test suite lowers it in one fixture; everything reads it here.
SCRYPT_COST = {"n": 2 ** 17, "r": 8, "p": 1}


class SignInError(LabelerError):
    """A sign-in was refused: wrong name or password, throttled, unknown email, expired link."""


class Account(NamedTuple):
    name: str
    role: str
    email: str | None
    may_run_llm: bool
    has_password: bool
    invite_pending: bool
    removed: bool
    created_at: str


class NewAccount(NamedTuple):
    account: Account
    token: str | None  # the one-time sign-in token when no password was given


_COLS = ("name, role, email, may_run_llm, password_hash IS NOT NULL, "
         "invite_hash IS NOT NULL AND invite_expires > ?, removed_at IS NOT NULL, created_at")


def _row_to_account(row: tuple) -> Account:
    name, role, email, llm_ok, has_pw, invite, removed, created = row
    return Account(name, role, email, bool(llm_ok), bool(has_pw), bool(invite), bool(removed), created)


def get_account(db: sqlite_utils.Database, name: str, *, now: When = None) -> Account | None:
    """The account called ``name`` (removed ones too), or None."""
    row = db.execute(f"SELECT {_COLS} FROM annotators WHERE name = ?", [stamp(now), check_name(name)]).fetchone()
    return _row_to_account(row) if row else None


def list_accounts(db: sqlite_utils.Database, *, include_removed: bool = False, now: When = None) -> list[Account]:
    """Every account in the order they joined (removed ones only with ``include_removed``)."""
    where = "" if include_removed else "WHERE removed_at IS NULL"
    return [_row_to_account(r) for r in db.execute(
        f"SELECT {_COLS} FROM annotators {where} ORDER BY created_at, name", [stamp(now)])]


def accounts_enabled(db: sqlite_utils.Database) -> bool:
    """True once any active account has a password, a pending sign-in link or an OIDC email: from
    then on the app asks for credentials and a typed name alone signs nobody in."""
    return db.execute("SELECT 1 FROM annotators WHERE removed_at IS NULL AND (password_hash IS NOT NULL "
                      "OR invite_hash IS NOT NULL OR email IS NOT NULL) LIMIT 1").fetchone() is not None


# --- passwords ----------------------------------------------------------------------------------

def _scrypt(password: str, salt: bytes, n: int, r: int, p: int, dklen: int = 32) -> bytes:
    # hashlib's default memory limit (32 MiB) is below what N=2**17, r=8 needs (128 MiB)
    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=dklen,
                          maxmem=128 * r * (n + p + 2) + 2 ** 20)


def hash_password(password: str) -> str:
    """A salted scrypt hash at the current cost (:data:`SCRYPT_COST`): ``scrypt$N$r$p$salt$hash`` (hex)."""
    n, r, p = SCRYPT_COST["n"], SCRYPT_COST["r"], SCRYPT_COST["p"]
    salt = secrets.token_bytes(16)
    return f"scrypt${n}${r}${p}${salt.hex()}${_scrypt(password, salt, n, r, p).hex()}"


def _dummy_hash() -> str:
    # compared against when the name is unknown, at the current cost, so that a wrong name takes
    # as long as a wrong password
    return f"scrypt${SCRYPT_COST['n']}${SCRYPT_COST['r']}${SCRYPT_COST['p']}$" + "00" * 16 + "$" + "00" * 32


def verify_password(stored: str | None, password: str) -> bool:
    """Whether ``password`` matches ``stored`` (constant-time comparison of the scrypt digests)."""
    try:
        _, n, r, p, salt, digest = (stored or _dummy_hash()).split("$")
        got = _scrypt(password, bytes.fromhex(salt), int(n), int(r), int(p), len(digest) // 2)
    except (ValueError, TypeError, MemoryError):
        return False
    return hmac.compare_digest(got.hex(), digest) and stored is not None


def needs_rehash(stored: str | None) -> bool:
    """Whether ``stored`` was made at another cost than :data:`SCRYPT_COST` (then the next
    successful sign-in stores a fresh hash of the password just checked)."""
    parts = (stored or "").split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        return False
    return parts[1:4] != [str(SCRYPT_COST["n"]), str(SCRYPT_COST["r"]), str(SCRYPT_COST["p"])]


def check_password(password: object) -> str:
    if not isinstance(password, str) or len(password) < MIN_PASSWORD:
        raise LabelerError(f"a password needs at least {MIN_PASSWORD} characters")
    return password


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# --- the role check -------------------------------------------------------------------------------

def local_operator() -> str:
    """How the audit names the local operator (CLI / Python): ``local:<OS user>``."""
    try:
        return f"local:{getpass.getuser()}"
    except Exception:  # noqa: BLE001 - no user name in this environment
        return "local"


def require(db: sqlite_utils.Database, by: str | None, permission: str, action: str) -> None:
    """Refuse ``action`` unless ``by`` may do it: ``lead`` (leads only), ``llm`` (leads, and
    annotators granted "may run LLM jobs"), ``label`` (any active account). ``by=None`` is the
    local operator and may do everything. Raises ``RoleError`` naming the action and the fix."""
    if permission not in PERMISSIONS:
        raise ValueError(f"unknown permission {permission!r}")
    if by is None:
        return
    row = db.execute("SELECT role, may_run_llm, removed_at FROM annotators WHERE name = ?",
                     [str(by).strip()]).fetchone()
    if row is None or row[2] is not None:
        log.warning("refused %s: %r has no active account", action, by)
        raise RoleError(f"{action}: {by} has no active account; sign in again")
    role, llm_ok, _ = row
    if permission == "lead" and role != "lead":
        log.warning("refused %s: %r is an annotator", action, by)
        raise RoleError(f"{action} is for leads only; {by} is an annotator (a lead can change roles in "
                        "Settings or with `labeler users role`)")
    if permission == "llm" and role != "lead" and not llm_ok:
        log.warning("refused %s: %r may not run LLM jobs", action, by)
        raise RoleError(f"{action} costs money and is for leads, or annotators a lead allowed to run LLM "
                        f"jobs; {by} is not allowed (Settings, or `labeler users grant-llm`)")


def is_lead(db: sqlite_utils.Database, name: str | None) -> bool:
    """Whether ``name`` is an active lead (``None``, the local operator, counts as one)."""
    if name is None:
        return True
    row = db.execute("SELECT role FROM annotators WHERE name = ? AND removed_at IS NULL", [name]).fetchone()
    return row is not None and row[0] == "lead"


def audit(conn, at: str, by: str | None, action: str, target: str | None, detail: str | None = None) -> None:
    """Append one row to ``audit_events`` (account, role, settings and data actions)."""
    conn.execute("INSERT INTO audit_events (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)",
                 [at, by if by is not None else local_operator(), action, target, detail])


# --- managing accounts ----------------------------------------------------------------------------

def ensure_annotator(conn: sqlite3.Connection, name: str, at: str) -> None:
    """Register ``name`` on first use; the first annotator of a project without a lead is the lead."""
    if conn.execute("SELECT 1 FROM annotators WHERE name = ?", [name]).fetchone():
        return
    has_lead = conn.execute("SELECT 1 FROM annotators WHERE role = 'lead' LIMIT 1").fetchone()
    conn.execute("INSERT INTO annotators (name, role, created_at) VALUES (?, ?, ?)",
                 [name, "annotator" if has_lead else "lead", at])


def _lead_count(conn) -> int:
    return conn.execute("SELECT count(*) FROM annotators WHERE role = 'lead' AND removed_at IS NULL").fetchone()[0]


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise LabelerError(f"role {role!r} is unknown; use one of: {', '.join(ROLES)}")
    return role


def _new_invite(conn, name: str, at: str, hours: float) -> str:
    token = secrets.token_urlsafe(24)
    expires = stamp(parse_time(at) + timedelta(hours=hours))
    conn.execute("UPDATE annotators SET invite_hash = ?, invite_expires = ? WHERE name = ?",
                 [token_hash(token), expires, name])
    return token


def add_user(db: sqlite_utils.Database, name: str, role: str = "annotator", *, password: str | None = None,
             email: str | None = None, by: str | None = None, invite_hours: float = INVITE_HOURS,
             now: When = None) -> NewAccount:
    """Create an account (a lead's action). Without ``password`` a one-time sign-in token is made
    (valid ``invite_hours``) with which the person sets their own password; it is returned once and
    only its hash is stored. A name that already labeled (registered without a password) becomes
    an account; an existing account is an error (use :func:`set_password` / :func:`set_role`)."""
    name = check_name(name)
    _check_role(role)
    if password is not None:
        check_password(password)
    email = email.strip().lower() if email and email.strip() else None
    at = stamp(now)
    hashed = hash_password(password) if password else None  # before the write lock (scrypt is slow)
    with store.transaction(db):
        require(db, by, "lead", "adding an account")
        conn = db.conn
        row = conn.execute("SELECT password_hash, invite_hash, email, removed_at FROM annotators WHERE name = ?",
                           [name]).fetchone()
        if row and row[3] is None and (row[0] or row[1] or row[2]):
            raise LabelerError(f"account {name} already exists; use `labeler users passwd {name}` or "
                               f"`labeler users role {name} ROLE`")
        other = conn.execute("SELECT name, removed_at FROM annotators WHERE email = ? AND name != ?",
                             [email, name]).fetchone() if email else None
        if other and other[1] is None:
            raise LabelerError(f"email {email} belongs to another account")
        if other:  # a removed account kept the email so that it could not sign in with it: now it is this one's
            conn.execute("UPDATE annotators SET email = NULL WHERE name = ?", [other[0]])
        if row is None:
            conn.execute("INSERT INTO annotators (name, role, created_at) VALUES (?, ?, ?)", [name, role, at])
        else:
            conn.execute("UPDATE annotators SET role = ?, removed_at = NULL WHERE name = ?", [role, name])
        conn.execute("UPDATE annotators SET password_hash = ?, email = ? WHERE name = ?",
                     [hashed, email, name])
        token = None if password else _new_invite(conn, name, at, invite_hours)
        audit(conn, at, by, "account_add", name, f"role={role}" + (f" email={email}" if email else ""))
    return NewAccount(get_account(db, name, now=at), token)


def set_password(db: sqlite_utils.Database, name: str, password: str, *, by: str | None = None,
                 now: When = None) -> None:
    """Set ``name``'s password (by themself or a lead); their other sessions end."""
    name = check_name(name)
    check_password(password)
    at = stamp(now)
    hashed = hash_password(password)  # before the write lock (scrypt is slow)
    with store.transaction(db):
        if by is None or by != name:
            require(db, by, "lead", "setting another person's password")
        conn = db.conn
        if not conn.execute("SELECT 1 FROM annotators WHERE name = ? AND removed_at IS NULL", [name]).fetchone():
            raise LabelerError(f"no account {name}; add it with `labeler users add {name}`")
        conn.execute("UPDATE annotators SET password_hash = ?, invite_hash = NULL, invite_expires = NULL "
                     "WHERE name = ?", [hashed, name])
        conn.execute("DELETE FROM sessions WHERE name = ?", [name])
        audit(conn, at, by, "password_set", name)


def new_invite(db: sqlite_utils.Database, name: str, *, by: str | None = None, hours: float = INVITE_HOURS,
               now: When = None) -> str:
    """A fresh one-time sign-in token for ``name`` (a lead's action); the old one stops working."""
    name = check_name(name)
    at = stamp(now)
    with store.transaction(db):
        require(db, by, "lead", "making a sign-in link")
        if not db.conn.execute("SELECT 1 FROM annotators WHERE name = ? AND removed_at IS NULL", [name]).fetchone():
            raise LabelerError(f"no account {name}; add it with `labeler users add {name}`")
        token = _new_invite(db.conn, name, at, hours)
        audit(db.conn, at, by, "invite", name)
    return token


def _active_role(conn, name: str) -> str:
    """The role of the active account ``name``, or a LabelerError saying how to add it."""
    row = conn.execute("SELECT role FROM annotators WHERE name = ? AND removed_at IS NULL", [name]).fetchone()
    if row is None:
        raise LabelerError(f"no account {name}; add it with `labeler users add {name}`")
    return row[0]


def _keep_a_lead(conn, name: str, role: str) -> None:
    if role == "lead" and _lead_count(conn) <= 1:
        raise LabelError(f"{name} is the only lead; make someone else lead first")


def set_role(db: sqlite_utils.Database, name: str, role: str, *, by: str | None = None, now: When = None) -> Account:
    """Change ``name``'s role (a lead's action); their sessions end. The last lead cannot be demoted."""
    name = check_name(name)
    _check_role(role)
    at = stamp(now)
    with store.transaction(db):
        require(db, by, "lead", "changing roles")
        conn = db.conn
        old = _active_role(conn, name)
        if old != role:
            _keep_a_lead(conn, name, old)
            conn.execute("UPDATE annotators SET role = ? WHERE name = ?", [role, name])
            # an open tab of theirs signs in again, so no page drawn for the old role acts on
            conn.execute("DELETE FROM sessions WHERE name = ?", [name])
            audit(conn, at, by, "role", name, f"{old} -> {role}")
    return get_account(db, name)


def grant_llm(db: sqlite_utils.Database, name: str, allowed: bool = True, *, by: str | None = None,
              now: When = None) -> Account:
    """Allow (or stop) an annotator running paid LLM jobs (judge and synth runs); a lead's action."""
    name = check_name(name)
    at = stamp(now)
    with store.transaction(db):
        require(db, by, "lead", "granting LLM runs")
        cur = db.conn.execute("UPDATE annotators SET may_run_llm = ? WHERE name = ? AND removed_at IS NULL",
                              [int(bool(allowed)), name])
        if not cur.rowcount:
            raise LabelerError(f"no account {name}; add it with `labeler users add {name}`")
        audit(db.conn, at, by, "may_run_llm", name, str(bool(allowed)).lower())
    return get_account(db, name)


def remove_user(db: sqlite_utils.Database, name: str, *, by: str | None = None, now: When = None) -> None:
    """Remove ``name``'s account (a lead's action): they can no longer sign in, by password, link,
    identity provider (the email stays on the removed account, refused) or typed name, until a
    lead adds the account again (:func:`add_user`); their sessions end; their labels stay,
    attributed to them. The last lead cannot be removed."""
    name = check_name(name)
    at = stamp(now)
    with store.transaction(db):
        require(db, by, "lead", "removing an account")
        conn = db.conn
        _keep_a_lead(conn, name, _active_role(conn, name))
        conn.execute("UPDATE annotators SET removed_at = ?, password_hash = NULL, invite_hash = NULL, "
                     "invite_expires = NULL, may_run_llm = 0 WHERE name = ?", [at, name])
        conn.execute("DELETE FROM sessions WHERE name = ?", [name])
        conn.execute("UPDATE assignments SET state = 'released', lease_expires = NULL "
                     "WHERE annotator = ? AND state = 'leased'", [name])
        audit(conn, at, by, "account_remove", name)


def check_exposure(db: sqlite_utils.Database, host: str, *, password: bool = False, oidc: bool = False) -> None:
    """Refuse to serve the app beyond this machine (``host`` other than a loopback address) while
    nobody needs to sign in: no account with a password or link, no shared password, no OIDC."""
    import ipaddress

    name = host.strip().strip("[]")
    try:
        loopback = name == "localhost" or ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not (password or oidc or accounts_enabled(db)):
        raise LabelerError(f"refusing to serve on {host} without sign-in: anyone who can reach it would become "
                           "lead; add an account first (labeler users add NAME --role lead), or set password "
                           "or [auth] in .streamlit/secrets.toml")
