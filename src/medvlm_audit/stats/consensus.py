"""Rater consensus: per-rater z-scores, weighted Kendall tau-b against a consensus with its bootstrap, leave-one-out ceilings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from medvlm_audit.stats.agreement import kendall_tau_b
from medvlm_audit.stats.types import _NAN
from medvlm_audit.stats.validation import _as_real, _check_B, _check_same_length, _percentiles, _sd

__all__ = ['TauEstimate', 'kendall_tau_b_bootstrap', 'kendall_tau_b_rows', 'leave_one_out_ceiling', 'weighted_kendall_tau_b', 'z_consensus']


def z_consensus(ratings: Any, mask: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-item consensus of standardised ratings (paper 001, "Human consensus").

    ``ratings`` is an (n_items, n_raters) array with nan where a rater did not rate the item. Within the items
    kept by ``mask`` (boolean, shape (n_items,) or (S, n_items) for S subsets at once), each rater's ratings
    are z-scored (mean, SD with ddof = 1 over that rater's kept items); a rater with fewer than two kept
    ratings or zero spread is dropped. The consensus of an item is the mean z of the kept raters who rated
    it (nan when none did, or when the item is not kept).

    Returns ``(consensus, used)``: consensus with the shape of ``mask`` (or (n_items,)), and a boolean array
    (..., n_raters) saying which raters entered.

    Example (hand-computed): rater A rates 1, 2, 3 (mean 2, SD 1: z = -1, 0, 1); rater B rates 2, 2, 4 on the
    same items (mean 8/3, SD 1.1547: z = -0.577, -0.577, 1.155); rater C rates 3, 3 on items 0-1 (zero
    spread: dropped). Consensus = (-0.789, -0.289, 1.077).

    >>> c, used = z_consensus([[1, 2, 3], [2, 2, 3], [3, 4, np.nan]])
    >>> np.round(c, 3).tolist(), used.tolist()
    ([-0.789, -0.289, 1.077], [True, True, False])
    """
    R = np.asarray(ratings, dtype=np.float64)
    if R.ndim != 2:
        raise ValueError(f"ratings must be 2-D (items x raters), got shape {R.shape}")
    n, _ = R.shape
    single = mask is None or np.asarray(mask).ndim == 1
    M = np.ones((1, n), dtype=bool) if mask is None else np.atleast_2d(np.asarray(mask, dtype=bool))
    if M.shape[1] != n:
        raise ValueError(f"mask has {M.shape[1]} items, ratings have {n}")
    has = ~np.isnan(R)
    R0 = np.where(has, R, 0.0)
    Mf = M.astype(np.float64)
    cnt = Mf @ has.astype(np.float64)                      # (S, R)
    s1 = Mf @ R0
    s2 = Mf @ (R0 * R0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = s1 / cnt
        var = (s2 - cnt * mean * mean) / (cnt - 1.0)
    scale = np.maximum(np.abs(mean), 1.0)
    used = (cnt >= 2) & (var > 1e-12 * scale * scale)
    sd = np.sqrt(np.where(used, var, 1.0))
    Z = (R0[None, :, :] - mean[:, None, :]) / sd[:, None, :]   # (S, n, R)
    keep = has[None, :, :] & used[:, None, :] & M[:, :, None]
    num = np.where(keep, Z, 0.0).sum(axis=2)
    k = keep.sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        cons = np.where(k > 0, num / np.maximum(k, 1), np.nan)
    if single:
        return cons[0], used[0]
    return cons, used


def _tie_pairs(values: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Sum over groups of equal values of c(c - 1)/2, c the summed weights in the group; one per row of W."""
    _, inv = np.unique(values, return_inverse=True)
    inv = inv.reshape(-1)
    g = int(inv.max()) + 1
    if g == values.shape[0]:
        return 0.5 * ((W * W) - W).sum(axis=1)  # no tied values: only copies of one item tie
    C = np.zeros((W.shape[0], g))
    for k in range(g):
        C[:, k] = W[:, inv == k].sum(axis=1)
    return 0.5 * (C * C - C).sum(axis=1)


def weighted_kendall_tau_b(x: Any, y: Any, weights: Any) -> np.ndarray:
    """Kendall's tau-b of the sample that holds item i ``weights[r, i]`` times, for every row r at once.

    Integer weights are multiplicities (a bootstrap resample: copies of one item tie with each other in
    both variables), 0/1 weights select a subset. tau_b = S / sqrt((n0 - n1)(n0 - n2)) with
    S = sum over pairs of sign(dx) sign(dy), n0 = N(N - 1)/2, n1 and n2 the pairs tied in x and in y; nan
    where a variable is constant. ``y`` may be (n,) or (R, n) (a different y per row, e.g. a consensus
    recomputed on each split).

    Example (hand-computed): x = (1, 2, 3, 4), y = (1, 3, 2, 4), weights (2, 1, 1, 0) is the sample
    x = (1, 1, 2, 3), y = (1, 1, 3, 2): 4 concordant pairs, 1 discordant, 1 tied in both, n0 = 6, n1 = n2 = 1,
    tau_b = 3 / 5 = 0.6 (as ``scipy.stats.kendalltau`` on the expanded sample).

    >>> weighted_kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4], [[1, 1, 1, 1], [2, 1, 1, 0]]).round(4).tolist()
    [0.6667, 0.6]
    """
    xv = _as_real(x, "x")
    W = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    n = xv.shape[0]
    Y = np.asarray(y, dtype=np.float64)
    if W.shape[1] != n or Y.shape[-1] != n:
        raise ValueError(f"x has {n} items, y {Y.shape[-1]}, weights {W.shape[1]}")
    SX = np.sign(xv[:, None] - xv[None, :])
    N = W.sum(axis=1)
    n0 = 0.5 * N * (N - 1.0)
    n1 = _tie_pairs(xv, W)
    if Y.ndim == 1:
        if np.isnan(Y).any():
            raise ValueError("y holds nan")
        M = (SX * np.sign(Y[:, None] - Y[None, :])).astype(np.float32)
        W32 = W.astype(np.float32)
        S = 0.5 * ((W32 @ M) * W32).sum(axis=1, dtype=np.float64)
        n2 = _tie_pairs(Y, W)
    else:
        return kendall_tau_b_rows(xv[None, :], Y, W[None, :, :])[0]
    den = (n0 - n1) * (n0 - n2)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = np.where(den > 0, S / np.sqrt(np.where(den > 0, den, 1.0)), np.nan)
    return tau


@dataclass(frozen=True)
class TauEstimate:
    """Kendall's tau-b with its scipy p and a percentile bootstrap interval over items."""

    point: float
    ci_low: float
    ci_high: float
    n: int
    p: float
    boot_sd: float
    method: str
    note: str = ""


