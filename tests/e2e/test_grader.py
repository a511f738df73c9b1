"""The grading widget in a real browser, typed at as people type: keys 20 ms apart and in bursts,
a reload in the middle of an item, the server stopped while keys are pressed; every grade must be
stored once, on the chunk it was meant for (checked in SQLite). Also focus, Enter, Escape, the page
layout at 1280 px, and hostile chunk text shown literally."""

from __future__ import annotations

import json
import random
import sqlite3
import time
from pathlib import Path

import pytest

import labeler
from tests.e2e.conftest import settle, sign_in_by_name

N_CHUNKS = 8


def make_db(tmp_path: Path, items: int, chunks: int = N_CHUNKS, text=None) -> Path:
    path = tmp_path / "grader.db"
    db = labeler.connect(path)
    log = tmp_path / "logs.jsonl"
    log.write_text("".join(json.dumps({
        "query_id": f"q{i:02d}", "question": f"how do i rotate api key {i}",
        "retrieved": [{"id": f"d{i:02d}-{r}", "score": round(1 - r / 20, 2),
                       "text": text if text is not None else f"Chunk {r} of item {i}: keys live under Settings."}
                      for r in range(chunks)]}) + "\n" for i in range(items)))
    labeler.ingest_logs(db, log)
    labeler.set_setting(db, "overlap_fraction", 0.0)
    db.conn.close()
    return path


def open_label(page, url: str, name: str = "alice") -> int:
    sign_in_by_name(page, url, name)
    page.locator(".lb-grader .lb-chunk").first.wait_for()
    return shown_item(page)


def shown_item(page) -> int:
    return int(page.locator(".lb-grader").get_attribute("data-item"))


def next_shown(page, old: int, timeout: float = 30_000) -> int:
    page.wait_for_function("(old) => { const g = document.querySelector('.lb-grader');"
                           " return g && g.dataset.item !== String(old) }", arg=old, timeout=timeout)
    page.locator(".lb-grader .lb-chunk").first.wait_for()
    return shown_item(page)


def saved(page, timeout: float = 30_000) -> None:
    page.wait_for_function("() => { const s = document.querySelector('.lb-save');"
                           " return s && s.textContent === 'saved' }", timeout=timeout)


def stored(db_path: Path, pk: int) -> list[int | None]:
    """The annotator's grades of the item's chunks, by rank."""
    with sqlite3.connect(db_path) as conn:
        return [g for (g,) in conn.execute(
            "SELECT l.grade FROM retrievals r LEFT JOIN relevance_labels l ON l.query_pk = r.query_pk "
            "AND l.doc_pk = r.doc_pk AND l.annotator = 'alice' WHERE r.query_pk = ? ORDER BY r.rank", [pk])]


def grade_events(db_path: Path, pk: int) -> list[tuple[int, str]]:
    """(rank, new grade) of every grade event of the item, in the order they were stored."""
    with sqlite3.connect(db_path) as conn:
        return conn.execute(
            "SELECT r.rank, e.new FROM label_events e JOIN retrievals r ON r.query_pk = e.query_pk "
            "AND r.doc_pk = e.doc_pk WHERE e.query_pk = ? AND e.field = 'grade' AND e.annotator = 'alice' "
            "ORDER BY e.id", [pk]).fetchall()


def status(db_path: Path, pk: int) -> str | None:
    with sqlite3.connect(db_path) as conn:
        row = conn.execute("SELECT status FROM query_labels WHERE query_pk = ? AND annotator = 'alice'", [pk]).fetchone()
    return row[0] if row else None


def check_item(db_path: Path, pk: int, keys: list[int]) -> None:
    """Every key landed on the chunk it was meant for (the i-th key on rank i+1), once, and the
    item was submitted."""
    assert stored(db_path, pk) == keys, f"item {pk}"
    assert grade_events(db_path, pk) == [(rank + 1, str(k)) for rank, k in enumerate(keys)], f"item {pk}"
    assert status(db_path, pk) == "submitted"


