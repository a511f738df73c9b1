"""Sections the Metrics and Data pages show: topics and coverage, metrics by signal, drift of the
latest ingest. Each is one function of its own (the pages call them), with numbers from
``labeler.topics`` and ``labeler.signals`` only."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from labeler import topics as topic_lib
from labeler.app import auth, state, widgets
from labeler.errors import LabelerError
from labeler.report import signals as signal_lib


def _embedding_config() -> Any:
    try:
        config = state.llm_config()
    except LabelerError:
        return None
    return config if config.embedding_model else None


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1%}"


def _build_button(db: Any, label: str) -> None:
    if not auth.is_lead():
        return
    if st.button(label, key="m_topics_build", help="Cluster the logged questions into topics (TF-IDF + k-means, "
                 "or the embeddings model when one is configured)"):
        with st.spinner("Clustering the logged questions"):
            try:
                topic_lib.build_topics(db, config=_embedding_config(), by=auth.me())
            except LabelerError as e:
                widgets.show_error(e)
                return
        st.rerun()


def topics_section(db: Any, *, retriever: str | None) -> None:
    """Topics and coverage: per topic the traffic share, labeled questions, share of the golden
    set and the metrics with CIs; the traffic no labeled question covers."""
    st.subheader("Topics and coverage")
    try:
        report = topic_lib.coverage(db, retriever=retriever, config=_embedding_config())
    except topic_lib.TopicsError:
        st.info("No topics yet: a lead builds them here or with `labeler topics build`.")
        _build_button(db, "Build topics")
        return
    except LabelerError as e:
        widgets.show_error(e)
        return
    model = report["model"]
    st.caption(f"{model['k']} topics ({model['method']}, seed {model['seed']}, built {model['created_at'][:16]}) · "
               f"{report['logged_queries']:,} logged questions, {report['occurrences']:,} occurrences · "
               f"{report['labeled']} labeled · metrics need 5 labeled queries with a relevant chunk per topic")
    st.metric("Traffic not covered by any labeled question", _pct(report["uncovered_share"]),
              help="Share of logged occurrences in topics without a single labeled question")
    rows = []
    for t in report["topics"]:
        row = {"topic": t["topic"], "label": t["label"], "traffic share": t["traffic_share"],
               "labeled": t["labeled"], "golden share": t["golden_share"], "medoid question": t["medoid"] or ""}
        for spec in report["specs"]:
            v = (t["metrics"] or {}).get(spec) or {}
            row[spec] = v.get("mean")
            row[f"{spec} CI"] = "" if v.get("mean") is None else f"[{v['ci_low']:.2f}, {v['ci_high']:.2f}]"
        rows.append(row)
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="m_coverage",
                 column_config={"traffic share": st.column_config.NumberColumn(format="percent"),
                                "golden share": st.column_config.NumberColumn(format="percent")})
    if report["note"]:
        st.caption(widgets.escape_markdown(report["note"]))
    st.caption("A queue order that fills topics in proportion to traffic is not built yet.")
    _build_button(db, "Rebuild topics")


def signals_section(db: Any, *, retriever: str | None) -> None:
    """Metrics of unhappy questions (thumbs down, low rating, escalation, retry, error) vs the
    other labeled ones, with CIs."""
    st.subheader("By signal")
    # counted first: without any signal the per-group bootstrap (seconds at 100k queries, again
    # after every label) would only be thrown away
    if not signal_lib.signal_counts(db)["queries_with_signals"]:
        st.caption("No logged question carries a signal (thumbs down, rating, feedback, escalation, retry, "
                   "error): map one at ingest with --map signal.negative=PATH.")
        return
    try:
        result = signal_lib.signal_metrics(db, retriever=retriever)
    except LabelerError as e:
        widgets.show_error(e)
        return
    counts = result["counts"]
    st.caption(f"{counts['queries_with_signals']} questions carry a signal, {counts['unhappy']} unhappy "
               f"(negative {counts['negative']}, escalated {counts['escalated']}, retried {counts['retried']}, "
               f"error {counts['error']}, rated {counts['rating']}) · metrics need 5 measured queries per group")
    rows = []
    for group, g in result["groups"].items():
        for spec in result["specs"]:
            v = (g["metrics"] or {}).get(spec) or {}
            rows.append({"group": group, "metric": spec, "mean": v.get("mean"), "ci_low": v.get("ci_low"),
                         "ci_high": v.get("ci_high"), "n": v.get("n", g["n_measured"])})
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="m_signals")


@st.cache_data(max_entries=8, show_spinner="Comparing the latest ingest with the topics")
def _drift(db_path: str, ingest: int, model_id: int) -> dict[str, Any]:
    # the result depends only on the ingest and the topic model (both immutable once written)
    import labeler

    database = labeler.connect(db_path, migrate=False)
    try:
        return topic_lib.drift(database, ingest, config=_embedding_config())
    finally:
        database.close()


def drift_panel(db: Any) -> None:
    """Drift of the latest logs ingest against the traffic before it (Data page)."""
    st.subheader("Drift of the latest ingest")
    ingest = topic_lib.latest_ingest(db)
    if ingest is None:
        st.caption("No logs ingested yet.")
        return
    try:
        model = topic_lib.current_model(db, config=_embedding_config())
        report = _drift(state.db_path(), ingest, model.id)
    except topic_lib.TopicsError as e:
        st.caption(widgets.escape_markdown(str(e)))
        return
    except LabelerError as e:
        widgets.show_error(e)
        return
    st.caption(f"Ingest {ingest}: {report['questions']} questions against the topics of model {report['model']} "
               f"· far from every topic: {_pct(report['far_share'])} · grew = 95% CI above the earlier share and "
               f"at least {report['growth_ratio']:g}x it")
    grew = [t for t in report["topics"] if t["grew"]]
    with st.container(key="d_drift"):
        if not grew and not report["new_topics"]:
            st.success("No drift: no topic grew beyond its share and no new topic.", icon=":material/check:")
        rows = [{"kind": "grew", "topic": t["label"], "before": t["baseline_share"], "now": t["new_share"],
                 "example": (t["examples"] or [""])[0]} for t in grew]
        rows += [{"kind": "new", "topic": t["label"], "before": 0.0, "now": t["share"],
                  "example": (t["examples"] or [""])[0]} for t in report["new_topics"]]
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True, key="d_drift_table",
                         column_config={"before": st.column_config.NumberColumn(format="percent"),
                                        "now": st.column_config.NumberColumn(format="percent")})
