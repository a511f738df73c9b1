"""labeler.metrics: hand-computed fixtures, spec parsing, pytrec_eval equivalence, bootstrap and tests."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labeler.errors import LabelerError
from labeler.metrics import (
    ALIASES,
    METRICS,
    Metric,
    MetricError,
    aggregate,
    n_without_relevant,
    paired_test,
    parse_metric,
    per_query,
    rank_by_score,
    register_metric,
)

L3, L5, L6 = math.log2(3), math.log2(5), math.log2(6)


def frame(rows: list[tuple], columns: str) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns.split())


@pytest.fixture
def qrels() -> pd.DataFrame:
    return frame(
        [
            # q1: relevant (>= 2) are a, c, e; e was never retrieved; d (grade 1) still counts in ndcg.
            ("q1", "a", 3), ("q1", "b", 0), ("q1", "c", 2), ("q1", "d", 1), ("q1", "e", 2),
            ("q2", "f", 1), ("q2", "g", 0),  # no doc reaches grade 2
            ("q3", "h", 3),  # judged, never retrieved
            ("q5", "i", 2), ("q5", "j", 3),  # only one doc retrieved
        ],
        "query doc grade",
    )


@pytest.fixture
def run() -> pd.DataFrame:
    return frame(
        [
            ("q1", "b", 1), ("q1", "a", 2), ("q1", "x", 3), ("q1", "c", 4), ("q1", "d", 5),
            ("q2", "f", 1), ("q2", "g", 2),
            ("q4", "a", 1),  # not in qrels: ignored
            ("q5", "j", 1),
        ],
        "query doc rank",
    )


ALL_SPECS = [
    "recall@3", "recall@5", "P@3", "P@5", "P@10", "hit@1", "hit@2", "mrr", "mrr@1",
    "ap", "ap@3", "ndcg@3", "ndcg@10", "ndcg_exp@10", "judged@5", "judged@10",
]

EXPECTED = {
    "q1": {
        "recall@3": 1 / 3, "recall@5": 2 / 3, "P@3": 1 / 3, "P@5": 2 / 5, "P@10": 2 / 10,
        "hit@1": 0.0, "hit@2": 1.0, "mrr": 1 / 2, "mrr@1": 0.0,
        "ap": (1 / 2 + 2 / 4) / 3, "ap@3": (1 / 2) / 3,
        "ndcg@3": (3 / L3) / (3 + 2 / L3 + 2 / 2),
        "ndcg@10": (3 / L3 + 2 / L5 + 1 / L6) / (3 + 2 / L3 + 2 / 2 + 1 / L5),
        "ndcg_exp@10": (7 / L3 + 3 / L5 + 1 / L6) / (7 + 3 / L3 + 3 / 2 + 1 / L5),
        "judged@5": 4 / 5, "judged@10": 4 / 5,  # 5 retrieved: the top 10 holds 5
        "n_relevant": 3, "n_retrieved": 5,
    },
    "q2": {**{s: math.nan for s in ALL_SPECS}, "judged@5": 1.0, "judged@10": 1.0,
           "n_relevant": 0, "n_retrieved": 2},
    "q3": {**{s: 0.0 for s in ALL_SPECS}, "judged@5": math.nan, "judged@10": math.nan,  # nothing retrieved
           "n_relevant": 1, "n_retrieved": 0},
    "q5": {
        "recall@3": 1 / 2, "recall@5": 1 / 2, "P@3": 1 / 3, "P@5": 1 / 5, "P@10": 1 / 10,
        "hit@1": 1.0, "hit@2": 1.0, "mrr": 1.0, "mrr@1": 1.0, "ap": 1 / 2, "ap@3": 1 / 2,
        "ndcg@3": 3 / (3 + 2 / L3), "ndcg@10": 3 / (3 + 2 / L3), "ndcg_exp@10": 7 / (7 + 3 / L3),
        "judged@5": 1.0, "judged@10": 1.0, "n_relevant": 2, "n_retrieved": 1,
    },
}


def expected_frame() -> pd.DataFrame:
    df = pd.DataFrame.from_dict(EXPECTED, orient="index")[[*ALL_SPECS, "n_relevant", "n_retrieved"]]
    df.index.name = "query"
    return df


def assert_frames_close(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(actual.columns) == list(expected.columns)
    assert list(actual.index) == list(expected.index)
    np.testing.assert_allclose(actual.to_numpy(float), expected.to_numpy(float), rtol=0, atol=1e-12)


def test_hand_computed_values(run, qrels):
    result = per_query(run, qrels, ALL_SPECS)
    assert_frames_close(result, expected_frame())
    assert result.index.name == "query"
    assert result["n_relevant"].dtype == np.int64 and result["n_retrieved"].dtype == np.int64


def test_integer_ids_give_the_same_values(run, qrels):
    ids = {name: i for i, name in enumerate(sorted({*run["doc"], *qrels["doc"], *run["query"], *qrels["query"]}))}
    result = per_query(run.replace(ids), qrels.replace(ids), ALL_SPECS)
    expected = expected_frame()
    expected.index = [ids[q] for q in expected.index]
    assert_frames_close(result, expected)


def test_row_order_does_not_matter(run, qrels):
    shuffled = per_query(run.sample(frac=1, random_state=1), qrels.sample(frac=1, random_state=2), ALL_SPECS)
    assert_frames_close(shuffled, expected_frame())


def test_no_relevant_query_is_nan_and_counted(run, qrels):
    result = per_query(run, qrels, ["recall@5", "ndcg@10", "judged@5"])
    assert result.loc["q2", ["recall@5", "ndcg@10"]].isna().all()  # trec_eval would give ndcg 1.0 here
    assert result.loc["q2", "judged@5"] == 1.0
    assert n_without_relevant(result) == 1


def test_grade_zero_only_query(qrels):
    only_zero = frame([("z", "a", 0), ("z", "b", 0)], "query doc grade")
    result = per_query(frame([("z", "a", 1)], "query doc rank"), only_zero, ["mrr", "ndcg@5", "judged@2"])
    assert result.loc["z", ["mrr", "ndcg@5"]].isna().all()
    assert result.loc["z", "judged@2"] == 1.0  # the one retrieved doc is judged
    assert n_without_relevant(result) == 1


def test_threshold_one_makes_grade_one_relevant(run, qrels):
    result = per_query(run, qrels, ["recall@2", "mrr", "ndcg@10", "recall@5", "ap"], threshold=1)
    assert result.loc["q2", "recall@2"] == 1.0
    assert result.loc["q2", "mrr"] == 1.0
    assert result.loc["q2", "ndcg@10"] == pytest.approx(1.0)
    assert result.loc["q1", "n_relevant"] == 4
    assert result.loc["q1", "recall@5"] == pytest.approx(3 / 4)
    assert result.loc["q1", "ap"] == pytest.approx((1 / 2 + 2 / 4 + 3 / 5) / 4)
    # The ndcg gains never depend on the threshold (as in trec_eval).
    assert result.loc["q1", "ndcg@10"] == pytest.approx(EXPECTED["q1"]["ndcg@10"], abs=1e-12)


def test_k_beyond_the_list_and_gaps_in_ranks():
    qrels = frame([("q", "a", 2), ("q", "b", 2)], "query doc grade")
    run = frame([("q", "a", 1), ("q", "b", 4)], "query doc rank")  # ranks 2 and 3 are empty
    result = per_query(run, qrels, ["recall@3", "P@100", "mrr", "ap", "ndcg@1000"])
    assert result.loc["q"].tolist() == pytest.approx(
        [1 / 2, 2 / 100, 1.0, (1 + 2 / 4) / 2, (2 + 2 / L5) / (2 + 2 / L3), 2, 2]
    )


def test_wide_grade_scale_gives_the_same_linear_ndcg(run, qrels):
    # Grades above 32 take another code path; linear nDCG is unchanged by scaling every grade.
    scaled = per_query(run, qrels.assign(grade=qrels["grade"] * 40), ["ndcg@3", "ndcg@10"], threshold=1)
    assert_frames_close(scaled[["ndcg@3", "ndcg@10"]], per_query(run, qrels, ["ndcg@3", "ndcg@10"], threshold=1)[
        ["ndcg@3", "ndcg@10"]
    ])


def test_columns_keep_the_spec_as_given(run, qrels):
    metric = parse_metric("precision@3")
    result = per_query(run, qrels, ["P@3", "Success@2", metric])
    assert list(result.columns) == ["P@3", "Success@2", "precision@3", "n_relevant", "n_retrieved"]
    assert result["P@3"].equals(result["precision@3"])


def test_empty_inputs():
    result = per_query(frame([], "query doc rank"), frame([], "query doc grade"), ["mrr"])
    assert len(result) == 0 and list(result.columns) == ["mrr", "n_relevant", "n_retrieved"]


@pytest.mark.parametrize(
    ("run_rows", "qrels_rows", "message"),
    [
        ([("q", "a", 1), ("q", "b", 1)], [("q", "a", 2)], "two docs at rank 1"),
        ([("q", "a", 0)], [("q", "a", 2)], "run.rank must be >= 1"),
        ([("q", "a", 1)], [("q", "a", 2), ("q", "a", 3)], "duplicate (query, doc)"),
        ([("q", "a", 1)], [("q", "a", -1)], "qrels.grade must be >= 0"),
        ([("q", "a", 1)], [("q", "a", 1.5)], "whole numbers"),
        ([("q", "a", 1), ("q", "a", 2)], [("q", "a", 2)], "same judged doc twice"),
        ([("q", 1, 1)], [("q", "1", 2)], "same id type"),
    ],
)
def test_bad_tables_raise(run_rows, qrels_rows, message):
    with pytest.raises(MetricError, match=message.replace("(", r"\(").replace(")", r"\)")):
        per_query(frame(run_rows, "query doc rank"), frame(qrels_rows, "query doc grade"), ["mrr"])


def test_bad_calls_raise(run, qrels):
    with pytest.raises(MetricError, match="lacks column"):
        per_query(run.drop(columns="rank"), qrels, ["mrr"])
    with pytest.raises(MetricError, match="missing values"):
        per_query(run.assign(doc=None), qrels, ["mrr"])
    with pytest.raises(MetricError, match="threshold"):
        per_query(run, qrels, ["mrr"], threshold=0)
    with pytest.raises(MetricError, match="given twice"):
        per_query(run, qrels, ["mrr", "mrr"])
    with pytest.raises(MetricError) as info:
        per_query(run, qrels, ["bogus@3"])
    assert isinstance(info.value, LabelerError) and isinstance(info.value, ValueError)


# --- spec parsing and the registry ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "name", "k"),
    [
        ("recall@5", "recall", 5), ("P@10", "precision", 10), ("p@10", "precision", 10),
        ("Precision@3", "precision", 3), ("hit@1", "hit", 1), ("success@5", "hit", 5),
        ("mrr", "mrr", None), ("MRR@10", "mrr", 10), ("recip_rank", "mrr", None),
        ("ndcg@10", "ndcg", 10), ("ndcg_cut@10", "ndcg", 10), ("NDCG_EXP@10", "ndcg_exp", 10),
        ("ap", "ap", None), ("map", "ap", None), ("ap@100", "ap", 100), ("judged@10", "judged", 10),
    ],
)
def test_parse_metric(spec, name, k):
    assert parse_metric(spec) == Metric(name, k, spec)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("recall@0", "positive integer"), ("recall@x", "positive integer"), ("recall@-1", "positive integer"),
        ("recall@", "positive integer"), ("recall@5@5", "positive integer"), ("recall", "needs a cutoff"),
        ("ndcg", "needs a cutoff"), ("judged", "needs a cutoff"), ("", "empty"), ("@5", "unknown metric"),
    ],
)
def test_parse_metric_rejects(spec, message):
    with pytest.raises(MetricError, match=message):
        parse_metric(spec)


def test_unknown_metric_lists_every_name_and_alias():
    with pytest.raises(MetricError) as info:
        parse_metric("bogus@3")
    message = str(info.value)
    assert "'bogus'" in message
    for name, definition in METRICS.items():
        assert name in message
        for alias in definition.aliases:
            assert alias in message


def test_builtin_aliases():
    assert {a: ALIASES[a] for a in ("p", "success", "recip_rank", "ndcg_cut", "map")} == {
        "p": "precision", "success": "hit", "recip_rank": "mrr", "ndcg_cut": "ndcg", "map": "ap",
    }
    assert all(d.description for d in METRICS.values())


@pytest.fixture
def registered():
    names: list[str] = []
    yield names
    for name in names:
        for alias in METRICS.pop(name).aliases:
            del ALIASES[alias.lower()]


def test_register_metric_extends_parsing_and_per_query(registered, run, qrels):
    def retrieved(judgments, k):
        """Number of retrieved docs in the top k."""
        return judgments.sum_top(np.ones(judgments.rank.size), k)

    register_metric("n_ret", retrieved, aliases=("Depth",), needs_k=True, nan_without_relevant=False)
    registered.append("n_ret")
    assert parse_metric("depth@3") == Metric("n_ret", 3, "depth@3")
    result = per_query(run, qrels, ["depth@3"])
    assert result["depth@3"].to_dict() == {"q1": 3.0, "q2": 2.0, "q3": 0.0, "q5": 1.0}
    with pytest.raises(MetricError, match="needs a cutoff"):
        parse_metric("n_ret")
    with pytest.raises(MetricError, match="n_ret \\(Depth\\)"):
        parse_metric("nope")


@pytest.mark.parametrize(("name", "aliases"), [("recall", ()), ("new", ("map",)), ("Bad-Name", ()), ("x", ("x",))])
def test_register_metric_rejects_taken_or_bad_names(name, aliases):
    with pytest.raises(MetricError):
        register_metric(name, lambda judgments, k: np.zeros(judgments.n_queries), aliases=aliases)
    assert "new" not in METRICS and "x" not in METRICS


# --- ties -------------------------------------------------------------------------------------


def test_rank_by_score_breaks_ties_by_doc_id_descending_as_strings():
    scored = frame(
        [("q", "a", 1.0), ("q", "b", 1.0), ("q", "9", 0.5), ("q", "10", 0.5), ("q", "c", 2.0), ("r", "a", 0.1)],
        "query doc score",
    )
    ranked = rank_by_score(scored)
    assert list(ranked.columns) == ["query", "doc", "score", "rank"]
    assert ranked["rank"].tolist() == [3, 2, 4, 5, 1, 1]  # row order kept; "9" > "10" as strings
    ints = rank_by_score(frame([(1, 9, 0.5), (1, 10, 0.5), (1, 11, 0.7)], "query doc score"))
    assert ints["rank"].tolist() == [2, 3, 1]


def test_rank_by_score_feeds_per_query():
    qrels = frame([("q", "a", 2), ("q", "b", 0)], "query doc grade")
    scored = frame([("q", "a", 1.0), ("q", "b", 1.0)], "query doc score")
    result = per_query(rank_by_score(scored).drop(columns="score"), qrels, ["mrr"])
    assert result.loc["q", "mrr"] == 0.5  # "b" wins the tie, as in trec_eval


def test_rank_by_score_replaces_rank_and_rejects_missing_scores():
    ranked = rank_by_score(frame([("q", "a", 1.0, 7)], "query doc score rank"))
    assert ranked["rank"].tolist() == [1]
    with pytest.raises(MetricError, match="missing values"):
        rank_by_score(frame([("q", "a", None)], "query doc score"))


# --- equivalence with trec_eval -------------------------------------------------------------------

TREC = {
    "recall@5": "recall_5", "P@5": "P_5", "success@5": "success_5", "recip_rank": "recip_rank",
    "ndcg_cut@10": "ndcg_cut_10", "ndcg@3": "ndcg_cut_3", "map": "map", "map@5": "map_cut_5",
}
DOCS = ["a", "b", "c", "d", "e", "9", "10", "11", "z", "Zz", "é"]


@st.composite
def judged_runs(draw):
    n_queries = draw(st.integers(1, 4))
    qrels, scored = [], []
    for q in range(n_queries):
        labeled = draw(st.lists(st.sampled_from(DOCS), unique=True, max_size=8))
        qrels += [(f"q{q}", d, draw(st.integers(0, 3))) for d in labeled]
        retrieved = draw(st.lists(st.sampled_from(DOCS), unique=True, max_size=8))
        # Few distinct scores, so ties are common.
        scored += [(f"q{q}", d, draw(st.sampled_from([0.0, 0.5, 1.0, 2.5]))) for d in retrieved]
    return frame(qrels, "query doc grade"), frame(scored, "query doc score")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=judged_runs(), threshold=st.sampled_from([1, 2]))
def test_matches_pytrec_eval(data, threshold):
    qrels, scored = data
    result = per_query(rank_by_score(scored).drop(columns="score"), qrels, list(TREC), threshold=threshold)
    trec_qrels: dict[str, dict[str, int]] = {}
    for q, d, g in qrels.itertuples(index=False):
        trec_qrels.setdefault(q, {})[d] = int(g)
    trec_run: dict[str, dict[str, float]] = {}
    for q, d, s in scored.itertuples(index=False):
        trec_run.setdefault(q, {})[d] = float(s)
    evaluator = pytrec_eval.RelevanceEvaluator(trec_qrels, set(TREC.values()), relevance_level=threshold)
    trec = evaluator.evaluate(trec_run)
    for query, row in result.iterrows():
        if row["n_relevant"] == 0:
            assert row[list(TREC)].isna().all()
            continue
        for spec, measure in TREC.items():
            # trec_eval omits queries without a run; labeler scores them 0 (trec_eval -c).
            expected = trec[query][measure] if query in trec else 0.0
            assert row[spec] == pytest.approx(expected, abs=1e-9), (query, spec)


# --- aggregation and significance -----------------------------------------------------------------


@pytest.fixture
def per_q() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    values = rng.random(200)
    values[:20] = np.nan  # queries without relevant docs
    return pd.DataFrame(
        {
            "ndcg@10": values,
            "judged@10": rng.random(200),
            "empty": np.full(200, np.nan),
            "n_relevant": np.r_[np.zeros(20, int), np.ones(180, int)],
            "n_retrieved": np.full(200, 10),
        }
    )


def test_aggregate_mean_ci_and_n(per_q):
    stats = aggregate(per_q)
    assert list(stats) == ["ndcg@10", "judged@10", "empty"]
    ndcg = stats["ndcg@10"]
    assert ndcg["n"] == 180 and stats["judged@10"]["n"] == 200
    assert ndcg["mean"] == pytest.approx(np.nanmean(per_q["ndcg@10"]), abs=1e-15)
    assert ndcg["ci_low"] < ndcg["mean"] < ndcg["ci_high"]
    assert stats["empty"] == {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
    assert n_without_relevant(per_q) == 20


def test_aggregate_is_seeded(per_q):
    assert aggregate(per_q, seed=3) == aggregate(per_q, seed=3)
    assert aggregate(per_q, seed=3)["ndcg@10"] != aggregate(per_q, seed=4)["ndcg@10"]
    # A column's interval does not depend on the other columns.
    alone = aggregate(per_q[["ndcg@10"]], seed=3)["ndcg@10"]
    assert alone == aggregate(per_q, seed=3)["ndcg@10"]


def test_aggregate_agrees_with_scipy_percentile_bootstrap(per_q):
    from scipy.stats import bootstrap

    values = per_q["judged@10"].to_numpy()
    ours = aggregate(per_q, n_resamples=5000, confidence=0.9)["judged@10"]
    theirs = bootstrap((values,), np.mean, confidence_level=0.9, n_resamples=5000, method="percentile", rng=0)
    assert ours["ci_low"] == pytest.approx(theirs.confidence_interval.low, abs=0.01)
    assert ours["ci_high"] == pytest.approx(theirs.confidence_interval.high, abs=0.01)
    wider = aggregate(per_q, n_resamples=5000, confidence=0.99)["judged@10"]
    assert wider["ci_low"] < ours["ci_low"] and wider["ci_high"] > ours["ci_high"]


def test_aggregate_single_value_and_bad_options():
    one = aggregate(pd.DataFrame({"mrr": [np.nan, 0.25]}))["mrr"]
    assert one == {"mean": 0.25, "ci_low": 0.25, "ci_high": 0.25, "n": 1}
    with pytest.raises(MetricError, match="confidence"):
        aggregate(pd.DataFrame({"mrr": [0.5]}), confidence=95)
    with pytest.raises(MetricError, match="n_resamples"):
        aggregate(pd.DataFrame({"mrr": [0.5]}), n_resamples=0)
    with pytest.raises(MetricError, match="n_relevant"):
        n_without_relevant(pd.DataFrame({"mrr": [0.5]}))


def test_paired_test():
    rng = np.random.default_rng(0)
    a = rng.random(100)
    assert paired_test(a, a) == 1.0
    assert paired_test(a, a - 0.2 - 0.05 * rng.random(100)) < 0.01
    noise = a + rng.normal(0, 0.1, 100)
    assert paired_test(a, noise, seed=1) == paired_test(a, noise, seed=1)
    assert paired_test(a, noise) > 0.01


def test_paired_test_matches_exact_enumeration():
    diff = np.array([0.3, -0.1, 0.25, 0.05, -0.2, 0.4, 0.1, -0.05])
    observed = abs(diff.sum())
    flips = [abs(np.dot(signs, diff)) >= observed - 1e-12 for signs in itertools.product([-1, 1], repeat=diff.size)]
    exact = np.mean(flips)
    assert paired_test(diff, np.zeros_like(diff), n_resamples=40000) == pytest.approx(exact, abs=0.01)


def test_paired_test_drops_nan_pairs_and_checks_shapes():
    a = np.array([np.nan, 1.0, 2.0])
    b = np.array([5.0, 1.0, 2.0])
    assert paired_test(a, b) == 1.0
    assert math.isnan(paired_test(np.array([np.nan]), np.array([1.0])))
    with pytest.raises(MetricError, match="same length"):
        paired_test(np.zeros(3), np.zeros(4))


def test_resample_sums_reuse_drawn_weights_exactly():
    """Weights kept from earlier calls (a subset, then a superset of a block's keys, a new seed) give
    the same sums as drawing every block afresh."""
    from labeler.metrics import resample_sums, resample_weights

    rng = np.random.default_rng(3)
    keys = np.sort(rng.choice(np.arange(50_000), 300, replace=False))
    columns = rng.random((keys.size, 2))

    def fresh(k, c, seed):
        out = np.zeros((200, c.shape[1]))
        for key, row in zip(k, c, strict=True):
            out += np.outer(resample_weights(seed, int(key) >> 10, 200)[:, int(key) & 1023], row)
        return out

    for part in (slice(0, 100), slice(0, 300), slice(50, 250)):
        for seed in (0, 7):
            got = resample_sums(keys[part], columns[part], seed=seed, n_resamples=200)
            np.testing.assert_allclose(got, fresh(keys[part], columns[part], seed), rtol=1e-12)
