"""Rates: one proportion with its interval, the Wilson interval, binomial and chance tests."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special as _special

from medvlm_audit.stats.distributions import binom_ppf
from medvlm_audit.stats.kernels import _cluster_index_means, _cluster_type_counts, _index_binary_means
from medvlm_audit.stats.types import _NAN, NOT_ESTIMABLE_N0, Estimate, Mode
from medvlm_audit.stats.validation import (
    _as_binary,
    _as_real,
    _check_alpha,
    _check_B,
    _check_mode,
    _cluster_inverse,
    _pct,
    _percentiles,
    _sd,
)

__all__ = ['RATE_WILSON_EVENTS', 'binomial_test', 'bounded_mean_interval_at_edge', 'chance_test', 'poisson_binomial_sf',
           'proportion', 'rate_interval', 'rate_interval_method', 'rate_intervals_limit', 'wilson_interval']

#: ``rate_interval`` uses Wilson's score interval when fewer than this many events or non-events were seen
RATE_WILSON_EVENTS = 10


def wilson_interval(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials; (nan, nan) when n == 0.

    The paper uses it for per-finding cells with fewer than 30 cases, where the percentile bootstrap undercovers.
    """
    alpha = _check_alpha(alpha)
    k, n = int(k), int(n)
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"wilson_interval: need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return _NAN, _NAN
    z = float(_special.ndtri(1.0 - alpha / 2.0))
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2.0 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, center - half)  # exactly 0 / 1 at the edges (float rounding aside)
    hi = 1.0 if k == n else min(1.0, center + half)
    return lo, hi


def rate_interval(k: int, n: int, *, B: int = 10_000, seed: int = 0, alpha: float = 0.05) -> tuple[float, float]:
    """The 95% interval printed for one rate of k events in n cases, in every suite (fractions; (nan, nan) at n = 0).

    Wilson's score interval wherever min(k, n - k) < 10 (``RATE_WILSON_EVENTS``), the exact-counts percentile
    bootstrap (k* ~ Binomial(n, k/n), ``default_rng(seed)``, B draws, linear percentiles) elsewhere. Chosen for
    coverage (DESIGN.md, statistics conventions): the percentile bootstrap alone is degenerate with few events
    (0/33 prints [0, 0]; 45% coverage at p = 0.02, n = 30); with ten or more events on each side it is the paper's
    interval and covers. Exact coverage (summed over the
    binomial) on n in {10 ... 1000} x p in {0.01 ... 0.99} is >= 0.904 in every cell and 0.955 on average
    (``tests/test_rate_interval.py``, ``benchmarks/bench_coverage.py``, BENCHMARKS.md). No interval has zero
    width for n >= 1. Where min(k, n - k) >= 10 the result equals ``proportion(x)``'s exact-counts interval.

    >>> rate_interval(0, 33)[0], round(rate_interval(0, 33)[1], 4)
    (0.0, 0.1043)
    """
    alpha = _check_alpha(alpha)
    B = _check_B(B)
    if isinstance(k, bool) or isinstance(n, bool):
        raise TypeError(f"rate_interval: k and n must be integers, got k={k!r}, n={n!r}")
    k, n = int(k), int(n)
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"rate_interval: need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return _NAN, _NAN
    if min(k, n - k) < RATE_WILSON_EVENTS:
        return wilson_interval(k, n, alpha)
    boot = np.random.default_rng(seed).binomial(n, k / n, size=B) / n
    return _percentiles(boot, alpha)


def bounded_mean_interval_at_edge(n: int, edge: float, alpha: float = 0.05) -> tuple[float, float]:
    """The interval of a mean of ``n`` independent values in [0, 1] that all equal ``edge`` (0 or 1), where the
    bootstrap gives a zero-width [0, 0] (every resample is the same): [0, 1 - (alpha/2)^(1/n)] at 0 and its
    mirror at 1. Exact for any such variable: a value in [0, 1] with mean mu is 0 with probability at most
    1 - mu, so n zeros have probability at most (1 - mu)^n (Clopper-Pearson's bound for 0 of n, the worst case
    being 0/1 values). A mean ROUGE of 0 on 12 reference reports: [0, 0.265].

    >>> [round(x, 4) for x in bounded_mean_interval_at_edge(12, 0.0)]
    [0.0, 0.2646]
    >>> [round(x, 4) for x in bounded_mean_interval_at_edge(12, 1.0)]
    [0.7354, 1.0]
    """
    alpha = _check_alpha(alpha)
    n = int(n)
    if n <= 0:
        return _NAN, _NAN
    if edge not in (0.0, 1.0):
        raise ValueError(f"bounded_mean_interval_at_edge: edge must be 0 or 1, got {edge!r}")
    b = 1.0 - (alpha / 2.0) ** (1.0 / n)
    return (0.0, b) if edge == 0.0 else (1.0 - b, 1.0)


