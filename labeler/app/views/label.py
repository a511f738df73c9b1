"""Label: the annotator's workspace. The chunk list, its grades, focus and grading keys are the
grading widget (``components.grader``), which runs in the browser and streams its changes; every
other change is saved at once, in the widget callbacks."""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

import labeler.labels as labels
from labeler import judge, synth
from labeler.app import auth, lead_view, state, widgets
from labeler.app.components import grader
from labeler.errors import ItemTakenError, LabelerError
from labeler.labels.reads import item_exists

db = state.get_db()
annotator = st.session_state[state.ANNOTATOR]
settings = state.settings()
names: list[str] = settings["grade_names"]
_KEEP = 50  # acknowledgements and notes remembered for the widget


# --- callbacks (run before the script, so a write never depends on the page drawing) ----------
# A callback may run on another thread than the run that registered it: it takes the database
# connection of the thread it runs on (state.get_db()), never the `db` of the page's last run.
# A callback that moves to another item reads the session first, then writes to the database
# holding the session's move lock and touching no session state (a newer run may have stopped
# this one: its next session access would raise, and the item it leased would be lost), and
# puts the outcome in `moves`; _settle() shows it, here or in the next run (see state.LabelMoves).

moves = state.label_moves()


def _safely(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except LabelerError as e:
        st.session_state[state.LABEL_ERROR] = str(e)
        return None


def _show(pk: int | None) -> None:
    st.session_state[state.CURRENT] = pk
    st.session_state[state.SHOWN_AT] = time.monotonic()


def _settle() -> None:
    """Show the item the last move went to; a run stopped half-way leaves it to the next run.
    Waits while a callback of another run is still moving (it holds the lock)."""
    move = moves.peek()
    if move is None:
        return
    if move.annotator != annotator:  # made before a sign-out: not this annotator's
        moves.done(move)
        return
    st.session_state[state.CURRENT] = move.to
    moves.done(move)  # shown: the rest is what the page says about it
    st.session_state[state.SHOWN_AT] = time.monotonic()
    if move.spent is not None:
        # measured at the move, written once the next item is drawn (write_spent): after Enter, a
        # write transaction fewer between the key and the next item, which behind an ingest costs most
        st.session_state.setdefault(state.SPENT, []).append(move.spent)
    if move.notice:
        st.session_state[state.NOTICE] = move.notice
    if move.error:
        st.session_state[state.LABEL_ERROR] = move.error


def _spent(pk: int | None, shown: float | None) -> tuple[int, float] | None:
    if pk is None or shown is None:
        return None
    return pk, min(time.monotonic() - shown, 3600.0)


def _hand_out(db, *, left: int | None, shown: float | None, notice: str | None = None,
              leased: labels.StreamResult | None = None) -> None:
    """Lease the next item (unless ``leased`` says which one the submit's transaction leased) and
    put the move to it (hold ``moves.lock``; no session state here)."""
    if leased is not None and leased.leased:
        pk, error = leased.next_item, leased.next_error
    else:
        try:
            pk = labels.next_item(db, annotator)
            error = None
        except LabelerError as e:
            pk, error = None, str(e)
    if pk is None:
        notice = "Nothing left in your queue. Thank you!"
    moves.put(state.Move(annotator, pk, notice=notice, error=error, spent=_spent(left, shown)))


def write_spent() -> None:
    """Store the seconds measured at each move (a run cut short leaves them for the next run)."""
    while st.session_state.get(state.SPENT):
        pk, seconds = st.session_state[state.SPENT].pop(0)
        _safely(labels.add_seconds, db, pk, annotator, seconds)


@auth.guarded
def _next_item() -> None:
    db_now = state.get_db()
    with moves.lock:
        _hand_out(db_now, left=None, shown=None)
    _settle()


def _remember(table: dict, key: str, value: Any) -> None:
    table.pop(key, None)
    table[key] = value
    while len(table) > _KEEP:
        table.pop(next(iter(table)))


def apply_outbox(box: dict | None) -> bool:
    """Apply the grading widget's unacknowledged events (each exactly once, by sequence number);
    True when an acknowledgement changed, so the widget must be told. A submit of the item shown
    moves on to the next item."""
    acks: dict[str, int] = st.session_state.setdefault(state.GRADER_ACKS, {})
    notes: dict[str, list] = st.session_state.setdefault(state.GRADER_NOTES, {})
    current, shown = st.session_state.get(state.CURRENT), st.session_state.get(state.SHOWN_AT)
    db_now = state.get_db()
    changed = False
    error = None
    with moves.lock:  # no session state below, until the lock is let go (see the top of this section)
        for batch in (box or {}).get("batches") or []:
            client, item_pk, events = batch.get("client"), batch.get("item"), batch.get("events") or []
            seqs = [e["seq"] for e in events if isinstance(e, dict) and isinstance(e.get("seq"), int)]
            ident = f"{client}|{item_pk}"
            if not seqs or max(seqs) <= acks.get(ident, 0) or f"refused|{ident}|{max(seqs)}" in notes:
                continue  # a resend of what is applied (or refused) already
            try:
                # a submit of the item shown leases the next one in the same transaction
                result = labels.apply_grade_events(db_now, item_pk, annotator, client, events,
                                                   lease_next=item_pk == current)
            except ItemTakenError as e:
                _remember(notes, f"refused|{ident}|{max(seqs)}", [client, item_pk, max(seqs), str(e)])
                error = str(e)
                changed = True
                continue
            except LabelerError as e:
                error = str(e)
                continue
            changed = changed or result.acked != acks.get(ident)
            _remember(acks, ident, result.acked)
            for seq, why in result.rejected:
                _remember(notes, f"rejected|{ident}|{seq}", [client, item_pk, seq, why])
            if result.submitted and item_pk == current:
                _hand_out(db_now, left=item_pk, shown=shown, notice="Submitted.", leased=result)
    if error is not None:
        st.session_state[state.LABEL_ERROR] = error
    _settle()
    return changed


@auth.guarded
def on_outbox() -> None:
    apply_outbox(grader.outbox())


@auth.guarded
def grade(pk: int, doc_pk: int, value: int) -> None:
    apply_outbox(grader.outbox())
    _safely(labels.set_grade, state.get_db(), pk, doc_pk, annotator, value)


@auth.guarded
def save_field(pk: int, field: str, key: str) -> None:
    _safely(labels.set_query_fields, state.get_db(), pk, annotator, **{field: st.session_state.get(key)})


@auth.guarded
def finish(pk: int, status: str) -> None:
    apply_outbox(grader.outbox())  # grades typed just before the click come first
    reason = None
    if status in ("flagged", "discarded"):
        reason = (st.session_state.get(f"flag_reason_{pk}") or "").strip() or None
    if status == "flagged" and reason is None:
        st.session_state[state.FLAG_ERROR] = "Write what is wrong in the flag reason box, then flag."
        return
    shown, db_now = st.session_state.get(state.SHOWN_AT), state.get_db()
    notice = {"submitted": "Submitted.", "skipped": "Skipped.", "flagged": "Flagged for the lead.",
              "discarded": "Discarded."}[status]
    error = None
    with moves.lock:
        try:
            labels.set_status(db_now, pk, annotator, status, reason=reason)
        except LabelerError as e:
            error = str(e)  # nothing written: the page stays on the item and says why
        else:
            _hand_out(db_now, left=pk, shown=shown, notice=notice)
    if error is not None:
        st.session_state[state.LABEL_ERROR] = error
    _settle()


@auth.guarded
def go_back(pk: int | None) -> None:
    apply_outbox(grader.outbox())
    prev = _safely(labels.previous_item, state.get_db(), annotator, pk)  # a read: no lease to lose
    if prev is not None:
        moves.put(state.Move(annotator, prev))
        _settle()
    else:
        st.session_state[state.NOTICE] = "There is no earlier item in your history."


@auth.guarded
def reopen(pk: int) -> None:
    apply_outbox(grader.outbox())
    moves.put(state.Move(annotator, pk))
    _settle()


# --- which item ------------------------------------------------------------------------------

if state.ITEM_PARAM in st.query_params and lead_view.show(db, annotator):
    st.stop()  # a lead opened an item from the Items page: everyone's grades, not the queue

_settle()  # a move an earlier run's callback made and could not show (waits for one still moving)
if state.OPEN_QUERY in st.session_state:
    _show(st.session_state.pop(state.OPEN_QUERY))
if state.CURRENT not in st.session_state:
    _next_item()
    st.session_state.pop(state.NOTICE, None)

pk = st.session_state.get(state.CURRENT)


def sidebar() -> None:
    """Progress, guidelines, grades and history: drawn last in the run, so that after Enter the
    next item's question and chunks reach the browser before the sidebar is computed and sent."""
    with st.sidebar:
        widgets.progress_panel(db, annotator)
        with st.expander("Guidelines"):
            st.markdown(settings["guidelines"])
        with st.expander("Grades"):
            for g, (name, desc) in enumerate(zip(names, settings["grade_help"], strict=False)):
                st.write(f"**{g} {widgets.escape_markdown(name)}**: {widgets.escape_markdown(desc)}")
        with st.expander("My history"):
            for h in labels.history(db, annotator, limit=30):
                st.button(widgets.escape_markdown(f"{h.status} · {h.question[:60]}"), key=f"hist_{h.query_pk}",
                          on_click=reopen, args=(h.query_pk,), width="stretch")


if error := st.session_state.pop(state.LABEL_ERROR, None):
    st.error(widgets.escape_markdown(error))
if notice := st.session_state.pop(state.NOTICE, None):
    st.toast(widgets.escape_markdown(notice))

if pk is None:
    st.title("Label")
    st.success("Nothing left in your queue: every item has the annotators it needs, or is held by someone else.")
    st.button("Check again", on_click=_next_item, key="check_again")
    st.button("Back to my last item", on_click=go_back, args=(None,), key="back_empty")
    # mounted with no item, so that keys typed after the last Enter are reported, not lost
    grader.grader({"item": None, "annotator": annotator, "chunks": [], "acks": [], "refused": [], "rejected": []},
                  on_outbox)
    sidebar()
    write_spent()
    st.stop()

try:
    item = labels.get_item(db, pk, annotator)
except LabelerError:
    if item_exists(db, pk):
        raise
    # a lead removed it meanwhile (ingest undo, queries remove): on to the next item
    _next_item()
    st.session_state[state.NOTICE] = "That item was removed by a lead; here is the next one."
    st.rerun()
chunks = item.chunks + item.extra

# --- the question and the toolbar -------------------------------------------------------------

head = f"Query {widgets.escape_markdown(item.query_id)} · {item.origin}"
if item.occurrences > 1:
    head += f" · asked {item.occurrences} times"
if item.status and item.status != "in_progress":
    head += f" · you {item.status} this item (edits are saved)"
st.caption(head)
for answer in labels.lead_notes(db, pk, annotator)[:1]:  # the lead's answer to my last flag on this item
    what = {"edited": "edited the question", "unflagged": "unflagged it", "discarded": "discarded it"}[answer.action]
    st.info(widgets.escape_markdown(f"You flagged this item ({answer.flag_reason or 'no reason'}); "
                                    f"{answer.lead} {what}" + (f": {answer.note}" if answer.note else ".")),
            icon=":material/flag:")
widgets.plain_block(item.question, size="1.35rem", weight=600, key="question")

with st.container(horizontal=True, key="toolbar", vertical_alignment="center"):
    st.button("Submit", key="kbd_submit", type="primary", on_click=finish, args=(pk, "submitted"),
              width="content", disabled=item.ungraded > 0,
              help="Enter: submit and go to the next item (once every chunk has a grade)")
    st.button("Skip", key="kbd_skip", shortcut="S", on_click=finish, args=(pk, "skipped"), width="content")
    st.button("Back", key="kbd_back", shortcut="B", on_click=go_back, args=(pk,), width="content",
              help="The item you finished before this one")
    st.caption("J/K move · Enter submit · S skip · B back · F flag · X discard · Esc leaves a text box")

left, right = st.columns([3, 2], gap="large")

with left:
    st.subheader("Retrieved chunks")
    if not item.chunks:
        st.info("The retriever returned nothing for this question. Use the search to add the relevant chunks.")
    elif item.blind:
        st.caption("The chunks every retriever returned, pooled and shuffled: grade each on its own "
                   "(which retriever returned it, its rank and score are hidden).")
    if item.requeued and item.new_chunks:
        st.info(f"New chunks: a new ingest added {item.new_chunks} chunk(s) to this item since you submitted it. "
                "Your grades are kept; grade the chunks marked \"new chunk\", then submit.")
    suggested = judge.suggestions_for(db, pk)
    acks = st.session_state.get(state.GRADER_ACKS, {})
    notes = st.session_state.get(state.GRADER_NOTES, {})
    data = {
        "item": pk, "annotator": annotator, "grade_names": names, "grade_help": settings["grade_help"],
        "chunks": [grader.chunk_data(c, added=i >= len(item.chunks), suggestion=suggested.get(c.doc_pk))
                   for i, c in enumerate(chunks)],
        # this item's streams from the database (they survive a server restart), then the session's
        "acks": [[client, pk, seq] for client, seq in labels.stream_acks(db, pk, annotator).items()]
        + [[k.split("|", 1)[0], int(k.split("|", 1)[1]), seq] for k, seq in acks.items()],
        "refused": [v for k, v in notes.items() if k.startswith("refused|")],
        "rejected": [v for k, v in notes.items() if k.startswith("rejected|")],
    }
    # a new session (a restarted server) gets the widget's outbox before any callback can run
    if apply_outbox(grader.grader(data, on_outbox)):
        st.rerun()

with right:
    if item.origin == "synthetic":
        proposal = synth.get_question(db, pk)
        st.subheader("Generator's proposal")
        st.caption("A synthetic question: the generator's answer and seed chunks are a proposal, not a label. "
                   "Grade every chunk yourself.")
        widgets.plain_block(proposal.expected_answer or "(no proposed answer)", muted=True, key="proposal")
        st.caption("Seed chunks: " + widgets.escape_markdown(", ".join(c.doc_id for c in proposal.seed_chunks)))
    if item.answer is not None:
        st.subheader("Production answer")
        widgets.plain_block(item.answer, key="answer")
        for field, label in (("answer_faithful", "Faithful to the chunks?"),
                             ("answer_relevant", "Answers the question?")):
            key = f"{field}_{pk}"
            current = getattr(item, field)
            st.radio(label, list(labels.JUDGMENTS), horizontal=True, key=key,
                     index=list(labels.JUDGMENTS).index(current) if current in labels.JUDGMENTS else None,
                     on_change=save_field, args=(pk, field, key))

    st.subheader("Expected answer")
    key = f"expected_{pk}"
    st.text_area("The answer a good assistant should give, from the relevant chunks", key=key,
                 value=item.expected_answer or "", on_change=save_field, args=(pk, "expected_answer", key), height=140)
    key = f"notes_{pk}"
    st.text_input("Notes", key=key, value=item.notes or "", on_change=save_field, args=(pk, "notes", key))
    st.text_input("Reason to flag or discard", key=f"flag_reason_{pk}", value=item.flag_reason or "",
                  placeholder="what is wrong with this item")
    if flag_error := st.session_state.pop(state.FLAG_ERROR, None):
        st.error(flag_error)
    with st.container(horizontal=True, key="flag_bar"):
        st.button("Flag for the lead", key="kbd_flag", shortcut="F", on_click=finish, args=(pk, "flagged"),
                  width="content")
        st.button("Discard question", key="kbd_discard", shortcut="X", on_click=finish, args=(pk, "discarded"),
                  width="content", help="A bad or unanswerable question: its labels are not used")

    # last in the column: however many chunks match, the answer fields and the flag box stay put
    shown = {c.doc_pk for c in chunks}

    def hit_list(hits: list, key: str, add: str) -> None:
        for h in hits:
            with st.container(border=True, key=f"{key}_{pk}_{h.doc_pk}"):
                widgets.chunk_card(h, focused=False, note="already on this item" if h.doc_pk in shown else None)
                with st.container(horizontal=True):
                    for g in range(len(names)):
                        st.button(f"Add as {g}", key=f"{add}_{pk}_{h.doc_pk}_{g}",
                                  help=widgets.escape_markdown(names[g]),
                                  on_click=grade, args=(pk, h.doc_pk, g), width="content")

    st.subheader("Find what the retriever missed")
    query = st.text_input("Search the whole corpus", key=f"search_{pk}", placeholder="words from the missing chunk")
    if query:
        try:
            hits = widgets.search_corpus(db, query)
        except LabelerError as e:
            hits = []
            st.error(widgets.escape_markdown(str(e)))
        if not hits:
            st.caption("No chunk matches.")
        else:
            with st.expander(f"{len(hits)} matching chunks", expanded=True), st.container(height=300, key="hits"):
                hit_list(hits, "hit", "add")
    st.markdown("**Possibly missed**")
    if item.ungraded > 0:
        st.caption("Fills itself once every chunk has a grade: chunks like the question and like the ones "
                   "you graded relevant, that no retriever returned.")
    else:
        try:
            missed = widgets.possibly_missed(db, pk, annotator)
        except LabelerError as e:
            missed = []
            st.error(widgets.escape_markdown(str(e)))
        if not missed:
            st.caption("Nothing else in the corpus looks relevant.")
        else:
            with st.container(height=300, key="missed"):
                hit_list(missed, "missed", "add_missed")

sidebar()
write_spent()
