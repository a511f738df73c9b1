"""Shared UI pieces. Text that came from logs or from users (questions, ids, titles, chunk texts,
answers, names, file names, model and rubric names, LLM output) is never interpreted: blocks of it
are escaped HTML in ``st.html`` (``plain_block``, ``chunk_card``), and where it has to sit inside
markdown (captions, button labels, alerts, toasts, progress texts) it goes through
``escape_markdown`` first. No image, link, HTML tag, directive or formula from a log ever renders."""

from __future__ import annotations

import html
import re
from typing import Any

import streamlit as st

import labeler.labels as labels
from labeler import search as corpus_search
from labeler.app import state
from labeler.db import Abandoned, abandon_when

# every ASCII punctuation character: CommonMark lets each be backslash-escaped and then reads it as a
# literal character, so escaping them all leaves no syntax at all (links, images, HTML, emphasis,
# Streamlit's :color[...] and :material/...: directives, $math$)
_MD_SPECIAL = re.compile(r"([!-/:-@\[-`{-~])")
# remark-gfm links bare URLs and e-mail addresses in the text *after* escapes are resolved, so the
# escapes cannot stop it: an invisible WORD JOINER after "http(s)", "www" and "@" does
_AUTOLINK = re.compile(r"(https?(?=://)|www(?=\.)|@)", re.IGNORECASE)
WORD_JOINER = "\u2060"


def escape_markdown(text: object) -> str:
    """``text`` as literal characters inside any Streamlit markdown (st.caption, st.markdown, alerts,
    toasts, button and expander labels, radio options, progress texts): every ASCII punctuation
    character is backslash-escaped, so ``![x](http://host/p)``, ``<img src=...>``, ``:red[x]``,
    ``:material/x:`` and ``$x$`` show as typed, and a word joiner (U+2060, invisible) after
    ``http``, ``www`` and ``@`` keeps ``http://host``, ``www.host`` and ``a@b.c`` from becoming links."""
    text = _AUTOLINK.sub(lambda m: m.group(0) + WORD_JOINER, "" if text is None else str(text))
    return _MD_SPECIAL.sub(r"\\\1", text)


def plain_block(text: str | None, *, size: str = "1rem", weight: int = 400, key: str | None = None,
                muted: bool = False) -> None:
    """Untrusted text, literally: HTML-escaped, white space kept, no markdown, links or images."""
    color = "color: rgba(49, 51, 63, 0.7);" if muted else ""
    st.html(f'<div class="lb-plain" data-key="{html.escape(key or "")}" style="white-space: pre-wrap; '
            f'overflow-wrap: anywhere; font-size: {size}; font-weight: {weight}; line-height: 1.45; {color}">'
            f"{html.escape(text or '')}</div>")


def chunk_card(chunk: Any, *, focused: bool = False, note: str | None = None) -> None:
    """Rank, score, id and title on one line, then the full text (plain)."""
    parts = []
    if getattr(chunk, "rank", None) is not None:
        parts.append(f"#{chunk.rank}")
    if getattr(chunk, "score", None) is not None:
        parts.append(f"score {chunk.score:.4g}")
    parts.append(chunk.doc_id)
    if chunk.title:
        parts.append(chunk.title)
    if note:
        parts.append(f"({note})")
    marker = "▶ " if focused else ""
    border = "border-left: 4px solid #3b5bdb; padding-left: 8px;" if focused else "padding-left: 12px;"
    st.html(f'<div class="lb-chunk{" lb-focused" if focused else ""}" style="{border}">'
            f'<div style="font-size: 0.85rem; color: rgba(49, 51, 63, 0.75); margin-bottom: 4px;">'
            f"{html.escape(marker + ' · '.join(parts))}</div>"
            f'<div class="lb-text" style="white-space: pre-wrap; overflow-wrap: anywhere; line-height: 1.45;">'
            f"{html.escape(chunk.text if chunk.text is not None else '(no text: ingest a corpus file with this id)')}"
            "</div></div>")


def number(value: Any) -> str:
    """A figure as the pages show it: a float to 3 decimals, None as a dash."""
    return "–" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def stat_tiles(values: dict[str, Any], columns: int = 4) -> None:
    cols = st.columns(columns)
    for i, (label, value) in enumerate(values.items()):
        cols[i % columns].metric(label, value)


