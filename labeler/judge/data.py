"""What agreement and the Judge page read: a run's grades next to the human labels, the
retrievers' lists, the disagreement browser and its tags, and a cache key of all of it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlite_utils

from .. import db as store
from ..accounts.manage import require
from ..errors import JudgeError
from .registry import ANSWER_FIELDS, VERDICTS
from .store import get_run

if TYPE_CHECKING:
    import pandas as pd

TAGS = ("judge_wrong", "human_wrong", "rubric_ambiguous")


# --- reading runs for agreement ------------------------------------------------------------------------------

def run_grades(db: sqlite_utils.Database, run_id: int) -> pd.DataFrame:
    """The judged items of a run with a grade: query_pk, doc_pk, grade, score."""
    import pandas as pd

    return pd.DataFrame(db.execute(
        "SELECT query_pk, doc_pk, grade, score FROM judge_labels WHERE run_id = ? AND status = 'ok' "
        "AND grade IS NOT NULL ORDER BY query_pk, doc_pk", [run_id]).fetchall(),
        columns=["query_pk", "doc_pk", "grade", "score"]).astype({"query_pk": "int64", "doc_pk": "int64",
                                                                   "grade": "int64", "score": "float64"})


def human_grades(db: sqlite_utils.Database, *, overlapped: bool = False) -> pd.DataFrame:
    """Every submitted per-annotator grade: query_pk, doc_pk, annotator, grade (``overlapped``: only
    of queries that two or more annotators submitted, the material of the human-human ceiling)."""
    import pandas as pd

    where = (" WHERE r.query_pk IN (SELECT query_pk FROM query_labels WHERE status = 'submitted' "
             "GROUP BY query_pk HAVING count(*) >= 2)") if overlapped else ""
    return pd.DataFrame(db.execute(
        "SELECT r.query_pk, r.doc_pk, r.annotator, r.grade FROM relevance_labels r JOIN query_labels l "
        "ON l.query_pk = r.query_pk AND l.annotator = r.annotator AND l.status = 'submitted'" + where).fetchall(),
        columns=["query_pk", "doc_pk", "annotator", "grade"]).astype(
        {"query_pk": "int64", "doc_pk": "int64", "annotator": "object", "grade": "int64"})


def human_answers(db: sqlite_utils.Database, kind: str) -> pd.DataFrame:
    """Every submitted answer judgment of ``kind`` as grades (no 0, partly 1, yes 2):
    query_pk, doc_pk (0), annotator, grade."""
    import pandas as pd

    column = ANSWER_FIELDS[kind]
    df = pd.DataFrame(db.execute(
        f"SELECT query_pk, 0, annotator, {column} FROM query_labels WHERE status = 'submitted' "
        f"AND {column} IS NOT NULL").fetchall(), columns=["query_pk", "doc_pk", "annotator", "grade"])
    df["grade"] = df["grade"].map({v: i for i, v in enumerate(VERDICTS)})
    return df.astype({"query_pk": "int64", "doc_pk": "int64", "annotator": "object", "grade": "int64"})


def _consolidate(per_annotator: pd.DataFrame) -> pd.DataFrame:
    """Median of the annotators' grades, rounded half up (as ``labels.golden_labels``)."""
    g = per_annotator.groupby(["query_pk", "doc_pk"], sort=True)["grade"].median()
    return np.floor(g + 0.5).astype("int64").rename("grade").reset_index()


@dataclass
class ComparisonData:
    """A run's grades joined to the humans' (``frame``: query_pk, doc_pk, human, judge, score);
    ``human_labels``: the per-annotator grades of overlapped items (all answer judgments)."""

    kind: str
    unit: list[str]
    levels: list[str]
    threshold: int
    frame: pd.DataFrame
    human_labels: pd.DataFrame
    excluded: dict[str, int]
    human_qrels: pd.DataFrame | None = None
    judge_qrels: pd.DataFrame | None = None

    @property
    def human(self) -> np.ndarray:
        return self.frame["human"].to_numpy(np.int64)

    @property
    def judge(self) -> np.ndarray:
        return self.frame["judge"].to_numpy(np.int64)

    @property
    def score(self) -> np.ndarray:
        return self.frame["score"].to_numpy(float)

    @property
    def query_pk(self) -> np.ndarray:
        return self.frame["query_pk"].to_numpy(np.int64)


