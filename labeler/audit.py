"""The audit trail: who changed what, when. Label changes come from ``label_events`` (every grade,
answer, status and adjudication, with old and new value, written as the signed-in account);
account, settings and data actions from ``audit_events``. Both are append-only."""

from __future__ import annotations

from typing import Any, NamedTuple

import sqlite_utils

from .core.names import check_name
from .core.times import When, stamp


class AuditEvent(NamedTuple):
    at: str
    actor: str
    action: str  # a label field (grade, status, expected_answer, adjudication, ...) or an account action
    query_id: str | None
    doc_id: str | None
    target: str | None  # the account or setting an account/settings action was about
    old: str | None
    new: str | None

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


def audit_log(db: sqlite_utils.Database, *, annotator: str | None = None, since: When = None,
              limit: int | None = None) -> list[AuditEvent]:
    """Label events and account/settings events in time order (oldest first), optionally only
    those made by ``annotator`` and at or after ``since``; ``limit`` keeps the newest that many."""
    start = stamp(since) if since is not None else ""
    who = check_name(annotator) if annotator is not None else None
    labels = db.execute(
        "SELECT e.at, e.annotator, e.field, q.query_id, d.doc_id, NULL, e.old, e.new FROM label_events e "
        "JOIN queries q ON q.pk = e.query_pk LEFT JOIN documents d ON d.pk = e.doc_pk "
        "WHERE e.at >= ? AND (? IS NULL OR e.annotator = ?)", [start, who, who]).fetchall()
    others = db.execute(
        "SELECT at, actor, action, NULL, NULL, target, NULL, detail FROM audit_events "
        "WHERE at >= ? AND (? IS NULL OR actor = ?)", [start, who, who]).fetchall()
    events = sorted((AuditEvent(*r) for r in labels + others), key=lambda e: e.at)
    if limit is not None:
        events = events[-limit:] if limit > 0 else []
    return events
