"""AppTest of the Metrics page's "Numbers for all traffic" section and of the active order in Settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import labeler
from labeler import db as store
from labeler.accounts.settings import set_setting
from labeler.app import state
from labeler.estimate.report import all_traffic_report
from tests.conftest import tiny_records
from tests.fake_openai import FakeOpenAI
from tests.test_all_traffic import CHUNKS, N, judge_all, label_from_queue, true_grade

APP = str(Path(labeler.__file__).parent / "app" / "streamlit_app.py")


@pytest.fixture
def traffic_db(tmp_path, monkeypatch, write_log):
    from labeler.ingest import ingest_logs

    path = tmp_path / "t.db"
    db = store.connect(path)
    records = tiny_records(N, CHUNKS)
    ingest_logs(db, write_log(records))
    truth = {(r["question"], c["text"]): true_grade(i, j) for i, r in enumerate(records)
             for j, c in enumerate(r["retrieved"])}
    label_from_queue(db, truth, 30)
    monkeypatch.setenv("LABELER_DB", str(path))
    yield db, truth
    db.close()


def metrics_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[state.ANNOTATOR] = "alice"
    at.run()
    at.switch_page("views/metrics.py")
    at.run()
    assert not at.exception, at.exception
    return at


def estimates_table(at: AppTest):
    """The section's table (dataframes carry no key under AppTest): the one with the judge-only column."""
    return next(d.value for d in at.dataframe if "judge-only (biased)" in d.value.columns)


def test_section_asks_for_a_run_then_shows_the_estimates(traffic_db):
    db, truth = traffic_db
    at = metrics_page()
    assert "Numbers for all traffic" in [h.value for h in at.subheader]
    assert any("labeler judge run --judge relevance.v1 --on all" in i.value for i in at.info)
    with FakeOpenAI() as server:
        run = judge_all(db, server, truth)
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    table = estimates_table(at)
    rep = all_traffic_report(db, run.id)
    assert list(table["metric"]) == list(rep.metrics)
    row = table[table["metric"] == "recall@5"].iloc[0]
    assert row["estimate"] == pytest.approx(rep.metrics["recall@5"]["estimate"])
    assert row["lambda"] == pytest.approx(rep.metrics["recall@5"]["lambda"])
    assert "judge-only (biased)" in table.columns
    text = "\n".join(c.value for c in at.caption)
    assert f"{N} traffic queries judged (run #{run.id})" in text and "30 labeled by humans" in text
    labels_tile = {m.label: m.value for m in at.metric}
    assert "More labels needed for ±0.05 (all traffic)" in labels_tile
    # a label taken out of random order refuses the estimate with its reason; the checkbox restricts it
    set_setting(db, "queue_order", "oldest")
    label_from_queue(db, truth, 2)
    at.run()
    assert any("not a probability sample" in e.value for e in at.error)
    at.checkbox(key="at_random_only").check().run()
    assert not at.error and len(estimates_table(at)) == len(rep.metrics)


def test_settings_active_order_needs_a_run_then_draws(traffic_db):
    db, truth = traffic_db
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[state.ANNOTATOR] = "alice"
    at.run()
    at.switch_page("views/settings.py").run()
    assert not at.exception, at.exception
    at.selectbox(key="set_order").set_value("active")
    at.number_input(key="set_label_budget").set_value(20)
    at.button(key="FormSubmitter:settings_form-Save settings").click().run()
    assert any("needs a judge run over all traffic" in e.value for e in at.error), [e.value for e in at.error]
    assert store.get_setting(db, "queue_order") == "random"  # refused before anything changed
    with FakeOpenAI() as server:
        judge_all(db, server, truth)
    at.selectbox(key="set_order").set_value("active")
    at.button(key="FormSubmitter:settings_form-Save settings").click().run()
    assert not at.error, [e.value for e in at.error]
    assert store.get_setting(db, "queue_order") == "active" and store.get_setting(db, "label_budget") == 20
    budget = db.execute("SELECT budget FROM active_draws ORDER BY id DESC LIMIT 1").fetchone()[0]
    assert budget == 20
