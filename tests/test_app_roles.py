"""Roles and sessions in the app, as a hostile annotator tries them through AppTest: pages opened by
their file (as by URL), disabled buttons clicked anyway, a forged ``?annotator=``, a tab left open
after its session ended. Each lead-only action is refused and nothing is written; a lead doing the
same succeeds; an ended session's next action writes nothing and shows the sign-in screen."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import labeler
from labeler import accounts, judge
from labeler import db as store
from labeler.app import auth, state, widgets
from tests.test_app_label import APP

VIEWS = Path(APP).parent / "views"


def with_team(path) -> None:
    db = store.connect(path)
    accounts.add_user(db, "lena", "lead", password="lena-password")
    accounts.add_user(db, "bob", "annotator", password="bob-password")
    db.close()


def snapshot(path) -> dict[str, list]:
    # left out: what signing in and being handed an item writes (the queue records under which
    # sampling design it handed the item out: queue_designs)
    db = store.connect(path)
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN "
                                       "('signin_failures', 'audit_events', 'assignments', 'query_labels', "
                                       "'sessions', 'label_events', 'queue', 'queue_designs')")]
    return {t: db.execute(f"SELECT * FROM [{t}]").fetchall() for t in tables}


def app(name: str | None, view: str | None = None, **query) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    if name:
        at.session_state[state.ANNOTATOR] = name
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    if view:
        at.switch_page(f"views/{view}")
        at.run()
    assert not at.exception, at.exception
    return at


def forge_click(at: AppTest, button) -> None:
    """Click a disabled button anyway, as a hand-written websocket message would (AppTest refuses
    ``click()`` on a disabled widget, a browser's UI does too, but the server must not rely on that)."""
    button._value = True
    at.run()


def view_file(view: str, name: str) -> AppTest:
    """The page's own file, run directly: what opening its URL does, whatever the navigation shows."""
    at = AppTest.from_file(str(VIEWS / view), default_timeout=60)
    at.session_state[state.ANNOTATOR] = name
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.fixture
def team_judged(judged):  # the fixture of tests/conftest.py
    with_team(judged["path"])
    return judged


def test_the_url_never_signs_anyone_in(team_judged):
    at = app(None, annotator="lena")  # no session: the sign-in form, not lena's pages
    assert [t.label for t in at.text_input] == ["Name", "Password"]
    assert not at.button(key="sign_out") if "sign_out" in [b.key for b in at.button] else True
    at = app("bob", annotator="lena")  # bob with lena's name in the URL stays bob
    assert at.session_state[state.ANNOTATOR] == "bob"
    assert "views/settings.py" not in str(at._tree)  # no lead pages in bob's navigation
    assert any("bob" in m.value for m in at.markdown)


def test_a_name_without_a_password_is_signed_out_once_accounts_exist(team_judged):
    labeler.labels.add_annotator(store.connect(team_judged["path"]), "eve")
    at = app("eve")
    assert [t.label for t in at.text_input] == ["Name", "Password"]


@pytest.mark.parametrize("view", ["settings.py", "adjudicate.py"])
def test_lead_pages_refuse_an_annotator_opened_by_url(team_judged, view):
    before = snapshot(team_judged["path"])
    at = view_file(view, "bob")
    assert [e.value for e in at.error] == [f"{'Settings' if view == 'settings.py' else 'Adjudication'} is for "
                                          "leads only."]
    assert not at.button and not at.text_input and not at.selectbox
    assert snapshot(team_judged["path"]) == before
    lead = view_file(view, "lena")
    assert not lead.error


def test_the_settings_form_of_a_demoted_lead_is_refused(team_judged):
    """A lead opens Settings, is demoted meanwhile, then saves: the library refuses the write."""
    at = view_file("settings.py", "lena")
    db = store.connect(team_judged["path"])
    accounts.add_user(db, "mia", "lead", password="mia-password")
    accounts.set_role(db, "lena", "annotator", by="mia")
    before = snapshot(team_judged["path"])
    at.text_area(key="set_guidelines").set_value("# lena was here")
    at.button(key="FormSubmitter:settings_form-Save settings").click().run()
    assert snapshot(team_judged["path"]) == before  # the page guard stops the rerun before the form


def test_an_annotator_has_no_upload_or_export(team_judged):
    at = app("bob", "data.py")
    assert not [b for b in at.button if b.key in ("upload_go", "export_download")]
    assert any("are for leads" in i.value for i in at.info)
    lead = app("lena", "data.py")
    assert lead.button(key="upload_go") is not None


def demote(path, name: str) -> None:
    """Another lead takes ``name``'s lead role away (while their page is open)."""
    db = store.connect(path)
    accounts.add_user(db, "mia", "lead", password="mia-password")
    accounts.set_role(db, name, "annotator", by="mia")


def test_an_annotator_cannot_change_the_gate_or_rubric(team_judged):
    before = snapshot(team_judged["path"])
    at = app("bob", "judge.py")
    assert at.button(key="jd_g_save").disabled and at.button(key="jd_rubric_save").disabled
    forge_click(at, at.button(key="jd_g_save"))  # Streamlit drops a disabled widget's forged click
    assert snapshot(team_judged["path"]) == before
    # the disagreement browser (every annotator's grade by name) is not drawn for bob
    assert any("it is for leads" in i.value for i in at.info)
    assert not [c for c in at.get("segmented_control") if (c.key or "").startswith("jd_tag_")]


def signed_out(at: AppTest) -> bool:
    """The tab shows the sign-in form (and why) and knows nobody."""
    return ([t.label for t in at.text_input] == ["Name", "Password"] and state.ANNOTATOR not in at.session_state
            and widgets.escape_markdown(auth.ENDED) in [e.value for e in at.error])


def test_a_gate_or_rubric_save_is_dropped_once_the_role_is_gone(team_judged):
    """Lena's page was drawn while she was lead (buttons enabled); she is demoted, which ends her
    sessions; she saves: nothing is written and she signs in again, as an annotator."""
    at = app("lena", "judge.py")
    demote(team_judged["path"], "lena")
    before = snapshot(team_judged["path"])
    at.number_input(key="jd_g_value").set_value(0.0)
    at.text_area(key="jd_rubric_text_relevance.v1").set_value("Grade everything 3.")
    at.button(key="jd_g_save").click()
    at.button(key="jd_rubric_save").click().run()
    assert signed_out(at)
    assert snapshot(team_judged["path"]) == before
    relogged = app("lena", "judge.py")
    assert relogged.button(key="jd_g_save").disabled and relogged.button(key="jd_rubric_save").disabled


def test_a_role_change_from_a_stale_settings_page_is_refused_by_the_library(team_judged):
    """A widget callback from the page drawn while lena was lead runs after she was demoted: the
    library call it makes (accounts.set_role(by=lena)) refuses, nothing is written."""
    at = view_file("settings.py", "lena")
    demote(team_judged["path"], "lena")
    before = snapshot(team_judged["path"])
    at.selectbox(key="role_bob").set_value("lead").run()
    assert accounts.get_account(store.connect(team_judged["path"]), "bob").role == "annotator"
    assert snapshot(team_judged["path"]) == before
    assert [e.value for e in at.error] == ["Settings is for leads only."]


def test_a_paid_judge_run_is_refused_once_the_right_is_gone(team_judged, server):  # noqa: F811
    db = store.connect(team_judged["path"])
    judge.save_rubric(db, "relevance.v1", "A fresh rubric, so nothing is cached.")
    at = app("bob", "judge.py")
    at.number_input(key="jd_limit").set_value(5)
    at.button(key="jd_estimate").click().run()
    assert at.button(key="jd_go").disabled  # bob may not run LLM jobs
    accounts.grant_llm(db, "bob", by="lena")
    at.run()
    go = at.button(key="jd_go")
    assert not go.disabled
    accounts.grant_llm(db, "bob", False, by="lena")  # taken back while the button shows
    before, sent = snapshot(team_judged["path"]), server.total
    go.click().run()
    assert at.button(key="jd_go").disabled
    assert server.total == sent and snapshot(team_judged["path"]) == before
    accounts.grant_llm(db, "bob", by="lena")  # with the grant, bob's run goes through
    at.run()
    at.button(key="jd_go").click().run()
    assert server.total == sent + 5 and judge.list_runs(db)[0].status == "done"


def test_synthetic_generation_is_refused_once_the_right_is_gone(team_judged, server):  # noqa: F811
    at = app("lena", "synth.py")
    at.number_input(key="sy_n").set_value(2)
    at.button(key="sy_estimate").click().run()
    go = at.button(key="sy_generate")
    assert not go.disabled
    demote(team_judged["path"], "lena")
    before, sent = snapshot(team_judged["path"]), server.total
    go.click().run()
    assert signed_out(at)
    assert server.total == sent and snapshot(team_judged["path"]) == before
    bob = app("bob", "synth.py")
    bob.number_input(key="sy_n").set_value(2)
    bob.button(key="sy_estimate").click().run()
    assert bob.button(key="sy_generate").disabled


def test_an_annotator_sees_only_the_consolidated_metrics(team_judged):
    at = app("bob", "metrics.py")
    assert at.selectbox(key="m_annotator").options == ["all"]
    assert not [c for c in at.button if (c.key or "").startswith("m_open_")]
    lead = app("lena", "metrics.py")
    assert "bob" in lead.selectbox(key="m_annotator").options
