"""Adjudication (lead): chunks whose human grades conflict, side by side; the lead sets the final grade."""

import streamlit as st

import labeler.labels as labels
from labeler.app import auth, state, widgets
from labeler.errors import LabelerError

db = state.get_db()
lead = auth.require_lead("Adjudication")
names = state.settings()["grade_names"]


@auth.guarded
def decide(query_pk: int, doc_pk: int, grade: int | None) -> None:
    try:
        labels.adjudicate(db, query_pk, doc_pk, grade, lead)
    except LabelerError as e:
        st.session_state[state.LABEL_ERROR] = str(e)


@auth.guarded
def relabel(query_pk: int) -> None:
    st.session_state[state.OPEN_QUERY] = query_pk


st.title("Adjudication")
if error := st.session_state.pop(state.LABEL_ERROR, None):
    st.error(widgets.escape_markdown(error))
show_resolved = st.toggle("Show resolved pairs too", key="adj_resolved")
items = labels.conflicts(db, include_resolved=show_resolved)
threshold = state.settings()["threshold"]
st.caption(f"A pair conflicts when submitted grades differ by 2 or more, or fall on both sides of the "
           f"relevance threshold ({threshold}). {len(items)} item(s) to look at.")
if not items:
    st.success("No conflicts: the annotators agree on every overlapped chunk.")

for item in items:
    with st.container(border=True, key=f"adj_item_{item.query_pk}"):
        st.caption(f"Query {widgets.escape_markdown(item.query_id)}" + (
            f" · sent here by {widgets.escape_markdown(item.requested)} from the Items page" if item.requested else ""))
        widgets.plain_block(item.question, size="1.15rem", weight=600)
        for pair in item.pairs:
            with st.container(border=True, key=f"adj_{item.query_pk}_{pair.doc_pk}"):
                widgets.chunk_card(pair)
                st.write("Grades: " + " · ".join(f"{widgets.escape_markdown(a)}: **{g} {widgets.escape_markdown(names[g])}**"
                                                  for a, g in pair.grades.items()))
                cols = st.columns(len(names) + 1)
                for g in range(len(names)):
                    cols[g].button(f"Final {g}", key=f"adj_{item.query_pk}_{pair.doc_pk}_{g}",
                                   help=widgets.escape_markdown(names[g]),
                                   type="primary" if pair.adjudicated == g else "secondary",
                                   on_click=decide, args=(item.query_pk, pair.doc_pk, g), width="stretch")
                if pair.adjudicated is not None:
                    cols[-1].button("Clear", key=f"adj_clear_{item.query_pk}_{pair.doc_pk}",
                                    on_click=decide, args=(item.query_pk, pair.doc_pk, None))
