"""The Data page's live sources through AppTest: the list for everyone, Sync now for leads only
(the library checks the role again when the button's callback runs)."""

from __future__ import annotations

import pytest

import labeler
from labeler import accounts, sources
from labeler.app import state
from tests.fake_tracestores import FakeStore, phoenix_trace
from tests.test_app_undo import data_page, queries
from tests.test_sources import at


def sources_table(page):
    return next(d.value for d in page.dataframe if {"source", "lag", "error"} <= set(d.value.columns))


@pytest.fixture
def px(tmp_path, monkeypatch):
    path = tmp_path / "t.db"
    db = labeler.connect(path)
    accounts.add_user(db, "lena", "lead", password="lena-password")
    accounts.add_user(db, "bob", "annotator", password="bob-password")
    with FakeStore("phoenix", page_size=2) as fake:
        fake.add([s for n in range(3) for s in phoenix_trace(n, at(n))])
        sources.add_source(db, "phoenix", "px", url=fake.url, project="rag", by="lena")
        db.close()
        monkeypatch.setenv("LABELER_DB", str(path))
        yield path


def test_a_lead_syncs_now_and_sees_the_source_with_its_last_sync(px):
    at = data_page("lena")
    table = sources_table(at)
    assert list(table["source"]) == ["px"] and list(table["lag"]) == ["never synced"]
    at.selectbox(key="sources_pick").set_value("px")
    at.button(key="sources_sync").click().run()
    assert not at.exception, at.exception
    assert any("px: 3 retrievals read" in s.value.replace("\\", "") for s in at.success), [s.value for s in at.success]
    assert len(queries(px)) == 3
    table = sources_table(at)
    assert list(table["new queries (last sync)"]) == [3] and list(table["error"]) == [""]


def test_an_annotator_sees_the_sources_but_cannot_sync(px):
    at = data_page("bob")
    assert list(sources_table(at)["source"]) == ["px"]
    assert not [b for b in at.button if b.key == "sources_sync"]


def test_a_lead_demoted_after_opening_the_page_syncs_nothing(px):
    """The click's callback runs for a session that no longer holds (a role change signs the
    browsers out): nothing is synced. (sync_sources itself refuses an annotator's ``by``, see
    tests/test_sources.py.)"""
    at = data_page("lena")
    db = labeler.connect(px)
    accounts.add_user(db, "mia", "lead", password="mia-password")
    accounts.set_role(db, "lena", "annotator", by="mia")
    db.close()
    at.button(key="sources_sync").click().run()
    assert queries(px) == set()
    assert state.SYNC_RESULT not in at.session_state
    assert any("session ended" in e.value for e in at.error)


def test_the_app_syncs_the_sources_that_are_due_in_the_background(px):
    db = labeler.connect(px)
    sources.add_source(db, "phoenix", "later", url=sources.get_source(db, "px").url, project="none", every_s=3600)
    db.execute("UPDATE sources SET every_s = 60 WHERE name = 'px'")
    db.conn.commit()
    syncer = state._Syncer(str(px))
    first = syncer.once()  # both are due (never synced)
    assert sorted((r.name, r.new) for r in first) == [("later", 0), ("px", 3)]
    assert syncer.once() == []  # neither is due again yet
    assert len(queries(px)) == 3
