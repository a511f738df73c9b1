"""Review: accept, edit or reject each generated synthetic question, with the keyboard.

Only accepted questions enter the labeling queue. Decisions are saved in the button callbacks.
"""

from __future__ import annotations

import streamlit as st

from labeler import synth
from labeler.app import auth, state, widgets
from labeler.errors import LabelerError

# session_state keys of this page
SKIPPED = "review_skipped"  # pks skipped in this session (shown again after the rest)
EDITING = "review_editing"  # pk whose edit form is open
LAST = "review_last"  # pk of the last decision, for undo
ERROR = "review_error"
NOTICE = "review_notice"

db = state.get_db()
reviewer = st.session_state[state.ANNOTATOR]


@auth.guarded
def _decide(pk: int, decision: str, **edits: str | None) -> None:
    try:
        q = synth.review(db, pk, decision, reviewer=reviewer, **edits)
    except LabelerError as e:
        st.session_state[ERROR] = str(e)
        return
    st.session_state[EDITING] = None
    st.session_state[LAST] = pk
    st.session_state[NOTICE] = {"accept": "Accepted: it enters the labeling queue.",
                                "edit": "Edited and accepted.", "reject": "Rejected.",
                                "reset": f"Back to pending: {q.question[:60]}"}[decision]


@auth.guarded
def _save_edit(pk: int) -> None:
    _decide(pk, "edit", question=st.session_state.get(f"edit_q_{pk}"),
            answer=st.session_state.get(f"edit_a_{pk}"))


@auth.guarded
def _edit(pk: int) -> None:
    st.session_state[EDITING] = pk


@auth.guarded
def _cancel_edit() -> None:
    st.session_state[EDITING] = None


@auth.guarded
def _skip(pk: int) -> None:
    st.session_state.setdefault(SKIPPED, [])
    st.session_state[SKIPPED] = [*st.session_state[SKIPPED], pk]


@auth.guarded
def _undo() -> None:
    pk = st.session_state.get(LAST)
    if pk is not None:
        _decide(pk, "reset")
        st.session_state[LAST] = None


st.title("Review synthetic questions")
counts = synth.review_counts(db)
widgets.stat_tiles({"Pending": counts["pending"], "Accepted": counts["accepted"], "Rejected": counts["rejected"]},
                   columns=3)
if error := st.session_state.pop(ERROR, None):
    st.error(widgets.escape_markdown(error))
if notice := st.session_state.pop(NOTICE, None):
    st.toast(widgets.escape_markdown(notice))

pending = synth.list_questions(db, state="pending", limit=200)
skipped = st.session_state.get(SKIPPED, [])
# skipped ones come back after the others
pending.sort(key=lambda q: (q.query_pk in skipped, skipped.index(q.query_pk) if q.query_pk in skipped else 0))
current = pending[0] if pending else None

if current is None:
    st.success("Nothing to review: every synthetic question has a decision. Generate more on the Synth page.")
    st.button("Undo last decision", key="rv_undo", shortcut="U", on_click=_undo,
              disabled=st.session_state.get(LAST) is None)
else:
    pk = current.query_pk
    editing = st.session_state.get(EDITING) == pk
    head = [f"Query {current.query_id}", current.question_type or "question",
            f"setting {current.setting}", f"{current.candidates} chunks to judge"]
    if current.generator.get("multi_hop"):
        head.append("two chunks")
    st.caption(widgets.escape_markdown(" · ".join(head) + f" · {counts['pending']} pending"))
    if editing:
        st.text_area("Question", value=current.question, key=f"edit_q_{pk}", height=90)
        st.text_area("Expected answer", value=current.expected_answer or "", key=f"edit_a_{pk}", height=140)
        with st.container(horizontal=True, key="rv_edit_bar"):
            st.button("Save and accept", key="rv_save", type="primary", on_click=_save_edit, args=(pk,),
                      shortcut="Ctrl+Enter", width="content")
            st.button("Cancel edit", key="rv_cancel_edit", on_click=_cancel_edit, shortcut="Esc", width="content")
    else:
        widgets.plain_block(current.question, size="1.35rem", weight=600, key="rv_question")
        st.markdown("**Expected answer** (proposed by the generator)")
        widgets.plain_block(current.expected_answer, key="rv_answer")
        with st.container(horizontal=True, key="rv_toolbar"):
            st.button("Accept", key="rv_accept", shortcut="A", type="primary", on_click=_decide,
                      args=(pk, "accept"), width="content", help="Accept: the question enters the labeling queue")
            st.button("Edit", key="rv_edit", shortcut="E", on_click=_edit, args=(pk,), width="content",
                      help="Edit the question or the expected answer, then accept")
            st.button("Reject", key="rv_reject", shortcut="X", on_click=_decide, args=(pk, "reject"),
                      width="content", help="Reject: never labeled, never exported")
            st.button("Skip", key="rv_skip", shortcut="N", on_click=_skip, args=(pk,), width="content",
                      help="Decide later")
            st.button("Undo", key="rv_undo", shortcut="U", on_click=_undo, width="content",
                      disabled=st.session_state.get(LAST) is None, help="Put the last decision back to pending")
        st.caption("Keys: A accept, E edit, X reject, N skip, U undo.")
    if current.quotes:
        st.markdown("**Supporting quotes**")
        for i, quote in enumerate(current.quotes):
            widgets.plain_block(quote, muted=True, key=f"rv_quote_{i}")
    st.subheader("Seed chunks" if len(current.seed_chunks) > 1 else "Seed chunk")
    for chunk in current.seed_chunks:
        with st.container(border=True):
            widgets.chunk_card(chunk, note="proposed relevant")

st.subheader("Acceptance rate per generator setting")
rates = synth.acceptance_rates(db)
if rates:
    st.dataframe([{"setting": r["setting"], "model": r["model"], "prompt": r["prompt_version"],
                   "types": ", ".join(r["options"].get("question_types", [])),
                   "per chunk": r["options"].get("per_chunk"), "multi-hop": r["options"].get("multi_hop"),
                   "persona": r["options"].get("persona"), "generated": r["generated"], "pending": r["pending"],
                   "accepted": r["accepted"], "edited": r["edited"], "rejected": r["rejected"],
                   "failed checks": r["check_rejected"],
                   "acceptance rate": None if r["acceptance_rate"] is None else round(r["acceptance_rate"], 3)}
                  for r in rates], hide_index=True, key="rv_rates")
else:
    st.caption("No synthetic questions yet.")
