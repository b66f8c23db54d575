"""Ranking: AUROC (Mann-Whitney and the released code's), its bootstrap intervals, the case bootstrap of several metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from medvlm_audit.stats.distributions import rankdata
from medvlm_audit.stats.kernels import (
    _CELLS_MAX,
    _as_cluster_matrix,
    _chunk_rows,
    _dedupe_columns,
    _draw_dtype,
    _index_chunks,
    _run_blocks,
)
from medvlm_audit.stats.types import _NAN, NOT_ESTIMABLE_N0, Estimate, Mode
from medvlm_audit.stats.validation import (
    _as_binary,
    _as_real,
    _check_alpha,
    _check_B,
    _check_same_length,
    _pct,
    _percentiles,
    _sd,
)

__all__ = ['auroc', 'auroc_interval', 'auroc_interval_released', 'auroc_released', 'case_bootstrap']


def _binary_labels(labels: Any, name: str = "labels") -> np.ndarray:
    return _as_binary(labels, name)


def auroc(scores: Any, labels: Any) -> float:
    """AUROC = Mann-Whitney U / (n_pos n_neg), ties counted 1/2 (= trapezoidal area under the empirical ROC);
    nan when a class is missing."""
    s = _as_real(scores, "scores")
    y = _binary_labels(labels)
    _check_same_length(s, y, "scores", "labels")
    n1 = int(y.sum(dtype=np.int64))
    n0 = int(y.shape[0]) - n1
    if n1 == 0 or n0 == 0:
        return _NAN
    r = rankdata(s)
    return float((r[y == 1].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def _auroc_cells_counts(C: np.ndarray, cell_level: np.ndarray, cell_y: np.ndarray, L: int, n: int) -> np.ndarray:
    """AUROCs of resamples given per-cell counts C (rows x cells; cells = distinct (score, class) in score order):
    U = sum_l pos_l (negatives below level l + neg_l / 2), the Mann-Whitney count with ties 1/2."""
    rows = C.shape[0]
    P = np.zeros((rows, L))
    N = np.zeros((rows, L))
    P[:, cell_level[cell_y == 1]] = C[:, cell_y == 1]
    N[:, cell_level[cell_y == 0]] = C[:, cell_y == 0]
    u = np.sum(P * (np.cumsum(N, axis=1) - 0.5 * N), axis=1)
    n1 = P.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return u / (n1 * (n - n1))


#: within-block width of the AUROC multiplicity kernel (prefix sums inside a block come from one small matmul)
_RANK_BLOCK = 16


@dataclass(frozen=True)
class _RankPlan:
    """One score column in (score, class) order, negatives first within a tied score, padded to whole blocks."""

    n: int
    order: np.ndarray  # intp case index at each padded position; padding points at the all-zero column n
    negm: np.ndarray  # 1 where the position holds a negative
    upper: np.ndarray  # (_RANK_BLOCK, _RANK_BLOCK) strictly upper-triangular ones: prefix sums within a block
    ones: np.ndarray
    tie_idx: np.ndarray | None  # reduceat bounds [first, first positive, end] of each tied score holding both classes


def _rank_plan(s: np.ndarray, y: np.ndarray, dtype: type[np.floating[Any]]) -> _RankPlan:
    """Order the cases by (score, class) and locate the tied scores that hold both classes."""
    n = int(s.shape[0])
    order = np.lexsort((y, s))
    ss, ys = s[order], y[order].astype(np.int64)
    npad = -(-(n + 1) // _RANK_BLOCK) * _RANK_BLOCK  # at least one zero position after the cases
    negm = np.zeros(npad, dtype)
    negm[:n] = 1 - ys
    level = np.concatenate([[0], np.cumsum(ss[1:] != ss[:-1])])
    neg_per_level = np.bincount(level, weights=1 - ys)
    mixed = np.flatnonzero((np.bincount(level, weights=ys) > 0) & (neg_per_level > 0))
    tie_idx = None
    if mixed.size:
        first = np.searchsorted(level, mixed, side="left")
        end = np.searchsorted(level, mixed, side="right")
        tie_idx = np.stack([first, first + neg_per_level[mixed].astype(np.int64), end], axis=1).reshape(-1)
        tie_idx = tie_idx.astype(np.intp)
    upper = np.triu(np.ones((_RANK_BLOCK, _RANK_BLOCK), dtype), k=1)
    return _RankPlan(n, np.concatenate([order, np.full(npad - n, n)]).astype(np.intp), negm, upper,
                     np.ones(_RANK_BLOCK, dtype), tie_idx)


def _auroc_from_multiplicities(W: np.ndarray, plan: _RankPlan, work: tuple[np.ndarray, ...]) -> np.ndarray:
    """AUROC of each resample from its per-case multiplicities ``W`` (rows x n + 1, last column 0).

    In (score, class) order U = sum_p P_p * (negatives before p): prefix sums within blocks of 16 positions by
    one matmul, block totals by a short cumulative sum. A negative tied in score then counted 1, so each tied
    (positive, negative) pair gives 1/2 back. Exact: every partial sum is an integer the float type holds.
    ``work``: three reusable (rows, padded n) buffers.
    """
    c = W.shape[0]
    G, N, A = (w[:c] for w in work)
    np.take(W, plan.order, axis=1, out=G)
    tied = None
    if plan.tie_idx is not None:
        seg = np.add.reduceat(G, plan.tie_idx, axis=1)
        tied = np.einsum("cm,cm->c", seg[:, 0::3], seg[:, 1::3]).astype(np.float64)
    np.multiply(G, plan.negm, out=N)
    np.subtract(G, N, out=G)  # G now holds the positives
    n2, p2 = N.reshape(-1, _RANK_BLOCK), G.reshape(-1, _RANK_BLOCK)
    np.matmul(n2, plan.upper, out=A.reshape(-1, _RANK_BLOCK))
    within = np.einsum("cx,cx->c", A, G).astype(np.float64)
    bn = (n2 @ plan.ones).reshape(c, -1)
    bp = (p2 @ plan.ones).reshape(c, -1)
    between = np.einsum("cb,cb->c", bp, np.cumsum(bn, axis=1) - bn).astype(np.float64)
    u = within + between
    if tied is not None:
        u -= 0.5 * tied
    n1 = bp.sum(axis=1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return u / (n1 * (plan.n - n1))


def _auroc_cells_boot(s: np.ndarray, y: np.ndarray, B: int, seed: int) -> np.ndarray | None:
    """Bootstrap AUROCs from multinomial counts of the distinct (score, class) cells when there are at most
    _CELLS_MAX of them (the same distribution as n uniform draws, at O(B x cells)); None otherwise."""
    n = int(s.shape[0])
    cells, freq = np.unique(np.stack([s, y.astype(np.float64)], axis=1), axis=0, return_counts=True)
    if cells.shape[0] > _CELLS_MAX:
        return None
    level = np.unique(cells[:, 0], return_inverse=True)[1].reshape(-1)
    cell_y = cells[:, 1].astype(np.int64)
    L = int(level.max()) + 1
    p = freq / n
    out = np.empty(B)

    def fill(lo: int, hi: int, rng: np.random.Generator) -> None:
        counts = rng.multinomial(n, p, size=hi - lo).astype(np.float64)
        out[lo:hi] = _auroc_cells_counts(counts, level, cell_y, L, n)

    _run_blocks(B, seed, fill, workers=1)
    return out


def case_bootstrap(n: int, B: int = 10_000, seed: int = 0, *, scores: Any = None, labels: Any = None,
                   num: Any = None, den: Any = None, workers: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One bootstrap of n cases serving several statistics: AUROC draws (B, m) of every column of ``scores`` (n, m)
    against ``labels`` (n,), and draws (B, k) of sum(num[:, j]) / sum(den[:, j]) (``den=None``: means).

    Resample r takes n uniform draws with replacement, the same cases for every statistic (so columns, e.g.
    models, are paired): block i of 500 resamples comes from ``default_rng(SeedSequence(seed).spawn(...)[i])``
    as ``integers(0, n, (rows, n), dtype=int16)`` chunks of ``rows = min(500, 2**17 // n)``, filled by up to
    ``workers`` threads with the same result for any number. Per-case multiplicities feed one matrix product
    for the ratios and the exact AUROC kernel for each score column; a column with at most 64 distinct
    (score, class) cells is drawn from its multinomial cell counts instead (same distribution). A resample
    lacking a class, or with a zero denominator, gives nan.
    """
    B = _check_B(B)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    n = int(n)
    m = k = 0
    if scores is not None:
        S_ = _as_cluster_matrix(scores, "scores")
        y = _binary_labels(labels)
        if S_.shape[0] != n or y.shape[0] != n:
            raise ValueError(f"scores and labels need one row per case (n = {n}): {S_.shape[0]}, {y.shape[0]}")
        m = S_.shape[1]
    V = None
    if num is not None:
        N_ = _as_cluster_matrix(num, "num")
        D_ = np.ones_like(N_) if den is None else _as_cluster_matrix(den, "den")
        if N_.shape != D_.shape or N_.shape[0] != n:
            raise ValueError(f"num and den must have the same shape with one row per case (n = {n}): "
                             f"{N_.shape}, {D_.shape}")
        k = N_.shape[1]
        if n and k:
            V, ia, ib = _dedupe_columns(N_, D_)
    auc = np.full((B, m), _NAN)
    rat = np.full((B, k), _NAN)
    if n == 0:
        return auc, rat
    dtype = np.float32 if n < 8192 else np.float64  # rank sums below 2**24 stay exact in float32
    plans: list[tuple[int, _RankPlan]] = []
    for j in range(m):
        s = S_[:, j]
        n1 = int(y.sum())
        if n1 == 0 or n1 == n:
            continue
        cells = _auroc_cells_boot(s, y, B, seed)
        if cells is not None:
            auc[:, j] = cells
        else:
            plans.append((j, _rank_plan(s, y, dtype)))
    if not plans and V is None:
        return auc, rat
    rows = _chunk_rows(n)
    npad = plans[0][1].order.shape[0] if plans else 0
    draw_dtype = _draw_dtype(n)

    def fill(lo: int, hi: int, rng: np.random.Generator) -> None:
        offs = (np.arange(rows, dtype=np.intp) * n)[:, None]
        flat = np.empty((rows, n), np.intp)
        Wa = np.zeros((rows, n + 1), dtype) if plans else None
        work = tuple(np.empty((rows, npad), dtype) for _ in range(3))
        W64 = np.empty((rows, n)) if V is not None else None
        for a in range(lo, hi, rows):
            c = min(hi, a + rows) - a
            d = rng.integers(0, n, size=(c, n), dtype=draw_dtype)
            np.add(d, offs[:c], out=flat[:c])
            w = np.bincount(flat[:c].ravel(), minlength=c * n).reshape(c, n)
            if Wa is not None:
                Wa[:c, :n] = w
                for j, plan in plans:
                    auc[a:a + c, j] = _auroc_from_multiplicities(Wa[:c], plan, work)
            if W64 is not None and V is not None:
                np.copyto(W64[:c], w)
                sums = W64[:c] @ V
                den_sums = sums[:, ib]
                with np.errstate(invalid="ignore", divide="ignore"):
                    rat[a:a + c] = np.where(den_sums == 0.0, _NAN, sums[:, ia] / den_sums)

    from threadpoolctl import threadpool_limits

    # one BLAS thread per worker: the kernel's many small products slow down badly under BLAS threading
    with threadpool_limits(limits=1, user_api="blas"):
        _run_blocks(B, seed, fill, workers)
    return auc, rat


