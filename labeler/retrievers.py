"""Which retrievers logged rankings, and which one a command means when none is named.

The default retriever is the only one when there is one; otherwise ``production`` if it logged
rankings; otherwise there is no default and the caller must name one (a one-line error lists them).
Commands never fall back to a retriever that logged nothing: that would print an empty result as
if it were a success.
"""

from __future__ import annotations

import sqlite_utils

from . import db as store
from .errors import LabelerError

PREFERRED = "production"


class RetrieverError(LabelerError, ValueError):
    """No retriever can be chosen: none logged rankings, several did and none is ``production``,
    or the one named logged nothing."""


def logged_retrievers(db: sqlite_utils.Database) -> list[str]:
    """The retrievers with at least one visible ranking of a logged query, sorted; when no logged
    query has one, those of any query (synthetic questions keep their candidates as ``production``,
    which must not make ``production`` the default over the retriever the logs name)."""
    # every retriever first (one scan, no join), then which of them ranked a logged query: each check
    # stops at the first such ranking, so this costs a third of joining every ranking to its query
    every = _any_retrievers(db)
    names = [name for name in every if db.execute(
        f"SELECT 1 FROM retrievals r JOIN queries q ON q.pk = r.query_pk WHERE r.retriever = ? "
        f"AND q.origin = 'log' AND {store.visible('r')} LIMIT 1", [name]).fetchone() is not None]
    return names or every


def _any_retrievers(db: sqlite_utils.Database) -> list[str]:
    # sorted here: ORDER BY makes SQLite sort every ranking row before removing duplicates
    return sorted(r[0] for r in db.execute(f"SELECT DISTINCT retriever FROM retrievals r WHERE {store.visible('r')}"))


def default_retriever(db: sqlite_utils.Database, retriever: str | None = None,
                      known: list[str] | None = None) -> str:
    """``retriever`` if it logged rankings, else the default one (see the module docstring); raise
    RetrieverError naming the retrievers otherwise. ``known``: the logged retrievers, if the caller
    already has them."""
    names = logged_retrievers(db) if known is None else known
    listed = ", ".join(names)
    if retriever is not None:
        if retriever not in names and retriever not in _any_retrievers(db):
            raise RetrieverError(f"retriever {retriever!r} logged no rankings; "
                                 + (f"logged: {listed}" if names else "no retriever logged any yet (ingest logs first)"))
        return retriever
    if len(names) == 1:
        return names[0]
    if PREFERRED in names:
        return PREFERRED
    if not names:
        raise RetrieverError("no retriever logged any rankings yet; ingest production logs first")
    raise RetrieverError(f"several retrievers logged rankings ({listed}) and none is called {PREFERRED!r}; "
                         "name one with --retriever")
