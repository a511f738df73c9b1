"""The Batch API panel of the Judge and Synth pages: the batches of submitted runs, and collecting the
finished ones when the page opens (at most every ``CHECK_EVERY_S`` seconds per session)."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from labeler import llm
from labeler.app import widgets
from labeler.errors import LabelerError

CHECK_EVERY_S = 30
CHECKED = "batches_checked_{owner}"  # session_state: when this session last asked the provider


def cost_tiles(e: llm.Estimate) -> dict[str, str]:
    """The estimate's direct and batch price as stat tiles: one tile each, since "$0.0028 (batch
    $0.0014)" in one tile is cut off at a quarter of a 1400 px page."""
    if e.cost is None:
        return {"Cost": "unknown"}
    tiles = {"Cost": f"${e.cost:.4f}"}
    if e.cost_batch is not None:
        tiles["Batch cost"] = f"${e.cost_batch:.4f}"
    return tiles


def panel(db, owner: str, config: llm.LLMConfig, *, by: str | None, may_run: bool) -> None:
    """List ``owner``'s batches; collect finished ones (and finish their runs) when allowed to."""
    batches = llm.batch.list_batches(db, owner=owner)
    if not batches:
        return
    key = CHECKED.format(owner=owner)
    usable = config.has_api_key or bool(config.base_url)
    if any(b.collected_at is None for b in batches) and may_run and usable \
            and time.monotonic() - st.session_state.get(key, 0.0) > CHECK_EVERY_S:
        st.session_state[key] = time.monotonic()
        try:
            result = llm.batch.collect(db, config, owner=owner, by=by)
        except LabelerError as e:
            widgets.show_error(e)
        else:
            if result.batches:
                st.success(f"Collected {len(result.batches)} batch(es): {result.ok} answers stored, "
                           f"{result.failed} failed"
                           + "".join(f"; finished run {run}" for _, run in result.finished_runs))
            for note in result.notes:
                st.caption(f"Note: {widgets.escape_markdown(note)}")
        batches = llm.batch.list_batches(db, owner=owner)
    ages = llm.batch.ages(batches)
    st.markdown("**Batches** (Batch API runs: results within 24 hours at half price)")
    st.dataframe(pd.DataFrame([{"run": b.run_id, "batch": b.batch_id or b.key, "state": b.state,
                                "requests": b.requests, "done": b.completed, "failed": b.failed,
                                "collected": "yes" if b.collected_at else "", "cost": b.cost, "age": ages[b.key]}
                               for b in reversed(batches)]), hide_index=True, key=f"{owner}_batches")
