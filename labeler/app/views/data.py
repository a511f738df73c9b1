"""Data: upload production logs or a corpus (the same ingest as the CLI) and see what the store holds."""


import streamlit as st

import labeler
from labeler import export as golden_export
from labeler import report as reports
from labeler.app import auth, sources_panel, state, topic_sections, uploads, widgets
from labeler.errors import LabelerError
from labeler.ingest import undo as ingest_undo

st.title("Data")
db = state.get_db()

s = state.reused(labeler.stats, db)
widgets.stat_tiles({
    "Queries": s["queries"],
    "Log occurrences": s["occurrences"],
    "Documents": s["documents"],
    "Retrievals": s["retrievals"],
    "Labeled queries": s["labeled_queries"],
    "Unlabeled queries": s["unlabeled_queries"],
    "Relevance labels": s["relevance_labels"],
    "Documents without text": s["documents_without_text"],
})
lead = auth.is_lead()
st.caption("By origin: " + ", ".join(f"{k} {v}" for k, v in s["queries_by_origin"].items())
           + (f" · database {widgets.escape_markdown(state.db_path())}" if lead else ""))
sources_panel.sources_panel(db)  # live sources for everyone; Sync now for leads
if not lead:
    st.info("Uploading logs and exporting the golden set are for leads.", icon=":material/lock:")
    st.stop()
me = auth.me()

st.subheader("Upload")
kind = st.radio("What is in the file?", ["Production logs", "Corpus (chunks with id and text)"],
                horizontal=True, key="upload_kind")
upload = st.file_uploader("JSONL, JSON, CSV/TSV or Parquet (optionally .gz); exports of Phoenix, OpenTelemetry, "
                          "LangSmith, LangChain, LlamaIndex, Ragas",
                          type=["jsonl", "ndjson", "json", "csv", "tsv", "parquet", "pq", "gz", "txt", "log"],
                          key="upload_file")
with st.expander("Options"):
    lenient = st.checkbox("Lenient: write the valid records and list the rejected ones", key="upload_lenient")
    redact = st.checkbox("Redact personal data and secrets before storing (emails, phone, card and id numbers, "
                         "IBANs, IP addresses, API keys become placeholders such as [EMAIL_1])",
                         value=labeler.redaction_enabled(db), key="upload_redact",
                         help="On by default; the default is the Settings switch")
    mapping_text = st.text_input("Field mapping (like --map), comma separated",
                                 placeholder="question=inputs.query, retrieved=outputs.documents, "
                                             "chunk.id=metadata.source",
                                 key="upload_map", disabled=kind != "Production logs")
    tool = st.selectbox("Written by", ["recognise per record", *labeler.ingest_tools()], key="upload_tool",
                        disabled=kind != "Production logs",
                        help="Force the reader of the tool that wrote the file (Phoenix, OTLP, LangSmith...)")

if st.button("Ingest", type="primary", disabled=upload is None, key="upload_go"):
    bar = st.progress(0.0, text="Reading")

    def progress(done: int, total: int) -> None:
        bar.progress(min(done / max(total, 1), 1.0), text=f"Reading {widgets.escape_markdown(upload.name)}")

    try:
        # in a process of its own: the server stays free for the annotators' pages meanwhile
        options = {"lenient": lenient, "redact": redact}
        if kind == "Production logs":
            options["mapping"] = [p for p in (x.strip() for x in mapping_text.split(",")) if p]
            options["tool"] = None if tool == "recognise per record" else tool
        result = uploads.ingest_upload(state.db_path(), upload.name, upload.getvalue(),
                                       kind="logs" if kind == "Production logs" else "corpus", by=me,
                                       options=options, progress=progress)
        st.session_state[state.INGEST_RESULT] = result
        state.warm_metrics(again=True)  # new queries: recompute the Metrics page's numbers in the background
    except labeler.LabelerError as e:
        st.session_state[state.INGEST_RESULT] = None
        bar.empty()
        widgets.show_error(e)
    else:
        st.rerun()

result = st.session_state.get(state.INGEST_RESULT)
if result:
    st.success(f"{widgets.escape_markdown(result['path'])}: {result['records']} records: {result['new']} new, "
               f"{result['merged']} merged, {result['unchanged']} unchanged, {result['rejected']} rejected",
               icon=":material/check:")
    for note in result.get("notes") or []:
        st.caption(widgets.escape_markdown(note))
    if result.get("redactions"):
        st.dataframe([{"type": kind, "values replaced": n} for kind, n in sorted(result["redactions"].items())],
                     hide_index=True, key="upload_redactions")
    if result["problems"]:
        st.warning(f"{len(result['problems'])} rejected record(s):")
        st.code("\n".join(result["problems"][:200]), language=None)

topic_sections.drift_panel(db)
# --- ingests and their undo (labeler.ingest.undo) ---------------------------------------------------

st.subheader("Ingests")
ingests = ingest_undo.list_ingests(db)
if not ingests:
    st.caption("No ingests yet.")
else:
    st.dataframe([{"id": i.id, "file": i.path, "kind": i.kind, "state": i.state, "time": i.created_at[:19],
                   "by": i.by or "", "queries": i.queries, "retrievals": i.retrievals, "documents": i.documents,
                   "skipped": i.skipped, "sha256": i.sha256[:12]} for i in reversed(ingests)],
                 hide_index=True, key="ingests_table")
