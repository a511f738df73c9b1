"""Agreement statistics: a judge against the consolidated human labels, and humans among themselves.

Every statistic comes with its n and a seeded percentile-bootstrap confidence interval. The bootstrap
is vectorised: pairs are resampled with replacement as one index matrix (``resample_indices``), each
pair is coded as one cell of the reference-by-rated confusion matrix, and a single ``np.bincount``
per block of resamples yields the confusion matrix of every resample. Every statistic here is a
function of that matrix (Spearman's rho through mid-ranks, Krippendorff's alpha through the
coincidence matrix), so 1,000 resamples of 100k pairs cost about a second and no per-resample
library call. Values equal sklearn's, scipy's and the ``krippendorff`` package's (the tests and
``tests/bench/bench_agreement.py`` check this on the same resample indices).

Conventions:

- Rows of the confusion matrix are the *reference* (the consolidated human grade; the
  alphabetically first annotator for human-human), columns the *rated* (the judge; the second
  annotator). Weighted kappas weigh by the grade difference on the full scale
  (``labels=range(levels)`` in sklearn terms), so an unused grade still counts as a step.
- "Relevant" is grade >= the project's threshold; precision / recall / F1 treat the reference as
  the truth and the rated side's "relevant" as the prediction.
- **Undefined is never a number.** A statistic is reported with ``value=None`` and a ``reason``
  when: there are fewer than ``min_n`` pairs (default 10); kappa (any weighting) when the expected
  agreement is 1, i.e. both sides used one and the same grade (sklearn returns NaN); the collapsed
  kappa when both sides put every pair on the same side of the threshold; Krippendorff's alpha when
  all ratings are one value; Spearman's rho when either side is constant; precision when the rated
  side called nothing relevant, recall when the reference has nothing relevant, F1 when neither has
  anything relevant; ROC AUC when the reference has one class only. Resamples where a statistic is
  undefined are left out of its interval (the ``note`` says how many); with more than half of them
  undefined the interval itself is None.
- The bootstrap resamples pairs, or whole clusters of pairs (``clusters=``): ``run_agreement``
  (in ``labeler.judge.calibration``) resamples queries, since the chunks of one query are graded together and are not independent.
- Names: ``DISPLAY_NAMES`` / ``display_name`` give each raw key the name people read ("Cohen's
  kappa", "weighted kappa (linear)", "kappa, relevant vs not"...); JSON keeps the raw keys.
- Human-human pairs: every pair of annotators who submitted a grade for the same item.
  Krippendorff's alpha weighs a pair from an item with m annotators by 1/(m-1), which makes it
  identical to the package's alpha over all annotators.
"""

from .resample import count_tables, resample_indices
from .retrievers import retriever_agreement
from .stats import (
    ANSWER_STATISTICS,
    DEFAULT_MIN_N,
    DISPLAY_NAMES,
    STATISTICS,
    HumanPairs,
    OrdinalArrays,
    Stat,
    display_name,
    human_pairs,
    ordinal_agreement,
    ordinal_arrays,
    paired_difference,
    roc_auc,
)

__all__ = [
    "ANSWER_STATISTICS", "DEFAULT_MIN_N", "DISPLAY_NAMES", "STATISTICS", "Agreement", "Comparison", "HumanPairs", "OrdinalArrays",
    "Stat", "compare_runs", "count_tables", "display_name", "drift", "human_pairs", "ordinal_agreement", "ordinal_arrays",
    "paired_difference", "resample_indices", "retriever_agreement", "roc_auc", "run_agreement",
]

# A judge run against the humans moved to labeler.judge.calibration (it reads judge runs, a floor
# above these statistics). The old names still resolve here, loaded only when asked for.
_MOVED_TO_CALIBRATION = ("Agreement", "Comparison", "compare_runs", "drift", "run_agreement")


def __getattr__(name: str):
    if name in _MOVED_TO_CALIBRATION:
        from ..judge import calibration

        return getattr(calibration, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