def kendall_tau_b_rows(xs: Any, Y: Any, weights: Any, chunk_bytes: int = 64 * 2**20) -> np.ndarray:
    """Weighted tau_b (as :func:`weighted_kendall_tau_b`) for C score vectors against R rows of y at once.

    ``xs`` (C, n): e.g. one judge x policy per row; ``Y`` (R, n): e.g. a consensus recomputed on each of R
    splits (nan allowed where the weight is 0); ``weights`` (C, R, n). Returns (C, R). The sign and tie
    matrices of each row of Y are built once and shared by the C score vectors (chunked over R to bound
    memory by ``chunk_bytes``).

    >>> kendall_tau_b_rows([[1, 2, 3, 4]], [[1, 3, 2, 4], [4, 3, 2, 1]], [[[1, 1, 1, 1], [1, 1, 1, 0]]]).round(4).tolist()
    [[0.6667, -1.0]]
    """
    X = np.atleast_2d(np.asarray(xs, dtype=np.float64))
    Yv = np.atleast_2d(np.asarray(Y, dtype=np.float64))
    W = np.asarray(weights, dtype=np.float64)
    C, n = X.shape
    R = Yv.shape[0]
    if W.shape != (C, R, n) or Yv.shape[1] != n:
        raise ValueError(f"shapes: xs {X.shape}, Y {Yv.shape}, weights {W.shape} (expected (C, R, n))")
    if np.isnan(X).any():
        raise ValueError("xs holds nan")
    Yf = np.where(np.isnan(Yv), 0.0, Yv)
    SX = np.sign(X[:, :, None] - X[:, None, :]).astype(np.float32)   # (C, n, n)
    N = W.sum(axis=2)
    n0 = 0.5 * N * (N - 1.0)
    n1 = np.stack([_tie_pairs(X[c], W[c]) for c in range(C)])
    S = np.empty((C, R))
    n2 = np.empty((C, R))
    levels = np.unique(X)
    step = max(1, chunk_bytes // max(1, 8 * n * n))
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        _tau_rows_fill(X, SX, Yf, W, levels, S, n2, step)
    den = (n0 - n1) * (n0 - n2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, S / np.sqrt(np.where(den > 0, den, 1.0)), np.nan)


def _tau_rows_fill(X: np.ndarray, SX: np.ndarray, Yf: np.ndarray, W: np.ndarray, levels: np.ndarray,
                   S: np.ndarray, n2: np.ndarray, step: int) -> None:
    """Fill S (pairs' sign products) and n2 (pairs tied in y) of :func:`kendall_tau_b_rows`, chunked over R."""
    C, n = X.shape
    R = Yf.shape[0]
    L = levels.shape[0]
    for a in range(0, R, step):
        b = min(R, a + step)
        D = Yf[a:b, :, None] - Yf[a:b, None, :]
        SY = np.sign(D).astype(np.float32)
        TY = (D == 0).astype(np.float32)
        del D
        Wt = np.ascontiguousarray(np.transpose(W[:, a:b, :], (1, 2, 0))).astype(np.float32)   # (r, n, C)
        n2[:, a:b] = 0.5 * (np.einsum("ric,ric->cr", np.matmul(TY, Wt), Wt) - Wt.sum(axis=1).T)
        if L <= 32:
            # x on few levels: S = sum over level pairs a > b of u_a' SY u_b, u_a = w on the items at level a
            ind = (X[:, :, None] == levels[None, None, :]).astype(np.float32)              # (C, n, L)
            U = (Wt[:, :, :, None] * np.transpose(ind, (1, 0, 2))[None]).reshape(b - a, n, C * L)
            V = np.matmul(SY, U).reshape(b - a, n, C, L)
            P = np.einsum("rica,ricb->rcab", U.reshape(b - a, n, C, L), V)
            S[:, a:b] = (P * np.tril(np.ones((L, L), dtype=np.float32), -1)[None, None]).sum(axis=(2, 3)).T
        else:
            for c in range(C):
                Wc = Wt[:, :, c]
                S[c, a:b] = 0.5 * np.einsum("ri,ri->r", np.matmul(SY * SX[c][None], Wc[:, :, None])[:, :, 0], Wc)


def kendall_tau_b_bootstrap(x: Any, y: Any, B: int = 10_000, seed: int = 0,
                            alpha: float = 0.05) -> TauEstimate:
    """Kendall's tau-b (scipy, variant b) with a percentile bootstrap interval over items.

    The items are resampled with replacement (``default_rng(seed).integers(0, n, (B, n))`` index draws,
    counted into per-item multiplicities), tau_b of each resample by :func:`weighted_kendall_tau_b`;
    resamples where a variable is constant are left out of the interval (said in ``note``); ``p`` is
    scipy's two-sided p of the point estimate.

    >>> e = kendall_tau_b_bootstrap([1, 2, 3, 4, 5, 6], [1, 3, 2, 4, 6, 5], B=2000)
    >>> round(e.point, 4), bool(e.ci_low < e.point <= e.ci_high)
    (0.7333, True)
    """
    xv = _as_real(x, "x")
    yv = _as_real(y, "y")
    _check_same_length(xv, yv, "x", "y")
    B = _check_B(B)
    n = xv.shape[0]
    point, p = kendall_tau_b(xv, yv)
    if not np.isfinite(point):
        return TauEstimate(_NAN, _NAN, _NAN, n, _NAN, _NAN, "Kendall tau-b",
                           note=f"not estimable (n = {n} or a constant variable)")
    rng = np.random.default_rng(seed)
    draws = np.empty(B)
    step = max(1, 2_000_000 // max(1, n))
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):  # small products: BLAS threading only slows them down
        for a in range(0, B, step):
            b = min(B, a + step)
            idx = rng.integers(0, n, size=(b - a, n)) + (np.arange(b - a) * n)[:, None]
            W = np.bincount(idx.ravel(), minlength=(b - a) * n).reshape(b - a, n)
            draws[a:b] = weighted_kendall_tau_b(xv, yv, W)
    ok = draws[np.isfinite(draws)]
    lo, hi = _percentiles(ok, alpha) if ok.size else (_NAN, _NAN)
    note = "" if ok.size == B else f"{B - ok.size} constant resamples left out"
    return TauEstimate(float(point), lo, hi, n, float(p), _sd(ok) if ok.size > 1 else _NAN,
                       f"Kendall tau-b (scipy), percentile bootstrap over items (B = {B}, seed {seed})", note=note)


def leave_one_out_ceiling(ratings: Any, mask: Any = None, B: int = 10_000, seed: int = 0,
                          alpha: float = 0.05) -> list[TauEstimate]:
    """Human ceiling: each rater's tau_b against the z-consensus of the other raters, on that rater's items.

    For rater r: the items r rated (within ``mask``) that at least one other (kept) rater rated; the others'
    consensus is :func:`z_consensus` of the remaining columns over the same masked items. One
    :func:`kendall_tau_b_bootstrap` estimate per rater (in column order; nan when not estimable).

    Example (hand-computed): raters A = (1, 2, 3), B = (1, 3, 2), C = (2, 3, 4) on three items. Without A,
    the consensus of B and C is (-1, 0.5, 0.5): A against it has 2 concordant pairs and one pair tied in y,
    tau_b = 2 / sqrt(3 * 2) = 0.8165.

    >>> [round(e.point, 4) for e in leave_one_out_ceiling([[1, 1, 2], [2, 3, 3], [3, 2, 4]], B=200)][:1]
    [0.8165]
    """
    R = np.asarray(ratings, dtype=np.float64)
    if R.ndim != 2:
        raise ValueError(f"ratings must be 2-D (items x raters), got shape {R.shape}")
    n, k = R.shape
    M = np.ones(n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    out: list[TauEstimate] = []
    for r in range(k):
        others = [c for c in range(k) if c != r]
        cons, _ = z_consensus(R[:, others], M)
        sel = M & ~np.isnan(R[:, r]) & ~np.isnan(cons)
        out.append(kendall_tau_b_bootstrap(R[sel, r], cons[sel], B=B, seed=seed, alpha=alpha))
    return out

