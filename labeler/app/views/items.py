"""Items (leads): every query in one table, filtered and paged on the server; selecting a row opens
it in the Label page's lead view. The Flags tab is the inbox of flagged items, each resolved here."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta

import pandas as pd
import streamlit as st

import labeler.labels as labels
from labeler.app import auth, state, widgets
from labeler.errors import LabelerError

db = state.get_db()
lead = auth.require_lead("The Items page")
ANY = "any"
FLAGS_SHOWN = 20  # flags drawn at once (each is a small form): resolving them brings the next ones


@auth.guarded
def first_page() -> None:
    st.session_state[state.ITEMS_PAGE] = 1


def _act(fn, *args, done: str, **kwargs) -> None:
    try:
        fn(state.get_db(), *args, by=lead, **kwargs)
    except LabelerError as e:
        st.session_state[state.LEAD_ERROR] = str(e)
        return
    st.session_state[state.LEAD_NOTICE] = done


@auth.guarded
def resolve(pk: int, annotator: str, action: str) -> None:
    ident = f"{pk}_{annotator}"
    note = st.session_state.get(f"flag_note_{ident}") or None
    question = st.session_state.get(f"flag_question_{ident}") if action == "edit" else None
    done = {"edit": "Question edited; the item went back to ", "unflag": "Unflagged; the item went back to ",
            "discard": "Item discarded; flag of "}[action] + annotator + (" resolved" if action == "discard" else "")
    _act(labels.resolve_flag, pk, annotator, action, question=question, note=note, done=done)


@auth.guarded
def open_item(pk: int) -> None:
    st.session_state[state.ITEMS_OPEN] = pk


def _when(value: date | None, *, end: bool = False) -> datetime | None:
    if value is None:
        return None
    return datetime.combine(value + timedelta(days=1) if end else value, time())


st.title("Items")
if error := st.session_state.pop(state.LEAD_ERROR, None):
    st.error(widgets.escape_markdown(error))
if notice := st.session_state.pop(state.LEAD_NOTICE, None):
    st.toast(widgets.escape_markdown(notice))
if (pk := st.session_state.pop(state.ITEMS_OPEN, None)) is not None:
    st.switch_page("views/label.py", query_params={state.ITEM_PARAM: str(pk)})

flag_total = labels.flag_count(db, by=lead)
items_tab, flags_tab = st.tabs(["All items", f"Flags ({flag_total})"])

with items_tab:
    with st.container(horizontal=True, key="items_filters"):
        status = st.selectbox("Status", [ANY, *labels.ITEM_STATUSES], key="items_status", on_change=first_page)
        annotator = st.selectbox("Annotator", [ANY, *(a.name for a in labels.list_annotators(db))],
                                 key="items_annotator", on_change=first_page)
        origin = st.selectbox("Origin", [ANY, "log", "synthetic", "import"], key="items_origin", on_change=first_page)
        retriever = st.selectbox("Retriever", [ANY, *labels.retriever_names(db)], key="items_retriever",
                                 on_change=first_page)
        flagged = st.selectbox("Flagged", [ANY, "yes", "no"], key="items_flagged", on_change=first_page)
        conflict = st.selectbox("Conflict", [ANY, "yes", "no"], key="items_conflict", on_change=first_page)
    with st.container(horizontal=True, key="items_filters_2"):
        search = st.text_input("Search questions", key="items_search", on_change=first_page,
                               placeholder="words in the question")
        dates = st.date_input("First seen", value=(), key="items_dates", on_change=first_page)
        page_size = st.selectbox("Rows per page", [25, 50, 100, 200], index=1, key="items_page_size",
                                 on_change=first_page)
    since = dates[0] if len(dates) > 0 else None
    until = dates[1] if len(dates) > 1 else since
    page_no = st.session_state.setdefault(state.ITEMS_PAGE, 1)
    try:
        found = labels.list_items(
            db, status=None if status == ANY else status, annotator=None if annotator == ANY else annotator,
            origin=None if origin == ANY else origin, retriever=None if retriever == ANY else retriever,
            flagged=None if flagged == ANY else flagged == "yes", conflict=None if conflict == ANY else conflict == "yes",
            search=search or None, since=_when(since), until=_when(until, end=True), page=page_no,
            page_size=page_size, by=lead)
    except LabelerError as e:
        widgets.show_error(e)
        st.stop()
    if found.rows == [] and page_no > 1 and found.total:
        first_page()
        st.rerun()
    table = pd.DataFrame([{
        "query": r.query_id, "question": r.question, "origin": r.origin,
        "retrievers": ", ".join(r.retrievers), "pool": r.pool_size, "annotators": r.statuses,
        "relevant": r.relevant, "conflict": r.conflict, "judge agreement": r.judge_agreement,
        "flag reason": "; ".join(f"{a.annotator}: {a.reason}" for a in r.annotators
                                 if a.status == "flagged" and a.reason),
        "occurrences": r.occurrences, "first seen": (r.first_seen or "")[:19].replace("T", " "),
        "discarded": r.discarded} for r in found.rows],
        columns=["query", "question", "origin", "retrievers", "pool", "annotators", "relevant", "conflict",
                 "judge agreement", "flag reason", "occurrences", "first seen", "discarded"])
    st.caption(f"{found.total:,} item(s) match · page {found.page} of {found.pages} · select a row to open it "
               "with every annotator's grades")
    picked = st.dataframe(
        table, hide_index=True, key="items_table", on_select="rerun", selection_mode="single-row",
        column_config={"question": st.column_config.TextColumn(width="large"),
                       "annotators": st.column_config.TextColumn(width="medium"),
                       "judge agreement": st.column_config.NumberColumn(format="percent"),
                       "conflict": st.column_config.CheckboxColumn(), "discarded": st.column_config.CheckboxColumn()})
    rows = picked.selection.rows if picked is not None else []
    if rows and rows[0] < len(found.rows):
        st.switch_page("views/label.py", query_params={state.ITEM_PARAM: str(found.rows[rows[0]].query_pk)})
    with st.container(horizontal=True, key="items_pager", vertical_alignment="bottom"):
        st.number_input("Page", min_value=1, max_value=found.pages, step=1, key=state.ITEMS_PAGE, width=140)
        st.caption(f"of {found.pages}")

with flags_tab:
    flags = labels.flagged_items(db, by=lead, limit=FLAGS_SHOWN)
    if not flags:
        st.success("No flags waiting: nothing for the lead to look at.")
    else:
        st.caption(f"{flag_total} flag(s) waiting, oldest first"
                   + (f" (the first {FLAGS_SHOWN} shown)" if flag_total > FLAGS_SHOWN else "")
                   + ". Edit the question (the original is kept), discard the item, or unflag it with a note "
                     "the annotator sees when the item comes back to them.")
    for f in flags:
        ident = f"{f.query_pk}_{f.annotator}"
        with st.container(border=True, key=f"flag_{ident}"):
            st.caption(widgets.escape_markdown(f"Query {f.query_id} · flagged by {f.annotator} · "
                                               f"{(f.at or '')[:16].replace('T', ' ')}"))
            widgets.plain_block(f.question, size="1.1rem", weight=600, key=f"flag_q_{ident}")
            st.markdown("**Reason:** " + widgets.escape_markdown(f.reason or "(none given)"))
            st.text_area("Question", value=f.question, key=f"flag_question_{ident}", height=80)
            st.text_input("Note for the annotator", key=f"flag_note_{ident}",
                          placeholder="what you changed or why it is fine (required to unflag)")
            with st.container(horizontal=True):
                st.button("Save edited question", key=f"flag_edit_{ident}", on_click=resolve,
                          args=(f.query_pk, f.annotator, "edit"), width="content")
                st.button("Unflag with note", key=f"flag_unflag_{ident}", on_click=resolve,
                          args=(f.query_pk, f.annotator, "unflag"), width="content")
                st.button("Discard item", key=f"flag_discard_{ident}", on_click=resolve,
                          args=(f.query_pk, f.annotator, "discard"), width="content")
                st.button("Open", key=f"flag_open_{ident}", on_click=open_item, args=(f.query_pk,), width="content")
