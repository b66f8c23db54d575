"""Multiplicity: Benjamini-Hochberg adjusted p-values."""

from __future__ import annotations

from typing import Any

import numpy as np

from medvlm_audit.stats.validation import _as_1d

__all__ = ['benjamini_hochberg']


def benjamini_hochberg(pvals: Any) -> np.ndarray:
    """Benjamini-Hochberg adjusted p (q-values): q_(k) = min_{r >= k} min(m p_(r) / r, 1).

    nan p-values stay nan and are not counted in m.
    """
    p = _as_1d(pvals, "pvals").astype(np.float64)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if not ok.any():
        return out
    pv = p[ok]
    if ((pv < 0) | (pv > 1)).any():
        i = int(np.flatnonzero(ok)[np.flatnonzero((pv < 0) | (pv > 1))[0]])
        raise ValueError(f"pvals[{i}] = {p[i]!r}: p-values must lie in [0, 1]")
    m = pv.shape[0]
    order = np.argsort(pv, kind="stable")
    adj = pv[order] * m / np.arange(1, m + 1)
    adj = np.minimum.accumulate(adj[::-1])[::-1]
    adj = np.minimum(adj, 1.0)
    res = np.empty(m)
    res[order] = adj
    out[ok] = res
    return out

