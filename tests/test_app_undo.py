"""The Data page's list of ingests and its undo, through AppTest."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

import labeler
from labeler import accounts
from labeler.app import state
from labeler.ingest.undo import list_ingests, remove_queries
from labeler.labels import set_grade
from tests.conftest import tiny_records
from tests.test_app_escape import app_env, check, hostile_db  # noqa: F401 - fixtures
from tests.test_app_escape import page as escape_page
from tests.test_app_label import APP


@pytest.fixture
def two_ingests(tmp_path, monkeypatch):
    path = tmp_path / "t.db"
    db = labeler.connect(path)
    accounts.add_user(db, "lena", "lead", password="lena-password")
    accounts.add_user(db, "bob", "annotator", password="bob-password")
    for prefix in ("a", "b"):
        log = tmp_path / f"{prefix}.jsonl"
        log.write_text("".join(json.dumps(r) + "\n" for r in tiny_records(3, prefix=prefix)))
        labeler.ingest_logs(db, log, by="lena")
    pk = db.execute("SELECT pk FROM queries WHERE query_id = 'b001'").fetchone()[0]
    doc = db.execute("SELECT pk FROM documents WHERE doc_id = 'b001-c0'").fetchone()[0]
    set_grade(db, pk, doc, "bob", 2)
    db.close()
    monkeypatch.setenv("LABELER_DB", str(path))
    return path


def data_page(name: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[state.ANNOTATOR] = name
    at.run()
    at.switch_page("views/data.py")
    at.run()
    assert not at.exception, at.exception
    return at


def texts(elements) -> list[str]:
    """The shown texts of alerts or markdown, without the escaping of log text (widgets.escape_markdown)."""
    return [e.value.replace("\\", "") for e in elements]


def queries(path) -> set[str]:
    db = labeler.connect(path)
    try:
        return {r[0] for r in db.execute("SELECT query_id FROM queries")}
    finally:
        db.close()


def test_lead_undoes_an_ingest_after_confirming_and_labels_need_the_checkbox(two_ingests):
    at = data_page("lena")
    table = at.dataframe[0].value  # the only table on the page
    assert list(table["id"]) == [2, 1] and list(table["by"]) == ["lena", "lena"]
    assert at.selectbox(key="undo_pick").value == 2
    at.button(key="undo_ask").click().run()
    # the confirmation step: what would go, and the labeled query named
    assert any("would remove 3 queries" in m.value for m in at.markdown)
    assert any("(b001)" in w for w in texts(at.warning))
    assert queries(two_ingests) == {"a000", "a001", "a002", "b000", "b001", "b002"}  # nothing yet
    at.button(key="undo_confirm").click().run()  # without the checkbox: refused, one line naming b001
    assert any("have labels (b001)" in e and "nothing was removed" in e for e in texts(at.error))
    assert len(queries(two_ingests)) == 6
    at.checkbox(key="undo_force").check().run()
    at.button(key="undo_confirm").click().run()
    assert not at.exception, at.exception
    assert queries(two_ingests) == {"a000", "a001", "a002"}
    assert any("removed 3 queries" in s for s in texts(at.success))
    db = labeler.connect(two_ingests)
    assert [i.state for i in list_ingests(db)] == ["done", "undone"]
    assert db.execute("SELECT actor FROM audit_events WHERE action = 'ingest_undo'").fetchone()[0] == "lena"
    db.close()
    assert [o.split(":")[0] for o in at.selectbox(key="undo_pick").options] == ["1"]  # only 1 left to undo


def test_cancel_removes_nothing(two_ingests):
    at = data_page("lena")
    at.selectbox(key="undo_pick").set_value(1).run()
    at.button(key="undo_ask").click().run()
    assert any("would remove 3 queries" in m.value for m in at.markdown)
    at.button(key="undo_cancel").click().run()
    assert not [b for b in at.button if b.key == "undo_confirm"]
    assert len(queries(two_ingests)) == 6


def test_annotators_see_no_undo(two_ingests):
    at = data_page("bob")
    assert "undo_ask" not in [b.key for b in at.button]
    assert "Ingests" not in [h.value for h in at.subheader] and not at.dataframe


def test_undo_confirmation_and_annotators_page_show_log_text_as_plain_text(app_env):  # noqa: F811 - the fixture
    """On the database where every logged field is hostile (tests/hostile.py): the confirmation
    step (file name in markdown) and the Annotators page (names) leak no live markdown."""
    h = app_env
    at = escape_page(h.lead, "views/data.py")
    at.button(key="undo_ask").click().run()
    texts = check(at)
    assert any("Undo ingest" in t for t in texts)
    at = escape_page(h.lead, "views/annotators.py")
    check(at)
    assert h.annotator in list(at.dataframe[0].value["annotator"])


def test_an_annotator_on_a_removed_item_moves_on_to_the_next(two_ingests):
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[state.ANNOTATOR] = "bob"
    at.run()
    assert not at.exception, at.exception
    held = at.session_state[state.CURRENT]
    db = labeler.connect(two_ingests)
    held_id = db.execute("SELECT query_id FROM queries WHERE pk = ?", [held]).fetchone()[0]
    remove_queries(db, [held_id], force=True)
    db.close()
    at.run()
    assert not at.exception, at.exception
    assert not at.error
    assert at.session_state[state.CURRENT] not in (None, held)
    assert any("removed by a lead" in t.value.replace("\\", "") for t in at.toast)
