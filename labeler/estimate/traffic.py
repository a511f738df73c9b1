"""The inputs of an all-traffic estimate: the traffic a judge run covered, each query's metric values
from the judge's grades and, for the human-labeled queries, from the consolidated human grades.

Both go through :func:`labeler.metrics.per_query` with the retriever's logged ranking: a chunk the
judge did not grade (or whose call failed) counts as the human path counts an unjudged chunk, i.e.
as grade 0, and a query without a relevant chunk has no value (the estimates are ratios, see
:mod:`labeler.estimate.ppi`). The judge's part of 100k queries (1M grades; read as one text per
column, :func:`int_columns`) takes about twice what SQLite needs to hand the rows over, and is kept in
memory while the run, the ingests and the settings stay the same; the human part is read each time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import sqlite_utils

from .. import db as store
from ..core.cache import LRU, data_token
from ..errors import JudgeError
from ..judge.store import get_run
from ..labels.consolidate import golden_labels
from ..metrics.evaluate import per_query
from ..report.load import resolve_retriever, structure_of
from .ppi import EstimateError

DEFAULT_SPECS = ("recall@5", "recall@10", "P@5", "P@10", "hit@5", "hit@10", "mrr", "ndcg@5", "ndcg@10")
ALL_TRAFFIC_HINT = "labeler judge run --judge relevance.v1 --on all"


@dataclass
class JudgedTraffic:
    """The judge's view of every traffic query a run covered (``pks`` sorted): per spec the value
    (NaN without a relevant chunk), whether the judge found a relevant chunk, and ``border``: how
    many of its grades sit one step either side of the threshold (where one grade of error flips
    relevance; the active design's uncertainty feature)."""

    run_id: int
    retriever: str
    threshold: int
    pks: np.ndarray
    values: dict[str, np.ndarray]
    relevant: np.ndarray
    border: np.ndarray
    run: pd.DataFrame  # the retriever's ranking of the population: query, doc, rank
    n_failed: int  # pairs whose judge call failed or is still pending (counted as unjudged)
    _derived: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False, compare=False)

    def numerators(self, spec: str) -> np.ndarray:
        """Per query the judge's value of ``spec`` where it found a relevant chunk, else 0 (the
        numerator of the ratio estimates); computed once per load (read-only), so a rerun after a
        new human label only redoes the human part."""
        key = ("numerators", spec)
        if key not in self._derived:
            out = np.where(self.relevant, np.nan_to_num(self.values[spec]), 0.0)
            out.flags.writeable = False
            self._derived[key] = out
        return self._derived[key]

    def judge_mean(self, spec: str) -> float | None:
        """The judge-only mean of ``spec`` over the queries where it found a relevant chunk."""
        key = ("mean", spec)
        if key not in self._derived:
            v = self.values[spec][self.relevant]
            self._derived[key] = float(v.mean()) if v.size else None
        return self._derived[key]


_JUDGED = LRU(4)


def relevance_run(db: sqlite_utils.Database, run_id: int | None):
    """The judge run to estimate with: ``run_id`` (a relevance run over all traffic), else None is
    an error naming the command that makes one."""
    if run_id is None:
        raise EstimateError(f"no judge run over all traffic was given; make one with `{ALL_TRAFFIC_HINT}` "
                            "and pass its id as --judge-run")
    try:
        run = get_run(db, run_id)
    except JudgeError as e:
        raise EstimateError(f"{e}; an all-traffic estimate needs a run made by `{ALL_TRAFFIC_HINT}`") from None
    if run.kind != "relevance":
        raise EstimateError(f"judge run {run_id} is a {run.kind} run; the retrieval metrics need a relevance run "
                            f"over all traffic (`{ALL_TRAFFIC_HINT}`)")
    if run.on_set != "all":
        raise EstimateError(f"judge run {run_id} covered the {run.on_set} items only; an all-traffic estimate "
                            f"needs every query judged by the same rule: `{ALL_TRAFFIC_HINT}`")
    return run


