"""Score a pipeline's answers against a golden set and compare them with a baseline: the CI gate.

Scores come from ``labeler.metrics`` (the same trec_eval definitions as everywhere else). The gate
fails a metric only when both hold: its mean over the questions shared with the baseline dropped by
more than the metric's tolerance, and a paired sign-flip randomization test on the per-question
values (``metrics.paired_test``) gives p < alpha. A drop within tolerance, or one that noise explains,
passes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import LabelerError
from ..ingest.validate import normalize_question
from ..metrics.bootstrap import aggregate
from ..metrics.evaluate import per_query
from ..metrics.judgments import COUNT_COLUMNS, MetricError
from ..metrics.registry import Metric, parse_metric
from ..metrics.significance import paired_test
from .golden import GoldenSet
from .pipeline import Answer

DEFAULT_K = 10
DEFAULT_SET = ("recall", "precision", "hit", "mrr", "ndcg")  # what -k K gives
BASELINE_FORMAT = 1
ALL = "*"  # a --max-drop without a metric name applies to every metric


class BaselineError(LabelerError):
    """A baseline file is unreadable, or does not fit this golden set or these options."""


def canonical_metric(spec: str) -> Metric:
    """``spec`` parsed, named in canonical form (``P@5`` -> ``precision@5``) so that reports and
    baselines written with different aliases still line up."""
    parsed = parse_metric(spec)
    name = parsed.name if parsed.k is None else f"{parsed.name}@{parsed.k}"
    return Metric(parsed.name, parsed.k, name)


def metric_set(k: int | None = None, specs: Sequence[str] = ()) -> list[Metric]:
    """The metrics to compute: the default set at cutoff ``k`` (recall, precision, hit, ndcg @k and
    mrr) when ``k`` is given or no ``specs`` are, then every spec in ``specs``; repeats dropped."""
    wanted: list[Metric] = []
    if k is not None or not specs:
        cutoff = DEFAULT_K if k is None else k
        if isinstance(cutoff, bool) or not isinstance(cutoff, int) or cutoff < 1:
            raise MetricError(f"-k must be a positive whole number, e.g. -k 5; got {cutoff!r}")
        wanted += [canonical_metric(n if n == "mrr" else f"{n}@{cutoff}") for n in DEFAULT_SET]
    wanted += [canonical_metric(s) for s in specs]
    unique: dict[str, Metric] = {}
    for metric in wanted:
        unique.setdefault(metric.spec, metric)
    return list(unique.values())


def parse_max_drop(pairs: Sequence[str]) -> dict[str, float]:
    """``--max-drop recall@5=0.02`` (absolute drop of the mean) or ``--max-drop 0.02`` (every
    metric) as {canonical spec or "*": tolerance}."""
    out: dict[str, float] = {}
    for pair in pairs:
        name, sep, value = pair.rpartition("=")
        if sep and not name.strip():
            raise BaselineError(f"--max-drop {pair!r}: expected METRIC=TOLERANCE, e.g. recall@5=0.02")
        try:
            tolerance = float(value)
        except ValueError:
            raise BaselineError(f"--max-drop {pair!r}: {value.strip()!r} is not a number; "
                                "write e.g. recall@5=0.02 (an absolute drop of the mean)") from None
        if not math.isfinite(tolerance) or tolerance < 0:
            raise BaselineError(f"--max-drop {pair!r}: the tolerance must be a number >= 0")
        out[canonical_metric(name).spec if sep else ALL] = tolerance
    return out


# --- scoring -------------------------------------------------------------------------------

def score(golden: GoldenSet, answers: Sequence[Answer], metrics: Sequence[Metric]) -> pd.DataFrame:
    """Per-question metric values: one row per golden question (index = its position), one column per
    metric spec, then ``n_relevant`` and ``n_retrieved``. A question with status ``skipped`` (not
    evaluated) is NaN throughout; an errored one is scored as retrieving nothing; a question without
    relevant chunks is NaN (as in ``metrics.per_query``)."""
    if len(answers) != len(golden.queries):
        raise ValueError(f"{len(answers)} answers for {len(golden.queries)} questions")
    evaluated = [i for i, a in enumerate(answers) if a.status != "skipped"]
    run = {"query": [], "doc": [], "rank": []}
    qrels = {"query": [], "doc": [], "grade": []}
    for i in evaluated:
        docs = answers[i].docs
        run["query"] += [i] * len(docs)
        run["doc"] += docs
        run["rank"] += range(1, len(docs) + 1)
        relevance = golden.queries[i].relevance
        qrels["query"] += [i] * len(relevance)
        qrels["doc"] += list(relevance)
        qrels["grade"] += list(relevance.values())
    run_df = pd.DataFrame({"query": np.asarray(run["query"], dtype=np.int64), "doc": pd.Series(run["doc"], dtype=object),
                           "rank": np.asarray(run["rank"], dtype=np.int64)})
    qrels_df = pd.DataFrame({"query": np.asarray(qrels["query"], dtype=np.int64),
                             "doc": pd.Series(qrels["doc"], dtype=object),
                             "grade": np.asarray(qrels["grade"], dtype=np.int64)})
    per_q = per_query(run_df, qrels_df, list(metrics), threshold=golden.threshold)
    # questions with no judged chunk at all are absent from per_query: they have no relevant chunk
    per_q = per_q.reindex(range(len(answers)))
    per_q.index.name = "query"
    for i in evaluated:
        if np.isnan(per_q.at[i, "n_relevant"]):
            per_q.at[i, "n_relevant"] = 0
            per_q.at[i, "n_retrieved"] = len(answers[i].docs)
    return per_q


def summarize(per_q: pd.DataFrame, *, n_resamples: int = 1000, seed: int = 0) -> dict[str, dict]:
    """Mean, 95% bootstrap CI and n of every metric column (``metrics.aggregate``, seeded)."""
    return aggregate(per_q.dropna(subset=["n_relevant"]), n_resamples=n_resamples, seed=seed)


# --- baselines -----------------------------------------------------------------------------

@dataclass
class Baseline:
    """A saved run to compare with: the golden set it was made on, its metrics, and per-question values
    keyed by ``key`` (``id:QUERY_ID`` or ``q:normalized question``)."""

    path: str
    golden: dict[str, Any]
    pipeline: str | None
    metrics: dict[str, dict]
    questions: list[dict[str, Any]]
    created_at: str | None = None


def baseline_document(golden: GoldenSet, pipeline_id: str, aggregates: dict[str, dict],
                      rows: list[dict[str, Any]], created_at: str) -> dict[str, Any]:
    """The JSON a baseline file holds (``rows`` are the per-question records of a report)."""
    return {
        "labeler_baseline": BASELINE_FORMAT,
        "created_at": created_at,
        "golden": golden.identity(),
        "pipeline": pipeline_id,
        "metrics": aggregates,
        "questions": [{"key": r["key"], "query_id": r["query_id"], "question": r["question"],
                       "status": r["status"], "values": r["metrics"]}
                      for r in rows if r["status"] != "skipped"],
    }


def load_baseline(path: str | Path) -> Baseline:
    """Read a baseline written by ``--save-baseline``; raises BaselineError saying what is wrong."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(f"{path}: no such baseline (write one with --save-baseline)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BaselineError(f"{path}: not a readable baseline ({e})") from None
    if not isinstance(doc, dict) or "labeler_baseline" not in doc:
        raise BaselineError(f"{path}: not a labeler baseline (write one with labeler eval --save-baseline)")
    if doc["labeler_baseline"] != BASELINE_FORMAT:
        raise BaselineError(f"{path}: baseline format {doc['labeler_baseline']!r} is not supported "
                            f"(expected {BASELINE_FORMAT}); re-seed it with --save-baseline")
    questions = doc.get("questions")
    if not isinstance(questions, list) or not all(
            isinstance(q, dict) and isinstance(q.get("key"), str) and isinstance(q.get("values"), dict)
            for q in questions):
        raise BaselineError(f"{path}: questions must be a list of {{key, values}}; re-seed it with --save-baseline")
    return Baseline(str(path), doc.get("golden") or {}, doc.get("pipeline"), doc.get("metrics") or {},
                    questions, doc.get("created_at"))


