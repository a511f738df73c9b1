"""Nothing from the logs is interpreted: ``widgets.escape_markdown`` leaves no markdown syntax, and on
every page, for a lead and for an annotator, no markdown-rendering element (markdown, captions,
alerts, toasts, headings, widget and button labels, radio and segmented-control options, expander
and tab labels, metric labels, progress texts) carries a live image, link, HTML tag, autolink,
directive or formula from a database whose every logged field is hostile (tests/hostile.py).
The real browser test with a tracker server is tests/e2e/test_no_tracking.py."""

from __future__ import annotations

import html
import re
import shutil

import pytest
from streamlit.testing.v1 import AppTest

import labeler
from labeler import judge, llm
from labeler.app import state
from labeler.app.widgets import WORD_JOINER, escape_markdown
from tests import hostile
from tests.fake_openai import FakeOpenAI
from tests.test_app_label import APP

BASE = "http://127.0.0.1:9"  # the discard port: nothing answers there
PAYLOADS = [
    "![x](http://127.0.0.1:9/p)",
    "[a](javascript:alert(1))",
    "<img src=http://127.0.0.1:9/p>",
    '<img src="http://127.0.0.1:9/p" onerror="alert(1)">',
    "<script>alert(1)</script>",
    "http://127.0.0.1:9/p",
    "<http://127.0.0.1:9/p>",
    "www.example.com",
    "HTTPS://WWW.EXAMPLE.COM",
    "hthttp://x wwww.example.com",
    "mail@example.com",
    ":red[x]",
    ":material/home:",
    ":smile:",
    "$x$",
    "$$x^2$$",
    "**bold** _it_ ~~s~~ `code`",
    "# heading\n- item\n1. item\n> quote\n---\n| a | b |\n|---|---|",
    "[ref]: http://127.0.0.1:9/p\n![x][ref]",
    "&lt;img src=x&gt; &#60;b&#62;",
    "\\![x](http://127.0.0.1:9/p)",  # a backslash of its own must not cancel the escape
    hostile.payload(BASE, "field"),
]
_ESCAPED = re.compile(r"\\[!-/:-@\[-`{-~]")
_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")
# what a live payload would leave in markdown source once every escaped character is taken out
MARKERS = ("](", "<img", "<script", "<a ", "://", "javascript:", "www.", ":red[", ":material/", "$x", "@example")


def live(text: str) -> str:
    """``text`` without its backslash-escaped characters: what markdown may still read as syntax."""
    return _ESCAPED.sub("", text)


# remark-gfm's autolink literals, as in Streamlit 1.67's bundle: they run on the text after escapes
# are resolved (the e-mail one without its look-behind, so it finds more, not less)
GFM_AUTOLINKS = (re.compile(r"(https?://|www(?=\.))([-.\w]+)([^ \t\r\n]*)", re.IGNORECASE),
                 re.compile(r"([-.\w+]+)@([-\w]+(?:\.[-\w]+)+)"))


@pytest.mark.parametrize("text", PAYLOADS)
def test_escape_markdown_leaves_no_syntax(text):
    escaped = escape_markdown(text)
    # CommonMark (and remark-directive, remark-math in Streamlit's renderer) build every construct
    # from ASCII punctuation; an escaped punctuation character is a literal character
    assert _PUNCTUATION.search(live(escaped)) is None, escaped
    assert not any(marker in live(escaped) for marker in MARKERS)
    shown = _ESCAPED.sub(lambda m: m.group(0)[1], escaped)  # the text once markdown resolved the escapes
    assert not any(pattern.search(shown) for pattern in GFM_AUTOLINKS), shown
    assert shown.replace(WORD_JOINER, "") == text  # shown exactly as typed (the joiner is invisible)


def test_escape_markdown_keeps_plain_text_and_accepts_none():
    assert escape_markdown("Grade 3 für Ärger · 42") == "Grade 3 für Ärger · 42"
    assert escape_markdown(None) == ""
    assert escape_markdown(7) == "7"


# --- every page, on a database where every logged field is hostile ----------------------------------


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory):
    return hostile.build(tmp_path_factory.mktemp("hostile") / "hostile.db", BASE)


