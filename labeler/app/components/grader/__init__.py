"""The grading widget of the Label page: the chunk list with its grades, focus and keys runs in the
browser (``grader.js``), so a key changes the grade on screen at once and no key is lost to a rerun.

Keys typed after Enter, before the next item is drawn, wait in the browser and are applied to
the next item in order (``keys.js``); a key that cannot apply is reported in the widget's line.

The widget sends its changes as an ordered stream of events (see ``labeler.labels.streams``) in
its state value ``outbox``: ``{"batches": [{"client", "item", "events": [...]}], "n": send count}``
holding every event the server has not acknowledged. The page applies them with
``labels.apply_grade_events`` and passes back, in ``data``, the acknowledged sequence numbers
(``acks``: ``[client, item, seq]``), events refused because the item went to someone else
(``refused``) and events acknowledged but not applied, with the reason (``rejected``).

Everything from logs (ids, titles, chunk text, rationales) is put in the page with
``textContent`` by the script, never as HTML.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

KEY = "grader"  # the widget's session_state key

_HERE = Path(__file__).parent
_mount = st.components.v2.component(
    "labeler_grader",
    css=(_HERE / "grader.css").read_text(encoding="utf-8"),
    # one module from two files split by job (drawing and streams; the keyboard): a module loaded
    # from a blob URL cannot import its neighbours
    js="\n".join((_HERE / name).read_text(encoding="utf-8") for name in ("grader.js", "keys.js")),
    isolate_styles=False,
)


def chunk_data(chunk: Any, *, added: bool, suggestion: Any = None) -> dict[str, Any]:
    """One chunk as the widget shows it (a ``labels.Chunk``; ``suggestion`` a ``judge.Suggestion``).

    Rank and score are there only when the item carries them (one retriever), the sources only when
    the lead turned ``show_sources`` on: blind labeling is decided by ``labels.get_item``."""
    sugg = None
    if suggestion is not None:
        sugg = {"grade": suggestion.grade, "rationale": suggestion.rationale,
                "source": f"{suggestion.judge} · {suggestion.rubric} · {suggestion.model} · run "
                          f"{suggestion.run_id}: a suggestion, not a label"}
    sources = [{"retriever": s.retriever, "rank": s.rank, "score": s.score} for s in chunk.sources]
    return {"doc_pk": chunk.doc_pk, "doc_id": chunk.doc_id, "title": chunk.title, "text": chunk.text,
            "rank": chunk.rank, "score": chunk.score, "position": chunk.position, "grade": chunk.grade,
            "added": added, "suggestion": sugg, "new": chunk.new,
            # several retrievers and show_sources on: who returned it (blind otherwise: empty)
            "sources": sources if chunk.rank is None else []}


def grader(data: dict[str, Any], on_outbox: Callable[[], None]) -> dict[str, Any] | None:
    """Mount the widget; return the outbox it last sent (None before it sent any)."""
    result = _mount(key=KEY, data=data, on_outbox_change=on_outbox)
    return outbox_of(result)


def outbox() -> dict[str, Any] | None:
    """The outbox the widget last sent, from session state (for callbacks of other widgets)."""
    return outbox_of(st.session_state.get(KEY))


def outbox_of(value: Any) -> dict[str, Any] | None:
    box = value.get("outbox") if isinstance(value, dict) else None
    return box if isinstance(box, dict) else None
