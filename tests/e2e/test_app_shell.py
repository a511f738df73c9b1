"""The app's frame in a real browser, served by ``labeler app`` itself (its packaged Streamlit
defaults applied): /label is the Label page's address, no Deploy button or developer menu, and no
widget label on Synth or Settings is cut off at 1400x900."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from labeler.demo import build_demo
from tests.e2e.conftest import AppServer, wait_signed_in

ROOT = Path(__file__).resolve().parents[2]

# a label is cut when its text is wider than its box (Streamlit ends such a line with an ellipsis):
# widget labels, and the labels and values of stat tiles
CUT_LABELS = """() => [...document.querySelectorAll(['stWidgetLabel', 'stMetricLabel', 'stMetricValue']
    .map(t => `[data-testid="stMain"] [data-testid="${t}"], [data-testid="stMain"] [data-testid="${t}"] *`).join(', '))]
  .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
  .map(e => e.innerText.trim()).filter(Boolean)"""


@pytest.fixture(scope="module")
def demo_app(tmp_path_factory):
    """``labeler app`` on the demo database, in a folder and a home without any Streamlit config;
    one server for the module (its tests only read pages)."""
    tmp_path = tmp_path_factory.mktemp("shell")
    db = tmp_path / "labeler-demo.db"
    build_demo(db)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    server = AppServer(db, base_env=env)
    yield server.url
    server.stop()


@pytest.fixture
def lead(browser, demo_app):
    """A 1400x900 browser signed in to the demo as its first name (who becomes the lead)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(demo_app)
    page.get_by_label("Your name").fill("lena")
    page.get_by_role("button", name="Start labeling").click()
    wait_signed_in(page)  # the tests open other URLs, which need the session cookie
    yield page
    context.close()


def test_label_has_its_own_url_and_the_root_opens_it(lead, demo_app):
    lead.goto(demo_app + "/label")
    lead.get_by_role("button", name="Submit", exact=False).first.wait_for()
    assert not lead.get_by_text("Page not found").count()
    assert lead.url == demo_app + "/label"
    assert "active" in (lead.locator('[data-testid="stSidebarNav"] a[href$="/label"]').get_attribute("class") or "") \
        or lead.locator('[data-testid="stSidebarNav"] a[href$="/label"][aria-current="page"]').count()

    lead.goto(demo_app + "/")  # the root forwards to /label (one address for the page)
    lead.wait_for_url(demo_app + "/label")
    lead.get_by_role("button", name="Submit", exact=False).first.wait_for()
    links = lead.locator('[data-testid="stSidebarNav"] a').all_inner_texts()
    assert [t.split("\n")[-1] for t in links].count("Label") == 1  # the forwarding page is not listed


def test_no_deploy_button_or_developer_menu(lead):
    lead.get_by_role("button", name="Submit", exact=False).first.wait_for()
    assert not lead.get_by_role("button", name="Deploy").count()
    assert not lead.get_by_text("Deploy", exact=True).count()
    menu = lead.get_by_test_id("stMainMenu")
    if menu.count():  # whatever the menu still holds, the developer items are not in it
        menu.click()
        for item in ("Rerun", "Clear cache", "Settings", "Record a screencast", "Developer options"):
            assert not lead.get_by_text(item, exact=True).count(), item


def test_no_widget_label_is_cut_on_synth_and_settings(lead, demo_app):
    lead.goto(demo_app + "/synth")
    lead.get_by_role("heading", name="Synthetic questions").wait_for()
    lead.get_by_role("tab", name="Runs").wait_for()  # the last tab: all of them are drawn
    tabs = lead.get_by_role("tab")
    names = tabs.all_inner_texts()
    assert len(names) == 4
    for i, name in enumerate(names):
        tabs.nth(i).click()
        lead.wait_for_function("""(name) => { const tab = [...document.querySelectorAll('[role="tab"]')]
            .find(t => t.innerText.trim() === name); if (!tab || tab.getAttribute('aria-selected') !== 'true')
            return false; const panel = document.getElementById(tab.getAttribute('aria-controls'));
            return !panel || panel.offsetParent !== null }""", arg=name.strip())
        assert lead.evaluate(CUT_LABELS) == [], f"Synth, tab {name}"
    tabs.nth(0).click()
    lead.get_by_role("button", name="Estimate cost").click()  # the cost tiles (no LLM is called)
    lead.get_by_test_id("stMetricLabel").filter(has_text="Cost").first.wait_for()
    lead.wait_for_function("() => !document.querySelector('[data-stale=\"true\"]')")
    assert lead.evaluate(CUT_LABELS) == [], "Synth, the estimate's tiles"

    lead.goto(demo_app + "/settings")
    lead.get_by_role("heading", name="Settings", exact=True).wait_for()
    lead.get_by_text("Show sources", exact=False).wait_for()
    lead.wait_for_function("() => !document.querySelector('[data-stale=\"true\"]')")
    assert lead.evaluate(CUT_LABELS) == [], "Settings"
