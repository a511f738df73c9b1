"""The lead's desk in a real browser: the lead resolves a flag from the inbox, filters the Items
table, selects a row, sees every annotator's grades side by side in the Label page's lead view
and re-queues the item; SQLite holds each change. An annotator's URL edit gets nothing."""

from __future__ import annotations

import sqlite3

import labeler
from tests.e2e.conftest import settle, sign_in_by_name
from tests.test_items import build_desk


def choose(page, label: str, option: str) -> None:
    page.locator('[data-testid="stSelectbox"]').filter(has_text=label).first.click()
    page.get_by_role("option", name=option, exact=True).click()
    settle(page)


def select_row(page, index: int) -> None:
    """Tick the row marker of row ``index`` of the Items table (a canvas grid: click by position)."""
    grid = page.locator('[data-testid="stDataFrame"]').first
    grid.wait_for()
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 * (index + 1) + 17)


def test_lead_resolves_a_flag_filters_opens_and_requeues(tmp_path, start_app, page, ingest_tiny):
    path = tmp_path / "desk.db"
    db = labeler.connect(path)
    q0, q1, *_ = build_desk(db, ingest_tiny)
    db.close()
    server = start_app(path)
    page.set_default_timeout(60_000)  # (a loaded 2-core machine)
    sign_in_by_name(page, server.url, "lena")
    flags = page.get_by_role("link", name="1 flag(s) to resolve")
    flags.wait_for()
    flags.click()
    page.get_by_role("tab", name="Flags (1)").click()
    page.get_by_text("the question has a typo").wait_for()
    page.get_by_label("Note for the annotator").fill("It reads fine, please label it")
    page.get_by_role("button", name="Unflag with note").click()
    page.get_by_role("tab", name="Flags (0)").wait_for()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT status FROM query_labels WHERE query_pk = ? AND annotator = 'alice'",
                            [q1]).fetchone() == ("in_progress",)
        assert conn.execute("SELECT action, note, lead FROM flag_resolutions").fetchall() == [
            ("unflagged", "It reads fine, please label it", "lena")]
    assert not page.get_by_role("link", name="1 flag(s) to resolve").count()

    page.get_by_role("tab", name="All items").click()
    page.get_by_text("6 item(s) match").wait_for()
    choose(page, "Annotator", "bob")
    page.get_by_text("2 item(s) match").wait_for()
    choose(page, "Status", "submitted")
    page.get_by_text("1 item(s) match").wait_for()
    select_row(page, 0)
    page.get_by_text("Lead view · query q000").wait_for()
    assert f"item={q0}" in page.url
    table = page.locator("table.lb-lead-grades")
    table.wait_for()
    assert table.locator("th").all_inner_texts()[2:4] == ["alice", "bob"]
    first = table.locator("tbody tr").first.locator("td").all_inner_texts()
    assert first[2:5] == ["3 highly relevant", "0 irrelevant", "2 relevant (conflict)"]
    page.get_by_role("button", name="Re-queue").click()
    page.get_by_text("Sent back to the queue of everyone").wait_for()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT annotator, status FROM query_labels WHERE query_pk = ? ORDER BY annotator",
                            [q0]).fetchall() == [("alice", "in_progress"), ("bob", "in_progress")]
        assert conn.execute("SELECT field, annotator FROM label_events WHERE field IN ('flag_resolve', 'item_requeue') "
                            "ORDER BY id").fetchall() == [("flag_resolve", "lena"), ("item_requeue", "lena")]


def test_an_annotator_editing_the_url_gets_nothing(tmp_path, start_app, page, ingest_tiny):
    path = tmp_path / "desk.db"
    db = labeler.connect(path)
    q0, *_ = build_desk(db, ingest_tiny)
    db.close()
    server = start_app(path)
    page.set_default_timeout(60_000)
    sign_in_by_name(page, server.url, "bob")
    page.goto(f"{server.url}/?item={q0}")
    page.get_by_text("Opening an item with everyone's grades is for leads only.").wait_for()
    settle(page)
    assert not page.get_by_text("Lead view").count() and not page.get_by_role("button", name="Re-queue").count()
    page.goto(f"{server.url}/items")
    page.get_by_role("button", name="Sign out").wait_for()
    settle(page)
    assert not page.get_by_role("tab", name="All items").count()
    assert not page.get_by_role("link", name="Items").count()
