"""The Label page's lead view (``/?item=PK``; Label is the default page): one item with every
annotator's grades side by side (leads are not blind), their answers and statuses, and the lead's
actions on it: re-queue, send to adjudication, discard, restore a discarded one. An account that is not a lead gets nothing
but a one-line refusal: the role is read from the database, and the library refuses the data and
the actions too."""

from __future__ import annotations

import html
from typing import Any

import pandas as pd
import streamlit as st

import labeler.labels as labels
from labeler import accounts
from labeler.app import auth, state, widgets
from labeler.errors import LabelerError


def _act(fn, *args: Any, done: str, **kwargs: Any) -> None:
    try:
        fn(state.get_db(), *args, by=st.session_state[state.ANNOTATOR], **kwargs)
    except LabelerError as e:
        st.session_state[state.LEAD_ERROR] = str(e)
        return
    st.session_state[state.LEAD_NOTICE] = done


@auth.guarded
def requeue(pk: int) -> None:
    who = st.session_state.get(f"lead_requeue_who_{pk}") or None
    _act(labels.requeue_item, pk, who, done="Sent back to the queue of " + (", ".join(who) if who else "everyone"))


@auth.guarded
def adjudicate(pk: int) -> None:
    _act(labels.request_adjudication, pk, note=st.session_state.get(f"lead_note_{pk}") or None,
         done="On the Adjudication page now")


@auth.guarded
def discard(pk: int) -> None:
    _act(labels.discard_item, pk, st.session_state.get(f"lead_discard_reason_{pk}") or "", done="Discarded")


@auth.guarded
def restore(pk: int) -> None:
    _act(labels.restore_item, pk, done="Restored: back in the queue and the golden set")


@auth.guarded
def close() -> None:
    st.query_params.pop(state.ITEM_PARAM, None)


def _cell(value: Any) -> str:
    return "" if value is None else html.escape(str(value))


