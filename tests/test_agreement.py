"""labeler.agreement against sklearn, scipy and the krippendorff package on hand-built fixtures,
the undefined cases, and the vectorised bootstrap against a plain loop on the same resamples."""

from __future__ import annotations

import krippendorff
import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau, spearmanr
from sklearn.metrics import (
    cohen_kappa_score,
    confusion_matrix,
    precision_recall_fscore_support,
    roc_auc_score,
)

from labeler.agreement import (
    STATISTICS,
    count_tables,
    human_pairs,
    ordinal_agreement,
    ordinal_arrays,
    paired_difference,
    resample_indices,
    retriever_agreement,
    roc_auc,
)
from labeler.errors import JudgeError

LEVELS = list(range(4))
# 24 hand-built pairs on a 0..3 scale: mostly agreeing, a few one-off, two far off, grade 1 rare.
HUMAN = np.array([0, 0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 0, 2, 3])
JUDGE = np.array([0, 0, 0, 0, 1, 2, 1, 2, 2, 2, 2, 3, 1, 2, 3, 3, 3, 2, 3, 3, 3, 3, 0, 3])


def reference(h: np.ndarray, j: np.ndarray, threshold: int = 2) -> dict[str, float]:
    """Every statistic the plain way: one library call each."""
    p, r, f, _ = precision_recall_fscore_support(h >= threshold, j >= threshold, average="binary", zero_division=np.nan)
    return {
        "exact_agreement": float(np.mean(h == j)),
        "cohen_kappa": cohen_kappa_score(h, j, labels=LEVELS),
        "kappa_linear": cohen_kappa_score(h, j, labels=LEVELS, weights="linear"),
        "kappa_quadratic": cohen_kappa_score(h, j, labels=LEVELS, weights="quadratic"),
        "kappa_collapsed": cohen_kappa_score(h >= threshold, j >= threshold, labels=[False, True]),
        "krippendorff_alpha": krippendorff.alpha(reliability_data=np.vstack([h, j]).astype(float),
                                                 level_of_measurement="ordinal", value_domain=LEVELS),
        "spearman_rho": spearmanr(h, j).statistic,
        "precision": p, "recall": r, "f1": f,
        "bias": float(np.mean(j - h)),
        "over_grading": float(np.mean(j > h)),
        "under_grading": float(np.mean(j < h)),
    }


def test_every_statistic_equals_the_libraries_on_a_hand_built_fixture():
    stats = ordinal_agreement(HUMAN, JUDGE, levels=4, threshold=2, n_resamples=200)
    assert list(stats) == list(STATISTICS)
    expected = reference(HUMAN, JUDGE)
    for name, value in expected.items():
        assert stats[name].value == pytest.approx(value, abs=1e-12), name
        assert stats[name].n == 24
        assert stats[name].ci_low <= stats[name].value + 1e-12 <= stats[name].ci_high + 2e-12, name
    assert stats["confusion_matrix"].value == confusion_matrix(HUMAN, JUDGE, labels=LEVELS).tolist()
    # By hand: 16 of 24 agree; the judge grades 5 pairs up (0->1, 0->2, 1->2, 2->3, 0->3) and 3 down.
    assert stats["exact_agreement"].value == pytest.approx(16 / 24)
    assert (stats["over_grading"].value, stats["under_grading"].value) == (pytest.approx(5 / 24), pytest.approx(3 / 24))
    assert stats["bias"].value == pytest.approx((1 + 2 + 1 + 1 + 3 - 1 - 1 - 2) / 24)


def test_weights_count_unused_grades_as_steps():
    # Grade 1 is never used: weights still follow the full scale (sklearn needs labels= for that).
    h, j = np.array([0, 0, 2, 2, 3, 3, 0, 2, 3, 3]), np.array([0, 2, 2, 3, 3, 0, 0, 2, 2, 3])
    stats = ordinal_agreement(h, j, levels=4, threshold=2, n_resamples=0)
    assert stats["kappa_linear"].value == pytest.approx(cohen_kappa_score(h, j, labels=LEVELS, weights="linear"))
    assert stats["kappa_linear"].value != pytest.approx(cohen_kappa_score(h, j, weights="linear"))
    assert stats["kappa_linear"].note == "no resamples: no interval"


@pytest.mark.parametrize("threshold", [1, 2, 3])
def test_collapsed_kappa_and_precision_recall_follow_the_threshold(threshold):
    stats = ordinal_agreement(HUMAN, JUDGE, levels=4, threshold=threshold, n_resamples=0)
    expected = reference(HUMAN, JUDGE, threshold)
    for name in ("kappa_collapsed", "precision", "recall", "f1"):
        assert stats[name].value == pytest.approx(expected[name]), (name, threshold)


