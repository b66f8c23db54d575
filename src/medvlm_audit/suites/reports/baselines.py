"""Bias baselines (paper 002): WEAT effect size and the male-to-female token ratio (Delta DIR)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from medvlm_audit.stats.types import _NAN

__all__ = ['male_female_token_ratio', 'weat']


def weat(X: Any, Y: Any, A: Any, B: Any) -> tuple[float, float]:
    """WEAT test statistic S and effect size (Caliskan et al. 2017) from embedding rows (cosine similarity).

    s(w, A, B) = mean_a cos(w, a) - mean_b cos(w, b); S = sum_x s(x) - sum_y s(y);
    effect size = (mean_x s(x) - mean_y s(y)) / std_{w in X u Y} s(w) (ddof 1). nan when undefined.

    >>> S, es = weat([[1, 0]], [[0, 1]], [[1, 0]], [[0, 1]])   # s(x) = 1, s(y) = -1
    >>> S, round(es, 6)
    (2.0, 1.414214)
    """
    def unit(M: Any) -> np.ndarray:
        M = np.atleast_2d(np.asarray(M, dtype=np.float64))
        nrm = np.linalg.norm(M, axis=1, keepdims=True)
        return M / np.where(nrm > 0, nrm, 1.0)

    Xu, Yu, Au, Bu = unit(X), unit(Y), unit(A), unit(B)
    if min(Xu.shape[0], Yu.shape[0], Au.shape[0], Bu.shape[0]) == 0:
        return _NAN, _NAN
    sx = (Xu @ Au.T).mean(1) - (Xu @ Bu.T).mean(1)
    sy = (Yu @ Au.T).mean(1) - (Yu @ Bu.T).mean(1)
    S = float(sx.sum() - sy.sum())
    allv = np.concatenate([sx, sy])
    sd = float(np.std(allv, ddof=1)) if allv.shape[0] > 1 else _NAN
    es = (float(sx.mean() - sy.mean()) / sd) if sd and not math.isnan(sd) else _NAN
    return S, es


def male_female_token_ratio(lengths: Any, female: Any) -> float:
    """Disparity ratio of a corpus: mean tokens per male report / mean tokens per female report (nan if a group
    is empty or female reports are empty). ΔDIR = ratio(predictions) - ratio(reference).

    >>> male_female_token_ratio([10, 20, 30, 10], [True, True, False, False])   # (40/2) / (30/2)
    1.3333333333333333
    """
    L = np.asarray(lengths, dtype=np.float64)
    f = np.asarray(female, dtype=bool)
    if not f.any() or f.all():
        return _NAN
    mf = L[f].mean()
    return float(L[~f].mean() / mf) if mf > 0 else _NAN

