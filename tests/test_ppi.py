"""The estimators of labeler.estimate.ppi: equal to ppi_py, a ratio that reduces to the mean, and
CI coverage by simulation for the uniform and the active design."""

from __future__ import annotations

import numpy as np

# the [test] extra installs ppi_py: a missing one is a broken install and fails, never a skip
import ppi_py  # noqa: E402  (after labeler, as the other imports of this file)
import pytest

from labeler.estimate import ppi


@pytest.mark.parametrize("seed", range(8))
def test_ppi_mean_equals_ppi_py(seed):
    from ppi_py.ppi import _calc_lam_glm

    rng = np.random.default_rng(seed)
    n, big_n = int(rng.integers(20, 300)), int(rng.integers(300, 5000))
    truth = rng.uniform(0, 1, n + big_n)
    noise = rng.normal(0, rng.uniform(0.05, 0.6), n + big_n) + rng.uniform(-0.2, 0.2)
    y, yhat = truth[:n], (truth + noise)[:n]
    unl = (truth + noise)[n:]
    low, high = ppi_py.ppi_mean_ci(y, yhat, unl, alpha=0.05)
    got = ppi.ppi_mean(y, yhat, unl)
    assert got.ci_low == pytest.approx(float(np.ravel(low)[0]), abs=1e-9)
    assert got.ci_high == pytest.approx(float(np.ravel(high)[0]), abs=1e-9)
    est = ppi_py.ppi_mean_pointestimate(y, yhat, unl)
    assert got.estimate == pytest.approx(float(np.ravel(est)[0]), abs=1e-9)
    # lambda: ppi_py tunes it at the lam=1 estimate
    p1 = float(np.ravel(ppi_py.ppi_mean_pointestimate(y, yhat, unl, lam=1))[0])
    lam = _calc_lam_glm(y - p1, yhat - p1, unl - p1, np.eye(1), clip=True)
    assert got.lam == pytest.approx(float(lam), abs=1e-9)
    assert 0 < got.lam <= 1
    for fixed in (0.0, 0.5, 1.0):
        lo, hi = ppi_py.ppi_mean_ci(y, yhat, unl, alpha=0.05, lam=fixed)
        g = ppi.ppi_mean(y, yhat, unl, lam=fixed)
        assert (g.ci_low, g.ci_high) == pytest.approx((float(np.ravel(lo)[0]), float(np.ravel(hi)[0])), abs=1e-9)


def test_ratio_reduces_to_the_mean_when_every_query_has_a_relevant_chunk():
    rng = np.random.default_rng(3)
    y, yhat, unl = rng.uniform(size=80), rng.uniform(size=80), rng.uniform(size=900)
    mean = ppi.ppi_mean(y, yhat, unl)
    ratio = ppi.ppi_ratio(y, yhat, unl, np.ones(80), np.ones(80), np.ones(900))
    assert ratio.estimate == pytest.approx(mean.estimate, abs=1e-12)
    assert (ratio.ci_low, ratio.ci_high, ratio.lam) == pytest.approx((mean.ci_low, mean.ci_high, mean.lam), abs=1e-12)


def test_ratio_with_a_perfect_judge_is_the_population_ratio():
    rng = np.random.default_rng(4)
    big = 5000
    r = rng.uniform(size=big) < 0.7
    m = np.where(r, rng.uniform(size=big), 0.0)
    idx = rng.permutation(big)
    lab, unl = idx[:100], idx[100:]
    est = ppi.ppi_ratio(m[lab], m[lab], m[unl], r[lab], r[lab], r[unl])
    assert est.lam > 0.5  # a perfect judge is trusted
    assert est.effective_n > 100
    assert est.estimate == pytest.approx(m.sum() / r.sum(), abs=0.01)


def test_active_mean_with_pi_one_everywhere_is_the_plain_mean():
    rng = np.random.default_rng(5)
    y = rng.uniform(size=50)
    est = ppi.active_mean(y, rng.uniform(size=50), np.ones(50), np.ones(50, dtype=bool))
    assert est.estimate == pytest.approx(y.mean())


def test_bad_inputs_raise_one_line_errors():
    with pytest.raises(ppi.EstimateError, match="one judge value per labeled query"):
        ppi.ppi_mean(np.ones(3), np.ones(4), np.ones(10))
    with pytest.raises(ppi.EstimateError, match="NaN"):
        ppi.ppi_mean(np.array([1.0, np.nan]), np.ones(2), np.ones(10))
    with pytest.raises(ppi.EstimateError, match=r"\(0, 1\]"):
        ppi.active_mean(np.ones(4), np.ones(4), np.zeros(4), np.ones(4, dtype=bool))


# --- coverage by simulation -----------------------------------------------------------------------------

def _traffic(rng, sets: int, big_n: int):
    """Per query: 10 chunks with true grades 0..3 (threshold 2); truth = share of the 10 relevant
    (a precision@10); the judge shifts the grade of 30% of the pairs up by one."""
    grades = rng.choice(4, size=(sets, big_n, 10), p=[0.45, 0.25, 0.2, 0.1])
    bump = rng.uniform(size=grades.shape) < 0.3
    judged = np.minimum(grades + bump, 3)
    return (grades >= 2).mean(-1), (judged >= 2).mean(-1), judged


def test_coverage_uniform_and_active_by_simulation():
    rng = np.random.default_rng(2026)
    sets, big_n, n = 1000, 2000, 100
    y, yhat, judged = _traffic(rng, sets, big_n)
    truth = y.mean(1)
    covered, judge_off, widths = 0, 0, []
    for s in range(sets):
        pick = rng.choice(big_n, n, replace=False)
        rest = np.ones(big_n, dtype=bool)
        rest[pick] = False
        e = ppi.ppi_mean(y[s, pick], yhat[s, pick], yhat[s, rest])
        covered += e.ci_low <= truth[s] <= e.ci_high
        widths.append(e.ci_high - e.ci_low)
        jm = yhat[s].mean()
        judge_off += abs(jm - truth[s]) > ppi.Z95 * yhat[s].std(ddof=1) / np.sqrt(big_n)
    assert covered / sets >= 0.93
    assert judge_off / sets > 0.5

    # active: pi proportional to the judge's uncertainty: only a chunk the judge graded 2 can be a
    # shifted 1 (35% are), so the expected squared error grows with their count c; floored at
    # 0.05 x mean, scaled to the same expected n
    c = (judged == 2).sum(-1)
    u = np.sqrt(0.35 * 0.65 * c + (0.35 * c) ** 2)
    pi = n * u / u.sum(1, keepdims=True)
    pi = np.maximum(pi, 0.05 * pi.mean(1, keepdims=True))
    pi = np.minimum(pi * n / pi.sum(1, keepdims=True), 1.0)
    a_cov, a_widths = 0, []
    for s in range(sets):
        xi = rng.uniform(size=big_n) < pi[s]
        e = ppi.active_mean(np.where(xi, y[s], np.nan), yhat[s], pi[s], xi, covariate=u[s])
        a_cov += e.ci_low <= truth[s] <= e.ci_high
        a_widths.append(e.ci_high - e.ci_low)
    assert a_cov / sets >= 0.93
    assert np.mean(a_widths) < np.mean(widths)
