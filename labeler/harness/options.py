"""The options of one evaluation (:func:`labeler.harness.evaluate`), grouped by what they are about:
how the pipeline runs (:class:`RunOptions`), how the golden set is read (:class:`GoldenOptions`),
what is scored (:class:`ScoringOptions`), the regression gate (:class:`GateOptions`), where the
results go (:class:`OutputOptions`) and which judges score the answers (:class:`JudgeOptions`).
Each is a frozen dataclass that checks its own values when it is made, so a bad option is one clear
LabelerError before any question runs; the messages name the option as ``labeler eval`` spells it.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import LabelerError
from ..ingest.mapping import parse_mapping
from ..metrics.judgments import MetricError
from ..metrics.registry import Metric
from .gate import ALL, DEFAULT_K, BaselineError, metric_set, parse_max_drop
from .golden import GoldenError
from .pipeline import Pipeline, PipelineError, parse_headers


def _whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _path(value: Any) -> bool:
    return value is None or isinstance(value, str | os.PathLike)


@dataclass(frozen=True)
class RunOptions:
    """How the answers are obtained. ``pipeline``: ``"module:function"``, a function or a
    :class:`Pipeline`; or ``endpoint``, an HTTP URL (``mapping``: ``{field: dotted path}`` or
    ``["retrieved=result.docs", ...]`` to read its response; ``headers``: ``{name: value}`` or
    ``["Authorization: Bearer ...", ...]``); with neither, the retrieval logged under ``retriever``
    in the database (None: the default retriever). ``concurrency`` questions run at once, each for
    at most ``timeout`` seconds (None: no limit)."""

    pipeline: str | Pipeline | Callable[[str], Any] | None = None
    endpoint: str | None = None
    mapping: Mapping[str, str] | Sequence[str] | None = None
    headers: Mapping[str, str] | Sequence[str] | None = None
    retriever: str | None = None
    concurrency: int = 8
    timeout: float | None = 30.0

    def __post_init__(self) -> None:
        if self.pipeline is not None and self.endpoint is not None:
            raise PipelineError("give either --pipeline or --endpoint, not both")
        if not (self.pipeline is None or isinstance(self.pipeline, str | Pipeline) or callable(self.pipeline)):
            raise PipelineError("pipeline must be 'module:function', a function or a Pipeline; "
                                f"got {type(self.pipeline).__name__}")
        if self.endpoint is not None and not isinstance(self.endpoint, str):
            raise PipelineError(f"--endpoint must be an http:// or https:// URL; got {self.endpoint!r}")
        if self.mapping is not None and not isinstance(self.mapping, Mapping):
            object.__setattr__(self, "mapping", parse_mapping(_strings("--map", self.mapping)))
        if self.headers is not None and not isinstance(self.headers, Mapping):
            object.__setattr__(self, "headers", parse_headers(_strings("--header", self.headers)))
        if self.retriever is not None and not isinstance(self.retriever, str):
            raise LabelerError(f"--retriever must name a logged retriever, e.g. production; got {self.retriever!r}")
        if not _whole(self.concurrency) or self.concurrency < 1:
            raise PipelineError(f"--concurrency must be a whole number >= 1 (questions in flight at once), e.g. 8; "
                                f"got {self.concurrency!r}")
        if self.timeout is not None and not (_number(self.timeout) and self.timeout > 0):
            raise PipelineError(f"--timeout must be a positive number of seconds per question (None: no limit), "
                                f"e.g. 30; got {self.timeout!r}")


def _strings(option: str, values: Any) -> list[str]:
    if isinstance(values, str | bytes) or not all(isinstance(v, str) for v in values):
        raise LabelerError(f"{option} takes a dict or a list of strings, e.g. [\"retrieved=result.docs\"]; "
                           f"got {values!r}")
    return list(values)


@dataclass(frozen=True)
class GoldenOptions:
    """How the golden set is read. ``threshold``: the lowest relevant grade (None: the manifest's,
    else 2); ``strict``: an invalid line is an error (else skipped with a warning); ``holdout``:
    evaluate the holdout questions only, counting the look in the database as ``by`` (by default
    only the dev questions, and those without a split, are evaluated)."""

    threshold: int | None = None
    strict: bool = True
    holdout: bool = False
    by: str | None = None

    def __post_init__(self) -> None:
        if self.threshold is not None and (not _whole(self.threshold) or self.threshold < 1):
            raise GoldenError(f"threshold must be a whole number >= 1 (grade 0 is irrelevant); got {self.threshold!r}")
        for name in ("strict", "holdout"):
            if not isinstance(getattr(self, name), bool):
                raise LabelerError(f"{name} must be True or False; got {getattr(self, name)!r}")
        if self.by is not None and not isinstance(self.by, str):
            raise LabelerError(f"by must be an account name; got {self.by!r}")


@dataclass(frozen=True)
class ScoringOptions:
    """What is scored: the default metrics at cutoff ``k`` (recall, precision, hit, ndcg @k and
    mrr; when ``k`` is given or no ``metrics`` are, 10 by default) plus every spec in ``metrics``
    (``ndcg@10``, ``P@5``...), each with a 95% bootstrap CI of ``n_resamples`` resamples; ``seed``
    seeds the bootstrap and the gate's randomization test."""

    k: int | None = None
    metrics: Sequence[str] = ()
    n_resamples: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.metrics, str) or not all(isinstance(s, str) for s in self.metrics):
            raise MetricError(f"metrics must be a list of metric specs, e.g. [\"ndcg@10\"]; got {self.metrics!r}")
        object.__setattr__(self, "metrics", tuple(self.metrics))
        metric_set(self.k, self.metrics)  # -k and every --metric, checked (an unknown one lists the known)
        if not _whole(self.n_resamples) or self.n_resamples < 1:
            raise MetricError(f"n_resamples (bootstrap resamples) must be a positive whole number, e.g. 1000; "
                                f"got {self.n_resamples!r}")
        if not _whole(self.seed):
            raise MetricError(f"--seed must be a whole number, e.g. 0; got {self.seed!r}")

    @property
    def reported_k(self) -> int | None:
        """The cutoff as the report's settings give it (None when only ``metrics`` were asked for)."""
        return DEFAULT_K if self.k is None and not self.metrics else self.k

    def specs(self, gated: Sequence[str] = ()) -> list[Metric]:
        """The metrics to compute: these, then any metric the gate names (``gated``) that is not among them."""
        return metric_set(self.k, [*self.metrics, *gated])


