"""Tests of medvlm_audit.stats against hand-computed values (arithmetic in comments) and reference libraries."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sstats

from medvlm_audit import stats as S

pytestmark = pytest.mark.filterwarnings("error")  # no function may emit a warning


def _binary(n: int, p: float, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < p).astype(int)


# ------------------------------------------------------------------------------------------ proportions


def test_wilson_k3_n10_hand_and_statsmodels():
    # p = 0.3, z = 1.959964, z^2 = 3.841459
    # denom = 1 + z^2/n = 1.3841459
    # center = (0.3 + z^2/20) / denom = 0.4920729 / 1.3841459 = 0.3555066
    # half = z * sqrt(0.3*0.7/10 + z^2/400) / denom = 1.959964 * sqrt(0.021 + 0.0096036) / 1.3841459
    #      = 1.959964 * 0.1749390 / 1.3841459 = 0.2477153
    # -> [0.1077913, 0.6032219]
    lo, hi = S.wilson_interval(3, 10)
    assert lo == pytest.approx(0.1077913, abs=1e-6)
    assert hi == pytest.approx(0.6032219, abs=1e-6)
    from statsmodels.stats.proportion import proportion_confint

    slo, shi = proportion_confint(3, 10, alpha=0.05, method="wilson")
    assert (lo, hi) == pytest.approx((slo, shi), abs=1e-12)
    # edges clip to [0, 1] and n = 0 is not estimable
    assert S.wilson_interval(0, 10)[0] == 0.0 and S.wilson_interval(10, 10)[1] == 1.0
    assert all(math.isnan(v) for v in S.wilson_interval(0, 0))
    with pytest.raises(ValueError, match="k <= n"):
        S.wilson_interval(11, 10)


def test_proportion_point_and_analytic_se():
    # 3 ones in 10: p = 0.3, se = sqrt(0.3 * 0.7 / 10) = sqrt(0.021) = 0.1449138
    x = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    e = S.proportion(x)
    assert e.point == pytest.approx(0.3)
    assert e.se == pytest.approx(0.1449138, abs=1e-7)
    assert e.n == 10
    assert e.ci_low <= e.point <= e.ci_high
    assert "analytic SE" in e.method
    # the interval only takes values k/10 (bootstrap proportions of 10 cases)
    assert e.ci_low * 10 == pytest.approx(round(e.ci_low * 10))


def test_proportion_wilson_below_switches_interval():
    x = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    e = S.proportion(x, wilson_below=30)
    assert (e.ci_low, e.ci_high) == pytest.approx(S.wilson_interval(3, 10))
    assert e.method.startswith("Wilson")
    e2 = S.proportion(x, wilson_below=10)  # n = 10 is not < 10: bootstrap
    assert e2.method.startswith("percentile")


def test_proportion_validates_input():
    with pytest.raises(ValueError, match=r"x\[2\]"):
        S.proportion([0, 1, 2])
    with pytest.raises(ValueError, match=r"x\[1\]"):
        S.proportion([0.0, float("nan")])
    with pytest.raises(ValueError, match="mode"):
        S.proportion([0, 1], mode="fast")  # type: ignore[arg-type]
    assert S.proportion([True, False, True]).point == pytest.approx(2 / 3)


# ------------------------------------------------------------------------------------------ index mode = released code


def _naive_boot(values: np.ndarray, B: int, seed: int = 0) -> np.ndarray:
    """The released code, verbatim: one-shot index matrix."""
    rng = np.random.RandomState(seed)
    idx = rng.randint(0, len(values), size=(B, len(values)))
    return np.asarray(values, dtype=float)[idx].mean(axis=1)


@pytest.mark.parametrize("n,p", [(1, 1.0), (7, 0.4), (101, 0.3), (333, 0.05), (1000, 0.9)])
@pytest.mark.parametrize("chunk_elems", [1000, 1 << 20])
def test_index_mode_bit_identical_to_one_shot(monkeypatch, n, p, chunk_elems):
    # chunk_elems=1000: 1000 // n rows per chunk, which does not divide B=3000 for n = 7, 101, 333
    monkeypatch.setattr(S.kernels, "_CHUNK_ELEMS", chunk_elems)
    B = 3000
    x = _binary(n, p, seed=n)
    boot = _naive_boot(x, B)
    e = S.proportion(x, B=B, mode="index")
    assert e.boot_sd == float(boot.std(ddof=1))
    assert (e.ci_low, e.ci_high) == tuple(float(v) for v in np.percentile(boot, [2.5, 97.5]))
    assert S.bootstrap_sd(x, B=B, mode="index") == float(boot.std(ddof=1))


@pytest.mark.parametrize("n", [5, 101, 400])
def test_paired_index_mode_bit_identical_to_released_algorithm(monkeypatch, n):
    monkeypatch.setattr(S.kernels, "_CHUNK_ELEMS", 1000)
    B = 2000
    a, b = _binary(n, 0.6, seed=1), _binary(n, 0.5, seed=2)
    rng = np.random.RandomState(0)
    idx = rng.randint(0, n, size=(B, n))
    af, bf = a.astype(float), b.astype(float)
    boot = af[idx].mean(axis=1) - bf[idx].mean(axis=1)
    point = float(af.mean() - bf.mean())
    p = max(float(np.mean(np.abs(boot - point) >= abs(point))), 1.0 / B)
    r = S.paired_difference(a, b, B=B, mode="index")
    assert r.diff == point
    assert r.sd == float(boot.std(ddof=1))
    assert (r.ci_low, r.ci_high) == (float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5)))
    assert r.p == p
    assert r.n == n


def test_real_valued_index_mode_bit_identical(monkeypatch):
    monkeypatch.setattr(S.kernels, "_CHUNK_ELEMS", 777)
    B = 1500
    rng = np.random.default_rng(3)
    v, w = rng.normal(size=123), rng.normal(0.2, 1, size=123)
    boot = _naive_boot(v, B)
    e = S.mean_estimate(v, B=B)
    assert e.boot_sd == float(boot.std(ddof=1))
    assert (e.ci_low, e.ci_high) == tuple(float(q) for q in np.percentile(boot, [2.5, 97.5]))
    assert e.se == pytest.approx(float(np.std(v, ddof=1) / math.sqrt(123)))
    idx = np.random.RandomState(0).randint(0, 123, size=(B, 123))
    bd = v[idx].mean(axis=1) - w[idx].mean(axis=1)
    r = S.paired_difference_values(v, w, B=B)
    assert r.sd == float(bd.std(ddof=1))
    assert (r.ci_low, r.ci_high) == (float(np.percentile(bd, 2.5)), float(np.percentile(bd, 97.5)))


def test_cluster_index_mode_matches_released_cluster_bootstrap(monkeypatch):
    monkeypatch.setattr(S.kernels, "_CHUNK_ELEMS", 500)
    B = 1200
    x = _binary(90, 0.4, seed=4)
    y = _binary(90, 0.6, seed=5)
    cl = np.array([f"p{i // 3:03d}" for i in range(90)])  # 30 patients, 3 cases each
    # released code: sorted unique clusters, RandomState(0).randint(0, K, (B, K)), ratio of sums
    uniq, inv = np.unique(cl, return_inverse=True)
    K = len(uniq)
    counts = np.bincount(inv, minlength=K).astype(float)
    draw = np.random.RandomState(0).randint(0, K, size=(B, K))
    tot = counts[draw].sum(axis=1)
    ma = np.bincount(inv, weights=x.astype(float), minlength=K)[draw].sum(axis=1) / tot
    mb = np.bincount(inv, weights=y.astype(float), minlength=K)[draw].sum(axis=1) / tot
    e = S.proportion(x, B=B, mode="index", clusters=cl)
    assert e.boot_sd == float(ma.std(ddof=1))
    assert (e.ci_low, e.ci_high) == (float(np.percentile(ma, 2.5)), float(np.percentile(ma, 97.5)))
    r = S.paired_difference(x, y, B=B, mode="index", clusters=cl)
    assert r.sd == float((ma - mb).std(ddof=1))


# ------------------------------------------------------------------------------------------ exact-counts = index in law


@pytest.mark.parametrize("n,p", [(40, 0.2), (300, 0.5), (2575, 0.9)])
def test_exact_counts_and_index_agree_in_distribution(n, p):
    x = _binary(n, p, seed=11)
    ex = S.proportion(x, B=10_000, mode="exact-counts")
    ix = S.proportion(x, B=10_000, mode="index")
    # Monte-Carlo SD of a bootstrap SD estimate with B = 10,000 is ~0.7%; allow 4%
    assert ex.boot_sd == pytest.approx(ix.boot_sd, rel=0.04)
    # both approximate the ideal-bootstrap SD sqrt(p(1-p)/n) of the resampled proportion
    assert ex.boot_sd == pytest.approx(ex.se, rel=0.04)
    assert ex.ci_low == pytest.approx(ix.ci_low, abs=1.5 * ex.se / 2)
    assert ex.ci_high == pytest.approx(ix.ci_high, abs=1.5 * ex.se / 2)
    assert ex.point == ix.point


def test_paired_exact_counts_and_index_agree_in_distribution():
    a, b = _binary(500, 0.7, seed=1), _binary(500, 0.6, seed=2)
    ex = S.paired_difference(a, b, mode="exact-counts")
    ix = S.paired_difference(a, b, mode="index")
    assert ex.diff == ix.diff
    assert ex.sd == pytest.approx(ix.sd, rel=0.04)
    # analytic SD of a paired difference of proportions: sqrt((p10 + p01 - d^2) / n)
    p10 = np.mean((a == 1) & (b == 0))
    p01 = np.mean((a == 0) & (b == 1))
    assert ex.sd == pytest.approx(math.sqrt((p10 + p01 - (p10 - p01) ** 2) / 500), rel=0.04)


def test_cluster_exact_counts_agrees_with_cluster_index():
    rng = np.random.default_rng(7)
    cl = rng.integers(0, 150, size=600)
    patient_effect = rng.random(150)
    x = (rng.random(600) < patient_effect[cl]).astype(int)
    ex = S.proportion(x, clusters=cl, mode="exact-counts")
    ix = S.proportion(x, clusters=cl, mode="index")
    assert ex.boot_sd == pytest.approx(ix.boot_sd, rel=0.05)
    assert ex.se == ix.se
    # the cluster-robust analytic SE approximates the cluster-bootstrap SD ...
    assert ex.se == pytest.approx(ex.boot_sd, rel=0.06)
    # ... and exceeds the iid SE, because patients share outcomes
    iid = S.proportion(x)
    assert ex.se > 1.3 * iid.se


def test_cluster_of_singletons_reduces_to_iid_se():
    x = _binary(200, 0.35, seed=8)
    e = S.proportion(x, clusters=np.arange(200))
    assert e.se == pytest.approx(math.sqrt(x.mean() * (1 - x.mean()) / 200), rel=1e-12)


# ------------------------------------------------------------------------------------------ paired p-value


def test_paired_p_floored_at_one_over_B():
    a, b = np.ones(50, int), np.zeros(50, int)
    # every bootstrap diff is exactly 1 = d, so |d* - d| = 0 < |d| = 1 for all draws -> share 0 -> p = 1/B
    for mode in ("exact-counts", "index"):
        r = S.paired_difference(a, b, B=2000, mode=mode)
        assert r.diff == 1.0 and r.p == 1 / 2000 and r.sd == 0.0
        assert (r.ci_low, r.ci_high) == (1.0, 1.0)


def test_paired_p_is_one_when_no_difference():
    a = [1, 0, 1, 0, 1, 1]
    b = [0, 1, 1, 0, 1, 1]  # one (1,0), one (0,1): d = 0
    r = S.paired_difference(a, b)
    assert r.diff == 0.0 and r.p == 1.0
    assert "p = 1" in r.method
    same = S.paired_difference(a, a)
    assert same.diff == 0.0 and same.sd == 0.0 and same.p == 1.0


def test_paired_p_matches_normal_theory():
    # n = 1000 pairs, 60 of type (1,0) and 30 of type (0,1): d = 0.03,
    # sd ~ sqrt((0.06 + 0.03 - 0.03^2) / 1000) = 0.009439, z = 3.18 -> normal-theory p = 2 (1 - Phi(z)) ~ 0.0015
    # shift-and-reflect with B = 10,000 is a Monte-Carlo version of the same tail area
    a = np.array([1] * 60 + [0] * 30 + [1] * 500 + [0] * 410)
    b = np.array([0] * 60 + [1] * 30 + [1] * 500 + [0] * 410)
    for mode in ("exact-counts", "index"):
        r = S.paired_difference(a, b, mode=mode)
        assert r.diff == pytest.approx(0.03)
        assert r.sd == pytest.approx(math.sqrt((0.09 - 0.03**2) / 1000), rel=0.04)
        assert r.p == pytest.approx(2 * sstats.norm.sf(0.03 / r.sd), abs=0.002)
        assert 0.0 < r.ci_low < 0.03 < r.ci_high


def test_paired_validates_lengths():
    with pytest.raises(ValueError, match="same length"):
        S.paired_difference([0, 1], [1])


def test_mcnemar_exact_hand_and_statsmodels():
    # n10 = 1, n01 = 6 discordant pairs: p = 2 * P(X <= 1 | Bin(7, 1/2)) = 2 * (1 + 7) / 128 = 0.125
    a = [1] + [0] * 6 + [1, 1, 0]
    b = [0] + [1] * 6 + [1, 1, 0]
    assert S.mcnemar_exact(a, b) == pytest.approx(0.125)
    from statsmodels.stats.contingency_tables import mcnemar

    table = np.array([[2, 1], [6, 1]])  # rows a=1/a=0, cols b=1/b=0
    assert S.mcnemar_exact(a, b) == pytest.approx(mcnemar(table, exact=True).pvalue)
    assert S.mcnemar_exact([1, 0], [1, 0]) == 1.0  # no discordant pair


# ------------------------------------------------------------------------------------------ permutation tests


def test_anova_f_tiny_example_and_scipy():
    # groups {1,2,3}, {4,5,6}, {7,8,9}: means 2, 5, 8, grand mean 5
    # SSB = 3*(2-5)^2 + 0 + 3*(8-5)^2 = 54; SSW = 3 * ((1-2)^2 + 0 + (3-2)^2) = 6
    # F = (54 / 2) / (6 / 6) = 27
    values = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    groups = ["a"] * 3 + ["b"] * 3 + ["c"] * 3
    r = S.permutation_test(values, groups, B=1000)
    assert r.statistic == pytest.approx(27.0)
    assert r.statistic == pytest.approx(sstats.f_oneway([1, 2, 3], [4, 5, 6], [7, 8, 9]).statistic)
    assert r.test == "one-way ANOVA F" and r.groups == ("a", "b", "c") and r.n == 9
    # only the 3! relabelings of the observed partition reach SSB = 54: exact p = 6 / 1680 = 0.00357
    assert r.p < 0.02


def test_permutation_p_formula():
    # perfectly separated 0/1 groups of 20: exact p = 2 / C(40, 20) ~ 1.4e-11, so c = 0 and p = 1/(B+1)
    r = S.permutation_test([1] * 20 + [0] * 20, ["x"] * 20 + ["y"] * 20, B=999)
    assert r.statistic == 1.0
    assert r.p == 1 / 1000
    assert r.p_exact == pytest.approx(2 / math.comb(40, 20))
    # identical values: every permuted statistic equals the observed one, c = B, p = (B + 1)/(B + 1) = 1
    r = S.permutation_test([0.5] * 10, list("aabbbccccc"), B=500)
    assert r.p == 1.0 and r.statistic == 0.0 and "identical" in r.note
    # in general p = (c + 1)/(B + 1) with an integer 0 <= c <= B
    r = S.permutation_test(_binary(60, 0.5, 1), np.repeat(["u", "v", "w"], 20), B=300)
    c = r.p * 301 - 1
    assert c == pytest.approx(round(c)) and 0 <= round(c) <= 300


def test_two_group_binary_hypergeometric_exact_p():
    # a = (1,0,1,1): 3/4, b = (0,0,1,0): 1/4, statistic |3/4 - 1/4| = 0.5
    # K = 4 ones among N = 8, n_a = 4: stat >= 0.5 iff k_a in {0, 1, 3, 4}
    # P = [C(4,0)C(4,4) + C(4,1)C(4,3) + C(4,3)C(4,1) + C(4,4)C(4,0)] / C(8,4) = (1+16+16+1)/70 = 0.485714
    r = S.permutation_test([1, 0, 1, 1, 0, 0, 1, 0], list("aaaabbbb"), B=20_000)
    assert r.statistic == pytest.approx(0.5)
    assert r.p_exact == pytest.approx(34 / 70)
    assert r.p == pytest.approx(34 / 70, abs=0.015)  # Monte-Carlo SE ~ 0.0035


def test_real_valued_permutation_matches_enumeration():
    values = np.array([2.1, 3.4, 1.9, 5.0, 4.2, 3.9, 6.1, 0.5, 2.8])
    groups = np.array(list("aaabbbccc"))
    r = S.permutation_test(values, groups, B=20_000)
    f_obs = sstats.f_oneway(values[:3], values[3:6], values[6:]).statistic
    assert r.statistic == pytest.approx(f_obs)
    # enumerate all 9! / (3!)^3 = 1680 distinct assignments of the labels to positions
    def f_stat(ga, gb, gc):
        gs = [values[list(g)] for g in (ga, gb, gc)]
        grand = values.mean()
        ssb = sum(len(g) * (g.mean() - grand) ** 2 for g in gs)
        ssw = sum(((g - g.mean()) ** 2).sum() for g in gs)
        return (ssb / 2) / (ssw / 6)

    hits = total = 0
    for ga in itertools.combinations(range(9), 3):
        rest = [i for i in range(9) if i not in ga]
        for gb in itertools.combinations(rest, 3):
            gc = [i for i in rest if i not in gb]
            hits += f_stat(ga, gb, gc) >= f_obs * (1 - 1e-9)
            total += 1
    assert total == 1680
    assert r.p == pytest.approx(hits / total, abs=0.012)


def test_permutation_drops_small_strata_and_handles_single_group():
    r = S.permutation_test([1, 0, 1, 1, 0], ["F", "F", "M", "M", "X"])
    assert r.dropped == ("X",) and r.groups == ("F", "M") and r.n == 4
    assert "X (n=1)" in r.note
    r = S.permutation_test([1, 0, 1], ["F", "F", "M"])
    assert math.isnan(r.p) and math.isnan(r.statistic)
    assert r.note.startswith("not estimable") and r.dropped == ("M",)
    r = S.permutation_test([], [])
    assert math.isnan(r.p) and r.note.startswith("not estimable")


# ------------------------------------------------------------------------------------------ multiplicity


def test_benjamini_hochberg_hand_and_statsmodels():
    # m = 4 non-nan p: sorted 0.01, 0.03, 0.04, 0.20 -> m p / r = 0.04, 0.06, 0.05333, 0.20
    # running min from the right: 0.04, 0.05333, 0.05333, 0.20
    p = np.array([0.01, 0.04, 0.03, 0.20, np.nan])
    q = S.benjamini_hochberg(p)
    np.testing.assert_allclose(q[:4], [0.04, 0.16 / 3, 0.16 / 3, 0.20])
    assert math.isnan(q[4])
    from statsmodels.stats.multitest import multipletests

    np.testing.assert_allclose(q[:4], multipletests(p[:4], method="fdr_bh")[1])
    assert S.benjamini_hochberg([0.9, 0.95])[0] == pytest.approx(0.95)  # monotone
    assert S.benjamini_hochberg([0.6, 0.7, 0.8]).max() <= 1.0
    assert S.benjamini_hochberg([]).shape == (0,)
    assert np.isnan(S.benjamini_hochberg([np.nan])).all()


# ------------------------------------------------------------------------------------------ rank statistics


def test_spearman_permutation_rho_and_p():
    # x = 1..5, y = (2,1,4,3,5): d = (1,1,1,1,0), sum d^2 = 4, rho = 1 - 6*4/(5*24) = 0.8
    # exact two-sided permutation p: rho >= 0.8 iff sum d^2 <= 4: identity (1), one adjacent swap (4),
    # two disjoint adjacent swaps (3) = 8 orderings; rho <= -0.8 by symmetry 8 more -> 16 / 120 = 0.1333
    rho, p = S.spearman_permutation([1, 2, 3, 4, 5], [2, 1, 4, 3, 5], B=20_000)
    assert rho == pytest.approx(0.8)
    assert p == pytest.approx(16 / 120, abs=0.008)  # Monte-Carlo SE ~ 0.0024
    # ties averaged like scipy
    x = [1, 2, 2, 3, 5, 5, 7]
    y = [3, 1, 2, 2, 6, 4, 9]
    assert S.spearman_permutation(x, y, B=100)[0] == pytest.approx(sstats.spearmanr(x, y).statistic)
    assert all(math.isnan(v) for v in S.spearman_permutation([1, 1, 1, 1], [1, 2, 3, 4]))
    assert all(math.isnan(v) for v in S.spearman_permutation([1, 2], [1, 2]))


def test_kendall_tau_b_hand_and_scipy():
    # x = 1..4, y = (1,3,2,4): 6 pairs, 5 concordant, 1 discordant, no ties -> tau = 4/6
    assert S.kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4])[0] == pytest.approx(2 / 3)
    # x = (1,2,2,3), y = (1,2,3,3): C = 4, D = 0, one tie in x, one tie in y
    # tau_b = 4 / sqrt((6 - 1) * (6 - 1)) = 0.8
    tau, p = S.kendall_tau_b([1, 2, 2, 3], [1, 2, 3, 3])
    assert tau == pytest.approx(0.8)
    ref = sstats.kendalltau([1, 2, 2, 3], [1, 2, 3, 3])
    assert (tau, p) == pytest.approx((ref.statistic, ref.pvalue))
    assert all(math.isnan(v) for v in S.kendall_tau_b([1, 1, 1], [1, 2, 3]))


# ------------------------------------------------------------------------------------------ AUROC, calibration


def test_auroc_with_ties_hand_and_sklearn():
    # positives score 0.4, 0.8; negatives 0.1, 0.4
    # pairs: (0.4 vs 0.1) 1, (0.4 vs 0.4) 1/2, (0.8 vs 0.1) 1, (0.8 vs 0.4) 1 -> 3.5 / 4 = 0.875
    scores, labels = [0.1, 0.4, 0.4, 0.8], [0, 0, 1, 1]
    assert S.auroc(scores, labels) == pytest.approx(0.875)
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    s = np.round(rng.random(300), 1)  # many ties
    y = (rng.random(300) < s).astype(int)
    assert S.auroc(s, y) == pytest.approx(roc_auc_score(y, s))
    assert math.isnan(S.auroc([0.2, 0.3], [1, 1]))


def test_auroc_interval_bootstrap():
    rng = np.random.default_rng(1)
    y = np.arange(200) % 2
    s = rng.normal(size=200) + y
    e = S.auroc_interval(s, y, B=2000)
    assert e.point == pytest.approx(S.auroc(s, y))
    assert e.ci_low < e.point < e.ci_high
    # Hanley-McNeil-ish scale: se of an AUROC ~0.76 with 100/100 is about 0.034
    assert 0.02 < e.se < 0.05
    # tiny sample: some resamples lack a class; they are skipped and counted
    e2 = S.auroc_interval([0.1, 0.9, 0.4], [0, 1, 1], B=500)
    assert "skipped" in e2.method and e2.n == 3
    one = S.auroc_interval([0.1, 0.2], [1, 1])
    assert math.isnan(one.point) and "not estimable" in one.method
    assert S.auroc_interval([], []).method == S.NOT_ESTIMABLE_N0


def test_auroc_interval_equals_naive_per_resample_loop(monkeypatch):
    monkeypatch.setattr(S.kernels, "_CHUNK_ELEMS", 300)
    rng = np.random.default_rng(4)
    n, B = 25, 400
    y = (rng.random(n) < 0.3).astype(int)
    s = np.round(rng.random(n) + 0.4 * y, 1)  # ties
    idx = np.random.RandomState(0).randint(0, n, size=(B, n))
    boot = np.array([S.auroc(s[i], y[i]) for i in idx])
    ok = np.isfinite(boot)
    e = S.auroc_interval(s, y, B=B)
    assert (e.ci_low, e.ci_high) == pytest.approx(tuple(np.percentile(boot[ok], [2.5, 97.5])), abs=1e-12)
    assert e.se == pytest.approx(boot[ok].std(ddof=1), abs=1e-12)
    assert f"{B - ok.sum()} resample(s) lacking a class skipped" in e.method or ok.all()


def _resampled_aurocs(s: np.ndarray, y: np.ndarray, d: np.ndarray) -> np.ndarray:
    """AUROC (scipy ranks) of each resample: each row of ``d`` holds the drawn case indices."""
    return np.array([S.auroc(s[r], y[r]) for r in d])


def test_auroc_multiplicity_kernel_equals_per_resample_auroc():
    rng = np.random.default_rng(4)
    for decimals in (0, 1, 2, 6):  # from heavy ties (two scores) to none
        n = int(rng.integers(5, 90))
        y = (rng.random(n) < 0.4).astype(np.int8)
        s = np.round(rng.random(n) + 0.3 * y, decimals)
        d = rng.integers(0, n, size=(300, n))
        W = np.zeros((300, n + 1), np.float32)
        W[:, :n] = np.bincount((d + (np.arange(300) * n)[:, None]).ravel(), minlength=300 * n).reshape(300, n)
        plan = S.ranking._rank_plan(s, y, np.float32)
        work = tuple(np.empty((300, plan.order.shape[0]), np.float32) for _ in range(3))
        got = S.ranking._auroc_from_multiplicities(W, plan, work)
        ref = _resampled_aurocs(s, y, d)
        assert np.array_equal(np.isnan(got), np.isnan(ref))  # resamples lacking a class
        ok = ~np.isnan(ref)
        assert np.abs(got[ok] - ref[ok]).max() < 1e-12, decimals


def test_auroc_cell_count_kernel_equals_auroc_of_the_counted_resample():
    # cells = distinct (score, class) in score order: 0.2/neg, 0.2/pos, 0.5/neg, 0.9/pos
    cells_s, cells_y = np.array([0.2, 0.2, 0.5, 0.9]), np.array([0, 1, 0, 1])
    level = np.array([0, 0, 1, 2])
    C = np.array([[1, 1, 1, 1], [2, 0, 1, 1], [0, 3, 0, 1], [2, 2, 0, 0]], dtype=float)  # rows sum to n = 4
    got = S.ranking._auroc_cells_counts(C, level, cells_y, 3, 4)
    for row, g in zip(C.astype(int), got):
        ref = S.auroc(np.repeat(cells_s, row), np.repeat(cells_y, row))
        assert (math.isnan(g) and math.isnan(ref)) or g == pytest.approx(ref, abs=1e-12)
    # first row by hand: pos 0.2 vs neg 0.2 -> 1/2, vs neg 0.5 -> 0; pos 0.9 beats both -> 2; U = 2.5 of 4
    assert got[0] == pytest.approx(2.5 / 4)


def _documented_draws(n: int, B: int, seed: int = 0) -> np.ndarray:
    """The exact-counts case draws as documented in stats.case_bootstrap: fixed blocks of 500 resamples, block i
    from default_rng(SeedSequence(seed).spawn(...)[i]), int16 chunks of min(500, 2**17 // n) rows."""
    rows = S.kernels._chunk_rows(n)
    blocks = range(0, B, 500)
    out = []
    for lo, ss in zip(blocks, np.random.SeedSequence(seed).spawn(len(blocks))):
        g = np.random.default_rng(ss)
        hi = min(B, lo + 500)
        for a in range(lo, hi, rows):
            out.append(g.integers(0, n, size=(min(hi, a + rows) - a, n), dtype=np.int16))
    return np.concatenate(out)


def test_auroc_exact_counts_same_for_any_thread_count_and_documented_draws():
    rng = np.random.default_rng(8)
    n = 700
    y = rng.integers(0, 2, n)
    s = np.round(rng.random(n) + 0.3 * y, 3)  # > 64 cells, some tied scores: the multiplicity kernel
    one = S.auroc_interval(s, y, B=1200, mode="exact-counts", workers=1)
    assert one == S.auroc_interval(s, y, B=1200, mode="exact-counts", workers=3)
    boot = _resampled_aurocs(s, y, _documented_draws(n, 1200))
    assert one.se == pytest.approx(boot.std(ddof=1), abs=1e-12)
    assert (one.ci_low, one.ci_high) == pytest.approx(tuple(np.percentile(boot, [2.5, 97.5])), abs=1e-12)
    # several score columns share the resampled cases: each equals its own call, and the ratios ride along
    s2 = rng.random(n)
    auc, rat = S.case_bootstrap(n, B=1200, scores=np.stack([s, s2], axis=1), labels=y, num=s2[:, None])
    assert np.array_equal(auc[:, 0], S.ranking._auroc_counts_boot(s.astype(float), y, 1200, 0))
    assert np.allclose(auc[:, 1], _resampled_aurocs(s2, y, _documented_draws(n, 1200)), rtol=0, atol=1e-12)
    assert np.allclose(rat[:, 0], s2[_documented_draws(n, 1200)].mean(axis=1), rtol=0, atol=1e-12)


def test_auroc_exact_counts_few_cells_matches_index_in_distribution():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 600)
    s = np.round(np.clip(0.3 * y + 0.7 * rng.random(600), 0, 1), 1)  # 11 levels x 2 classes: multinomial cells
    a = S.auroc_interval(s, y, B=4000, mode="index")
    b = S.auroc_interval(s, y, B=4000, mode="exact-counts")
    assert a.point == b.point
    assert abs(a.ci_low - b.ci_low) < 0.01 and abs(a.ci_high - b.ci_high) < 0.01
    assert abs(a.se - b.se) / a.se < 0.08


