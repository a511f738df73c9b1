"""AppTest of the routing rules in Settings (labeler.labels.routing) and the Metrics page's line on
how the labeled set was drawn."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import labeler
from labeler.accounts import add_user, set_role
from labeler.app import state
from labeler.labels import routing_rules

APP = str(Path(labeler.__file__).parent / "app" / "streamlit_app.py")
SAVE = "FormSubmitter:routing_form-Save routing"


@pytest.fixture
def db(tmp_path, monkeypatch, ingest_tiny):
    path = tmp_path / "r.db"
    database = labeler.connect(path)
    add_user(database, "alice", role="lead", password="alice-password")
    add_user(database, "mia", role="lead", password="mia-password")
    add_user(database, "bob", role="annotator", password="bob-password")
    ingest_tiny(database, n=4)
    monkeypatch.setenv("LABELER_DB", str(path))
    yield database
    database.close()


def page(name: str, view: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[state.ANNOTATOR] = name
    at.run()
    at.switch_page(view).run()
    assert not at.exception, at.exception
    return at


def test_a_lead_sets_and_clears_the_routing_rules(db):
    at = page("alice", "views/settings.py")
    assert "Routing of live queries" in [h.value for h in at.subheader]
    assert at.checkbox(key="route_on").value is False
    at.checkbox(key="route_on").check()
    at.number_input(key="route_rate").set_value(0.05)
    at.number_input(key="route_cap").set_value(200)
    at.text_input(key="route_quotas").set_value("3=20, 7=5")
    at.checkbox(key="route_new_topics").check()
    at.button(key=SAVE).click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    rules = routing_rules.get_rules(db)
    assert (rules.rate, rules.daily_cap, rules.quotas, rules.new_topics, rules.always_signals) == \
        (0.05, 200, {3: 20, 7: 5}, True, True)
    assert any("0.05 of the rest" in c.value.replace("\\", "") for c in at.caption)
    # a bad value is one line on the page, nothing changes
    at.text_input(key="route_quotas").set_value("three")
    at.button(key=SAVE).click().run()
    assert any("quota 'three' must be TOPIC=N" in e.value.replace("\\", "") for e in at.error)
    assert routing_rules.get_rules(db).quotas == {3: 20, 7: 5}
    at.checkbox(key="route_on").uncheck()
    at.button(key=SAVE).click().run()
    assert routing_rules.get_rules(db) is None


def test_a_lead_demoted_mid_session_cannot_save_the_rules(db):
    at = page("alice", "views/settings.py")
    at.checkbox(key="route_on").check()
    set_role(db, "alice", "annotator", by="mia")
    at.button(key=SAVE).click().run()
    assert routing_rules.get_rules(db) is None


def test_metrics_says_how_the_labeled_set_was_drawn(db):
    routing_rules.set_rules(db, rate=0.1)
    pk = labeler.labels.next_item(db, "alice")
    doc = labeler.labels.get_item(db, pk, "alice").chunks[0].doc_pk
    labeler.labels.set_grade(db, pk, doc, "alice", 2)
    labeler.labels.set_status(db, pk, "alice", "submitted")
    at = page("alice", "views/metrics.py")
    text = "\n".join(c.value.replace("\\", "") for c in at.caption)  # markdown escapes dropped
    assert "Labeled set drawn by the queue, order random" in text and "0.1 of the rest" in text