def test_bias_of_a_plus_one_judge():
    judge = np.minimum(HUMAN + 1, 3)
    stats = ordinal_agreement(HUMAN, judge, levels=4, threshold=2, n_resamples=100)
    assert stats["bias"].value == pytest.approx(np.mean(judge - HUMAN))
    assert stats["bias"].ci_low > 0
    assert stats["under_grading"].value == 0 and stats["over_grading"].value == pytest.approx(np.mean(judge > HUMAN))


def test_perfect_agreement():
    stats = ordinal_agreement(HUMAN, HUMAN, levels=4, threshold=2, n_resamples=200)
    for name in ("exact_agreement", "cohen_kappa", "kappa_linear", "kappa_quadratic", "kappa_collapsed",
                 "krippendorff_alpha", "spearman_rho", "precision", "recall", "f1"):
        assert (stats[name].value, stats[name].ci_low, stats[name].ci_high) == pytest.approx((1, 1, 1)), name
    assert stats["bias"].value == 0


def test_one_class_only_is_undefined_with_a_reason_never_a_number():
    same = np.full(12, 2)
    with pytest.warns(UserWarning):
        assert np.isnan(cohen_kappa_score(same, same))  # sklearn: NaN; we: None + reason
    stats = ordinal_agreement(same, same, levels=4, threshold=2, n_resamples=50)
    for name in ("cohen_kappa", "kappa_linear", "kappa_quadratic"):
        assert stats[name].value is None and "expected agreement is 1" in stats[name].reason
        assert stats[name].ci_low is None and stats[name].ci_high is None
        assert stats[name].to_dict() == {"value": None, "ci_low": None, "ci_high": None, "n": 12,
                                         "reason": stats[name].reason}
    assert stats["kappa_collapsed"].value is None and "at or above the threshold" in stats["kappa_collapsed"].reason
    assert stats["krippendorff_alpha"].value is None and "no variation" in stats["krippendorff_alpha"].reason
    assert stats["spearman_rho"].value is None
    assert stats["recall"].value == 1 and stats["precision"].value == 1  # defined: everything relevant
    assert stats["exact_agreement"].value == 1 and stats["bias"].value == 0


def test_precision_recall_f1_undefined_cases_match_sklearn_zero_division():
    h = np.array([0, 1, 1, 0, 2, 3, 0, 1, 0, 1])
    nothing = np.array([0, 1, 0, 0, 1, 1, 0, 0, 1, 0])
    stats = ordinal_agreement(h, nothing, levels=4, threshold=2, n_resamples=0)
    assert stats["precision"].value is None and "called no pair relevant" in stats["precision"].reason
    assert stats["recall"].value == 0 and stats["f1"].value == 0
    p, r, f, _ = precision_recall_fscore_support(h >= 2, nothing >= 2, average="binary", zero_division=np.nan)
    assert np.isnan(p) and r == 0 and f == 0
    both_none = ordinal_agreement(nothing, nothing[::-1], levels=4, threshold=2, n_resamples=0)
    assert both_none["recall"].value is None and both_none["f1"].value is None
    assert "neither" in both_none["f1"].reason
    assert both_none["kappa_collapsed"].value is None  # both all below the threshold
    assert both_none["cohen_kappa"].value == pytest.approx(cohen_kappa_score(nothing, nothing[::-1], labels=LEVELS))


def test_spearman_undefined_when_one_side_is_constant_but_kappa_is_zero():
    h = np.array([0, 1, 2, 3, 0, 1, 2, 3, 0, 1])
    j = np.full(10, 2)
    stats = ordinal_agreement(h, j, levels=4, threshold=2, n_resamples=0)
    assert stats["spearman_rho"].value is None and "every judge grade is 2" in stats["spearman_rho"].reason
    assert stats["cohen_kappa"].value == pytest.approx(cohen_kappa_score(h, j, labels=LEVELS)) == 0


def test_too_few_pairs_and_no_pairs():
    stats = ordinal_agreement(HUMAN[:5], JUDGE[:5], levels=4, threshold=2, min_n=10)
    assert all(stats[name].value is None and "only 5 pair(s)" in stats[name].reason
               for name in STATISTICS if name != "confusion_matrix")
    assert stats["confusion_matrix"].value is not None  # counts are always shown
    empty = ordinal_agreement([], [], levels=4, threshold=2)
    assert empty["cohen_kappa"].reason == "no pairs to compare" and empty["cohen_kappa"].n == 0
    small = ordinal_agreement(HUMAN[:5], JUDGE[:5], levels=4, threshold=2, min_n=1, n_resamples=0)
    assert small["cohen_kappa"].value == pytest.approx(cohen_kappa_score(HUMAN[:5], JUDGE[:5], labels=LEVELS))


