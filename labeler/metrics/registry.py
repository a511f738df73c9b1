"""Metrics by name: a metric is a function registered under a name (with aliases), parsed from a
spec such as ``ndcg@10`` into a ``Metric``; the built-ins (``measures``) register the same way as
extensions."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .judgments import MetricError, RankedJudgments


@dataclass(frozen=True)
class Metric:
    """A parsed metric spec: canonical ``name``, cutoff ``k`` (None = whole list), and ``spec`` as the
    user spelled it (``"P@5"`` stays ``"P@5"``, named ``precision`` with k=5); ``spec`` is the column
    name in :func:`per_query` output."""

    name: str
    k: int | None
    spec: str

    def __str__(self) -> str:
        return self.spec

    @property
    def definition(self) -> MetricDef:
        """The registered :class:`MetricDef` behind ``name``."""
        return METRICS[self.name]


MetricFn = Callable[[RankedJudgments, "int | None"], np.ndarray]


@dataclass(frozen=True)
class MetricDef:
    """A registered metric: ``fn(judgments, k)`` returns one float per query (0/0 may give NaN)."""

    name: str
    fn: MetricFn
    aliases: tuple[str, ...]
    needs_k: bool
    nan_without_relevant: bool

    @property
    def description(self) -> str:
        """First line of the function's docstring, for help texts and the README table."""
        return next(iter((self.fn.__doc__ or "").strip().splitlines()), "")


METRICS: dict[str, MetricDef] = {}
ALIASES: dict[str, str] = {}  # alias (lower case) -> canonical name
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def register_metric(
    name: str,
    fn: MetricFn,
    *,
    aliases: Sequence[str] = (),
    needs_k: bool = False,
    nan_without_relevant: bool = True,
) -> MetricDef:
    """Register ``fn`` as metric ``name`` (lower case) and its ``aliases`` (matched case-insensitively).

    ``needs_k``: a spec must give a cutoff (``name@k``); otherwise the cutoff is optional.
    ``nan_without_relevant``: :func:`per_query` sets the value to NaN for queries with no relevant doc.
    Raises MetricError when a name or alias is malformed or already taken.
    """
    names = [name, *(a.lower() for a in aliases)]
    if len(set(names)) < len(names):
        raise MetricError(f"metric {name!r} lists a name twice among {names}; give each name once")
    for n in names:
        if not _NAME.match(n):
            raise MetricError(f"metric name {n!r} is invalid: use lower-case letters, digits and '_'")
        if n in METRICS or n in ALIASES:
            raise MetricError(f"metric name {n!r} is already registered; pick another name")
    definition = MetricDef(name, fn, tuple(aliases), needs_k, nan_without_relevant)
    METRICS[name] = definition
    ALIASES.update({a: name for a in names[1:]})
    return definition


def known_metrics() -> str:
    return ", ".join(
        f"{d.name} ({', '.join(d.aliases)})" if d.aliases else d.name for _, d in sorted(METRICS.items())
    )


def parse_metric(spec: str) -> Metric:
    """Parse ``name`` or ``name@k`` (e.g. ``recall@5``, ``P@10``, ``mrr``) into a :class:`Metric`.

    Names and aliases are case-insensitive; k must be a positive integer and is required for metrics
    registered with ``needs_k``. Raises MetricError naming the spec and, for an unknown name, every
    known name and alias.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise MetricError(f"metric spec {spec!r} is empty; write e.g. 'recall@10' or 'mrr'")
    spec = spec.strip()
    raw_name, at, raw_k = spec.partition("@")
    key = raw_name.strip().lower()
    name = key if key in METRICS else ALIASES.get(key)
    if name is None:
        raise MetricError(f"unknown metric {raw_name!r} in {spec!r}; known metrics: {known_metrics()}")
    k = None
    if at:
        if not re.fullmatch(r"\s*\d+\s*", raw_k) or int(raw_k) < 1:
            raise MetricError(f"cutoff in {spec!r} must be a positive integer, e.g. '{raw_name}@10'")
        k = int(raw_k)
    elif METRICS[name].needs_k:
        raise MetricError(f"metric {spec!r} needs a cutoff: write e.g. '{raw_name}@10'")
    return Metric(name, k, spec)
