"""Metrics: the retrieval numbers of the labeled subset, live: tiles with CIs, the metric-vs-k curve,
the per-query histogram, the worst queries (each opens in the Label page), two retrievers compared
(with judged@k and a warning when unjudged chunks count as irrelevant), log vs synthetic, how many
more labels a tight CI needs, and the diagnosis with its thresholds. All numbers come from
``labeler.report``; the report reuses what it read only while nothing was committed to the database,
so a label submitted anywhere shows on the next rerun."""

from __future__ import annotations

import datetime as dt

import altair as alt
import pandas as pd
import streamlit as st

import labeler.labels as labels
from labeler import report as reports
from labeler.app import auth, state, topic_sections, widgets
from labeler.errors import LabelerError

FAMILIES = ["recall", "precision", "hit", "ndcg", "ndcg_exp", "mrr", "ap"]
KS = [1, 3, 5, 10, 20]
ALL = "all"

db = state.get_db()
st.title("Metrics")

# --- filters ---------------------------------------------------------------------------------------

known = reports.retrievers(db, reuse=True)
if not known:
    st.info("No labeled queries match yet: no retriever logged any rankings. Ingest logs on the Data page, "
            "label some queries on the Label page, and the numbers appear here.")
    st.stop()
try:
    default = reports.resolve_retriever(db, None, reuse=True)
except LabelerError:
    default = None  # several retrievers, none called production: the user picks one
c1, c2, c3, c4 = st.columns(4)
retriever = c1.selectbox("Retriever", known, key="m_retriever", index=None if default is None else known.index(default),
                         placeholder="Pick a retriever",
                         help="Default: the only retriever, else production; with several others, pick one")
origin = c2.selectbox("Origin", [ALL, *reports.ORIGINS], key="m_origin")
lead = auth.is_lead()
# one person's grades are theirs to see and a lead's: annotators get the consolidated labels only
annotator = c3.selectbox("Annotator", [ALL, *(a.name for a in labels.list_annotators(db))] if lead else [ALL],
                         key="m_annotator", disabled=not lead,
                         help="All = the consolidated golden labels; one person = only their submitted grades"
                         + ("" if lead else " (leads only)"))
if annotator != ALL and not lead:
    annotator = ALL
dates = c4.date_input("Submitted between", value=(), key="m_dates", format="YYYY-MM-DD")
c5, c6 = st.columns([3, 2])
families = c5.multiselect("Metrics", FAMILIES, default=list(reports.PAGE_FAMILIES), key="m_metrics")
ks = c6.multiselect("Cutoffs k", KS, default=list(reports.DEFAULT_KS), key="m_ks")

since = until = None
if isinstance(dates, tuple | list) and len(dates) >= 1:
    since = dates[0].isoformat()
    if len(dates) == 2:
        until = (dates[1] + dt.timedelta(days=1)).isoformat()  # the end day is included

if retriever is None:
    st.info(f"Several retrievers logged rankings ({', '.join(known)}) and none is called production: pick one "
            "above.")
    st.stop()
try:
    rep = reports.retrieval_report(db, families or ["recall"], ks=sorted(ks) or [5], retriever=retriever,
                                   origin=None if origin == ALL else origin,
                                   annotator=None if annotator == ALL else annotator,
                                   since=since, until=until, reuse=True)
except LabelerError as e:
    widgets.show_error(e)
    st.stop()

not_run = f" · {rep.n_not_run} labeled queries it never ran (left out)" if rep.n_not_run else ""
st.caption(f"Retriever **{widgets.escape_markdown(rep.retriever)}** · {rep.n_queries} labeled queries · "
           f"{rep.n_without_relevant} without a relevant chunk (left out of the means){not_run} · relevant = "
           f"grade ≥ {rep.threshold} · 95% bootstrap CIs ({rep.n_resamples} resamples, seed {rep.seed})")
if rep.n_queries == 0:
    st.info("No labeled queries match yet: submit some on the Label page (or import a golden set) and the "
            "numbers appear here.")
    st.stop()


def fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


# --- tiles -----------------------------------------------------------------------------------------

