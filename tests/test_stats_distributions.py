"""stats.distributions: the scipy.stats functions the analyses call, bit-identical without importing scipy.stats."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from scipy import stats as S

from medvlm_audit.stats import distributions as D


def _same(a: object, b: object) -> bool:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return x.shape == y.shape and bool(np.all((x == y) | (np.isnan(x) & np.isnan(y))))


def test_binom_cdf_equals_scipy_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 30, 101, 2575):
        k = np.concatenate([np.arange(-2, n + 3), rng.uniform(-1, n + 1, 20)])
        for p in (0.0, 0.5, 0.03, 0.97, 1.0, rng.uniform()):
            assert _same(D.binom_cdf(k, n, p), S.binom.cdf(k, n, p)), (n, p)
    assert _same(D.binom_cdf(3, 10, 0.5), S.binom.cdf(3, 10, 0.5))
    assert isinstance(D.binom_cdf(3, 10, 0.5), np.floating)
    # outside the plain case: scipy's own answer (nan for a bad p or n)
    assert _same(D.binom_cdf(3, 10.5, 0.5), S.binom.cdf(3, 10.5, 0.5))
    assert _same(D.binom_cdf([1, np.nan], 10, 1.5), S.binom.cdf([1, np.nan], 10, 1.5))


def test_binom_ppf_equals_scipy_bit_for_bit() -> None:
    rng = np.random.default_rng(1)
    n = rng.integers(1, 3000, 2000).astype(float)
    k = np.floor(rng.uniform(0, 1, 2000) * (n + 1))
    p = k / n
    for q in (0.025, 0.975, 0.5, 1e-9, 1 - 1e-9):
        assert _same(D.binom_ppf(q, n, p), S.binom.ppf(q, n, p)), q
    assert _same(D.binom_ppf([0.0, 1.0, 0.5], 10, 0.3), S.binom.ppf([0.0, 1.0, 0.5], 10, 0.3))
    assert _same(D.binom_ppf(0.5, 0, 0.3), S.binom.ppf(0.5, 0, 0.3))


def test_hypergeom_pmf_equals_scipy_bit_for_bit() -> None:
    for M, n, N in ((10, 4, 5), (700, 300, 250), (2575, 1200, 1300), (5, 0, 3), (5, 5, 5), (1, 1, 1)):
        k = np.arange(-1, min(n, N) + 2)
        assert _same(D.hypergeom_pmf(k, M, n, N), S.hypergeom.pmf(k, M, n, N)), (M, n, N)
    assert _same(D.hypergeom_pmf(2.5, 10, 4, 5), S.hypergeom.pmf(2.5, 10, 4, 5))
    assert _same(D.hypergeom_pmf([1, 2], 0, 0, 0), S.hypergeom.pmf([1, 2], 0, 0, 0))  # M = 0: scipy's nan


def test_rankdata_equals_scipy() -> None:
    rng = np.random.default_rng(2)
    for x in (rng.normal(size=50), rng.integers(0, 5, 200), np.round(rng.uniform(size=3000), 2), np.array([1.0]),
              np.array([]), np.array([2, 2, 2]), np.array([1.0, np.nan, 0.0])):
        assert _same(D.rankdata(x), S.rankdata(x))


def test_a_grounding_report_does_not_import_scipy_stats() -> None:
    code = ("import sys; from medvlm_audit import stats; stats.auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]); "
            "stats.mcnemar_exact([1, 0, 1, 1], [0, 0, 1, 0]); stats.permutation_test([1, 0, 1, 1, 0, 1], list('aabbab'));"
            "stats.rate_intervals_limit([5, 50], [100, 100]); print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
