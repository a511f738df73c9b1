"""The human-labeled (query, chunk) pairs that ``labeler judge stress`` and ``labeler judge align``
work on, by side of the locked dev/holdout split (``labeler.holdout``): their consolidated grades
and query ids, read side by side so the holdout's labels are read only when asked for."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import sqlite_utils

from ..holdout import DEV, HOLDOUT, current_split, split_of


@dataclass
class LabeledPairs:
    """Pairs of one side: ``keys`` (query pk, doc pk) in key order, their golden ``grades``, and the
    query id of each pair (what the split and the seeded sub-splits hash)."""

    keys: list[tuple[int, int]]
    grades: np.ndarray
    query_ids: list[str]

    def __len__(self) -> int:
        return len(self.keys)

    def take(self, mask: np.ndarray) -> LabeledPairs:
        idx = np.flatnonzero(mask)
        return LabeledPairs([self.keys[i] for i in idx], self.grades[idx], [self.query_ids[i] for i in idx])


def labeled_pairs(db: sqlite_utils.Database, side: str = DEV, *, grades: bool = True) -> LabeledPairs:
    """The consolidated human grades of the submitted pairs on ``side`` (``dev`` or ``holdout``).

    With no split set every query is dev (and the holdout is empty). Holdout grades are read only
    when ``side`` is ``holdout`` and ``grades``: callers that count their looks ask for them once;
    ``grades=False`` gives the pairs alone (their grades all -1), e.g. to estimate what grading them costs."""
    from ..labels.consolidate import golden_labels

    split = current_split(db)
    if side not in (DEV, HOLDOUT):
        raise ValueError(f"side {side!r}: use 'dev' or 'holdout'")
    ids = dict(db.execute("SELECT pk, query_id FROM queries WHERE pk IN "
                          "(SELECT query_pk FROM query_labels WHERE status = 'submitted')").fetchall())
    wanted = [pk for pk, qid in ids.items()
              if (DEV if split is None else split_of(str(qid), split.fraction, split.seed)) == side]
    if not wanted:
        return LabeledPairs([], np.zeros(0, dtype=np.int64), [])
    if not grades:
        keys = db.execute(
            "SELECT DISTINCT r.query_pk, r.doc_pk FROM relevance_labels r JOIN query_labels l ON l.query_pk = "
            "r.query_pk AND l.annotator = r.annotator AND l.status = 'submitted' WHERE r.query_pk IN "
            "(SELECT value FROM json_each(?)) ORDER BY 1, 2", [json.dumps([int(p) for p in wanted])]).fetchall()
        return LabeledPairs(keys, np.full(len(keys), -1, dtype=np.int64), [str(ids[q]) for q, _ in keys])
    golden = golden_labels(db, query_pks=wanted).sort_values(["query_pk", "doc_pk"])
    keys = list(zip(golden["query_pk"].astype(int), golden["doc_pk"].astype(int), strict=True))
    return LabeledPairs(keys, golden["grade"].to_numpy(np.int64), [str(ids[q]) for q, _ in keys])