def test_bad_input_is_a_clear_error():
    with pytest.raises(JudgeError, match="outside 0..3"):
        ordinal_agreement([0, 4], [0, 1], levels=4, threshold=2)
    with pytest.raises(JudgeError, match="equal length"):
        ordinal_agreement([0, 1], [0], levels=4, threshold=2)
    with pytest.raises(JudgeError, match="whole-number"):
        ordinal_agreement([0.5, 1], [0, 1], levels=4, threshold=2)
    with pytest.raises(JudgeError, match="confidence"):
        ordinal_agreement(HUMAN, JUDGE, levels=4, threshold=2, confidence=95)


def test_bootstrap_is_seeded_and_vectorised_values_equal_a_library_loop_on_the_same_resamples():
    rng = np.random.default_rng(5)
    h = rng.integers(0, 4, 300)
    j = np.clip(h + rng.integers(-2, 2, 300), 0, 3)
    one = ordinal_agreement(h, j, levels=4, threshold=2, n_resamples=300, seed=11)
    again = ordinal_agreement(h, j, levels=4, threshold=2, n_resamples=300, seed=11)
    other = ordinal_agreement(h, j, levels=4, threshold=2, n_resamples=300, seed=12)
    assert one["cohen_kappa"] == again["cohen_kappa"] and one["cohen_kappa"] != other["cohen_kappa"]

    arrays = ordinal_arrays(h, j, levels=4, threshold=2, n_resamples=40, seed=3).arrays
    idx = np.vstack(list(resample_indices(300, 40, seed=3)))
    assert idx.shape == (40, 300)
    for r in range(40):
        expected = reference(h[idx[r]], j[idx[r]])
        for name, value in expected.items():
            assert arrays[name][r + 1] == pytest.approx(value, abs=1e-10), (name, r)



def test_query_bootstrap_draws_whole_queries_and_equals_a_library_loop():
    rng = np.random.default_rng(8)
    query = np.repeat(np.arange(50) * 7 + 3, rng.integers(1, 8, 50))  # 50 queries, 1-7 pairs each, sparse ids
    h = rng.integers(0, 4, query.size)
    j = np.clip(h + rng.integers(-1, 2, query.size), 0, 3)
    arrays = ordinal_arrays(h, j, levels=4, threshold=2, n_resamples=30, seed=4, clusters=query).arrays
    ids = np.unique(query)
    for r, drawn in enumerate(np.vstack(list(resample_indices(ids.size, 30, seed=4)))):
        rows = np.concatenate([np.flatnonzero(query == ids[c]) for c in drawn])
        expected = reference(h[rows], j[rows])
        for name, value in expected.items():
            assert arrays[name][r + 1] == pytest.approx(value, abs=1e-10), (name, r)
    by_query = ordinal_agreement(h, j, levels=4, threshold=2, n_resamples=300, clusters=query)
    by_pair = ordinal_agreement(h, j, levels=4, threshold=2, n_resamples=300)
    assert by_query["cohen_kappa"].value == by_pair["cohen_kappa"].value  # only the interval differs
    assert by_query["cohen_kappa"].n == query.size
    with pytest.raises(JudgeError, match="one id per pair"):
        ordinal_agreement(h, j, levels=4, threshold=2, clusters=query[:-1])

def test_interval_is_the_percentile_of_the_resampled_values():
    arrays = ordinal_arrays(HUMAN, JUDGE, levels=4, threshold=2, n_resamples=500, seed=0).arrays
    stats = ordinal_agreement(HUMAN, JUDGE, levels=4, threshold=2, n_resamples=500, seed=0)
    boot = arrays["kappa_quadratic"][1:]
    assert stats["kappa_quadratic"].ci_low == pytest.approx(np.quantile(boot, 0.025))
    assert stats["kappa_quadratic"].ci_high == pytest.approx(np.quantile(boot, 0.975))
    # Resamples where precision is undefined (the judge called nothing relevant) are left out and counted.
    tiny = ordinal_agreement([0, 0, 0, 0, 0, 0, 0, 0, 0, 3], [0, 0, 0, 0, 0, 0, 0, 0, 0, 3], levels=4, threshold=2,
                             n_resamples=200, seed=0)
    assert tiny["precision"].value == 1 and "resamples undefined" in tiny["precision"].note


