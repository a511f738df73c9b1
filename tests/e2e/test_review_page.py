"""The Review page in a real browser: accept, reject, edit and undo synthetic questions with the
keyboard; hostile generated text is shown literally; only accepted questions reach the queue."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import labeler
import labeler.labels as labels
from labeler import llm, synth
from tests.e2e.conftest import settle, sign_in_by_name
from tests.fake_openai import FakeOpenAI, synth_responder
from tests.test_synth import KEY, corpus_records


def make_db(tmp_path: Path) -> tuple[Path, list[int]]:
    """A corpus only (so the queue holds nothing but accepted synthetic questions) and 4 pending ones."""
    path = tmp_path / "review.db"
    db = labeler.connect(path)
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus_records()))
    labeler.ingest_corpus(db, tmp_path / "corpus.jsonl")
    with FakeOpenAI(responder=synth_responder()) as server:
        config = llm.LLMConfig(model="fake-model", base_url=server.url, api_key=KEY)
        pks = synth.generate(db, config, synth.SynthOptions(n=4, per_chunk=2)).stored
    db.conn.close()
    return path, pks


def state_of(db_path: Path, pk: int) -> tuple[str, str]:
    with sqlite3.connect(db_path) as conn:
        return conn.execute("SELECT review_state, question FROM queries WHERE pk = ?", [pk]).fetchone()


def wait_until(condition, timeout: float = 20.0) -> bool:
    """Check ``condition`` every 50 ms until it holds (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            return False
        tick.wait(0.05)
    return True


def blur(page) -> None:
    settle(page)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")


def showing(page, pk_question: str) -> None:
    page.locator('[data-key="rv_question"]').filter(has_text=pk_question).wait_for()


def test_reviewer_accepts_rejects_edits_and_undoes_with_the_keyboard(tmp_path, start_app, page):
    db_path, pks = make_db(tmp_path)
    questions = [state_of(db_path, pk)[1] for pk in pks]
    server = start_app(db_path)
    sign_in_by_name(page, server.url, "alice", "/review")
    page.get_by_text("Keys: A accept").wait_for()
    showing(page, questions[0])
    page.get_by_text("proposed relevant").first.wait_for()  # the seed chunk is on the page

    blur(page)
    page.keyboard.press("A")
    showing(page, questions[1])
    assert state_of(db_path, pks[0])[0] == "accepted"

    blur(page)
    page.keyboard.press("X")
    showing(page, questions[2])
    assert state_of(db_path, pks[1])[0] == "rejected"

    blur(page)
    page.keyboard.press("E")
    box = page.get_by_label("Question", exact=True)
    box.fill("<b>how</b> do i *change* [refunds](javascript:alert(1))")
    page.get_by_label("Expected answer").fill("Under Settings, Refunds.")
    page.get_by_label("Expected answer").press("Tab")  # leave the text area so the value is sent
    page.get_by_role("button", name="Save and accept").click()
    showing(page, questions[3])
    assert state_of(db_path, pks[2]) == ("accepted", "<b>how</b> do i *change* [refunds](javascript:alert(1))")

    blur(page)
    page.keyboard.press("U")  # undo: the edited one is pending again and shown first
    showing(page, "<b>how</b> do i *change* [refunds](javascript:alert(1))")
    assert state_of(db_path, pks[2])[0] == "pending"
    assert page.locator('[data-key="rv_question"] b').count() == 0  # shown as text, not HTML
    assert page.locator('a[href^="javascript"]').count() == 0

    blur(page)
    page.keyboard.press("A")
    showing(page, questions[3])
    db = labeler.connect(db_path)
    queued = {labels.next_item(db, name) for name in ("bob", "carol", "dave")}
    assert queued - {None} == {pks[0], pks[2]}


def test_synth_page_generates_cancels_and_resumes(tmp_path, start_app, page):
    """Generate in the browser against the fake server, cancel mid-run (what finished is stored),
    then generate again: only the rest is requested."""
    path = tmp_path / "synth.db"
    db = labeler.connect(path)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    corpus = [{"id": f"doc-{a}-{b}", "text": f"The {a} module talks to the {b} service every hour. "
               f"When {a}{b} breaks, restart the {b}{a} worker from the admin console."}
              for a in words for b in words[:6]]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    labeler.ingest_corpus(db, tmp_path / "corpus.jsonl")
    with FakeOpenAI(responder=synth_responder(), latency=1.0) as fake:
        server = start_app(path, env={"OPENAI_BASE_URL": fake.url, "OPENAI_API_KEY": KEY,
                                      "LABELER_MODEL": "fake-model"})
        sign_in_by_name(page, server.url, "alice", "/synth")
        page.get_by_label("Questions", exact=True).fill("60")
        page.get_by_label("Per chunk").fill("1")
        page.get_by_label("Per chunk").press("Tab")
        page.get_by_role("button", name="Estimate cost").click()
        page.get_by_role("button", name="Generate 60 questions").click()
        page.get_by_text("of 60 seed(s)").wait_for()
        page.get_by_role("button", name="Cancel").click()
        page.get_by_text("The last run was interrupted").wait_for()
        # Streamlit starts the new script run at once (fastReruns) while the stopped one stores the
        # requests still in flight: wait for that run to be recorded as over
        assert wait_until(lambda: db.execute("SELECT status FROM synth_runs").fetchone()[0] != "running")
        fake_total = fake.total
        (status, summary), = db.execute("SELECT status, summary FROM synth_runs").fetchall()
        stored = json.loads(summary)["stored"]
        assert status == "cancelled" and 0 < stored < 60 and fake_total < 60
        assert db.execute("SELECT count(*) FROM queries WHERE origin = 'synthetic'").fetchone()[0] == stored

        page.get_by_role("button", name="Estimate cost").click()
        page.get_by_text(f"{60 - fake_total} ({fake_total} cached)").wait_for()
        page.get_by_role("button", name="Generate 60 questions").click()
        page.get_by_text("Run 2 (finished)").wait_for(timeout=60_000)
        assert fake.total == 60
    assert db.execute("SELECT count(*) FROM queries WHERE origin = 'synthetic'").fetchone()[0] + \
        db.execute("SELECT count(*) FROM synth_rejections").fetchone()[0] == 60
