"""Synth: generate synthetic questions (estimate first, progress, cancel, run summary), the
rejected ones with their reasons, and the distribution shift report."""

from __future__ import annotations

from urllib.parse import urlsplit

import streamlit as st

from labeler import llm, synth
from labeler.app import auth, batches, state, widgets
from labeler.errors import LabelerError

# session_state keys of this page
OPTIONS = "synth_options"  # the SynthOptions, model and "run as batch" the estimate was made for
RESULT = "synth_result"  # the last run's summary (GenerateResult.to_dict())
RUNNING = "synth_running"  # set while a run is in progress: still set on the next run = interrupted
REPORT = "synth_report"

db = state.get_db()


def _host(base_url: str | None) -> str:
    """Where requests go, without any user:password a URL may carry."""
    if not base_url:
        return "api.openai.com"
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"


def _config(model: str | None) -> llm.LLMConfig:
    return state.llm_config(model)


st.title("Synthetic questions")
tab_generate, tab_rejections, tab_shift, tab_runs = st.tabs(["Generate", "Rejections", "Distribution shift", "Runs"])

with tab_generate:
    st.caption("Questions written by an LLM from your chunks, phrased like your logged questions. They wait on the "
               "Review page; only accepted ones are labeled. A rerun with the same options resumes from the cache.")
    with st.form("synth_form"):
        c1, c2, c3, c4 = st.columns(4)
        n = c1.number_input("Questions", min_value=1, max_value=10_000, value=20, step=10, key="sy_n")
        per_chunk = c2.number_input("Per chunk", min_value=1, max_value=20, value=2, key="sy_per_chunk")
        seed = c3.number_input("Seed", min_value=0, value=7, key="sy_seed")
        model = c4.text_input("Model", value=_config(None).model, key="sy_model")
        types = st.multiselect("Question types", list(synth.QUESTION_TYPES), default=list(synth.QUESTION_TYPES),
                               key="sy_types")
        c1, c2, c3 = st.columns(3)
        strategy = c1.selectbox("Seed chunks", list(synth.STRATEGIES), key="sy_strategy",
                                help="uncovered: chunks no labeled query has as relevant first; random; stratified "
                                     "by source (else title)")
        persona = c2.text_input("Persona", key="sy_persona", placeholder="a typical user of the product")
        language = c3.text_input("Language", key="sy_language", placeholder="detected from the corpus")
        c1, c2 = st.columns(2)
        multi_hop = c1.slider("Share of two-chunk (multi-hop) questions", 0.0, 1.0, 0.0, 0.05, key="sy_multi_hop")
        threshold = c2.slider("Near-duplicate threshold (TF-IDF cosine)", 0.5, 1.0, 0.85, 0.01, key="sy_dup")
        as_batch = st.checkbox("Run as batch", key="sy_batch",
                               help="Send through the Batch API: half price, results within 24 hours; this page "
                                    "collects them when opened")
        estimate_clicked = st.form_submit_button("Estimate cost", type="primary", key="sy_estimate")
    if estimate_clicked:
        try:
            st.session_state[OPTIONS] = (synth.SynthOptions(
                n=int(n), per_chunk=int(per_chunk), seed=int(seed), question_types=tuple(types),
                persona=persona.strip() or None, language=language.strip() or None, strategy=strategy,
                multi_hop=float(multi_hop), duplicate_threshold=float(threshold)), model.strip() or None, as_batch)
        except LabelerError as e:
            st.session_state.pop(OPTIONS, None)
            widgets.show_error(e)

    if st.session_state.get(RUNNING):
        st.warning("The last run was interrupted. What finished is stored; generate again with the same options to "
                   "resume (finished requests come from the cache and cost nothing).")
        st.session_state[RUNNING] = False

    chosen = st.session_state.get(OPTIONS)
    if chosen is not None:
        options, model_name, as_batch = chosen
        try:
            config = _config(model_name)
            index = widgets.corpus_index(db)
            plan = synth.plan_generation(db, config, options, index=index)
        except LabelerError as e:
            widgets.show_error(e)
            plan = None
        if plan is not None:
            e = plan.estimate
            st.subheader("Before you run")
            widgets.stat_tiles({
                "Requests": f"{e.to_request} ({e.cached} cached)",
                "Input tokens": f"~{e.input_tokens:,}",
                "Output tokens": f"~{e.output_tokens:,}",
                **batches.cost_tiles(e),
            })
            st.caption(widgets.escape_markdown(
                f"Model {e.model} at {_host(config.base_url)}; API key "
                f"{'set' if config.has_api_key else 'not set'}; {len(plan.seeds)} seed(s) "
                f"({sum(s.multi_hop for s in plan.seeds)} two-chunk), up to "
                f"{len(plan.seeds) * options.per_chunk} questions in {plan.language}; setting {plan.setting}."
                + ("" if e.cost_max is None else f" At most ${e.cost_max:.4f} if every answer hits max_tokens.")))
            for note in plan.notes + e.notes:
                st.caption(f"Note: {widgets.escape_markdown(note)}")
            usable = config.has_api_key or bool(config.base_url)
            if not usable:
                st.info("Set OPENAI_API_KEY (and OPENAI_BASE_URL for another endpoint) in the environment or in "
                        ".streamlit/secrets.toml, then reload, to generate.")
            may_run = auth.may_run_llm()
            if not may_run:
                st.info("Generating costs money: leads run it, or annotators a lead allowed in Settings.",
                        icon=":material/lock:")
            if as_batch and st.button(f"Submit {len(plan.seeds) * options.per_chunk} questions as a batch",
                                      key="sy_generate_batch", disabled=not usable or not may_run):
                try:
                    result = synth.generate(db, config, options, index=index, by=auth.me(), batch=True)
                    st.session_state[RESULT] = result.to_dict()
                except LabelerError as err:
                    widgets.show_error(err)
            if not as_batch and st.button(f"Generate {len(plan.seeds) * options.per_chunk} questions",
                                          key="sy_generate", disabled=not usable or not may_run):
                bar = st.progress(0.0, text="Starting")
                st.button("Cancel", key="sy_cancel", help="Stop sending; what finished is stored")
                st.session_state[RUNNING] = True

                def show(p: llm.Progress) -> None:
                    bar.progress(p.completed / max(p.total, 1),
                                 text=f"{p.completed} of {p.total} seed(s); {p.failed} failed")

                try:
                    result = synth.generate(db, config, options, progress=show, index=index, by=auth.me())
                    st.session_state[RESULT] = result.to_dict()
                except LabelerError as err:
                    widgets.show_error(err)
                st.session_state[RUNNING] = False
                bar.empty()

    result = st.session_state.get(RESULT)
    if result is not None:
        st.subheader(f"Run {result['run_id']} ({result['status']})")
        m = result["llm"]
        widgets.stat_tiles({"Stored (pending review)": result["stored"], "Rejected by checks": result["rejected"],
                            "Failed": len(m["failed"]), "From cache": m["cached"], "Requests": m["requests"],
                            "Already stored": result["already_stored"],
                            "Tokens": f"{m['prompt_tokens'] + m['completion_tokens']:,}",
                            "Cost": "unknown" if m["cost"] is None else f"${m['cost']:.4f}"})
        if m["failed"]:
            st.markdown("**Failed requests** (a rerun retries them)")
            st.dataframe(m["failed"], hide_index=True, key="sy_failed")
        if result["rejections"]:
            st.markdown("**Rejected by the checks in this run**")
            st.dataframe([{k: r[k] for k in ("reason", "detail", "question")} for r in result["rejections"]],
                         hide_index=True, key="sy_run_rejections")
        for note in m["notes"]:
            st.caption(f"Note: {widgets.escape_markdown(note)}")
        if result["status"] == "submitted":
            st.caption(f"Submitted as {len(result['batches'])} batch(es); this page collects them when they finish.")
    batches.panel(db, "synth", _config(None), by=auth.me(), may_run=auth.may_run_llm())