def type_items(page, db_path: Path, n: int, delay_ms: int, seed: int) -> dict[int, list[int]]:
    rng = random.Random(seed)
    intended: dict[int, list[int]] = {}
    item = shown_item(page)
    for _ in range(n):
        keys = [rng.randrange(4) for _ in range(N_CHUNKS)]
        intended[item] = keys
        # the grades, then Enter; Playwright waits `delay` between keys (0: a burst)
        page.keyboard.type("".join(map(str, keys)) + "\n", delay=delay_ms)
        item = next_shown(page, item)  # a person reads the next question before grading it
    return intended


def test_twenty_items_typed_20_ms_apart_land_on_the_intended_chunks(tmp_path, start_app, page):
    db_path = make_db(tmp_path, items=21)
    server = start_app(db_path)
    open_label(page, server.url)
    intended = type_items(page, db_path, 20, delay_ms=20, seed=12)
    saved(page)
    assert len(intended) == 20
    for pk, keys in intended.items():
        check_item(db_path, pk, keys)


def test_bursts_with_no_gap_land_on_the_intended_chunks(tmp_path, start_app, page):
    db_path = make_db(tmp_path, items=6)
    server = start_app(db_path)
    open_label(page, server.url)
    intended = type_items(page, db_path, 5, delay_ms=0, seed=3)
    saved(page)
    for pk, keys in intended.items():
        check_item(db_path, pk, keys)


def test_a_reload_in_the_middle_of_an_item_loses_nothing(tmp_path, start_app, page):
    db_path = make_db(tmp_path, items=2)
    server = start_app(db_path)
    pk = open_label(page, server.url)
    page.keyboard.type("3102", delay=20)
    page.reload()  # at once: some of the four may not have reached the server
    assert open_label(page, server.url) == pk
    page.get_by_text("4 of 8 retrieved chunks graded").wait_for()
    page.keyboard.type("2130\n", delay=20)
    next_shown(page, pk)
    saved(page)
    check_item(db_path, pk, [3, 1, 0, 2, 2, 1, 3, 0])


def test_server_stopped_for_3_s_while_keys_are_pressed(tmp_path, start_app, page):
    db_path = make_db(tmp_path, items=2)
    server = start_app(db_path)
    pk = open_label(page, server.url)
    page.keyboard.type("213", delay=20)
    server.kill()
    down = time.monotonic()
    # five more grades and Enter, spread over the 3 s the server is away; the screen keeps up
    page.keyboard.type("02", delay=20)
    # drawn by the page alone, well inside the 3 s the server is away
    page.get_by_text("5 of 8 retrieved chunks graded").wait_for(timeout=2_000)
    page.keyboard.type("311\n", delay=500)
    # the widget says so while the server is away (it resends every 1.5 s); the outage lasts 3 s
    page.get_by_text("not saved: retrying").wait_for(timeout=5_000)
    until = page.evaluate("Date.now()") + max(0.0, 3.0 - (time.monotonic() - down)) * 1000
    page.wait_for_function("(until) => { if (document.querySelector('.lb-save').textContent !== "
                           "'not saved: retrying') throw new Error('the status changed while the server was away');"
                           " return Date.now() >= until }", arg=until, polling=100)
    assert time.monotonic() - down >= 3.0
    restarted = start_app(db_path, port=server.port)
    assert restarted.url == server.url
    nxt = next_shown(page, pk, timeout=60_000)  # the page reconnects, resends, and the submit goes through
    saved(page)
    assert nxt != pk
    check_item(db_path, pk, [2, 1, 3, 0, 2, 3, 1, 1])