with st.container(key="m_tiles"):
    per_row = 5
    for start in range(0, len(rep.specs), per_row):
        cols = st.columns(per_row)
        for col, spec in zip(cols, rep.specs[start:start + per_row], strict=False):
            v = rep.metrics[spec]
            with col:
                st.metric(spec, fmt(v["mean"]), border=True,
                          help=f"mean over {v['n']} queries with a relevant chunk")
                st.caption(f"95% CI [{fmt(v['ci_low'])}, {fmt(v['ci_high'])}] · n = {v['n']}")
st.caption("Judged (share of the top k with any human label): " + " · ".join(
    f"{spec} {fmt(v['mean'], 2)}" for spec, v in rep.judged.items()))
for line in rep.judged_warnings():
    st.warning(widgets.escape_markdown(line), icon=":material/warning:")

# --- two retrievers --------------------------------------------------------------------------------

if len(known) >= 2:
    st.subheader("Compare retrievers")
    a_col, b_col = st.columns(2)
    cmp_a = a_col.selectbox("Retriever A", known, key="m_cmp_a", index=known.index(retriever))
    others = [r for r in known if r != cmp_a]
    cmp_b = b_col.selectbox("Retriever B", others, key="m_cmp_b", index=0)
    try:
        comparison = reports.compare_retrievers(
            db, cmp_a, cmp_b, families or ["recall"], ks=sorted(ks) or [5], origin=None if origin == ALL else origin,
            annotator=None if annotator == ALL else annotator, since=since, until=until, reuse=True)
    except LabelerError as e:
        widgets.show_error(e)
    else:
        st.caption(f"{comparison.n_queries} labeled queries both ran ({comparison.n_without_relevant} without a "
                   f"relevant chunk, left out) · difference = A − B with a 95% bootstrap CI "
                   f"({comparison.n_resamples} resamples, seed {comparison.seed}) · p = paired sign-flip test")
        st.dataframe(pd.DataFrame([
            {"metric": spec, f"A: {cmp_a}": v["a"], f"B: {cmp_b}": v["b"], "A − B": v["diff"], "CI low": v["ci_low"],
             "CI high": v["ci_high"], "p": v["p_value"], "n": v["n"]}
            for spec, v in comparison.metrics.items()]), hide_index=True, key="m_compare")
        st.caption("Judged (share of the top k with any human label): " + " · ".join(
            f"{widgets.escape_markdown(r)} {spec} {fmt(v, 2)}" for r, values in comparison.judged.items()
            for spec, v in values.items()))
        for line in comparison.warnings:
            st.warning(widgets.escape_markdown(line), icon=":material/warning:")

# --- curve and histogram ---------------------------------------------------------------------------

