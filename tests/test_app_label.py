"""AppTest of the labeling workspace: sign-in, grading (keyboard buttons and per chunk), search,
answers, submit/skip/flag/discard, back and history, blind overlap, settings, adjudication, password."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import labeler
import labeler.labels as labels
from labeler.app import state

APP = str(Path(labeler.__file__).parent / "app" / "streamlit_app.py")


def make_db(tmp_path: Path, records: list[dict], corpus: list[dict] | None = None) -> Path:
    path = tmp_path / "t.db"
    db = labeler.connect(path)
    log = tmp_path / "logs.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    labeler.ingest_logs(db, log)
    if corpus:
        c = tmp_path / "corpus.jsonl"
        c.write_text("".join(json.dumps(r) + "\n" for r in corpus))
        labeler.ingest_corpus(db, c)
    return path


RECORDS = [
    {"query_id": f"q{i}", "question": f"question number {i} about invoices", "answer": f"answer {i}",
     "retrieved": [{"id": f"d{i}-{r}", "text": f"chunk {r} of question {i}", "score": 1 - r / 10} for r in range(3)]}
    for i in range(4)
]
CORPUS = [{"id": "missed-1", "text": "The webhook signing secret is under Settings, Developers."}]


@pytest.fixture
def db_path(tmp_path, monkeypatch):
    path = make_db(tmp_path, RECORDS, CORPUS)
    monkeypatch.setenv("LABELER_DB", str(path))
    return path


def app(name: str | None = "alice", **session) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30)
    if name:
        at.session_state[state.ANNOTATOR] = name
    for k, v in session.items():
        at.session_state[k] = v
    at.run()
    assert not at.exception, at.exception
    return at


def current(at: AppTest) -> int:
    return at.session_state[state.CURRENT]


def grades(db_path: Path, annotator: str, query_pk: int) -> dict[str, int]:
    db = labeler.connect(db_path)
    return dict(db.execute("SELECT d.doc_id, l.grade FROM relevance_labels l JOIN documents d ON d.pk = l.doc_pk "
                           "WHERE l.annotator = ? AND l.query_pk = ?", [annotator, query_pk]).fetchall())


def click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click().run()
    assert not at.exception, at.exception
    return at


def test_sign_in_screen_then_label_page(db_path):
    at = app(name=None)
    assert at.text_input(key="signin_name") is not None
    assert not [b for b in at.button if b.key == "kbd_submit"]
    at.text_input(key="signin_name").input("alice")
    at.button[0].click().run()
    assert at.session_state[state.ANNOTATOR] == "alice"
    assert at.button(key="kbd_submit").disabled  # nothing graded yet
    assert labels.get_role(labeler.connect(db_path), "alice") == "lead"  # first one in becomes lead


def test_keyboard_grading_moves_focus_and_saves_at_once(db_path):
    at = app()
    pk = current(at)
    qid = labeler.connect(db_path).execute("SELECT query_id FROM queries WHERE pk = ?", [pk]).fetchone()[0]
    click(at, "kbd_3")
    click(at, "kbd_0")
    assert grades(db_path, "alice", pk) == {f"d{qid[1:]}-0": 3, f"d{qid[1:]}-1": 0}
    assert at.session_state[state.FOCUS] == 2
    click(at, "kbd_prev")
    click(at, "kbd_2")
    assert grades(db_path, "alice", pk)[f"d{qid[1:]}-1"] == 2
    events = labeler.connect(db_path).execute(
        "SELECT field, old, new FROM label_events WHERE annotator = 'alice' AND doc_pk IS NOT NULL ORDER BY id").fetchall()
    assert [tuple(e) for e in events][-1] == ("grade", "0", "2")


def test_rest_zero_submit_and_next(db_path):
    at = app()
    pk = current(at)
    click(at, "kbd_3")
    click(at, "kbd_rest")
    assert sorted(grades(db_path, "alice", pk).values()) == [0, 0, 3]
    assert not at.button(key="kbd_submit").disabled
    click(at, "kbd_submit")
    assert current(at) != pk
    db = labeler.connect(db_path)
    assert db.execute("SELECT status FROM query_labels WHERE query_pk = ? AND annotator = 'alice'", [pk]).fetchone() == ("submitted",)


def test_per_chunk_buttons_and_answer_fields(db_path):
    at = app()
    pk = current(at)
    item = labels.get_item(labeler.connect(db_path), pk, "alice")
    click(at, f"g_{pk}_{item.chunks[1].doc_pk}_1")
    at.text_area(key=f"expected_{pk}").input("Use the Export button.").run()
    at.radio(key=f"answer_faithful_{pk}").set_value("partly").run()
    at.radio(key=f"answer_relevant_{pk}").set_value("yes").run()
    at.text_input(key=f"notes_{pk}").input("tricky").run()
    item = labels.get_item(labeler.connect(db_path), pk, "alice")
    assert item.chunks[1].grade == 1
    assert (item.expected_answer, item.answer_faithful, item.answer_relevant, item.notes) == (
        "Use the Export button.", "partly", "yes", "tricky")


def test_search_adds_a_missed_chunk(db_path):
    at = app()
    pk = current(at)
    at.text_input(key=f"search_{pk}").input("webhook signing secret").run()
    missed_pk = labeler.connect(db_path).execute("SELECT pk FROM documents WHERE doc_id = 'missed-1'").fetchone()[0]
    click(at, f"add_{pk}_{missed_pk}_3")
    assert grades(db_path, "alice", pk)["missed-1"] == 3
    assert [c.doc_id for c in labels.get_item(labeler.connect(db_path), pk, "alice").extra] == ["missed-1"]
    # the added chunk is now on the item with its own grade buttons
    assert at.button(key=f"g_{pk}_{missed_pk}_3").proto.type == "primary"


def test_skip_flag_discard(db_path):
    at = app()
    first = current(at)
    click(at, "kbd_skip")
    second = current(at)
    assert second != first
    click(at, "kbd_flag")  # no reason yet
    assert "flag reason" in at.error[0].value
    assert current(at) == second
    at.text_input(key=f"flag_reason_{second}").input("question mixes two products").run()
    click(at, "kbd_flag")
    third = current(at)
    click(at, "kbd_discard")
    db = labeler.connect(db_path)
    statuses = dict(db.execute("SELECT query_pk, status FROM query_labels WHERE annotator = 'alice'").fetchall())
    assert statuses[first] == "skipped" and statuses[second] == "flagged" and statuses[third] == "discarded"
    assert db.execute("SELECT flag_reason FROM query_labels WHERE query_pk = ?", [second]).fetchone() == (
        "question mixes two products",)


def test_back_and_history_reopen_a_submitted_item(db_path):
    at = app()
    first = current(at)
    click(at, "kbd_rest")
    click(at, "kbd_submit")
    click(at, "kbd_back")
    assert current(at) == first
    click(at, "kbd_skip")  # leave it again
    click(at, f"hist_{first}")
    assert current(at) == first
    item_doc = labels.get_item(labeler.connect(db_path), first, "alice").chunks[0].doc_pk
    click(at, f"g_{first}_{item_doc}_2")
    assert labels.get_item(labeler.connect(db_path), first, "alice").chunks[0].grade == 2


def test_reload_resumes_the_same_item(db_path):
    at = app()
    pk = current(at)
    click(at, "kbd_2")
    again = app()  # a new session for the same annotator (reload, new tab)
    assert current(again) == pk
    assert labels.get_item(labeler.connect(db_path), pk, "alice").chunks[0].grade == 2


def test_blind_overlap_second_annotator_sees_no_other_labels(db_path):
    db = labeler.connect(db_path)
    labeler.set_setting(db, "overlap_fraction", 1.0)
    alice = app("alice")
    pk = current(alice)
    click(alice, "kbd_3")
    click(alice, "kbd_rest")
    click(alice, "kbd_submit")
    bob = app("bob")
    seen = {current(bob)}
    while current(bob) != pk and current(bob) is not None:
        click(bob, "kbd_skip")
        seen.add(current(bob))
    assert pk in seen
    assert current(bob) == pk
    item = labels.get_item(labeler.connect(db_path), pk, "bob")
    assert all(c.grade is None for c in item.chunks)
    assert all(b.proto.type == "secondary" for b in bob.button if b.key and b.key.startswith(f"g_{pk}_"))


def test_text_from_logs_is_escaped(tmp_path, monkeypatch):
    evil = '<script>alert(1)</script><img src=x onerror="alert(2)"> [x](javascript:alert(3)) ![i](http://example.invalid/p.png)'
    path = make_db(tmp_path, [{"question": evil, "retrieved": [{"id": "e1", "text": evil + "\n| a | b |\n|---|---|"}]}])
    monkeypatch.setenv("LABELER_DB", str(path))
    at = app()
    html_bodies = [h.proto.body for h in at.get("html")]
    assert any("&lt;script&gt;alert(1)&lt;/script&gt;" in b for b in html_bodies)
    assert not any("<script>" in b or "<img" in b for b in html_bodies)
    assert not any("](javascript" in m.value for m in at.markdown)


def test_settings_is_for_leads_only(db_path):
    lead = app("alice")
    labels.add_annotator(labeler.connect(db_path), "bob")
    bob = app("bob")
    lead.switch_page("views/settings.py").run()
    assert not lead.exception
    lead.number_input(key="set_threshold").set_value(3)
    lead.button(key="FormSubmitter:settings_form-Save settings").click().run()
    assert labeler.get_settings(labeler.connect(db_path))["threshold"] == 3
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        bob.switch_page("views/settings.py")
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        bob.switch_page("views/adjudicate.py")


def test_adjudication_flow(db_path):
    db = labeler.connect(db_path)
    labeler.set_setting(db, "overlap_fraction", 1.0)
    pk = labels.next_item(db, "alice")
    doc = labels.get_item(db, pk, "alice").chunks[0].doc_pk
    for who, g in (("alice", 3), ("bob", 0)):
        if who == "bob":
            while labels.next_item(db, "bob") != pk:
                labels.set_status(db, labels.next_item(db, "bob"), "bob", "skipped")
        labels.set_grade(db, pk, doc, who, g)
        labels.set_rest_zero(db, pk, who)
        labels.set_status(db, pk, who, "submitted")
    at = app("alice")
    at.switch_page("views/adjudicate.py").run()
    assert not at.exception
    click(at, f"adj_{pk}_{doc}_2")
    golden = labels.golden_labels(labeler.connect(db_path))
    row = golden[(golden.query_pk == pk) & (golden.doc_pk == doc)].iloc[0]
    assert (row.grade, bool(row.conflict)) == (2, False)


def test_password_gate_hides_everything(db_path):
    at = AppTest.from_file(APP, default_timeout=30)
    at.secrets["password"] = "s3cret"
    at.session_state[state.ANNOTATOR] = "alice"
    at.run()
    assert not [b for b in at.button if b.key == "kbd_submit"]
    assert not at.metric and not at.get("html")
    at.text_input(key="password_input").input("wrong")
    next(b for b in at.button if b.label == "Enter").click().run()
    assert at.error and not [b for b in at.button if b.key == "kbd_submit"]
    at.text_input(key="password_input").input("s3cret")
    next(b for b in at.button if b.label == "Enter").click().run()
    assert at.button(key="kbd_submit") is not None