def test_focus_enter_escape_and_scrolling(tmp_path, start_app, page):
    db_path = make_db(tmp_path, items=2)
    server = start_app(db_path)
    pk = open_label(page, server.url)
    focused = "() => [...document.querySelectorAll('.lb-chunk')].findIndex(r => r.classList.contains('lb-focused'))"
    assert page.evaluate(focused) == 0
    page.keyboard.press("2")
    assert page.evaluate(focused) == 1  # the next ungraded chunk
    assert page.locator(".lb-chunk").first.get_attribute("data-grade") == "2"
    page.keyboard.press("k")
    assert page.evaluate(focused) == 0
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert page.evaluate(focused) == 2
    page.keyboard.press("Enter")  # chunk #2 has no grade: named and focused, nothing submitted
    page.get_by_text("Chunk #2 (d", exact=False).wait_for()
    assert page.evaluate(focused) == 1
    # keys typed in a text box stay there; Escape leaves the box, then keys grade again
    box = page.get_by_label("The answer a good assistant should give")
    box.click()
    page.keyboard.type("13")
    assert box.input_value() == "13" and page.locator(".lb-chunk").nth(1).get_attribute("data-grade") == ""
    page.keyboard.press("Escape")
    assert page.evaluate("() => document.activeElement.tagName") != "TEXTAREA"
    page.keyboard.press("3")
    assert page.locator(".lb-chunk").nth(1).get_attribute("data-grade") == "3"
    # the focused chunk scrolls into view
    for _ in range(5):
        page.keyboard.press("j")
    assert page.evaluate(focused) == 7
    last = page.locator(".lb-chunk").nth(7).bounding_box()
    assert 0 <= last["y"] and last["y"] + last["height"] <= page.viewport_size["height"]
    saved(page)
    assert stored(db_path, pk)[:2] == [2, 3] and status(db_path, pk) != "submitted"


def test_page_layout_at_1280_px(tmp_path, start_app, browser):
    db_path = make_db(tmp_path, items=2)
    with sqlite3.connect(db_path) as conn:  # a corpus with many matches for the search
        conn.execute("UPDATE documents SET in_corpus = 1")
    server = start_app(db_path)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        open_label(page, server.url)
        toolbar = page.locator(".st-key-toolbar")
        tops = {round(toolbar.get_by_role("button", name=n, exact=False).bounding_box()["y"])
                for n in ("Submit", "Skip", "Back")}
        assert len(tops) == 1, tops  # the toolbar is one row
        assert toolbar.bounding_box()["height"] < 60
        bar = page.locator(".lb-bar .lb-btn")
        assert bar.all_inner_texts()[:4] == ["0 irrelevant", "1 related", "2 relevant", "3 highly relevant"]
        assert len({round(b.bounding_box()["y"]) for b in bar.all()}) == 1  # one row too
        assert page.get_by_text("A accept").count() == 0 and page.get_by_text("Judge suggests").count() == 0
        flag = page.get_by_role("button", name="Flag for the lead")
        settle(page)  # the page has finished drawing before it is measured
        before = flag.bounding_box()["y"]
        search = page.get_by_placeholder("words from the missing chunk")
        search.fill("rotate keys settings chunk")
        search.press("Enter")
        page.get_by_text("matching chunks").wait_for()
        settle(page)
        assert flag.bounding_box()["y"] == before  # results never push the flag box down
        page.get_by_text("matching chunks").click()  # collapsible
        page.get_by_role("button", name="Add as 2").first.wait_for(state="hidden")
        page.mouse.click(5, 5)
        page.keyboard.press("F")  # no reason written: the error shows next to the flag box
        error = page.get_by_text("Write what is wrong in the flag reason box")
        error.wait_for()
        reason = page.get_by_label("Reason to flag or discard").bounding_box()
        assert reason["y"] < error.bounding_box()["y"] < flag.bounding_box()["y"]
    finally:
        context.close()


HOSTILE = ('<script>window.__pwned = 1</script><img src="http://127.0.0.1:9/t.png" onerror="window.__pwned = 2">'
           '<b>bold</b> &amp; [link](javascript:window.__pwned=3)')


def test_hostile_chunk_text_shows_literally(tmp_path, start_app, page):
    db_path = make_db(tmp_path, items=1, chunks=2, text=HOSTILE)
    server = start_app(db_path)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    open_label(page, server.url)
    assert page.locator(".lb-text").first.text_content() == HOSTILE
    assert page.locator(".lb-grader img, .lb-grader script, .lb-grader b, .lb-grader a").count() == 0
    page.keyboard.press("1")
    saved(page)
    assert page.evaluate("window.__pwned") is None
    assert not [u for u in requests if "127.0.0.1:9" in u]


def test_back_to_a_finished_item_grades_it_again(tmp_path, start_app, page):
    db_path = make_db(tmp_path, items=3)
    server = start_app(db_path)
    first = open_label(page, server.url)
    page.keyboard.type("12301230\n", delay=20)
    second = next_shown(page, first)
    page.keyboard.press("B")  # back to the item just submitted: its stream goes on from seq 9
    assert next_shown(page, second) == first
    page.get_by_text("8 of 8 retrieved chunks graded").wait_for()
    page.keyboard.press("3")  # the focused chunk (the first) becomes 3
    saved(page)
    assert stored(db_path, first) == [3, 2, 3, 0, 1, 2, 3, 0]
    assert grade_events(db_path, first)[-1] == (1, "3") and len(grade_events(db_path, first)) == 9


