"""Paired tests: paired bootstrap differences with shift-and-reflect p-values, exact McNemar."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from medvlm_audit.stats.distributions import binom_cdf
from medvlm_audit.stats.kernels import (
    _cluster_index_means,
    _cluster_type_counts,
    _index_binary_means,
    _index_means,
)
from medvlm_audit.stats.resample import bootstrap_draws_sd, cluster_bootstrap_ratios, percentile_interval
from medvlm_audit.stats.types import _NAN, NOT_ESTIMABLE_N0, Mode, PairedDiff
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

__all__ = ['cluster_paired_difference', 'collapsed_change_interval', 'mcnemar_exact', 'paired_difference', 'paired_difference_values', 'paired_from_draws', 'shift_reflect_p']


def _shift_reflect_p(boot: np.ndarray, d: float, B: int) -> float:
    """Two-sided p: share of recentred draws with |d* - d| >= |d|, floored at 1/B; 1 when d == 0."""
    if d == 0.0:
        return 1.0
    share = float(np.count_nonzero(np.abs(boot - d) >= abs(d))) / boot.shape[0]
    return max(share, 1.0 / B)


def _paired_result(boot: np.ndarray, d: float, n: int, B: int, alpha: float, how: str) -> PairedDiff:
    lo, hi = _percentiles(boot, alpha)
    p = _shift_reflect_p(boot, d, B)
    method = (f"paired percentile {how} {_pct(alpha)} interval; sd = bootstrap SD (ddof=1); "
              f"two-sided shift-and-reflect p floored at 1/B")
    if d == 0.0:
        method += "; observed difference is 0 (p = 1)"
    return PairedDiff(d, _sd(boot), lo, hi, p, n, method)


def paired_difference(a: Any, b: Any, B: int = 10_000, seed: int = 0, mode: Mode = "exact-counts",
                      clusters: Any = None, alpha: float = 0.05) -> PairedDiff:
    """Paired bootstrap of mean(a) - mean(b) for 0/1 outcomes on the same cases (Supplementary Algorithm 1).

    ``exact-counts``: (n11, n10, n01, n00)* ~ Multinomial(n, observed pair shares), O(B); ``index``: the
    released code's shared ``RandomState(seed).randint`` index matrix, chunked; bit-identical draws.
    """
    B = _check_B(B)
    alpha = _check_alpha(alpha)
    _check_mode(mode)
    ab = _as_binary(a, "a")
    bb = _as_binary(b, "b")
    _check_same_length(ab, bb, "a", "b")
    n = int(ab.shape[0])
    if n == 0:
        return PairedDiff(_NAN, _NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    ka, kb = int(ab.sum(dtype=np.int64)), int(bb.sum(dtype=np.int64))
    d = ka / n - kb / n  # same float arithmetic as mean(a) - mean(b) on 0/1 data
    if clusters is not None:
        inverse, K = _cluster_inverse(clusters, n)
        if mode == "index":
            ma, mb = _cluster_index_means([ab, bb], inverse, K, B, seed)
        else:
            sums, tot = _cluster_type_counts([ab, bb], inverse, K, B, seed)
            ma, mb = sums[:, 0] / tot, sums[:, 1] / tot
        how = f"cluster bootstrap ({K} clusters, {mode}, B={B}, seed={seed})"
    elif mode == "index":
        ma, mb = _index_binary_means([ab, bb], B, seed)
        how = f"bootstrap ({mode}, B={B}, seed={seed})"
    else:
        n11 = int(np.count_nonzero((ab == 1) & (bb == 1)))
        n10 = ka - n11
        n01 = kb - n11
        n00 = n - n11 - n10 - n01
        rng = np.random.default_rng(seed)
        cnt = rng.multinomial(n, np.array([n11, n10, n01, n00], dtype=np.float64) / n, size=B)
        ma = (cnt[:, 0] + cnt[:, 1]) / n
        mb = (cnt[:, 0] + cnt[:, 2]) / n
        how = f"bootstrap ({mode}, B={B}, seed={seed})"
    return _paired_result(ma - mb, d, n, B, alpha, how)


def paired_difference_values(a: Any, b: Any, B: int = 10_000, seed: int = 0, clusters: Any = None,
                             alpha: float = 0.05) -> PairedDiff:
    """Paired bootstrap of mean(a) - mean(b) for real values on the same cases (index resampling, as released)."""
    B = _check_B(B)
    alpha = _check_alpha(alpha)
    av = _as_real(a, "a")
    bv = _as_real(b, "b")
    _check_same_length(av, bv, "a", "b")
    n = int(av.shape[0])
    if n == 0:
        return PairedDiff(_NAN, _NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    d = float(av.mean() - bv.mean())
    if clusters is not None:
        inverse, K = _cluster_inverse(clusters, n)
        ma, mb = _cluster_index_means([av, bv], inverse, K, B, seed)
        how = f"cluster bootstrap ({K} clusters, index, B={B}, seed={seed})"
    else:
        ma, mb = _index_means([av, bv], B, seed)
        how = f"bootstrap (index, B={B}, seed={seed})"
    return _paired_result(ma - mb, d, n, B, alpha, how)


def collapsed_change_interval(diff: float, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The interval of a paired change (in [-1, 1]) whose bootstrap has zero width: every unit changed by the same
    amount, usually none changed. ``diff`` +- the upper bound of :func:`~medvlm_audit.stats.rates.rate_interval`
    for 0 events in ``n`` units (no unit seen to differ), clipped to [-1, 1]: never a zero-width interval.

    >>> lo, hi = collapsed_change_interval(0.0, 16)
    >>> round(lo, 4), round(hi, 4)
    (-0.1936, 0.1936)
    >>> collapsed_change_interval(-1.0, 12)[0]
    -1.0
    """
    from medvlm_audit.stats.rates import rate_interval

    u = rate_interval(0, int(n), alpha=alpha)[1]
    return max(-1.0, diff - u), min(1.0, diff + u)