@pytest.fixture
def app_env(hostile_db, monkeypatch):
    monkeypatch.setenv("LABELER_DB", str(hostile_db.path))
    monkeypatch.setenv("LABELER_MODEL", hostile_db.p("model"))
    monkeypatch.setenv("OPENAI_BASE_URL", f"{BASE}/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return hostile_db


def markdown_texts(at: AppTest) -> list[str]:
    """Every string the app handed to Streamlit's markdown renderer (not st.html, st.code, st.text,
    dataframes, charts, text box values or selectbox options, which are shown as plain text)."""
    bodies = {"markdown", "caption", "latex", "title", "header", "subheader", "success", "error", "warning",
              "info", "toast"}
    texts: list[str] = []

    def walk(node) -> None:
        kind = getattr(node, "type", None)
        if kind in bodies:
            texts.append(node.value)
        if kind not in ("html", "code", "text", "dataframe", "json"):
            for attr in ("label", "help"):
                value = getattr(node, attr, None)
                if isinstance(value, str):
                    texts.append(value)
        if kind == "radio":
            texts.extend(str(o) for o in node.proto.options)
        if kind == "button_group":
            texts.extend(o.content for o in node.proto.options)
        if kind == "progress":
            texts.append(node.proto.text)
        for child in (getattr(node, "children", None) or {}).values():
            walk(child)

    walk(at._tree)
    return texts


def check(at: AppTest, *expected: str) -> list[str]:
    """No live payload in any markdown text; each of ``expected`` (raw) shows, escaped."""
    assert not at.exception, at.exception
    texts = markdown_texts(at)
    leaks = [t for t in texts if any(marker in live(t) for marker in MARKERS)
             or any(pattern.search(_ESCAPED.sub(lambda m: m.group(0)[1], t)) for pattern in GFM_AUTOLINKS)]
    assert not leaks, leaks
    joined = "\n".join(texts)
    for raw in expected:
        assert escape_markdown(raw) in joined, raw
    return texts


def page(name: str, view: str | None = None, **state_values) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30)
    at.session_state[state.ANNOTATOR] = name
    for k, v in state_values.items():
        at.session_state[k] = v
    at.run()
    if view:
        at.switch_page(view)
        at.run()
    return at


@pytest.mark.parametrize("who", ["lead", "annotator"])
def test_label_page(app_env, who):
    h = app_env
    name = h.lead if who == "lead" else h.annotator
    at = page(name)
    assert at.session_state[state.CURRENT] == h.open_pk
    history = [b.label for b in at.button if (b.key or "").startswith("hist_")]
    assert len(history) >= 4
    # (the judge's suggestion and its model are drawn by the grading widget, as text nodes)
    check(at, h.p("query_id-5"), name, f"submitted · {h.p('question-0')[:60]}")
    # the synthetic question: its seed chunks' ids are in a caption
    at = page(name, None, **{state.OPEN_QUERY: h.synthetic_pks[0]})
    texts = check(at)
    assert any(t.startswith("Seed chunks: ") and len(t) > 100 for t in texts)


def test_label_page_notice_and_error_are_escaped(app_env):
    h = app_env
    at = page(h.annotator, None, **{state.CURRENT: h.open_pk, state.NOTICE: h.p("notice"),
                                    state.LABEL_ERROR: h.p("error")})
    check(at, h.p("notice"), h.p("error"))
    assert at.toast and at.error


@pytest.mark.parametrize("who", ["lead", "annotator"])
def test_data_page(app_env, who):
    h = app_env
    result = {"path": hostile.file_name(h.base), "records": 1, "new": 1, "merged": 0, "unchanged": 0,
              "rejected": 0, "problems": [h.p("problem")]}
    at = page(h.lead if who == "lead" else h.annotator, "views/data.py", **{state.INGEST_RESULT: result})
    if who == "lead":
        check(at, hostile.file_name(h.base), str(h.path))
        # a format that embeds one ranking, with two logged retrievers and none called production: it asks
        at.selectbox(key="export_format").set_value("ragas").run()
        check(at, h.p("retriever"), h.p("retriever_b"))
        assert any("none called production" in i.value for i in at.info)
        # the logs file's own (hostile) name, in the undo preview
        at.button(key="undo_ask").click().run()
        check(at, hostile.file_name(h.base))
    else:  # no upload, no export, no database path for annotators
        check(at)
        assert hostile.file_name(h.base) not in "\n".join(m.value for m in at.markdown)


