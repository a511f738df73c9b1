"""The Metrics page in a real browser on the demo database: the tiles with their CIs, the charts,
and a worst query opening in the Label page."""

from __future__ import annotations

import labeler
from labeler import report as R
from labeler.demo import build_demo
from tests.e2e.conftest import sign_in_by_name


def tile(page, label: str) -> str:
    label_el = page.get_by_test_id("stMetricLabel").get_by_text(label, exact=True)
    return page.get_by_test_id("stMetric").filter(has=label_el).get_by_test_id("stMetricValue").inner_text()


def test_metrics_page_shows_the_demo_numbers(tmp_path, start_app, page):
    db_path = tmp_path / "demo.db"
    build_demo(db_path)
    db = labeler.connect(db_path)
    report = R.retrieval_report(db)
    server = start_app(db_path)
    sign_in_by_name(page, server.url, "alice", "/metrics")
    page.get_by_test_id("stMetricLabel").get_by_text("recall@5", exact=True).wait_for()
    for spec in ("recall@1", "recall@5", "ndcg@10", "mrr"):
        v = report.metrics[spec]
        assert tile(page, spec) == f"{v['mean']:.3f}"
        page.get_by_text(f"95% CI [{v['ci_low']:.3f}, {v['ci_high']:.3f}] · n = 50").first.wait_for()
    page.get_by_text("50 labeled queries").wait_for()
    page.get_by_text("Not enough labels to tell").first.wait_for()  # recall@5's CI contains 0.8
    assert page.get_by_text("Retrieval is the bottleneck").count() == 0
    page.get_by_test_id("stVegaLiteChart").nth(1).wait_for()  # the charts render after the tiles
    assert page.get_by_test_id("stVegaLiteChart").count() == 2  # metric vs k, histogram
    # the curve draws each metric's 95% CI as a band (an area mark) around its line, one hue per metric
    curve = page.get_by_test_id("stVegaLiteChart").first
    bands = curve.locator("svg .mark-area path")
    bands.nth(1).wait_for(state="attached")
    assert bands.count() == 2  # recall and ndcg: the page's default families with a cutoff
    for i in range(2):
        label, shape = bands.nth(i).get_attribute("aria-label"), bands.nth(i).get_attribute("d")
        assert "NaN" not in label and shape and shape.endswith("Z")  # a closed band, drawn from real CIs
    fills = {bands.nth(i).get_attribute("fill") for i in range(2)}
    lines = {curve.locator("svg .mark-line path").nth(i).get_attribute("stroke") for i in range(2)}
    assert len(fills) == 2 and fills == lines  # distinct hues, each band the colour of its line
    page.get_by_text("showing 10").first.wait_for()  # the worst list cuts through a tie at recall@1 = 0

    worst = R.worst_queries(db, report, "recall@1", limit=1)
    pk, query_id = int(worst["query_pk"][0]), worst["query_id"][0]
    page.locator(f".st-key-m_open_{pk}").get_by_role("button", name="Open", exact=True).click()
    page.get_by_text(f"Query {query_id}").wait_for()
    page.get_by_text("retrieved chunks graded").wait_for()
