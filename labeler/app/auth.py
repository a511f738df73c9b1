"""Who is signed in. Identity lives in the server-side session only; nothing in the URL signs anyone
in or changes who is signed in.

The modes, first match wins:

- **OIDC**: an ``[auth]`` section in ``.streamlit/secrets.toml``: ``st.login``; the identity
  provider's email is mapped to an account (``labeler.accounts.account_for_email``).
- **Accounts**: once any account has a password or a sign-in link (``labeler users add``): name and
  password, throttled per name; a one-time link (``?invite=TOKEN``) lets a new account set its
  password.
- **Shared password** (``password`` in secrets.toml, no accounts): the password, then a name.
- **Local** (nothing configured): a name, for a solo user on 127.0.0.1. A browser that connects
  from another address is refused until sign-in is set up.

Every mode keeps a server-side session (``labeler.accounts.start_session``) whose token this browser
session holds, and whose cookie makes a reload stay signed in. The session is checked again in the
database at the top of every rerun (the gate) and before every widget callback writes
(:func:`guarded`: Streamlit runs callbacks before the entry script): a password change, a reset by
sign-in link, a removal, a role change, a sign-out elsewhere or the 12 h expiry signs an open tab
out at its next action, and that action writes nothing.
"""

from __future__ import annotations

import functools
import ipaddress
import json
from collections.abc import Callable
from typing import Any, TypeVar

import streamlit as st

from labeler import accounts
from labeler.app import state, widgets
from labeler.errors import LabelerError

COOKIE = "labeler_session"
ENDED = "Your session ended (signed out elsewhere, password or role changed, account removed, or 12 hours " \
        "passed); sign in again."
F = TypeVar("F", bound=Callable[..., Any])


def _secret(key: str) -> Any:
    try:
        return st.secrets.get(key)
    except Exception:  # no secrets.toml at all: nothing configured
        return None


def cookie_script(token: str | None) -> str:
    """The script that stores (or clears) the session cookie: SameSite=Strict always, Secure when
    the page was loaded over https. The browser's own ``location.protocol`` decides, so the flag
    is right behind a TLS-terminating proxy too, where the server itself only sees http."""
    value = json.dumps(f"{COOKIE}={token or ''}; path=/; SameSite=Strict; max-age="
                       f"{int(accounts.SESSION_HOURS * 3600) if token else 0}")
    return f'<script>document.cookie = {value} + (location.protocol === "https:" ? "; Secure" : "");</script>'


def _set_cookie(token: str | None) -> None:
    # the only script this app writes into the page
    st.html(cookie_script(token), unsafe_allow_javascript=True)


def flush_cookie() -> None:
    """Write the session cookie on every run of a signed-in session (a run cut short by the next
    click may never reach the browser, so once is not enough), or clear it after a sign-out.
    Drawn on every run, so the element it needs never moves what follows it."""
    token = st.session_state.get(state.SESSION_COOKIE)
    if st.session_state.pop(state.SET_COOKIE, False) or token:
        _set_cookie(token)


def _signed_in(name: str, *, cookie: bool = True) -> None:
    """Keep ``name`` in the session and start its server-side session (and cookie, for reloads)."""
    token = accounts.start_session(state.get_db(), name)
    st.session_state[state.ANNOTATOR] = name
    st.session_state[state.SESSION_TOKEN] = token
    if cookie:
        st.session_state[state.SESSION_COOKIE] = token
        st.session_state[state.SET_COOKIE] = True


def _signed_out(why: str | None = None) -> None:
    """Forget who is signed in in this browser session (its server-side session is gone or ends)."""
    for key in (state.ANNOTATOR, state.SESSION_TOKEN, state.SESSION_COOKIE, state.CURRENT, state.PASSWORD_OK):
        st.session_state.pop(key, None)
    st.session_state[state.SET_COOKIE] = True  # clears the cookie on the next run
    if why:
        st.session_state[state.SIGNIN_ERROR] = why


def _may_use(db, account: accounts.Account) -> bool:
    """Whether this mode lets ``account`` in: once accounts exist (and no OIDC), only with a
    password; with nothing configured, only from this machine (the gate's rule, for callbacks too)."""
    if account.removed:
        return False
    if _secret("auth"):
        return True
    if accounts.accounts_enabled(db):
        return account.has_password
    return bool(_secret("password")) or _is_local()


