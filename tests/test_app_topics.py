"""AppTest of the Metrics page's topics/coverage and signal sections and the Data page's drift panel."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

import labeler
from labeler.demo import build_demo
from labeler.ingest import ingest_logs
from labeler.report.signals import signal_metrics
from labeler.topics import build_topics, coverage
from tests import planted
from tests.test_app_metrics import APP
from tests.test_report import label
from tests.test_signals import records as signal_records


def page(view: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["annotator"] = "alice"
    at.run()
    at.switch_page(view)
    at.run()
    assert not at.exception, at.exception
    return at


def frame(at: AppTest, column: str):
    """The dataframe that has ``column`` (dataframes are not found by key in AppTest)."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


@pytest.fixture
def demo_db(tmp_path, monkeypatch):
    path = tmp_path / "demo.db"
    build_demo(path)
    monkeypatch.setenv("LABELER_DB", str(path))
    return path


def test_metrics_page_builds_topics_and_shows_coverage(demo_db):
    at = page("views/metrics.py")
    assert any("No topics yet" in i.value for i in at.info)
    at.button(key="m_topics_build").click().run()
    assert not at.exception, at.exception
    expected = coverage(labeler.connect(demo_db))
    shown = frame(at, "golden share")
    assert shown["label"].tolist() == [t["label"] for t in expected["topics"]]
    assert shown["labeled"].tolist() == [t["labeled"] for t in expected["topics"]]
    assert shown["traffic share"].tolist() == pytest.approx([t["traffic_share"] for t in expected["topics"]])
    uncovered = {m.label: m.value for m in at.metric}["Traffic not covered by any labeled question"]
    assert uncovered == f"{expected['uncovered_share']:.1%}"
    assert any("fills topics in proportion to traffic is not built yet" in c.value for c in at.caption)


def test_metrics_page_splits_metrics_by_signal(file_db, db_path, write_log, monkeypatch):
    ingest_logs(file_db, write_log(signal_records(12)))
    for i in range(12):
        qid = f"q{i:03d}"
        label(file_db, qid, {f"{qid}-c0": 0 if i < 6 else 3, f"{qid}-c1": 3 if i < 6 else 0})
    monkeypatch.setenv("LABELER_DB", str(db_path))
    at = page("views/metrics.py")
    shown = frame(at, "group")
    expected = signal_metrics(file_db)
    rows = shown.set_index(["group", "metric"])
    for group in ("unhappy", "others"):
        for spec, v in expected["groups"][group]["metrics"].items():
            assert rows.loc[(group, spec), "mean"] == pytest.approx(v["mean"])
            assert rows.loc[(group, spec), "ci_low"] == pytest.approx(v["ci_low"])
    assert any("8 questions carry a signal, 6 unhappy" in c.value for c in at.caption)


def test_data_page_shows_drift_of_the_latest_ingest(file_db, db_path, write_log, monkeypatch):
    six = list(planted.TOPICS)[:6]
    ingest_logs(file_db, write_log(planted.records(600, six, seed=1)))
    monkeypatch.setenv("LABELER_DB", str(db_path))
    at = page("views/data.py")
    assert any("no topics yet" in c.value.lower() for c in at.caption)
    build_topics(file_db, k=6, seed=0)
    ingest_logs(file_db, write_log(planted.records(200, [*six, "garden"], seed=2, prefix="n",
                                                   weights=[1, 1, 1, 1, 1, 1, 4])))
    at = page("views/data.py")
    shown = frame(at, "kind")
    new = shown[shown["kind"] == "new"]
    assert len(new) == 1 and set(new["topic"].iloc[0].split(" · ")) <= set(planted.TOPICS["garden"])
    assert any("Ingest 2:" in c.value for c in at.caption)