# --- comparison ----------------------------------------------------------------------------

@dataclass
class MetricChange:
    """One metric against the baseline, over the ``pairs`` questions both scored."""

    metric: str
    baseline: float | None
    current: float | None
    drop: float | None
    max_drop: float | None
    p_value: float | None
    pairs: int
    worse: int
    better: int
    failed: bool
    diff_ci_low: float | None = None  # 95% bootstrap CI of the paired difference current - baseline
    diff_ci_high: float | None = None

    @property
    def gated(self) -> bool:
        return self.max_drop is not None


@dataclass
class Comparison:
    """The gate's verdict: per-metric changes, the questions that got worse on a failed metric, and
    how the two question sets matched."""

    baseline: str
    baseline_golden_sha256: str | None
    matched: int
    only_current: int
    only_baseline: int
    changes: list[MetricChange]
    regressions: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    pairs: list[tuple[int, int]] = field(default_factory=list)  # (golden index, baseline index)

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self.changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline, "baseline_golden_sha256": self.baseline_golden_sha256,
            "matched": self.matched, "only_current": self.only_current, "only_baseline": self.only_baseline,
            "failed": self.failed,
            "metrics": {c.metric: {"baseline": c.baseline, "current": c.current, "drop": c.drop,
                                   "max_drop": c.max_drop, "p_value": c.p_value, "pairs": c.pairs,
                                   "worse": c.worse, "better": c.better, "gated": c.gated, "failed": c.failed,
                                   "diff_ci_low": c.diff_ci_low, "diff_ci_high": c.diff_ci_high}
                        for c in self.changes},
            "regressions": self.regressions,
        }


