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
from labeler.app import auth, charts, state, topic_sections, widgets
from labeler.errors import LabelerError
from labeler.labels import routing

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
    st.info(f"Several retrievers logged rankings ({', '.join(map(widgets.escape_markdown, known))}) and none is "
            "called production: pick one above.")
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
st.caption(widgets.escape_markdown(routing.how_drawn(db)))
if rep.n_queries == 0:
    st.info("No labeled queries match yet: submit some on the Label page (or import a golden set) and the "
            "numbers appear here.")
    st.stop()


def fmt(value: float | None, digits: int = 3) -> str:
    return "unknown" if value is None else f"{value:.{digits}f}"


def cell(value: float | int | None, digits: int = 3, missing: str = "–") -> str:
    """A table cell as text: a missing value reads as a dash (the caption says why), never None."""
    if value is None or value != value:
        return missing
    return f"{value:,}" if isinstance(value, int) else f"{value:.{digits}f}"


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
                st.caption(f"95% CI [{fmt(v['ci_low'])}, {fmt(v['ci_high'])}] · n = {v['n']}" if v["n"]
                           else "unknown: no query with a relevant chunk")
st.caption("Judged (share of the top k with any human label): " + " · ".join(
    f"{spec} {fmt(v['mean'], 2)}" for spec, v in rep.judged.items()))
if (weighted := rep.weighted) is not None:  # routing sampled the live traffic: the plain mean is biased
    with st.container(key="m_weighted"):
        st.markdown("**Weighted for how the labeled set was drawn**")
        st.caption(widgets.escape_markdown(f"Labeled set {weighted['text']}."))
        if weighted["error"]:
            st.info(widgets.escape_markdown(weighted["error"]))
        else:
            st.dataframe(pd.DataFrame([
                {"metric": s, "labeled mean (plain)": rep.metrics[s]["mean"],
                 "plain 95% CI": f"[{cell(rep.metrics[s]['ci_low'])}, {cell(rep.metrics[s]['ci_high'])}]",
                 "weighted by 1/p": v["mean"], "weighted 95% CI": f"[{cell(v['ci_low'])}, {cell(v['ci_high'])}]",
                 "n": v["n"]} for s, v in weighted["metrics"].items()]), hide_index=True, key="m_weighted_table")
            st.caption(f"Weighted: over the {weighted['population']:,} live queries the routing rules decided, each "
                       "labeled routed query counting 1 / its probability of being labeled (Hajek ratio, 95% normal "
                       "CI). The plain mean of the labeled set over-weights what the rules route always (negative "
                       "signals).")
        for line in weighted["notes"]:
            st.caption(widgets.escape_markdown(line))
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
            for spec, v in comparison.metrics.items() if v["n"]]), hide_index=True, key="m_compare")
        if empty := [spec for spec, v in comparison.metrics.items() if not v["n"]]:
            st.caption(f"Not compared (no query both ran has a relevant chunk): {', '.join(empty)}")
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
    st.altair_chart(charts.metric_curve(curve), width="stretch", key="m_curve")
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
else:
    tie = reports.worst_ties(rep, hist_spec, worst)
    st.caption("Lowest first; equal values: the one whose first relevant chunk sits deepest, then the one missing "
               "most relevant chunks from the top k." + (f" **{tie}** (the rest tie with the last one shown)."
                                                         if tie else ""))
for row in [] if worst is None else worst.itertuples(index=False):
    with st.container(border=True, key=f"m_worst_{row.query_pk}"):
        a, b, c = st.columns([1, 8, 1], vertical_alignment="center")
        a.markdown(f"**{fmt(row.value)}**", help=hist_spec)
        with b:
            first = ("no relevant chunk retrieved" if row.first_relevant_rank is None
                     else f"first relevant at rank {row.first_relevant_rank}")
            st.caption(f"{widgets.escape_markdown(row.query_id)} · {row.origin} · {row.n_relevant} relevant, "
                       f"{row.n_retrieved} retrieved · {first} · {row.missing_relevant} relevant missing from the "
                       f"top {row.k}")
            widgets.plain_block(row.question)
        if c.button("Open", key=f"m_open_{row.query_pk}", help="Open this query in the Label page"):
            st.session_state[state.OPEN_QUERY] = int(row.query_pk)
            st.switch_page("views/label.py")