def judged_traffic(db: sqlite_utils.Database, run_id: int | None, specs=DEFAULT_SPECS, *,
                   retriever: str | None = None) -> JudgedTraffic:
    """The judge's per-query values of ``specs`` over the traffic run ``run_id`` covered (kept in
    memory while nothing it depends on changed)."""
    run = relevance_run(db, run_id)
    retriever = resolve_retriever(db, retriever, reuse=True)
    threshold = int(store.get_setting(db, "threshold"))
    token = data_token(db)
    key = None
    if token is not None:
        state = db.execute("SELECT status, done, failed, finished_at FROM judge_runs WHERE id = ?",
                           [run.id]).fetchone()
        key = (token[:2], run.id, tuple(state), structure_of(db), retriever, threshold, tuple(specs))
    return _JUDGED.get(key, lambda: _load_judged(db, run.id, list(specs), retriever, threshold))


def int_columns(db: sqlite_utils.Database, columns: Sequence[str], source: str,
                params: Sequence[Any] = ()) -> list[np.ndarray]:
    """The integer ``columns`` (SQL expressions, never NULL) of ``SELECT ... FROM source`` as int64
    arrays. SQLite hands each column over as one comma-separated text (``group_concat``) that numpy
    parses in C: a handful of Python objects instead of one tuple and a few ints per row, which is
    what made reading a million rows slow. One scan feeds every aggregate, so the i-th values of the
    columns come from the same row; the row order is the scan's (sort the arrays if it matters).
    SQLite's text limit (1 GB by default) caps a column at about 100M values."""
    sql = "SELECT " + ", ".join(f"group_concat({c})" for c in columns) + " FROM " + source
    row = db.execute(sql, list(params)).fetchone()
    if row is None or row[0] is None:
        return [np.zeros(0, dtype=np.int64) for _ in columns]
    return [np.fromstring(text, dtype=np.int64, sep=",") for text in row]


