"""The Items page and the Label page's lead view through AppTest: a lead filters, opens an item with
every annotator's grades, re-queues it and resolves a flag; an annotator gets none of it, by the
navigation, by the page's file or by editing the URL."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from streamlit.testing.v1 import AppTest

import labeler
from labeler import labels as L
from labeler.app import state
from tests.conftest import tiny_records
from tests.test_app_label import APP
from tests.test_app_roles import view_file
from tests.test_items import at, label


@pytest.fixture
def desk_path(tmp_path, monkeypatch, write_log):
    """lena (lead), alice and bob; q000 submitted by both (conflict on its first chunk), q001
    flagged by alice, q002 skipped by bob."""
    path = tmp_path / "desk.db"
    db = labeler.connect(path)
    labeler.ingest_logs(db, write_log(tiny_records(6, 3)))
    L.add_annotator(db, "lena", "lead")
    L.add_annotator(db, "alice")
    L.add_annotator(db, "bob")
    labeler.set_setting(db, "overlap_fraction", 1.0)
    pks = [r[0] for r in db.execute("SELECT pk FROM queries ORDER BY pk")]
    label(db, pks[0], "alice", [3, 0, 2], now=at(1))
    label(db, pks[0], "bob", [0, 0, 2], now=at(2))
    label(db, pks[1], "alice", [1], status="flagged", reason="typo in the question", now=at(3))
    L.set_status(db, pks[2], "bob", "skipped", now=at(4))
    db.close()
    monkeypatch.setenv("LABELER_DB", str(path))
    return path


def pks(path) -> list[int]:
    db = labeler.connect(path)
    return [r[0] for r in db.execute("SELECT pk FROM queries ORDER BY pk")]


def items_page(name: str = "lena") -> AppTest:
    at_ = AppTest.from_file(APP, default_timeout=60)
    at_.session_state[state.ANNOTATOR] = name
    at_.run()
    at_.switch_page("views/items.py")
    at_.run()
    assert not at_.exception, at_.exception
    return at_


def lead_view(name: str, pk: int) -> AppTest:
    at_ = AppTest.from_file(APP, default_timeout=60)
    at_.session_state[state.ANNOTATOR] = name
    at_.query_params[state.ITEM_PARAM] = str(pk)
    at_.run()
    assert not at_.exception, at_.exception
    return at_


def table(at_: AppTest):
    """The Items table (the only selectable dataframe: its element id carries its key)."""
    return next(d for d in at_.dataframe if "items_table" in d.proto.id).value


class _Table(HTMLParser):
    """Rows of cell texts of an HTML table (the header row first)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None

    def handle_data(self, data) -> None:
        if self.cell is not None:
            self.cell.append(data)


def grades_table(at_: AppTest) -> dict[str, list[str]] | None:
    """The lead view's side-by-side grades, {column: values} (read from its HTML table), or None."""
    body = next((h.proto.body for h in at_.get("html") if "lb-lead-grades" in h.proto.body), None)
    if body is None:
        return None
    parser = _Table()
    parser.feed(body)
    head, *rows = parser.rows
    return {name: [row[i] for row in rows] for i, name in enumerate(head)}


def test_lead_filters_the_items(desk_path):
    at_ = items_page()
    assert list(table(at_)["query"]) == [f"q{i:03d}" for i in range(6)]
    first = table(at_).iloc[0]
    assert first["annotators"].startswith("alice submitted") and first["relevant"] == 2 and first["conflict"]
    at_.selectbox(key="items_status").set_value("flagged").run()
    assert list(table(at_)["query"]) == ["q001"]
    assert table(at_).iloc[0]["flag reason"] == "alice: typo in the question"
    at_.selectbox(key="items_status").set_value("any").run()
    at_.selectbox(key="items_annotator").set_value("bob").run()
    assert list(table(at_)["query"]) == ["q000", "q002"]
    at_.text_input(key="items_search").set_value("item q2").run()
    assert list(table(at_)["query"]) == ["q002"]
    at_.selectbox(key="items_annotator").set_value("any").run()
    at_.text_input(key="items_search").set_value("").run()
    at_.selectbox(key="items_conflict").set_value("yes").run()
    assert list(table(at_)["query"]) == ["q000"]
    assert not at_.exception


def test_paging_reads_one_page(desk_path):
    at_ = items_page()
    at_.selectbox(key="items_page_size").set_value(25).run()
    assert len(table(at_)) == 6
    db = labeler.connect(desk_path)
    labeler.ingest_logs(db, _log(desk_path, 60))
    at_.run()
    assert len(table(at_)) == 25
    at_.number_input(key=state.ITEMS_PAGE).set_value(3).run()
    assert len(table(at_)) == 66 - 50 and table(at_).iloc[0]["query"] == "p044"
    at_.selectbox(key="items_origin").set_value("log").run()  # a filter change goes back to page 1
    assert at_.session_state[state.ITEMS_PAGE] == 1 and table(at_).iloc[0]["query"] == "q000"