# --- segments, more labels, diagnosis --------------------------------------------------------------

segments = rep.segments("origin")
if len(segments) > 1:  # one segment would only repeat the tiles
    st.subheader("By origin")
    seg_cols = st.columns(len(segments))
    for col, (name, seg) in zip(seg_cols, segments.items(), strict=True):
        with col:
            st.markdown(f"**{widgets.escape_markdown(name)}** · {seg['n_queries']} queries "
                        f"({seg['n_without_relevant']} without a relevant chunk)")
            st.dataframe(pd.DataFrame([{"metric": s, "mean": cell(v["mean"]), "95% CI": (
                f"[{cell(v['ci_low'])}, {cell(v['ci_high'])}]" if v["n"] else "–"), "n": v["n"]}
                for s, v in seg["metrics"].items()]), hide_index=True, key=f"m_seg_{name}")
    st.caption("– = no query of that origin has a relevant chunk.")
elif segments:
    st.caption(f"Every labeled query here has origin {next(iter(segments))}"
               + ("; no accepted synthetic question is labeled yet, so only real traffic is measured."
                  if "synthetic" not in segments else "."))

st.subheader("How many more labeled queries?")
needed = rep.more_needed(reports.HALF_WIDTH)
most = max((v["more_needed"] for v in needed.values() if v["more_needed"] is not None), default=None)
st.metric("More labeled queries for a CI half-width of ±0.05", "–" if most is None else f"{most:,}",
          help="max over the metrics of ceil((1.96 · sd / 0.05)² − n), sd = per-query standard deviation")
st.dataframe(pd.DataFrame([{"metric": s, "n": v["n"], "sd": cell(v["sd"]), "half-width now": cell(v["half_width"]),
                            "more needed": cell(v["more_needed"])} for s, v in needed.items()]),
             hide_index=True, key="m_needed")
if any(v["sd"] is None for v in needed.values()):
    st.caption("– = fewer than two queries with a relevant chunk: no spread to extrapolate from.")

st.subheader("Diagnosis")
diagnosis = rep.diagnosis()
with st.container(border=True, key="m_diagnosis"):
    show = {"retrieval": st.error, "ranking": st.warning, "generation": st.warning, "healthy": st.success,
            "undecided": st.info, "not_enough_data": st.info}[diagnosis.verdict]
    show(f"**{diagnosis.title}**. {diagnosis.advice}")
    t = diagnosis.thresholds
    reads = {"passes": "passes", "fails": "fails", "undecided": "can't tell yet", "unknown": "unknown"}
    st.dataframe(pd.DataFrame([
        {"check": c.name, "value [95% CI]": c.shown(), "threshold": c.threshold, "reads": reads[c.reading],
         "more to tell": c.need_text().removeprefix("need ") if c.reading == "undecided" else "",
         "fails means": c.fails_means} for c in diagnosis.checks]), hide_index=True, key="m_diag_table")
    st.caption(f"Checked in this order. A check passes or fails only when its whole 95% CI is on one side of the "
               f"threshold; else the verdict waits for more labels (about (1.96 · sd / distance to the threshold)² "
               f"values in all, sd = the per-query standard deviation). A verdict also needs at least "
               f"{t.min_queries} queries with a relevant chunk ({diagnosis.n_queries} now). Faithfulness = share of "
               "production answers judged faithful (yes = 1, partly = ½) on the Label page.")

# --- topics, coverage and signals (labeler.app.topic_sections) -------------------------------------

topic_sections.topics_section(db, retriever=retriever)
topic_sections.signals_section(db, retriever=retriever)

from labeler.app.all_traffic import render_all_traffic  # noqa: E402 - the section comes last on the page

render_all_traffic(db, rep.retriever)
