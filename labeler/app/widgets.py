"""Shared UI pieces. Text that came from logs is always shown as plain text, never markdown."""

from __future__ import annotations

from typing import Any

import streamlit as st


def plain(text: str | None, *, key: str | None = None) -> None:
    """Show untrusted text literally: no markdown, no HTML, no links, no images."""
    st.text(text if text is not None else "")


def stat_tiles(values: dict[str, Any], columns: int = 4) -> None:
    cols = st.columns(columns)
    for i, (label, value) in enumerate(values.items()):
        cols[i % columns].metric(label, value)


def show_error(error: Exception) -> None:
    """A LabelerError as one clear message (multi-line problem lists stay plain text)."""
    first, _, rest = str(error).partition("\n")
    st.error(first, icon=":material/error:")
    if rest:
        st.code(rest, language=None)
