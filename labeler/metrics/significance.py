"""Significance of a difference between two systems on the same queries: the paired randomization
(sign-flip) test, exact for a handful of pairs."""

from __future__ import annotations

import numpy as np

from .judgments import MetricError

_CHUNK = 1 << 18  # elements per resampling block: stays in cache and bounds memory whatever n is


EXACT_MAX = 16  # most differences for which paired_test may enumerate every sign flip (65,536)


def paired_test(a: np.ndarray, b: np.ndarray, *, n_resamples: int = 10000, seed: int = 0,
                exact: bool = False) -> float:
    """Two-sided paired randomization (sign-flip) test of mean(a - b) = 0; returns the p-value.

    ``a`` and ``b`` are per-query values of two systems on the same queries; pairs where either is NaN
    are dropped. Each resample flips the sign of every difference with probability 1/2 (seeded);
    p = (count of |resampled mean| >= |observed mean| + 1) / (n_resamples + 1). Identical inputs give
    p = 1; no pairs give NaN. ``exact``: when the n pairs have at most :data:`EXACT_MAX` and 2^n <=
    ``n_resamples``, enumerate all 2^n sign assignments instead (the identity included) and return
    the exact p = (count of |flipped mean| >= |observed mean|) / 2^n; no randomness is involved.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise MetricError(f"a and b must be 1-d arrays of the same length; got shapes {a.shape} and {b.shape}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int | np.integer) or n_resamples < 1:
        raise MetricError(f"n_resamples must be a positive whole number, e.g. 10000; got {n_resamples!r}")
    diff = (a - b)[~(np.isnan(a) | np.isnan(b))]
    n = diff.size
    if n == 0:
        return float("nan")
    total = diff.sum()
    observed = abs(total)
    # Sums differ from the observed one by rounding only when the signs change nothing.
    tolerance = 1e-9 * np.abs(diff).sum()
    if exact and n <= EXACT_MAX and 2 ** n <= n_resamples:
        # row i keeps difference j when bit j of i is set: every assignment exactly once
        kept = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(float) @ diff
        return int(np.count_nonzero(np.abs(2 * kept - total) >= observed - tolerance)) / 2 ** n
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK // n)
    count = 0
    for start in range(0, n_resamples, chunk):
        size = min(chunk, n_resamples - start)
        # One random bit per difference (keep = 1, flip = 0): sum = 2 * kept - total.
        bits = rng.integers(0, 256, size=(size, (n + 7) // 8), dtype=np.uint8)
        kept = np.unpackbits(bits, axis=1, count=n).astype(float) @ diff
        count += int(np.count_nonzero(np.abs(2 * kept - total) >= observed - tolerance))
    return (count + 1) / (n_resamples + 1)