def comparison_data(db: sqlite_utils.Database, run_id: int) -> ComparisonData:
    """Run ``run_id``'s grades next to the consolidated human labels, with the counts left out."""
    from ..labels.consolidate import golden_labels

    run = get_run(db, run_id)
    settings = store.get_settings(db)
    counts = dict(db.execute("SELECT status, count(*) FROM judge_labels WHERE run_id = ? GROUP BY status",
                             [run_id]).fetchall())
    grades = run_grades(db, run_id)
    no_grade = counts.get("ok", 0) - len(grades)
    if run.kind == "relevance":
        scale = run.params.get("scale", {}).get("grade_names", settings["grade_names"])
        if len(scale) != len(settings["grade_names"]):
            raise JudgeError(f"run {run_id} graded on {len(scale)} grades but the project now has "
                             f"{len(settings['grade_names'])}; rerun the judge on the current scale")
        levels, threshold = list(settings["grade_names"]), int(settings["threshold"])
        per_annotator = human_grades(db, overlapped=True)
        golden = golden_labels(db)[["query_pk", "doc_pk", "grade"]]
    else:
        levels, threshold = list(VERDICTS), 2
        per_annotator = human_answers(db, run.kind)
        golden = _consolidate(per_annotator) if len(per_annotator) else per_annotator[["query_pk", "doc_pk", "grade"]]
    frame = grades.merge(golden.rename(columns={"grade": "human"}), on=["query_pk", "doc_pk"])
    frame = frame.rename(columns={"grade": "judge"})[["query_pk", "doc_pk", "human", "judge", "score"]]
    excluded = {"failed": counts.get("failed", 0), "pending": counts.get("pending", 0),
                "no_human_label": len(grades) - len(frame)}
    if no_grade:
        excluded["no_claims" if run.kind == "faithfulness" else "no_grade"] = no_grade
    data = ComparisonData(run.kind, ["query_pk", "doc_pk"], levels, threshold, frame, per_annotator, excluded)
    if run.kind == "relevance":
        data.human_qrels = frame.rename(columns={"query_pk": "query", "doc_pk": "doc", "human": "grade"})[
            ["query", "doc", "grade"]]
        data.judge_qrels = frame.rename(columns={"query_pk": "query", "doc_pk": "doc", "judge": "grade"})[
            ["query", "doc", "grade"]]
    return data


def retrievers(db: sqlite_utils.Database) -> list[str]:
    """The retrievers logged, sorted."""
    return [r[0] for r in db.execute(
        f"SELECT DISTINCT retriever FROM retrievals r WHERE {store.visible('r')} ORDER BY retriever")]


def retrievals_for(db: sqlite_utils.Database, query_pks: Any) -> pd.DataFrame:
    """Every retriever's ranked list for the given queries: retriever, query, doc, rank."""
    import pandas as pd

    return pd.DataFrame(db.execute(
        "SELECT retriever, query_pk, doc_pk, rank FROM retrievals r WHERE query_pk IN "
        f"(SELECT value FROM json_each(?)) AND {store.visible('r')} ORDER BY retriever, query_pk, rank",
        [json.dumps([int(q) for q in query_pks])]).fetchall(), columns=["retriever", "query", "doc", "rank"])


# --- the disagreement browser ---------------------------------------------------------------------------

@dataclass
class Disagreement:
    """One judged item in a confusion-matrix cell, with everything needed to decide who is right."""

    run_id: int
    query_pk: int
    doc_pk: int
    query_id: str
    question: str
    answer: str | None
    doc_id: str | None
    title: str | None
    text: str | None
    human: int
    human_grades: dict[str, int]
    judge: int
    judge_score: float | None
    rationale: str | None
    detail: Any
    tag: str | None
    tagged_by: str | None


