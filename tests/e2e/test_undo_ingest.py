"""Undoing an ingest from the Data page in a real browser, as a lead: the confirmation step, the
refusal naming the labeled query, the checkbox, and the rows gone from SQLite."""

from __future__ import annotations

import json
import sqlite3

import labeler
from labeler.demo import build_demo
from labeler.labels import add_annotator, set_grade
from tests.e2e.conftest import sign_in_by_name


def test_lead_undoes_a_bad_ingest_in_the_browser(tmp_path, start_app, page):
    db_path = tmp_path / "demo.db"
    build_demo(db_path)
    log = tmp_path / "wrong-export.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in [
        {"query_id": "bad-1", "question": "empty one", "retrieved": [{"id": "bad-chunk-1", "text": "zebra llama"}]},
        {"query_id": "bad-2", "question": "empty two", "retrieved": [{"id": "bad-chunk-2", "text": "zebra alpaca"}]},
    ]) + "\n")
    db = labeler.connect(db_path)
    labeler.ingest_logs(db, log)
    pk = db.execute("SELECT pk FROM queries WHERE query_id = 'bad-2'").fetchone()[0]
    doc = db.execute("SELECT pk FROM documents WHERE doc_id = 'bad-chunk-2'").fetchone()[0]
    add_annotator(db, "alice", "lead")
    set_grade(db, pk, doc, "bob", 0)
    db.close()

    server = start_app(db_path)
    sign_in_by_name(page, server.url, "alice", "/data")
    page.get_by_text("Undo an ingest").wait_for()
    page.get_by_role("button", name="Undo…").click()
    page.get_by_text("would remove 2 queries").wait_for()
    page.get_by_text("1 of these queries have labels (bad-2)").wait_for()
    page.get_by_role("button", name="Confirm undo").click()
    page.get_by_text("have labels (bad-2); nothing was removed").wait_for()
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT count(*) FROM queries WHERE query_id LIKE 'bad-%'").fetchone() == (2,)

    page.get_by_text("Also remove these queries' labels").click()
    page.get_by_role("button", name="Confirm undo").click()
    page.get_by_text("removed 2 queries").wait_for()
    assert conn.execute("SELECT count(*) FROM queries WHERE query_id LIKE 'bad-%'").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM documents WHERE doc_id LIKE 'bad-chunk-%'").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM relevance_labels WHERE annotator = 'bob'").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM documents_fts WHERE documents_fts MATCH 'zebra'").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM queries").fetchone() == (166,)  # the demo's own stay
