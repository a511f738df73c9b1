"""The ``sources`` table: the trace stores ``labeler sync`` reads, each with its high-water mark.

A source is a kind (``phoenix``, ``langfuse``, ``langsmith``), a name, the store's URL, a project,
how often to sync, the overlap window re-read on every sync, and an optional sample rate. Its
progress is the high-water mark (``high_water``: spans that started before it, less the overlap,
are settled) and, while a sync runs, that sync's window and the cursor of the next page to read:
a sync killed mid-way resumes at that cursor with the same window. Keys are never stored here (see
``keys``). Adding, changing and removing a source is for leads (``by``: the signed-in account).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

import sqlite_utils

from .. import db as store
from ..accounts.manage import audit, require
from ..errors import SourceError

KINDS = ("phoenix", "langfuse", "langsmith")
DEFAULT_URLS = {"phoenix": "http://127.0.0.1:6006", "langfuse": "https://cloud.langfuse.com",
                "langsmith": "https://api.smith.langchain.com"}
DEFAULT_OVERLAP_S = 300.0  # a trace store can lag minutes behind the spans it is sent
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_COLUMNS = ("name", "kind", "url", "project", "every_s", "overlap_s", "sample", "seed", "high_water",
            "window_start", "window_end", "cursor", "last_sync_at", "last_ok_at", "last_error", "failures",
            "syncs", "spans", "queries_new", "last_new", "created_at", "created_by")


@dataclass
class Source:
    """One configured trace store and its progress (a row of ``sources``)."""

    name: str
    kind: str
    url: str
    project: str | None = None
    every_s: float | None = None
    overlap_s: float = DEFAULT_OVERLAP_S
    sample: float | None = None
    seed: int = 0
    high_water: str | None = None
    window_start: str | None = None
    window_end: str | None = None
    cursor: str | None = None
    last_sync_at: str | None = None
    last_ok_at: str | None = None
    last_error: str | None = None
    failures: int = 0
    syncs: int = 0
    spans: int = 0
    queries_new: int = 0
    last_new: int | None = None
    created_at: str | None = None
    created_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check(kind: str, name: str, url: str | None, project: str | None, every_s: float | None,
           overlap_s: float, sample: float | None) -> str:
    if kind not in KINDS:
        raise SourceError(f"unknown source kind {kind!r}; use one of {', '.join(KINDS)}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise SourceError(f"source name {name!r}: use letters, digits, '.', '_' or '-' (at most 64), e.g. prod")
    url = (url or DEFAULT_URLS[kind]).rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SourceError(f"source {name}: {url!r} is not an http(s) URL; give e.g. {DEFAULT_URLS[kind]}")
    if parts.username or parts.password:
        raise SourceError(f"source {name}: put no user or key in the URL; keys come from the environment "
                          "or .streamlit/secrets.toml and are never stored")
    if kind in ("phoenix", "langsmith") and not project:
        raise SourceError(f"a {kind} source needs --project (the project whose traces to read)")
    if every_s is not None and every_s <= 0:
        raise SourceError(f"--every must be a positive interval, e.g. 5m; got {every_s!r}")
    if overlap_s < 0:
        raise SourceError(f"--overlap must be 0 or more seconds, e.g. 5m; got {overlap_s!r}")
    if sample is not None and not 0 < sample < 1:
        raise SourceError(f"--sample of a source is a rate between 0 and 1, e.g. 0.05; got {sample!r}")
    return url


def add_source(db: sqlite_utils.Database, kind: str, name: str, *, url: str | None = None,
               project: str | None = None, every_s: float | None = None, overlap_s: float = DEFAULT_OVERLAP_S,
               sample: float | None = None, seed: int = 0, by: str | None = None) -> Source:
    """Add the source ``name`` of ``kind`` (leads only). ``url`` defaults to the tool's usual address
    (Phoenix on 127.0.0.1:6006, Langfuse Cloud, LangSmith's API); ``project`` is required for Phoenix
    and LangSmith. ``every_s``: how often ``labeler sync --every`` and the app sync it; ``overlap_s``:
    how far back each sync re-reads for spans the store received late; ``sample``: keep a uniform
    sample of its queries (a rate, hashed on the query id with ``seed``, as ``ingest logs --sample``)."""
    require(db, by, "lead", "adding a source")
    url = _check(kind, name, url, project, every_s, overlap_s, sample)
    at = store.now()
    with store.transaction(db):
        if db.execute("SELECT 1 FROM sources WHERE name = ?", [name]).fetchone():
            raise SourceError(f"a source named {name} exists already; remove it first (labeler source remove {name})")
        db.execute("INSERT INTO sources (name, kind, url, project, every_s, overlap_s, sample, seed, created_at, "
                   "created_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   [name, kind, url, project, every_s, overlap_s, sample, seed, at, by])
        audit(db.conn, at, by, "source_add", name, store.dumps({"kind": kind, "url": url, "project": project}))
    return get_source(db, name)


def list_sources(db: sqlite_utils.Database) -> list[Source]:
    """Every source, by name."""
    rows = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM sources ORDER BY name").fetchall()
    return [Source(*row) for row in rows]


def get_source(db: sqlite_utils.Database, name: str) -> Source:
    row = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM sources WHERE name = ?", [name]).fetchone()
    if row is None:
        known = [s.name for s in list_sources(db)]
        listed = f"; the sources are {', '.join(known)}" if known else "; add one with labeler source add"
        raise SourceError(f"no source named {name!r}{listed}")
    return Source(*row)


def remove_source(db: sqlite_utils.Database, name: str, *, by: str | None = None) -> Source:
    """Remove the source ``name`` (leads only). What its syncs ingested stays (``labeler ingest
    undo`` removes an ingest); what was pushed to it is forgotten (a source added again under the
    name is sent everything on its first push)."""
    require(db, by, "lead", "removing a source")
    source = get_source(db, name)
    at = store.now()
    with store.transaction(db):
        db.execute("DELETE FROM source_skipped WHERE source = ?", [name])
        db.execute("DELETE FROM source_pushes WHERE source = ?", [name])  # a source added again starts afresh
        db.execute("DELETE FROM sources WHERE name = ?", [name])
        audit(db.conn, at, by, "source_remove", name, None)
    return source


def start_window(db: sqlite_utils.Database, name: str, start: str, end: str) -> None:
    """A sync begins reading spans that started in [start, end): remembered, so that a sync killed
    mid-way resumes with the same window and its cursor."""
    with store.transaction(db):
        db.execute("UPDATE sources SET window_start = ?, window_end = ?, cursor = NULL WHERE name = ?",
                   [start, end, name])


def save_cursor(db: sqlite_utils.Database, name: str, cursor: str | None, *, spans: int, new: int) -> None:
    """A page was ingested: the next sync goes on from ``cursor`` (the following page)."""
    with store.transaction(db):
        db.execute("UPDATE sources SET cursor = ?, spans = spans + ?, queries_new = queries_new + ? WHERE name = ?",
                   [cursor, spans, new, name])


def skipped_ids(db: sqlite_utils.Database, name: str, query_ids: list[str]) -> set[str]:
    """Which of ``query_ids`` the source's sample left out before (``add_skipped``)."""
    if not query_ids:
        return set()
    return {q for (q,) in db.execute(
        "SELECT query_id FROM source_skipped WHERE source = ? AND query_id IN (SELECT value FROM json_each(?))",
        [name, store.dumps(query_ids)])}


def add_skipped(db: sqlite_utils.Database, name: str, rows: list[tuple[str, str | None]]) -> None:
    """Remember ``(query_id, started)`` of retrievals the source's sample left out."""
    if rows:
        with store.transaction(db):
            db.conn.executemany("INSERT OR IGNORE INTO source_skipped (source, query_id, started) VALUES (?, ?, ?)",
                                [(name, q, t) for q, t in rows])


def finish_sync(db: sqlite_utils.Database, name: str, high_water: str, new: int, *, forget_before: str) -> None:
    """Every page of the window was read: the high-water mark moves on and the window is closed;
    the left-out retrievals that started before ``forget_before`` (no sync reads them again) go."""
    at = store.now()
    with store.transaction(db):
        db.execute("DELETE FROM source_skipped WHERE source = ? AND started < ?", [name, forget_before])
        db.execute("UPDATE sources SET high_water = ?, window_start = NULL, window_end = NULL, cursor = NULL, "
                   "last_sync_at = ?, last_ok_at = ?, last_error = NULL, failures = 0, syncs = syncs + 1, "
                   "last_new = ? WHERE name = ?", [high_water, at, at, new, name])


def record_error(db: sqlite_utils.Database, name: str, error: str, new: int) -> None:
    """A sync failed (after its retries): kept as the source's last error; its window and cursor stay,
    so the next sync resumes where this one stopped."""
    with store.transaction(db):
        db.execute("UPDATE sources SET last_sync_at = ?, last_error = ?, failures = failures + 1, last_new = ? "
                   "WHERE name = ?", [store.now(), error, new, name])
