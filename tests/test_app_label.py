"""AppTest of the labeling workspace: sign-in, grading through the grading widget's event stream,
search, answers, submit/skip/flag/discard, back and history, blind overlap, settings, adjudication,
password. The widget itself runs in the browser (tests/e2e/test_grader.py); here ``Widget`` plays
its part of the protocol: numbered events in the outbox until the page acknowledges them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import labeler
import labeler.labels as labels
from labeler.app import state
from labeler.app.components import grader

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


class Widget:
    """What grader.js does, without a browser: number each change per item, keep every change the
    page has not acknowledged in the outbox (the component's state value), drop what it acknowledges."""

    def __init__(self, at: AppTest, client: str = "apptest"):
        self.at, self.client, self.sent = at, client, 0
        self.next: dict[int, int] = {}
        self.pending: list[tuple[int, dict]] = []

    def data(self) -> dict:
        (el,) = [e for e in self.at.main if getattr(e.proto, "component_name", "") == "labeler_grader"]
        return json.loads(el.proto.json)

    def send(self, *events: dict) -> AppTest:
        item = self.data()["item"]
        for e in events:
            seq = self.next.get(item, 1)
            self.next[item] = seq + 1
            self.pending.append((item, {**e, "seq": seq}))
        return self.resend()

    def resend(self) -> AppTest:
        items = sorted({i for i, _ in self.pending})
        self.sent += 1
        self.at.session_state[grader.KEY] = {"outbox": {"n": self.sent, "batches": [
            {"client": self.client, "item": i, "events": [e for j, e in self.pending if j == i]} for i in items]}}
        self.at.run()
        assert not self.at.exception, self.at.exception
        acks = {(c, i): seq for c, i, seq in self.data()["acks"]} if self._shown() else {}
        self.pending = [(i, e) for i, e in self.pending if e["seq"] > acks.get((self.client, i), 0)]
        return self.at

    def _shown(self) -> bool:
        return any(getattr(e.proto, "component_name", "") == "labeler_grader" for e in self.at.main)

    def chunk(self, index: int) -> dict:
        return self.data()["chunks"][index]

    def grade(self, index: int, value: int) -> AppTest:
        return self.send({"doc_pk": self.chunk(index)["doc_pk"], "grade": value})

    def rest_zero(self) -> AppTest:
        """Z: the widget expands "rest are 0" into one grade event per ungraded retrieved chunk."""
        return self.send(*[{"doc_pk": c["doc_pk"], "grade": 0} for c in self.data()["chunks"]
                           if c["grade"] is None and not c["added"]])

    def submit(self) -> AppTest:
        """Enter, once every chunk has a grade."""
        return self.send({"submit": True})


def test_sign_in_screen_then_label_page(db_path):
    at = app(name=None)
    assert at.text_input(key="signin_name") is not None
    assert not [b for b in at.button if b.key == "kbd_submit"]
    at.text_input(key="signin_name").input("alice")
    at.button[0].click().run()
    assert at.session_state[state.ANNOTATOR] == "alice"
    assert at.button(key="kbd_submit").disabled  # nothing graded yet
    assert labels.get_role(labeler.connect(db_path), "alice") == "lead"  # first one in becomes lead


def test_widget_grades_are_saved_at_once_and_acknowledged(db_path):
    at = app()
    pk = current(at)
    w = Widget(at)
    qid = labeler.connect(db_path).execute("SELECT query_id FROM queries WHERE pk = ?", [pk]).fetchone()[0]
    w.grade(0, 3)
    w.grade(1, 0)
    assert grades(db_path, "alice", pk) == {f"d{qid[1:]}-0": 3, f"d{qid[1:]}-1": 0}
    assert [w.client, pk, 2] in w.data()["acks"] and not w.pending
    assert [c["grade"] for c in w.data()["chunks"]] == [3, 0, None]
    w.grade(1, 2)
    assert grades(db_path, "alice", pk)[f"d{qid[1:]}-1"] == 2
    events = labeler.connect(db_path).execute(
        "SELECT field, old, new FROM label_events WHERE annotator = 'alice' AND doc_pk IS NOT NULL ORDER BY id").fetchall()
    assert [tuple(e) for e in events] == [("grade", None, "3"), ("grade", None, "0"), ("grade", "0", "2")]


def test_resent_and_unacknowledged_events_are_applied_once(db_path):
    at = app()
    pk = current(at)
    w = Widget(at)
    w.grade(0, 1)
    # the acknowledgement was lost: the widget sends seq 1 again, with seq 2 and 3 typed since
    w.pending = [(pk, {"seq": 1, "doc_pk": w.chunk(0)["doc_pk"], "grade": 1})]
    w.next[pk] = 2
    w.send({"doc_pk": w.chunk(1)["doc_pk"], "grade": 2}, {"doc_pk": w.chunk(2)["doc_pk"], "grade": 3})
    assert not w.pending
    # a new session (a reload, or the server restarted) gets the same outbox before any callback runs
    again = app()
    again.session_state[grader.KEY] = at.session_state[grader.KEY]
    again.run()
    assert not again.exception
    db = labeler.connect(db_path)
    assert db.execute("SELECT count(*) FROM label_events WHERE query_pk = ? AND field = 'grade'", [pk]).fetchone() == (3,)
    assert labels.stream_acks(db, pk, "alice") == {"apptest": 3}
    assert [w.client, pk, 3] in Widget(again).data()["acks"]


def test_rest_zero_submit_and_next(db_path):
    at = app()
    pk = current(at)
    w = Widget(at)
    w.grade(0, 3)
    w.rest_zero()
    assert sorted(grades(db_path, "alice", pk).values()) == [0, 0, 3]
    assert not at.button(key="kbd_submit").disabled
    w.submit()
    assert current(at) != pk and w.data()["item"] == current(at)
    assert [w.client, pk, 4] in w.data()["acks"]  # the old item's stream is acknowledged on the new item
    db = labeler.connect(db_path)
    assert db.execute("SELECT status FROM query_labels WHERE query_pk = ? AND annotator = 'alice'", [pk]).fetchone() == ("submitted",)
    # the submit sent again (no acknowledgement reached the browser) does not skip the new item
    w.pending, w.next[pk] = [(pk, {"seq": 4, "submit": True})], 5
    shown = current(at)
    w.resend()
    assert current(at) == shown


def test_submit_with_an_ungraded_chunk_is_refused(db_path):
    at = app()
    pk = current(at)
    w = Widget(at)
    w.grade(0, 3)
    w.submit()
    assert current(at) == pk
    assert w.data()["rejected"] == [[w.client, pk, 2, "cannot submit: chunk #2 has no grade yet"]]


def test_per_chunk_grades_and_answer_fields(db_path):
    at = app()
    pk = current(at)
    Widget(at).grade(1, 1)
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
    # the added chunk is now in the grading widget, with its grade, after the retrieved ones
    added = Widget(at).data()["chunks"][-1]
    assert (added["doc_id"], added["grade"], added["added"], added["rank"]) == ("missed-1", 3, True, None)


def test_item_taken_meanwhile_refuses_the_events(db_path):
    db = labeler.connect(db_path)
    at = app()
    pk = current(at)
    w = Widget(at)
    later = datetime.now(UTC) + timedelta(minutes=30)  # alice's lease has run out: the item goes to bob
    while (other := labels.next_item(db, "bob", now=later)) != pk:
        assert other is not None
        labels.set_status(db, other, "bob", "skipped", now=later)
    w.grade(0, 3)
    assert "take the next item" in at.error[0].value
    assert w.data()["refused"][0][:3] == [w.client, pk, 1]
    assert grades(db_path, "alice", pk) == {}


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
    w = Widget(at)
    w.rest_zero()
    click(at, "kbd_submit")  # the mouse
    click(at, "kbd_back")
    assert current(at) == first
    click(at, "kbd_skip")  # leave it again
    click(at, f"hist_{first}")
    assert current(at) == first
    assert w.data()["item"] == first and [c["grade"] for c in w.data()["chunks"]] == [0, 0, 0]
    w.grade(0, 2)
    assert labels.get_item(labeler.connect(db_path), first, "alice").chunks[0].grade == 2


def test_reload_resumes_the_same_item(db_path):
    at = app()
    pk = current(at)
    Widget(at).grade(0, 2)
    again = app()  # a new session for the same annotator (reload, new tab)
    assert current(again) == pk
    assert labels.get_item(labeler.connect(db_path), pk, "alice").chunks[0].grade == 2


def test_blind_overlap_second_annotator_sees_no_other_labels(db_path):
    db = labeler.connect(db_path)
    labeler.set_setting(db, "overlap_fraction", 1.0)
    alice = app("alice")
    pk = current(alice)
    w = Widget(alice)
    w.grade(0, 3)
    w.rest_zero()
    w.submit()
    bob = app("bob")
    seen = {current(bob)}
    while current(bob) != pk and current(bob) is not None:
        click(bob, "kbd_skip")
        seen.add(current(bob))
    assert pk in seen
    assert current(bob) == pk
    item = labels.get_item(labeler.connect(db_path), pk, "bob")
    assert all(c.grade is None for c in item.chunks)
    assert [c["grade"] for c in Widget(bob).data()["chunks"]] == [None, None, None]


def test_text_from_logs_is_escaped(tmp_path, monkeypatch):
    evil = '<script>alert(1)</script><img src=x onerror="alert(2)"> [x](javascript:alert(3)) ![i](http://example.invalid/p.png)'
    path = make_db(tmp_path, [{"question": evil, "retrieved": [{"id": "e1", "text": evil + "\n| a | b |\n|---|---|"}]}])
    monkeypatch.setenv("LABELER_DB", str(path))
    at = app()
    html_bodies = [h.proto.body for h in at.get("html")]
    assert any("&lt;script&gt;alert(1)&lt;/script&gt;" in b for b in html_bodies)
    assert not any("<script>" in b or "<img" in b for b in html_bodies)
    assert not any("](javascript" in m.value for m in at.markdown)
    # chunk text goes to the grading widget as data, which puts it in the page with textContent only
    assert Widget(at).data()["chunks"][0]["text"].startswith("<script>alert(1)</script>")
    js = (Path(grader.__file__).parent / "grader.js").read_text()
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "outerHTML" not in js


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


# --- the pool: several retrievers ------------------------------------------------------------

POOLED = [
    {"query_id": "p1", "question": "how do refunds work", "retriever": retriever,
     "retrieved": [{"id": d, "text": f"text of {d}", "score": 0.9 - i / 10} for i, d in enumerate(ids)]}
    for retriever, ids in (("production", ["a", "b", "c"]), ("bm25", ["b", "d", "a"]))
]


@pytest.fixture
def pooled_path(tmp_path, monkeypatch):
    path = make_db(tmp_path, POOLED)
    monkeypatch.setenv("LABELER_DB", str(path))
    return path


def test_two_retrievers_pooled_and_blind(pooled_path):
    at = app()
    pk = current(at)
    w = Widget(at)
    chunks = w.data()["chunks"]
    assert sorted(c["doc_id"] for c in chunks) == ["a", "b", "c", "d"]  # each chunk once
    assert all(c["rank"] is None and c["score"] is None and c["sources"] == [] for c in chunks)
    shown = json.dumps(w.data()) + " ".join(str(e.value) for e in at.caption)
    assert "bm25" not in shown and "production" not in shown  # which retriever returned what is hidden
    for i, value in enumerate([3, 0, 2, 1]):
        w.grade(i, value)
    w.submit()
    assert current(at) != pk
    db = labeler.connect(pooled_path)
    assert db.execute("SELECT status FROM query_labels WHERE query_pk = ?", [pk]).fetchone() == ("submitted",)
    assert grades(pooled_path, "alice", pk) == {c["doc_id"]: v for c, v in zip(chunks, [3, 0, 2, 1], strict=True)}


def test_settings_pool_depth_and_show_sources(pooled_path):
    lead = app("alice")
    lead.switch_page("views/settings.py").run()
    lead.number_input(key="set_pool_depth").set_value(1)
    lead.checkbox(key="set_show_sources").check()
    lead.button(key="FormSubmitter:settings_form-Save settings").click().run()
    assert not lead.exception
    settings = labeler.get_settings(labeler.connect(pooled_path))
    assert (settings["pool_depth"], settings["show_sources"]) == (1, True)
    at = app("alice")
    chunks = Widget(at).data()["chunks"]
    assert sorted((c["doc_id"], [s["retriever"] for s in c["sources"]]) for c in chunks) == [
        ("a", ["production"]), ("b", ["bm25"])]


def test_requeued_item_shows_new_chunks(pooled_path, tmp_path):
    at = app()
    pk = current(at)
    w = Widget(at)
    w.send(*[{"doc_pk": c["doc_pk"], "grade": 0} for c in w.data()["chunks"]])
    w.submit()
    log = tmp_path / "more.jsonl"
    log.write_text(json.dumps({**POOLED[0], "retriever": "dense",
                               "retrieved": [{"id": "a", "text": "text of a"}, {"id": "z", "text": "new one"}]}) + "\n")
    labeler.ingest_logs(labeler.connect(pooled_path), log)
    again = app()
    assert current(again) == pk
    chunks = Widget(again).data()["chunks"]
    assert [c["doc_id"] for c in chunks if c["new"]] == ["z"]
    assert any("New chunks" in e.value for e in again.info)