@pytest.mark.parametrize("who", ["lead", "annotator"])
def test_metrics_page(app_env, who):
    h = app_env
    at = page(h.lead if who == "lead" else h.annotator, "views/metrics.py")
    # two logged retrievers, none called production: the page names them and asks for one
    check(at, h.p("retriever"), h.p("retriever_b"))
    assert any("none is called production" in i.value for i in at.info)
    at.selectbox(key="m_retriever").set_value(h.p("retriever")).run()
    check(at, h.p("retriever"), *([h.p("query_id-0")] if who == "lead" else []))  # the worst queries: a lead's list
    texts = "\n".join(markdown_texts(at))
    assert "2 topics (tfidf" in texts and "questions carry a signal" in texts  # topics and signals drawn
    assert at.selectbox(key="at_run").options  # the numbers for all traffic, from the judge run over all of it
    at.selectbox(key="m_cmp_b").set_value(h.p("retriever_b")).run()
    check(at, h.p("retriever"), h.p("retriever_b"))
    if who == "lead":
        at.selectbox(key="m_annotator").set_value(h.annotator).run()
        check(at)
    else:
        assert at.selectbox(key="m_annotator").options == ["all"]


@pytest.mark.parametrize("who", ["lead", "annotator"])
def test_review_page(app_env, who):
    h = app_env
    at = page(h.lead if who == "lead" else h.annotator, "views/review.py")
    check(at)
    at.button(key="rv_edit").click().run()
    check(at)


@pytest.mark.parametrize("who", ["lead", "annotator"])
def test_synth_page(app_env, who):
    h = app_env
    at = page(h.lead if who == "lead" else h.annotator, "views/synth.py")
    check(at)
    at.button(key="sy_estimate").click().run()
    check(at, h.p("model"))


@pytest.mark.parametrize("who", ["lead", "annotator"])
def test_judge_page(app_env, who):
    h = app_env
    at = page(h.lead if who == "lead" else h.annotator, "views/judge.py")
    texts = check(at)
    # the disagreement browser (leads): "Query <id> · chunk <id>"
    assert any(t.startswith(escape_markdown(f"Query ![x]({h.base}/md-query_id-"))
               and escape_markdown(f" · chunk ![x]({h.base}/md-doc_id-") in t for t in texts) == (who == "lead")
    at.button(key="jd_estimate").click().run()
    check(at, h.p("model"))


def test_judge_page_collects_a_batch_the_provider_refused(app_env, tmp_path, monkeypatch):
    """The page collects a finished batch when it opens: the provider's (hostile) refusal shows as
    a note, escaped."""
    h = app_env
    copy = tmp_path / "refused.db"
    shutil.copy(h.path, copy)  # the module's database stays as built
    error = h.p("batch_refusal")
    with FakeOpenAI() as server:
        config = llm.LLMConfig(base_url=server.url, api_key="sk-test-hostile", model=h.p("model"), timeout_s=5,
                               max_retries=1, max_tokens=777)
        db = labeler.connect(copy)
        judge.run_judge(db, config, "relevance.v1", limit=2, batch=True)
        db.close()
        for batch_id in list(server.batch.batches):
            server.batch.advance(batch_id, "failed", errors=[error])
        monkeypatch.setenv("LABELER_DB", str(copy))
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        at = page(h.lead, "views/judge.py")
    check(at, error)
    assert any("failed validation" in c.value for c in at.caption)


def test_adjudication_and_settings_pages(app_env):
    h = app_env
    at = page(h.lead, "views/adjudicate.py")
    check(at, h.p("query_id-0"), h.p("query_id-1"), h.annotator)
    at = page(h.lead, "views/settings.py")
    check(at)  # account names are HTML-escaped plain text there
    assert any(html.escape(h.annotator) in b.proto.body for b in at.get("html"))


def test_annotators_page(app_env):
    h = app_env
    at = page(h.lead, "views/annotators.py")
    check(at)
    names = {n for df in at.dataframe for n in df.value.get("annotator", [])}
    assert h.annotator in names  # shown, in a table (plain text)


def test_items_page_flag_inbox_and_lead_view(app_env):
    h = app_env
    at = page(h.lead, "views/items.py")
    # the flag inbox: "Query <id> · flagged by <name> · <time>", and the reason
    check(at, h.p("query_id-4"), h.annotator, h.p("flag_reason"))
    q0 = h.open_pk - 5  # both labeled it, with a conflict
    lead = AppTest.from_file(APP, default_timeout=30)
    lead.session_state[state.ANNOTATOR] = h.lead
    lead.session_state[state.LEAD_NOTICE] = h.p("notice")
    lead.session_state[state.LEAD_ERROR] = h.p("error")
    lead.query_params[state.ITEM_PARAM] = str(q0)
    lead.run()
    check(lead, h.p("query_id-0"), h.p("notice"), h.p("error"))
    tables = [b.proto.body for b in lead.get("html") if "lb-lead-grades" in b.proto.body]
    assert len(tables) == 1 and html.escape(h.annotator) in tables[0] and "<img" not in tables[0]
