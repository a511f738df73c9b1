"""The Judge page's rubric tab: a judge's rubric versions and their lineage (alignments, examples,
holdout looks), the rubric editor, and the calibration gate's settings. Saving either is for
leads; the library checks the role again where it writes."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from labeler import holdout, judge
from labeler.app import widgets
from labeler.errors import LabelerError


def rubric_tab(db: Any, me: str | None, lead: bool) -> None:
    known = sorted(judge.JUDGES)
    name = st.selectbox("Judge", known, key="jd_rubric_judge",
                        index=known.index("relevance.v1") if "relevance.v1" in known else 0)
    versions = judge.rubrics(db, name)
    latest = versions[-1]
    st.caption("Versions: " + widgets.escape_markdown(", ".join(f"{r.name} ({r.hash})" for r in versions))
               + ". Saving an edit makes a new "
               "version; runs use the latest unless told otherwise.")
    family = judge.lineage(db, name)
    if any(v["parent"] or v["kappa"] is not None or v["planted_rate"] is not None for v in family):
        st.markdown("**Versions and lineage** (`labeler judge align` registers a version only when it beats its "
                    "parent beyond chance; kappa on the alignment's validation queries, 95% CI)")
        st.dataframe(pd.DataFrame([{
            "version": v["version"], "parent": v["parent"] or "–", "origin": v["origin"],
            "examples": len(v["examples"]), "Cohen's kappa": widgets.number(v["kappa"]),
            "95% CI": "–" if not v["kappa_ci"] or v["kappa_ci"][0] is None else
            f"{widgets.number(v['kappa_ci'][0])} to {widgets.number(v['kappa_ci'][1])}", "n": v["kappa_n"] or "–",
            "holdout kappa": widgets.number(v["holdout_kappa"]), "planted-instruction rate": widgets.number(v["planted_rate"]),
            "created": v["created_at"] or "–"} for v in family]), hide_index=True, key=f"jd_lineage_{name}")
        for v in family:
            if v["examples"]:
                with st.expander(f"{v['version']}: the {len(v['examples'])} examples it carries"):
                    st.dataframe(pd.DataFrame([{"grade": e["grade"], "judge's grade before": e.get("judge_grade"),
                                                "question": e["question"], "chunk": e["text"]}
                                               for e in v["examples"]]), hide_index=True,
                                 key=f"jd_examples_{v['version']}")
        seen = holdout.looks(db)
        st.caption(f"The holdout has been looked at {seen['count']} time(s) in all (alignments and `labeler eval "
                   "--holdout`); each look is counted.")
    with st.form(f"jd_rubric_form_{name}"):
        text = st.text_area("Rubric", value=latest.text, height=200, key=f"jd_rubric_text_{name}")
        if st.form_submit_button("Save as a new version", key="jd_rubric_save", disabled=not lead,
                                 help=None if lead else "Only a lead may change a rubric"):
            try:
                saved = judge.save_rubric(db, name, text, author=me, by=me)
                st.success(widgets.escape_markdown(f"Saved as {saved.name} ({saved.hash})."
                                                   if saved.version != latest.version
                                                   else f"Unchanged: this is {saved.name}."))
            except LabelerError as e:
                widgets.show_error(e)
    gate_now = judge.gate_settings(db)
    st.markdown("**Calibration gate** (kappa collapsed at the relevance threshold)")
    with st.form("jd_gate_form"):
        c1, c2, c3 = st.columns(3)
        min_value = c1.number_input("Kappa at least", -1.0, 1.0, float(gate_now["min_value"]), 0.05, key="jd_g_value")
        min_low = c2.number_input("CI lower bound at least", -1.0, 1.0, float(gate_now["min_ci_low"]), 0.05,
                                  key="jd_g_low")
        min_pairs = c3.number_input("Pairs at least", 1, 1_000_000, int(gate_now["min_pairs"]), key="jd_g_pairs")
        overlap = st.checkbox("Or pass when its CI reaches the human-human kappa's CI", value=gate_now["human_overlap"],
                              key="jd_g_overlap")
        planted = st.number_input("Refuse when a stress test's planted-instruction rate has a CI above", 0.0, 1.0,
                                  float(gate_now["max_planted_rate"]), 0.01, key="jd_g_planted",
                                  help="labeler judge stress: the share of grade-0 chunks whose grade rose when the "
                                       "passage told the judge to grade it top")
        if st.form_submit_button("Save the gate", key="jd_g_save", disabled=not lead,
                                 help=None if lead else "Only a lead may change the gate"):
            try:
                judge.set_gate_settings(db, by=me, min_value=float(min_value), min_ci_low=float(min_low),
                                        min_pairs=int(min_pairs), human_overlap=bool(overlap),
                                        max_planted_rate=float(planted))
                st.success("Gate saved.")
            except LabelerError as e:
                widgets.show_error(e)