def _auroc_counts_boot(s: np.ndarray, y: np.ndarray, B: int, seed: int, workers: int | None = None) -> np.ndarray:
    """Bootstrap AUROCs under n uniform draws with replacement: :func:`case_bootstrap` with one score column."""
    return case_bootstrap(int(s.shape[0]), B, seed, scores=s[:, None], labels=y, workers=workers)[0][:, 0]


def _auroc_inputs(scores: Any, labels: Any, B: int, alpha: float
                  ) -> tuple[int, float, np.ndarray, np.ndarray, int]:
    """Validated (B, alpha, scores, labels, n) of an AUROC interval."""
    B = _check_B(B)
    alpha = _check_alpha(alpha)
    s = _as_real(scores, "scores")
    y = _binary_labels(labels)
    _check_same_length(s, y, "scores", "labels")
    return B, alpha, s, y, int(s.shape[0])


def auroc_interval(
    scores: Any, labels: Any, B: int = 10_000, seed: int = 0, alpha: float = 0.05, mode: Mode = "index",
    workers: int | None = None,
) -> Estimate:
    """AUROC with a percentile bootstrap interval; resamples lacking a class are skipped (their number is in
    ``method``); se = SD of the bootstrap AUROCs (ddof=1).

    ``index``: the released code's ``RandomState(seed)`` index draws (the same resamples); the AUROC of each is
    Mann-Whitney with ties 1/2, so with tied scores the values differ from the released code's trapezoid over its
    argsort order (:func:`auroc_interval_released` reproduces that). ``exact-counts``: the same
    resampling distribution (n uniform draws with replacement) from PCG64 block streams (see ``_run_blocks``),
    filled by up to ``workers`` threads with the same result for any number; with few distinct (score, class)
    cells the cell counts are drawn from their multinomial (the same distribution again)."""
    B, alpha, s, y, n = _auroc_inputs(scores, labels, B, alpha)
    if n == 0:
        return Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    point = auroc(s, y)
    if math.isnan(point):
        return Estimate(_NAN, _NAN, _NAN, _NAN, n, "not estimable (only one class among labels)")
    if mode not in ("index", "exact-counts"):
        raise ValueError(f"mode must be 'index' or 'exact-counts', got {mode!r}")
    if mode == "exact-counts":
        boot = _auroc_counts_boot(s, y, B, seed, workers)
    else:
        boot = _auroc_index_boot(s, y, B, seed)
    ok = np.isfinite(boot)
    used = int(ok.sum())
    skipped = B - used
    how = f"percentile bootstrap ({mode}, B={B}, seed={seed}) {_pct(alpha)} interval; se = bootstrap SD"
    if skipped:
        how += f"; {skipped} resample(s) lacking a class skipped"
    if used == 0:
        return Estimate(point, _NAN, _NAN, _NAN, n, how + "; interval not estimable")
    lo, hi = _percentiles(boot[ok], alpha)
    sd = _sd(boot[ok])
    return Estimate(point, sd, lo, hi, n, how, sd)