def grades_html(detail: labels.ItemDetail, names: list[str]) -> str:
    """One row per chunk: the chunk (id, title, full text), each annotator's grade, then the
    consolidated, adjudicated and judge grades; conflicting rows are marked. Every value is escaped."""
    def grade(value: int | None) -> str:
        if value is None:
            return ""
        return f"{value} {names[value]}" if 0 <= value < len(names) else str(value)

    head = ["#", "chunk", *detail.annotators, "consolidated", "adjudicated", "judge"]
    rows = []
    for c in detail.chunks:
        style = ' style="background: #fff3bf;"' if c.conflict else ""
        chunk = (f"<b>{_cell(c.chunk.doc_id)}</b>" + (f" · {_cell(c.chunk.title)}" if c.chunk.title else "")
                 + f'<div style="white-space: pre-wrap; overflow-wrap: anywhere;">{_cell(c.chunk.text)}</div>')
        cells = [_cell(c.chunk.position if c.chunk.position is not None else "added"), chunk,
                 *(_cell(grade(c.grades.get(name))) for name in detail.annotators),
                 _cell(grade(c.consolidated)) + (" (conflict)" if c.conflict else ""), _cell(grade(c.adjudicated)),
                 _cell(grade(c.judge))]
        rows.append(f"<tr{style}>" + "".join(f'<td style="vertical-align: top; padding: 4px 8px;">{x}</td>'
                                             for x in cells) + "</tr>")
    return ('<table class="lb-lead-grades" style="border-collapse: collapse; width: 100%; font-size: 0.9rem;">'
            "<thead><tr>" + "".join(f'<th style="text-align: left; padding: 4px 8px;">{_cell(h)}</th>' for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def show(db: Any, name: str) -> bool:
    """Draw the lead view of the item in the URL; True when drawn (the caller stops), False when
    there is none or ``name`` is not a lead (then the parameter is dropped and a refusal shown)."""
    pk = state.lead_item()
    if state.ITEM_PARAM not in st.query_params:
        return False
    if not accounts.is_lead(db, name):
        st.query_params.pop(state.ITEM_PARAM, None)
        st.error("Opening an item with everyone's grades is for leads only.", icon=":material/lock:")
        return False
    if pk is None:
        st.query_params.pop(state.ITEM_PARAM, None)
        st.error("The link names no item: open one from the Items page.")
        return False
    try:
        detail = labels.item_detail(db, pk, by=name)
    except LabelerError as e:
        widgets.show_error(e)
        st.button("Close", key="lead_close", on_click=close)
        return True
    settings = state.settings()
    row = detail.row
    if error := st.session_state.pop(state.LEAD_ERROR, None):
        st.error(widgets.escape_markdown(error))
    if notice := st.session_state.pop(state.LEAD_NOTICE, None):
        st.success(widgets.escape_markdown(notice))
    with st.container(horizontal=True, vertical_alignment="center"):
        st.page_link("views/items.py", label="Back to Items", icon=":material/arrow_back:")
        st.button("Label my own queue", key="lead_close", on_click=close, width="content")
    head = f"Lead view · query {widgets.escape_markdown(row.query_id)} · {row.origin}"
    if row.occurrences > 1:
        head += f" · asked {row.occurrences} times"
    if row.discarded:
        head += " · discarded by a lead: " + widgets.escape_markdown(row.discard_reason or "")
    if row.adjudication_requested:
        head += " · sent to adjudication"
    st.caption(head)
    widgets.plain_block(row.question, size="1.35rem", weight=600, key="lead_question")
    edits = labels.question_history(db, pk)
    if edits:
        with st.expander(f"Question edited {len(edits)} time(s): the original"):
            widgets.plain_block(edits[0].old, muted=True, key="lead_original")
    if detail.answer is not None:
        st.caption("Production answer")
        widgets.plain_block(detail.answer, muted=True, key="lead_answer")

    st.subheader("Grades side by side")
    if not detail.annotators:
        st.info("Nobody has opened this item yet.")
    st.html(grades_html(detail, settings["grade_names"]))
    st.caption("Grades of every annotator who opened the item, submitted or not; the consolidated grade counts "
               "submitted grades only (median, or the lead's adjudicated grade).")
    if detail.labels:
        st.subheader("Answers and statuses")
        st.dataframe(pd.DataFrame([{
            "annotator": lab.annotator, "status": lab.status.replace("_", " "),
            "when": (lab.at or "")[:19].replace("T", " "), "expected answer": lab.expected_answer or "",
            "notes": lab.notes or "", "reason": (lab.flag_reason if lab.status == "flagged" else lab.status_reason) or "",
            "seconds": round(lab.seconds)} for lab in detail.labels]), hide_index=True, key="lead_labels")

    st.subheader("Lead actions")
    if row.discarded:
        st.caption("A discarded item stays out of the queue and the golden set until a lead restores it.")
        st.button("Restore item", key="lead_restore", on_click=restore, args=(pk,),
                  help="Undo the discard: each annotator gets back the status they had before it")
        return True
    left, middle, right = st.columns(3, gap="large")
    with left:
        st.multiselect("Send back to", detail.annotators, key=f"lead_requeue_who_{pk}",
                       placeholder="everyone who opened it")
        st.button("Re-queue", key="lead_requeue", on_click=requeue, args=(pk,), disabled=not detail.annotators,
                  help="Their status goes back to in progress (grades kept); the item comes first in their queue")
    with middle:
        st.text_input("Note for adjudication", key=f"lead_note_{pk}")
        st.button("Send to adjudication", key="lead_adjudicate", on_click=adjudicate, args=(pk,),
                  disabled=row.adjudication_requested)
    with right:
        st.text_input("Reason to discard", key=f"lead_discard_reason_{pk}")
        st.button("Discard item", key="lead_discard", on_click=discard, args=(pk,),
                  help="Out of the queue and the golden set, for everyone")
    return True
