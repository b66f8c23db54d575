"""Weighted association erasure (paper 002): WAE_pred / WAE_ref / per-group WAE and their corpus bootstrap."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from medvlm_audit.stats.kernels import _run_blocks
from medvlm_audit.stats.validation import _check_B
from medvlm_audit.suites.reports.cad import word_association

__all__ = ['corpus_resample_wae', 'wae', 'wae_table']


def wae(z_disp: Any, weights: Any, mask: Any = None) -> np.ndarray | float:
    """Weighted Association Erasure sum(w z_disp^2) / sum(w) along the last axis, over ``mask`` (all words if None).

    nan where the weights sum to zero.

    >>> wae([1.0, 2.0, 3.0], [1, 1, 2])          # (1 + 4 + 18) / 4
    5.75
    >>> wae([1.0, 2.0, 3.0], [1, 1, 2], mask=[True, True, False])
    2.5
    """
    zd = np.asarray(z_disp, dtype=np.float64)
    w = np.broadcast_to(np.asarray(weights, dtype=np.float64), zd.shape)
    if mask is not None:
        w = np.where(np.asarray(mask, dtype=bool), w, 0.0)
    num = (w * zd * zd).sum(axis=-1)
    den = w.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return float(out) if out.ndim == 0 else out


def wae_table(c_ref_f: Any, c_ref_m: Any, c_pred_f: Any, c_pred_m: Any, alpha: float = 0.1) -> dict[str, Any]:
    """WAE_pred and WAE_ref for all words and per group (F: z_ref > 0, M: z_ref < 0) and their deltas F - M.

    Keys ``pred_all, pred_F, pred_M, pred_delta, ref_all, ref_F, ref_M, ref_delta``; each value a float, or an
    array when the counts carry a leading resample axis.

    >>> t = wae_table([30, 5, 5], [2, 5, 5], [5, 5, 5], [5, 5, 5])
    >>> round(t["pred_delta"], 6) == round(t["pred_F"] - t["pred_M"], 6)
    True
    """
    cfr, cmr = np.asarray(c_ref_f, np.float64), np.asarray(c_ref_m, np.float64)
    cfp, cmp_ = np.asarray(c_pred_f, np.float64), np.asarray(c_pred_m, np.float64)
    s_r, v_r, z_r = word_association(cfr, cmr, alpha)
    s_p, v_p, _ = word_association(cfp, cmp_, alpha)
    zd = (s_p - s_r) / np.sqrt(v_p + v_r)
    out: dict[str, Any] = {}
    for name, w in (("pred", cfp + cmp_), ("ref", cfr + cmr)):
        out[f"{name}_all"] = wae(zd, w)
        out[f"{name}_F"] = wae(zd, w, z_r > 0)
        out[f"{name}_M"] = wae(zd, w, z_r < 0)
        out[f"{name}_delta"] = out[f"{name}_F"] - out[f"{name}_M"]
    return out


def _unique_rows(C: Any) -> tuple[Any, np.ndarray]:
    """Distinct rows of a CSR matrix and each row's index among them (template-collapsed corpora shrink a lot)."""
    C = C.tocsr()
    C.sort_indices()
    keys: dict[bytes, int] = {}
    inv = np.empty(C.shape[0], dtype=np.int64)
    ip, ix, dt = C.indptr, C.indices, C.data
    first: list[int] = []
    for i in range(C.shape[0]):
        a, b = ip[i], ip[i + 1]
        k = ix[a:b].tobytes() + b"|" + dt[a:b].tobytes()
        j = keys.get(k)
        if j is None:
            j = keys[k] = len(first)
            first.append(i)
        inv[i] = j
    return C[np.asarray(first, dtype=np.int64)], inv


