"""The bootstrap's resamples: index matrices drawn in blocks (memory bounded whatever the size),
and the confusion-table counts of the sample and of every resample, of items or of whole clusters.
Every statistic of one call reads the same resamples."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

_CHUNK = 1 << 22  # index-matrix elements per block of resamples (16 MB of int32): bounds memory


def resample_indices(n: int, n_resamples: int, seed: int = 0) -> Iterator[np.ndarray]:
    """The bootstrap resamples of ``n`` items as blocks of an index matrix, (rows, n) each.

    Drawn with ``numpy.random.default_rng(seed)`` in blocks whose size depends on ``n`` only, so the
    same (n, n_resamples, seed) always gives the same indices; concatenated, the blocks are the
    (n_resamples, n) matrix. Every statistic of one call uses the same resamples.
    """
    if n_resamples <= 0 or n <= 0:
        return
    rng = np.random.default_rng(seed)
    dtype = np.int32 if n < 2**31 - 1 else np.int64
    step = max(1, _CHUNK // n)
    for start in range(0, n_resamples, step):
        yield rng.integers(0, n, size=(min(step, n_resamples - start), n), dtype=dtype)


def count_tables(cells: np.ndarray, n_cells: int, *, n_resamples: int, seed: int = 0,
                 weights: Sequence[np.ndarray | None] = (None,), clusters: Any = None) -> np.ndarray:
    """Cell counts of the sample (row 0) and of each bootstrap resample (rows 1..n_resamples).

    ``cells`` codes each item as an integer in [0, n_cells); returns (len(weights), n_resamples + 1,
    n_cells), one table stack per weight vector (None = count 1 per item), all on the same resamples.
    Without ``clusters`` the items are resampled (``resample_indices(n_items, ...)``); with a cluster
    id per item (e.g. the query of each pair) whole clusters are (``resample_indices(n_clusters,
    ...)``, clusters numbered in sorted order of their ids): a resample's table is then its cluster
    counts times the per-cluster cell counts, one matrix product per block.
    """
    cells = np.asarray(cells)
    n = cells.size
    out = np.zeros((len(weights), n_resamples + 1, n_cells))
    for w, weight in enumerate(weights):
        out[w, 0] = np.bincount(cells, weights=weight, minlength=n_cells)[:n_cells]
    row = 1
    if clusters is not None:
        _, cluster = np.unique(np.asarray(clusters), return_inverse=True)
        n_clusters = int(cluster.max()) + 1 if n else 0
        per = [np.bincount(cluster * n_cells + cells, weights=weight, minlength=n_clusters * n_cells)
               .reshape(n_clusters, n_cells) for weight in weights]
        for idx in resample_indices(n_clusters, n_resamples, seed):
            m = idx.shape[0]
            drawn = np.bincount((idx + (np.arange(m, dtype=idx.dtype) * n_clusters)[:, None]).ravel(),
                                minlength=m * n_clusters).reshape(m, n_clusters).astype(float)
            for w, table in enumerate(per):
                out[w, row:row + m] = drawn @ table
            row += m
        return out
    small = cells.astype(np.int32 if n_cells * (_CHUNK // max(n, 1) + 1) < 2**31 - 1 else np.int64)
    for idx in resample_indices(n, n_resamples, seed):
        m = idx.shape[0]
        coded = small[idx]
        coded += (np.arange(m, dtype=coded.dtype) * n_cells)[:, None]
        flat = coded.ravel()
        for w, weight in enumerate(weights):
            out[w, row:row + m] = np.bincount(
                flat, weights=None if weight is None else weight[idx].ravel(),
                minlength=m * n_cells).reshape(m, n_cells)
        row += m
    return out
