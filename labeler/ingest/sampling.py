"""Keeping a uniform sample of a big log: by rate (``0 < sample < 1``: a record is kept when a
hash of its query id and the seed falls under the rate, so a query is kept or dropped the same
way in every file and every re-ingest) or by size (``sample >= 1``: a seeded reservoir of that
many valid records of the file, written when the file has been read). Each ingest records the
records it saw next to those it kept, and ``population`` adds them up for the estimates that
speak for all traffic."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import sqlite_utils

from .. import db as store
from ..errors import LabelerError

_SCALE = float(1 << 64)


def sample_spec(sample: float | None, seed: int) -> dict[str, Any] | None:
    """``{"rate": r, "seed": s}`` or ``{"size": n, "seed": s}`` from the ``--sample`` value."""
    if sample is None:
        return None
    if sample <= 0:
        raise LabelerError(f"--sample {sample}: give a rate between 0 and 1 (e.g. 0.05) or a number of records "
                           "(e.g. 50000)")
    if sample < 1:
        return {"rate": float(sample), "seed": int(seed)}
    if sample != int(sample):
        raise LabelerError(f"--sample {sample}: a number of records is a whole number (or give a rate below 1)")
    return {"size": int(sample), "seed": int(seed)}


def kept_by_rate(query_id: str, rate: float, seed: int) -> bool:
    """Whether the rate sample with ``seed`` keeps ``query_id``: the same answer every time."""
    h = hashlib.blake2b(f"{seed}\x00{query_id}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / _SCALE < rate


class Sampler:
    """Filters the valid rows of one file as they arrive (``take``); a reservoir hands its rows
    over at the end (``rest``, in file order)."""

    def __init__(self, spec: dict[str, Any] | None):
        self.spec = spec
        self.dropped = 0
        self.seen = 0
        self.reservoir: list[Any] = []
        self.rng = random.Random(spec["seed"]) if spec and "size" in spec else None

    @property
    def holds_back(self) -> bool:
        return self.rng is not None

    def take(self, rows: list[Any]) -> list[Any]:
        spec = self.spec
        if spec is None:
            return rows
        if "rate" in spec:
            rate, seed = spec["rate"], spec["seed"]
            kept = [r for r in rows if kept_by_rate(r.query_id, rate, seed)]
            self.dropped += len(rows) - len(kept)
            return kept
        size, res = spec["size"], self.reservoir
        for row in rows:
            self.seen += 1
            if len(res) < size:
                res.append(row)
            else:
                self.dropped += 1
                j = self.rng.randrange(self.seen)  # type: ignore[union-attr]
                if j < size:
                    res[j] = row
        return []

    def rest(self) -> list[Any]:
        rows = sorted(self.reservoir, key=lambda r: r.line)
        self.reservoir = []
        return rows


def record(db: sqlite_utils.Database, ingest_id: int, *, records_seen: int, sample: dict | None,
           redaction: dict | None) -> None:
    """Write what the ingest saw, how it sampled and what it redacted onto its ``ingests`` row."""
    with store.transaction(db):
        db.execute("UPDATE ingests SET records_seen = ?, sample = ?, redaction = ? WHERE id = ?",
                   [records_seen, store.dumps(sample) if sample else None,
                    store.dumps(redaction) if redaction is not None else None, ingest_id])


def population(db: sqlite_utils.Database) -> dict[str, Any]:
    """The traffic the stored log queries stand for: records seen and kept over every log ingest,
    and the ingests that sampled. ``records_seen`` is what all-traffic estimates should speak
    for; ``records_kept`` is what the database holds of it."""
    seen = kept = sampled = ingests = 0
    for counts, records_seen, sample in db.execute(
            "SELECT counts, records_seen, sample FROM ingests WHERE state = 'done' AND kind = 'logs' "
            "AND undone_at IS NULL"):
        c = store.loads(counts) or {}
        records = int(c.get("records", 0))
        out = int(c.get("sampled_out", 0)) + int(c.get("rejected", 0))
        seen += records_seen if records_seen is not None else records
        kept += records - out
        ingests += 1
        sampled += bool(sample)
    return {"records_seen": seen, "records_kept": kept, "ingests": ingests, "sampled_ingests": sampled,
            "kept_fraction": kept / seen if seen else None}
