"""The diagnosis: where the pipeline loses quality, stated only when the labels can tell.

The decision tree is the usual RAG-evaluation one: low recall@k -> retrieval; good recall but low
MRR or nDCG@k -> ranking; good retrieval but unfaithful answers -> generation; else healthy. Each
check compares a mean with its threshold, and a check only *reads* one way when its whole 95% CI
sits on one side of the threshold: ``fails`` when the CI's upper end is below it, ``passes`` when
the CI's lower end is at or above it, ``undecided`` otherwise (``unknown`` when there is no value,
e.g. faithfulness without judged answers). The tree stops at the first check that fails (a verdict)
or is undecided ("not enough labels to tell"): a verdict is never drawn from a mean whose CI
contains the threshold.

How many more labels an undecided check needs (:func:`more_to_decide`): with the current mean
``x``, per-query standard deviation ``s`` (ddof 1) and ``n`` values, the normal-approximation
half-width of the 95% CI is ``1.96 s / sqrt(n)``; it falls below the distance ``d = |x - t|`` to
the threshold ``t`` once ``n' > (1.96 s / d)^2``. The estimate is ``max(1, ceil((1.96 s / d)^2) - n)``
more values (queries with a relevant chunk for the retrieval checks, judged answers for
faithfulness), assuming the mean and spread stay where they are; it is None when the mean sits
exactly on the threshold (no number of labels settles that).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from .specs import Z95


class ReportLike(Protocol):
    """What the diagnosis reads of a retrieval report (``labeler.report.core.Report`` has it)."""

    n_queries: int
    n_without_relevant: int
    n_resamples: int
    seed: int
    answers: dict[str, int]

    def aggregate(self, specs: Sequence[str], confidence: float = 0.95) -> dict[str, dict]: ...

    def extra_values(self, specs: Sequence[str]) -> Any: ...


#: What each reading of a check is called on the page and in JSON.
READINGS = ("passes", "fails", "undecided", "unknown")
NO_ANSWERS = "unknown (no answers judged)"


@dataclass(frozen=True)
class Thresholds:
    """The cut-offs of the diagnosis decision tree (each a mean over labeled queries, 0..1).

    ``k``: the cutoff of recall@k and nDCG@k. ``recall``: recall@k below it means the relevant
    chunks are not retrieved. ``mrr`` / ``ndcg``: with good recall, MRR or nDCG@k below it means
    they are ranked too low. ``faithfulness``: with good retrieval, the share of production answers
    judged faithful to the chunks (yes = 1, partly = 0.5) below it points at generation.
    ``min_queries``: fewer labeled queries with a relevant chunk than this and no verdict is given.
    """

    k: int = 5
    recall: float = 0.8
    mrr: float = 0.6
    ndcg: float = 0.6
    faithfulness: float = 0.8
    min_queries: int = 10


@dataclass(frozen=True)
class Check:
    """One check of the tree: the mean ``value`` with its 95% CI over ``n`` values, the
    ``threshold``, the ``reading`` (passes / fails / undecided / unknown), ``more_needed`` (about
    how many more values would decide it, for an undecided check) and what failing it means."""

    name: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    threshold: float
    reading: str
    more_needed: int | None = None
    fails_means: str = ""
    unit: str = "labeled queries with a relevant chunk"

    def shown(self, digits: int = 3) -> str:
        """The value and its CI as text; never the word None."""
        if self.value is None:
            return NO_ANSWERS if self.name == "faithfulness" else "unknown (no query with a relevant chunk)"
        if self.ci_low is None or self.ci_high is None:
            return f"{self.value:.{digits}f}"
        return f"{self.value:.{digits}f} [{self.ci_low:.{digits}f}, {self.ci_high:.{digits}f}]"

    def need_text(self) -> str:
        if self.more_needed is None:
            return "the mean sits on the threshold: more labels may not settle it"
        return f"need about {self.more_needed:,} more {self.unit}"


@dataclass(frozen=True)
class Diagnosis:
    """Where the pipeline loses quality. ``verdict``: ``retrieval``, ``ranking``, ``generation``,
    ``healthy``, ``undecided`` (a check's CI contains its threshold: not enough labels to tell) or
    ``not_enough_data`` (fewer than ``min_queries``); ``checks`` every check with its CI and
    reading; ``values`` the means the tree looked at (None when unknown) and ``thresholds`` the
    cut-offs it used; ``more_needed`` (undecided only) about how many more labels would decide."""

    verdict: str
    title: str
    advice: str
    values: dict[str, float | None]
    thresholds: Thresholds
    n_queries: int
    checks: list[Check] = field(default_factory=list)
    more_needed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "title": self.title, "advice": self.advice, "n_queries": self.n_queries,
                "more_needed": self.more_needed, "thresholds": asdict(self.thresholds),
                "checks": [asdict(c) for c in self.checks]}


_FAILS_MEANS = {"recall": "retrieval: chunking, embeddings, hybrid search", "mrr": "ranking: add a reranker",
                "ndcg": "ranking: add a reranker", "faithfulness": "generation: prompt, grounding, model"}

_ADVICE = {
    "not_enough_data": ("Not enough labels yet",
                        "Label at least {min_queries} queries that have a relevant chunk before reading a verdict."),
    "undecided": ("Not enough labels to tell",
                  "{why}: not enough labels to tell ({need})."),
    "retrieval": ("Retrieval is the bottleneck",
                  "recall@{k} = {recall} < {t_recall} (the whole 95% CI is below): the relevant chunks are not in "
                  "the top {k}. Fix chunking (size, overlap, boundaries), the embeddings (a stronger or domain-tuned "
                  "model), or add hybrid search (BM25 + vectors)."),
    "ranking": ("Ranking is the bottleneck",
                "recall@{k} = {recall} passes {t_recall}, but {low} (the whole 95% CI below): the relevant chunks are "
                "retrieved but ranked too low. Add a reranker (a cross-encoder over the top candidates)."),
    "generation": ("Generation is the bottleneck",
                   "Retrieval is good (recall@{k} = {recall}, MRR = {mrr}), but only {faithfulness} of the answers "
                   "are faithful to the chunks (< {t_faithfulness:.0%}, the whole 95% CI below). Fix the generation: "
                   "prompt, grounding and citation instructions, or the model."),
    "healthy": ("No bottleneck found",
                "recall@{k} = {recall}, MRR = {mrr}, nDCG@{k} = {ndcg} and faithfulness {faith} pass their "
                "thresholds (each 95% CI at or above)."),
}


def more_to_decide(mean: float, sd: float, n: int, threshold: float) -> int | None:
    """About how many more values make the 95% CI of a mean exclude ``threshold`` (see the module
    doc): ``max(1, ceil((1.96 sd / |mean - threshold|)^2) - n)``; None when the mean equals it."""
    distance = abs(mean - threshold)
    if distance < 1e-12:
        return None
    return max(1, math.ceil((Z95 * sd / distance) ** 2 - 1e-9) - n)


def read(value: float | None, low: float | None, high: float | None, threshold: float) -> str:
    """passes / fails / undecided / unknown: which side of ``threshold`` the whole CI is on."""
    if value is None:
        return "unknown"
    low = value if low is None else low
    high = value if high is None else high
    if high < threshold:
        return "fails"
    if low >= threshold:
        return "passes"
    return "undecided"


def _check(name: str, family: str, stats: dict, values: np.ndarray, threshold: float,
           unit: str = "labeled queries with a relevant chunk") -> Check:
    value, low, high, n = stats["mean"], stats["ci_low"], stats["ci_high"], int(stats["n"])
    reading = read(value, low, high, threshold)
    more = None
    if reading == "undecided":
        sd = float(values.std(ddof=1)) if values.size > 1 else 0.0
        more = more_to_decide(value, sd, n, threshold)
    return Check(name, value, low, high, n, threshold, reading, more, _FAILS_MEANS[family], unit)


def faithfulness_stats(answers: dict[str, int], *, seed: int, n_resamples: int,
                       confidence: float = 0.95) -> tuple[dict, np.ndarray]:
    """Mean faithfulness (yes = 1, partly = 0.5, no = 0) of the judged answers with a seeded
    bootstrap percentile CI (resampling answers), and the per-answer scores."""
    counts = np.array([answers.get("yes", 0), answers.get("partly", 0), answers.get("no", 0)], dtype=np.int64)
    scores = np.repeat(np.array([1.0, 0.5, 0.0]), counts)
    n = int(counts.sum())
    if n == 0:
        return {"mean": None, "ci_low": None, "ci_high": None, "n": 0}, scores
    mean = float(scores.mean())
    if n == 1:
        return {"mean": mean, "ci_low": mean, "ci_high": mean, "n": 1}, scores
    draws = np.random.default_rng(seed).multinomial(n, counts / n, size=n_resamples)
    means = draws @ np.array([1.0, 0.5, 0.0]) / n
    low, high = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    return {"mean": mean, "ci_low": float(low), "ci_high": float(high), "n": n}, scores


def diagnose(report: ReportLike, thresholds: Thresholds | None = None) -> Diagnosis:
    """The diagnosis of ``report`` (see the module doc for the rule)."""
    t = thresholds or Thresholds()
    specs = [f"recall@{t.k}", "mrr", f"ndcg@{t.k}"]
    n = report.n_queries - report.n_without_relevant
    stats = report.aggregate(specs)
    per_query = report.extra_values(specs) if report.n_queries else None
    checks = []
    for spec, family, cut in zip(specs, ("recall", "mrr", "ndcg"), (t.recall, t.mrr, t.ndcg), strict=True):
        values = np.empty(0) if per_query is None else per_query[spec].dropna().to_numpy(float)
        checks.append(_check(spec, family, stats[spec], values, cut))
    faith, scores = faithfulness_stats(report.answers, seed=report.seed, n_resamples=report.n_resamples)
    checks.append(_check("faithfulness", "faithfulness", faith, scores, t.faithfulness, "judged answers"))
    recall, mrr, ndcg, faithful = checks
    values = {c.name: c.value for c in checks}

    def mean(c: Check) -> str:
        return "unknown" if c.value is None else f"{c.value:.2f}"

    verdict, deciding = "healthy", []
    if n < t.min_queries:
        verdict = "not_enough_data"
    elif recall.reading == "fails":
        verdict = "retrieval"
    elif recall.reading == "undecided":
        verdict, deciding = "undecided", [recall]
    elif "fails" in (mrr.reading, ndcg.reading):
        verdict = "ranking"
    elif "undecided" in (mrr.reading, ndcg.reading):
        verdict, deciding = "undecided", [c for c in (mrr, ndcg) if c.reading == "undecided"]
    elif faithful.reading == "fails":
        verdict = "generation"
    elif faithful.reading == "undecided":
        verdict, deciding = "undecided", [faithful]
    more = None
    if deciding and all(c.more_needed is not None for c in deciding):
        more = max(c.more_needed for c in deciding)  # enough to settle every undecided check of the step
    title, advice = _ADVICE[verdict]
    advice = advice.format(
        k=t.k, recall=mean(recall), mrr=mean(mrr), ndcg=mean(ndcg),
        faithfulness="unknown" if faithful.value is None else f"{faithful.value:.0%}",
        min_queries=t.min_queries, t_recall=t.recall, t_faithfulness=t.faithfulness,
        faith=NO_ANSWERS if faithful.value is None else f"{faithful.value:.0%}",
        low=" and ".join(f"{label} = {mean(c)} < {c.threshold}" for label, c in (("MRR", mrr), (f"nDCG@{t.k}", ndcg))
                         if c.reading == "fails"),
        why="; ".join(f"{c.name} = {c.shown(2)} and its 95% CI contains the threshold {c.threshold}"
                      for c in deciding),
        need="; ".join(c.need_text() for c in deciding))
    return Diagnosis(verdict, title, advice, values, t, n, checks, more)
