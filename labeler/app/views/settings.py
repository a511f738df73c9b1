"""Settings (lead): grade scale and threshold, overlap, queue order, guidelines, annotators and roles."""

import streamlit as st

import labeler
import labeler.labels as labels
from labeler.app import state, widgets
from labeler.errors import LabelerError

db = state.get_db()
me = st.session_state[state.ANNOTATOR]
current = state.settings()

st.title("Settings")

with st.form("settings_form"):
    st.subheader("Grades")
    names, helps = [], []
    for g, (name, desc) in enumerate(zip(current["grade_names"], current["grade_help"], strict=False)):
        c1, c2 = st.columns([1, 3])
        names.append(c1.text_input(f"Grade {g} name", value=name, key=f"set_grade_name_{g}"))
        helps.append(c2.text_input(f"Grade {g} definition", value=desc, key=f"set_grade_help_{g}"))
    threshold = st.number_input("Relevance threshold: a chunk is relevant when its grade is at least",
                                min_value=1, max_value=len(names) - 1, value=int(current["threshold"]),
                                key="set_threshold")
    st.subheader("Queue")
    order = st.selectbox("Order", list(labels.ORDERS), index=list(labels.ORDERS).index(current["queue_order"]),
                         key="set_order", help="random is seeded; lowest_score puts the retriever's weakest first")
    c1, c2, c3 = st.columns(3)
    fraction = c1.number_input("Share of items labeled by several annotators", 0.0, 1.0,
                               float(current["overlap_fraction"]), step=0.05, key="set_overlap")
    overlap_n = c2.number_input("Annotators on those items", 2, 10, int(current["overlap_annotators"]),
                                key="set_overlap_n")
    lease = c3.number_input("Lease minutes (an idle item returns to the queue)", 1, 240,
                            int(current["lease_minutes"]), key="set_lease")
    st.subheader("Guidelines (markdown)")
    guidelines = st.text_area("Shown to annotators on the Label page", value=current["guidelines"], height=200,
                              key="set_guidelines")
    saved = st.form_submit_button("Save settings", type="primary")

if saved:
    try:
        values = {"grade_names": [n.strip() or f"grade {i}" for i, n in enumerate(names)],
                  "grade_help": [h.strip() for h in helps], "threshold": int(threshold), "queue_order": order,
                  "overlap_fraction": float(fraction), "overlap_annotators": int(overlap_n),
                  "lease_minutes": int(lease), "guidelines": guidelines}
        for key, value in values.items():
            if value != current.get(key):
                labeler.set_setting(db, key, value)
        labels.sync_queue(db)
        st.success("Saved.")
    except LabelerError as e:
        widgets.show_error(e)

st.subheader("Annotators and roles")


def set_role(name: str) -> None:
    try:
        labels.add_annotator(db, name, st.session_state[f"role_{name}"])
    except LabelerError as e:
        st.session_state[state.LABEL_ERROR] = str(e)


if error := st.session_state.pop(state.LABEL_ERROR, None):
    st.error(widgets.escape_markdown(error))
for a in labels.list_annotators(db):
    c1, c2 = st.columns([2, 1])
    c1.write(widgets.escape_markdown(a.name) + (" (you)" if a.name == me else ""))
    c2.selectbox("Role", ["annotator", "lead"], index=["annotator", "lead"].index(a.role), key=f"role_{a.name}",
                 on_change=set_role, args=(a.name,), label_visibility="collapsed")
with st.form("add_annotator", clear_on_submit=True):
    c1, c2, c3 = st.columns([2, 1, 1])
    new_name = c1.text_input("Add an annotator", key="new_annotator")
    new_role = c2.selectbox("Role", ["annotator", "lead"], key="new_annotator_role")
    if c3.form_submit_button("Add") and new_name.strip():
        try:
            labels.add_annotator(db, new_name, new_role)
            st.rerun()
        except LabelerError as e:
            widgets.show_error(e)