def _type_after_enter(page, db_path: Path, delay_ms: int) -> tuple[int, int]:
    """Grade the first item, then Enter and 3, 2, Z with ``delay_ms`` between keys, none waiting
    for the next item; return (first item, next item)."""
    first = shown_item(page)
    page.keyboard.type("12301230", delay=20)
    page.get_by_text("8 of 8 retrieved chunks graded").wait_for()
    page.keyboard.type("\n32z", delay=delay_ms)
    return first, next_shown(page, first)


@pytest.mark.parametrize("delay_ms", [0, 20])
def test_keys_typed_after_enter_land_on_the_next_item(tmp_path, start_app, page, delay_ms):
    db_path = make_db(tmp_path, items=3)
    server = start_app(db_path)
    open_label(page, server.url)
    first, second = _type_after_enter(page, db_path, delay_ms)
    # 3 grades the next item's first chunk, 2 the chunk the focus moved to, Z the six others 0
    page.get_by_text("8 of 8 retrieved chunks graded").wait_for()
    saved(page)
    check_item(db_path, first, [1, 2, 3, 0, 1, 2, 3, 0])
    assert stored(db_path, second) == [3, 2, 0, 0, 0, 0, 0, 0]
    assert grade_events(db_path, second) == [(1, "3"), (2, "2")] + [(r, "0") for r in range(3, 9)]
    assert status(db_path, second) == "in_progress"  # graded, not submitted: the keys held no Enter for it


def test_keys_after_enter_with_nothing_left_say_so(tmp_path, start_app, page):
    db_path = make_db(tmp_path, items=1)
    server = start_app(db_path)
    first = open_label(page, server.url)
    page.keyboard.type("12301230", delay=20)
    page.get_by_text("8 of 8 retrieved chunks graded").wait_for()
    page.keyboard.type("\n32", delay=0)
    page.get_by_text("2 keys typed after Enter were not applied: nothing left in your queue.").wait_for()
    check_item(db_path, first, [1, 2, 3, 0, 1, 2, 3, 0])


def test_the_next_item_opens_with_its_question_in_view(tmp_path, start_app, browser):
    long_text = "Keys live under Settings, API, Keys; rotate them there. " * 6
    db_path = make_db(tmp_path, items=3, text=long_text)
    server = start_app(db_path)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        first = open_label(page, server.url)
        page.keyboard.type("12301230", delay=20)  # the focus walks down the list, the page scrolls with it
        page.get_by_text("8 of 8 retrieved chunks graded").wait_for()
        assert page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollTop") > 0
        question = page.locator('.lb-plain[data-key="question"]')
        asked = question.inner_text()
        page.keyboard.press("Enter")
        second = next_shown(page, first)
        page.wait_for_function("(q) => document.querySelector('.lb-plain[data-key=question]').innerText !== q",
                               arg=asked)
        box = question.bounding_box()
        assert second != first and box is not None
        assert 0 <= box["y"] and box["y"] + box["height"] <= 900, box
    finally:
        context.close()


def test_a_page_shortcut_after_enter_is_reported_not_applied_to_the_item_submitted(tmp_path, start_app, page):
    db_path = make_db(tmp_path, items=3)
    server = start_app(db_path)
    first = open_label(page, server.url)
    page.keyboard.type("12301230", delay=20)
    page.get_by_text("8 of 8 retrieved chunks graded").wait_for()
    page.keyboard.type("\ns3", delay=0)  # S (skip) typed before the next item is drawn, then a grade
    second = next_shown(page, first)
    page.get_by_text("S (a page shortcut) does not wait for the next item; press it again.",
                     exact=False).wait_for()
    saved(page)
    check_item(db_path, first, [1, 2, 3, 0, 1, 2, 3, 0])  # still submitted, not skipped
    assert status(db_path, second) is None and stored(db_path, second) == [None] * N_CHUNKS
