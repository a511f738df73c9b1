"""A calibrated judge's suggestion on the Label page, accepted with one key (A) in a real browser."""

from __future__ import annotations

import sqlite3

import labeler
from labeler import judge
from tests.e2e.conftest import sign_in_by_name
from tests.e2e.test_label_page import saved
from tests.fake_openai import FakeOpenAI, grade_responder
from tests.test_judge import build, make_config


def test_accept_a_suggestion_with_one_key(tmp_path, ingest_tiny, start_app, page):
    db_path = tmp_path / "sugg.db"
    db = labeler.connect(db_path)
    _, truth = build(db, ingest_tiny, n=60, overlap=30)
    extra = ingest_tiny(db, 1, 2, prefix="u")  # the one unlabeled item the annotator will get
    labeler.set_setting(db, "overlap_fraction", 0.0)
    with FakeOpenAI() as server:
        server.responder = grade_responder(lambda q, c: truth.get((q, c), 3 if c.startswith("chunk 0") else 0))
        calibration = judge.run_judge(db, make_config(server), "relevance.v1")
        assert judge.gate(db, calibration.id).passed
        judge.run_judge(db, make_config(server), "relevance.v1", on="unlabeled")
    suggested = judge.suggestions_for(db, extra[0])
    assert sorted(s.grade for s in suggested.values()) == [0, 3]

    app = start_app(db_path)
    sign_in_by_name(page, app.url, "carol")
    page.get_by_text("0 of 2 retrieved chunks graded").wait_for()
    page.get_by_text("Judge suggests 3", exact=False).first.wait_for()
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.keyboard.press("A")
    page.get_by_text("1 of 2 retrieved chunks graded").wait_for()
    saved(page)  # the count shows at once; the server acknowledges the grade a moment later
    rows = sqlite3.connect(db_path).execute(
        "SELECT grade, origin FROM relevance_labels WHERE annotator = 'carol' AND query_pk = ?", [extra[0]]).fetchall()
    assert rows == [(3, "suggestion")]
