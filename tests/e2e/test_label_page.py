"""The labeling workspace in a real browser: keyboard grading, search, answer, submit, overlap,
adjudication, hostile text, the password gate, and a killed server losing nothing."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import labeler
import labeler.labels as labels
from tests.e2e.conftest import settle, sign_in_by_name

RECORDS = [
    {"query_id": f"q{i}", "question": f"how do i export invoice batch {i}", "answer": f"Use export {i}.",
     "retrieved": [{"id": f"d{i}-{r}", "text": f"Chunk {r} for batch {i}.", "score": round(1 - r / 10, 2)}
                   for r in range(3)]}
    for i in range(3)
]
CORPUS = [{"id": "missed-webhook", "text": "Webhook signing secrets live under Settings, Developers, Webhooks."}]


def make_db(tmp_path: Path, records=RECORDS, corpus=CORPUS, **settings) -> Path:
    path = tmp_path / "label.db"
    db = labeler.connect(path)
    log = tmp_path / "logs.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    labeler.ingest_logs(db, log)
    if corpus:
        c = tmp_path / "corpus.jsonl"
        c.write_text("".join(json.dumps(r) + "\n" for r in corpus))
        labeler.ingest_corpus(db, c)
    for k, v in settings.items():
        labeler.set_setting(db, k, v)
    return path


def sign_in(page, url: str, name: str) -> None:
    sign_in_by_name(page, url, name)
    page.get_by_text("retrieved chunks graded").wait_for()


def blur(page) -> None:
    """Wait for the app to finish rerunning, then take focus out of any text box, so the keyboard
    shortcuts reach the app."""
    settle(page)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")


def graded(page, n: int, total: int = 3) -> None:
    page.get_by_text(f"{n} of {total} retrieved chunks graded").wait_for()


def saved(page) -> None:
    """Wait until the grading widget says every grade is acknowledged by the server."""
    page.locator(".lb-save", has_text="saved").wait_for()
    page.wait_for_function("() => document.querySelector('.lb-save').textContent === 'saved'")


def current_query(page) -> str:
    return page.get_by_text("Query q").first.inner_text().split()[1]


def test_annotator_labels_an_item_with_the_keyboard(tmp_path, start_app, page):
    db_path = make_db(tmp_path)
    server = start_app(db_path)
    sign_in(page, server.url, "alice")
    qid = current_query(page)
    blur(page)
    page.keyboard.press("3")
    graded(page, 1)
    page.keyboard.press("1")
    graded(page, 2)
    page.keyboard.press("Z")
    graded(page, 3)

    page.get_by_placeholder("words from the missing chunk").fill("webhook signing secret")
    page.get_by_placeholder("words from the missing chunk").press("Enter")
    page.locator(".st-key-hits").get_by_role("button", name="Add as 2").first.click()  # the typed search's hit
    page.get_by_text("Added from search").wait_for()

    page.get_by_label("The answer a good assistant should give").fill("Export the batch from Invoices.")
    page.get_by_label("Notes").click()  # leaving the text area saves it
    page.wait_for_timeout(300)
    blur(page)
    page.keyboard.press("Enter")
    page.wait_for_function(f"() => !document.body.innerText.includes('Query {qid} ')")

    conn = sqlite3.connect(db_path)
    rows = dict(conn.execute(
        "SELECT d.doc_id, l.grade FROM relevance_labels l JOIN documents d ON d.pk = l.doc_pk "
        "JOIN queries q ON q.pk = l.query_pk WHERE q.query_id = ? AND l.annotator = 'alice'", [qid]).fetchall())
    n = qid[1:]
    assert rows == {f"d{n}-0": 3, f"d{n}-1": 1, f"d{n}-2": 0, "missed-webhook": 2}
    status, answer = conn.execute(
        "SELECT status, expected_answer FROM query_labels l JOIN queries q ON q.pk = l.query_pk "
        "WHERE q.query_id = ? AND annotator = 'alice'", [qid]).fetchone()
    assert (status, answer) == ("submitted", "Export the batch from Invoices.")


def test_second_annotator_gets_the_overlapped_item_blind(tmp_path, start_app, browser):
    db_path = make_db(tmp_path, overlap_fraction=1.0)
    server = start_app(db_path)
    ctx_a, ctx_b = browser.new_context(), browser.new_context()
    alice, bob = ctx_a.new_page(), ctx_b.new_page()
    try:
        sign_in(alice, server.url, "alice")
        qid = current_query(alice)
        blur(alice)
        alice.keyboard.press("3")
        graded(alice, 1)
        alice.keyboard.press("Z")
        graded(alice, 3)
        alice.keyboard.press("Enter")
        alice.wait_for_function(f"() => !document.body.innerText.includes('Query {qid} ')")

        sign_in(bob, server.url, "bob")
        for _ in range(3):
            if current_query(bob) == qid:
                break
            blur(bob)
            shown = current_query(bob)
            bob.keyboard.press("S")
            bob.wait_for_function(f"() => !document.body.innerText.includes('Query {shown} ')")
        assert current_query(bob) == qid
        graded(bob, 0)  # blind: alice's grades are not shown to bob
    finally:
        ctx_a.close()
        ctx_b.close()


def test_adjudication_in_the_browser(tmp_path, start_app, page):
    db_path = make_db(tmp_path, overlap_fraction=1.0)
    db = labeler.connect(db_path)
    labels.add_annotator(db, "lead", "lead")
    pk = labels.next_item(db, "alice")
    doc = labels.get_item(db, pk, "alice").chunks[0]
    labels.set_grade(db, pk, doc.doc_pk, "alice", 3)
    labels.set_rest_zero(db, pk, "alice")
    labels.set_status(db, pk, "alice", "submitted")
    while (other := labels.next_item(db, "bob")) != pk:
        labels.set_status(db, other, "bob", "skipped")
    labels.set_rest_zero(db, pk, "bob")
    labels.set_status(db, pk, "bob", "submitted")
    server = start_app(db_path)
    sign_in(page, server.url, "lead")
    page.get_by_role("link", name="Adjudication").click()
    page.get_by_text("1 item(s) to look at").wait_for()
    page.get_by_role("button", name="Final 2").click()
    page.get_by_text("0 item(s) to look at").wait_for()
    assert sqlite3.connect(db_path).execute("SELECT grade, lead FROM adjudications").fetchall() == [(2, "lead")]


HOSTILE = ('<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> '
           '[click](javascript:window.__pwned=3) ![img](http://127.0.0.1:9/tracker.png)\n| a | b |\n|---|---|\n| 1 | 2 |')


def test_hostile_text_shows_literally_and_runs_nothing(tmp_path, start_app, page):
    db_path = make_db(tmp_path, records=[{"question": "hostile " + HOSTILE, "answer": HOSTILE,
                                          "retrieved": [{"id": "evil", "text": HOSTILE}]}], corpus=None)
    server = start_app(db_path)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    sign_in(page, server.url, "alice")
    page.get_by_text("<script>window.__pwned = 1</script>", exact=False).first.wait_for()
    assert page.evaluate("window.__pwned") is None
    assert page.locator(".lb-text img, .lb-plain img, .lb-text script, .lb-text a").count() == 0
    assert page.get_by_text("| a | b |", exact=False).count() >= 1
    assert not [u for u in requests if "tracker.png" in u or u.startswith("http://x")]


def test_password_gate_in_the_browser(tmp_path, start_app, page):
    db_path = make_db(tmp_path)
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "secrets.toml").write_text('password = "open sesame"\n')
    server = start_app(db_path)  # runs with cwd=tmp_path, so it reads tmp_path/.streamlit/secrets.toml
    page.goto(server.url + "/?annotator=alice")  # the URL signs nobody in
    page.get_by_label("Password", exact=True).wait_for()
    body = page.locator("body").inner_text()
    assert "how do i export" not in body and "retrieved chunks" not in body
    page.get_by_label("Password", exact=True).fill("wrong")
    page.get_by_label("Password", exact=True).press("Enter")
    page.get_by_text("wrong password").wait_for()
    assert "how do i export" not in page.locator("body").inner_text()
    page.get_by_label("Password", exact=True).fill("open sesame")
    page.get_by_label("Password", exact=True).press("Enter")
    page.get_by_label("Your name").fill("alice")  # then a name (this mode is for a solo user)
    page.get_by_role("button", name="Start labeling").click()
    page.get_by_text("retrieved chunks graded").wait_for()
    page.reload()  # the session cookie covers the password too
    page.get_by_text("retrieved chunks graded").wait_for()


def test_killed_server_loses_nothing(tmp_path, start_app, page):
    db_path = make_db(tmp_path)
    server = start_app(db_path)
    sign_in(page, server.url, "alice")
    qid = current_query(page)
    blur(page)
    page.keyboard.press("2")
    graded(page, 1)
    page.keyboard.press("1")
    graded(page, 2)  # on screen at once ...
    saved(page)  # ... and stored once the widget says so
    server.kill()  # SIGKILL in the middle of the item
    conn = sqlite3.connect(db_path)
    grades = conn.execute("SELECT l.grade FROM relevance_labels l JOIN queries q ON q.pk = l.query_pk "
                          "WHERE q.query_id = ? ORDER BY l.doc_pk", [qid]).fetchall()
    assert sorted(g for (g,) in grades) == [1, 2]
    restarted = start_app(db_path)
    page.goto(restarted.url)  # the session cookie outlives the server: still alice, no sign-in
    page.get_by_text("retrieved chunks graded").wait_for()
    assert page.get_by_label("Your name").count() == 0
    assert current_query(page) == qid  # resumes the same item
    graded(page, 2)


def test_flag_and_skip_with_the_keyboard(tmp_path, start_app, page):
    db_path = make_db(tmp_path)
    server = start_app(db_path)
    sign_in(page, server.url, "alice")
    first = current_query(page)
    blur(page)
    page.keyboard.press("S")
    page.wait_for_function(f"() => !document.body.innerText.includes('Query {first} ')")
    second = current_query(page)
    settle(page)  # the old item's reason box stays on the page until the new item is drawn
    page.get_by_label("Reason to flag or discard").fill("two questions in one")
    page.get_by_label("Reason to flag or discard").press("Tab")
    page.wait_for_timeout(300)
    blur(page)
    for attempt in range(3):
        page.keyboard.press("F")
        try:
            page.wait_for_function(f"() => !document.body.innerText.includes('Query {second} ')", timeout=8000)
            break
        except Exception:
            # Streamlit can drop a shortcut pressed while the rerun that the text box's commit started
            # is still running (seen in CI under load); an annotator would press again, and so do we,
            # but only while the item is not flagged, so nothing is flagged twice
            flagged = sqlite3.connect(db_path).execute(
                "SELECT count(*) FROM query_labels l JOIN queries q ON q.pk = l.query_pk "
                "WHERE l.annotator = 'alice' AND q.query_id = ? AND l.status = 'flagged'", [second]).fetchone()[0]
            focus = page.evaluate("() => document.activeElement ? document.activeElement.outerHTML.slice(0, 200) : ''")
            assert attempt < 2, f"F did not flag {second}; flagged={flagged}; focus on: {focus}"
            if flagged:
                page.wait_for_function(f"() => !document.body.innerText.includes('Query {second} ')")
                break
            settle(page, quiet_ms=1000)
            page.mouse.click(5, 5)  # a neutral spot: focus leaves any box
            blur(page)
    rows = dict(sqlite3.connect(db_path).execute(
        "SELECT q.query_id, l.status || ':' || coalesce(l.flag_reason, '') FROM query_labels l "
        "JOIN queries q ON q.pk = l.query_pk WHERE l.annotator = 'alice'").fetchall())
    assert rows[first] == "skipped:" and rows[second] == "flagged:two questions in one"
