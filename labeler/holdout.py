"""The locked dev/holdout split of the golden set.

``set_split(db, 0.2, seed=N)`` puts every query, present and future, in ``holdout`` when
``blake2b(seed, query_id)`` read as a number in [0, 1) is below the fraction, else in ``dev``: the
rule depends only on the query id and the seed, so a re-ingest, new labels or a rebuilt database
give every query the same side. Once set, the split is locked: changing the fraction or the seed
needs ``force=True`` and is written to the audit. Exports carry a ``split`` column;
``labeler eval`` scores dev only unless asked for the holdout, and every holdout evaluation is
counted (:func:`record_look`)."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import sqlite_utils

from . import db as store
from .accounts.manage import audit, local_operator, require
from .errors import LabelerError

DEV, HOLDOUT = "dev", "holdout"


class HoldoutError(LabelerError):
    """The split cannot be set or used as asked."""


class Split(NamedTuple):
    id: int
    fraction: float
    seed: int
    created_at: str
    by: str | None


def split_of(query_id: str, fraction: float, seed: int) -> str:
    """``holdout`` or ``dev`` for one query id (see the module doc)."""
    digest = hashlib.blake2b(f"{seed}\x1f{query_id}".encode(), digest_size=8).digest()
    return HOLDOUT if int.from_bytes(digest, "big") / 2.0 ** 64 < fraction else DEV


def current_split(db: sqlite_utils.Database) -> Split | None:
    """The split in force, or None when none was set."""
    row = db.execute("SELECT id, fraction, seed, created_at, by FROM holdout_splits ORDER BY id DESC LIMIT 1").fetchone()
    return Split(*row) if row else None


def set_split(db: sqlite_utils.Database, fraction: float, *, seed: int, force: bool = False,
              by: str | None = None) -> dict[str, Any]:
    """Set the dev/holdout rule (leads only). The same fraction and seed again changes nothing;
    another one, once a split exists, raises HoldoutError unless ``force`` (then audited)."""
    require(db, by, "lead", "setting the holdout split")
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction < 1:
        raise HoldoutError(f"--holdout {fraction!r}: give the holdout's share, a number between 0 and 1 (e.g. 0.2)")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise HoldoutError(f"--seed {seed!r}: give a whole number, e.g. 7")
    with store.transaction(db):
        now = current_split(db)
        if now is not None and (now.fraction, now.seed) == (float(fraction), seed):
            return split_counts(db)
        if now is not None and not force:
            raise HoldoutError(f"the split is locked (holdout {now.fraction:g}, seed {now.seed}, set {now.created_at}); "
                               "changing it moves questions you have seen into the holdout: pass --force to change it")
        at = store.now()
        db.execute("INSERT INTO holdout_splits (fraction, seed, created_at, by, forced) VALUES (?, ?, ?, ?, ?)",
                   [float(fraction), seed, at, by, int(now is not None)])
        detail = f"holdout {fraction:g} seed {seed}" + (f" (was {now.fraction:g} seed {now.seed}, forced)" if now else "")
        audit(db.conn, at, by, "holdout split", "split", detail)
    return split_counts(db)


def split_column(db: sqlite_utils.Database, query_ids: Any) -> list[str | None]:
    """The split of each query id (None for every one while no split is set)."""
    now = current_split(db)
    if now is None:
        return [None] * len(query_ids)
    return [split_of(str(q), now.fraction, now.seed) for q in query_ids]


def split_counts(db: sqlite_utils.Database) -> dict[str, Any]:
    """The split in force and how many labeled queries (submitted) are on each side, with the
    number of holdout looks."""
    now = current_split(db)
    ids = [r[0] for r in db.execute("SELECT q.query_id FROM queries q WHERE q.pk IN "
                                    "(SELECT query_pk FROM query_labels WHERE status = 'submitted')")]
    sides = split_column(db, ids)
    return {"split": None if now is None else now._asdict(),
            "labeled": {DEV: sides.count(DEV), HOLDOUT: sides.count(HOLDOUT)} if now else {},
            "looks": looks(db)}


def record_look(db: sqlite_utils.Database, what: str, questions: int, *, by: str | None = None) -> int:
    """Count one look at the holdout (an evaluation on it); returns the number of looks so far."""
    now = current_split(db)
    with store.transaction(db):
        db.execute("INSERT INTO holdout_looks (at, by, split_id, what, questions) VALUES (?, ?, ?, ?, ?)",
                   [store.now(), by if by is not None else local_operator(), now.id if now else None,
                    what[:500], int(questions)])
    return looks(db)["count"]


def looks(db: sqlite_utils.Database) -> dict[str, Any]:
    """How often the holdout was evaluated: count, last time, and the recent looks."""
    rows = db.execute("SELECT at, by, what, questions FROM holdout_looks ORDER BY id DESC LIMIT 20").fetchall()
    count = db.execute("SELECT count(*) FROM holdout_looks").fetchone()[0]
    return {"count": count, "last": rows[0][0] if rows else None,
            "recent": [{"at": a, "by": b, "what": w, "questions": q} for a, b, w, q in rows]}
