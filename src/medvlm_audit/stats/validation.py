"""Argument checks and small helpers shared by the statistics modules (arrays, B, alpha, clusters, percentiles)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from medvlm_audit.stats.types import _NAN


def _as_1d(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim == 0:
        raise ValueError(f"{name}: expected a 1-D array, got a scalar")
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    return arr


def _as_binary(x: Any, name: str) -> np.ndarray:
    """Validate a 0/1 (or bool) vector and return it as int8."""
    arr = _as_1d(x, name)
    if arr.dtype == bool:
        return arr.astype(np.int8)
    if arr.size == 0:
        return arr.astype(np.int8)
    if not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name}: expected 0/1 values, got dtype {arr.dtype}")
    bad = ~((arr == 0) | (arr == 1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}[{i}] = {arr[i]!r}: expected 0/1 outcomes (nan/other values are not allowed)")
    return arr.astype(np.int8)


def _as_real(x: Any, name: str) -> np.ndarray:
    """Validate a finite real vector and return it as float64."""
    arr = _as_1d(x, name)
    if arr.size and not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise ValueError(f"{name}: expected numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}[{i}] = {arr[i]!r}: expected a finite number")
    return arr


def _check_same_length(a: np.ndarray, b: np.ndarray, na: str, nb: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"{na} and {nb} must have the same length (paired on the same cases): "
                         f"{a.shape[0]} != {b.shape[0]}")


def _check_B(B: int, name: str = "B") -> int:
    if isinstance(B, bool) or not isinstance(B, (int, np.integer)) or B < 1:
        raise ValueError(f"{name} must be a positive integer, got {B!r}")
    return int(B)


def _check_alpha(alpha: float) -> float:
    if not (0.0 < float(alpha) < 1.0):
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    return float(alpha)


def _check_mode(mode: str) -> str:
    if mode not in ("exact-counts", "index"):
        raise ValueError(f"mode must be 'exact-counts' or 'index', got {mode!r}")
    return mode


def _cluster_inverse(clusters: Any, n: int) -> tuple[np.ndarray, int]:
    """Map cluster ids to 0..K-1 in ``np.unique`` (sorted) order, as the released code does."""
    c = _as_1d(clusters, "clusters")
    if c.shape[0] != n:
        raise ValueError(f"clusters must have one id per case: {c.shape[0]} ids for {n} cases")
    if c.dtype == object:
        for i, v in enumerate(c):
            if v is None or (isinstance(v, float) and math.isnan(v)):
                raise ValueError(f"clusters[{i}] is missing ({v!r}); every case needs a cluster (patient) id")
    elif np.issubdtype(c.dtype, np.floating):
        bad = np.isnan(c)
        if bad.any():
            raise ValueError(f"clusters[{int(np.flatnonzero(bad)[0])}] is nan; every case needs a cluster id")
    try:
        uniq, inverse = np.unique(c, return_inverse=True)
    except TypeError as exc:  # mixed, unorderable ids
        raise ValueError(f"clusters: ids must be mutually comparable (e.g. all str): {exc}") from None
    return inverse.reshape(-1), int(uniq.shape[0])


def _percentiles(boot: np.ndarray, alpha: float) -> tuple[float, float]:
    """Percentile interval with numpy's default (linear) interpolation, as in the released code."""
    q_lo = 100.0 * alpha / 2.0
    q_hi = 100.0 - q_lo
    lo, hi = np.percentile(boot, [q_lo, q_hi])
    return float(lo), float(hi)


def _sd(boot: np.ndarray) -> float:
    """Bootstrap SD with ddof=1 (released code); nan for fewer than two draws."""
    if boot.shape[0] < 2:
        return _NAN
    return float(np.std(boot, ddof=1))


def _pct(alpha: float) -> str:
    return f"{100 * (1 - alpha):g}%"

