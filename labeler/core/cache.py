"""Reuse of what was read while nothing changed: a small least-recently-used cache that computes a
missing value once (``LRU``), and a token that changes whenever anything is committed to a database
file (``data_token``), so a value cached under one token is exactly current while it stays the same."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite_utils


class DataWatch:
    """``PRAGMA data_version`` of a private read-only connection per database file: it changes
    whenever any other connection (any thread or process) commits, so data loaded under one value
    is exactly current while the value stays the same."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conns: dict[str, tuple[tuple[int, int], sqlite3.Connection]] = {}

    def token(self, db: sqlite_utils.Database) -> tuple | None:
        path = next((r[2] for r in db.execute("PRAGMA database_list") if r[1] == "main"), "")
        if not path:
            return None  # an in-memory database: nothing to watch, nothing is reused
        try:
            st = os.stat(path)
        except OSError:
            return None
        identity = (st.st_dev, st.st_ino)
        with self.lock:
            known = self.conns.get(path)
            if known is None or known[0] != identity:  # a new file at the same path
                if known is not None:
                    known[1].close()
                conn = sqlite3.connect(f"{Path(path).as_uri()}?mode=ro", uri=True, check_same_thread=False,
                                       isolation_level=None)
                self.conns[path] = known = (identity, conn)
            version = known[1].execute("PRAGMA data_version").fetchone()[0]
        return (path, identity, version)


class LRU:
    """A small least-recently-used cache whose ``get`` computes a missing value once: a second
    caller asking for a key being computed waits for that result instead of computing it again."""

    def __init__(self, size: int) -> None:
        self.size, self.lock, self.items = size, threading.Lock(), OrderedDict()
        self.pending: dict[Any, threading.RLock] = {}

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        if key is None:
            return make()
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
            flight = self.pending.setdefault(key, threading.RLock())
        with flight:
            with self.lock:
                if key in self.items:  # computed by the caller we waited for
                    self.items.move_to_end(key)
                    return self.items[key]
            try:
                value = make()
                with self.lock:
                    self.items[key] = value
                    while len(self.items) > self.size:
                        self.items.popitem(last=False)
            finally:
                with self.lock:
                    self.pending.pop(key, None)
        return value

    def clear(self) -> None:
        with self.lock:
            self.items.clear()

    def evict(self, stale: Callable[[Any], bool]) -> None:
        with self.lock:
            for key in [k for k in self.items if stale(k)]:
                del self.items[key]


_WATCH = DataWatch()


def data_token(db: sqlite_utils.Database) -> tuple | None:
    """A value that changes whenever anything is committed to the database file (None in memory)."""
    return _WATCH.token(db)
