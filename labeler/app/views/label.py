"""Label: the annotator's workspace. Every change is saved at once, in the widget callbacks."""

from __future__ import annotations

import time

import streamlit as st

import labeler.labels as labels
from labeler import synth
from labeler.app import state, suggestions, widgets
from labeler.errors import LabelerError

db = state.get_db()
annotator = st.session_state[state.ANNOTATOR]
settings = state.settings()
names: list[str] = settings["grade_names"]


# --- callbacks (run before the script, so a write never depends on the page drawing) ----------

def _safely(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except LabelerError as e:
        st.session_state[state.LABEL_ERROR] = str(e)
        return None


def _show(pk: int | None) -> None:
    st.session_state[state.CURRENT] = pk
    st.session_state[state.FOCUS] = 0
    st.session_state[state.SHOWN_AT] = time.monotonic()


def _spent(pk: int) -> None:
    shown = st.session_state.get(state.SHOWN_AT)
    if shown is not None:
        _safely(labels.add_seconds, db, pk, annotator, min(time.monotonic() - shown, 3600.0))
        st.session_state[state.SHOWN_AT] = time.monotonic()


def _next_item() -> None:
    pk = _safely(labels.next_item, db, annotator)
    _show(pk)
    if pk is None:
        st.session_state[state.NOTICE] = "Nothing left in your queue. Thank you!"


def _focus_next_ungraded(item_pk: int, after: int) -> None:
    item = labels.get_item(db, item_pk, annotator)
    chunks = item.chunks + item.extra
    for i in list(range(after + 1, len(chunks))) + list(range(0, after + 1)):
        if chunks[i].grade is None:
            st.session_state[state.FOCUS] = i
            return
    st.session_state[state.FOCUS] = min(after + 1, max(len(chunks) - 1, 0))


def grade(pk: int, doc_pk: int, value: int, index: int) -> None:
    _safely(labels.set_grade, db, pk, doc_pk, annotator, value)
    _focus_next_ungraded(pk, index)


def grade_focused(pk: int, value: int) -> None:
    item = labels.get_item(db, pk, annotator)
    chunks = item.chunks + item.extra
    if not chunks:
        return
    i = min(st.session_state.get(state.FOCUS, 0), len(chunks) - 1)
    grade(pk, chunks[i].doc_pk, value, i)


def move_focus(pk: int, step: int) -> None:
    item = labels.get_item(db, pk, annotator)
    n = len(item.chunks) + len(item.extra)
    if n:
        st.session_state[state.FOCUS] = (st.session_state.get(state.FOCUS, 0) + step) % n


def rest_zero(pk: int) -> None:
    _safely(labels.set_rest_zero, db, pk, annotator)


def save_field(pk: int, field: str, key: str) -> None:
    _safely(labels.set_query_fields, db, pk, annotator, **{field: st.session_state.get(key)})


def finish(pk: int, status: str) -> None:
    reason = None
    if status == "flagged":
        reason = (st.session_state.get(f"flag_reason_{pk}") or "").strip() or None
        if reason is None:
            st.session_state[state.LABEL_ERROR] = "Write what is wrong in the flag reason box, then flag."
            return
    if status == "discarded":
        reason = (st.session_state.get(f"flag_reason_{pk}") or "").strip() or None
    _spent(pk)
    if _safely(labels.set_status, db, pk, annotator, status, reason=reason) is None and \
            st.session_state.get(state.LABEL_ERROR):
        return
    st.session_state[state.NOTICE] = {"submitted": "Submitted.", "skipped": "Skipped.", "flagged": "Flagged for the lead.",
                                      "discarded": "Discarded."}[status]
    _next_item()


def go_back(pk: int | None) -> None:
    prev = _safely(labels.previous_item, db, annotator, pk)
    if prev is not None:
        _show(prev)
    else:
        st.session_state[state.NOTICE] = "There is no earlier item in your history."


def reopen(pk: int) -> None:
    _show(pk)


# --- which item ------------------------------------------------------------------------------

if state.OPEN_QUERY in st.session_state:
    _show(st.session_state.pop(state.OPEN_QUERY))
if state.CURRENT not in st.session_state:
    _next_item()
    st.session_state.pop(state.NOTICE, None)

pk = st.session_state.get(state.CURRENT)

with st.sidebar:
    widgets.progress_panel(db, annotator)
    with st.expander("Guidelines"):
        st.markdown(settings["guidelines"])
    with st.expander("Grades"):
        for g, (name, desc) in enumerate(zip(names, settings["grade_help"], strict=False)):
            st.write(f"**{g} {name}**: {desc}")
    with st.expander("My history"):
        for h in labels.history(db, annotator, limit=30):
            st.button(widgets.escape_markdown(f"{h.status} · {h.question[:60]}"), key=f"hist_{h.query_pk}",
                      on_click=reopen, args=(h.query_pk,), width="stretch")

if error := st.session_state.pop(state.LABEL_ERROR, None):
    st.error(widgets.escape_markdown(error))
if notice := st.session_state.pop(state.NOTICE, None):
    st.toast(widgets.escape_markdown(notice))

if pk is None:
    st.title("Label")
    st.success("Nothing left in your queue: every item has the annotators it needs, or is held by someone else.")
    st.button("Check again", on_click=_next_item, key="check_again")
    st.button("Back to my last item", on_click=go_back, args=(None,), key="back_empty")
    st.stop()

item = labels.get_item(db, pk, annotator)
chunks = item.chunks + item.extra
focus = min(st.session_state.get(state.FOCUS, 0), max(len(chunks) - 1, 0))

# --- the question ---------------------------------------------------------------------------

head = f"Query {widgets.escape_markdown(item.query_id)} · {item.origin}"
if item.occurrences > 1:
    head += f" · asked {item.occurrences} times"
if item.status and item.status != "in_progress":
    head += f" · you {item.status} this item (edits are saved)"
st.caption(head)
widgets.plain_block(item.question, size="1.35rem", weight=600, key="question")

# --- the keyboard toolbar -------------------------------------------------------------------

with st.container(horizontal=True, key="toolbar"):
    for g in range(len(names)):
        st.button(f"{g} {names[g]}", key=f"kbd_{g}", shortcut=str(g), on_click=grade_focused, args=(pk, g),
                  help=f"Grade the focused chunk {g} ({names[g]})", width="content")
    st.button("Rest are 0", key="kbd_rest", shortcut="Z", on_click=rest_zero, args=(pk,), width="content",
              help="Grade every ungraded retrieved chunk 0")
    st.button("Next chunk", key="kbd_next", shortcut="J", on_click=move_focus, args=(pk, 1), width="content")
    st.button("Previous chunk", key="kbd_prev", shortcut="K", on_click=move_focus, args=(pk, -1), width="content")
    if chunks:
        st.button("Accept suggestion", key="kbd_accept", shortcut="A", on_click=suggestions.accept_focused,
                  args=(db, pk, chunks[focus].doc_pk, annotator), width="content",
                  help="Take the calibrated judge's grade for the focused chunk (when it made a suggestion)")
with st.container(horizontal=True, key="toolbar2"):
    st.button("Submit", key="kbd_submit", shortcut="Enter", type="primary", on_click=finish, args=(pk, "submitted"),
              width="content", disabled=item.ungraded > 0,
              help="Grade every chunk first" if item.ungraded else "Submit and go to the next item")
    st.button("Skip", key="kbd_skip", shortcut="S", on_click=finish, args=(pk, "skipped"), width="content")
    st.button("Back", key="kbd_back", shortcut="B", on_click=go_back, args=(pk,), width="content",
              help="The item you finished before this one")
st.caption(f"{len(item.chunks) - item.ungraded} of {len(item.chunks)} retrieved chunks graded. Keys: 0-3 grade the "
           "focused chunk, J/K move, Z rest are 0, Enter submit, S skip, B back.")

left, right = st.columns([3, 2], gap="large")

with left:
    st.subheader("Retrieved chunks")
    if not item.chunks:
        st.info("The retriever returned nothing for this question. Use the search to add the relevant chunks.")
    for i, c in enumerate(chunks):
        if i == len(item.chunks):
            st.subheader("Added from search")
        with st.container(border=True, key=f"chunk_{pk}_{c.doc_pk}"):
            widgets.chunk_card(c, focused=(i == focus))
            cols = st.columns(len(names) + 2)
            for g in range(len(names)):
                cols[g].button(f"{g}", key=f"g_{pk}_{c.doc_pk}_{g}", on_click=grade, args=(pk, c.doc_pk, g, i),
                               type="primary" if c.grade == g else "secondary", help=names[g], width="stretch")
            cols[len(names)].caption(f"grade: {names[c.grade]}" if c.grade is not None else "not graded")
            suggestions.render_suggestion(db, pk, c.doc_pk, annotator, current=c.grade, grade_names=names)

with right:
    st.subheader("Find what the retriever missed")
    query = st.text_input("Search the whole corpus", key=f"search_{pk}", placeholder="words from the missing chunk")
    if query:
        shown = {c.doc_pk for c in chunks}
        try:
            hits = widgets.search_corpus(db, query)
        except LabelerError as e:
            hits = []
            st.error(widgets.escape_markdown(str(e)))
        if not hits:
            st.caption("No chunk matches.")
        for h in hits:
            with st.container(border=True, key=f"hit_{pk}_{h.doc_pk}"):
                widgets.chunk_card(h, focused=False, note="already on this item" if h.doc_pk in shown else None)
                cols = st.columns(len(names))
                for g in range(len(names)):
                    cols[g].button(f"Add as {g}", key=f"add_{pk}_{h.doc_pk}_{g}", help=names[g],
                                   on_click=grade, args=(pk, h.doc_pk, g, len(chunks)), width="stretch")

    if item.origin == "synthetic":
        proposal = synth.get_question(db, pk)
        st.subheader("Generator's proposal")
        st.caption("A synthetic question: the generator's answer and seed chunks are a proposal, not a label. "
                   "Grade every chunk yourself.")
        widgets.plain_block(proposal.expected_answer or "(no proposed answer)", muted=True, key="proposal")
        st.caption("Seed chunks: " + widgets.escape_markdown(", ".join(c.doc_id for c in proposal.seed_chunks)))
    if item.answer is not None:
        st.subheader("Production answer")
        widgets.plain_block(item.answer, key="answer")
        for field, label in (("answer_faithful", "Faithful to the chunks?"),
                             ("answer_relevant", "Answers the question?")):
            key = f"{field}_{pk}"
            current = getattr(item, field)
            st.radio(label, list(labels.JUDGMENTS), horizontal=True, key=key,
                     index=list(labels.JUDGMENTS).index(current) if current in labels.JUDGMENTS else None,
                     on_change=save_field, args=(pk, field, key))

    st.subheader("Expected answer")
    key = f"expected_{pk}"
    st.text_area("The answer a good assistant should give, from the relevant chunks", key=key,
                 value=item.expected_answer or "", on_change=save_field, args=(pk, "expected_answer", key), height=140)
    key = f"notes_{pk}"
    st.text_input("Notes", key=key, value=item.notes or "", on_change=save_field, args=(pk, "notes", key))
    st.text_input("Reason to flag or discard", key=f"flag_reason_{pk}", value=item.flag_reason or "",
                  placeholder="what is wrong with this item")
    with st.container(horizontal=True, key="flag_bar"):
        st.button("Flag for the lead", key="kbd_flag", shortcut="F", on_click=finish, args=(pk, "flagged"),
                  width="content")
        st.button("Discard question", key="kbd_discard", shortcut="X", on_click=finish, args=(pk, "discarded"),
                  width="content", help="A bad or unanswerable question: its labels are not used")