def _auroc_index_boot(s: np.ndarray, y: np.ndarray, B: int, seed: int) -> np.ndarray:
    """Bootstrap AUROCs (Mann-Whitney, ties 1/2) under the released code's ``RandomState(seed)`` index draws."""
    n = int(s.shape[0])
    # Per resample, count positives / negatives at each distinct score level (one bincount, no sorting), then
    # U = sum_l pos_l * (negatives below level l + neg_l / 2): the Mann-Whitney count with ties 1/2.
    levels, lev = np.unique(s, return_inverse=True)
    L = int(levels.shape[0])
    code = lev.reshape(-1) * 2 + y
    boot = np.empty(B)
    pos = 0
    for idx in _index_chunks(n, B, seed):
        c = idx.shape[0]
        flat = (code[idx] + (np.arange(c, dtype=np.int64) * (2 * L))[:, None]).ravel()
        cnt = np.bincount(flat, minlength=c * 2 * L).reshape(c, L, 2).astype(np.float64)
        neg, pos_ = cnt[:, :, 0], cnt[:, :, 1]
        below = np.cumsum(neg, axis=1) - neg
        u = np.sum(pos_ * (below + 0.5 * neg), axis=1)
        n1 = pos_.sum(axis=1)
        n0 = n - n1
        with np.errstate(invalid="ignore", divide="ignore"):
            boot[pos:pos + c] = u / (n1 * n0)
        pos += c
    return boot