def _adopt(db, name: str) -> bool:
    """A name in the session without a session token was put there by code on this server, never
    by a browser (AppTest drives the app so): it becomes a session now, on the mode's terms, so
    that every later action is checked like any other. No browser signed in, so no cookie."""
    account = accounts.get_account(db, name)
    if account is None and not _secret("auth") and not accounts.accounts_enabled(db):
        try:
            account = accounts.sign_in_by_name(db, name)
        except LabelerError:
            return False
    if account is None or not _may_use(db, account):
        return False
    _signed_in(account.name, cookie=False)
    return True


def signed_in(db) -> str | None:
    """The name of this browser session's account if its server-side session still holds (checked
    in the database: a few indexed reads), else None after signing this browser session out."""
    name, token = st.session_state.get(state.ANNOTATOR), st.session_state.get(state.SESSION_TOKEN)
    if not name:
        if token:
            _signed_out()
        return None
    if not token:
        if _secret("password") and not st.session_state.get(state.PASSWORD_OK) and not _secret("auth") \
                and not accounts.accounts_enabled(db):
            return None  # the shared password comes first; the gate asks for it
        if _adopt(db, name):
            return name
        _signed_out()
        return None
    account = accounts.session_account(db, token)
    if account is None or account.name != name or not _may_use(db, account):
        _signed_out(ENDED)
        return None
    return name