def _sorted_by(first: np.ndarray, second: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
    """``first``, ``second`` and ``arrays`` ordered by (first, second); no sort when they already
    are (a scan in primary-key order)."""
    d1, d2 = np.diff(first), np.diff(second)
    if ((d1 > 0) | ((d1 == 0) & (d2 >= 0))).all():
        return [first, second, *arrays]
    order = np.lexsort((second, first))
    return [a[order] for a in (first, second, *arrays)]


def _load_judged(db: sqlite_utils.Database, run_id: int, specs: list[str], retriever: str,
                 threshold: int) -> JudgedTraffic:
    # one pass over the run's rows (1M at 100k queries), in the table's key order (query, chunk)
    q, doc, grade = int_columns(db, ["query_pk", "doc_pk",
                                     "CASE WHEN status = 'ok' THEN coalesce(grade, -1) ELSE -2 END"],
                                "judge_labels WHERE run_id = ?", [run_id])
    q, doc, grade = _sorted_by(q, doc, grade)
    (logged,) = int_columns(db, ["pk"], "queries WHERE origin = 'log'")
    pks = np.intersect1d(q[np.r_[True, q[1:] != q[:-1]]] if q.size else q, logged, assume_unique=True)
    if pks.size == 0:
        raise EstimateError(f"judge run {run_id} judged no logged query; ingest logs and run `{ALL_TRAFFIC_HINT}`")
    keep = np.isin(q, pks)
    if not keep.all():
        q, doc, grade = q[keep], doc[keep], grade[keep]
    n_failed = int((grade == -2).sum())
    ok = grade >= 0
    qrels = pd.DataFrame({"query": q[ok], "doc": doc[ok], "grade": grade[ok]})
    ranking = _ranking(db, retriever, pks)
    values, relevant = per_query_values(ranking, qrels, pks, specs, threshold)
    near = ok & ((grade == threshold - 1) | (grade == threshold))
    border = np.bincount(np.searchsorted(pks, q[near]), minlength=pks.size).astype(np.int64)
    return JudgedTraffic(run_id, retriever, threshold, pks, values, relevant, border, ranking, n_failed)


def _ranking(db: sqlite_utils.Database, retriever: str, pks: np.ndarray) -> pd.DataFrame:
    """``retriever``'s logged ranking of the queries ``pks`` (sorted): query, doc, rank, sorted by
    (query, rank). Reads the retriever's whole ranking and keeps the population's rows (a filter in
    numpy is cheaper than handing SQLite 100k ids)."""
    q, doc, rank = int_columns(db, ["r.query_pk", "r.doc_pk", "r.rank"],
                               f"retrievals r WHERE r.retriever = ? AND {store.visible('r')}", [retriever])
    q, rank, doc = _sorted_by(q, rank, doc)
    keep = np.isin(q, pks)
    if not keep.all():
        q, doc, rank = q[keep], doc[keep], rank[keep]
    return pd.DataFrame({"query": q, "doc": doc, "rank": rank})


def per_query_values(ranking: pd.DataFrame, qrels: pd.DataFrame, pks: np.ndarray, specs: list[str],
                     threshold: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per spec, the value of every query in ``pks`` (sorted) through :func:`labeler.metrics.per_query`
    (NaN without a relevant chunk; a query with no graded chunk has none), and whether it has one."""
    per = per_query(ranking, qrels, specs, threshold=threshold) if len(qrels) else None
    values: dict[str, np.ndarray] = {}
    relevant = np.zeros(pks.size, dtype=bool)
    if per is None:
        return {s: np.full(pks.size, np.nan) for s in specs}, relevant
    at = np.searchsorted(pks, per.index.to_numpy(np.int64))
    relevant[at] = per["n_relevant"].to_numpy() > 0
    for s in specs:
        col = np.full(pks.size, np.nan)
        col[at] = per[s].to_numpy(float)
        values[s] = col
    return values, relevant


def human_golden(db: sqlite_utils.Database, labeled: np.ndarray) -> pd.DataFrame:
    """The consolidated human grades of the ``labeled`` queries as qrels: query, doc, grade."""
    golden = golden_labels(db, query_pks=[int(p) for p in labeled])
    return pd.DataFrame({"query": golden["query_pk"].to_numpy(np.int64), "doc": golden["doc_pk"].to_numpy(np.int64),
                         "grade": golden["grade"].to_numpy(np.int64)})


def _rows_of(frame: pd.DataFrame, pks: np.ndarray) -> pd.DataFrame:
    """The rows of a table sorted by ``query`` that belong to the sorted ``pks`` (binary search)."""
    q = frame["query"].to_numpy()
    lo, hi = np.searchsorted(q, pks, "left"), np.searchsorted(q, pks, "right")
    counts = hi - lo
    starts = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return frame.iloc[starts + np.arange(int(counts.sum()))]


def human_values(db: sqlite_utils.Database, judged: JudgedTraffic, labeled: np.ndarray, specs: list[str],
                 golden: pd.DataFrame | None = None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The consolidated human values of the ``labeled`` queries (sorted pks, all in the population):
    per spec an array aligned with ``labeled``, and whether each has a relevant chunk. ``golden``:
    :func:`human_golden` of these queries or more, when already read."""
    if labeled.size == 0:
        return {s: np.zeros(0) for s in specs}, np.zeros(0, dtype=bool)
    qrels = human_golden(db, labeled) if golden is None else golden[np.isin(golden["query"].to_numpy(), labeled)]
    return per_query_values(_rows_of(judged.run, labeled), qrels, labeled, specs, judged.threshold)


def submitted_pks(db: sqlite_utils.Database, pks: np.ndarray) -> np.ndarray:
    """The queries among ``pks`` with a submitted label (sorted)."""
    found = np.fromiter((r[0] for r in db.execute(
        "SELECT DISTINCT query_pk FROM query_labels WHERE status = 'submitted'")), dtype=np.int64)
    return np.intersect1d(found, pks)
