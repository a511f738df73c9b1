"""Reading a report's inputs: the small parameterized SQL helpers, and the reuse of what was read
while nothing was committed to the database file."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import sqlite_utils

from .. import db as store
from ..core.cache import LRU, data_token
from ..core.times import When, stamp
from ..labels.consolidate import golden_labels
from ..retrievers import default_retriever, logged_retrievers
from .specs import ORIGINS, ReportError
from .state import Measured


def json_ints(values: Iterable[int]) -> str:
    return json.dumps([int(v) for v in values])


def read_run(db: sqlite_utils.Database, retriever: str, query_pks: np.ndarray) -> pd.DataFrame:
    """The ranking ``retriever`` logged for the given queries: columns query, doc, rank (int64)."""
    cursor = db.execute(
        "SELECT r.query_pk, r.doc_pk, r.rank FROM retrievals r "
        f"WHERE r.query_pk IN (SELECT value FROM json_each(?)) AND r.retriever = ? AND {store.visible('r')} "
        "ORDER BY r.query_pk, r.rank", [json_ints(query_pks), retriever])
    flat = np.fromiter(itertools.chain.from_iterable(cursor), dtype=np.int64).reshape(-1, 3)
    return pd.DataFrame({"query": flat[:, 0], "doc": flat[:, 1], "rank": flat[:, 2]})


def logged_queries(db: sqlite_utils.Database, retriever: str, query_pks: Iterable[int]) -> np.ndarray:
    """The given queries that ``retriever`` ran: it logged a ranking for them (an ingested list,
    possibly empty, or retrieval rows). The others (e.g. imported questions production never saw)
    are left out of its metrics rather than scored 0. Sorted pks."""
    wanted = json_ints(query_pks)
    found = {r[0] for r in db.execute(
        "SELECT query_pk FROM query_versions r WHERE retriever = ? AND query_pk IN (SELECT value FROM json_each(?)) "
        f"AND {store.visible('r')} UNION SELECT DISTINCT query_pk FROM retrievals r "
        f"WHERE query_pk IN (SELECT value FROM json_each(?)) AND retriever = ? AND {store.visible('r')}",
        [retriever, wanted, wanted, retriever])}
    return np.array(sorted(found), dtype=np.int64)


def _read_queries(db: sqlite_utils.Database, query_pks: np.ndarray) -> pd.DataFrame:
    rows = db.execute(
        "SELECT pk, query_id, origin, review_state FROM queries WHERE pk IN (SELECT value FROM json_each(?)) "
        "ORDER BY pk", [json_ints(query_pks)]).fetchall()
    frame = pd.DataFrame(rows, columns=["query_pk", "query_id", "origin", "review_state"])
    # plain object columns: patched with numpy, no Arrow conversions
    return frame.astype({"query_id": object, "origin": object, "review_state": object})


def retrievers(db: sqlite_utils.Database, *, reuse: bool = False) -> list[str]:
    """The retrievers that logged rankings, sorted (:func:`labeler.retrievers.logged_retrievers`).
    ``reuse``: answer from memory while no file was ingested and no synthetic question generated
    (the only writes that add rankings; a full scan otherwise)."""
    token = data_token(db) if reuse else None
    key = None
    if token is not None:
        synth = db.execute("SELECT count(*), max(id) FROM synth_runs").fetchone()
        key = (token[0], token[1], structure_of(db), tuple(synth), "retrievers")
    return list(REPORTS.get(key, lambda: tuple(logged_retrievers(db))))


def resolve_retriever(db: sqlite_utils.Database, retriever: str | None = None, *, reuse: bool = False) -> str:
    """``retriever`` if it logged rankings, else (None) the default retriever: the only one, else
    ``production``; raises RetrieverError naming the logged ones otherwise (see
    :func:`labeler.retrievers.default_retriever`). ``reuse`` as in :func:`retrievers`."""
    if retriever is not None and (not isinstance(retriever, str) or not retriever.strip()):
        raise ReportError(f"retriever {retriever!r} is empty; give a retriever name, or none for the default one")
    return default_retriever(db, retriever, known=retrievers(db, reuse=reuse))


def check_origin(origin: str | None) -> str | None:
    if origin is not None and origin not in ORIGINS:
        raise ReportError(f"origin {origin!r} is unknown; use one of: {', '.join(ORIGINS)}")
    return origin


def answer_judgments(db: sqlite_utils.Database, column: str, *, origin: str | None, annotator: str | None,
                      since: When, until: When) -> dict[str, int]:
    """Counts of yes/partly/no in ``column`` of submitted query labels, with the report's filters."""
    if column not in ("answer_faithful", "answer_relevant"):
        raise ReportError(f"unknown answer judgment {column!r}")
    where, params = ["l.status = 'submitted'", f"l.{column} IS NOT NULL",
                     "(q.origin != 'synthetic' OR q.review_state = 'accepted')"], []
    for clause, value in (("q.origin = ?", origin), ("l.annotator = ?", annotator),
                          ("l.submitted_at >= ?", None if since is None else stamp(since)),
                          ("l.submitted_at < ?", None if until is None else stamp(until))):
        if value is not None:
            where.append(clause)
            params.append(value)
    counts = dict.fromkeys(("yes", "partly", "no"), 0)
    # column is one of two fixed names checked above, never user text
    for value, n in db.execute(f"SELECT l.{column}, count(*) FROM query_labels l JOIN queries q ON q.pk = l.query_pk "
                               f"WHERE {' AND '.join(where)} GROUP BY 1", params):
        counts[value] = counts.get(value, 0) + n
    return counts


