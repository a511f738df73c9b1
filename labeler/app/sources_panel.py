"""The Data page's live sources (``labeler.sources``): each source's last sync, lag, new queries and
last error, and, for leads, a "Sync now" button (the library checks the role again)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from labeler import sources as source_lib
from labeler.app import auth, state, widgets
from labeler.errors import LabelerError

ALL = "all sources"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "never synced"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@auth.guarded
def _sync_now(name: str) -> None:
    """Sync one source or all (the button's callback: it runs before the page, so the result shows
    on this very rerun)."""
    try:
        results = source_lib.sync_sources(state.get_db(), None if name == ALL else name, by=auth.me())
    except LabelerError as e:
        st.session_state[state.SYNC_RESULT] = {"error": str(e)}
        return
    st.session_state[state.SYNC_RESULT] = {"results": [r.to_dict() | {"summary": r.summary()} for r in results]}
    if any(r.new for r in results):
        state.warm_metrics(again=True)


def sources_panel(db: Any) -> None:
    """The list of sources for everyone; the Sync now button for leads."""
    rows = source_lib.source_status(db)
    lead = auth.is_lead()
    if not rows:
        if lead:
            st.caption("No live sources. Add one with `labeler source add phoenix|langfuse|langsmith NAME ...` "
                       "to sync its traces here (see the manual, Live sources).")
        return
    st.subheader("Live sources")
    st.dataframe([{"source": r["name"], "kind": r["kind"], "project": r["project"] or "",
                   "last sync": (r["last_sync_at"] or "")[:19].replace("T", " "),
                   "lag": _duration(r["lag_s"]), "new queries (last sync)": r["last_new"],
                   "new queries (all)": r["queries_new"], "every": _duration(r["every_s"]) if r["every_s"] else "",
                   "error": r["last_error"] or ""} for r in rows], hide_index=True, key="sources_table")
    if not lead:
        return
    c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
    name = c1.selectbox("Sync", [ALL, *(r["name"] for r in rows)], key="sources_pick")
    c2.button("Sync now", key="sources_sync", icon=":material/sync:", on_click=_sync_now, args=(name,))
    done = st.session_state.get(state.SYNC_RESULT)
    if not done:
        return
    if "error" in done:
        widgets.show_error(LabelerError(done["error"]))
        return
    for r in done["results"]:
        text = widgets.escape_markdown(r["summary"])
        if r["ok"]:
            st.success(text, icon=":material/sync:")
        else:
            st.error(text, icon=":material/sync_problem:")