def corpus_resample_wae(ref_counts: Any, ref_female: Any, pred_counts: Any, pred_female: Any, B: int = 1000,
                        n_perm: int = 1000, seed: int = 0, alpha: float = 0.1,
                        workers: int | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Percentile-bootstrap and label-permutation draws of every :func:`wae_table` statistic, from counts only.

    ``*_counts`` are report x word count matrices (:func:`report_count_matrices`), ``*_female`` boolean arrays
    (True = F, False = M). Bootstrap: in each corpus the reports of each group are resampled with replacement
    (group sizes kept), as per-report multiplicities (n uniform draws, bincount), so a resample's word counts
    are one sparse product W @ C. Permutation null: the F/M labels are shuffled within each corpus (group
    sizes kept) and the same statistics recomputed. Identical reports are merged first, so a template-collapsed
    corpus costs almost nothing. Blocks of 500 draws come from ``SeedSequence(seed)`` children (bootstrap) and
    ``SeedSequence(seed + 1)`` children (permutation): the same result for any ``workers``.

    Returns ``{"bootstrap": {key: (B,)}, "permutation": {key: (n_perm,)}}`` with :func:`wae_table` keys.
    """
    B = _check_B(B)
    n_perm = _check_B(n_perm, "n_perm")
    corp = []
    for name, C, fem in (("reference", ref_counts, ref_female), ("predictions", pred_counts, pred_female)):
        fem = np.asarray(fem, dtype=bool)
        if fem.shape[0] != C.shape[0]:
            raise ValueError(f"{name}: {C.shape[0]} reports but {fem.shape[0]} group labels")
        U, inv = _unique_rows(C)
        corp.append((U.T.tocsr().astype(np.float64), inv, np.flatnonzero(fem), np.flatnonzero(~fem),
                     U.shape[0], np.asarray(C.sum(axis=0), np.float64).ravel()))
    V = ref_counts.shape[1]
    keys = list(wae_table(np.zeros(V), np.zeros(V), np.zeros(V), np.zeros(V), alpha))
    boot = {k: np.full(B, np.nan) for k in keys}
    perm = {k: np.full(n_perm, np.nan) for k in keys}
    sub = 64  # resamples per sparse product: bounds the dense multiplicity block

    def counts_boot(c: tuple, lo: int, hi: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        UT, inv, iF, iM, k, _ = c
        out = []
        for idx in (iF, iM):
            n = idx.shape[0]
            if n == 0:
                out.append(np.zeros((hi - lo, V)))
                continue
            d = inv[idx][rng.integers(0, n, size=(hi - lo, n))]
            d += (np.arange(hi - lo) * k)[:, None]
            W = np.bincount(d.ravel(), minlength=(hi - lo) * k).reshape(hi - lo, k).astype(np.float64)
            out.append(np.asarray(UT @ W.T).T)
        return out[0], out[1]

    def counts_perm(c: tuple, lo: int, hi: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        UT, inv, iF, _, k, total = c
        n = inv.shape[0]
        lab = np.zeros((hi - lo, n), dtype=bool)
        lab[:, : iF.shape[0]] = True
        lab = rng.permuted(lab, axis=1)
        d = np.where(lab, inv[None, :] + (np.arange(hi - lo) * k)[:, None], -1).ravel()
        d = d[d >= 0]
        W = np.bincount(d, minlength=(hi - lo) * k).reshape(hi - lo, k).astype(np.float64)
        cf = np.asarray(UT @ W.T).T
        return cf, total[None, :] - cf

    def make_fill(dest: dict[str, np.ndarray], draw: Callable) -> Callable[[int, int, np.random.Generator], None]:
        def fill(lo: int, hi: int, rng: np.random.Generator) -> None:
            for a in range(lo, hi, sub):
                b = min(hi, a + sub)
                rf, rm = draw(corp[0], a, b, rng)
                pf, pm = draw(corp[1], a, b, rng)
                t = wae_table(rf, rm, pf, pm, alpha)
                for k_ in keys:
                    dest[k_][a:b] = t[k_]
        return fill

    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        _run_blocks(B, seed, make_fill(boot, counts_boot), workers)
        _run_blocks(n_perm, seed + 1, make_fill(perm, counts_perm), workers)
    return {"bootstrap": boot, "permutation": perm}

