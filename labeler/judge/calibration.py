"""Calibration of a judge against the humans: agreement of a stored judge run with the database's
consolidated human labels (with the human-human ceiling and the retrievers), two runs compared, and
successive runs over time (drift). The statistics themselves are in ``labeler.agreement``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..agreement.retrievers import retriever_agreement, retrievers_dict
from ..agreement.stats import (
    DEFAULT_MIN_N,
    Stat,
    check_bootstrap,
    human_pairs,
    ordinal_agreement,
    ordinal_arrays,
    paired_difference,
    roc_auc,
    stat_dicts,
)
from ..errors import JudgeError
from .data import comparison_data, retrievals_for, run_grades
from .data import retrievers as logged_retrievers
from .store import get_run, list_runs

if TYPE_CHECKING:
    import sqlite_utils

# --- a judge run against the database's human labels -------------------------------------------------

@dataclass
class Agreement:
    """A judge run against the humans: ``statistics`` (judge vs consolidated humans),
    ``human_human`` (the ceiling, same statistics), ``retrievers`` (relevance runs only) and what
    was left out (``excluded``: failed items, items without a human label, answers without claims)."""

    run: Any
    levels: list[str]
    threshold: int
    statistics: dict[str, Stat]
    human_human: dict[str, Stat]
    retrievers: dict[str, Any] | None
    excluded: dict[str, int] = field(default_factory=dict)
    n_resamples: int = 1000
    seed: int = 0
    confidence: float = 0.95
    human_items: int = 0

    def to_dict(self) -> dict[str, Any]:
        """One key per statistic (``{"value", "ci_low", "ci_high", "n"}``), then ``run``,
        ``human_human``, ``retrievers`` and ``bootstrap``."""
        out: dict[str, Any] = stat_dicts(self.statistics)
        out["human_human"] = stat_dicts(self.human_human)
        out["human_human"]["items"] = self.human_items
        out["retrievers"] = retrievers_dict(self.retrievers)
        out["run"] = asdict(self.run) if hasattr(self.run, "__dataclass_fields__") else self.run
        out["grades"] = self.levels
        out["threshold"] = self.threshold
        out["excluded"] = self.excluded
        out["bootstrap"] = {"n_resamples": self.n_resamples, "seed": self.seed, "confidence": self.confidence}
        return out


def run_agreement(db: sqlite_utils.Database, run_id: int, *, n_resamples: int = 1000, seed: int = 0,
                  confidence: float = 0.95, min_n: int = DEFAULT_MIN_N, k: int = 10,
                  retrievers: bool = True, data: Any = None) -> Agreement:
    """Agreement of judge run ``run_id`` with the consolidated human labels, the human-human ceiling,
    and (relevance runs with two or more retrievers logged) the retrievers by judge vs by humans.

    Relevance runs compare grades on the project's scale; the bootstrap resamples queries (all the
    pairs of a drawn query together: one person graded them in one sitting, they are not
    independent), and n counts pairs. Faithfulness and answer-relevance runs compare the verdict
    (no < partly < yes) with the annotators' ``answer_faithful`` / ``answer_relevant`` (several
    annotators: the median, rounded half up), collapsed at "yes"; faithfulness adds the ROC AUC of
    the claim score for humans' "yes". ``data``: a ``judge.comparison_data`` already loaded.
    """
    check_bootstrap(confidence, n_resamples)
    info = get_run(db, run_id)
    data = data if data is not None else comparison_data(db, run_id)
    by_query = data.kind == "relevance"
    common = dict(levels=len(data.levels), threshold=data.threshold, n_resamples=n_resamples, seed=seed,
                  confidence=confidence, min_n=min_n)
    stats = ordinal_agreement(data.human, data.judge, **common, clusters=data.query_pk if by_query else None)
    if data.kind == "faithfulness":
        stats["roc_auc"] = roc_auc(data.human >= 2, data.score, n_resamples=n_resamples, seed=seed,
                                   confidence=confidence, min_n=min_n)
    hp = human_pairs(data.human_labels, data.unit)
    ceiling = ordinal_agreement(hp.first, hp.second, **common, pair_weights=hp.weights,
                                alpha_data=hp.reliability if hp.first.size else None,
                                names=("the first annotator", "the second annotator"),
                                clusters=hp.clusters if by_query else None)
    if hp.first.size == 0:  # say why the ceiling is missing in the words a lead uses
        for stat in ceiling.values():
            if stat.value is None or stat.n == 0:
                stat.reason = "no overlap between annotators: no item was labeled by two of them"
    section = None
    if retrievers and by_query:
        logged = logged_retrievers(db)
        run = (retrievals_for(db, np.unique(data.query_pk)) if len(logged) > 1 else
               retrievals_for(db, []))
        section = retriever_agreement(run, data.human_qrels, data.judge_qrels, k=k, threshold=data.threshold,
                                      n_resamples=n_resamples, seed=seed, confidence=confidence)
    return Agreement(info, data.levels, data.threshold, stats, ceiling, section, data.excluded,
                     n_resamples, seed, confidence, hp.items)


@dataclass
class Comparison:
    """Two runs of the same kind: each against humans, the paired difference (b - a) on the items
    both judged that humans labeled, and the agreement between the two runs themselves."""

    a: Agreement
    b: Agreement
    difference: dict[str, Stat]
    between: dict[str, Stat]
    common: int

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "common_pairs": self.common,
                "difference": stat_dicts(self.difference), "between": stat_dicts(self.between)}


def compare_runs(db: sqlite_utils.Database, run_a: int, run_b: int, *, n_resamples: int = 1000, seed: int = 0,
                 confidence: float = 0.95, min_n: int = DEFAULT_MIN_N) -> Comparison:
    """Compare two judge runs of the same kind (rubric v1 vs v2, model A vs B): see ``Comparison``."""
    a = run_agreement(db, run_a, n_resamples=n_resamples, seed=seed, confidence=confidence, min_n=min_n,
                      retrievers=False)
    b = run_agreement(db, run_b, n_resamples=n_resamples, seed=seed, confidence=confidence, min_n=min_n,
                      retrievers=False)
    if a.run.kind != b.run.kind:
        raise JudgeError(f"runs {run_a} ({a.run.kind}) and {run_b} ({b.run.kind}) judge different things; "
                         "compare runs of the same kind")
    da, db_ = comparison_data(db, run_a), comparison_data(db, run_b)
    both = da.frame.merge(db_.frame, on=["query_pk", "doc_pk", "human"], suffixes=("_a", "_b"))
    common = dict(levels=len(da.levels), threshold=da.threshold, n_resamples=n_resamples, seed=seed)
    by_query = da.kind == "relevance"
    first = ordinal_arrays(both["human"], both["judge_a"], **common, clusters=both["query_pk"] if by_query else None)
    second = ordinal_arrays(both["human"], both["judge_b"], **common, clusters=both["query_pk"] if by_query else None)
    difference = paired_difference(first, second, confidence, min_n)
    ga, gb = run_grades(db, run_a), run_grades(db, run_b)
    pairs = ga.merge(gb, on=["query_pk", "doc_pk"], suffixes=("_a", "_b"))
    between = ordinal_agreement(pairs["grade_a"], pairs["grade_b"], **common, confidence=confidence,
                                min_n=min_n, names=(f"run {run_a}", f"run {run_b}"),
                                clusters=pairs["query_pk"] if by_query else None)
    return Comparison(a, b, difference, between, len(both))


def drift(db: sqlite_utils.Database, *, judge: str | None = None, kind: str = "relevance",
          min_n: int = DEFAULT_MIN_N) -> list[dict[str, Any]]:
    """Successive calibration runs of one kind (or one ``judge``) in time order: each run's kappa
    and exact agreement with humans, and with the run before it on the items both judged (point
    values, no intervals: this is a trend line)."""
    runs = [r for r in list_runs(db) if r.on_set == "labeled" and r.kind == kind
            and r.status in ("done", "cancelled") and (judge is None or r.judge == judge)]
    runs.sort(key=lambda r: (r.created_at, r.id))
    out: list[dict[str, Any]] = []
    previous = None
    for r in runs:
        data = comparison_data(db, r.id)
        common = dict(levels=len(data.levels), threshold=data.threshold, n_resamples=0, min_n=min_n)
        vs_humans = ordinal_agreement(data.human, data.judge, **common)
        grades = run_grades(db, r.id)
        row: dict[str, Any] = {
            "run_id": r.id, "created_at": r.created_at, "judge": r.judge, "rubric": r.rubric, "model": r.model,
            "kappa_vs_humans": vs_humans["cohen_kappa"].value,
            "kappa_collapsed_vs_humans": vs_humans["kappa_collapsed"].value,
            "agreement_vs_humans": vs_humans["exact_agreement"].value, "n": vs_humans["cohen_kappa"].n,
            "previous_run": None, "agreement_vs_previous": None, "kappa_vs_previous": None, "n_vs_previous": 0}
        if previous is not None:
            pairs = previous[1].merge(grades, on=["query_pk", "doc_pk"], suffixes=("_a", "_b"))
            between = ordinal_agreement(pairs["grade_a"], pairs["grade_b"], **common)
            row.update(previous_run=previous[0], agreement_vs_previous=between["exact_agreement"].value,
                       kappa_vs_previous=between["cohen_kappa"].value, n_vs_previous=len(pairs))
        out.append(row)
        previous = (r.id, grades)
    return out