def test_bootstrap_mean_hand_computed():
    # values (0, 1): a resample of 2 has mean 0, 1/2 or 1 with probabilities 1/4, 1/2, 1/4:
    # bootstrap SD = sqrt(1/4 * 1/4 + 1/4 * 1/4) = sqrt(1/8) = 0.35355, percentile interval (0, 1)
    e = S.bootstrap_mean([0.0, 1.0], B=20_000)
    assert e.point == 0.5 and e.n == 2
    assert e.se == pytest.approx(math.sqrt(1 / 8), rel=0.02)
    assert (e.ci_low, e.ci_high) == (0.0, 1.0)
    # continuous values (more than 64 distinct: per-case multiplicities): the exact bootstrap SD of a mean is the
    # population SD / sqrt(n); for 0, 1/99, ..., 1 that is sqrt((100^2 - 1) / 12) / 99 / sqrt(100) = 0.029157
    v = np.arange(100) / 99
    e = S.bootstrap_mean(v, B=20_000)
    assert e.point == pytest.approx(0.5)
    assert e.se == pytest.approx(math.sqrt((100**2 - 1) / 12) / 99 / 10, rel=0.03)
    assert e.ci_low < 0.5 < e.ci_high and "bootstrap of the mean" in e.method
    assert S.bootstrap_mean([]).method == S.NOT_ESTIMABLE_N0


