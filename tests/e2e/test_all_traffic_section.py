"""The Metrics page's "Numbers for all traffic" section in a real browser: after a judge run over all
traffic, the section shows the estimates and the labels still needed for ±0.05."""

from __future__ import annotations

import labeler
from labeler.estimate.report import all_traffic_report
from labeler.ingest import ingest_logs
from tests.conftest import tiny_records
from tests.e2e.conftest import sign_in_by_name
from tests.e2e.test_metrics_page import tile
from tests.fake_openai import FakeOpenAI
from tests.test_all_traffic import CHUNKS, N, judge_all, label_from_queue, true_grade


def test_all_traffic_section_in_the_browser(tmp_path, write_log, start_app, page):
    db_path = tmp_path / "t.db"
    db = labeler.connect(db_path)
    records = tiny_records(N, CHUNKS)
    ingest_logs(db, write_log(records))
    truth = {(r["question"], c["text"]): true_grade(i, j) for i, r in enumerate(records)
             for j, c in enumerate(r["retrieved"])}
    label_from_queue(db, truth, 30)
    with FakeOpenAI() as server:
        run = judge_all(db, server, truth)
    rep = all_traffic_report(db, run.id)
    app = start_app(db_path)
    sign_in_by_name(page, app.url, "alice", "/metrics")
    page.get_by_test_id("stMetricLabel").get_by_text("recall@5", exact=True).wait_for(timeout=60_000)
    page.get_by_text("Numbers for all traffic").wait_for()
    page.get_by_text(f"{N} traffic queries judged (run #{run.id})").wait_for()
    label = "More labels needed for ±0.05 (all traffic)"
    page.get_by_test_id("stMetricLabel").get_by_text(label, exact=True).wait_for()
    most = max(v["more_needed"] for v in rep.more_labels.values() if v["more_needed"] is not None)
    assert tile(page, label) == f"{most:,}"