def disagreements(db: sqlite_utils.Database, run_id: int, *, human: int | None = None, judge: int | None = None,
                  limit: int = 20, offset: int = 0, data: ComparisonData | None = None) -> tuple[int, list[Disagreement]]:
    """Items of run ``run_id`` whose consolidated human grade is ``human`` and judge grade ``judge``
    (None = any; both None = every item where they differ): (how many, one page of them)."""
    data = data or comparison_data(db, run_id)
    f = data.frame
    mask = np.ones(len(f), dtype=bool) if (human is not None or judge is not None) else (f["human"] != f["judge"]).to_numpy()
    if human is not None:
        mask &= (f["human"] == human).to_numpy()
    if judge is not None:
        mask &= (f["judge"] == judge).to_numpy()
    rows = f[mask]
    page = rows.iloc[offset:offset + limit]
    per = data.human_labels
    out = []
    for q, d, h, jg, score in page[["query_pk", "doc_pk", "human", "judge", "score"]].itertuples(index=False):
        query_id, question, answer = db.execute("SELECT query_id, question, answer FROM queries WHERE pk = ?",
                                                [int(q)]).fetchone()
        doc = db.execute("SELECT doc_id, title, text FROM documents WHERE pk = ?", [int(d)]).fetchone() or (None,) * 3
        rationale, detail = db.execute("SELECT rationale, detail FROM judge_labels WHERE run_id = ? AND query_pk = ? "
                                       "AND doc_pk = ?", [run_id, int(q), int(d)]).fetchone()
        tag = db.execute("SELECT tag, annotator FROM judge_tags WHERE run_id = ? AND query_pk = ? AND doc_pk = ?",
                         [run_id, int(q), int(d)]).fetchone() or (None, None)
        if data.kind == "relevance":
            grades = dict(db.execute(
                "SELECT r.annotator, r.grade FROM relevance_labels r JOIN query_labels l ON l.query_pk = r.query_pk "
                "AND l.annotator = r.annotator AND l.status = 'submitted' WHERE r.query_pk = ? AND r.doc_pk = ? "
                "ORDER BY r.annotator", [int(q), int(d)]).fetchall())
        else:
            mine = per[(per["query_pk"] == q) & (per["doc_pk"] == d)]
            grades = dict(zip(mine["annotator"], mine["grade"].astype(int), strict=True))
        out.append(Disagreement(run_id, int(q), int(d), query_id, question, answer, *doc, int(h), grades, int(jg),
                                None if score is None or np.isnan(score) else float(score), rationale,
                                store.loads(detail), *tag))
    return int(mask.sum()), out


def tag_item(db: sqlite_utils.Database, run_id: int, query_pk: int, doc_pk: int, tag: str | None, annotator: str,
             *, note: str | None = None, by: str | None = None) -> None:
    """Tag a judged item: ``judge_wrong``, ``human_wrong`` or ``rubric_ambiguous`` (None removes the tag).
    Tags are set in the disagreement browser, which shows every annotator's grades: leads only
    (``by``, the signed-in account; ``None`` is the local operator)."""
    require(db, by, "lead", "tagging a disagreement")
    if tag is not None and tag not in TAGS:
        raise JudgeError(f"tag {tag!r} is unknown; use one of: {', '.join(TAGS)}")
    get_run(db, run_id)
    with store.transaction(db):
        if tag is None:
            db.execute("DELETE FROM judge_tags WHERE run_id = ? AND query_pk = ? AND doc_pk = ?",
                       [run_id, query_pk, doc_pk])
            return
        if db.execute("SELECT 1 FROM judge_labels WHERE run_id = ? AND query_pk = ? AND doc_pk = ?",
                      [run_id, query_pk, doc_pk]).fetchone() is None:
            raise JudgeError(f"run {run_id} did not judge query {query_pk} / chunk {doc_pk}")
        db.execute("INSERT INTO judge_tags (run_id, query_pk, doc_pk, tag, annotator, note, created_at) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, query_pk, doc_pk) DO UPDATE SET "
                   "tag = excluded.tag, annotator = excluded.annotator, note = excluded.note, "
                   "created_at = excluded.created_at", [run_id, query_pk, doc_pk, tag, annotator, note, store.now()])


def tag_counts(db: sqlite_utils.Database, run_id: int) -> dict[str, int]:
    counts = dict(db.execute("SELECT tag, count(*) FROM judge_tags WHERE run_id = ? GROUP BY tag", [run_id]))
    return {t: counts.get(t, 0) for t in TAGS}


def data_version(db: sqlite_utils.Database) -> str:
    """Changes whenever a label, an adjudication, a judge run or a setting changes (a cache key)."""
    row = db.execute("SELECT (SELECT max(id) FROM label_events), (SELECT count(*) FROM judge_runs), "
                     "(SELECT max(coalesce(finished_at, created_at)) FROM judge_runs), "
                     "(SELECT group_concat(key || value) FROM settings)").fetchone()
    return hashlib.sha256(repr(row).encode()).hexdigest()[:16]
