"""Helpers shared by the labels modules (and the golden-set importer): leases, the grade scale, the
checks of query and chunk keys, and audit events. Times and names are in ``labeler.core``."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from typing import Any

import sqlite_utils

from .. import db as store
from ..core.times import When, parse_time, stamp
from ..errors import LabelError


def lease_until(value: When, settings: dict[str, Any]) -> str:
    minutes = settings.get("lease_minutes") or 15
    return stamp(parse_time(value) + timedelta(minutes=float(minutes)))


def max_grade(settings: dict[str, Any]) -> int:
    return len(settings.get("grade_names") or store.DEFAULT_SETTINGS["grade_names"]) - 1


def check_grade(grade: Any, settings: dict[str, Any]) -> int:
    top = max_grade(settings)
    if isinstance(grade, bool) or not isinstance(grade, int) or not 0 <= grade <= top:
        raise LabelError(f"grade {grade!r} is not on the scale; use an integer from 0 to {top} "
                         f"({', '.join(f'{i} {n}' for i, n in enumerate(settings['grade_names']))})")
    return grade


def query_row(conn: sqlite3.Connection, query_pk: Any) -> tuple:
    """(pk, query_id, origin, review_state) of a query, or a LabelError naming the bad key."""
    if isinstance(query_pk, bool) or not isinstance(query_pk, int):
        raise LabelError(f"query {query_pk!r}: expected the integer query pk (Item.query_pk), "
                         "not the public query_id")
    row = conn.execute("SELECT pk, query_id, origin, review_state FROM queries WHERE pk = ?",
                       [query_pk]).fetchone()
    if row is None:
        raise LabelError(f"query pk {query_pk} does not exist; take one from next_item() or history()")
    return row


def check_doc(conn: sqlite3.Connection, doc_pk: Any) -> None:
    if isinstance(doc_pk, bool) or not isinstance(doc_pk, int):
        raise LabelError(f"chunk {doc_pk!r}: expected the integer doc pk (Chunk.doc_pk), not the doc_id")
    if conn.execute("SELECT 1 FROM documents WHERE pk = ?", [doc_pk]).fetchone() is None:
        raise LabelError(f"chunk pk {doc_pk} does not exist; ingest the corpus or pick a listed chunk")


def text(value: Any) -> str | None:
    return None if value is None else str(value)


def event(conn: sqlite3.Connection, at: str, annotator: str, query_pk: int, doc_pk: int | None,
          field: str, old: Any, new: Any) -> None:
    """Append one audit row: who changed which field of which label, from what to what."""
    conn.execute(
        "INSERT INTO label_events (at, annotator, query_pk, doc_pk, field, old, new) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)", [at, annotator, query_pk, doc_pk, field, text(old), text(new)])


def role_of(db: sqlite_utils.Database, name: str) -> str | None:
    row = db.execute("SELECT role FROM annotators WHERE name = ?", [name]).fetchone()
    return row[0] if row else None
