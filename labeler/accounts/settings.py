"""Changing a project setting on someone's behalf: leads only, and every change is recorded in
``audit_events``. The store (``labeler.db``) reads and writes settings without permission checks;
every change a person asks for comes through here."""

from __future__ import annotations

from typing import Any

import sqlite_utils

from .. import db as store
from .manage import audit, require


def set_setting(db: sqlite_utils.Database, key: str, value: Any, *, by: str | None = None) -> None:
    """Change a project setting; leads only (``by``, the signed-in account; ``None`` is the local
    operator). The change is recorded in ``audit_events``."""
    require(db, by, "lead", f"changing the setting {key}")
    with store.transaction(db):
        audit(db.conn, store.now(), by, "setting", key, store.dumps(value)[:500])
        store.put_setting(db.conn, key, value)
