"""How many topics, and where k-means starts: ``choose_k`` picks k where Ward's agglomeration of a
sample of the questions jumps (the merge that would join two of the k clusters costs most
relative to the merge before it); ``ward_centroids`` gives the k starting centroids.

Why this rule (measured on the noisy planted sets of tests/planted.py, 600 questions from 6 topics
and 2,000 from 12, data seeds 1-7, on clean planted traffic and on the 112 CISI queries; TF-IDF
projected to ``LSA_DIMS`` = 200 dimensions unless said):

- The cosine silhouette grows with k on short questions, of k-means and of Ward's cuts alike (6
  topics: 0.04 at k=2, 0.10 at 6, 0.17 at 40; 12 topics: 0.02, 0.12 at 12, 0.13 at 40): many
  small clusters of near-duplicate questions are tight. Any rule built on it drifts to the largest
  candidate (the old rule, the first peak of the silhouette, gave 40 on both).
- k-means++ (10 starts) is lost there: at k=12 it stopped at clusters of generic words ("help",
  "account") with purity 0.21 (at 100 dimensions 0.20, with a lower inertia than the planted
  topics). Ward's agglomeration finds the topics (purity 0.94 at the true k, 0.98 once k-means
  refines it, with an inertia below the planted topics').
- Stability (at 100 dimensions: the mean adjusted Rand index of the Ward clusterings of 5
  subsamples of 80%) peaks at the planted k on most sets (0.93 at k=6, 0.91 at k=12) but k=2 (one
  topic split off) is as stable on some: the largest stable peak was 2 and 15 on 2 of 12 sets.
- The jump of Ward's merge cost, ``height(k -> k-1) / height(k+1 -> k)``, is largest at the
  planted k on all 14 noisy sets and on the clean one (1.18-1.34 there, at most 1.07 at any other
  k; clean 6 topics 1.71). On CISI (one subject area) no k stands out: the largest jump is 1.07,
  at k=2. On the benchmark's traffic (20 topics under 6 shared templates) it is 20.

The jump of every candidate k is returned so that the caller can say why it chose one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.cluster.hierarchy import linkage
from sklearn.decomposition import TruncatedSVD
from sklearn.preprocessing import normalize
from threadpoolctl import threadpool_limits

from .space import LSA_DIMS

K_SAMPLE = 2_000  # questions k is chosen on and the starting centroids come from
K_MAX = 40  # the largest k chosen (at most a tenth of the sample)
CRITERION = (f"Ward's merge-cost jump on a seeded sample of at most {K_SAMPLE} questions: for each k, the cost "
             "of the merge that would leave k-1 clusters over the cost of the merge that left k; the largest jump "
             "wins (k from 2 to a tenth of the sample, at most 40)")


def dense_sample(rows: Any, *, seed: int, size: int = K_SAMPLE) -> tuple[np.ndarray, np.ndarray]:
    """(indices, dense float64 rows) of a seeded sample of at most ``size`` rows; sparse TF-IDF
    rows wider than ``LSA_DIMS`` are projected to that many LSA dimensions and normalised again
    (Ward needs dense rows, and the projection is what the topics are clustered on)."""
    n = rows.shape[0]
    rng = np.random.default_rng([seed, 1])
    pick = np.sort(rng.choice(n, size=min(n, size), replace=False))
    sample = rows[pick]
    if hasattr(sample, "getnnz"):
        with threadpool_limits(1):
            sample = normalize(TruncatedSVD(LSA_DIMS, random_state=seed).fit_transform(sample)) \
                if sample.shape[1] > LSA_DIMS else sample.toarray()
    # float64: scikit-learn and scipy compute float32 distances in slow upcasting paths
    return pick, np.asarray(sample, dtype=np.float64)


def cut(tree: np.ndarray, n: int, k: int) -> np.ndarray:
    """Cluster (0..k-1) of each of the ``n`` leaves of the linkage ``tree`` after its first n - k
    merges: exactly k clusters, which ``fcluster(maxclust)`` does not promise when merge
    heights tie (identical questions)."""
    parent = np.arange(2 * n - 1)

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return int(i)

    for step in range(n - k):
        a, b = int(tree[step, 0]), int(tree[step, 1])
        parent[root(a)] = n + step
        parent[root(b)] = n + step
    roots = np.array([root(i) for i in range(n)])
    return np.unique(roots, return_inverse=True)[1].astype(np.int64)


def centroids_of(rows: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """The L2-normalised mean row of each of the k clusters."""
    sums = np.zeros((k, rows.shape[1]))
    np.add.at(sums, labels, rows)
    return normalize(sums)


def ward_centroids(rows: Any, k: int, *, seed: int) -> np.ndarray | None:
    """k starting centroids for k-means: the Ward clustering of a seeded sample of ``rows`` (as
    :func:`dense_sample` gives it) cut at k; None when the sample has fewer than 2k rows. In the
    space the rows are in, so only for dense rows or rows of at most ``LSA_DIMS`` terms."""
    _, sample = dense_sample(rows, seed=seed)
    if 2 * k > len(sample):
        return None
    with threadpool_limits(1):
        tree = linkage(sample, "ward")
    return centroids_of(sample, cut(tree, len(sample), k), k)


def choose_k(rows: Any, weights: np.ndarray | None = None, *, seed: int) -> tuple[int, dict[int, float]]:
    """(k, {candidate: jump}) over k = 2 .. min(``K_MAX``, a tenth of the sample): see the module
    doc and ``CRITERION``; ties go to the smaller k. ``weights`` are not used: Ward takes none, and
    a question asked often is still one point of its subject's shape."""
    del weights
    _, sample = dense_sample(rows, seed=seed)
    n = len(sample)
    with threadpool_limits(1):
        tree = linkage(sample, "ward")
    heights = tree[::-1, 2]  # heights[j]: the merge that leaves j + 1 clusters
    scores: dict[int, float] = {}
    for k in range(2, min(K_MAX, n // 10) + 1):
        # identical questions merge at height 0: no jump can be measured against it
        scores[k] = round(float(heights[k - 2] / heights[k - 1]), 4) if heights[k - 1] > 0 else 0.0
    if not scores:
        return 2, scores
    return max(scores, key=lambda c: (scores[c], -c)), scores
