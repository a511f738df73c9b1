"""Sessions in the app, attacked from a tab left open: after each of the six ways a session ends
(password change, reset by sign-in link, removal, role change, sign-out elsewhere, 12 h expiry)
the tab's next click or grade writes nothing and shows the sign-in screen; a removed lead's typed
name is refused; every widget callback in the app is ``auth.guarded`` (an AST check); the session
cookie is SameSite=Strict, and Secure over https."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from labeler import accounts
from labeler import db as store
from labeler.app import auth, state, widgets
from tests.test_app_label import APP, RECORDS, Widget, make_db
from tests.test_app_roles import signed_out, with_team

# --- an open tab whose session ended: its next action writes nothing -------------------------------

@pytest.fixture
def team_labels(tmp_path, monkeypatch):
    path = make_db(tmp_path, RECORDS)
    with_team(path)
    monkeypatch.setenv("LABELER_DB", str(path))
    return path


def labels_written(path) -> dict[str, list]:
    db = store.connect(path)
    return {t: db.execute(f"SELECT * FROM {t}").fetchall()
            for t in ("label_events", "relevance_labels", "query_labels")}


def signed_in_tab(name: str, password: str) -> AppTest:
    """A tab that signed in through the form, as a browser does."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.text_input(key="signin_name").input(name)
    at.text_input(key="signin_password").input(password)
    at.button(key="FormSubmitter:signin-Sign in").click().run()
    assert not at.exception and at.session_state[state.ANNOTATOR] == name
    return at


def _password_change(db, tab):
    accounts.set_password(db, "bob", "bob-new-password", by="bob")


def _link_reset(db, tab):
    accounts.redeem_invite(db, accounts.new_invite(db, "bob", by="lena"), "bob-new-password")


def _removal(db, tab):
    accounts.remove_user(db, "bob", by="lena")


def _role_change(db, tab):
    accounts.set_role(db, "bob", "lead", by="lena")


def _sign_out_elsewhere(db, tab):
    # another tab of the same browser (the same session) clicks Sign out
    other = AppTest.from_file(APP, default_timeout=60)
    other.session_state[state.ANNOTATOR] = "bob"
    other.session_state[state.SESSION_TOKEN] = tab.session_state[state.SESSION_TOKEN]
    other.run()
    other.button(key="sign_out").click().run()
    assert [t.label for t in other.text_input] == ["Name", "Password"]


def _expiry(db, tab):
    # 12 hours pass: the session's times move back by 12 h (the app reads the real clock)
    with store.transaction(db):
        db.conn.execute("UPDATE sessions SET created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at, '-12 hours'), "
                        "expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', expires_at, '-12 hours')")


EVENTS = {"password change": _password_change, "reset by sign-in link": _link_reset, "removal": _removal,
          "role change": _role_change, "sign-out elsewhere": _sign_out_elsewhere, "12 h expiry": _expiry}


@pytest.mark.parametrize("event", EVENTS)
def test_an_open_tab_is_signed_out_at_its_next_action_and_writes_nothing(team_labels, event):
    tab = signed_in_tab("bob", "bob-password")
    widget = Widget(tab)
    for i in range(len(widget.data()["chunks"])):
        widget.grade(i, 2)  # every chunk graded: Submit is enabled
    assert not tab.button(key="kbd_submit").disabled
    db = store.connect(team_labels)
    EVENTS[event](db, tab)
    before = labels_written(team_labels)
    tab.button(key="kbd_submit").click().run()  # the callback runs before the entry script's gate
    assert not tab.exception, tab.exception
    assert labels_written(team_labels) == before
    assert signed_out(tab)


@pytest.mark.parametrize("event", ["password change", "removal", "12 h expiry"])
def test_a_grade_sent_by_an_open_tab_after_its_session_ended_is_not_written(team_labels, event):
    tab = signed_in_tab("bob", "bob-password")
    widget = Widget(tab)
    widget.grade(0, 1)
    db = store.connect(team_labels)
    EVENTS[event](db, tab)
    before = labels_written(team_labels)
    widget.grade(1, 3)
    assert labels_written(team_labels) == before
    assert signed_out(tab)