def test_case_bootstrap_ratios_index_mode_is_the_released_index_matrix(monkeypatch):
    monkeypatch.setattr(S.kernels, "_CHUNK_ELEMS", 700)  # several chunks
    rng = np.random.default_rng(2)
    n, B = 90, 300
    v = rng.random(n)
    m = (rng.random(n) < 0.3).astype(float)
    draws = S.case_bootstrap_ratios(np.stack([v, v * m], axis=1), np.stack([np.ones(n), m], axis=1), B=B,
                                    mode="index")
    idx = np.random.RandomState(0).randint(0, n, size=(B, n))
    assert np.allclose(draws[:, 0], v[idx].mean(axis=1), rtol=0, atol=1e-12)
    with np.errstate(invalid="ignore", divide="ignore"):
        sub = (v * m)[idx].sum(axis=1) / m[idx].sum(axis=1)  # the mean over the subset, membership follows the case
    assert np.allclose(draws[:, 1], sub, rtol=0, atol=1e-12, equal_nan=True)


def test_case_bootstrap_ratios_exact_counts_stream_threads_and_few_rows():
    rng = np.random.default_rng(3)
    n, B = 300, 1100
    X = rng.random((n, 3))
    one = S.case_bootstrap_ratios(X, B=B, workers=1)
    assert np.array_equal(one, S.case_bootstrap_ratios(X, B=B, workers=4))
    # the documented stream (the same case draws as the AUROC): means of the drawn rows
    assert np.allclose(one, X[_documented_draws(n, B)].mean(axis=1), rtol=0, atol=1e-12)
    # two distinct rows: their resampled counts are Binomial(n, 1/2), so the mean's SD is 0.5 / sqrt(n)
    two = S.case_bootstrap_ratios(np.repeat([[0.0], [1.0]], n // 2, axis=0), B=20_000)[:, 0]
    assert two.std(ddof=1) == pytest.approx(0.5 / math.sqrt(n), rel=0.03)
    # a zero denominator gives nan, never a warning
    assert np.isnan(S.case_bootstrap_ratios(np.ones((4, 1)), np.zeros((4, 1)), B=10)).all()
    with pytest.raises(ValueError, match="same shape"):
        S.case_bootstrap_ratios(np.ones((4, 2)), np.ones((4, 1)))


def test_ece_terms_sum_to_ece_and_bootstrap_estimate_skips_nan():
    rng = np.random.default_rng(6)
    conf = rng.random(200)
    correct = (rng.random(200) < conf).astype(int)
    terms = S.ece_terms(conf, correct)
    assert terms.shape == (200, 10) and np.count_nonzero(terms, axis=1).max() == 1
    assert np.abs(terms.mean(axis=0)).sum() == pytest.approx(S.ece(conf, correct))
    # hand: confidences 0.05 (bin 0, correct) and 0.95 (bin 9, wrong): |1 - 0.05| / 2 + |0 - 0.95| / 2 = 0.95
    assert np.abs(S.ece_terms([0.05, 0.95], [1, 0]).mean(axis=0)).sum() == pytest.approx(0.95)
    e = S.bootstrap_estimate(0.5, [0.1, np.nan, 0.9, 0.5], n=4)
    assert e.se == pytest.approx(0.4) and "1 resample(s)" in e.method
    assert math.isnan(S.bootstrap_estimate(0.5, [np.nan], n=4).ci_low)


def test_brier_hand():
    # (0.9-1)^2 + (0.2-0)^2 + (0.6-0)^2 = 0.01 + 0.04 + 0.36 = 0.41; / 3 = 0.136667
    assert S.brier([0.9, 0.2, 0.6], [1, 0, 0]) == pytest.approx(0.41 / 3)
    assert math.isnan(S.brier([], []))
    with pytest.raises(ValueError, match=r"prob\[0\]"):
        S.brier([1.2], [1])


def test_ece_tiny_example_and_na_rule():
    # bin [0.9, 1.0]: conf 0.95, 0.92, correct 1, 0 -> acc 0.5, conf 0.935 -> |.| = 0.435, weight 2/5 -> 0.174
    # bin [0.6, 0.7): conf 0.65, 0.62, correct 1, 1 -> acc 1, conf 0.635 -> 0.365, weight 2/5 -> 0.146
    # bin [0.1, 0.2): conf 0.15, correct 0 -> 0.15, weight 1/5 -> 0.030
    # ECE = 0.174 + 0.146 + 0.030 = 0.350
    assert S.ece([0.95, 0.92, 0.65, 0.62, 0.15], [1, 0, 1, 1, 0]) == pytest.approx(0.35)
    # N/A rule: more than 90% exactly 0 or 1
    assert S.ece([1.0] * 10, [1] * 10) is None
    assert S.ece([1.0] * 19 + [0.7], [1] * 20) is None  # 95% degenerate
    v = S.ece([1.0] * 9 + [0.7], [1] * 10)  # exactly 90% is not "more than 90%"
    # bin 9: nine 1.0s all correct -> 0; bin 7: 0.7 correct -> |1 - 0.7| * 1/10 = 0.03
    assert v == pytest.approx(0.03)
    assert S.ece([], []) is None
    # agrees with a direct implementation of the paper's formula on random data
    rng = np.random.default_rng(2)
    c = rng.random(500)
    k = (rng.random(500) < c).astype(int)
    edges = np.linspace(0, 1, 11)
    ref = 0.0
    for i in range(10):
        m = (c >= edges[i]) & ((c < edges[i + 1]) if i < 9 else (c <= edges[i + 1]))
        if m.any():
            ref += m.mean() * abs(k[m].mean() - c[m].mean())
    assert S.ece(c, k) == pytest.approx(ref)


# ------------------------------------------------------------------------------------------ agreement


def test_cohen_kappa_hand_and_sklearn():
    from sklearn.metrics import cohen_kappa_score

    a = [0, 0, 1, 1, 1, 0, 1, 0, 1, 1]
    b = [0, 1, 1, 1, 0, 0, 1, 0, 1, 1]
    # po = 8/10; both raters say 1 six times: pe = 0.6*0.6 + 0.4*0.4 = 0.52; kappa = 0.28 / 0.48 = 0.583333
    assert S.cohen_kappa(a, b) == pytest.approx(0.28 / 0.48)
    assert S.cohen_kappa(a, b) == pytest.approx(cohen_kappa_score(a, b))


def test_quadratic_kappa_hand_and_sklearn():
    from sklearn.metrics import cohen_kappa_score

    a, b = [0, 1, 2, 2], [0, 2, 2, 1]
    # observed weighted disagreement: cells (1,2) and (2,1), weight (i-j)^2 = 1 each -> 2
    # marginals r = c = (1, 1, 2): sum (i-j)^2 r_i c_j = 9 + 3 + 10 = 22, expected = 22/4 = 5.5
    # kappa_w = 1 - 2 / 5.5 = 0.636364
    assert S.cohen_kappa(a, b, weights="quadratic") == pytest.approx(1 - 2 / 5.5)
    rng = np.random.default_rng(3)
    r1 = rng.integers(0, 4, 80)
    r2 = np.clip(r1 + rng.integers(-1, 2, 80), 0, 3)
    for w in (None, "linear", "quadratic"):
        assert S.cohen_kappa(r1, r2, weights=w) == pytest.approx(cohen_kappa_score(r1, r2, weights=w))
    assert math.isnan(S.cohen_kappa([1, 1], [1, 1]))
    assert math.isnan(S.cohen_kappa([], []))


def test_binomial_test_hand_and_scipy():
    # P(X >= 8 | Bin(10, 1/2)) = (C(10,8) + C(10,9) + C(10,10)) / 1024 = (45 + 10 + 1) / 1024
    assert S.binomial_test(8, 10, 0.5) == pytest.approx(56 / 1024)
    assert S.binomial_test(3, 20, 0.25, "two-sided") == pytest.approx(
        sstats.binomtest(3, 20, 0.25, alternative="two-sided").pvalue)
    assert math.isnan(S.binomial_test(0, 0, 0.5))


# ------------------------------------------------------------------------------------------ degenerate inputs


def test_degenerate_inputs_return_nan_with_note():
    for mode in ("exact-counts", "index"):
        e = S.proportion([], mode=mode)
        assert math.isnan(e.point) and math.isnan(e.ci_low) and e.n == 0
        assert e.method == "not estimable (n = 0)" and not e.estimable
        r = S.paired_difference([], [], mode=mode)
        assert math.isnan(r.diff) and math.isnan(r.p) and r.method == "not estimable (n = 0)"
    assert S.mean_estimate([]).method == "not estimable (n = 0)"
    assert S.paired_difference_values([], []).method == "not estimable (n = 0)"
    assert math.isnan(S.bootstrap_sd([]))
    # all-identical outcomes: estimable, zero spread, flagged
    e = S.proportion([1] * 12)
    assert (e.point, e.se, e.ci_low, e.ci_high) == (1.0, 0.0, 1.0, 1.0)
    assert "degenerate" in e.method
    one = S.mean_estimate([3.0])
    assert one.point == 3.0 and math.isnan(one.se) and "n = 1" in one.method
    # single-case proportion and clusters: no warnings, finite output
    assert S.proportion([1], clusters=["p1"]).point == 1.0
    assert S.paired_difference([1], [0], clusters=["p1"]).p == pytest.approx(1 / 10_000)


def test_clusters_validation():
    with pytest.raises(ValueError, match="one id per case"):
        S.proportion([0, 1, 1], clusters=["a", "b"])
    with pytest.raises(ValueError, match=r"clusters\[1\]"):
        S.proportion([0, 1], clusters=np.array(["a", None], dtype=object))


# ------------------------------------------------------------------------------------------ properties


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.floats(0, 1), st.just(float("nan"))), max_size=30), st.randoms())
def test_bh_properties(ps, rnd):
    p = np.array(ps, dtype=float)
    q = S.benjamini_hochberg(p)
    ok = ~np.isnan(p)
    assert np.array_equal(np.isnan(q), ~ok)  # nan stays nan
    assert np.all(q[ok] >= p[ok] - 1e-15) and np.all(q[ok] <= 1.0)
    order = np.argsort(p[ok], kind="stable")
    assert np.all(np.diff(q[ok][order]) >= -1e-15)  # monotone in p
    perm = list(range(len(p)))
    rnd.shuffle(perm)
    np.testing.assert_allclose(S.benjamini_hochberg(p[perm]), q[perm])  # order of input does not matter
    # m counts only non-nan p: appending nan leaves the others unchanged
    np.testing.assert_allclose(S.benjamini_hochberg(np.append(p, np.nan))[:-1], q)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1)), min_size=1, max_size=40))
