"""AppTest of the Synth and Review pages: estimate, generate, rejections and the shift report against
the fake OpenAI server; accept / edit / reject / skip / undo, and only accepted questions queued."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import labeler
import labeler.labels as labels
from labeler import llm, synth
from labeler.app import state
from labeler.app.widgets import escape_markdown
from tests.fake_openai import FakeOpenAI, synth_responder
from tests.test_synth import KEY, LOGS, corpus_records

APP = str(Path(labeler.__file__).parent / "app" / "streamlit_app.py")


@pytest.fixture
def db_path(tmp_path, monkeypatch):
    path = tmp_path / "synth.db"
    db = labeler.connect(path)
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus_records()))
    (tmp_path / "logs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LOGS))
    labeler.ingest_corpus(db, tmp_path / "corpus.jsonl")
    labeler.ingest_logs(db, tmp_path / "logs.jsonl")
    db.conn.close()
    monkeypatch.setenv("LABELER_DB", str(path))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return path


@pytest.fixture
def server(monkeypatch):
    with FakeOpenAI(responder=synth_responder()) as s:
        monkeypatch.setenv("OPENAI_BASE_URL", s.url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        yield s


@pytest.fixture
def generated(db_path, server):
    db = labeler.connect(db_path)
    config = llm.LLMConfig.from_env(model="fake-model")
    pks = synth.generate(db, config, synth.SynthOptions(n=6, per_chunk=2)).stored
    server.reset()
    return db, pks


def page(path: str, name: str = "alice") -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30)
    at.session_state[state.ANNOTATOR] = name
    at.run()
    at.switch_page(path)
    at.run()
    assert not at.exception, at.exception
    return at


def click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click().run()
    assert not at.exception, at.exception
    return at


def shown_question(at: AppTest) -> str:
    return next(h.proto.body for h in at.get("html") if 'data-key="rv_question"' in h.proto.body)


def frame(at: AppTest, *columns: str):
    """The first dataframe on the page that has all these columns (st.dataframe keys are not exposed)."""
    for df in at.dataframe:
        if set(columns) <= set(df.value.columns):
            return df.value
    raise KeyError(columns)


def review_state(db, pk: int) -> tuple[str, str]:
    return db.execute("SELECT review_state, question FROM queries WHERE pk = ?", [pk]).fetchone()


def test_review_accept_reject_edit_skip_undo(generated):
    db, pks = generated
    at = page("views/review.py")
    tiles = {m.label: m.value for m in at.metric}
    assert (tiles["Pending"], tiles["Accepted"], tiles["Rejected"]) == ("6", "0", "0")
    first = synth.get_question(db, pks[0])
    assert first.question.replace("(", "") .split()[0] in shown_question(at)
    assert any(first.seed_chunks[0].text[:30] in h.proto.body for h in at.get("html"))  # the seed chunk, as text

    click(at, "rv_accept")
    assert review_state(db, pks[0])[0] == "accepted"
    click(at, "rv_reject")
    assert review_state(db, pks[1])[0] == "rejected"
    click(at, "rv_undo")
    assert review_state(db, pks[1])[0] == "pending"
    click(at, "rv_reject")

    click(at, "rv_edit")
    at.text_area(key=f"edit_q_{pks[2]}").set_value("how do i   change the refund options")
    at.text_area(key=f"edit_a_{pks[2]}").set_value("Under Settings, Refunds.")
    click(at, "rv_save")
    edited = synth.get_question(db, pks[2])
    assert (edited.question, edited.expected_answer, edited.review_state, edited.decision, edited.reviewer) == (
        "how do i change the refund options", "Under Settings, Refunds.", "accepted", "edited", "alice")

    skipped = shown_question(at)
    click(at, "rv_skip")
    assert shown_question(at) != skipped
    assert review_state(db, pks[3])[0] == "pending"

    tiles = {m.label: m.value for m in at.metric}
    assert (tiles["Pending"], tiles["Accepted"], tiles["Rejected"]) == ("3", "2", "1")
    rates = frame(at, "acceptance rate")
    assert list(rates["accepted"]) == [1] and list(rates["edited"]) == [1] and list(rates["rejected"]) == [1]
    assert list(rates["acceptance rate"]) == [pytest.approx(2 / 3, abs=1e-3)]

    # only the two accepted ones reach the labeling queue (logged questions are queued too)
    queued = set()
    for annotator in ("bob", "carol", "dave", "erin", "fay", "gus", "hal", "ivy", "jo"):
        pk = labels.next_item(db, annotator)
        if pk is not None:
            queued.add(pk)
    assert queued & set(pks) == {pks[0], pks[2]}


def test_review_page_when_nothing_is_pending(db_path):
    at = page("views/review.py")
    assert any("Nothing to review" in s.value for s in at.success)
    assert not at.get("html")


def test_synth_page_estimate_then_generate_then_report(db_path, server):
    at = page("views/synth.py")
    at.number_input(key="sy_n").set_value(4)
    click(at, "sy_estimate")
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Requests"] == "2 (0 cached)" and tiles["Cost"].startswith("$")  # gpt-4o-mini prices
    assert server.total == 0  # the estimate sends nothing
    assert any("API key set" in c.value for c in at.caption)
    assert not any(KEY in c.value for c in at.caption)
    click(at, "sy_generate")
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Stored (pending review)"] == "4" and tiles["Failed"] == "0" and tiles["Requests"] == "2"
    assert server.total == 2
    db = labeler.connect(db_path)
    assert synth.review_counts(db)["pending"] == 4
    click(at, "sy_report")
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Logged questions"] == "6" and tiles["Synthetic questions"] == "4"
    assert float(tiles["Classifier AUC"]) >= 0.5
    assert list(frame(at, "statistic", "logged")["statistic"])[:2] == ["n", "chars_mean"]
    assert list(frame(at, "metric", "log mean")["metric"]) == ["recall@10", "mrr", "ndcg@10"]
    assert list(frame(at, "run", "status", "stored")["stored"]) == [4]


def test_synth_page_shows_rejections_and_failures(db_path, monkeypatch):
    def twins(request):
        out = synth_responder()(request)
        out["questions"][1]["question"] = out["questions"][0]["question"]
        if "doc-invoice" in request["messages"][1]["content"]:
            return "not json at all"
        return out

    with FakeOpenAI(responder=twins) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        at = page("views/synth.py")
        at.number_input(key="sy_n").set_value(24)
        click(at, "sy_estimate")
        click(at, "sy_generate")
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Failed"] == "1" and tiles["Rejected by checks"] == "11"
    failed = frame(at, "key", "reason")
    assert list(failed["key"]) == ["doc-invoice"] and "invalid output" in failed["reason"][0]
    assert set(frame(at, "reason", "detail", "question")["reason"]) == {"duplicate"}
    assert len(frame(at, "reason", "seed chunks")) == 11


def test_synth_page_without_an_api_key_says_so(db_path):
    at = page("views/synth.py")
    click(at, "sy_estimate")
    assert any("API key not set" in c.value for c in at.caption)
    assert at.button(key="sy_generate").disabled
    assert any("OPENAI_API_KEY" in i.value for i in at.info)


def test_label_page_shows_the_generators_proposal_for_an_accepted_synthetic_question(generated):
    db, pks = generated
    synth.review(db, pks[0], "accept", reviewer="alice")
    proposal = synth.get_question(db, pks[0])
    at = page("views/label.py", name="bob")
    at.session_state[state.OPEN_QUERY] = pks[0]
    at.run()
    assert at.session_state[state.CURRENT] == pks[0]
    bodies = [h.proto.body for h in at.get("html")]
    assert any('data-key="proposal"' in b and proposal.expected_answer.split()[0] in b for b in bodies)
    assert any("Seed chunks: " + escape_markdown(proposal.seed_chunks[0].doc_id) in c.value for c in at.caption)
