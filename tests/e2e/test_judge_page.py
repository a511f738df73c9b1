"""The Judge page in a real browser: the dashboard and gate, the disagreement browser (a hostile
rationale shows as text and runs nothing), tagging, and the jump to relabel on the Label page."""

from __future__ import annotations

import sqlite3

import labeler
from labeler import judge
from tests.fake_openai import FakeOpenAI, grade_responder
from tests.test_judge import build, make_config, perfect

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> **bold**'


def test_dashboard_disagreements_tag_and_relabel(tmp_path, ingest_tiny, start_app, page):
    db_path = tmp_path / "judge.db"
    db = labeler.connect(db_path)
    _, truth = build(db, ingest_tiny)
    with FakeOpenAI() as server:
        server.responder = perfect(truth)
        judge.run_judge(db, make_config(server), "relevance.v1")
        hostile = grade_responder(lambda q, c: truth.get((q, c)), shift=1)
        server.responder = lambda request: {**hostile(request), "rationale": HOSTILE}
        judge.save_rubric(db, "relevance.v1", "Be generous.")
        judge.run_judge(db, make_config(server), "relevance.v1")
    db.close()

    app = start_app(db_path)
    page.goto(app.url)
    page.get_by_label("Your name").fill("alice")
    page.get_by_role("button", name="Start labeling").click()
    page.get_by_text("Nothing left in your queue").wait_for()  # alice labeled everything
    page.get_by_role("link", name="Judge").click()
    page.get_by_text("Gate not passed").wait_for()
    page.get_by_text("rows: consolidated human grade", exact=False).wait_for()
    # the dot-and-whisker chart: every statistic named for people, the judge's dot and CI whisker next to
    # the human-human ceiling's, and the gate's bar as a tick on the statistic it checks
    whiskers = page.get_by_test_id("stVegaLiteChart").first
    gate_bar = whiskers.locator('svg [aria-roledescription="tick"]')
    gate_bar.first.wait_for(state="attached")
    assert gate_bar.count() == 1 and "kappa, relevant vs not" in gate_bar.first.get_attribute("aria-label")
    labels = whiskers.locator("svg .role-axis-label text").evaluate_all("ts => ts.map(t => t.textContent)")
    assert "Cohen's kappa" in labels and "kappa, relevant vs not" in labels and "cohen_kappa" not in labels
    dots = whiskers.locator('svg [aria-roledescription="point"]').evaluate_all(
        "ps => ps.map(p => p.getAttribute('aria-label'))")
    assert any("human-human (ceiling)" in d for d in dots) and any("judge vs humans" in d for d in dots)
    assert whiskers.locator('svg [aria-roledescription="rule mark"]').count() == len(dots)  # a whisker per dot
    assert page.get_by_text("None", exact=True).count() == 0

    page.get_by_role("tab", name="Disagreements").click()
    page.get_by_text(HOSTILE, exact=False).first.wait_for()
    assert page.evaluate("window.__pwned") is None
    assert page.locator(".lb-plain img, .lb-plain script").count() == 0

    page.get_by_text("judge wrong", exact=True).first.click()  # the first item's tag control
    page.get_by_text("judge wrong 1").wait_for()
    tagged = sqlite3.connect(db_path).execute("SELECT run_id, query_pk, tag, annotator FROM judge_tags").fetchall()
    assert [(r, t, a) for r, _, t, a in tagged] == [(2, "judge_wrong", "alice")]
    query_id = sqlite3.connect(db_path).execute("SELECT query_id FROM queries WHERE pk = ?",
                                                [tagged[0][1]]).fetchone()[0]

    page.get_by_role("button", name="Relabel").first.click()
    page.get_by_text(f"Query {query_id}").wait_for()
    page.get_by_text("retrieved chunks graded").wait_for()