def auroc_released(scores: Any, labels: Any) -> float:
    """AUROC as the paper's released code computes it (``Inference/metrics.py``, ``_auc_from_scores``).

    Cases are ordered by ``np.argsort(scores)[::-1]`` (numpy's default sort, descending by reversal), and the area
    is the trapezoidal integral of the stepwise ROC of that order. Without tied scores this equals :func:`auroc`;
    with ties it does not count a tied pair 1/2: the area depends on the order the sort leaves tied cases in (and
    so, like the released code, on numpy's sort implementation). Used by ``index`` mode only; :func:`auroc` is the
    definition everywhere else. nan when a class is missing.

    Examples
    --------
    Scores 0.9, 0.8, 0.8, 0.3 with labels 1, 0, 1, 0: ``argsort`` gives 3, 1, 2, 0, reversed 0, 2, 1, 3, i.e.
    labels 1, 1, 0, 0 in that order, a perfect ranking:

    >>> auroc_released([0.9, 0.8, 0.8, 0.3], [1, 0, 1, 0])
    1.0
    >>> auroc([0.9, 0.8, 0.8, 0.3], [1, 0, 1, 0])  # Mann-Whitney counts the tied pair 1/2: 3.5 / 4
    0.875
    """
    s = _as_real(scores, "scores")
    y = _binary_labels(labels)
    _check_same_length(s, y, "scores", "labels")
    return _auroc_released(s, y)


