"""Annotators and their roles: ``annotator`` labels, ``lead`` also edits settings and adjudicates."""

from __future__ import annotations

from typing import NamedTuple

import sqlite_utils

from .. import db as store
from ..accounts.manage import ensure_annotator
from ..core.names import ROLES, check_name
from ..core.times import stamp
from ..errors import LabelError
from .common import role_of


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
        from ..accounts.manage import require

        require(db, by, "lead", "changing roles")
    with store.transaction(db):
        ensure_annotator(db.conn, name, stamp(None))
        if role is not None and role != role_of(db, name):
            from ..accounts.manage import set_role

            set_role(db, name, role, by=by)  # the one place roles change (last lead kept, audited)
    row = db.execute("SELECT name, role, created_at FROM annotators WHERE name = ?", [name]).fetchone()
    return Annotator(*row)


def list_annotators(db: sqlite_utils.Database) -> list[Annotator]:
    """Every registered annotator, in the order they joined."""
    return [Annotator(*r) for r in db.execute(
        "SELECT name, role, created_at FROM annotators ORDER BY created_at, name")]


def get_role(db: sqlite_utils.Database, name: str) -> str | None:
    """``"lead"``, ``"annotator"``, or ``None`` for a name never registered."""
    return role_of(db, check_name(name))