def guarded(fn: F) -> F:
    """Wrap a widget callback that acts for the signed-in account: it runs only while the session
    holds. Streamlit runs callbacks before the entry script, so the gate alone would check too
    late: a stale tab's click would write first. A refused callback signs the tab out and does
    nothing; the rerun that follows shows the sign-in screen."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if signed_in(state.get_db()) is None:
            return None
        return fn(*args, **kwargs)

    return run  # type: ignore[return-value]


def _cookie_token() -> str | None:
    try:
        token = st.context.cookies.get(COOKIE)
    except Exception:  # no request context
        return None
    return token if isinstance(token, str) and token else None  # AppTest has no real request


def _is_local() -> bool:
    try:
        ip = st.context.ip_address
    except Exception:  # no request context (AppTest)
        return True
    if not isinstance(ip, str):  # Streamlit reports localhost as None (and AppTest has no connection)
        return True
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def _title() -> None:
    st.title("labeler")


def _show_error() -> None:
    if error := st.session_state.pop(state.SIGNIN_ERROR, None):
        st.error(widgets.escape_markdown(error), icon=":material/error:")


# --- the forms (each writes in its callback) ------------------------------------------------------

def _password_signin() -> None:
    def go() -> None:
        db = state.get_db()
        try:
            account = accounts.authenticate(db, st.session_state.get("signin_name", ""),
                                            st.session_state.get("signin_password", ""))
        except LabelerError as e:
            st.session_state[state.SIGNIN_ERROR] = str(e)
            return
        finally:
            st.session_state.pop("signin_password", None)
        _signed_in(account.name)

    _title()
    _show_error()
    with st.form("signin"):
        st.text_input("Name", key="signin_name", max_chars=80)
        st.text_input("Password", key="signin_password", type="password")
        st.form_submit_button("Sign in", type="primary", on_click=go)
    st.caption("No password yet? Ask a lead for a sign-in link (labeler users add NAME).")


def _invite(token: str) -> None:
    db = state.get_db()
    name = accounts.invite_name(db, token)

    def go() -> None:
        first, second = st.session_state.get("invite_pw", ""), st.session_state.get("invite_pw2", "")
        st.session_state.pop("invite_pw", None)
        st.session_state.pop("invite_pw2", None)
        if first != second:
            st.session_state[state.SIGNIN_ERROR] = "The two passwords differ; type the same password twice."
            return
        try:
            account = accounts.redeem_invite(state.get_db(), token, first)
        except LabelerError as e:
            st.session_state[state.SIGNIN_ERROR] = str(e)
            return
        st.query_params.pop("invite", None)
        _signed_in(account.name)

    _title()
    _show_error()
    if name is None:
        st.error("This sign-in link is unknown, used or expired; ask a lead for a new one.")
        return
    st.write("Choose a password for your account.")
    st.text_input("Account", value=name, disabled=True, key="invite_name")
    with st.form("invite"):
        st.text_input("New password", type="password", key="invite_pw")
        st.text_input("The same password again", type="password", key="invite_pw2")
        st.form_submit_button("Set password and sign in", type="primary", on_click=go)


def _name_signin() -> None:
    def go() -> None:
        name = " ".join(st.session_state.get("signin_name", "").split())
        if name:
            try:
                account = accounts.sign_in_by_name(state.get_db(), name)
            except LabelerError as e:
                st.session_state[state.SIGNIN_ERROR] = str(e)
                return
            _signed_in(account.name)

    _title()
    _show_error()
    st.write("Sign in with your name to start labeling. Your work is saved as you go.")
    with st.form("signin"):
        st.text_input("Your name", key="signin_name", max_chars=80)
        st.form_submit_button("Start labeling", type="primary", on_click=go)


def _shared_password_ok() -> bool:
    password = _secret("password")
    if not password or st.session_state.get(state.PASSWORD_OK):
        return True

    def go() -> None:
        try:
            accounts.check_shared_password(state.get_db(), st.session_state.get("password_input", ""), str(password))
        except LabelerError as e:
            st.session_state[state.SIGNIN_ERROR] = str(e)
        else:
            st.session_state[state.PASSWORD_OK] = True
        st.session_state.pop("password_input", None)

    _title()
    _show_error()
    with st.form("password_gate"):
        st.text_input("Password", type="password", key="password_input")
        st.form_submit_button("Enter", type="primary", on_click=go)
    return False


def _oidc_name(db) -> str | None:
    """The account of the signed-in OIDC user; draws the login button (and stops) otherwise."""
    if not st.user.is_logged_in:
        _title()
        st.button("Sign in", on_click=st.login, type="primary", key="oidc_login")
        st.stop()
    try:
        return accounts.account_for_email(db, str(st.user.get("email") or "")).name
    except LabelerError as e:
        _title()
        st.error(widgets.escape_markdown(str(e)))
        st.button("Sign out", on_click=st.logout, key="oidc_logout")
        st.stop()


# --- the gate --------------------------------------------------------------------------------------

def _from_cookie(db) -> str | None:
    """Sign in from a live session cookie (a reload, a new tab): this browser passed the gate before."""
    token = _cookie_token()
    account = accounts.session_account(db, token)
    if account is None or not _may_use(db, account):
        return None
    st.session_state[state.ANNOTATOR] = account.name
    st.session_state[state.SESSION_TOKEN] = st.session_state[state.SESSION_COOKIE] = token
    st.session_state[state.PASSWORD_OK] = True
    return account.name


def current_annotator(db) -> str | None:
    """Run the gate; return the signed-in account's name, or None after drawing a sign-in screen."""
    name = signed_in(db)
    if _secret("auth"):
        if not name:
            name = _oidc_name(db)
            st.session_state.pop(state.SIGNIN_ERROR, None)  # the provider signed them in again at once
            _signed_in(name)
        return name
    if accounts.accounts_enabled(db):
        if name := name or _from_cookie(db):
            return name
        if token := st.query_params.get("invite"):
            _invite(token)
        else:
            _password_signin()
        return None
    if not _secret("password") and not _is_local():
        _title()
        st.error("This app has no sign-in set up and you are not on the machine it runs on. Ask the owner "
                 "to add accounts (labeler users add NAME) or a password in .streamlit/secrets.toml.")
        return None
    name = name or _from_cookie(db)
    if not _shared_password_ok():
        return None
    if not name:
        _name_signin()
        return None
    return name


def me() -> str:
    """The signed-in account's name (the entry point has run the gate)."""
    return st.session_state[state.ANNOTATOR]


def require_lead(what: str = "This page") -> str:
    """Stop the page unless the signed-in account is a lead (checked in the database, so a page
    opened by its URL or a session that lost the role is refused too). Returns the lead's name."""
    name = st.session_state.get(state.ANNOTATOR)
    if not name or not accounts.is_lead(state.get_db(), name):
        st.error(f"{what} is for leads only.", icon=":material/lock:")
        st.stop()
    return name


def is_lead() -> bool:
    """Whether the signed-in account is an active lead (read from the database on every call)."""
    name = st.session_state.get(state.ANNOTATOR)
    return bool(name) and accounts.is_lead(state.get_db(), name)


def may_run_llm() -> bool:
    name = st.session_state.get(state.ANNOTATOR)
    if not name:
        return False
    try:
        accounts.require(state.get_db(), name, "llm", "running LLM jobs")
    except LabelerError:
        return False
    return True


def sign_out() -> None:
    accounts.end_session(state.get_db(), st.session_state.get(state.SESSION_TOKEN) or _cookie_token())
    _signed_out()