def show_error(error: Exception) -> None:
    """A LabelerError: the first line as the error, the problem list as a plain code block."""
    first, _, rest = str(error).partition("\n")
    st.error(escape_markdown(first), icon=":material/error:")
    if rest:
        st.code(rest, language=None)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@st.cache_data(ttl=10, show_spinner=False)
def _team_progress(db_path: str) -> Any:
    # the team figures scan every label (tens of ms at 100k): refreshed every 10 s, not every click
    return labels.progress(state.get_db(), with_grades=False)


_OVERLAP_HELP = ("Items and labels are counted apart: with overlap, one item is labeled by several annotators, "
                 "so it takes several labels and counts as done only when all of them finished it.")


def progress_panel(db: Any, annotator: str) -> None:
    """Mine (live) and the team's progress (refreshed every 10 s): items done (items), labels
    submitted and still needed (labels; the overlap between them explained), median time, ETA."""
    team = _team_progress(state.db_path())
    mine = labels.annotator_counts(db, annotator)
    role = labels.get_role(db, annotator)
    st.markdown(f"**{escape_markdown(annotator)}**" + (f" · {role}" if role else ""))
    c1, c2 = st.columns(2)
    c1.metric("My labels", mine["submitted"], help="items I submitted")
    c2.metric("Team labels", max(team.submitted, mine["submitted"]),
              help="labels submitted by everyone: an item labeled by two annotators counts twice. " + _OVERLAP_HELP)
    c1.metric("Labels to go", team.items_left,
              help=f"labels, not items: the {team.items_open:,} unfinished items still need this many labels. "
                   + _OVERLAP_HELP)
    c2.metric("Median / item", _duration(team.median_seconds))
    now = team.labeling_now
    who = (f"{now} annotator{'s' if now != 1 else ''} labeling in the app in the last {team.recent_minutes:.0f} min"
           if now else f"nobody labeled in the app in the last {team.recent_minutes:.0f} min")
    st.caption(f"ETA {_duration(team.eta_seconds)} with {who}; I skipped {mine['skipped']}, flagged "
               f"{mine['flagged']}, discarded {mine['discarded']}",
               help="ETA = labels still needed × median time per item ÷ annotators labeling now (imports do not "
                    "count)")
    if team.items:
        st.progress(min(team.items_done / team.items, 1.0), text=f"{team.items_done} of {team.items} items done")


@st.cache_resource(max_entries=4, show_spinner="Indexing the corpus")
def _index(db_path: str, version: tuple[int, int, int]) -> corpus_search.CorpusIndex:
    return corpus_search.CorpusIndex(state.get_db())


def corpus_index(db: Any) -> corpus_search.CorpusIndex:
    """The corpus TF-IDF index, cached until the documents change."""
    return _index(state.db_path(), corpus_search.corpus_version(db))


def search_corpus(db: Any, query: str, k: int = 10) -> list[corpus_search.SearchHit]:
    """The typed corpus search: BM25 over the database's full-text index (nothing to build)."""
    return corpus_search.search_text(db, query, k)


def possibly_missed(db: Any, query_pk: int, annotator: str, k: int = 10) -> list[corpus_search.SearchHit]:
    """Chunks outside the item's pool likely to be relevant (embeddings too when configured), from
    ``annotator``'s own grades only (blind labeling), kept for the session while nothing they
    depend on changed (``search.missed_key``, which names the viewer): every rerun of a graded item
    (a note typed, a radio clicked) would otherwise search the corpus again."""
    config = state.llm_config()
    key = (*corpus_search.missed_key(db, query_pk, annotator), k, config.embedding_model)
    kept = st.session_state.get(state.MISSED)
    if kept is not None and kept[0] == key:
        return kept[1]
    # a run that Enter (or any key) replaced stops its search rather than finish it on a core the
    # newer run needs: the panel is of the item being left
    try:
        with abandon_when(db, state.superseded()):
            found = corpus_search.search_missed(db, query_pk, k, config=config if config.embedding_model else None,
                                                annotator=annotator)
    except Abandoned:
        st.stop()
    st.session_state[state.MISSED] = (key, found)
    return found