def mcnemar_exact(a: Any, b: Any) -> float:
    """Exact two-sided McNemar p on the discordant pairs: min(1, 2 * BinomCDF(min(n10, n01); n10 + n01, 1/2)).

    Same definition as ``statsmodels.stats.contingency_tables.mcnemar(exact=True)``; 1.0 with no discordant pair.
    """
    ab = _as_binary(a, "a")
    bb = _as_binary(b, "b")
    _check_same_length(ab, bb, "a", "b")
    n10 = int(np.count_nonzero((ab == 1) & (bb == 0)))
    n01 = int(np.count_nonzero((ab == 0) & (bb == 1)))
    m = n10 + n01
    if m == 0:
        return 1.0
    return float(min(1.0, 2.0 * binom_cdf(min(n10, n01), m, 0.5)))


def shift_reflect_p(draws: Any, d: float, B: int | None = None) -> float:
    """Two-sided shift-and-reflect p of an observed difference ``d`` from its bootstrap draws.

    Share of draws with |d* - d| >= |d| (nan draws left out), floored at 1/B (B = number of draws by default);
    1 when d == 0; nan when d is nan or no draw is a number.
    """
    x = np.asarray(draws, dtype=np.float64).reshape(-1)
    x = x[~np.isnan(x)]
    if math.isnan(d) or not x.size:
        return _NAN
    return _shift_reflect_p(x, float(d), _check_B(B if B is not None else int(x.size)))


def paired_from_draws(draws_a: Any, draws_b: Any, d: float, n: int, B: int | None = None,
                      alpha: float = 0.05, how: str = "cluster bootstrap") -> PairedDiff:
    """mean(a) - mean(b) = ``d`` on ``n`` shared clusters, summarised from paired bootstrap draws of both means.

    SD (ddof=1), percentile interval and shift-and-reflect p of draws_a - draws_b (nan draws left out).
    """
    alpha = _check_alpha(alpha)
    if n == 0 or math.isnan(d):
        return PairedDiff(_NAN, _NAN, _NAN, _NAN, _NAN, int(n), NOT_ESTIMABLE_N0 if n == 0 else "not estimable")
    diff = np.asarray(draws_a, dtype=np.float64) - np.asarray(draws_b, dtype=np.float64)
    lo, hi = percentile_interval(diff, alpha)
    p = shift_reflect_p(diff, d, B)
    method = (f"paired percentile {how} {_pct(alpha)} interval; sd = bootstrap SD (ddof=1); "
              "two-sided shift-and-reflect p floored at 1/B")
    return PairedDiff(float(d), bootstrap_draws_sd(diff), lo, hi, p, int(n), method)


def cluster_paired_difference(num_a: Any, den_a: Any, num_b: Any, den_b: Any, B: int = 10_000, seed: int = 0,
                              alpha: float = 0.05) -> PairedDiff:
    """ratio_a - ratio_b (ratio = sum(num) / sum(den)) on the same clusters, clusters resampled together.

    For 0/1 trials grouped in clusters (an item's repeats), num = correct and den = trials per cluster: the
    clustered paired bootstrap of ``paired_difference(..., clusters=...)``, from :func:`cluster_bootstrap_ratios`.
    """
    B = _check_B(B)
    na, da, nb, db = (_as_real(v, nm) for v, nm in ((num_a, "num_a"), (den_a, "den_a"), (num_b, "num_b"),
                                                      (den_b, "den_b")))
    for v, nm in ((da, "den_a"), (nb, "num_b"), (db, "den_b")):
        _check_same_length(na, v, "num_a", nm)
    n = int(np.count_nonzero((da > 0) | (db > 0)))
    if da.sum() <= 0 or db.sum() <= 0:
        return PairedDiff(_NAN, _NAN, _NAN, _NAN, _NAN, n, NOT_ESTIMABLE_N0)
    d = float(na.sum() / da.sum() - nb.sum() / db.sum())
    draws = cluster_bootstrap_ratios(np.stack([na, nb], axis=1), np.stack([da, db], axis=1), B, seed)
    return paired_from_draws(draws[:, 0], draws[:, 1], d, n, B, alpha,
                             f"cluster bootstrap ({na.shape[0]} clusters, B={B}, seed={seed})")

