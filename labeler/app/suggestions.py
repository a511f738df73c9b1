"""The judge's suggestion for a chunk as Streamlit widgets: "judge suggests N (rationale)" and an
accept button. A suggestion comes from a judge run that passed the calibration gate; it becomes the
annotator's label only when they accept it (stored with ``origin='suggestion'``) and golden only
when they submit the item.

The Label page shows suggestions inside its grading widget instead (``components.grader``: the
Accept button and the A key send an accept event through the grade stream); these helpers are for
pages that show a single chunk with Streamlit widgets::

    from labeler.app import suggestions
    suggestions.render_suggestion(db, pk, doc_pk, annotator)
"""

from __future__ import annotations

import streamlit as st

from labeler import judge
from labeler.app import auth, state, widgets
from labeler.errors import LabelerError


@auth.guarded
def accept(db, query_pk: int, doc_pk: int, annotator: str) -> int | None:
    """Callback: take the judge's grade as the annotator's; errors go to ``state.LABEL_ERROR``."""
    try:
        return judge.accept_suggestion(db, query_pk, doc_pk, annotator)
    except LabelerError as e:
        st.session_state[state.LABEL_ERROR] = str(e)
        return None


def render_suggestion(db, query_pk: int, doc_pk: int, annotator: str, *, current: int | None = None,
                      grade_names: list[str] | None = None) -> judge.Suggestion | None:
    """Show the judge's suggestion for the chunk (nothing when there is none) with an Accept button
    (key ``accept_{query_pk}_{doc_pk}``). ``current`` is the annotator's grade, to mark agreement.
    Returns the suggestion shown."""
    s = judge.suggestions_for(db, query_pk).get(doc_pk)  # a primary-key range read
    if s is None:
        return None
    names = grade_names or state.settings()["grade_names"]
    label = f"{s.grade} {names[s.grade]}" if 0 <= s.grade < len(names) else str(s.grade)
    with st.container(key=f"suggestion_{query_pk}_{doc_pk}"):
        c1, c2 = st.columns([5, 1])
        with c1:
            widgets.plain_block(f"Judge suggests {label}" + (f" ({s.rationale})" if s.rationale else ""),
                                size="0.9rem", muted=True, key=f"suggestion_text_{query_pk}_{doc_pk}")
            st.caption(widgets.escape_markdown(f"{s.judge} · {s.rubric} · {s.model} · run {s.run_id}")
                       + ": a suggestion, not a label")
        c2.button("Accept" if current != s.grade else "Accepted", key=f"accept_{query_pk}_{doc_pk}",
                  on_click=accept, args=(db, query_pk, doc_pk, annotator), disabled=current == s.grade,
                  help=widgets.escape_markdown(f"Grade this chunk {label}, as the judge suggests"), width="stretch")
    return s
