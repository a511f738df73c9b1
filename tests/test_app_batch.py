"""AppTest of the "Run as batch" choice on the Judge and Synth pages: the estimate shows the batch
price, a run is submitted as a batch, the page lists its batches and collects them when opened."""

from __future__ import annotations

from labeler import db as store
from labeler import judge, llm
from tests.test_app_judge import ok, page


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
    assert tiles["Requests"] == "40 (0 cached)" and tiles["Batch cost"].startswith("$")
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


def test_synth_page_submits_a_batch_and_collects_it_when_opened(tmp_path, monkeypatch):
    import json

    import labeler
    from tests.fake_openai import FakeOpenAI, synth_responder
    from tests.test_app_synth import page as synth_page
    from tests.test_synth import KEY, LOGS, corpus_records

    path = tmp_path / "synth.db"
    db = labeler.connect(path)
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus_records()))
    (tmp_path / "logs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LOGS))
    labeler.ingest_corpus(db, tmp_path / "corpus.jsonl")
    labeler.ingest_logs(db, tmp_path / "logs.jsonl")
    monkeypatch.setenv("LABELER_DB", str(path))
    with FakeOpenAI(responder=synth_responder()) as s:
        monkeypatch.setenv("OPENAI_BASE_URL", s.url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        at = synth_page("views/synth.py")
        at.number_input(key="sy_n").set_value(6)
        at.text_input(key="sy_model").set_value("gpt-4o-mini")
        at.checkbox(key="sy_batch").check()
        at.button(key="sy_estimate").click()
        ok(at)
        assert {m.label: m.value for m in at.metric}["Batch cost"].startswith("$")
        at.button(key="sy_generate_batch").click()
        ok(at)
        assert at.subheader[-1].value.endswith("(submitted)") and s.total == 0
        [b] = llm.batch.list_batches(db, owner="synth")
        s.batch.advance(b.batch_id, "completed")
        again = synth_page("views/synth.py")
        assert any("Collected 1 batch(es): 3 answers stored" in x.value for x in again.success)
        assert db.execute("SELECT count(*) FROM queries WHERE origin = 'synthetic'").fetchone()[0] == 6
