"""AppTest of the Metrics page (tiles, worst queries opening the Label page, filters, segments, the
diagnosis, a new label shown on the next rerun) and of the Export section of the Data page."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import labeler
import labeler.labels as labels
from labeler import report as R
from labeler.app import state
from labeler.app.widgets import escape_markdown
from labeler.demo import build_demo

APP = str(Path(labeler.__file__).parent / "app" / "streamlit_app.py")


@pytest.fixture
def demo_db(tmp_path, monkeypatch):
    path = tmp_path / "demo.db"
    build_demo(path)
    monkeypatch.setenv("LABELER_DB", str(path))
    return path


def page(view: str = "views/metrics.py", name: str = "alice") -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[state.ANNOTATOR] = name
    at.run()
    at.switch_page(view)
    at.run()
    assert not at.exception, at.exception
    return at


def tiles(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def captions(at: AppTest) -> str:
    return "\n".join(c.value for c in at.caption)


def test_tiles_show_mean_ci_and_n_for_every_metric(demo_db):
    at = page()
    report = R.retrieval_report(labeler.connect(demo_db))
    shown = tiles(at)
    for spec in R.expand_specs():
        v = report.metrics[spec]
        assert shown[spec] == f"{v['mean']:.3f}"
        assert f"95% CI [{v['ci_low']:.3f}, {v['ci_high']:.3f}] · n = {v['n']}" in captions(at)
    assert "50 labeled queries · 0 without a relevant chunk" in captions(at)
    assert "judged@10 1.00" in captions(at)  # the demo logs 8 chunks per query, all graded
    assert not at.warning and "Compare retrievers" not in [h.value for h in at.subheader]  # one retriever
    assert int(shown["More labeled queries for a CI half-width of ±0.05"].replace(",", "")) == max(
        v["more_needed"] for v in report.more_needed().values())
    # the demo's recall@5 is 0.77 < 0.8, but its 95% CI contains 0.8: no verdict, how many more labels tell
    diagnosis = report.diagnosis()
    recall = report.metrics["recall@5"]
    assert recall["ci_low"] < 0.8 < recall["ci_high"] and diagnosis.verdict == "undecided"
    assert not at.error
    shown = next(i.value for i in at.info if "Not enough labels to tell" in i.value)
    assert f"not enough labels to tell (need about {diagnosis.more_needed:,} more" in shown
    assert "Retrieval is the bottleneck" not in shown
    frames = {tuple(d.value.columns): d.value for d in at.dataframe}
    table = frames[("check", "value [95% CI]", "threshold", "reads", "more to tell", "fails means")]
    assert table["check"].tolist() == ["recall@5", "mrr", "ndcg@5", "faithfulness"]
    assert table["threshold"].tolist() == [0.8, 0.6, 0.6, 0.8]
    assert table["reads"].tolist()[0] == "can't tell yet"
    assert table["value [95% CI]"].tolist()[3] == "unknown (no answers judged)"  # the demo judges no answer
    assert "By origin" not in [h.value for h in at.subheader]  # one origin: no table repeating the tiles
    assert "Every labeled query here has origin log" in captions(at)
    needed = frames[("metric", "n", "sd", "half-width now", "more needed")]
    assert needed["more needed"].tolist() == [f"{v['more_needed']:,}" for v in report.more_needed().values()]
    assert_no_none(at)


def rendered_text(at: AppTest) -> list[str]:
    """Every text the page rendered: titles, markdown, captions, alerts, tiles and dataframe cells."""
    texts = [e.value for kind in ("title", "subheader", "markdown", "caption", "info", "warning", "error", "success")
             for e in getattr(at, kind)]
    texts += [f"{m.label} {m.value}" for m in at.metric]
    for d in at.dataframe:
        frame = d.value
        assert not frame.isna().any().any(), f"a missing cell shows as None: {frame}"
        texts += [str(c) for c in frame.columns] + [str(v) for v in frame.to_numpy().ravel()]
    return texts


def assert_no_none(at: AppTest) -> None:
    bad = [t for t in rendered_text(at) if re.search(r"\bNone\b", str(t))]
    assert not bad, bad


def test_worst_queries_say_when_the_list_cuts_a_tie(demo_db):
    at = page(name="bob")  # the demo's lead
    db = labeler.connect(demo_db)
    rep = R.retrieval_report(db)
    worst = R.worst_queries(db, rep, "recall@1", limit=10)
    note = R.worst_ties(rep, "recall@1", worst)
    zero = int((rep.per_query["recall@1"] == 0).sum())
    assert zero > 10 and note == f"{zero} queries at 0.000, showing 10"
    assert any(note in c.value for c in at.caption)
    assert any("relevant missing from the top 1" in c.value for c in at.caption)  # recall@1's cutoff
    shown = [int(b.key.removeprefix("m_open_")) for b in at.button if b.key and b.key.startswith("m_open_")]
    assert shown == worst["query_pk"].tolist()  # the page shows the library's order
    ranks = [r if r is not None else 10**6 for r in worst["first_relevant_rank"]]
    assert ranks == sorted(ranks, reverse=True)  # all at 0: deepest first relevant chunk first
    assert_no_none(at)


def test_worst_query_opens_in_the_label_page(demo_db):
    at = page()
    first = next(b for b in at.button if b.key and b.key.startswith("m_open_"))
    pk = int(first.key.removeprefix("m_open_"))
    db = labeler.connect(demo_db)
    worst = R.worst_queries(db, R.retrieval_report(db), "recall@1", limit=1)
    assert worst["query_pk"].tolist() == [pk]  # lowest first
    first.click().run()
    assert not at.exception, at.exception
    assert at.session_state[state.CURRENT] == pk
    query_id = db.execute("SELECT query_id FROM queries WHERE pk = ?", [pk]).fetchone()[0]
    assert any(c.value.startswith(f"Query {escape_markdown(query_id)}") for c in at.caption)


def test_a_new_submitted_label_shows_on_the_next_rerun(demo_db):
    at = page()
    assert "50 labeled queries" in captions(at)
    db = labeler.connect(demo_db)  # another session labels one more query
    pk = labels.next_item(db, "bob")
    item = labels.get_item(db, pk, "bob")
    labels.set_grade(db, pk, item.chunks[0].doc_pk, "bob", 3)
    labels.set_rest_zero(db, pk, "bob")
    labels.set_status(db, pk, "bob", "submitted")
    at.run()
    assert not at.exception, at.exception
    assert "51 labeled queries" in captions(at)
    assert tiles(at)["mrr"] == f"{R.retrieval_report(db).metrics['mrr']['mean']:.3f}"


def test_filters_change_the_numbers(demo_db):
    at = page()
    at.selectbox(key="m_origin").set_value("synthetic").run()
    assert not at.exception
    assert "No labeled queries match yet" in at.info[0].value
    at.selectbox(key="m_origin").set_value("log").run()
    at.selectbox(key="m_annotator").set_value("demo").run()
    assert "50 labeled queries" in captions(at)
    at.multiselect(key="m_metrics").set_value(["precision", "mrr"]).run()
    at.multiselect(key="m_ks").set_value([5]).run()
    assert not at.exception, at.exception
    assert [m.label for m in at.metric][:2] == ["precision@5", "mrr"]
    at.selectbox(key="m_hist_metric").set_value("mrr").run()
    assert "Worst queries by mrr" in [h.value for h in at.subheader]
    today = dt.datetime.now(dt.UTC).date()
    at.date_input(key="m_dates").set_value((today - dt.timedelta(days=60), today - dt.timedelta(days=30))).run()
    assert not at.exception, at.exception
    assert "No labeled queries match yet" in at.info[0].value
    at.date_input(key="m_dates").set_value((today - dt.timedelta(days=1), today)).run()
    assert "50 labeled queries" in captions(at)


def test_empty_database_says_what_to_do(tmp_path, monkeypatch):
    path = tmp_path / "empty.db"
    labeler.connect(path)
    monkeypatch.setenv("LABELER_DB", str(path))
    at = page()
    assert "No labeled queries match yet" in at.info[0].value


def test_data_page_export_section(demo_db):
    at = page("views/data.py")
    shown = tiles(at)
    assert (shown["Queries to export"], shown["Judged pairs"], shown["Relevant pairs"]) == ("50", "412", "75")
    assert at.get("download_button")[0].proto.label == "Download golden.jsonl"
    at.selectbox(key="export_format").set_value("beir").run()
    assert at.get("download_button")[0].proto.label == "Download golden-beir.zip"
    at.number_input(key="export_min_annotators").set_value(2).run()
    assert tiles(at)["Queries to export"] == "0"
    assert at.get("download_button")[0].proto.disabled


HOSTILE_ID = "[x](javascript:alert(1))"
HOSTILE_QUESTION = "<script>window.x = 1</script> **bold** [link](http://127.0.0.1:9/)"


def test_text_from_logs_is_shown_as_plain_text(tmp_path, monkeypatch):
    path = tmp_path / "hostile.db"
    db = labeler.connect(path)
    log = tmp_path / "logs.jsonl"
    log.write_text(json.dumps({"query_id": HOSTILE_ID, "question": HOSTILE_QUESTION,
                               "retrieved": [{"id": "d1", "text": "t"}, {"id": "d2", "text": "u"}]}) + "\n")
    labeler.ingest_logs(db, log)
    pk = labels.next_item(db, "bob")
    doc = labels.get_item(db, pk, "bob").chunks[1].doc_pk
    labels.set_grade(db, pk, doc, "bob", 3)
    labels.set_rest_zero(db, pk, "bob")
    labels.set_status(db, pk, "bob", "submitted")
    monkeypatch.setenv("LABELER_DB", str(path))
    at = page(name="bob")  # the lead: the worst-queries list is theirs
    html = [h.proto.body for h in at.get("html")]
    assert any("&lt;script&gt;window.x = 1&lt;/script&gt; **bold**" in body for body in html)
    assert not any("<script>" in body for body in html)
    assert any(c.value.startswith(r"\[x\]\(javascript\:alert\(1\)\)") for c in at.caption)
    assert not any(HOSTILE_QUESTION in m.value for m in at.markdown)


def test_the_first_visit_finds_the_report_computed_in_the_background(demo_db, monkeypatch):
    """The app starts computing the Metrics page's default report when anyone opens any page; the
    Metrics page then reads nothing from the database for it."""
    from labeler.report import load

    monkeypatch.setenv("LABELER_WARM_METRICS", "1")
    R.clear_cache()
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[state.ANNOTATOR] = "alice"
    at.run()  # the Label page: starts the warm-up
    warmer = state._warmer(state.db_path())
    warmer.thread.join(30)
    assert not warmer.thread.is_alive()
    loads = []
    real = load._load
    monkeypatch.setattr(load, "_load", lambda *a, **k: loads.append(1) or real(*a, **k))
    at.switch_page("views/metrics.py")
    at.run()
    assert not at.exception, at.exception
    assert loads == []  # served from what the warm-up computed
    report = R.retrieval_report(labeler.connect(demo_db))
    assert tiles(at)["recall@5"] == f"{report.metrics['recall@5']['mean']:.3f}"


def two_retrievers(tmp_path, monkeypatch) -> None:
    """The app on a database where tfidf and bm25 (no production) logged the same queries, all graded."""
    from tests.test_retrievers import BM25, TFIDF, grade_all, records, write

    path = tmp_path / "two.db"
    db = labeler.connect(path)
    labeler.ingest_logs(db, write(tmp_path / "a.jsonl", records(TFIDF, "tfidf")))
    labeler.ingest_logs(db, write(tmp_path / "b.jsonl", records(BM25, "bm25")))
    grade_all(db)
    monkeypatch.setenv("LABELER_DB", str(path))


def test_two_retrievers_without_production_pick_one_and_compare(tmp_path, monkeypatch):
    """tfidf and bm25 logged the same queries (tests.test_retrievers): no default, so the page asks
    for one; then the compare section shows both means and bm25's judged@3 warning."""
    two_retrievers(tmp_path, monkeypatch)
    at = page()
    assert "none is called production: pick one" in at.info[0].value
    at.selectbox(key="m_retriever").set_value("bm25").run()
    assert not at.exception, at.exception
    assert "Retriever **bm25** · 4 labeled queries" in captions(at)
    shown = escape_markdown(R.judged_warning("bm25", "judged@3", 5 / 6))  # text from logs is shown escaped
    assert shown in [w.value for w in at.warning]
    assert at.selectbox(key="m_cmp_a").value == "bm25" and at.selectbox(key="m_cmp_b").value == "tfidf"
    at.selectbox(key="m_cmp_a").set_value("tfidf").run()
    at.selectbox(key="m_cmp_b").set_value("bm25").run()
    assert not at.exception, at.exception
    table = next(d.value for d in at.dataframe if "A: tfidf" in d.value.columns).set_index("metric")
    assert table.loc["mrr", "A: tfidf"] == pytest.approx(17 / 24) and table.loc["mrr", "B: bm25"] == pytest.approx(11 / 24)
    assert table.loc["mrr", "A − B"] == pytest.approx(1 / 4) and table.loc["mrr", "p"] == 0.5
    assert "4 labeled queries both ran" in captions(at)
    assert [w.value for w in at.warning].count(shown) == 2  # bm25's report above, and the comparison
    assert "tfidf judged@3 1.00" in captions(at)
    assert_no_none(at)


def test_data_page_export_asks_for_a_retriever_when_a_format_embeds_one(tmp_path, monkeypatch):
    two_retrievers(tmp_path, monkeypatch)
    at = page("views/data.py")
    assert not at.get("download_button")[0].proto.disabled  # jsonl embeds no ranking
    at.selectbox(key="export_format").set_value("csv").run()
    assert "none called production: pick one above" in at.info[-1].value
    assert at.get("download_button")[0].proto.disabled
    at.selectbox(key="export_retriever").set_value("bm25").run()
    assert not at.exception and not at.get("download_button")[0].proto.disabled