undoable = {i.id: i for i in ingests if i.state in ("done", "undoing") and i.kind in ingest_undo.UNDOABLE}
if undo_message := st.session_state.get(state.UNDO_RESULT):
    st.success(widgets.escape_markdown(undo_message), icon=":material/undo:")
if undoable:
    st.caption("Undoing removes the queries, retrievals and documents that only that ingest brought; "
               "what another ingest logged too stays.")
    u1, u2 = st.columns([3, 1], vertical_alignment="bottom")
    undo_id = u1.selectbox("Undo an ingest", list(reversed(undoable)), key="undo_pick",
                           format_func=lambda i: f"{i}: {undoable[i].path} ({undoable[i].created_at[:16]})")
    if u2.button("Undo…", key="undo_ask", icon=":material/undo:"):
        st.session_state[state.UNDO_CONFIRM] = undo_id
        st.session_state[state.UNDO_RESULT] = None
    confirm = st.session_state.get(state.UNDO_CONFIRM)
    if confirm in undoable:
        with st.container(border=True):
            try:
                preview = ingest_undo.undo_ingest(db, confirm, by=me, dry_run=True)
            except LabelerError as e:
                widgets.show_error(e)
            else:
                st.markdown(f"**Undo ingest {confirm}** ({widgets.escape_markdown(undoable[confirm].path)}): "
                            f"{widgets.escape_markdown(preview.summary())}.")
                force = False
                if preview.labeled_queries:
                    names = ", ".join(preview.labeled_queries[:5])
                    more = len(preview.labeled_queries) - 5
                    st.warning(widgets.escape_markdown(
                        f"{len(preview.labeled_queries)} of these queries have labels ({names}"
                        f"{f' and {more} more' if more > 0 else ''}): the undo is refused unless you also "
                        "remove their labels."), icon=":material/warning:")
                    force = st.checkbox("Also remove these queries' labels", key="undo_force")
                c1, c2 = st.columns(2)
                if c1.button("Confirm undo", type="primary", key="undo_confirm"):
                    try:
                        done = ingest_undo.undo_ingest(db, confirm, force=force, by=me)
                    except LabelerError as e:
                        widgets.show_error(e)
                    else:
                        st.session_state[state.UNDO_CONFIRM] = None
                        st.session_state[state.UNDO_RESULT] = done.summary()
                        state.warm_metrics(again=True)
                        st.rerun()
                if c2.button("Cancel", key="undo_cancel"):
                    st.session_state[state.UNDO_CONFIRM] = None
                    st.rerun()

# --- export (labeler.export) ----------------------------------------------------------------------

st.subheader("Export")
st.caption("The golden set: consolidated human labels of submitted queries, with a manifest (sha256, "
           "filters, threshold, counts, metrics); the same database gives the same bytes.")
e1, e2, e3 = st.columns(3)
export_format = e1.selectbox("Format", list(golden_export.FORMATS), key="export_format",
                             format_func=lambda f: f"{f}: {golden_export.FORMATS[f].description}")
export_origin = e2.selectbox("Origin", ["all", "log", "synthetic", "import"], key="export_origin")
export_min = e3.number_input("Minimum annotators per query", min_value=1, max_value=20, value=1, step=1,
                             key="export_min_annotators")
export_unreviewed = st.checkbox("Include synthetic questions still pending review", key="export_unreviewed")
export_filters = {"origin": None if export_origin == "all" else export_origin, "min_annotators": int(export_min),
                  "include_unreviewed_synthetic": export_unreviewed}
export_counts = golden_export.export_counts(db, **export_filters, reuse=True)  # seconds at 100k queries
DEFAULT_RUNS = "default"
logged = reports.retrievers(db, reuse=True)
export_retriever = st.selectbox(
    "Retriever", [DEFAULT_RUNS, *logged], key="export_retriever",
    help="Whose ranking ragas and csv embed and trec writes: default = the only retriever, else production "
         "(trec: a run file per retriever)")
export_retriever = None if export_retriever == DEFAULT_RUNS else export_retriever
try:
    has_default = bool(logged) and bool(reports.resolve_retriever(db, None, reuse=True))
except LabelerError:
    has_default = False  # several retrievers, none called production
no_ranking = golden_export.FORMATS[export_format].runs == "one" and export_retriever is None and len(logged) > 1 \
    and not has_default
if no_ranking:
    st.info(f"The {export_format} format embeds one retriever's ranking and several logged rankings "
            f"({', '.join(map(widgets.escape_markdown, logged))}), none called production: pick one above.")
widgets.stat_tiles({
    "Queries to export": export_counts["queries"],
    "Judged pairs": export_counts["judged_pairs"],
    "Relevant pairs": export_counts["relevant_pairs"],
    "Without a relevant chunk": export_counts["queries_without_relevant"],
})
export_name = golden_export.archive_name(export_format)
export_db_path = state.db_path()


def _export_bytes() -> bytes:
    # runs on its own thread when the button is clicked, so it opens its own connection
    export_db = labeler.connect(export_db_path, migrate=False)
    try:
        return golden_export.export_archive(export_db, export_format, by=me, retriever=export_retriever,
                                            **export_filters)[1]
    finally:
        export_db.close()


st.download_button(f"Download {export_name}", data=_export_bytes, file_name=export_name,
                   mime="application/zip" if export_name.endswith(".zip") else "text/csv"
                   if export_name.endswith(".csv") else "application/jsonl",
                   disabled=export_counts["queries"] == 0 or no_ranking,
                   key="export_download", on_click="ignore",
                   icon=":material/download:")
