"""The Metrics page's "Numbers for all traffic" section: every metric over all logged traffic from a
judge run over all of it, corrected by the human labels of a random, active, stratified or routed
sample (``labeler.estimate.report``), beside the human-only and the judge-only means. Kept apart from the
page's file so the section can be rendered (and tested) on its own."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from labeler import judge
from labeler.app import widgets
from labeler.errors import LabelerError
from labeler.estimate.report import all_traffic_report
from labeler.estimate.traffic import ALL_TRAFFIC_HINT


def _ci(low: float | None, high: float | None) -> str:
    return "–" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def render_all_traffic(db, retriever: str | None = None) -> None:
    """Render the section (the Metrics page calls it last)."""
    st.subheader("Numbers for all traffic")
    runs = [r for r in judge.list_runs(db, kind="relevance") if r.on_set == "all" and r.status != "failed"]
    if not runs:
        st.info("The numbers above describe the labeled queries only. To estimate them over all logged traffic, "
                f"judge every query (`{ALL_TRAFFIC_HINT}`, or Items: all on the Judge page); the human labels "
                "then correct the judge's bias.")
        return
    c1, c2 = st.columns([3, 2])
    run_id = c1.selectbox("Judge run over all traffic", [r.id for r in runs], key="at_run",
                          format_func=lambda i: next(f"#{r.id} · {r.model} · {r.items} items · {r.status}"
                                                     for r in runs if r.id == i))
    random_only = c2.checkbox("Use only labels drawn at random", key="at_random_only",
                              help="Labels taken in another queue order, opened by hand or imported are not a "
                                   "probability sample: the estimate refuses them unless left out")
    try:
        rep = all_traffic_report(db, run_id, retriever=retriever, random_only=random_only)
    except LabelerError as e:
        widgets.show_error(e)
        return
    how = {"active": "active inference: labels drawn with probabilities from the judge's uncertainty, weighted by "
                     "1/probability",
           "stratified": f"stratified PPI++: a random sample of labels within each of {len(rep.strata)} topics, "
                         "each topic weighted by its share of the traffic",
           "routed": "routed live queries weighted by 1/probability (the judge's value plus the weighted "
                     "human correction)"}.get(rep.design, "PPI++: a uniform random sample of labels")
    if rep.design == "stratified" and rep.drawn is not None:
        how = (f"routed live queries weighted by 1/probability within each of {len(rep.strata)} topics, each "
               "topic weighted by its share of the traffic")
    st.caption(f"Retriever **{widgets.escape_markdown(rep.retriever)}** · {rep.population:,} traffic queries judged "
               f"(run #{rep.judge_run}) · {rep.n_labeled} labeled by humans · {how} · 95% normal CIs · judge-only "
               "means are biased (shown for contrast)")
    if rep.drawn is not None:
        st.caption(widgets.escape_markdown(f"Labeled set {rep.drawn['text']}. Human-only = the plain mean of the "
                                           "labeled set (biased under routing); weighted = the same labels "
                                           "weighted by 1/probability, without the judge."))
    rows = []
    for spec, v in rep.metrics.items():
        h = v["human_only"]
        row = {"metric": spec, "estimate": v["estimate"], "95% CI": _ci(v["ci_low"], v["ci_high"]),
               "lambda": v["lambda"], "effective n": v["effective_n"], "human-only": h["mean"],
               "human-only CI": _ci(h["ci_low"], h["ci_high"])}
        if rep.drawn is not None:
            hw = v.get("human_weighted") or {}
            row.update({"human-only weighted": hw.get("mean"), "weighted CI": _ci(hw.get("ci_low"), hw.get("ci_high"))})
        rows.append({**row, "judge-only (biased)": v["judge_only"]["mean"]})
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="at_table")
    a, h = rep.agreement, rep.handed_out
    notes = []
    if a["pairs"]:
        kappa = "–" if a["kappa_relevant"] is None else f"{a['kappa_relevant']:.2f}"
        notes.append(f"judge vs humans on {a['pairs']} labeled chunks: {a['exact']:.0%} exact, kappa (relevant) {kappa}")
    if h["handed_out"]:
        notes.append(f"{h['handed_out']} handed out under this design: {h['skipped']} skipped "
                     f"({h['skipped_share']:.0%}), {h['discarded']} discarded ({h['discarded_share']:.0%}): "
                     "those are missing not at random")
    if notes:
        st.caption(" · ".join(notes))
    for note in rep.notes:
        st.caption(widgets.escape_markdown(note))
    more = [v for v in rep.more_labels.values() if v.get("more_needed") is not None]
    most = max(more, key=lambda v: v["more_needed"]) if more else None
    c1, c2 = st.columns(2)
    c1.metric("More labels needed for ±0.05 (all traffic)", "–" if most is None else f"{most['more_needed']:,}",
              help="From the estimate's variance: the judge's part over all traffic and the correction's over the "
                   "labels; the max over the metrics")
    c2.metric("Labels active selection saves over uniform", "–" if most is None or most["active_saves"] is None
              else f"{most['active_saves']:,}",
              help="At the current judge quality: labels drawn where the judge is least sure, weighted by "
                   "1/probability (labeler queue --order active)")
