"""Human review of synthetic questions, and what review means downstream.

States (``queries.review_state`` of a synthetic query): ``pending`` (generated, not reviewed),
``accepted`` (accepted as is or after an edit) and ``rejected``. Only ``accepted`` questions enter
the labeling queue and count in golden sets and metrics (``counts_as_golden``); exports leave
``pending`` and ``rejected`` ones out unless asked. ``is_reviewed`` is true for accepted and
rejected. The latest decision (``accepted``, ``edited`` or ``rejected``), who made it and when is
in ``synth_reviews``; every change (state, question, expected answer) is appended to
``label_events`` with the reviewer as annotator, so the history is never lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

from .. import db as store
from .. import owners, privacy
from ..errors import SynthError
from ..ingest.validate import question_columns
from .generate import CANDIDATES_RETRIEVER

REVIEW_STATES = ("pending", "accepted", "rejected")
#: accept / edit (change the question or expected answer, and accept) / reject / reset (back to pending)
DECISIONS = ("accept", "edit", "reject", "reset")


def is_reviewed(review_state: str | None) -> bool:
    """True when a human decided on the synthetic question (accepted or rejected)."""
    return review_state in ("accepted", "rejected")


def counts_as_golden(origin: str, review_state: str | None) -> bool:
    """Whether a query may enter the queue, a golden set or metrics: every non-synthetic query, and
    synthetic ones only once accepted."""
    return origin != "synthetic" or review_state == "accepted"


@dataclass
class SeedChunk:
    """A seed chunk as shown to a reviewer (``chunk_card`` compatible)."""

    doc_pk: int | None
    doc_id: str
    title: str | None
    text: str | None


@dataclass
class SynthQuestion:
    """A synthetic query with what a reviewer needs: the proposed answer, the quotes, the seeds."""

    query_pk: int
    query_id: str
    question: str
    review_state: str
    expected_answer: str | None
    quotes: list[str]
    question_type: str | None
    seed_chunks: list[SeedChunk]
    generator: dict[str, Any]
    created_at: str
    decision: str | None = None
    reviewer: str | None = None
    reviewed_at: str | None = None
    candidates: int = 0

    @property
    def setting(self) -> str | None:
        return self.generator.get("setting")


@dataclass
class Rejection:
    """A generated question that failed a check before storing."""

    id: int
    run_id: int | None
    setting: str
    reason: str
    detail: str | None
    question: str | None
    expected_answer: str | None
    quotes: list[str]
    seed_doc_ids: list[str]
    created_at: str
    generator: dict[str, Any] = field(default_factory=dict, repr=False)


_SELECT = (
    "SELECT q.pk, q.query_id, q.question, q.review_state, q.meta, q.seed_doc_ids, q.generator, q.created_at, "
    "v.decision, v.reviewer, v.reviewed_at, "
    f"(SELECT count(*) FROM retrievals r WHERE r.query_pk = q.pk AND r.retriever = '{CANDIDATES_RETRIEVER}') "
    "FROM queries q LEFT JOIN synth_reviews v ON v.query_pk = q.pk WHERE q.origin = 'synthetic'"
)


def _question(db: sqlite_utils.Database, row: tuple) -> SynthQuestion:
    pk, query_id, question, state, meta, seed_ids, generator, created, decision, reviewer, at, n = row
    meta = store.loads(meta) or {}
    ids = store.loads(seed_ids) or []
    docs = {r[1]: r for r in db.execute(
        "SELECT pk, doc_id, title, text FROM documents WHERE doc_id IN (SELECT value FROM json_each(?))",
        [store.dumps(ids)])}
    chunks = [SeedChunk(*docs[i]) if i in docs else SeedChunk(None, i, None, None) for i in ids]
    return SynthQuestion(pk, query_id, question, state or "pending", meta.get("expected_answer"),
                         list(meta.get("quotes") or []), meta.get("question_type"), chunks,
                         store.loads(generator) or {}, created, decision, reviewer, at, n)


def get_question(db: sqlite_utils.Database, query_pk: int) -> SynthQuestion:
    """One synthetic question by pk; SynthError when it does not exist or is not synthetic."""
    row = db.execute(_SELECT + " AND q.pk = ?", [query_pk]).fetchone()
    if row is None:
        raise SynthError(f"query pk {query_pk!r} is not a synthetic question; list them with list_questions()")
    return _question(db, row)


def list_questions(db: sqlite_utils.Database, *, state: str | None = "pending", limit: int = 100,
                   offset: int = 0) -> list[SynthQuestion]:
    """Synthetic questions in ``state`` (None: all), oldest first."""
    if state is not None and state not in REVIEW_STATES:
        raise SynthError(f"review state {state!r} is unknown; use one of: {', '.join(REVIEW_STATES)}")
    where, params = ("", []) if state is None else (" AND coalesce(q.review_state, 'pending') = ?", [state])
    rows = db.execute(_SELECT + where + " ORDER BY q.pk LIMIT ? OFFSET ?", [*params, int(limit), int(offset)])
    return [_question(db, r) for r in rows.fetchall()]


def review_counts(db: sqlite_utils.Database) -> dict[str, int]:
    """Synthetic questions by review state."""
    counts = {s: 0 for s in REVIEW_STATES}
    for state, n in db.execute("SELECT coalesce(review_state, 'pending'), count(*) FROM queries "
                               "WHERE origin = 'synthetic' GROUP BY 1"):
        counts[state] = counts.get(state, 0) + n
    return counts


def _event(db: sqlite_utils.Database, at: str, reviewer: str, pk: int, name: str, old: Any, new: Any) -> None:
    db.execute("INSERT INTO label_events (at, annotator, query_pk, doc_pk, field, old, new) "
               "VALUES (?, ?, ?, NULL, ?, ?, ?)", [at, reviewer, pk, name, old, new])


def review(db: sqlite_utils.Database, query_pk: int, decision: str, *, reviewer: str,
           question: str | None = None, answer: str | None = None) -> SynthQuestion:
    """Record a reviewer's ``decision`` on a synthetic question and return it as it is now.

    ``accept``: the question enters the labeling queue. ``edit``: replace the question and/or the
    expected answer (``question=``, ``answer=``) and accept. ``reject``: it leaves (or never enters)
    the queue; an item already being labeled stays queued, but its labels do not count.
    ``reset``: back to pending. Editing the question of one that already has relevance labels is an
    error (the labels were given for the old wording): reject it instead.
    """
    if decision not in DECISIONS:
        raise SynthError(f"review decision {decision!r} is unknown; use one of: {', '.join(DECISIONS)}")
    reviewer = " ".join(str(reviewer or "").split())
    if not reviewer:
        raise SynthError("a review needs the reviewer's name (reviewer='alice')")
    new_question = " ".join(question.split()) if question is not None else None
    new_answer = answer.strip() if answer is not None else None
    # a reviewer's text is stored like an ingested question: redacted while the setting is on
    typed = privacy.redact_typed(db, {"question": new_question, "answer": new_answer})
    new_question, new_answer = typed["question"], typed["answer"]
    if decision == "edit" and new_question is None and new_answer is None:
        raise SynthError("an edit needs a new question or expected answer (question=..., answer=...)")
    if new_question == "":
        raise SynthError("the edited question is empty; write the question or reject it")
    at = store.now()
    with store.transaction(db):
        current = get_question(db, query_pk)
        changes: list[tuple[str, Any, Any]] = []
        if decision == "edit":
            if new_question is not None and new_question != current.question:
                if db.execute("SELECT 1 FROM relevance_labels WHERE query_pk = ? LIMIT 1", [query_pk]).fetchone():
                    raise SynthError(f"query {current.query_id} already has relevance labels for its current "
                                     "wording; reject it instead of editing the question")
                db.execute("UPDATE queries SET question = ?, norm_question = ?, norm_key = ? WHERE pk = ?",
                           [new_question, *question_columns(new_question), query_pk])
                changes.append(("question", current.question, new_question))
            if new_answer is not None and new_answer != (current.expected_answer or ""):
                db.execute("UPDATE queries SET meta = json_set(coalesce(meta, '{}'), '$.expected_answer', ?) "
                           "WHERE pk = ?", [new_answer, query_pk])
                changes.append(("synth_expected_answer", current.expected_answer, new_answer))
        state = {"accept": "accepted", "edit": "accepted", "reject": "rejected", "reset": "pending"}[decision]
        if state != current.review_state:
            db.execute("UPDATE queries SET review_state = ? WHERE pk = ?", [state, query_pk])
            changes.append(("review_state", current.review_state, state))
        for name, old, new in changes:
            _event(db, at, reviewer, query_pk, name, old, new)
        if decision == "reset":
            db.execute("DELETE FROM synth_reviews WHERE query_pk = ?", [query_pk])
        else:
            # an edit stays an edit when the reviewer later just re-accepts it
            content_changed = any(name != "review_state" for name, _, _ in changes)
            edited = (decision == "edit" and content_changed) or \
                (decision in ("accept", "edit") and current.decision == "edited")
            label = "rejected" if decision == "reject" else "edited" if edited else "accepted"
            db.execute("INSERT INTO synth_reviews (query_pk, decision, reviewer, reviewed_at) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT (query_pk) DO UPDATE SET decision = excluded.decision, "
                       "reviewer = excluded.reviewer, reviewed_at = excluded.reviewed_at",
                       [query_pk, label, reviewer, at])
    from ..labels.queue import sync_queue

    sync_queue(db)  # the accepted set changed: the queue's change check sees it, no force needed
    return get_question(db, query_pk)


def acceptance_rates(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    """Per generator setting: generated, pending, accepted (as is), edited, rejected, failed
    checks (``check_rejected``), and ``acceptance_rate`` = (accepted + edited) / reviewed (None
    before any review); ``edit_rate`` = edited / reviewed. Newest setting first."""
    rows: dict[str, dict[str, Any]] = {}

    def entry(setting: str, generator: str | None) -> dict[str, Any]:
        if setting not in rows:
            g = store.loads(generator) or {}
            rows[setting] = {"setting": setting, "model": g.get("model"), "prompt_version": g.get("prompt_version"),
                             "language": g.get("language"), "options": g.get("options") or {},
                             "generated": 0, "pending": 0, "accepted": 0, "edited": 0, "rejected": 0,
                             "check_rejected": 0, "last": ""}
        return rows[setting]

    for setting, generator, state, decision, n, last in db.execute(
        "SELECT json_extract(q.generator, '$.setting'), max(q.generator), coalesce(q.review_state, 'pending'), "
        "v.decision, count(*), max(q.created_at) FROM queries q LEFT JOIN synth_reviews v ON v.query_pk = q.pk "
        "WHERE q.origin = 'synthetic' GROUP BY 1, 3, 4"
    ):
        e = entry(setting or "unknown", generator)
        e["generated"] += n
        e["last"] = max(e["last"], last or "")
        if state == "pending":
            e["pending"] += n
        elif state == "rejected":
            e["rejected"] += n
        elif decision == "edited":
            e["edited"] += n
        else:
            e["accepted"] += n
    for setting, generator, n, last in db.execute(
            "SELECT setting, max(generator), count(*), max(created_at) FROM synth_rejections GROUP BY setting"):
        e = entry(setting, generator)
        e["check_rejected"] += n
        e["last"] = max(e["last"], last or "")
    out = []
    for e in rows.values():
        reviewed = e["accepted"] + e["edited"] + e["rejected"]
        e["reviewed"] = reviewed
        e["acceptance_rate"] = (e["accepted"] + e["edited"]) / reviewed if reviewed else None
        e["edit_rate"] = e["edited"] / reviewed if reviewed else None
        out.append(e)
    return sorted(out, key=lambda e: e.pop("last"), reverse=True)


def rejections(db: sqlite_utils.Database, *, run_id: int | None = None, reason: str | None = None,
               limit: int = 500) -> list[Rejection]:
    """Generated questions that failed a check, newest first, with reason and detail."""
    where, params = [], []
    if run_id is not None:
        where.append("run_id = ?")
        params.append(run_id)
    if reason is not None:
        where.append("reason = ?")
        params.append(reason)
    sql = ("SELECT id, run_id, setting, reason, detail, question, expected_answer, quotes, seed_doc_ids, "
           "created_at, generator FROM synth_rejections" + (" WHERE " + " AND ".join(where) if where else "")
           + " ORDER BY id DESC LIMIT ?")
    return [Rejection(r[0], r[1], r[2], r[3], r[4], r[5], r[6], store.loads(r[7]) or [], store.loads(r[8]) or [],
                      r[9], store.loads(r[10]) or {}) for r in db.execute(sql, [*params, int(limit)]).fetchall()]


def runs(db: sqlite_utils.Database, limit: int = 20) -> list[dict[str, Any]]:
    """Recent generation runs, newest first: id, status, setting, generator, summary, times. A run
    whose process was killed shows as ``interrupted`` (rerun it with the same options: what was
    generated comes back from the LLM cache)."""
    return [{"run_id": r[0], "status": "interrupted" if r[1] == "running" and not owners.alive(r[7]) else r[1],
             "setting": r[2], "generator": store.loads(r[3]) or {},
             "summary": store.loads(r[4]) or {}, "created_at": r[5], "finished_at": r[6]}
            for r in db.execute("SELECT id, status, setting, generator, summary, created_at, finished_at, owner "
                                "FROM synth_runs ORDER BY id DESC LIMIT ?", [int(limit)]).fetchall()]
