"""The few ``scipy.stats`` functions the analyses call, without importing ``scipy.stats`` (0.5 CPU-s per process).

``binom_cdf``, ``binom_ppf`` and ``hypergeom_pmf`` call the same ``scipy.special`` kernels that ``scipy.stats``
calls (``scipy.special._ufuncs._binom_cdf`` and friends, Boost's), after the same argument handling, so their
values are bit-identical to ``scipy.stats.binom.cdf`` / ``binom.ppf`` / ``hypergeom.pmf`` (tested on grids with
their edge cases); any input outside the plain case (a non-integer n, p outside [0, 1], q at 0 or 1, a NaN, a
scipy without those kernels) is handed to ``scipy.stats`` itself. ``rankdata`` is the average-rank algorithm of
``scipy.stats.rankdata`` (exact halves, so equal to it bit for bit on finite data; NaN goes to scipy).

>>> float(binom_cdf(3, 10, 0.5))
0.171875
>>> float(binom_ppf(0.975, 100, 0.5))
60.0
>>> rankdata([2.0, 1.0, 2.0]).tolist()
[2.5, 1.0, 2.5]
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["binom_cdf", "binom_ppf", "hypergeom_pmf", "rankdata"]


def _kernels() -> Any:
    try:
        import scipy.special._ufuncs as scu

        if all(hasattr(scu, f) for f in ("_binom_cdf", "_binom_ppf", "_hypergeom_pmf")):
            return scu
    except ImportError:  # pragma: no cover - a scipy without the private kernels
        pass
    return None


def _whole(x: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(x)) and np.all(np.floor(x) == x))


def _out(v: np.ndarray) -> Any:
    return v[()] if v.ndim == 0 else v


def binom_cdf(k: Any, n: Any, p: Any) -> Any:
    """``scipy.stats.binom.cdf(k, n, p)``."""
    kk, nn, pp = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (k, n, p)))
    scu = _kernels()
    if scu is None or not (_whole(nn) and np.all(nn >= 0) and np.all((pp >= 0) & (pp <= 1)) and np.all(np.isfinite(kk))):
        from scipy import stats

        return stats.binom.cdf(k, n, p)
    inside = (kk >= 0) & (kk < nn)
    out = np.where(kk >= nn, 1.0, 0.0)
    if inside.any():
        out[inside] = np.clip(scu._binom_cdf(np.floor(kk[inside]), nn[inside], pp[inside]), 0, 1)
    return _out(out)


def binom_ppf(q: Any, n: Any, p: Any) -> Any:
    """``scipy.stats.binom.ppf(q, n, p)``."""
    qq, nn, pp = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (q, n, p)))
    scu = _kernels()
    if scu is None or not (_whole(nn) and np.all(nn >= 0) and np.all((pp >= 0) & (pp <= 1))
                           and np.all((qq > 0) & (qq < 1))):
        from scipy import stats

        return stats.binom.ppf(q, n, p)
    return _out(np.asarray(scu._binom_ppf(qq, nn, pp) + 0, dtype=np.float64))


def hypergeom_pmf(k: Any, M: Any, n: Any, N: Any) -> Any:
    """``scipy.stats.hypergeom.pmf(k, M, n, N)`` (population M, n successes in it, N drawn)."""
    kk, MM, nn, NN = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (k, M, n, N)))
    scu = _kernels()
    if scu is None or not (_whole(MM) and _whole(nn) and _whole(NN) and np.all(MM > 0) and np.all(nn >= 0)
                           and np.all(NN >= 0) and np.all(nn <= MM) and np.all(NN <= MM)
                           and np.all(np.isfinite(kk))):
        from scipy import stats

        return stats.hypergeom.pmf(k, M, n, N)
    lo, hi = np.maximum(NN - (MM - nn), 0), np.minimum(nn, NN)
    inside = (kk >= lo) & (kk <= hi) & (np.floor(kk) == kk)
    out = np.zeros(kk.shape)
    if inside.any():
        out[inside] = np.clip(scu._hypergeom_pmf(kk[inside], nn[inside], NN[inside], MM[inside]), 0, 1)
    return _out(out)


def rankdata(a: Any) -> np.ndarray:
    """``scipy.stats.rankdata(a)`` (average ranks of ties) of a 1-d array, as float64."""
    arr = np.asarray(a)
    if arr.ndim != 1 or (arr.dtype.kind == "f" and np.isnan(arr).any()) or arr.dtype.kind not in "biuf":
        from scipy import stats

        return stats.rankdata(a)
    if arr.size == 0:
        return np.empty(0, dtype=np.float64)
    sorter = np.argsort(arr, kind="mergesort")
    inv = np.empty(sorter.size, dtype=np.intp)
    inv[sorter] = np.arange(sorter.size, dtype=np.intp)
    s = arr[sorter]
    obs = np.r_[True, s[1:] != s[:-1]]
    dense = obs.cumsum()[inv]
    count = np.r_[np.nonzero(obs)[0], len(obs)]
    return 0.5 * (count[dense] + count[dense - 1] + 1)