def test_paired_difference_invariants(pairs):
    a = np.array([x for x, _ in pairs])
    b = np.array([y for _, y in pairs])
    r = S.paired_difference(a, b, B=500)
    assert r.diff == pytest.approx(a.mean() - b.mean())
    assert 1 / 500 <= r.p <= 1.0
    assert -1.0 <= r.ci_low <= r.ci_high <= 1.0
    # swapping the arms mirrors everything (index mode: the same resamples, so exactly)
    r = S.paired_difference(a, b, B=500, mode="index")
    s = S.paired_difference(b, a, B=500, mode="index")
    assert s.diff == pytest.approx(-r.diff) and s.p == r.p
    assert (s.ci_low, s.ci_high) == pytest.approx((-r.ci_high, -r.ci_low))
    assert S.mcnemar_exact(a, b) == S.mcnemar_exact(b, a)


def test_bootstrap_sd_modes_and_cluster_mean_estimate():
    x = _binary(400, 0.3, seed=21)
    sd_e = S.bootstrap_sd(x, mode="exact-counts")
    sd_i = S.bootstrap_sd(x, mode="index")
    # ideal bootstrap SD = sqrt(p(1-p)/n)
    ideal = math.sqrt(x.mean() * (1 - x.mean()) / 400)
    assert sd_e == pytest.approx(ideal, rel=0.03) and sd_i == pytest.approx(ideal, rel=0.03)
    # mean_estimate with clusters: duplicated cases (every case twice, same patient) -> same cluster-robust SE
    # as the original cases without clusters up to the n/(n-1) of the ddof=1 SE
    v = np.random.default_rng(3).normal(size=150)
    e1 = S.mean_estimate(v)
    e2 = S.mean_estimate(np.repeat(v, 2), clusters=np.repeat(np.arange(150), 2))
    assert e2.point == pytest.approx(e1.point)
    assert e2.se == pytest.approx(e1.se * math.sqrt(149 / 150), rel=1e-9)
    assert e2.boot_sd == pytest.approx(e1.boot_sd, rel=0.05)
    # ignoring the duplication shrinks the SE by ~sqrt(2): the reason for the cluster option
    assert S.mean_estimate(np.repeat(v, 2)).se == pytest.approx(e1.se / math.sqrt(2), rel=0.01)


