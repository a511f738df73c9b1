"""Aggregation with seeded bootstrap confidence intervals: Poisson(1) resampling weights that depend only
on the seed, the key and the number of resamples (so sums can be patched when a few queries change),
resampled sums, percentile intervals, and ``aggregate`` (mean, CI and n per metric)."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd

from .judgments import COUNT_COLUMNS, MetricError

_BLOCK_BITS = 10  # resampling weights are drawn for blocks of 1024 consecutive keys


def _poisson_table() -> np.ndarray:
    """Poisson(1) by table lookup: entry j is the inverse CDF at (j + 0.5) / 65536, so a uniform
    16-bit draw gives a Poisson(1) count with every probability within 1/65536 of the exact one."""
    pmf = np.exp(-1.0) / np.cumprod(np.r_[1.0, np.arange(1.0, 20.0)])
    cdf = np.cumsum(pmf)
    u = (np.arange(65536) + 0.5) / 65536
    return np.searchsorted(cdf, u, side="right").astype(np.uint8)


_POISSON = _poisson_table()


def resample_weights(seed: int, block: int, n_resamples: int) -> np.ndarray:
    """The bootstrap weights of keys ``block * 1024 ... block * 1024 + 1023``: an (n_resamples, 1024)
    uint8 array of Poisson(1) counts drawn from ``numpy.random.default_rng([seed, block])``. A key's
    weights depend only on the seed, the key and n_resamples, never on which other keys are present,
    which is what lets a report patch its resampled sums when a few queries change."""
    rng = np.random.default_rng([int(seed), int(block)])
    draws = np.frombuffer(rng.bytes(n_resamples * (2 << _BLOCK_BITS)), dtype=np.uint16)
    return _POISSON[draws].reshape(n_resamples, 1 << _BLOCK_BITS)


def resample_sums(keys: np.ndarray, columns: np.ndarray, *, seed: int = 0, n_resamples: int = 1000) -> np.ndarray:
    """Poisson-bootstrap sums: ``out[b, j] = sum_i w[b, key_i] * columns[i, j]`` with the weights of
    :func:`resample_weights`; shape (n_resamples, columns.shape[1]). ``keys``: distinct whole numbers
    >= 0 (query pks, or positions), one per row of ``columns``. Sums over disjoint sets of keys add
    up to the sum over their union (up to float rounding)."""
    keys = np.asarray(keys, dtype=np.int64)
    columns = np.asarray(columns, dtype=np.float64).reshape(keys.size, -1)
    out = np.zeros((int(n_resamples), columns.shape[1]))
    if keys.size == 0:
        return out
    blocks = keys >> _BLOCK_BITS
    order = np.argsort(blocks, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(blocks[order]) != 0])
    for rows in np.split(order, starts[1:]):
        weights = _key_weights(int(seed), int(blocks[rows[0]]), int(n_resamples), keys[rows] & ((1 << _BLOCK_BITS) - 1))
        out += weights.astype(np.float64) @ columns[rows]
    return out


_KEY_CACHE_MAX = 1 << 16  # key columns kept (64 MB at 1000 resamples); past it the cache starts over
_key_cache: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}
_key_cache_held = [0]  # key columns in _key_cache
_key_cache_lock = threading.Lock()


def _key_weights(seed: int, block: int, n_resamples: int, offsets: np.ndarray) -> np.ndarray:
    """``resample_weights(seed, block, n_resamples)[:, offsets]``, with the columns of the keys asked
    for kept in memory: drawing a block costs the same whether 1 or 1024 of its keys are present, and
    a report's groups (topics, signals) ask for the same few keys of many blocks on every rerun."""
    cache_key = (seed, n_resamples, block)
    with _key_cache_lock:
        hit = _key_cache.get(cache_key)
    if hit is not None:
        known, cached = hit
        pos = np.minimum(np.searchsorted(known, offsets), known.size - 1)
        if (known[pos] == offsets).all():
            return cached[:, pos]
    full = resample_weights(seed, block, n_resamples)
    known = np.union1d(offsets, hit[0]) if hit is not None else np.unique(offsets)
    with _key_cache_lock:
        old = _key_cache.pop(cache_key, None)
        _key_cache_held[0] -= 0 if old is None else old[0].size
        if _key_cache_held[0] + known.size > _KEY_CACHE_MAX:
            _key_cache.clear()
            _key_cache_held[0] = 0
        if known.size <= _KEY_CACHE_MAX:
            _key_cache[cache_key] = (known, full[:, known])
            _key_cache_held[0] += known.size
    return full[:, offsets]