with tab_rejections:
    rows = synth.rejections(db, limit=1000)
    if not rows:
        st.caption("No generated question has failed a check.")
    else:
        st.caption(" · ".join(f"{reason}: {desc}" for reason, desc in synth.REJECTION_REASONS.items()))
        st.dataframe([{"run": r.run_id, "reason": r.reason, "detail": r.detail, "question": r.question,
                       "seed chunks": ", ".join(r.seed_doc_ids), "setting": r.setting, "at": r.created_at}
                      for r in rows], hide_index=True, key="sy_rejections")

with tab_shift:
    st.caption("Do synthetic questions read like the logged ones? A classifier that cannot tell them apart has "
               "AUC 0.5.")
    if st.button("Compute the report", key="sy_report"):
        try:
            st.session_state[REPORT] = synth.shift_report(db)
        except LabelerError as e:
            st.session_state.pop(REPORT, None)
            widgets.show_error(e)
    report = st.session_state.get(REPORT)
    if report is not None:
        c = report["classifier"]
        widgets.stat_tiles({"Logged questions": report["n"]["log"], "Synthetic questions": report["n"]["synthetic"],
                            "Classifier AUC": "–" if c["auc"] is None else f"{c['auc']:.3f}",
                            "95% CI": "–" if c["auc"] is None else f"{c['ci_low']:.3f} – {c['ci_high']:.3f}"})
        if c.get("note"):
            st.caption(c["note"])
        w = report["wording"]
        keys = [k for k in w["log"] if k not in ("top_first_words",)]
        st.markdown("**Length and wording**")
        st.dataframe([{"statistic": k, "logged": w["log"].get(k), "synthetic": w["synthetic"].get(k)} for k in keys],
                     hide_index=True, key="sy_wording")
        left, right = st.columns(2)
        left.markdown("**Terms that give synthetic questions away**")
        left.dataframe(report["terms"]["synthetic"], hide_index=True, key="sy_terms_synth")
        right.markdown("**Terms typical of logged questions**")
        right.dataframe(report["terms"]["log"], hide_index=True, key="sy_terms_log")
        r = report["retrieval"]
        st.markdown(f"**Retrieval metrics by origin** (retriever {widgets.escape_markdown(r['retriever'])}, "
                    "human golden labels)")
        st.dataframe([{"metric": spec,
                       **{f"{o} {part}": (r[o]["metrics"].get(spec) or {}).get(part)
                          for o in ("log", "synthetic") for part in ("mean", "n")}}
                      for spec in r["metrics"]], hide_index=True, key="sy_retrieval")
        for note in report["notes"]:
            st.caption(note)

with tab_runs:
    past = synth.runs(db)
    if not past:
        st.caption("No generation runs yet.")
    else:
        st.dataframe([{"run": r["run_id"], "status": r["status"], "setting": r["setting"],
                       "model": r["generator"].get("model"), "stored": r["summary"].get("stored"),
                       "rejected": r["summary"].get("rejected"), "failed": len((r["summary"].get("llm") or {}).get("failed", [])),
                       "error": r["summary"].get("error"), "started": r["created_at"]} for r in past],
                     hide_index=True, key="sy_runs")