left, right = st.columns(2, gap="large")
with left:
    st.subheader("Metric vs k")
    curve = rep.curve(names=reports.curve_families(families))
    chart = alt.Chart(curve.dropna(subset=["mean"])).mark_line(point=True).encode(
        x=alt.X("k:Q", title="k"), y=alt.Y("mean:Q", title="mean", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("metric:N", title="metric"), tooltip=["metric", "k", alt.Tooltip("mean:Q", format=".3f"), "n"])
    st.altair_chart(chart, width="stretch")
with right:
    st.subheader("Per-query values")
    hist_spec = st.selectbox("Metric", rep.specs, key="m_hist_metric")
    st.altair_chart(alt.Chart(rep.histogram(hist_spec, bins=20)).mark_bar().encode(
        x=alt.X("start:Q", bin="binned", title=hist_spec), x2="end:Q", y=alt.Y("queries:Q", title="queries"),
        tooltip=[alt.Tooltip("start:Q", format=".2f"), alt.Tooltip("end:Q", format=".2f"), "queries"]),
        width="stretch")

# --- worst queries ---------------------------------------------------------------------------------

st.subheader(f"Worst queries by {hist_spec}")
# per-query values come from everyone's grades: a lead's view (blind labeling for annotators)
worst = reports.worst_queries(db, rep, hist_spec, limit=10) if lead else None
if worst is None:
    st.caption("The per-query list is for leads (annotators label blind).")
elif worst.empty:
    st.caption("No query with a relevant chunk.")
for row in [] if worst is None else worst.itertuples(index=False):
    with st.container(border=True, key=f"m_worst_{row.query_pk}"):
        a, b, c = st.columns([1, 8, 1], vertical_alignment="center")
        a.markdown(f"**{fmt(row.value)}**", help=hist_spec)
        with b:
            st.caption(f"{widgets.escape_markdown(row.query_id)} · {row.origin} · {row.n_relevant} relevant, "
                       f"{row.n_retrieved} retrieved")
            widgets.plain_block(row.question)
        if c.button("Open", key=f"m_open_{row.query_pk}", help="Open this query in the Label page"):
            st.session_state[state.OPEN_QUERY] = int(row.query_pk)
            st.switch_page("views/label.py")

# --- segments, more labels, diagnosis --------------------------------------------------------------

st.subheader("Log vs synthetic")
segments = rep.segments("origin")
seg_cols = st.columns(max(len(segments), 1))
for col, (name, seg) in zip(seg_cols, segments.items(), strict=False):
    with col:
        st.markdown(f"**{widgets.escape_markdown(name)}** · {seg['n_queries']} queries "
                    f"({seg['n_without_relevant']} without a relevant chunk)")
        st.dataframe(pd.DataFrame([{"metric": s, "mean": v["mean"], "ci_low": v["ci_low"], "ci_high": v["ci_high"],
                                    "n": v["n"]} for s, v in seg["metrics"].items()]),
                     hide_index=True, key=f"m_seg_{name}")
if "synthetic" not in segments:
    st.caption("No accepted synthetic question is labeled yet: only real traffic is measured.")

st.subheader("How many more labeled queries?")
needed = rep.more_needed(reports.HALF_WIDTH)
most = max((v["more_needed"] for v in needed.values() if v["more_needed"] is not None), default=None)
st.metric("More labeled queries for a CI half-width of ±0.05", "–" if most is None else f"{most:,}",
          help="max over the metrics of ceil((1.96 · sd / 0.05)² − n), sd = per-query standard deviation")
st.dataframe(pd.DataFrame([{"metric": s, "n": v["n"], "sd": v["sd"], "half-width now": v["half_width"],
                            "more needed": v["more_needed"]} for s, v in needed.items()]),
             hide_index=True, key="m_needed")

st.subheader("Diagnosis")
diagnosis = rep.diagnosis()
with st.container(border=True, key="m_diagnosis"):
    show = {"retrieval": st.error, "ranking": st.warning, "generation": st.warning, "healthy": st.success,
            "not_enough_data": st.info}[diagnosis.verdict]
    show(f"**{diagnosis.title}**. {diagnosis.advice}")
    t = diagnosis.thresholds
    st.dataframe(pd.DataFrame([
        {"check": f"recall@{t.k}", "value": diagnosis.values.get(f"recall@{t.k}"), "threshold": t.recall,
         "fails means": "retrieval: chunking, embeddings, hybrid search"},
        {"check": "mrr", "value": diagnosis.values.get("mrr"), "threshold": t.mrr, "fails means": "ranking: add a reranker"},
        {"check": f"ndcg@{t.k}", "value": diagnosis.values.get(f"ndcg@{t.k}"), "threshold": t.ndcg,
         "fails means": "ranking: add a reranker"},
        {"check": "faithfulness", "value": diagnosis.values.get("faithfulness"), "threshold": t.faithfulness,
         "fails means": "generation: prompt, grounding, model"},
    ]), hide_index=True, key="m_diag_table")
    st.caption(f"Checked in this order; a verdict needs at least {t.min_queries} queries with a relevant chunk "
               f"({diagnosis.n_queries} now). Faithfulness = share of production answers judged faithful "
               "(yes = 1, partly = ½) on the Label page.")

# --- topics, coverage and signals (labeler.app.topic_sections) -------------------------------------

topic_sections.topics_section(db, retriever=retriever)
topic_sections.signals_section(db, retriever=retriever)

from labeler.app.all_traffic import render_all_traffic  # noqa: E402 - the section comes last on the page

render_all_traffic(db, rep.retriever)
