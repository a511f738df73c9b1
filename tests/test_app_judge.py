"""AppTest of the Judge page: the agreement dashboard with the human ceiling and the gate, the
disagreement browser (pick a cell, read, tag, jump to relabel), run comparison, running a judge
from the page against the fake server, stability, drift, the rubric editor; the suggestion widget."""

from __future__ import annotations

import json
import re

from streamlit.testing.v1 import AppTest

import labeler.labels as labels
from labeler import agreement, judge
from labeler import db as store
from labeler.app import state
from labeler.app.widgets import escape_markdown
from tests.fake_openai import grade_responder
from tests.test_app_label import APP
from tests.test_judge import build, make_config, perfect


def page(name: str = "alice") -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[state.ANNOTATOR] = name
    at.run()
    at.switch_page("views/judge.py")
    at.run()
    assert not at.exception, at.exception
    return at


def ok(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, at.exception
    return at


def stats_table(at: AppTest):
    return next(df.value for df in at.dataframe if "judge vs humans" in df.value.columns)


def test_dashboard_shows_statistics_ceiling_gate_and_heatmap(judged):
    at = page()
    assert at.selectbox(key="jd_run").value == 2  # the newest run first
    table = stats_table(at).set_index("statistic")
    # statistics named for people, in the library's one mapping
    assert list(table.index) == [agreement.display_name(k) for k in agreement.STATISTICS if k != "confusion_matrix"]
    assert {"Cohen's kappa", "weighted kappa (linear)", "kappa, relevant vs not", "Krippendorff's alpha"} <= set(
        table.index)
    assert not set(table.index) & set(agreement.STATISTICS)  # no raw key on the page
    assert table.loc["bias (judge − human grade)", "judge vs humans"] == "0.750"
    assert table.loc["Cohen's kappa", "human-human (ceiling)"] == "1.000"
    assert table.loc["Cohen's kappa", "n"] == 180 and table.loc["Cohen's kappa", "ceiling n"] == "90"
    assert "Gate not passed" in at.warning[0].value
    assert at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart")
    assert_no_none(at)
    at.selectbox(key="jd_run").set_value(1)
    ok(at)
    assert "Gate passed" in at.success[0].value
    assert stats_table(at).set_index("statistic").loc["kappa, relevant vs not", "judge vs humans"] == "1.000"


def test_whisker_chart_puts_each_statistic_next_to_the_ceiling_and_the_gate(judged):
    at = page()
    charts = [c for c in at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart")]
    spec = next(json.loads(c.proto.spec) for c in charts if '"human-human (ceiling)"' in c.proto.spec)
    text = json.dumps(spec)
    assert "gate's bar" in text and "Cohen's kappa" in text and "cohen_kappa" not in text
    assert '"rule"' in text and '"point"' in text and '"tick"' in text  # whiskers, dots, the gate's tick


def test_no_overlap_shows_a_dash_with_the_reason_never_none(tmp_path, ingest_tiny, server, monkeypatch):
    path = tmp_path / "alone.db"
    db = store.connect(path)
    _, truth = build(db, ingest_tiny, n=20, overlap=0)
    server.responder = perfect(truth)
    judge.run_judge(db, make_config(server), "relevance.v1")
    db.close()
    monkeypatch.setenv("LABELER_DB", str(path))
    at = page()
    table = stats_table(at).set_index("statistic")
    assert (table["human-human (ceiling)"] == "–").all() and (table["ceiling CI"] == "–").all()
    assert table["note"].str.contains("ceiling: no overlap between annotators").all()
    assert_no_none(at)


def assert_no_none(at: AppTest) -> None:
    """No rendered text (markdown, captions, alerts, tiles, dataframe cells) says None."""
    texts = [e.value for kind in ("title", "subheader", "markdown", "caption", "info", "warning", "error", "success")
             for e in getattr(at, kind)]
    texts += [f"{m.label} {m.value}" for m in at.metric]
    for d in at.dataframe:
        frame = d.value
        assert not frame.isna().any().any(), f"a missing cell shows as None: {frame}"
        texts += [str(c) for c in frame.columns] + [str(v) for v in frame.to_numpy().ravel()]
    bad = [t for t in texts if re.search(r"\bNone\b", str(t))]
    assert not bad, bad


def test_disagreement_browser_shows_tags_and_jumps_to_relabel(judged):
    at = page()
    cell = at.selectbox(key="jd_cell")
    assert cell.value == (0, 1)  # off-diagonal cells first, biggest first
    cell.set_value((1, 2))
    ok(at)
    bodies = [h.proto.body for h in at.get("html")]
    assert any("What is item q" in b for b in bodies)  # the question, as plain text
    assert any("grade 2: the chunk answers it" in b for b in bodies)  # the judge's rationale
    assert any("alice: 1 related" in m.value.replace("\\", "") for m in at.markdown)
    assert at.number_input(key="jd_page").max == 5  # 45 pairs, 10 a page

    tag = next(b for b in at.button_group if b.key.startswith("jd_tag_2_"))
    _, _, _, q, d = tag.key.split("_")
    tag.set_value("rubric_ambiguous")
    ok(at)
    db = store.connect(judged["path"])
    assert db.execute("SELECT tag, annotator FROM judge_tags WHERE run_id = 2 AND query_pk = ? AND doc_pk = ?",
                      [int(q), int(d)]).fetchone() == ("rubric_ambiguous", "alice")
    assert any("rubric ambiguous 1" in c.value for c in at.caption)

    at.button(key=f"jd_relabel_{q}_{d}").click()
    ok(at)
    assert at.session_state[state.CURRENT] == int(q)  # the Label page opened that query
    query_id = db.execute("SELECT query_id FROM queries WHERE pk = ?", [int(q)]).fetchone()[0]
    assert any(f"Query {escape_markdown(query_id)}" in c.value for c in at.caption)


def test_compare_two_runs_side_by_side(judged):
    at = page()
    assert (at.selectbox(key="jd_cmp_a").value, at.selectbox(key="jd_cmp_b").value) == (1, 2)
    table = next(df.value for df in at.dataframe if "B − A" in df.value.columns).set_index("statistic")
    assert table.loc["Cohen's kappa", "A"] == "1.000"
    assert float(table.loc["Cohen's kappa", "B − A"]) < 0
    assert table.loc["bias (judge − human grade)", "B − A"] == "0.750"
    assert any("paired" in c.value and "180 human-labeled items" in c.value for c in at.caption)
    at.selectbox(key="jd_cmp_b").set_value(1)
    ok(at)
    assert any(c.value == "Pick two different runs." for c in at.caption)


def test_run_a_judge_from_the_page_estimate_first(judged, server):
    at = page()
    at.selectbox(key="jd_judge").set_value("relevance.v1")
    at.number_input(key="jd_limit").set_value(40)
    at.button(key="jd_estimate").click()
    ok(at)
    tiles = {m.label: m.value for m in at.metric}
    # The latest rubric (r2) already judged every pair in run 2: all 40 come from the cache.
    assert tiles["Items"] == "40" and tiles["Requests"] == "0 (40 cached)"
    assert server.total == 0  # (the template's two runs went to a server of their own)
    at.button(key="jd_go").click()
    ok(at)
    assert server.total == 0
    assert at.subheader[0].value == "Run 3 (done)"
    assert {m.label: m.value for m in at.metric}["From cache"] == "40"
    runs = judge.list_runs(store.connect(judged["path"]))
    assert (runs[0].id, runs[0].items, runs[0].rubric) == (3, 40, "relevance.v1/r2")

    judge.save_rubric(store.connect(judged["path"]), "relevance.v1", "A third rubric.")
    at.button(key="jd_estimate").click()
    ok(at)
    assert {m.label: m.value for m in at.metric}["Requests"] == "40 (0 cached)"
    at.button(key="jd_go").click()
    ok(at)
    assert server.total == 40 and at.subheader[0].value == "Run 4 (done)"


def test_stability_drift_and_rubric_editor(judged, server):
    server.responder = perfect(judged["truth"])
    at = page()
    at.selectbox(key="jd_run").set_value(1)
    ok(at)
    at.number_input(key="jd_sample").set_value(5)
    at.button(key="jd_stability").click()
    ok(at)
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Items"] == "5" and tiles["Identical over reruns"] == "1.000"
    assert not any("kappa_vs_previous" in df.value.columns for df in at.dataframe)  # drift on demand
    at.toggle(key="jd_drift_on").set_value(True)
    ok(at)
    drift = next(df.value for df in at.dataframe if "kappa_vs_previous" in df.value.columns)
    assert drift["run_id"].tolist() == ["1", "2"] and drift["agreement_vs_previous"].iloc[1] == "0.250"
    assert drift["previous_run"].iloc[0] == "–"
    assert_no_none(at)

    at.text_area(key="jd_rubric_text_relevance.v1").input("Grade 3 only for a complete answer.")
    at.button(key="jd_rubric_save").click()
    ok(at)
    assert escape_markdown("Saved as relevance.v1/r3") in at.success[-1].value
    assert judge.get_rubric(store.connect(judged["path"]), "relevance.v1").text == "Grade 3 only for a complete answer."


def test_rubric_tab_shows_each_versions_lineage_kappa_and_examples(judged, server):
    from labeler.holdout import set_split
    from tests.fake_openai import example_learning_responder, gullible_responder

    db = store.connect(judged["path"])
    set_split(db, 0.2, seed=7)
    server.responder = example_learning_responder(judged["truth"])
    config = make_config(server)
    result = judge.align_judge(db, config, "relevance.v1", candidates=1, revisions=0, n_resamples=200)
    assert result.registered == "relevance.v1/r3"
    server.responder = gullible_responder(judged["truth"])
    judge.stress_judge(db, config, "relevance.v1/r3", n=20)
    db.close()
    at = page()
    lineage = next(df.value for df in at.dataframe if "parent" in df.value.columns)
    assert lineage["version"].tolist() == ["relevance.v1/r1", "relevance.v1/r2", "relevance.v1/r3"]
    r3 = lineage.iloc[2]
    assert (r3["parent"], r3["origin"], r3["examples"]) == ("relevance.v1/r2", "align", 4)
    assert float(r3["Cohen's kappa"]) > 0.5 and r3["planted-instruction rate"] == "1.000"
    assert lineage.iloc[1]["Cohen's kappa"] != "–" and lineage.iloc[0]["Cohen's kappa"] == "–"
    assert any("4 examples it carries" in e.label for e in at.expander)
    assert any("looked at 1 time(s)" in c.value for c in at.caption)
    assert_no_none(at)
    at.number_input(key="jd_g_planted").set_value(0.5)
    at.button(key="jd_g_save").click()
    ok(at)
    assert judge.gate_settings(store.connect(judged["path"]))["max_planted_rate"] == 0.5


def test_gate_settings_only_for_a_lead(judged):
    at = page("alice")  # the first annotator of the project is its lead
    at.number_input(key="jd_g_pairs").set_value(500)
    at.button(key="jd_g_save").click()
    ok(at)
    assert judge.gate_settings(store.connect(judged["path"]))["min_pairs"] == 500
    other = page("zed")
    assert other.button(key="jd_g_save").disabled


def test_suggestion_widget_shows_the_judge_grade_and_accepts(judged, ingest_tiny, server):
    db = store.connect(judged["path"])
    extra = ingest_tiny(db, 1, 2, prefix="u")[0]
    server.responder = grade_responder(lambda q, c: judged["truth"].get((q, c), 2))
    judge.run_judge(db, make_config(server), "relevance.v1", on="unlabeled", rubric=1, calibration_run=1)
    doc_pk = next(iter(judge.suggestions_for(db, extra)))

    def widget(query_pk: int, doc: int) -> None:
        import streamlit as st

        from labeler.app import state, suggestions

        shown = suggestions.render_suggestion(state.get_db(), query_pk, doc, "alice")
        st.write(f"shown: {shown is not None}")

    at = AppTest.from_function(widget, args=(extra, doc_pk), default_timeout=30)
    at.session_state["annotator"] = "alice"  # signed in: the accept callback checks the session
    at.run()
    assert not at.exception, at.exception
    assert any("Judge suggests 2 relevant (grade 2" in h.proto.body for h in at.get("html"))
    at.button(key=f"accept_{extra}_{doc_pk}").click().run()
    assert not at.exception, at.exception
    assert db.execute("SELECT grade, origin FROM relevance_labels WHERE query_pk = ? AND doc_pk = ?",
                      [extra, doc_pk]).fetchone() == (2, "suggestion")
    assert labels.get_item(db, extra, "alice").chunks[0].grade is not None
