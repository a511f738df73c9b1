"""Who is labeling: the optional password gate, OIDC via st.login, and the name sign-in.

- ``password`` in ``.streamlit/secrets.toml``: nothing (no page, no data) is shown until the
  password is entered; it is compared with ``hmac.compare_digest``.
- an ``[auth]`` section: sign-in with ``st.login`` (OIDC); the annotator is ``st.user.email``.
- otherwise: the annotator types their name; it is kept in the session and in the URL
  (``?annotator=``) so a reload resumes where they were.
"""

from __future__ import annotations

import hmac
from typing import Any

import streamlit as st

import labeler.labels as labels
from labeler.app import state


def _secret(key: str) -> Any:
    try:
        return st.secrets.get(key)
    except Exception:  # no secrets.toml at all: nothing configured
        return None


def _password_ok() -> bool:
    password = _secret("password")
    if not password:
        return True
    if st.session_state.get(state.PASSWORD_OK):
        return True
    st.title("labeler")
    entered = st.text_input("Password", type="password", key="password_input")
    if entered:
        if hmac.compare_digest(entered.encode(), str(password).encode()):
            st.session_state[state.PASSWORD_OK] = True
            st.session_state.pop("password_input", None)
            st.rerun()
        st.error("Wrong password.")
    return False


def _oidc_user() -> str | None:
    """The signed-in email when OIDC is configured; stops the script at the login button otherwise."""
    if not _secret("auth"):
        return None
    if not st.user.is_logged_in:
        st.title("labeler")
        st.button("Sign in", on_click=st.login, type="primary", key="oidc_login")
        st.stop()
    return str(st.user.get("email") or st.user.get("name") or "user")


def _sign_in(db) -> None:
    def start() -> None:
        name = " ".join(st.session_state.get("signin_name", "").split())
        if name:
            st.session_state[state.ANNOTATOR] = name
            st.query_params["annotator"] = name

    st.title("labeler")
    st.write("Sign in with your name to start labeling. Your work is saved as you go.")
    with st.form("signin"):
        st.text_input("Your name", key="signin_name", max_chars=80)
        st.form_submit_button("Start labeling", type="primary", on_click=start)


def current_annotator(db) -> str | None:
    """Run the gates; return the annotator's name, or None after drawing the sign-in screen."""
    if not _password_ok():
        return None
    email = _oidc_user()
    if email:
        st.session_state[state.ANNOTATOR] = email
    name = st.session_state.get(state.ANNOTATOR) or st.query_params.get("annotator")
    if not name:
        _sign_in(db)
        return None
    st.session_state[state.ANNOTATOR] = name
    if labels.get_role(db, name) is None:
        labels.add_annotator(db, name)
    return name


def sign_out() -> None:
    st.session_state.pop(state.ANNOTATOR, None)
    st.session_state.pop(state.CURRENT, None)
    st.query_params.pop("annotator", None)