def check_golden(baseline: Baseline, golden: GoldenSet, *, allow_change: bool) -> list[str]:
    """Refuse (BaselineError) a baseline made on another golden set or threshold, unless
    ``allow_change``: then return a warning and compare the questions both share."""
    problems = []
    sha = baseline.golden.get("sha256")
    if sha != golden.sha256:
        problems.append(f"{baseline.path} was made on golden set sha256 {str(sha)[:12]}… but {golden.path} is "
                        f"{golden.sha256[:12]}…")
    threshold = baseline.golden.get("threshold")
    if threshold != golden.threshold:
        problems.append(f"{baseline.path} used threshold {threshold} but this run uses {golden.threshold}")
    if problems and not allow_change:
        raise BaselineError("; ".join(problems) + ": re-seed the baseline with --save-baseline on this golden "
                            "set, or pass --allow-golden-change to compare the questions both share")
    return [p + " (compared on the shared questions)" for p in problems]


def _baseline_metrics(baseline: Baseline) -> set[str]:
    return set().union(*(q["values"] for q in baseline.questions)) if baseline.questions else set()


def check_gate(specs: Sequence[str], baseline: Baseline, max_drop: dict[str, float], *,
               alpha: float = 0.05) -> dict[str, float]:
    """Validate the gate's options before any work: ``alpha`` in (0, 1), every metric named in
    ``max_drop`` computed and present in the baseline. Returns the tolerances to apply ({"*": 0.0}
    when ``max_drop`` is empty)."""
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 1:
        raise BaselineError(f"--alpha must be between 0 and 1, e.g. 0.05; got {alpha!r}")
    tolerances = dict(max_drop) if max_drop else {ALL: 0.0}
    in_baseline = _baseline_metrics(baseline)
    for spec in tolerances:
        if spec != ALL and spec not in specs:
            raise BaselineError(f"--max-drop {spec}: not among this run's metrics ({', '.join(specs)}); "
                                f"add it with --metric {spec}")
        if spec != ALL and spec not in in_baseline:
            raise BaselineError(f"--max-drop {spec}: {baseline.path} has no values for {spec}; re-seed the "
                                f"baseline with --metric {spec}")
    if not in_baseline & set(specs):
        raise BaselineError(f"{baseline.path} shares no metric with this run ({', '.join(specs)}); re-seed it "
                            "with the same -k / --metric options")
    return tolerances


