"""Calibration: Brier score and expected calibration error."""

from __future__ import annotations

from typing import Any

import numpy as np

from medvlm_audit.stats.types import _NAN
from medvlm_audit.stats.validation import _as_binary, _as_real, _check_same_length

__all__ = ['brier', 'ece', 'ece_terms']


def brier(prob: Any, outcome: Any) -> float:
    """Brier score mean((prob - outcome)^2); nan when n == 0.

    Paper: prob = confidence in the correct class, outcome = 1 (equivalently P(yes) vs the 0/1 label).
    """
    pv = _as_real(prob, "prob")
    o = _as_binary(outcome, "outcome")
    _check_same_length(pv, o, "prob", "outcome")
    if pv.shape[0] == 0:
        return _NAN
    if ((pv < 0) | (pv > 1)).any():
        i = int(np.flatnonzero((pv < 0) | (pv > 1))[0])
        raise ValueError(f"prob[{i}] = {pv[i]!r}: probabilities must lie in [0, 1]")
    return float(np.mean((pv - o) ** 2))


def _ece_bin(cf: np.ndarray, n_bins: int) -> np.ndarray:
    """ECE bin of each confidence: [e_i, e_{i+1}) with ``np.linspace`` edges, 1.0 in the last bin."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    return np.searchsorted(edges[1:-1], cf, side="right")


def ece_terms(confidence: Any, correct: Any, n_bins: int = 10) -> np.ndarray:
    """Per-case ECE terms, shape (n, n_bins): column b holds correct - confidence for the cases in bin b, else 0,
    so ECE = sum_b |mean of column b|. Resampling the rows (e.g. :func:`case_bootstrap_ratios`) resamples ECE."""
    cf = _as_real(confidence, "confidence")
    cr = _as_binary(correct, "correct")
    _check_same_length(cf, cr, "confidence", "correct")
    if ((cf < 0) | (cf > 1)).any():
        i = int(np.flatnonzero((cf < 0) | (cf > 1))[0])
        raise ValueError(f"confidence[{i}] = {cf[i]!r}: confidences must lie in [0, 1]")
    if int(n_bins) < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins!r}")
    out = np.zeros((cf.shape[0], int(n_bins)))
    out[np.arange(cf.shape[0]), _ece_bin(cf, int(n_bins))] = cr - cf
    return out


def ece(confidence: Any, correct: Any, n_bins: int = 10) -> float | None:
    """Expected calibration error: sum_b |B_b|/N |acc(B_b) - conf(B_b)| over ``n_bins`` equal-width bins of the
    confidence in the GIVEN answer (bins [e_i, e_{i+1}) with ``np.linspace`` edges, the last one closed, as in the
    released code). None (N/A) when n == 0 or more than 90% of confidences are exactly 0 or 1 (degenerate)."""
    cf = _as_real(confidence, "confidence")
    cr = _as_binary(correct, "correct")
    _check_same_length(cf, cr, "confidence", "correct")
    n = int(cf.shape[0])
    if n == 0:
        return None
    if ((cf < 0) | (cf > 1)).any():
        i = int(np.flatnonzero((cf < 0) | (cf > 1))[0])
        raise ValueError(f"confidence[{i}] = {cf[i]!r}: confidences must lie in [0, 1]")
    if int(n_bins) < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins!r}")
    if np.count_nonzero((cf == 0.0) | (cf == 1.0)) > 0.9 * n:
        return None
    b = _ece_bin(cf, int(n_bins))
    cnt = np.bincount(b, minlength=n_bins).astype(np.float64)
    sconf = np.bincount(b, weights=cf, minlength=n_bins)
    sacc = np.bincount(b, weights=cr.astype(np.float64), minlength=n_bins)
    nz = cnt > 0
    return float(np.sum(np.abs(sacc[nz] - sconf[nz])) / n)

