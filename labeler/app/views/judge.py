"""Judge: run an LLM judge (estimate, progress, cancel), see how far it agrees with the annotators next
to how far they agree with each other, browse and tag its disagreements, compare runs, check its
stability and drift, and edit its rubric. All numbers come from ``labeler.agreement``."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from labeler import agreement, judge, llm
from labeler.app import auth, batches, charts, judge_rubric, state, widgets
from labeler.errors import LabelerError

# session_state keys of this page
PLAN = "jd_plan"  # the options the estimate was made for
LAST = "jd_last"  # the last run's summary (JudgeRun.to_dict())
RUNNING = "jd_running"  # set while a run is in progress: still set on the next run = interrupted
STABILITY = "jd_stability_result"
TAG_LABELS = {None: "not tagged", "judge_wrong": "judge wrong", "human_wrong": "human wrong",
              "rubric_ambiguous": "rubric ambiguous"}

db = state.get_db()
me = auth.me()
lead = auth.is_lead()
may_run = auth.may_run_llm()
settings = state.settings()


def _config(model: str | None = None) -> llm.LLMConfig:
    return state.llm_config(model)


@st.cache_data(max_entries=8, show_spinner="Reading the labels")
def _data(db_path: str, run_id: int, version: str) -> judge.ComparisonData:
    return judge.comparison_data(state.get_db(), run_id)


@st.cache_data(max_entries=16, show_spinner="Computing agreement")
def _agreement(db_path: str, run_id: int, version: str) -> agreement.Agreement:
    return agreement.run_agreement(state.get_db(), run_id, data=_data(db_path, run_id, version))


@st.cache_data(max_entries=8, show_spinner="Comparing runs")
def _comparison(db_path: str, a: int, b: int, version: str) -> agreement.Comparison:
    return agreement.compare_runs(state.get_db(), a, b)


@st.cache_data(max_entries=4, show_spinner="Reading the run history")
def _drift(db_path: str, kind: str, version: str) -> list[dict[str, Any]]:
    return agreement.drift(state.get_db(), kind=kind)


def _run_label(r: judge.JudgeRun) -> str:
    return f"#{r.id} · {r.judge} · {r.rubric} · {r.model} · {r.items} {r.on_set} · {r.status}"


def _ci(stat: agreement.Stat | None) -> str:
    return "–" if stat is None or stat.ci_low is None else f"{stat.ci_low:.3f} – {stat.ci_high:.3f}"


def _value(stat: agreement.Stat | None) -> str:
    return "–" if stat is None else widgets.number(stat.value)


def _note(stat: agreement.Stat | None, ceiling: agreement.Stat | None, has_ceiling: bool) -> str:
    """Why a cell shows –: the judge's reason, then the ceiling's (never the word None)."""
    parts = []
    if stat is not None and (stat.reason or stat.note):
        parts.append(f"judge: {stat.reason or stat.note}")
    if not has_ceiling:
        parts.append("ceiling: not computed between annotators")
    elif ceiling is not None and (ceiling.reason or ceiling.note):
        parts.append(f"ceiling: {ceiling.reason or ceiling.note}")
    return "; ".join(parts)


def _levels(a: agreement.Agreement) -> list[str]:
    return [f"{i} {name}" for i, name in enumerate(a.levels)]


version = judge.data_version(db)
runs = judge.list_runs(db)
labeled = [r for r in runs if r.on_set == "labeled"]
by_id = {r.id: r for r in runs}

st.title("Judge")
tab_agree, tab_browse, tab_compare, tab_run, tab_stable, tab_rubric = st.tabs(
    ["Agreement", "Disagreements", "Compare runs", "Run a judge", "Stability & drift", "Rubric & gate"])

# --- the agreement dashboard ------------------------------------------------------------------------

current: agreement.Agreement | None = None
with tab_agree:
    if not labeled:
        st.info("No calibration run yet: run a judge on the labeled items (tab Run a judge, or "
                "`labeler judge run --on labeled`).")
    else:
        run_id = st.selectbox("Run", [r.id for r in labeled], format_func=lambda i: _run_label(by_id[i]),
                              key="jd_run")
        try:
            current = _agreement(state.db_path(), run_id, version)
            verdict = judge.gate(db, run_id, agreement=current)
        except LabelerError as e:
            widgets.show_error(e)
            current = None
    if current is not None:
        (st.success if verdict.passed else st.warning)(
            ("Gate passed: this judge may pre-label unlabeled pairs as suggestions. " if verdict.passed else
             "Gate not passed: this judge may not pre-label. ") + widgets.escape_markdown("; ".join(verdict.reasons)))
        rows = []
        for name, stat in current.statistics.items():
            if name == "confusion_matrix":
                continue
            ceiling = current.human_human.get(name)
            rows.append({"statistic": agreement.display_name(name), "judge vs humans": _value(stat),
                         "95% CI": _ci(stat), "n": stat.n, "human-human (ceiling)": _value(ceiling),
                         "ceiling CI": _ci(ceiling), "ceiling n": widgets.number(ceiling.n if ceiling else None),
                         "note": _note(stat, ceiling, name in current.human_human)})
        chart = charts.agreement_whiskers(current, verdict.settings or judge.gate_settings(db))
        if chart is not None:
            st.altair_chart(chart, width="stretch", key="jd_whiskers")
        if not any(s.defined for name, s in current.human_human.items() if name != "confusion_matrix"):
            reason = next((s.reason for s in current.human_human.values() if s.reason), "no human-human pairs")
            st.caption(f"No human-human ceiling to compare with: {widgets.escape_markdown(reason)}.")
        st.dataframe(pd.DataFrame(rows), hide_index=True, key="jd_stats", height=35 * (len(rows) + 1) + 3)
        b = current.n_resamples
        unit = "queries (all chunks of a drawn query together)" if current.run.kind == "relevance" else "items"
        st.caption(f"95% percentile bootstrap CIs resampling {unit}, {b} resamples, seed {current.seed}; n counts "
                   f"pairs. Relevant = grade ≥ "
                   f"{current.threshold}. Human-human: every pair of annotators on the same item "
                   f"({current.human_items} overlapped items). Undefined statistics show – with the reason (note column); the chart leaves them "
                   "out, and bias (in grade steps). The red tick is the gate's bar. Left out: "
                   + (", ".join(f"{v} {k}" for k, v in current.excluded.items() if v) or "nothing") + ".")
        matrix = current.statistics["confusion_matrix"].value
        grades = _levels(current)
        cells = pd.DataFrame([{"human": grades[i], "judge": grades[j], "pairs": matrix[i][j]}
                              for i in range(len(grades)) for j in range(len(grades))])
        base = alt.Chart(cells, height=60 * len(grades)).encode(
            x=alt.X("judge:O", sort=grades, title="judge grade", axis=alt.Axis(labelAngle=0, orient="top")),
            y=alt.Y("human:O", sort=grades, title="human grade"))
        top = max(1, int(cells["pairs"].max()))
        heat = base.mark_rect().encode(color=alt.Color("pairs:Q", scale=alt.Scale(scheme="blues"), legend=None),
                                       tooltip=["human", "judge", "pairs"])
        text = base.mark_text(fontSize=14).encode(text="pairs:Q", color=alt.condition(alt.datum.pairs > top / 2,
                                                                           alt.value("white"), alt.value("black")))
        st.markdown("**Confusion matrix** (rows: consolidated human grade, columns: judge grade)")
        st.altair_chart(heat + text, width="stretch", key="jd_heatmap")
        section = current.retrievers
        if section and section["metrics"]:
            st.markdown(f"**Retrievers by judge vs by humans** (same {section['queries']} queries, k={section['k']})")
            st.dataframe(pd.DataFrame([
                {"retriever": r, "metric": spec, "humans": _value(by["human"]), "humans CI": _ci(by["human"]),
                 "judge": _value(by["judge"]), "judge CI": _ci(by["judge"]), "n": by["human"].n}
                for r, specs in section["metrics"].items() for spec, by in specs.items()]),
                hide_index=True, key="jd_retrievers")
            st.caption("Kendall's tau between the retrievers' order by humans and by the judge: "
                       + ", ".join(f"{spec} {widgets.number(t.value) if t.defined else 'undefined (' + t.reason + ')'}"
                                   for spec, t in section["kendall_tau"].items()))

# --- the disagreement browser ------------------------------------------------------------------------


@auth.guarded
def _tag(run: int, query_pk: int, doc_pk: int, key: str) -> None:
    try:
        judge.tag_item(db, run, query_pk, doc_pk, st.session_state.get(key), me, by=me)
    except LabelerError as e:
        st.session_state[state.LABEL_ERROR] = str(e)


with tab_browse:
    if error := st.session_state.pop(state.LABEL_ERROR, None):
        st.error(widgets.escape_markdown(error))
    if not lead:
        # every annotator's grade by name: a lead's view (annotators label blind)
        st.info("The disagreement browser shows every annotator's grades: it is for leads.", icon=":material/lock:")
    elif current is None:
        st.caption("Pick a calibration run on the Agreement tab.")
    else:
        grades = _levels(current)
        matrix = current.statistics["confusion_matrix"].value
        cells = sorted(((i, j) for i in range(len(grades)) for j in range(len(grades)) if matrix[i][j]),
                       key=lambda c: (c[0] == c[1], -matrix[c[0]][c[1]]))
        if not cells:
            st.caption("No judged pair has a human label.")
        else:
            cell = st.selectbox("Cell of the confusion matrix", cells, key="jd_cell",
                                format_func=lambda c: f"human {grades[c[0]]} → judge {grades[c[1]]} "
                                                      f"({matrix[c[0]][c[1]]} pairs)")
            counts = judge.tag_counts(db, current.run.id)
            st.caption("Tags in this run: " + ", ".join(f"{TAG_LABELS[t]} {n}" for t, n in counts.items()))
            size = 10
            total = matrix[cell[0]][cell[1]]
            page = st.number_input("Page", min_value=1, max_value=max(1, -(-total // size)), value=1, key="jd_page")
            _, items = judge.disagreements(db, current.run.id, human=cell[0], judge=cell[1], limit=size,
                                           offset=(int(page) - 1) * size,
                                           data=_data(state.db_path(), current.run.id, version))
            for d in items:
                with st.container(border=True, key=f"jd_item_{d.query_pk}_{d.doc_pk}"):
                    st.caption(widgets.escape_markdown(f"Query {d.query_id}"
                                                       + (f" · chunk {d.doc_id}" if d.doc_id else "")))
                    widgets.plain_block(d.question, size="1.1rem", weight=600, key=f"q_{d.query_pk}")
                    if d.doc_id:
                        widgets.chunk_card(d)
                    else:
                        st.markdown("**Production answer**")
                        widgets.plain_block(d.answer, key=f"a_{d.query_pk}")
                    humans = " · ".join(f"{name}: {grades[g]}" for name, g in sorted(d.human_grades.items()))
                    st.markdown(f"**Humans** (golden {widgets.escape_markdown(grades[d.human])}): "
                                + widgets.escape_markdown(humans))
                    score = f", score {d.judge_score:.2f}" if d.judge_score is not None and d.doc_id is None else ""
                    st.markdown(f"**Judge**: {widgets.escape_markdown(grades[d.judge])}{score}")
                    widgets.plain_block(d.rationale, muted=True, key=f"r_{d.query_pk}_{d.doc_pk}")
                    if isinstance(d.detail, list) and d.detail:
                        widgets.plain_block("\n".join(f"{'✓' if c.get('supported') else '✗'} {c.get('claim')}"
                                                      for c in d.detail), muted=True)
                    c1, c2 = st.columns([3, 1])
                    key = f"jd_tag_{current.run.id}_{d.query_pk}_{d.doc_pk}"
                    if key not in st.session_state:
                        st.session_state[key] = d.tag
                    c1.segmented_control("Tag", list(judge.TAGS), format_func=TAG_LABELS.get, key=key,
                                         on_change=_tag, args=(current.run.id, d.query_pk, d.doc_pk, key),
                                         label_visibility="collapsed")
                    if c2.button("Relabel", key=f"jd_relabel_{d.query_pk}_{d.doc_pk}",
                                 help="Open this query on the Label page"):
                        st.session_state[state.OPEN_QUERY] = d.query_pk
                        st.switch_page("views/label.py")

# --- compare two runs -------------------------------------------------------------------------------------

with tab_compare:
    if len(labeled) < 2:
        st.caption("Two calibration runs are needed (e.g. rubric r1 vs r2, or model A vs model B).")
    else:
        ids = [r.id for r in labeled]
        c1, c2 = st.columns(2)
        a_id = c1.selectbox("Run A", ids, index=1, format_func=lambda i: _run_label(by_id[i]), key="jd_cmp_a")
        b_id = c2.selectbox("Run B", ids, index=0, format_func=lambda i: _run_label(by_id[i]), key="jd_cmp_b")
        if a_id == b_id:
            st.caption("Pick two different runs.")
        else:
            try:
                cmp = _comparison(state.db_path(), a_id, b_id, version)
            except LabelerError as e:
                widgets.show_error(e)
                cmp = None
            if cmp is not None:
                st.dataframe(pd.DataFrame([
                    {"statistic": agreement.display_name(name), "A": _value(cmp.a.statistics[name]),
                     "A CI": _ci(cmp.a.statistics[name]), "B": _value(cmp.b.statistics[name]),
                     "B CI": _ci(cmp.b.statistics[name]), "B − A": _value(diff), "B − A CI": _ci(diff),
                     "note": diff.reason or ""}
                    for name, diff in cmp.difference.items()]), hide_index=True, key="jd_compare")
                between = cmp.between
                st.caption(f"B − A is paired: both runs on the same {cmp.common} human-labeled items, the same "
                           f"resamples. Run A vs run B on the {between['exact_agreement'].n} items both judged: exact "
                           f"agreement {widgets.number(between['exact_agreement'].value)}, Cohen's kappa "
                           f"{widgets.number(between['cohen_kappa'].value)}.")

# --- run a judge --------------------------------------------------------------------------------------------

with tab_run:
    with st.form("jd_form"):
        c1, c2, c3, c4 = st.columns(4)
        judge_name = c1.selectbox("Judge", sorted(judge.JUDGES), key="jd_judge",
                                  index=sorted(judge.JUDGES).index("relevance.v1") if "relevance.v1" in judge.JUDGES else 0,
                                  help="; ".join(f"{n}: {j.description}" for n, j in sorted(judge.JUDGES.items())))
        on = c2.radio("Items", list(judge.ON_SETS), key="jd_on", horizontal=True,
                      help="labeled: calibrate against the humans; unlabeled: pre-label as suggestions (needs a "
                           "passing gate)")
        limit = c3.number_input("Sample size (0 = all)", min_value=0, value=0, step=50, key="jd_limit")
        model = c4.text_input("Model", value=_config().model, key="jd_model")
        as_batch = st.checkbox("Run as batch", key="jd_batch",
                               help="Send through the Batch API: half price, results within 24 hours; this page "
                                    "collects them when opened")
        estimate_clicked = st.form_submit_button("Estimate cost", type="primary", key="jd_estimate")
    if estimate_clicked:
        st.session_state[PLAN] = {"judge": judge_name, "on": on, "limit": int(limit) or None,
                                  "model": model.strip() or None, "batch": as_batch}
    if st.session_state.get(RUNNING):
        st.warning("The last run was interrupted. What finished is stored; it can be resumed below.")
        st.session_state[RUNNING] = False
    plan = st.session_state.get(PLAN)
    if plan is not None:
        try:
            config = _config(plan["model"])
            dry = judge.run_judge(db, config, plan["judge"], on=plan["on"], limit=plan["limit"], dry_run=True)
        except LabelerError as e:
            widgets.show_error(e)
            dry = None
        if dry is not None:
            e = dry.estimate
            widgets.stat_tiles({"Items": dry.items, "Requests": f"{e.to_request} ({e.cached} cached)",
                                "Input tokens": f"~{e.input_tokens:,}",
                                **batches.cost_tiles(e)})
            st.caption(widgets.escape_markdown(
                f"{dry.judge} with rubric {dry.rubric} on model {e.model} at "
                f"{config.base_url or 'api.openai.com'}; API key {'set' if config.has_api_key else 'not set'}."))
            usable = config.has_api_key or bool(config.base_url)
            if not usable:
                st.info("Set OPENAI_API_KEY (and OPENAI_BASE_URL for another endpoint) in the environment or in "
                        ".streamlit/secrets.toml, then reload.")
            if not may_run:
                st.info("Judge runs cost money: leads run them, or annotators a lead allowed in Settings.",
                        icon=":material/lock:")
            as_batch = bool(plan.get("batch"))
            if as_batch and st.button(f"Submit {dry.items} items as a batch", key="jd_go_batch",
                                      disabled=not usable or not dry.items or not may_run):
                try:
                    st.session_state[LAST] = judge.run_judge(db, config, plan["judge"], on=plan["on"],
                                                             limit=plan["limit"], batch=True, by=me).to_dict()
                except LabelerError as err:
                    widgets.show_error(err)
            if not as_batch and st.button(f"Run on {dry.items} items", key="jd_go",
                                          disabled=not usable or not dry.items or not may_run):
                bar = st.progress(0.0, text="Starting")
                st.button("Cancel", key="jd_cancel", help="Stop sending; what finished is stored")
                st.session_state[RUNNING] = True

                def show(p: llm.Progress) -> None:
                    bar.progress(p.completed / max(p.total, 1), text=f"{p.completed} of {p.total}; {p.failed} failed")

                try:
                    st.session_state[LAST] = judge.run_judge(db, config, plan["judge"], on=plan["on"],
                                                             limit=plan["limit"], progress=show, by=me).to_dict()
                except LabelerError as err:
                    widgets.show_error(err)
                st.session_state[RUNNING] = False
                bar.empty()
    last = st.session_state.get(LAST)
    if last is not None:
        st.subheader(f"Run {last['id']} ({last['status']})")
        widgets.stat_tiles({"Done": last["done"], "From cache": last["cached"], "Failed": last["failed"],
                            "Not run": last["cancelled"],
                            "Cost": "unknown" if last["cost"] is None else f"${last['cost']:.4f}"})
        if last["failures"]:
            st.dataframe(pd.DataFrame(last["failures"], columns=["item", "reason"]), hide_index=True, key="jd_failures")
        if last["status"] == "submitted":
            st.caption(f"Submitted as {len(last['batches'])} batch(es); this page collects them when they finish.")
    batches.panel(db, "judge", _config(), by=me, may_run=may_run)
    unfinished = [r for r in runs if r.status in ("cancelled", "failed", "running", "interrupted")]
    if unfinished:
        resume_id = st.selectbox("Resume a run", [r.id for r in unfinished], key="jd_resume_pick",
                                 format_func=lambda i: _run_label(by_id[i]))
        if st.button("Resume", key="jd_resume", disabled=not may_run):
            try:
                st.session_state[LAST] = judge.resume_run(db, _config(), resume_id, by=me).to_dict()
                st.rerun()
            except LabelerError as err:
                widgets.show_error(err)
    if runs:
        st.markdown("**All runs**")
        st.dataframe(pd.DataFrame([{"run": r.id, "created": r.created_at, "judge": r.judge, "rubric": r.rubric,
                                    "model": r.model, "temperature": widgets.number(r.temperature), "items": r.on_set,
                                    "n": r.items, "failed": r.failed, "status": r.status,
                                    "cost": "unknown" if r.cost is None else f"${r.cost:.4f}"}
                                   for r in runs]), hide_index=True, key="jd_runs")

# --- stability and drift --------------------------------------------------------------------------------

with tab_stable:
    if current is None:
        st.caption("Pick a calibration run on the Agreement tab.")
    else:
        st.caption(f"Rerun a sample of run #{current.run.id} k times with the cache bypassed (a different seed "
                   "per rerun) and count how often the judge gives the same grade.")
        c1, c2 = st.columns(2)
        k = c1.number_input("Reruns (k)", min_value=2, max_value=10, value=3, key="jd_k")
        sample = c2.number_input("Items", min_value=1, max_value=500, value=20, key="jd_sample")
        if st.button("Check stability", key="jd_stability", disabled=not may_run):
            bar = st.progress(0.0, text="Starting")
            try:
                st.session_state[STABILITY] = judge.stability(
                    db, _config(), current.run.id, k=int(k), sample=int(sample), by=me,
                    progress=lambda p: bar.progress(p.completed / max(p.total, 1), text=f"{p.completed} of {p.total}"))
            except LabelerError as e:
                widgets.show_error(e)
            bar.empty()
        result = st.session_state.get(STABILITY)
        if result is not None and result.run_id == current.run.id:
            widgets.stat_tiles({"Items": result.n, "Identical over reruns": widgets.number(result.identical),
                                "Same as the run": widgets.number(result.same_as_run), "Failed": result.failed}, columns=4)
            st.dataframe(pd.DataFrame(result.items), hide_index=True, key="jd_stability_items")
        st.markdown("**Agreement over time** (successive calibration runs of this kind)")
        show_drift = st.toggle("Show drift", key="jd_drift_on",
                               help="Each run's kappa with the humans and with the run before it")
        trend = _drift(state.db_path(), current.run.kind, version) if show_drift else []
        if not show_drift:
            pass
        elif len(trend) < 2:
            st.caption("One run so far: drift needs two or more.")
        else:
            frame = pd.DataFrame(trend)
            long = frame.melt(id_vars=["run_id", "created_at"], value_vars=["kappa_vs_humans", "kappa_vs_previous"],
                              var_name="kappa", value_name="value").dropna()
            st.altair_chart(alt.Chart(long).mark_line(point=True).encode(
                x=alt.X("run_id:O", title="run"), y=alt.Y("value:Q", title="kappa"), color="kappa:N",
                tooltip=["run_id", "created_at", "kappa", "value"]), width="stretch", key="jd_drift_chart")
            # as text: the first run has no previous one, shown as – rather than None
            st.dataframe(frame.astype(object).apply(lambda col: col.map(lambda v: widgets.number(None if v is None or v != v else v))),
                         hide_index=True, key="jd_drift")

with tab_rubric:
    judge_rubric.rubric_tab(db, me, lead)
