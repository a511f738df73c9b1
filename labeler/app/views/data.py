"""Data: upload production logs or a corpus (the same ingest as the CLI) and see what the store holds."""

import tempfile
from pathlib import Path

import streamlit as st

import labeler
from labeler.app import state, widgets

st.title("Data")
db = state.get_db()

s = labeler.stats(db)
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
st.caption("By origin: " + ", ".join(f"{k} {v}" for k, v in s["queries_by_origin"].items())
           + f" · database {state.db_path()}")

st.subheader("Upload")
kind = st.radio("What is in the file?", ["Production logs", "Corpus (chunks with id and text)"],
                horizontal=True, key="upload_kind")
upload = st.file_uploader("JSONL, JSON, CSV/TSV or Parquet (optionally .gz)",
                          type=["jsonl", "ndjson", "json", "csv", "tsv", "parquet", "pq", "gz"], key="upload_file")
with st.expander("Options"):
    lenient = st.checkbox("Lenient: write the valid records and list the rejected ones", key="upload_lenient")
    mapping_text = st.text_input("Field mapping (like --map), comma separated",
                                 placeholder="question=inputs.query, retrieved=outputs.documents",
                                 key="upload_map", disabled=kind != "Production logs")

if st.button("Ingest", type="primary", disabled=upload is None, key="upload_go"):
    bar = st.progress(0.0, text="Reading")

    def progress(done: int, total: int) -> None:
        bar.progress(min(done / max(total, 1), 1.0), text=f"Reading {upload.name}")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(upload.name).name
        path.write_bytes(upload.getvalue())
        try:
            if kind == "Production logs":
                pairs = [p for p in (x.strip() for x in mapping_text.split(",")) if p]
                result = labeler.ingest_logs(db, path, mapping=labeler.parse_mapping(pairs), lenient=lenient,
                                             progress=progress, name=upload.name)
            else:
                result = labeler.ingest_corpus(db, path, lenient=lenient, progress=progress, name=upload.name)
            st.session_state[state.INGEST_RESULT] = result.to_dict()
        except labeler.LabelerError as e:
            st.session_state[state.INGEST_RESULT] = None
            bar.empty()
            widgets.show_error(e)
        else:
            st.rerun()

result = st.session_state.get(state.INGEST_RESULT)
if result:
    st.success(f"{result['path']}: {result['records']} records: {result['new']} new, {result['merged']} merged, "
               f"{result['unchanged']} unchanged, {result['rejected']} rejected", icon=":material/check:")
    if result["problems"]:
        st.warning(f"{len(result['problems'])} rejected record(s):")
        st.code("\n".join(result["problems"][:200]), language=None)