def _log(path, n: int):
    import json

    log = path.parent / "more.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in tiny_records(n, 2, prefix="p")))
    return log


def test_lead_view_shows_grades_side_by_side_and_requeues(desk_path):
    q0 = pks(desk_path)[0]
    at_ = lead_view("lena", q0)
    grades = grades_table(at_)
    assert list(grades["alice"]) == ["3 highly relevant", "0 irrelevant", "2 relevant"]
    assert list(grades["bob"]) == ["0 irrelevant", "0 irrelevant", "2 relevant"]
    assert list(grades["consolidated"]) == ["2 relevant (conflict)", "0 irrelevant", "2 relevant"]
    at_.multiselect(key=f"lead_requeue_who_{q0}").set_value(["bob"]).run()
    at_.button(key="lead_requeue").click().run()
    assert not at_.exception, at_.exception
    db = labeler.connect(desk_path)
    assert dict(db.execute("SELECT annotator, status FROM query_labels WHERE query_pk = ?", [q0]).fetchall()) == {
        "alice": "submitted", "bob": "in_progress"}
    assert L.next_item(db, "bob") == q0
    at_.button(key="lead_adjudicate").click().run()
    assert [c.query_pk for c in L.conflicts(db)] == [q0]
    at_.text_input(key=f"lead_discard_reason_{q0}").set_value("duplicate of q003").run()
    at_.button(key="lead_discard").click().run()
    assert db.execute("SELECT discard_reason FROM queries WHERE pk = ?", [q0]).fetchone() == ("duplicate of q003",)
    assert any("Discarded" in s.value for s in at_.success)
    at_.button(key="lead_restore").click().run()  # the lead changes their mind
    assert not at_.exception, at_.exception
    assert db.execute("SELECT discarded_at FROM queries WHERE pk = ?", [q0]).fetchone() == (None,)
    assert dict(db.execute("SELECT annotator, status FROM query_labels WHERE query_pk = ?", [q0]).fetchall()) == {
        "alice": "submitted", "bob": "in_progress"}
    assert any("Restored" in s.value for s in at_.success) and at_.button(key="lead_discard")


def test_lead_resolves_a_flag_and_the_annotator_sees_the_note(desk_path):
    q1 = pks(desk_path)[1]
    at_ = items_page()
    assert any(link.label == "1 flag(s) to resolve" for link in at_.sidebar.get("page_link"))
    ident = f"{q1}_alice"
    at_.button(key=f"flag_unflag_{ident}").click().run()  # no note: refused, nothing written
    assert any("note is empty" in e.value for e in at_.error)
    db = labeler.connect(desk_path)
    assert L.flag_count(db) == 1
    at_.text_area(key=f"flag_question_{ident}").set_value("What is item q1 exactly?").run()
    at_.text_input(key=f"flag_note_{ident}").set_value("Fixed the typo, please label it again").run()
    at_.button(key=f"flag_edit_{ident}").click().run()
    assert not at_.exception, at_.exception
    assert L.flag_count(db) == 0 and L.original_question(db, q1) == "What is item q1?"
    assert db.execute("SELECT question FROM queries WHERE pk = ?", [q1]).fetchone() == ("What is item q1 exactly?",)
    assert not at_.sidebar.get("page_link") or all("flagged" not in link.label
                                                   for link in at_.sidebar.get("page_link"))
    # alice gets the item back first, with the lead's answer on it
    alice = AppTest.from_file(APP, default_timeout=60)
    alice.session_state[state.ANNOTATOR] = "alice"
    alice.run()
    assert alice.session_state[state.CURRENT] == q1
    assert any("lena edited the question" in i.value and "Fixed the typo" in i.value for i in alice.info)


def test_the_open_button_of_a_flag_opens_the_lead_view(desk_path):
    q1 = pks(desk_path)[1]
    at_ = items_page()
    at_.button(key=f"flag_open_{q1}_alice").click().run()
    assert not at_.exception, at_.exception
    assert at_.query_params[state.ITEM_PARAM] == str(q1)
    assert list(grades_table(at_)["alice"])[:1] == ["1 related"]


def test_an_annotator_gets_nothing(desk_path):
    q0 = pks(desk_path)[0]
    bob = AppTest.from_file(APP, default_timeout=60)
    bob.session_state[state.ANNOTATOR] = "bob"
    bob.run()
    assert "views/items.py" not in str(bob._tree) and not bob.sidebar.get("page_link")
    page = view_file("items.py", "bob")  # the page's URL typed in
    assert [e.value for e in page.error] == ["The Items page is for leads only."]
    assert not page.dataframe and not page.button
    # the lead view's URL edited by hand: a refusal, then bob's own item, never alice's grades
    bob = lead_view("bob", q0)
    assert any("for leads only" in e.value for e in bob.error)
    assert grades_table(bob) is None
    assert "lead_requeue" not in [b.key for b in bob.button]
    assert state.ITEM_PARAM not in bob.query_params