def test_auroc_interval_exact_counts_mode_matches_index_in_distribution() -> None:
    """The fast mode resamples the same way (n uniform draws with replacement): intervals agree closely."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 400)
    s = np.round(np.clip(y * 0.25 + rng.random(400) * 0.75, 0, 1), 2)  # ties present
    a = S.auroc_interval(s, y, B=4000, mode="index")
    b = S.auroc_interval(s, y, B=4000, mode="exact-counts")
    assert a.point == b.point
    assert abs(a.ci_low - b.ci_low) < 0.01 and abs(a.ci_high - b.ci_high) < 0.01
    assert abs(a.se - b.se) / a.se < 0.08
    assert "exact-counts" in b.method
    with pytest.raises(ValueError, match="mode"):
        S.auroc_interval(s, y, mode="bogus")


# ------------------------------------------------------------------------------------------ cluster ratios


def test_cluster_ratio_se_hand_and_proportion():
    # clusters (items) with (correct, trials) = (2, 2), (0, 2), (1, 1): p = 3/5
    # residuals 2 - 1.2 = 0.8, 0 - 1.2 = -1.2, 1 - 0.6 = 0.4; sum of squares 0.64 + 1.44 + 0.16 = 2.24
    # se = sqrt(2.24) / 5 = 1.4966630 / 5 = 0.2993326
    assert S.cluster_ratio_se([2, 0, 1], [2, 2, 1]) == pytest.approx(0.2993326, abs=1e-7)
    ref = S.proportion([1, 1, 0, 0, 1], clusters=["a", "a", "b", "b", "c"], B=10)
    assert S.cluster_ratio_se([2, 0, 1], [2, 2, 1]) == pytest.approx(ref.se, rel=1e-12)
    # one 0/1 trial per cluster: sqrt(p(1-p)/n) = sqrt(0.25 / 4) = 0.25
    assert S.cluster_ratio_se([1, 0, 0, 1], [1, 1, 1, 1]) == pytest.approx(0.25)
    assert math.isnan(S.cluster_ratio_se([0, 0], [0, 0]))
    with pytest.raises(ValueError, match="same length"):
        S.cluster_ratio_se([1, 0], [1])


def test_cluster_bootstrap_ratios_resample_whole_clusters_with_the_case_bootstrap():
    num = np.array([[2.0, 1.0], [0.0, 2.0], [1.0, 0.0]])
    den = np.array([[2.0, 2.0], [2.0, 2.0], [1.0, 1.0]])
    got = S.cluster_bootstrap_ratios(num, den, B=200, seed=3)
    np.testing.assert_array_equal(got, S.case_bootstrap_ratios(num, den, B=200, seed=3))
    # every draw is one multiset of 3 clusters, the same for both columns (columns are paired)
    counts = [np.array(c) for c in itertools.product(range(4), repeat=3) if sum(c) == 3]
    possible = {tuple(np.round((c @ num) / (c @ den), 12)) for c in counts}
    assert all(tuple(np.round(row, 12)) in possible for row in got)
    assert len({tuple(np.round(row, 12)) for row in got}) > 3


def test_cluster_bootstrap_ratios_hand_distribution_and_pairing():
    # one cluster: every draw is the point 3/4
    assert np.all(S.cluster_bootstrap_ratios([3], [4], B=50) == 0.75)
    # two clusters (1/1) and (0/1): draws 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4
    d = S.cluster_bootstrap_ratios([1, 0], [1, 1], B=20_000, seed=1)[:, 0]
    assert set(np.unique(d)) == {0.0, 0.5, 1.0}
    assert np.mean(d == 0.5) == pytest.approx(0.5, abs=0.015) and np.mean(d == 0) == pytest.approx(0.25, abs=0.015)
    # identical columns get identical draws (same clusters in every column of a draw)
    two = S.cluster_bootstrap_ratios(np.array([[1, 1], [0, 0], [1, 1]]), np.ones((3, 2)), B=200)
    assert np.array_equal(two[:, 0], two[:, 1])
    # a draw with a zero denominator is nan: cluster 0 has no trial, P(all draws pick it) = 1/4
    z = S.cluster_bootstrap_ratios([0, 1], [0, 1], B=4000, seed=2)[:, 0]
    assert np.isnan(z).mean() == pytest.approx(0.25, abs=0.03) and np.all(z[~np.isnan(z)] == 1.0)
    with pytest.raises(ValueError, match="same shape"):
        S.cluster_bootstrap_ratios(np.ones((3, 2)), np.ones((3, 1)))
    with pytest.raises(ValueError, match="finite"):
        S.cluster_bootstrap_ratios([1, np.nan], [1, 1])


def test_cluster_bootstrap_ratios_matches_the_clustered_proportion_in_distribution():
    rng = np.random.default_rng(5)
    x = (rng.random(600) < 0.4).astype(int)
    cl = np.repeat(np.arange(200), 3)
    ref = S.proportion(x, clusters=cl, B=10_000)
    num = np.bincount(cl, weights=x)
    den = np.bincount(cl).astype(float)
    draws = S.cluster_bootstrap_ratios(num, den, B=10_000)[:, 0]
    lo, hi = S.percentile_interval(draws)
    assert abs(lo - ref.ci_low) < 0.01 and abs(hi - ref.ci_high) < 0.01
    assert S.bootstrap_draws_sd(draws) == pytest.approx(ref.boot_sd, rel=0.05)


def test_percentile_interval_sd_and_shift_reflect_p_hand():
    # percentiles 25 / 75 of 0..4 (linear interpolation) are 1 and 3; the nan draw is left out
    assert S.percentile_interval([0, 1, 2, 3, 4, np.nan], alpha=0.5) == (1.0, 3.0)
    assert all(math.isnan(v) for v in S.percentile_interval([np.nan, np.nan]))
    assert S.bootstrap_draws_sd([1.0, 2.0, 3.0, np.nan]) == pytest.approx(1.0)  # ddof = 1
    # d = 0.25, draws - d = (-0.5, -0.25, 0, 0.25, 0.5): |.| >= 0.25 for 4 of 5 -> p = 0.8
    assert S.shift_reflect_p([-0.25, 0.0, 0.25, 0.5, 0.75, np.nan], 0.25) == pytest.approx(0.8)
    assert S.shift_reflect_p([0.1, 0.3], 0.0) == 1.0  # no difference
    assert S.shift_reflect_p([0.5, 0.5], 0.5, B=1000) == pytest.approx(1 / 1000)  # floored at 1/B
    assert math.isnan(S.shift_reflect_p([0.1], float("nan")))


def test_paired_from_draws_hand():
    # draws of a - b: (0, 0.25, 0.5); d = 0.25 -> |x - d| = (0.25, 0, 0.25) >= 0.25 for 2 of 3: p = 2/3
    r = S.paired_from_draws([0.5, 0.75, 1.0], [0.5, 0.5, 0.5], 0.25, n=10, alpha=0.5)
    assert (r.diff, r.n) == (0.25, 10)
    assert r.sd == pytest.approx(0.25) and r.p == pytest.approx(2 / 3)
    assert (r.ci_low, r.ci_high) == pytest.approx((0.125, 0.375))  # 25th / 75th percentile of (0, .25, .5)
    assert math.isnan(S.paired_from_draws([0.5], [0.5], float("nan"), n=0).p)


def test_cluster_paired_difference_hand_and_against_paired_difference():
    # items (a correct, b correct, trials): (2, 0, 2), (1, 1, 2), (0, 0, 1): a = 3/5, b = 1/5, d = 0.4
    r = S.cluster_paired_difference([2, 1, 0], [2, 2, 1], [0, 1, 0], [2, 2, 1], B=2000)
    assert r.diff == pytest.approx(0.4) and r.n == 3 and r.ci_low <= 0.4 <= r.ci_high
    rng = np.random.default_rng(8)
    a = (rng.random(900) < 0.6).astype(int)
    b = np.where(rng.random(900) < 0.7, a, 1 - a)
    cl = np.repeat(np.arange(300), 3)
    ref = S.paired_difference(a, b, clusters=cl, B=10_000)
    got = S.cluster_paired_difference(np.bincount(cl, weights=a), np.bincount(cl).astype(float),
                                      np.bincount(cl, weights=b), np.bincount(cl).astype(float), B=10_000)
    assert got.diff == pytest.approx(ref.diff, abs=1e-12)
    assert got.sd == pytest.approx(ref.sd, rel=0.05)
    assert abs(got.ci_low - ref.ci_low) < 0.01 and abs(got.ci_high - ref.ci_high) < 0.01


def test_poisson_binomial_sf_and_chance_test_hand():
    # probs (0.5, 0.2): P(X = 0) = 0.5 * 0.8 = 0.4, P(X = 2) = 0.5 * 0.2 = 0.1
    assert S.poisson_binomial_sf(1, [0.5, 0.2]) == pytest.approx(0.6)
    assert S.poisson_binomial_sf(2, [0.5, 0.2]) == pytest.approx(0.1)
    assert S.poisson_binomial_sf(0, [0.5, 0.2]) == 1.0 and S.poisson_binomial_sf(3, [0.5, 0.2]) == 0.0
    # (0.5, 0.5, 0.2): P(X = 2) = 0.25 * 0.8 + 2 * 0.25 * 0.2 = 0.3, P(X = 3) = 0.25 * 0.2 = 0.05 -> 0.35
    assert S.poisson_binomial_sf(2, [0.5, 0.5, 0.2]) == pytest.approx(0.35)
    # equal chances: the binomial tail
    assert S.poisson_binomial_sf(9, np.full(20, 0.2)) == pytest.approx(
        sstats.binomtest(9, 20, 0.2, alternative="greater").pvalue, rel=1e-9)
    assert S.chance_test(9, np.full(20, 0.2)) == pytest.approx(sstats.binomtest(9, 20, 0.2, alternative="greater").pvalue)
    assert S.chance_test(2, [0.5, 0.5, 0.2]) == pytest.approx(0.35)
    assert math.isnan(S.chance_test(0, []))
    with pytest.raises(ValueError, match="probabilities"):
        S.poisson_binomial_sf(1, [1.5])
