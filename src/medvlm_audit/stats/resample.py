"""Resampling: index and exact-counts bootstrap kernels in fixed seeded blocks, bootstrap means, cluster ratios, intervals."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special as _special

from medvlm_audit.stats.kernels import (
    _CELLS_MAX,
    _as_cluster_matrix,
    _cluster_index_means,
    _dedupe_columns,
    _index_binary_means,
    _index_chunks,
    _index_means,
    _run_blocks,
)
from medvlm_audit.stats.ranking import case_bootstrap
from medvlm_audit.stats.types import _NAN, NOT_ESTIMABLE_N0, Estimate, Mode
from medvlm_audit.stats.validation import (
    _as_binary,
    _as_real,
    _check_alpha,
    _check_B,
    _check_mode,
    _check_same_length,
    _cluster_inverse,
    _pct,
    _percentiles,
    _sd,
)

__all__ = ['bias_corrected_interval', 'bootstrap_bias', 'bounded_mean_estimate', 'bootstrap_draws_sd', 'bootstrap_estimate', 'bootstrap_mean', 'bootstrap_sd', 'case_bootstrap_ratios', 'cluster_bootstrap_ratios', 'cluster_ratio_se', 'mean_estimate', 'percentile_interval']


def bootstrap_sd(x: Any, B: int = 10_000, seed: int = 0, mode: Mode = "index") -> float:
    """SD (ddof=1) of the bootstrap proportions: the SE the released code reports; nan when n == 0."""
    B = _check_B(B)
    _check_mode(mode)
    xb = _as_binary(x, "x")
    n = int(xb.shape[0])
    if n == 0:
        return _NAN
    if mode == "index":
        (boot,) = _index_binary_means([xb], B, seed)
    else:
        boot = np.random.default_rng(seed).binomial(n, xb.mean(), size=B) / n
    return _sd(boot)


def mean_estimate(values: Any, B: int = 10_000, seed: int = 0, clusters: Any = None,
                  alpha: float = 0.05) -> Estimate:
    """Mean of real values: analytic SE s/sqrt(n) (ddof=1; cluster-robust with clusters), index-resampling
    percentile bootstrap interval (bit-identical to the released code's ``values[idx].mean(1)``)."""
    B = _check_B(B)
    alpha = _check_alpha(alpha)
    v = _as_real(values, "values")
    n = int(v.shape[0])
    if n == 0:
        return Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    point = float(v.mean())
    if clusters is not None:
        inverse, K = _cluster_inverse(clusters, n)
        resid = np.bincount(inverse, weights=v - point, minlength=K)
        se = float(math.sqrt(float(np.sum(resid ** 2))) / n)
        se_txt = f"cluster-robust analytic SE ({K} clusters)"
        (boot,) = _cluster_index_means([v], inverse, K, B, seed)
        how = f"cluster bootstrap ({K} clusters, index, B={B}, seed={seed})"
    else:
        se = float(np.std(v, ddof=1) / math.sqrt(n)) if n > 1 else _NAN
        se_txt = "analytic SE s/sqrt(n)" if n > 1 else "SE not estimable (n = 1)"
        (boot,) = _index_means([v], B, seed)
        how = f"bootstrap (index, B={B}, seed={seed})"
    lo, hi = _percentiles(boot, alpha)
    return Estimate(point, se, lo, hi, n, f"percentile {how} {_pct(alpha)} interval; {se_txt}", _sd(boot))


def bounded_mean_estimate(values: Any, B: int = 10_000, seed: int = 0, alpha: float = 0.05) -> Estimate:
    """Mean of scores in [0, 1] (:func:`mean_estimate`), never with a zero-width interval.

    When every value is the same the percentile bootstrap collapses to the point ([0.25, 0.25] on 108 answers that
    all scored 2 of 5). Then the interval is :func:`~medvlm_audit.stats.rates.rate_interval` of the mean taken as a
    rate, k = round(mean * n) of n, and the SE sqrt(p(1 - p) / n): conservative, since a variable in [0, 1] with
    mean p has variance at most p(1 - p), the Bernoulli's (DESIGN.md, statistics conventions: no zero-width
    interval). Otherwise the result equals :func:`mean_estimate`'s.

    >>> e = bounded_mean_estimate([0.25] * 108, B=200)
    >>> e.point, e.ci_low < 0.25 < e.ci_high, round(e.se, 4)
    (0.25, True, 0.0417)
    >>> bounded_mean_estimate([0.0, 1.0], B=200) == mean_estimate([0.0, 1.0], B=200)
    True
    """
    from medvlm_audit.stats.rates import rate_interval

    e = mean_estimate(values, B=B, seed=seed, alpha=alpha)
    if e.n == 0 or not math.isfinite(e.point) or e.ci_low != e.ci_high:
        return e
    if not 0.0 <= e.point <= 1.0:
        raise ValueError(f"bounded_mean_estimate: values must lie in [0, 1], got a mean of {e.point}")
    k = int(round(e.point * e.n))
    lo, hi = rate_interval(k, e.n, B=B, seed=seed, alpha=alpha)
    se = math.sqrt(e.point * (1.0 - e.point) / e.n)
    return Estimate(e.point, se, lo, hi, e.n,
                    f"no variation (every value {e.point:g}): rate_interval of the mean as a rate, {k} of {e.n} "
                    f"(conservative for scores in [0, 1]); SE sqrt(p(1 - p) / n)", e.boot_sd)


def case_bootstrap_ratios(num: Any, den: Any = None, B: int = 10_000, seed: int = 0, mode: Mode = "exact-counts",
                          workers: int | None = None) -> np.ndarray:
    """Bootstrap draws, shape (B, k), of sum(num[:, j]) / sum(den[:, j]) over n cases (rows) drawn uniformly with
    replacement, the same cases for every column (columns of a draw are paired). ``den=None``: plain means.

    A vectorised bootstrap of means and ratios of means (a Brier score, the per-bin terms of an ECE, a mean over a
    subset whose membership travels with the case). ``exact-counts``: with few distinct rows (<= _CELLS_MAX) their
    resampled counts come from a multinomial (same distribution); otherwise :func:`case_bootstrap` (per-case
    multiplicities of n draws from the PCG64 block streams, any number of ``workers``, same result).
    ``index``: the released code's ``RandomState(seed).randint(0, n, (B, n))`` draws. A zero denominator gives nan.
    """
    B = _check_B(B)
    _check_mode(mode)
    N = _as_cluster_matrix(num, "num")
    D = np.ones_like(N) if den is None else _as_cluster_matrix(den, "den")
    if N.shape != D.shape:
        raise ValueError(f"num and den must have the same shape (cases x columns): {N.shape} != {D.shape}")
    n, k = N.shape
    out = np.empty((B, k))
    if n == 0 or k == 0:
        out.fill(_NAN)
        return out
    V, ia, ib = _dedupe_columns(N, D)

    def put(lo: int, hi: int, sums: np.ndarray) -> None:
        den_sums = sums[:, ib]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[lo:hi] = np.where(den_sums == 0.0, _NAN, sums[:, ia] / den_sums)

    if mode == "index":
        pos = 0
        for idx in _index_chunks(n, B, seed):
            c = idx.shape[0]
            flat = (idx + (np.arange(c, dtype=np.int64) * n)[:, None]).ravel()
            put(pos, pos + c, np.bincount(flat, minlength=c * n).reshape(c, n).astype(np.float64) @ V)
            pos += c
        return out
    rows_v, freq = np.unique(V, axis=0, return_counts=True)
    if rows_v.shape[0] <= _CELLS_MAX:
        p = freq / n

        def fill_cells(lo: int, hi: int, rng: np.random.Generator) -> None:
            put(lo, hi, rng.multinomial(n, p, size=hi - lo).astype(np.float64) @ rows_v)

        _run_blocks(B, seed, fill_cells, workers=1)
        return out
    return case_bootstrap(n, B, seed, num=N, den=D, workers=workers)[1]


def bootstrap_estimate(point: float, draws: Any, n: int, alpha: float = 0.05, how: str = "bootstrap") -> Estimate:
    """An Estimate from bootstrap draws of a statistic: se = SD of the draws (ddof=1), percentile interval; nan
    draws (resamples where the statistic is undefined) are left out and counted in ``method``."""
    alpha = _check_alpha(alpha)
    if n == 0:
        return Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    d = np.asarray(draws, dtype=np.float64).reshape(-1)
    ok = ~np.isnan(d)
    method = f"percentile {how} {_pct(alpha)} interval; se = bootstrap SD"
    if not ok.all():
        method += f"; {int((~ok).sum())} resample(s) where it is undefined skipped"
    if not ok.any():
        return Estimate(float(point), _NAN, _NAN, _NAN, int(n), method + "; interval not estimable")
    lo, hi = _percentiles(d[ok], alpha)
    sd = _sd(d[ok])
    return Estimate(float(point), sd, lo, hi, int(n), method, sd)


def bootstrap_mean(values: Any, B: int = 10_000, seed: int = 0, alpha: float = 0.05, mode: Mode = "exact-counts",
                   workers: int | None = None) -> Estimate:
    """Mean of real values with se = bootstrap SD and a percentile bootstrap interval (cases resampled with
    :func:`case_bootstrap_ratios`); compare :func:`mean_estimate` (analytic SE, index draws only)."""
    B = _check_B(B)
    v = _as_real(values, "values")
    n = int(v.shape[0])
    if n == 0:
        return Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    draws = case_bootstrap_ratios(v[:, None], None, B, seed, mode, workers)[:, 0]
    return bootstrap_estimate(float(v.mean()), draws, n, alpha, f"bootstrap of the mean ({mode}, B={B}, seed={seed})")


def cluster_ratio_se(num: Any, den: Any) -> float:
    """Cluster-robust (linearised ratio) SE of sum(num) / sum(den), one (num, den) pair per cluster.

    sqrt(sum_c (num_c - p den_c)^2) / sum(den), the SE ``proportion(x, clusters=...)`` reports; it is
    sqrt(p(1-p)/n) when every cluster holds one 0/1 trial. nan when sum(den) == 0.
    """
    nv = _as_real(num, "num")
    dv = _as_real(den, "den")
    _check_same_length(nv, dv, "num", "den")
    total = float(dv.sum())
    if total <= 0.0:
        return _NAN
    p = float(nv.sum()) / total
    return float(math.sqrt(float(np.sum((nv - p * dv) ** 2))) / total)


def cluster_bootstrap_ratios(num: Any, den: Any, B: int = 10_000, seed: int = 0) -> np.ndarray:
    """Bootstrap draws, shape (B, n_columns), of sum(num[:, j]) / sum(den[:, j]) with clusters resampled together.

    ``num``/``den`` hold per-cluster sums (e.g. an item's correct and scored trials over its repeats, so repeats
    stay with their item); a cluster is then one row of :func:`case_bootstrap_ratios`, which draws them."""
    return case_bootstrap_ratios(num, den, B, seed)


def percentile_interval(draws: Any, alpha: float = 0.05) -> tuple[float, float]:
    """Percentile interval (linear interpolation) of bootstrap draws, nan draws left out; (nan, nan) if none."""
    alpha = _check_alpha(alpha)
    d = np.asarray(draws, dtype=np.float64).reshape(-1)
    d = d[~np.isnan(d)]
    if not d.size:
        return _NAN, _NAN
    return _percentiles(d, alpha)


def bootstrap_bias(point: float, draws: Any, alpha: float = 0.05) -> tuple[float, float, float, float]:
    """Bootstrap bias and the bias-aware estimates of a statistic (Efron & Tibshirani 1993, ch. 10 and 13.4):
    ``(bias, point - bias, basic_low, basic_high)`` with bias = mean(draws) - point and the basic (reverse
    percentile) interval [2·point - q_(1-alpha/2), 2·point - q_(alpha/2)]. nan draws are left out.

    Use it beside :func:`percentile_interval` for a statistic that resampling inflates, such as a sum of squared
    noisy z-scores (WAE): its draws run above the observed value, so the percentile interval can miss the point,
    while the basic interval targets the population value with the bias removed.

    >>> b, corrected, lo, hi = bootstrap_bias(1.0, [1.5, 2.0, 2.5], alpha=0.5)   # q_.25 = 1.75, q_.75 = 2.25
    >>> round(b, 6), round(corrected, 6), round(lo, 6), round(hi, 6)
    (1.0, 0.0, -0.25, 0.25)
    """
    alpha = _check_alpha(alpha)
    d = np.asarray(draws, dtype=np.float64).reshape(-1)
    d = d[~np.isnan(d)]
    if not d.size or math.isnan(point):
        return _NAN, _NAN, _NAN, _NAN
    q_lo, q_hi = _percentiles(d, alpha)
    bias = float(d.mean()) - float(point)
    return bias, float(point) - bias, 2.0 * float(point) - q_hi, 2.0 * float(point) - q_lo


def bias_corrected_interval(point: float, draws: Any, alpha: float = 0.05) -> tuple[float, float]:
    """Bias-corrected percentile interval (Efron & Tibshirani 1993, ch. 14: BCa with acceleration 0): the
    percentiles Phi(2 z0 -+ z_(1-alpha/2)) of the draws, z0 = Phi^-1(share of draws below the point, ties
    counted half). It contains the point whenever |z0| <= z_(1-alpha/2); (nan, nan) when the share is 0 or 1
    (every draw on one side) or there is no draw.

    >>> lo, hi = bias_corrected_interval(0.0, np.linspace(-1, 1, 1001))   # symmetric draws: the percentile one
    >>> round(lo, 3), round(hi, 3)
    (-0.95, 0.95)
    """
    alpha = _check_alpha(alpha)
    d = np.asarray(draws, dtype=np.float64).reshape(-1)
    d = d[~np.isnan(d)]
    if not d.size or not math.isfinite(point):
        return _NAN, _NAN
    share = (float(np.sum(d < point)) + 0.5 * float(np.sum(d == point))) / d.size
    if not 0.0 < share < 1.0:
        return _NAN, _NAN
    z0, z = float(_special.ndtri(share)), float(_special.ndtri(1.0 - alpha / 2.0))
    q = 100.0 * _special.ndtr(np.array([2.0 * z0 - z, 2.0 * z0 + z]))
    lo, hi = np.percentile(d, q)
    return float(lo), float(hi)


def bootstrap_draws_sd(draws: Any) -> float:
    """SD (ddof=1) of bootstrap draws, nan draws left out; nan for fewer than two draws."""
    d = np.asarray(draws, dtype=np.float64).reshape(-1)
    return _sd(d[~np.isnan(d)])