def rate_intervals_limit(k: Any, n: Any, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised :func:`rate_interval` with the bootstrap's B -> infinity endpoints: Wilson where
    min(k, n - k) < 10, else the alpha/2 and 1 - alpha/2 quantiles of Binomial(n, k/n) / n (what the percentile
    bootstrap of B draws converges to; the two differ by at most about 1/n). For many (k, n) pairs at once, e.g.
    inside the draws of a bootstrap (a category's support); nan where n == 0."""
    alpha = _check_alpha(alpha)
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    lo = np.full(np.broadcast(k, n).shape, np.nan)
    hi = lo.copy()
    ok = n > 0
    kk, nn = np.broadcast_to(k, lo.shape)[ok], np.broadcast_to(n, lo.shape)[ok]
    z = float(_special.ndtri(1.0 - alpha / 2.0))
    p = kk / nn
    denom = 1.0 + z * z / nn
    center = (p + z * z / (2.0 * nn)) / denom
    half = z * np.sqrt(p * (1.0 - p) / nn + z * z / (4.0 * nn * nn)) / denom
    w_lo = np.where(kk == 0, 0.0, np.maximum(0.0, center - half))
    w_hi = np.where(kk == nn, 1.0, np.minimum(1.0, center + half))
    b_lo = binom_ppf(alpha / 2.0, nn, p) / nn
    b_hi = binom_ppf(1.0 - alpha / 2.0, nn, p) / nn
    wil = np.minimum(kk, nn - kk) < RATE_WILSON_EVENTS
    lo[ok] = np.where(wil, w_lo, b_lo)
    hi[ok] = np.where(wil, w_hi, b_hi)
    return lo, hi


def rate_interval_method(k: int, n: int, *, B: int = 10_000, seed: int = 0, alpha: float = 0.05) -> str:
    """The words for the interval ``rate_interval(k, n)`` returns (a row's ``method``)."""
    if int(n) == 0:
        return "not estimable (n = 0)"
    if min(int(k), int(n) - int(k)) < RATE_WILSON_EVENTS:
        return (f"Wilson {_pct(alpha)} score interval (min(k, n - k) = {min(int(k), int(n) - int(k))} < "
                f"{RATE_WILSON_EVENTS})")
    return f"percentile bootstrap {_pct(alpha)} interval (exact-counts, B={int(B)}, seed={int(seed)})"


def proportion(x: Any, B: int = 10_000, seed: int = 0, mode: Mode = "exact-counts", clusters: Any = None,
               alpha: float = 0.05, wilson_below: int = 0, interval: str = "bootstrap") -> Estimate:
    """Proportion of 1s: mean, analytic SE sqrt(p(1-p)/n), percentile bootstrap interval, n.

    ``mode="exact-counts"``: k* ~ Binomial(n, p_hat) (same distribution as index resampling, O(B)).
    ``mode="index"``: the released code's ``RandomState(seed).randint(0, n, (B, n))``, chunked; bit-identical draws
    (the released interval of the same vector in the same order).
    ``clusters``: patient ids; resample whole clusters (ratio of sums). The SE is then the cluster-robust
    (linearised ratio) SE sqrt(sum_c (s_c - p m_c)^2) / n, which equals sqrt(p(1-p)/n) when every cluster is one
    case. ``wilson_below``: if n < wilson_below, the interval is Wilson's instead (paper: 30 for per-finding cells).
    ``interval="rate"``: the interval of :func:`rate_interval` (Wilson where min(k, n - k) < 10, else this
    call's bootstrap; without clusters in exact-counts mode it equals ``rate_interval(k, n, B=B, seed=seed)``).
    With clusters and fewer than 10 events on one side Wilson's interval is used although it ignores the
    clustering (the cluster bootstrap is degenerate there), and ``method`` says so.
    """
    if interval not in ("bootstrap", "rate"):
        raise ValueError(f"interval must be 'bootstrap' or 'rate', got {interval!r}")
    B = _check_B(B)
    alpha = _check_alpha(alpha)
    _check_mode(mode)
    xb = _as_binary(x, "x")
    n = int(xb.shape[0])
    if n == 0:
        return Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    k = int(xb.sum(dtype=np.int64))
    p = k / n
    inverse = None
    if clusters is not None:
        inverse, K = _cluster_inverse(clusters, n)
        s_c = np.bincount(inverse, weights=xb, minlength=K)
        m_c = np.bincount(inverse, minlength=K)
        se = float(math.sqrt(float(np.sum((s_c - p * m_c) ** 2))) / n)
        se_txt = f"cluster-robust analytic SE ({K} clusters)"
    else:
        se = math.sqrt(p * (1.0 - p) / n)
        se_txt = "analytic SE sqrt(p(1-p)/n)"

    if inverse is not None:
        if mode == "index":
            (boot,) = _cluster_index_means([xb], inverse, K, B, seed)
        else:
            sums, tot = _cluster_type_counts([xb], inverse, K, B, seed)
            boot = sums[:, 0] / tot
        how = f"cluster bootstrap ({K} clusters, {mode}, B={B}, seed={seed})"
    elif mode == "index":
        (boot,) = _index_binary_means([xb], B, seed)
        how = f"bootstrap ({mode}, B={B}, seed={seed})"
    else:
        rng = np.random.default_rng(seed)
        boot = rng.binomial(n, p, size=B) / n
        how = f"bootstrap ({mode}, B={B}, seed={seed})"
    boot_sd = _sd(boot)
    if interval == "rate" and min(k, n - k) < RATE_WILSON_EVENTS:
        lo, hi = wilson_interval(k, n, alpha)
        method = (f"{rate_interval_method(k, n, alpha=alpha)}; {se_txt}; boot_sd from {how}"
                  + ("; Wilson ignores the clustering (the cluster bootstrap is degenerate with so few events)"
                     if inverse is not None else ""))
    elif n < wilson_below:
        lo, hi = wilson_interval(k, n, alpha)
        method = f"Wilson {_pct(alpha)} interval (n = {n} < {wilson_below}); {se_txt}; boot_sd from {how}"
    else:
        lo, hi = _percentiles(boot, alpha)
        method = f"percentile {how} {_pct(alpha)} interval; {se_txt}"
        if (k == 0 or k == n) and interval != "rate":
            method += f"; all outcomes are {int(k == n)}: bootstrap interval degenerate, consider Wilson"
    return Estimate(p, se, lo, hi, n, method, boot_sd)


def binomial_test(k: int, n: int, p0: float, alternative: str = "greater") -> float:
    """Exact binomial test p-value (``scipy.stats.binomtest``); nan when n == 0."""
    k, n = int(k), int(n)
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"binomial_test: need 0 <= k <= n, got k={k}, n={n}")
    if not (0.0 <= float(p0) <= 1.0):
        raise ValueError(f"binomial_test: p0 must lie in [0, 1], got {p0!r}")
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative must be 'greater', 'less' or 'two-sided', got {alternative!r}")
    if n == 0:
        return _NAN
    from scipy import stats as _sstats

    return float(_sstats.binomtest(k, n, float(p0), alternative=alternative).pvalue)


def poisson_binomial_sf(k: int, probs: Any) -> float:
    """P(X >= k) for X a sum of independent Bernoulli(probs[i]) (exact, dynamic programming over the count)."""
    pv = _as_real(probs, "probs")
    if ((pv < 0) | (pv > 1)).any():
        i = int(np.flatnonzero((pv < 0) | (pv > 1))[0])
        raise ValueError(f"probs[{i}] = {pv[i]!r}: probabilities must lie in [0, 1]")
    k = int(k)
    if k <= 0:
        return 1.0
    if k > pv.shape[0]:
        return 0.0
    dist = np.zeros(pv.shape[0] + 1)
    dist[0] = 1.0
    for i, p in enumerate(pv, 1):
        dist[1 : i + 1] = dist[1 : i + 1] * (1.0 - p) + dist[0:i] * p
        dist[0] *= 1.0 - p
    return float(min(1.0, dist[k:].sum()))


def chance_test(k: int, probs: Any) -> float:
    """Exact one-sided p that k or more of n items are right when item i is right with chance probs[i] (1/k_i).

    The binomial test when all chances are equal, the Poisson-binomial tail otherwise; nan when n == 0.
    """
    pv = _as_real(probs, "probs")
    n = int(pv.shape[0])
    if n == 0:
        return _NAN
    if np.all(pv == pv[0]):
        return binomial_test(k, n, float(pv[0]), alternative="greater")
    if not 0 <= int(k) <= n:
        raise ValueError(f"chance_test: need 0 <= k <= n, got k={k}, n={n}")
    return poisson_binomial_sf(k, pv)