# --- reuse of loaded inputs while the database is unchanged ---------------------------------------

_LOADED = LRU(4)
REPORTS = LRU(16)  # whole reports by their inputs' key (report.core builds them)


def clear_cache() -> None:
    """Forget every reused input and report (the next call reads the database again)."""
    _LOADED.clear()
    REPORTS.clear()
    with _PREVIOUS_LOCK:
        _PREVIOUS.clear()


@dataclass
class _Loaded:
    qrels: pd.DataFrame  # query, doc, grade: golden labels of queries that count
    queries: pd.DataFrame  # query_pk, query_id, origin (sorted by pk)
    runs: dict[str, tuple[pd.DataFrame, np.ndarray]] = field(default_factory=dict)  # run, pks it ran
    watermark: int = 0  # the last label_events id already reflected
    structure: tuple = ()  # what a label event does not record: ingests and settings
    measured: dict[tuple[str, int], Measured] = field(default_factory=dict)  # (retriever, threshold)

    def measure(self, retriever: str, threshold: int) -> Measured:
        """The per-query values and bootstrap sums of ``retriever`` (its run must be loaded)."""
        key = (retriever, threshold)
        if key not in self.measured:
            run, ran = self.runs[retriever]
            self.measured[key] = Measured(run, self.qrels, self.queries, ran, threshold)
        return self.measured[key]