def _match(keys: Sequence[str], questions: Sequence[str], baseline: Baseline) -> list[int | None]:
    """For each current question, the index of its baseline question: by query id, else by text."""
    by_key: dict[str, int] = {}
    by_text: dict[str, int] = {}
    for j, q in enumerate(baseline.questions):
        by_key.setdefault(q["key"], j)
        if isinstance(q.get("question"), str):
            by_text.setdefault(normalize_question(q["question"]), j)
    out: list[int | None] = []
    for key, question in zip(keys, questions, strict=True):
        j = by_key.get(key)
        out.append(j if j is not None else by_text.get(normalize_question(question)))
    return out


def _value(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else float("nan")


def compare(per_q: pd.DataFrame, golden: GoldenSet, baseline: Baseline, max_drop: dict[str, float], *,
            alpha: float = 0.05, n_permutations: int = 10000, seed: int = 0, n_resamples: int = 1000) -> Comparison:
    """Compare per-question values with the baseline's, question by question (matched by query id, else
    by normalized question text), for every metric both have.

    A metric is gated when ``max_drop`` names it (or ``"*"``, every metric); an empty ``max_drop``
    gates every metric at tolerance 0, i.e. any statistically significant drop fails. It fails when
    its mean over the shared questions dropped by more than the tolerance and the paired test gives
    p < ``alpha``. Each change also carries the paired difference's 95% bootstrap CI (current -
    baseline, ``n_resamples`` resamples seeded with ``seed``). Raises BaselineError when a gated
    metric is missing from the baseline.
    """
    specs = [c for c in per_q.columns if c not in COUNT_COLUMNS]
    tolerances = check_gate(specs, baseline, max_drop, alpha=alpha)
    in_baseline = _baseline_metrics(baseline)
    evaluated = [i for i in range(len(golden.queries)) if not np.isnan(per_q.at[i, "n_relevant"])]
    match = _match([golden.queries[i].key for i in evaluated],
                   [golden.queries[i].question for i in evaluated], baseline)
    pairs = [(i, j) for i, j in zip(evaluated, match, strict=True) if j is not None]
    comparison = Comparison(baseline.path, baseline.golden.get("sha256"), len(pairs),
                            len(evaluated) - len(pairs), len(baseline.questions) - len({j for _, j in pairs}), [],
                            pairs=pairs)
    if not pairs:
        comparison.warnings.append(f"no question of {golden.path} is in {baseline.path}: nothing to compare")
    rows = np.array([i for i, _ in pairs], dtype=np.int64)
    for spec in specs:
        if spec not in in_baseline:
            continue
        tolerance = tolerances.get(spec, tolerances.get(ALL))
        current = per_q[spec].to_numpy(dtype=float)[rows]
        base = np.array([_value(baseline.questions[j]["values"].get(spec)) for _, j in pairs])
        both = ~(np.isnan(current) | np.isnan(base))
        n = int(both.sum())
        if n == 0:
            comparison.changes.append(MetricChange(spec, None, None, None, tolerance, None, 0, 0, 0, False))
            continue
        cur_mean, base_mean = float(current[both].mean()), float(base[both].mean())
        drop = base_mean - cur_mean
        p = float(paired_test(current, base, n_resamples=n_permutations, seed=seed))
        failed = tolerance is not None and drop > tolerance + 1e-12 and p < alpha
        worse = both & (current < base - 1e-12)
        better = both & (current > base + 1e-12)
        diff = aggregate(pd.DataFrame({"diff": (current - base)[both]}), n_resamples=n_resamples, seed=seed)["diff"]
        comparison.changes.append(MetricChange(spec, base_mean, cur_mean, drop, tolerance, p, n,
                                               int(worse.sum()), int(better.sum()), failed,
                                               diff["ci_low"], diff["ci_high"]))
        if failed:
            for k in np.flatnonzero(worse)[np.argsort(-(base - current)[worse], kind="stable")]:
                q = golden.queries[pairs[k][0]]
                comparison.regressions.append({"metric": spec, "query_id": q.query_id, "question": q.question,
                                               "baseline": float(base[k]), "current": float(current[k])})
    return comparison
