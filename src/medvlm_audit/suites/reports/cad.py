"""Counterfactual association displacement (paper 002): per-word association z, displacement, CAD categories."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats as _sstats

from medvlm_audit.stats.multiplicity import benjamini_hochberg

__all__ = ['CAD_CATEGORIES', 'cad', 'cad_category', 'word_association']


CAD_CATEGORIES = ("erasure", "new_bias", "bias_flip", "preservation", "none")


def word_association(c_f: Any, c_m: Any, alpha: float = 0.1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dirichlet-smoothed log ratio s, its delta-method variance and z (paper 002, Sec. 2.1), along the last axis.

    p_g(w) = (c_g(w) + alpha) / (N_g + alpha V), s = log p_F / p_M, Var[s] = 1/(c_F + alpha) + 1/(c_M + alpha),
    z = s / sqrt(Var). N_g = sum of c_g over the vocabulary; V = the last axis' length. Rows of a 2-D input are
    separate corpora (resamples).

    >>> s, var, z = word_association([3, 1], [1, 1], alpha=1.0)   # N_F = 4, N_M = 2, V = 2
    >>> bool(np.isclose(s[0], np.log((4 / 6) / (2 / 4)))), bool(np.isclose(var[0], 1 / 4 + 1 / 2))
    (True, True)
    """
    cf = np.asarray(c_f, dtype=np.float64)
    cm = np.asarray(c_m, dtype=np.float64)
    if cf.shape != cm.shape:
        raise ValueError(f"c_f and c_m must have the same shape, got {cf.shape} and {cm.shape}")
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha!r}")
    V = cf.shape[-1]
    tf = cf + alpha
    tm = cm + alpha
    nf = cf.sum(axis=-1, keepdims=True) + alpha * V
    nm = cm.sum(axis=-1, keepdims=True) + alpha * V
    s = np.log(tf / nf) - np.log(tm / nm)
    var = 1.0 / tf + 1.0 / tm
    return s, var, s / np.sqrt(var)


def cad_category(z_ref: Any, z_pred: Any, z_neutral: float = 1.0, z_strong: float = 2.0) -> np.ndarray:
    """CAD category of each word (DESIGN.md; paper 002 Sec. 2.1.2), four disjoint rules, ``none`` otherwise:

    erasure |z_ref| > z_strong and |z_pred| < z_neutral; new_bias |z_ref| < z_neutral and |z_pred| >= z_neutral;
    bias_flip sign(z_ref) != sign(z_pred), both |z| >= z_neutral; preservation same sign, both |z| >= z_neutral.

    >>> cad_category([3.0, 0.2, 1.5, -1.5, 1.5], [0.5, -1.2, -1.1, -2.0, 0.3]).tolist()
    ['erasure', 'new_bias', 'bias_flip', 'preservation', 'none']
    """
    zr = np.asarray(z_ref, dtype=np.float64)
    zp = np.asarray(z_pred, dtype=np.float64)
    ar, ap = np.abs(zr), np.abs(zp)
    both = (ar >= z_neutral) & (ap >= z_neutral)
    out = np.full(zr.shape, "none", dtype=object)
    out[both & (np.sign(zr) == np.sign(zp))] = "preservation"
    out[both & (np.sign(zr) != np.sign(zp))] = "bias_flip"
    out[(ar < z_neutral) & (ap >= z_neutral)] = "new_bias"
    out[(ar > z_strong) & (ap < z_neutral)] = "erasure"
    return out


def cad(c_ref_f: Any, c_ref_m: Any, c_pred_f: Any, c_pred_m: Any, alpha: float = 0.1, p_star: float = 0.05,
        z_neutral: float = 1.0, z_strong: float = 2.0) -> dict[str, np.ndarray]:
    """Clinical Association Displacement per word from per-group word counts of the reference and predictions.

    Returns s_ref, z_ref, s_pred, z_pred, z_disp = (s_pred - s_ref) / sqrt(Var_pred + Var_ref), its two-sided
    normal p, the BH-adjusted q, ``category_ungated`` (:func:`cad_category`) and ``category`` (``stable`` where
    q >= p_star, else the ungated category). A word never written in the predictions has Var_pred = 2/alpha, so
    its |z_disp| stays below about 0.9 at alpha = 0.1 and the gate can never flag its erasure: its gated
    category is ``absent`` (not generated: its displacement cannot be tested), never ``stable`` (the paper's
    "no displacement"; its erasure rule counts a word that "is not generated"), and both are reported.

    >>> out = cad([30, 5, 5], [2, 5, 5], [5, 5, 5], [5, 5, 5], alpha=0.1)
    >>> out["category_ungated"].tolist(), bool(out["z_ref"][0] > 2)
    (['erasure', 'none', 'none'], True)
    >>> cad([6, 5, 5], [0, 5, 5], [0, 5, 5], [0, 5, 5])["category"].tolist()   # word 0 never written
    ['absent', 'stable', 'stable']
    """
    s_r, v_r, z_r = word_association(c_ref_f, c_ref_m, alpha)
    s_p, v_p, z_p = word_association(c_pred_f, c_pred_m, alpha)
    zd = (s_p - s_r) / np.sqrt(v_p + v_r)
    p = 2.0 * _sstats.norm.sf(np.abs(zd))
    q = benjamini_hochberg(p) if p.ndim == 1 else np.full(p.shape, np.nan)
    ungated = cad_category(z_r, z_p, z_neutral, z_strong)
    gated = ungated.copy()
    gated[~(q < p_star)] = "stable"
    never = (np.asarray(c_pred_f, dtype=np.float64) + np.asarray(c_pred_m, dtype=np.float64)) == 0
    gated[never & ~(q < p_star)] = "absent"
    return {"s_ref": s_r, "z_ref": z_r, "var_ref": v_r, "s_pred": s_p, "z_pred": z_p, "var_pred": v_p,
            "z_disp": zd, "p": p, "q": q, "category": gated, "category_ungated": ungated}