def _replace_queries(frame: pd.DataFrame, changed: np.ndarray, fresh: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """``frame`` (sorted by ``by``, the first being the query column) with the rows of the ``changed``
    queries replaced by ``fresh`` (their rows as re-read): the untouched stretches of ``frame`` and
    the fresh rows are concatenated in order, one copy per column and no sort of the whole table."""
    key = by[0]
    changed = np.unique(np.asarray(changed))
    fresh = fresh.sort_values(by, ignore_index=True)
    q, fq = frame[key].to_numpy(), fresh[key].to_numpy()
    lo, hi = np.searchsorted(q, changed, "left"), np.searchsorted(q, changed, "right")
    flo, fhi = np.searchsorted(fq, changed, "left"), np.searchsorted(fq, changed, "right")
    pieces: list[tuple[bool, int, int]] = []  # (from fresh, start, stop)
    previous = 0
    for a, b, fa, fb in zip(lo.tolist(), hi.tolist(), flo.tolist(), fhi.tolist(), strict=True):
        pieces.append((False, previous, a))
        pieces.append((True, fa, fb))
        previous = b
    pieces.append((False, previous, len(frame)))
    pieces = [p for p in pieces if p[2] > p[1]]

    def column(c: str) -> Any:
        old, new = frame[c], fresh[c]
        if isinstance(old.dtype, np.dtype):
            a, b = old.to_numpy(), new.to_numpy().astype(old.dtype, copy=False)
            parts = [(b if from_fresh else a)[i:j] for from_fresh, i, j in pieces]
            return np.concatenate(parts) if parts else a[:0]
        parts = [(new if from_fresh else old).iloc[i:j] for from_fresh, i, j in pieces]
        return pd.concat(parts, ignore_index=True).astype(old.dtype) if parts else old.iloc[:0].reset_index(drop=True)

    return pd.DataFrame({c: column(c) for c in frame.columns}, copy=False)  # the columns are new arrays


# a refresh patches at most this many changed queries; more and it reloads everything
MAX_PATCHED = 5000


def structure_of(db: sqlite_utils.Database) -> tuple:
    """Changes that label_events do not record but that change a report: ingests and settings."""
    return (tuple(db.execute("SELECT count(*), max(id) FROM ingests WHERE state = 'done'").fetchone()),
            tuple(tuple(r) for r in db.execute("SELECT key, value FROM settings ORDER BY key")))


def _watermark(db: sqlite_utils.Database) -> int:
    return int(db.execute("SELECT coalesce(max(id), 0) FROM label_events").fetchone()[0])


def _golden_part(db: sqlite_utils.Database, annotator: str | None, since: When, until: When,
                 query_pks: Any = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    golden = golden_labels(db, annotator=annotator, since=since, until=until, query_pks=query_pks)
    pks = golden["query_pk"].unique()
    queries = _read_queries(db, pks)
    # synthetic questions count only once accepted in review
    counted = queries[(queries["origin"] != "synthetic") | (queries["review_state"] == "accepted")]
    queries = counted.drop(columns="review_state").reset_index(drop=True)
    if len(counted) < len(pks):
        golden = golden[golden["query_pk"].isin(queries["query_pk"])]
    qrels = pd.DataFrame({"query": golden["query_pk"].to_numpy(np.int64), "doc": golden["doc_pk"].to_numpy(np.int64),
                          "grade": golden["grade"].to_numpy(np.int64)})
    return qrels, queries


def _load(db: sqlite_utils.Database, annotator: str | None, since: When, until: When) -> _Loaded:
    # read the watermark first: an event committed meanwhile is simply applied again next time
    watermark, structure = _watermark(db), structure_of(db)
    qrels, queries = _golden_part(db, annotator, since, until)
    return _Loaded(qrels, queries, watermark=watermark, structure=structure)


def _refresh(db: sqlite_utils.Database, old: _Loaded, annotator: str | None, since: When,
             until: When) -> _Loaded | None:
    """``old`` brought up to date by re-reading only the queries with newer label events (a label,
    a status, an adjudication, a review, an import: every labeler write that changes a golden label
    logs one); None when a full reload is needed (an ingest, a settings change, or many changes).
    A label edited with raw SQL, bypassing labeler, is not seen until the next full reload."""
    watermark, structure = _watermark(db), structure_of(db)
    if structure != old.structure or watermark < old.watermark:
        return None
    changed = np.array(sorted({r[0] for r in db.execute(
        "SELECT DISTINCT query_pk FROM label_events WHERE id > ?", [old.watermark])}), dtype=np.int64)
    if len(changed) > MAX_PATCHED:
        return None
    qrels, queries = _golden_part(db, annotator, since, until, query_pks=changed)
    new = _Loaded(_replace_queries(old.qrels, changed, qrels, ["query", "doc"]),
                  _replace_queries(old.queries, changed, queries, ["query_pk"]),
                  watermark=watermark, structure=structure)
    counted = queries["query_pk"].to_numpy(np.int64)
    for retriever, (run, ran) in old.runs.items():
        fresh = read_run(db, retriever, counted)
        new.runs[retriever] = (
            _replace_queries(run, changed, fresh, ["query", "rank"]),
            np.union1d(ran[~np.isin(ran, changed)], logged_queries(db, retriever, counted)).astype(np.int64))
    for (retriever, threshold), measured in old.measured.items():
        if retriever in new.runs:
            run, ran = new.runs[retriever]
            new.measured[(retriever, threshold)] = measured.patched(run, new.qrels, new.queries, ran, changed)
    return new


def _forget_older(token: tuple) -> None:
    """Drop what was loaded or computed under an older version of the same database file: it is
    never asked for again, and at 100k labeled queries each copy holds about 100 MB."""

    def stale(key: Any) -> bool:
        first = key[0] if isinstance(key, tuple) and key else None
        return isinstance(first, tuple) and first[:2] == token[:2] and first != token

    _LOADED.evict(stale)
    REPORTS.evict(stale)


_PREVIOUS: dict[tuple, tuple[Any, _Loaded]] = {}  # (file, filters) -> the last token and what it loaded
_PREVIOUS_LOCK = threading.Lock()


def _inputs(db: sqlite_utils.Database, token: tuple | None, retriever: str, annotator: str | None,
            since: When, until: When) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, np.ndarray]:
    loaded = loaded_inputs(db, token, retriever, annotator, since, until)
    run, ran = loaded.runs[retriever]
    return loaded.qrels, run, loaded.queries, ran


def loaded_inputs(db: sqlite_utils.Database, token: tuple | None, retriever: str, annotator: str | None,
                   since: When, until: When) -> _Loaded:
    """The loaded golden set for these filters, with ``retriever``'s run, reused or refreshed."""
    filters = (annotator, None if since is None else stamp(since), None if until is None else stamp(until))
    key = None if token is None else (token, *filters)

    def make() -> _Loaded:
        if token is None:
            return _load(db, annotator, since, until)
        slot = (token[0], token[1], *filters)
        with _PREVIOUS_LOCK:
            previous = _PREVIOUS.get(slot)
        loaded = _refresh(db, previous[1], annotator, since, until) if previous is not None else None
        if loaded is None:
            loaded = _load(db, annotator, since, until)
        with _PREVIOUS_LOCK:
            _PREVIOUS[slot] = (token, loaded)
        _forget_older(token)
        return loaded

    loaded = _LOADED.get(key, make)
    if retriever not in loaded.runs:
        pks = loaded.queries["query_pk"].to_numpy()
        loaded.runs[retriever] = (read_run(db, retriever, pks), logged_queries(db, retriever, pks))
    return loaded
