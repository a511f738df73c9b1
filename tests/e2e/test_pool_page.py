"""The pool in a real browser: two retrievers logged the same questions; the annotator grades the
pooled chunks with the keyboard (keys 20 ms apart), sees no source, rank or score, and submits;
SQLite holds one grade per (query, chunk id), whichever retrievers returned the chunk."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import labeler
from tests.e2e.conftest import sign_in_by_name

RANKINGS = {"production": ["a", "b", "c", "d"], "bm25": ["c", "e", "a", "f"]}  # 6 distinct chunks


def make_db(tmp_path: Path, items: int = 2) -> Path:
    path = tmp_path / "pool.db"
    db = labeler.connect(path)
    log = tmp_path / "logs.jsonl"
    log.write_text("".join(json.dumps({
        "query_id": f"q{i}", "question": f"how do refunds work, case {i}", "retriever": retriever,
        "retrieved": [{"id": f"{d}{i}", "score": round(0.9 - r / 10, 2), "text": f"Chunk {d} about refunds {i}."}
                      for r, d in enumerate(ids)]}) + "\n"
        for i in range(items) for retriever, ids in RANKINGS.items()))
    labeler.ingest_logs(db, log)
    labeler.set_setting(db, "overlap_fraction", 0.0)
    db.conn.close()
    return path


def test_pooled_chunks_graded_with_the_keyboard_blind(tmp_path, start_app, page):
    db_path = make_db(tmp_path)
    server = start_app(db_path)
    sign_in_by_name(page, server.url, "alice")
    rows = page.locator(".lb-grader .lb-chunk")
    rows.first.wait_for()
    item = int(page.locator(".lb-grader").get_attribute("data-item"))
    assert rows.count() == 6  # the union of both rankings, each chunk once
    shown = page.locator(".lb-grader").inner_text()
    assert "score" not in shown and "bm25" not in shown and "production" not in shown
    assert all("#" not in rows.nth(i).locator(".lb-head").inner_text() for i in range(6))
    docs = [int(rows.nth(i).get_attribute("data-doc")) for i in range(6)]
    keys = [3, 0, 2, 1, 0, 2]
    page.keyboard.type("".join(map(str, keys)), delay=20)
    page.get_by_text("6 of 6 retrieved chunks graded").wait_for()
    page.keyboard.press("Enter", delay=20)
    page.wait_for_function("(old) => { const g = document.querySelector('.lb-grader');"
                           " return g && g.dataset.item !== String(old) }", arg=item)
    page.wait_for_function("() => document.querySelector('.lb-save').textContent === 'saved'")
    with sqlite3.connect(db_path) as conn:
        stored = conn.execute("SELECT doc_pk, grade FROM relevance_labels WHERE query_pk = ? AND annotator = 'alice'",
                              [item]).fetchall()
        status = conn.execute("SELECT status FROM query_labels WHERE query_pk = ? AND annotator = 'alice'",
                              [item]).fetchone()
        grade_events = conn.execute("SELECT count(*) FROM label_events WHERE query_pk = ? AND field = 'grade'",
                                    [item]).fetchone()
    assert dict(stored) == dict(zip(docs, keys, strict=True)) and len(stored) == 6  # one row per chunk id
    assert status == ("submitted",) and grade_events == (6,)


def test_possibly_missed_fills_after_grading_and_adds_to_the_pool(tmp_path, start_app, page):
    """Grading the last pooled chunk fills the "Possibly missed" panel with a corpus chunk no
    retriever returned (BM25 on the question plus the chunk graded relevant); one click on "Add as
    3" grades it for this query and puts it in the grader, with no reload."""
    path = tmp_path / "missed.db"
    db = labeler.connect(path)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in [
        {"id": "rotate-secret", "text": "Rotate the webhook signing secret under Settings, Developers, Webhooks."},
        {"id": "invoices", "text": "Invoices are emailed on the first of each month."}]))
    labeler.ingest_corpus(db, corpus)
    log = tmp_path / "logs.jsonl"
    log.write_text(json.dumps({"query_id": "w1", "question": "How do I rotate the webhook signing secret?",
                               "retrieved": [{"id": "hooks", "text": "Webhooks: retries and signing.", "score": 0.9},
                                             {"id": "keys", "text": "API keys can be rotated by admins.",
                                              "score": 0.5}]}) + "\n")
    labeler.ingest_logs(db, log)
    target = db.execute("SELECT pk FROM documents WHERE doc_id = 'rotate-secret'").fetchone()[0]
    db.conn.close()
    server = start_app(path)
    sign_in_by_name(page, server.url, "alice")
    rows = page.locator(".lb-grader .lb-chunk")
    rows.first.wait_for()
    item = int(page.locator(".lb-grader").get_attribute("data-item"))
    page.get_by_text("Fills itself once every chunk has a grade").wait_for()
    page.keyboard.type("20", delay=20)  # hooks relevant, keys not: the pool is graded
    add = page.locator(f".st-key-add_missed_{item}_{target}_3")
    add.wait_for()
    assert "Rotate the webhook signing secret" in page.locator(".st-key-missed").inner_text()
    add.get_by_role("button").click()
    page.locator(".lb-grader .lb-chunk").nth(2).wait_for()  # the added chunk joins the grader
    assert rows.count() == 3
    page.wait_for_function("() => document.querySelector('.lb-save').textContent === 'saved'")
    with sqlite3.connect(path) as conn:
        stored = dict(conn.execute("SELECT d.doc_id, l.grade FROM relevance_labels l JOIN documents d "
                                   "ON d.pk = l.doc_pk WHERE l.query_pk = ? AND l.annotator = 'alice'", [item]))
    assert stored == {"hooks": 2, "keys": 0, "rotate-secret": 3}
    add.wait_for(state="detached")  # in the pool now: not offered again