def test_a_session_that_still_holds_is_not_disturbed(team_labels):
    tab = signed_in_tab("bob", "bob-password")
    accounts.set_password(store.connect(team_labels), "lena", "lena-new-password", by="lena")  # someone else's
    Widget(tab).grade(0, 1)
    assert len(labels_written(team_labels)["relevance_labels"]) == 1
    assert tab.session_state[state.ANNOTATOR] == "bob"


def test_a_removed_leads_typed_name_does_not_make_them_lead_again(tmp_path, monkeypatch):
    """Local mode: lena (the first, lead) is removed by bob; her open tab's next click writes
    nothing; typing her name again is refused."""
    path = make_db(tmp_path, RECORDS)
    monkeypatch.setenv("LABELER_DB", str(path))
    tab = AppTest.from_file(APP, default_timeout=60)
    tab.run()
    tab.text_input(key="signin_name").input("lena")
    tab.button(key="FormSubmitter:signin-Start labeling").click().run()
    db = store.connect(path)
    accounts.sign_in_by_name(db, "bob")
    accounts.set_role(db, "bob", "lead", by="lena")
    accounts.remove_user(db, "lena", by="bob")
    before = labels_written(path)
    tab.button(key="kbd_skip").click().run()
    assert labels_written(path) == before
    assert tab.text_input(key="signin_name") is not None and widgets.escape_markdown(auth.ENDED) in [e.value for e in tab.error]
    tab.text_input(key="signin_name").input("lena")
    tab.button(key="FormSubmitter:signin-Start labeling").click().run()
    assert state.ANNOTATOR not in tab.session_state
    assert [e.value for e in tab.error] == [widgets.escape_markdown(
        "the account lena was removed; ask a lead to add it again (labeler users add lena)")]
    assert not accounts.is_lead(db, "lena")


# --- every callback is guarded ----------------------------------------------------------------------

APP_DIR = Path(APP).parent
# the sign-in forms act for nobody yet; signing out and Streamlit's own login/logout need no session
UNGUARDED = {("auth.py", "go"), ("auth.py", "auth.sign_out"), ("streamlit_app.py", "auth.sign_out"),
             ("auth.py", "st.login"), ("auth.py", "st.logout")}


def _callbacks(tree: ast.AST):
    """(name, line) of every function handed to a widget as a callback: on_click=, on_change=,
    on_*_change= and the grading widget's on_outbox."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        values = [k.value for k in node.keywords if k.arg and k.arg.startswith("on_")]
        if isinstance(node.func, ast.Attribute) and node.func.attr == "grader" and len(node.args) > 1:
            values.append(node.args[1])
        for v in values:
            if not (isinstance(v, ast.Constant) and isinstance(v.value, str)):  # on_click="ignore"
                yield ast.unparse(v), v.lineno


def _guarded_defs(tree: ast.AST) -> dict[str, bool]:
    return {f.name: any(ast.unparse(d) in ("auth.guarded", "guarded") for d in f.decorator_list)
            for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}


def test_every_callback_in_the_app_is_guarded():
    unguarded, seen = [], 0
    for path in sorted(APP_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defs = _guarded_defs(tree)
        for name, line in _callbacks(tree):
            seen += 1
            if (path.name, name) in UNGUARDED or (path.parent.name == "grader" and name == "on_outbox"):
                continue
            if not defs.get(name, False):
                unguarded.append(f"{path.relative_to(APP_DIR)}:{line} {name}")
    assert seen > 30  # the walk finds the app's callbacks
    assert unguarded == [], "callbacks that write without checking the session: " + ", ".join(unguarded)


# --- the session cookie -----------------------------------------------------------------------------

def test_the_session_cookie_is_strict_and_secure_over_https(team_labels):
    tab = signed_in_tab("bob", "bob-password")
    scripts = [h.proto.body for h in tab.get("html") if "document.cookie" in h.proto.body]
    token = tab.session_state[state.SESSION_TOKEN]
    assert scripts == [auth.cookie_script(token)]
    script = scripts[0]
    assert f"labeler_session={token}; path=/; SameSite=Strict; max-age=43200" in script
    # the page adds Secure whenever it was loaded over https (also behind a TLS-terminating proxy)
    assert '(location.protocol === "https:" ? "; Secure" : "")' in script
    tab.button(key="sign_out").click().run()
    cleared = [h.proto.body for h in tab.get("html") if "document.cookie" in h.proto.body]
    assert cleared == [auth.cookie_script(None)] and "SameSite=Strict; max-age=0" in cleared[0]