@dataclass(frozen=True)
class GateOptions:
    """The regression gate. ``baseline``: a baseline file (``save_baseline`` of an earlier run) to
    compare with; ``max_drop``: the tolerated drop of each metric's mean, ``["recall@5=0.02",
    "0.01"]`` (a bare number: every metric) or ``{"recall@5": 0.02, "*": 0.01}`` (none: every metric
    at 0); a metric fails when it dropped by more and the paired randomization test of
    ``n_permutations`` sign flips gives p < ``alpha``. ``allow_golden_change``: compare with a baseline
    made on another golden set, on the questions both share."""

    baseline: str | os.PathLike | None = None
    max_drop: Sequence[str] | Mapping[str, float] = ()
    alpha: float = 0.05
    allow_golden_change: bool = False
    n_permutations: int = 10000

    def __post_init__(self) -> None:
        if isinstance(self.max_drop, Mapping):
            object.__setattr__(self, "max_drop", tuple(
                str(v) if name == ALL else f"{name}={v}" for name, v in self.max_drop.items()))
        elif isinstance(self.max_drop, str) or not all(isinstance(p, str) for p in self.max_drop):
            raise BaselineError(f"--max-drop takes a list such as [\"recall@5=0.02\"] or a dict such as "
                                f"{{\"recall@5\": 0.02}}; got {self.max_drop!r}")
        else:
            object.__setattr__(self, "max_drop", tuple(self.max_drop))
        tolerances = parse_max_drop(self.max_drop)
        if not _path(self.baseline):
            raise BaselineError(f"--baseline must be the path of a baseline file; got {self.baseline!r}")
        if tolerances and self.baseline is None:
            raise LabelerError("--max-drop needs --baseline (the run to compare with)")
        if not _number(self.alpha) or not 0 < self.alpha < 1:
            raise BaselineError(f"--alpha must be between 0 and 1, e.g. 0.05; got {self.alpha!r}")
        if not isinstance(self.allow_golden_change, bool):
            raise BaselineError(f"allow_golden_change must be True or False; got {self.allow_golden_change!r}")
        if not _whole(self.n_permutations) or self.n_permutations < 1:
            raise MetricError(f"--permutations must be a positive whole number, e.g. 10000; got {self.n_permutations!r}")

    @property
    def tolerances(self) -> dict[str, float]:
        """``max_drop`` as {canonical metric spec or "*": tolerance}."""
        return parse_max_drop(self.max_drop)

    @property
    def gated(self) -> list[str]:
        """The metrics ``max_drop`` names (they are computed even when not asked for)."""
        return [s for s in self.tolerances if s != ALL]


@dataclass(frozen=True)
class OutputOptions:
    """Where the results go: ``output`` gets report.json and ``<stem>.questions.jsonl`` beside it;
    ``save_baseline`` gets this run as a baseline, unless the gate failed (a regression never
    becomes the new baseline silently); ``report_md`` gets the pull-request comment and ``junit`` a
    JUnit XML with one test case per metric (:mod:`labeler.harness.ci`), whatever the verdict."""

    output: str | os.PathLike | None = None
    save_baseline: str | os.PathLike | None = None
    report_md: str | os.PathLike | None = None
    junit: str | os.PathLike | None = None

    def __post_init__(self) -> None:
        for option, value in (("--output", self.output), ("--save-baseline", self.save_baseline),
                              ("--report-md", self.report_md), ("--junit", self.junit)):
            if not _path(value) or (value is not None and not str(value).strip()):
                raise LabelerError(f"{option} must be a file path, e.g. report.json; got {value!r}")


@dataclass(frozen=True)
class JudgeOptions:
    """Which judges score the answers: ``runs`` are calibration runs (in the database) of the
    faithfulness and/or answer-relevance judge, whose judge, rubric and model judge the pipeline's
    answers (a relevance run over all traffic is cited instead); ``llm_config``: how to reach the
    model (None: from the environment)."""

    runs: Sequence[int] = ()
    llm_config: Any = None

    def __post_init__(self) -> None:
        runs = []
        for run in () if self.runs is None else self.runs:
            try:
                if isinstance(run, bool) or (isinstance(run, float) and not run.is_integer()):
                    raise ValueError
                runs.append(int(run))
            except (TypeError, ValueError):
                raise LabelerError(f"--judge-run {run!r}: give a judge run id, a whole number "
                                   "(labeler judge list shows them)") from None
        object.__setattr__(self, "runs", tuple(runs))

