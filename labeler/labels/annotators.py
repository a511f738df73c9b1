"""Annotators and their roles: ``annotator`` labels, ``lead`` also edits settings and adjudicates."""

from __future__ import annotations

from typing import NamedTuple

import sqlite_utils

from .. import db as store
from ..errors import LabelError
from ._common import ROLES, check_name, ensure_annotator, role_of, stamp


class Annotator(NamedTuple):
    name: str
    role: str
    created_at: str


def add_annotator(db: sqlite_utils.Database, name: str, role: str | None = None, *,
                  by: str | None = None) -> Annotator:
    """Register ``name`` (or change the role of a known annotator) and return it.

    ``role`` is ``"annotator"`` or ``"lead"``; left out, a new annotator becomes the lead when the
    project has none yet (so the first person to sign in can open Settings) and an annotator
    otherwise, and a known annotator keeps their role. The last lead cannot be demoted.
    Annotators are also registered implicitly by their first ``next_item`` or label write.
    Giving a role is a lead's action (``by``, the signed-in account; ``None`` is the local operator).
    """
    name = check_name(name)
    if role is not None and role not in ROLES:
        raise LabelError(f"role {role!r} is unknown; use one of: {', '.join(ROLES)}")
    if role is not None:
        from ..accounts import require  # accounts builds on labels: imported here

        require(db, by, "lead", "changing roles")
    at = stamp(None)
    with store.transaction(db):
        conn = db.conn
        ensure_annotator(conn, name, at)
        current = role_of(db, name)
        if role is not None and role != current:
            if current == "lead":
                leads = conn.execute("SELECT count(*) FROM annotators WHERE role = 'lead'").fetchone()[0]
                if leads <= 1:
                    raise LabelError(f"{name} is the only lead; make someone else lead first")
            conn.execute("UPDATE annotators SET role = ? WHERE name = ?", [role, name])
    row = db.execute("SELECT name, role, created_at FROM annotators WHERE name = ?", [name]).fetchone()
    return Annotator(*row)


def list_annotators(db: sqlite_utils.Database) -> list[Annotator]:
    """Every registered annotator, in the order they joined."""
    return [Annotator(*r) for r in db.execute(
        "SELECT name, role, created_at FROM annotators ORDER BY created_at, name")]


def get_role(db: sqlite_utils.Database, name: str) -> str | None:
    """``"lead"``, ``"annotator"``, or ``None`` for a name never registered."""
    return role_of(db, check_name(name))