def test_human_pairs_weights_make_alpha_equal_the_package_with_three_annotators():
    rows = []
    rng = np.random.default_rng(2)
    for item in range(40):
        truth = item % 4
        annotators = ["ann", "bob", "cy"] if item % 3 == 0 else ["ann", "bob"] if item % 3 == 1 else ["cy"]
        for a in annotators:
            rows.append((item, 0, a, int(np.clip(truth + rng.integers(-1, 2), 0, 3))))
    df = pd.DataFrame(rows, columns=["query_pk", "doc_pk", "annotator", "grade"])
    hp = human_pairs(df, ["query_pk", "doc_pk"])
    assert hp.items == 27 and hp.first.size == 14 * 3 + 13  # 14 triples (3 pairs) and 13 doubles
    assert set(np.round(hp.weights, 6)) == {0.5, 1.0}
    stats = ordinal_agreement(hp.first, hp.second, levels=4, threshold=2, pair_weights=hp.weights,
                              alpha_data=hp.reliability, n_resamples=100)
    package = krippendorff.alpha(reliability_data=hp.reliability, level_of_measurement="ordinal", value_domain=LEVELS)
    vectorised = ordinal_arrays(hp.first, hp.second, levels=4, threshold=2, n_resamples=0,
                                pair_weights=hp.weights).arrays["krippendorff_alpha"][0]
    assert stats["krippendorff_alpha"].value == pytest.approx(package)
    assert vectorised == pytest.approx(package, abs=1e-12)
    assert stats["cohen_kappa"].value == pytest.approx(cohen_kappa_score(hp.first, hp.second, labels=LEVELS))


def test_roc_auc_matches_sklearn_and_needs_two_classes():
    rng = np.random.default_rng(9)
    positive = rng.random(80) < 0.4
    score = np.round(rng.random(80) * 0.6 + positive * 0.3, 1)  # ties on purpose
    stat = roc_auc(positive, score, n_resamples=300)
    assert stat.value == pytest.approx(roc_auc_score(positive, score))
    assert stat.ci_low < stat.value < stat.ci_high
    idx = next(resample_indices(80, 5, seed=0))
    tables = count_tables(positive.astype(int), 2, n_resamples=5, seed=0)[0]  # the same resamples
    assert tables[1:, 1].tolist() == [positive[i].sum() for i in idx]
    assert roc_auc(np.ones(20, bool), np.linspace(0, 1, 20)).reason.startswith("humans said yes for every item")


def test_paired_difference_is_zero_for_the_same_judge_and_signed_otherwise():
    a = ordinal_arrays(HUMAN, JUDGE, levels=4, threshold=2, n_resamples=200)
    b = ordinal_arrays(HUMAN, HUMAN, levels=4, threshold=2, n_resamples=200)
    same = paired_difference(a, a)
    assert same["cohen_kappa"].value == 0 and same["cohen_kappa"].ci_low == 0
    better = paired_difference(a, b)
    assert better["cohen_kappa"].value == pytest.approx(1 - cohen_kappa_score(HUMAN, JUDGE, labels=LEVELS))
    assert better["cohen_kappa"].ci_low > 0


def test_retrievers_by_judge_and_by_humans():
    # Two retrievers over the same 12 queries: "good" ranks the relevant chunk first, "bad" last.
    rows, human, judge = [], [], []
    for q in range(12):
        docs = [q * 10 + d for d in range(3)]
        for rank, d in enumerate(docs, 1):
            rows.append(("good", q, d, rank))
        for rank, d in enumerate(reversed(docs), 1):
            rows.append(("bad", q, d, rank))
        for d, g in zip(docs, [3, 1, 0], strict=True):
            human.append((q, d, g))
            judge.append((q, d, g if q % 4 else 2))  # the judge over-grades a few
    run = pd.DataFrame(rows, columns=["retriever", "query", "doc", "rank"])
    human = pd.DataFrame(human, columns=["query", "doc", "grade"])
    judge = pd.DataFrame(judge, columns=["query", "doc", "grade"])
    section = retriever_agreement(run, human, judge, k=1, n_resamples=100)
    assert section["retrievers"] == ["bad", "good"] and section["queries"] == 12
    assert section["metrics"]["good"]["recall@1"]["human"].value == 1
    assert section["metrics"]["bad"]["recall@1"]["human"].value == 0
    assert section["metrics"]["bad"]["recall@1"]["judge"].value == pytest.approx(3 * (1 / 3) / 12)  # over-graded
    assert section["kendall_tau"]["recall@1"].value == pytest.approx(kendalltau([0, 1], [0, 1]).statistic) == 1
    one = retriever_agreement(run[run.retriever == "good"], human, judge)
    assert one["kendall_tau"]["recall@10"].value is None
    assert "two or more retrievers" in one["kendall_tau"]["recall@10"].reason