def _auroc_released(s: np.ndarray, y: np.ndarray) -> float:
    n_pos = int(np.count_nonzero(y == 1))
    n_neg = int(y.shape[0]) - n_pos
    if n_pos == 0 or n_neg == 0:
        return _NAN
    ys = y[np.argsort(s)[::-1]]
    tpr = np.concatenate([[0], np.cumsum(ys == 1) / n_pos])
    fpr = np.concatenate([[0], np.cumsum(ys == 0) / n_neg])
    return float(np.trapezoid(tpr, fpr))


def auroc_interval_released(scores: Any, labels: Any, B: int = 10_000, seed: int = 0,
                            alpha: float = 0.05) -> Estimate:
    """AUROC (:func:`auroc_released`) with the released code's bootstrap: ``RandomState(seed).randint(0, n, (B, n))``
    rows in the cases' given order, the AUROC of each resample by :func:`auroc_released`, resamples lacking a
    class dropped, ``np.percentile`` interval; se = SD (ddof=1) of the kept draws.

    Examples
    --------
    >>> est = auroc_interval_released([0.9, 0.8, 0.7, 0.6, 0.5, 0.4], [1, 1, 0, 1, 0, 0], B=200)
    >>> round(est.point, 4)
    0.8889
    """
    B, alpha, s, y, n = _auroc_inputs(scores, labels, B, alpha)
    if n == 0:
        return Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    point = _auroc_released(s, y)
    if math.isnan(point):
        return Estimate(_NAN, _NAN, _NAN, _NAN, n, "not estimable (only one class among labels)")
    boot = np.empty(B)
    pos = 0
    for idx in _index_chunks(n, B, seed):
        for row in idx:
            boot[pos] = _auroc_released(s[row], y[row])
            pos += 1
    ok = np.isfinite(boot)
    how = (f"percentile bootstrap (index, B={B}, seed={seed}) {_pct(alpha)} interval, AUROC as the released code "
           f"computes it (argsort order, trapezoid); se = bootstrap SD")
    if not ok.all():
        how += f"; {int((~ok).sum())} resample(s) lacking a class skipped"
    if not ok.any():
        return Estimate(point, _NAN, _NAN, _NAN, n, how + "; interval not estimable")
    lo, hi = _percentiles(boot[ok], alpha)
    sd = _sd(boot[ok])
    return Estimate(point, sd, lo, hi, n, how, sd)