def bootstrap_keys(index: pd.Index) -> np.ndarray:
    """The resampling key of each row: the index itself when it holds distinct whole numbers >= 0
    (query pks: a query keeps its weights whatever else is in the table), else the row position."""
    if index.dtype.kind in "iu" and index.size and index.min() >= 0 and index.is_unique:
        return index.to_numpy(np.int64)
    return np.arange(index.size, dtype=np.int64)


def interval(sums: np.ndarray, counts: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of resampled means ``sums / counts`` (resamples that drew no query are
    skipped): (low, high), one value per column of ``sums``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        means = sums / counts.reshape(-1, 1)
    means[counts == 0] = np.nan
    q = [(1 - confidence) / 2, (1 + confidence) / 2]
    low, high = np.nanquantile(means, q, axis=0)
    return low, high


def aggregate(
    per_q: pd.DataFrame, *, confidence: float = 0.95, n_resamples: int = 1000, seed: int = 0
) -> dict[str, dict]:
    """Mean and percentile-bootstrap confidence interval of every metric column of ``per_q``.

    Metric columns are all but ``n_relevant`` and ``n_retrieved``. Each gets ``{"mean", "ci_low",
    "ci_high", "n"}`` over its non-NaN values. The bootstrap is the Poisson bootstrap: resample b
    gives each query a weight w[b, query] ~ Poisson(1) (:func:`resample_weights`, seeded by
    ``seed``, keyed by the query: see :func:`bootstrap_keys`) and its mean is the weighted mean;
    the interval is the (1-confidence)/2 and (1+confidence)/2 quantiles of the ``n_resamples``
    means (a resample that drew no query is skipped). As n grows it agrees with resampling n
    queries with replacement; unlike it, a query's weights do not depend on the other queries, so
    a report can update its interval when a few queries change without redrawing everything. A
    column's interval depends only on its own values, their keys, the seed and the options.
    n == 0 gives None for mean and interval; n == 1 gives an interval equal to the value.
    """
    if not 0 < confidence < 1:
        raise MetricError(f"confidence must be between 0 and 1, e.g. 0.95; got {confidence!r}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int | np.integer) or n_resamples < 1:
        raise MetricError(f"n_resamples must be a positive whole number, e.g. 1000; got {n_resamples!r}")
    metric_columns = [c for c in per_q.columns if c not in COUNT_COLUMNS]
    keys = bootstrap_keys(per_q.index)
    result: dict[str, dict] = {}
    # Columns with the same non-NaN rows share a count column (the usual case: all but judged).
    groups: dict[bytes, list] = {}
    for column in metric_columns:
        values = per_q[column].to_numpy(dtype=float)
        mask = ~np.isnan(values)
        groups.setdefault(mask.tobytes(), []).append((column, values, mask))
    matrix, layout = [], []
    for members in groups.values():
        mask = members[0][2]
        layout.append((len(matrix), members))
        matrix.extend(np.where(mask, v, 0.0) for _, v, _ in members)
        matrix.append(mask.astype(float))
    sums = resample_sums(keys, np.column_stack(matrix), seed=int(seed), n_resamples=int(n_resamples)) \
        if matrix and len(keys) else None
    for first, members in layout:
        mask = members[0][2]
        n = int(mask.sum())
        if n > 1:
            low, high = interval(sums[:, first:first + len(members)], sums[:, first + len(members)], confidence)
        for j, (column, values, _) in enumerate(members):
            if n == 0:
                result[column] = {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
                continue
            mean = float(values[mask].mean())
            lo, hi = (mean, mean) if n == 1 else (float(low[j]), float(high[j]))
            result[column] = {"mean": mean, "ci_low": lo, "ci_high": hi, "n": n}
    return {c: result[c] for c in metric_columns}
