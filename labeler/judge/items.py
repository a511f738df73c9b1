"""Which items a judge run covers: the (query, chunk) pairs or answers of each set (``ON_SETS``),
and each one's text as a ``JudgeItem``."""

from __future__ import annotations

import json

import numpy as np
import sqlite_utils

from .. import db as store
from ..errors import JudgeError
from ..retrievers import default_retriever
from .registry import ANSWER_FIELDS, Judge, JudgeItem, get_judge

ON_SETS = ("labeled", "unlabeled", "all")


_SUBMITTED_PAIRS = ("SELECT DISTINCT r.query_pk, r.doc_pk FROM relevance_labels r JOIN query_labels l "
                    "ON l.query_pk = r.query_pk AND l.annotator = r.annotator AND l.status = 'submitted'")


# every logged query's retrieved chunks, labeled or not: the same rule for every query, as the
# all-traffic estimates need (never the chunks annotators added by search)
_TRAFFIC_PAIRS = ("SELECT DISTINCT t.query_pk, t.doc_pk FROM retrievals t JOIN queries q ON q.pk = t.query_pk "
                  "WHERE q.origin = 'log' AND {visible} ORDER BY 1, 2")


def _pair_keys(db: sqlite_utils.Database, on: str) -> list[tuple[int, int]]:
    if on == "all":
        return db.execute(_TRAFFIC_PAIRS.format(visible=store.visible("t"))).fetchall()
    if on == "labeled":
        return db.execute(_SUBMITTED_PAIRS + " ORDER BY 1, 2").fetchall()
    return db.execute(
        f"SELECT DISTINCT t.query_pk, t.doc_pk FROM retrievals t WHERE {store.visible('t')} AND "
        "NOT EXISTS (SELECT 1 FROM relevance_labels r "
        "JOIN query_labels l ON l.query_pk = r.query_pk AND l.annotator = r.annotator AND l.status = 'submitted' "
        "WHERE r.query_pk = t.query_pk AND r.doc_pk = t.doc_pk) ORDER BY 1, 2").fetchall()


def _answer_keys(db: sqlite_utils.Database, kind: str, on: str) -> list[tuple[int, int]]:
    if on == "all":
        return db.execute(f"SELECT q.pk, 0 FROM queries q WHERE q.origin = 'log' AND q.answer IS NOT NULL AND "
                          f"{store.visible('q')} ORDER BY q.pk").fetchall()
    column = ANSWER_FIELDS[kind]  # a fixed column name, never user input
    labeled = (f"SELECT 1 FROM query_labels l WHERE l.query_pk = q.pk AND l.status = 'submitted' "
               f"AND l.{column} IS NOT NULL")
    return db.execute(f"SELECT q.pk, 0 FROM queries q WHERE q.answer IS NOT NULL AND {store.visible('q')} AND "
                      f"{'' if on == 'labeled' else 'NOT '}EXISTS ({labeled}) ORDER BY q.pk").fetchall()


def load_items(db: sqlite_utils.Database, judge: Judge, keys: list[tuple[int, int]],
               max_chunks: int = 10) -> list[JudgeItem]:
    """The ``JudgeItem`` of each (query pk, doc pk) key (doc pk 0: the query's answer), in key order."""
    packed = json.dumps([[q, d] for q, d in keys])
    if judge.unit == "pair":
        rows = db.execute(
            "SELECT q.pk, d.pk, q.question, d.text, d.title FROM json_each(?) k "
            "JOIN queries q ON q.pk = json_extract(k.value, '$[0]') "
            "JOIN documents d ON d.pk = json_extract(k.value, '$[1]') ORDER BY k.key", [packed]).fetchall()
        return [JudgeItem(q, d, question, text=text, title=title) for q, d, question, text, title in rows]
    items = {q: JudgeItem(q, 0, question, answer=answer) for q, question, answer in db.execute(
        "SELECT q.pk, q.question, q.answer FROM json_each(?) k JOIN queries q ON q.pk = json_extract(k.value, '$[0]') "
        "ORDER BY k.key", [packed])}
    if judge.kind == "faithfulness":
        for q, title, text in db.execute(
                "SELECT r.query_pk, d.title, d.text FROM retrievals r JOIN documents d ON d.pk = r.doc_pk "
                "WHERE r.retriever = ? AND r.rank <= ? AND r.query_pk IN "
                "(SELECT json_extract(value, '$[0]') FROM json_each(?)) ORDER BY r.query_pk, r.rank",
                [default_retriever(db), max_chunks, packed]):
            items[q].chunks.append((title, text))
    return list(items.values())


def select_items(db: sqlite_utils.Database, judge: str | Judge, *, on: str = "labeled", limit: int | None = None,
                 seed: int = 0, max_chunks: int = 10) -> list[JudgeItem]:
    """The items a run of ``judge`` covers: ``on="labeled"`` = pairs (or answers) with a submitted
    human label, to calibrate; ``"unlabeled"`` = retrieved pairs (answers) without one, to pre-label;
    ``"all"`` = every logged query's retrieved pairs (answers), labeled or not, for the all-traffic
    estimates (``labeler.estimate``).
    ``limit`` takes a seeded random sample of that many, kept in key order."""
    j = judge if isinstance(judge, Judge) else get_judge(judge)
    if on not in ON_SETS:
        raise JudgeError(f"on={on!r} is unknown; use 'labeled' (calibrate), 'unlabeled' (pre-label) or "
                         "'all' (all traffic, for the all-traffic estimates)")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise JudgeError(f"limit={limit!r} must be a positive whole number")
    keys = _pair_keys(db, on) if j.unit == "pair" else _answer_keys(db, j.kind, on)
    if limit is not None and limit < len(keys):
        picked = np.sort(np.random.default_rng(seed).choice(len(keys), size=limit, replace=False))
        keys = [keys[i] for i in picked]
    return load_items(db, j, keys, max_chunks)
