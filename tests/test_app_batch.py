"""AppTest of the "Run as batch" choice on the Judge and Synth pages: the estimate shows the batch
price, a run is submitted as a batch, the page lists its batches and collects them when opened."""

from __future__ import annotations

from labeler import db as store
from labeler import judge, llm
from tests.test_app_judge import judged, ok, page, server  # noqa: F401 - fixtures


def batches_table(at):
    return next(df.value for df in at.dataframe if "batch" in df.value.columns)


def test_judge_page_submits_a_batch_and_collects_it_when_opened(judged, server):  # noqa: F811
    judge.save_rubric(store.connect(judged["path"]), "relevance.v1", "A rubric nobody ran yet.")
    at = page()
    at.number_input(key="jd_limit").set_value(40)
    at.text_input(key="jd_model").set_value("gpt-4o-mini")
    at.checkbox(key="jd_batch").check()
    at.button(key="jd_estimate").click()
    ok(at)
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Requests"] == "40 (0 cached)" and "(batch $" in tiles["Cost"]
    assert not at.button(key="jd_go_batch").disabled and not [b for b in at.button if b.key == "jd_go"]
    before = server.total
    at.button(key="jd_go_batch").click()
    ok(at)
    assert at.subheader[0].value == "Run 3 (submitted)" and server.total == before
    db = store.connect(judged["path"])
    [b] = llm.batch.list_batches(db, owner="judge")
    assert b.requests == 40 and b.state == "validating"
    table = batches_table(at)
    assert list(table["batch"]) == [b.batch_id] and list(table["state"]) == ["validating"]
    server.batch.advance(b.batch_id, "completed")
    again = page()  # a new visit collects what finished
    assert any("Collected 1 batch(es): 40 answers stored" in s.value for s in again.success)
    assert judge.get_run(db, 3).status == "done" and judge.get_run(db, 3).done == 40
    assert list(batches_table(again)["collected"]) == ["yes"]


def test_annotator_without_llm_rights_sees_batches_but_collects_nothing(judged, server):  # noqa: F811
    db = store.connect(judged["path"])
    judge.save_rubric(db, "relevance.v1", "Another rubric.")
    run = judge.run_judge(db, llm.LLMConfig(base_url=server.url, api_key="k", model="fake-model"), "relevance.v1",
                          limit=5, batch=True)
    server.batch.advance(run.batches[0], "completed")
    at = page("bob")
    assert not at.success and list(batches_table(at)["collected"]) == [""]
    assert judge.get_run(db, run.id).status == "submitted"
