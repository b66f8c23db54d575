"""Agreement between raters: Cohen's and Fleiss' kappa with bootstrap intervals, percent agreement, Kendall tau-b."""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from medvlm_audit.stats.types import _NAN, NOT_ESTIMABLE_N0, Estimate
from medvlm_audit.stats.validation import (
    _as_1d,
    _as_real,
    _check_alpha,
    _check_B,
    _check_same_length,
    _percentiles,
    _sd,
)

__all__ = ['cohen_kappa', 'cohen_kappa_interval', 'fleiss_kappa', 'fleiss_kappa_interval', 'kendall_tau_b', 'percent_agreement', 'ratings_to_counts']


def cohen_kappa(a: Any, b: Any, weights: Literal["linear", "quadratic"] | None = None) -> float:
    """Cohen's kappa between two raters (weighted by category index distance if asked), as sklearn's
    ``cohen_kappa_score``; nan (undefined) when n == 0 or a rater uses one category only (sklearn returns 0
    when only one does: kappa is 0 by construction there, which says nothing about agreement)."""
    if weights not in (None, "linear", "quadratic"):
        raise ValueError(f"weights must be None, 'linear' or 'quadratic', got {weights!r}")
    av = _as_1d(a, "a")
    bv = _as_1d(b, "b")
    _check_same_length(av, bv, "a", "b")
    if av.shape[0] == 0:
        return _NAN
    try:
        cats, inv = np.unique(np.concatenate([av, bv]), return_inverse=True)
    except TypeError as exc:
        raise ValueError(f"cohen_kappa: ratings must be mutually comparable: {exc}") from None
    inv = inv.reshape(-1)
    q = cats.shape[0]
    n = av.shape[0]
    ia, ib = inv[:n], inv[n:]
    if np.unique(ia).shape[0] < 2 or np.unique(ib).shape[0] < 2:
        return _NAN
    obs = np.zeros((q, q))
    np.add.at(obs, (ia, ib), 1.0)
    exp = np.outer(obs.sum(axis=1), obs.sum(axis=0)) / obs.sum()
    if weights is None:
        w = 1.0 - np.eye(q)
    else:
        d = np.abs(np.arange(q)[:, None] - np.arange(q)[None, :]).astype(np.float64)
        w = d if weights == "linear" else d ** 2
    den = float(np.sum(w * exp))
    if den == 0.0:
        return _NAN
    return float(1.0 - np.sum(w * obs) / den)


def kendall_tau_b(x: Any, y: Any) -> tuple[float, float]:
    """Kendall's tau-b with its two-sided p (``scipy.stats.kendalltau``, exact for small untied samples);
    (nan, nan) when n < 2 or either variable is constant."""
    xv = _as_real(x, "x")
    yv = _as_real(y, "y")
    _check_same_length(xv, yv, "x", "y")
    if xv.shape[0] < 2 or np.all(xv == xv[0]) or np.all(yv == yv[0]):
        return _NAN, _NAN
    from scipy import stats as _sstats

    res = _sstats.kendalltau(xv, yv, variant="b")
    return float(res.statistic), float(res.pvalue)


def _category_codes(a: np.ndarray, b: np.ndarray, categories: Any = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Integer codes of two raters' ratings over one ordered category list (given, or the sorted union)."""
    if categories is None:
        try:
            cats, inv = np.unique(np.concatenate([a, b]), return_inverse=True)
        except TypeError as exc:
            raise ValueError(f"ratings must be mutually comparable: {exc}") from None
        inv = inv.reshape(-1)
        return inv[: a.shape[0]], inv[a.shape[0]:], int(cats.shape[0])
    cats = list(categories)
    pos = {c: i for i, c in enumerate(cats)}
    out = []
    for name, v in (("a", a), ("b", b)):
        bad = [x for x in v.tolist() if x not in pos]
        if bad:
            raise ValueError(f"rater {name}: rating {bad[0]!r} is not one of the categories {cats}")
        out.append(np.array([pos[x] for x in v.tolist()], dtype=np.int64))
    return out[0], out[1], len(cats)


def _kappa_from_tables(obs: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Cohen's kappa of each (q, q) confusion table in a (B, q, q) stack; nan where a rater uses one category
    only (kappa 0 by construction, or chance agreement total)."""
    tot = obs.sum(axis=(1, 2))
    one = ((obs.sum(axis=2) > 0).sum(axis=1) < 2) | ((obs.sum(axis=1) > 0).sum(axis=1) < 2)
    exp = obs.sum(axis=2)[:, :, None] * obs.sum(axis=1)[:, None, :] / np.where(tot > 0, tot, 1.0)[:, None, None]
    den = np.einsum("ij,bij->b", w, exp)
    num = np.einsum("ij,bij->b", w, obs)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((den > 0) & ~one, 1.0 - num / np.where(den > 0, den, 1.0), _NAN)


def ordinal_median_iqr(values: Any) -> tuple[float, float, float]:
    """(median, first quartile, third quartile) of ratings on an ordinal scale, each a category of the scale:
    the smallest category whose cumulative share reaches 1/2, 1/4 and 3/4 (never 1.5 on a 1-3 scale);
    nan when there is no rating.

    >>> ordinal_median_iqr([1, 2, 2, 1])
    (1.0, 1.0, 2.0)
    """
    v = np.sort(_as_real(values, "values"))
    if v.shape[0] == 0:
        return _NAN, _NAN, _NAN
    n = v.shape[0]
    def pick(q: float) -> float:
        return float(v[math.ceil(q * n) - 1])

    return pick(0.5), pick(0.25), pick(0.75)


def percent_agreement(a: Any, b: Any) -> float:
    """Share of items on which two raters give the same rating (0-1); nan when there are no items.

    Examples
    --------
    >>> percent_agreement(["yes", "yes", "no", "no"], ["yes", "no", "no", "no"])
    0.75
    """
    av, bv = _as_1d(a, "a"), _as_1d(b, "b")
    _check_same_length(av, bv, "a", "b")
    if av.shape[0] == 0:
        return _NAN
    return float(np.mean(av == bv))


def cohen_kappa_interval(a: Any, b: Any, weights: Literal["linear", "quadratic"] | None = None, *,
                         categories: Any = None, B: int = 10_000, seed: int = 0, alpha: float = 0.05) -> Estimate:
    """Cohen's kappa (weighted by squared or absolute category distance if asked) with a percentile bootstrap
    interval over items (the pairs of ratings are resampled together).

    ``categories`` fixes the ordered category list (needed for weighted kappa when a category is used by neither
    rater, and so that the ordinal distances are the scale's, not the observed labels'). ``se`` is the SD of
    the bootstrap draws; draws where chance agreement is total (kappa undefined) are left out of the interval and
    counted in ``method``.

    Worked example (unweighted): a = 1 1 1 1 0 0, b = 1 1 1 0 0 1. Observed agreement 4/6; the marginals are
    a: 4 ones / 2 zeros, b: 4 / 2, so chance agreement = (4*4 + 2*2)/36 = 20/36 and
    kappa = (24/36 - 20/36) / (1 - 20/36) = 4/16 = 0.25.

    >>> round(cohen_kappa_interval([1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 1], B=200).point, 6)
    0.25
    """
    B = _check_B(B)
    alpha = _check_alpha(alpha)
    if weights not in (None, "linear", "quadratic"):
        raise ValueError(f"weights must be None, 'linear' or 'quadratic', got {weights!r}")
    av, bv = _as_1d(a, "a"), _as_1d(b, "b")
    _check_same_length(av, bv, "a", "b")
    n = int(av.shape[0])
    if n == 0:
        return Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    ia, ib, q = _category_codes(av, bv, categories)
    d = np.abs(np.arange(q)[:, None] - np.arange(q)[None, :]).astype(np.float64)
    w = 1.0 - np.eye(q) if weights is None else (d if weights == "linear" else d ** 2)
    cell = ia * q + ib
    obs = np.bincount(cell, minlength=q * q).reshape(1, q, q).astype(np.float64)
    point = float(_kappa_from_tables(obs, w)[0])
    if not math.isfinite(point):
        return Estimate(_NAN, _NAN, _NAN, _NAN, n, "undefined: " + ("a single item" if n == 1 else
                        "a rater gives one category only (kappa is 0 by construction)"))
    rng = np.random.default_rng(seed)
    draws = np.empty(B)
    step = max(1, 2_000_000 // n)
    for s in range(0, B, step):
        m = min(step, B - s)
        idx = rng.integers(0, n, size=(m, n))
        flat = (np.arange(m)[:, None] * (q * q) + cell[idx]).ravel()
        tabs = np.bincount(flat, minlength=m * q * q).reshape(m, q, q).astype(np.float64)
        draws[s : s + m] = _kappa_from_tables(tabs, w)
    ok = np.isfinite(draws)
    kind = {None: "Cohen's kappa", "linear": "linear-weighted Cohen's kappa",
            "quadratic": "quadratic-weighted Cohen's kappa"}[weights]
    how = f"{kind}; percentile bootstrap over items (B={B}, seed={seed})"
    if not ok.all():
        how += f"; {int((~ok).sum())} draws with undefined kappa left out"
    if ok.sum() < 2:
        return Estimate(point, _NAN, _NAN, _NAN, n, how)
    lo, hi = _percentiles(draws[ok], alpha)
    return Estimate(point, _sd(draws[ok]), lo, hi, n, how)


def ratings_to_counts(ratings: Any, categories: Any = None) -> tuple[np.ndarray, list[Any]]:
    """(subjects x raters) ratings -> (subjects x categories) counts for :func:`fleiss_kappa`.

    Missing ratings (None or nan) are not counted, so subjects may have different numbers of raters.

    >>> ratings_to_counts([[1, 1, 2], [2, 2, 2]])[0].tolist()
    [[2, 1], [0, 3]]
    """
    rows = [list(r) for r in ratings]
    def missing(v: Any) -> bool:
        return v is None or (isinstance(v, float) and math.isnan(v))
    present = [v for r in rows for v in r if not missing(v)]
    cats = sorted(set(present), key=lambda v: (str(type(v)), v)) if categories is None else list(categories)
    pos = {c: j for j, c in enumerate(cats)}
    out = np.zeros((len(rows), len(cats)), dtype=np.int64)
    for i, r in enumerate(rows):
        for v in r:
            if missing(v):
                continue
            if v not in pos:
                raise ValueError(f"subject {i}: rating {v!r} is not one of the categories {cats}")
            out[i, pos[v]] += 1
    return out, cats


def _fleiss_rows(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n_i = counts.sum(axis=1).astype(np.float64)
    p_i = (counts * (counts - 1)).sum(axis=1) / (n_i * (n_i - 1))
    return p_i, n_i


def _fleiss_from(p_i: np.ndarray, n_i: np.ndarray, counts: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Fleiss' kappa of each row of weights w (B, N) over subjects (multiplicities); w None: one plain kappa."""
    if w is None:
        w = np.ones((1, p_i.shape[0]))
    pbar = (w @ p_i) / w.sum(axis=1)
    pj = (w @ counts) / (w @ n_i)[:, None]
    pe = (pj ** 2).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pe < 1.0, (pbar - pe) / np.where(pe < 1.0, 1.0 - pe, 1.0), _NAN)


def fleiss_kappa(counts: Any) -> float:
    """Fleiss' kappa from a (subjects x categories) count table (Fleiss 1971).

    P_i = sum_j n_ij (n_ij - 1) / (n_i (n_i - 1)), P_bar = mean_i P_i, p_j = sum_i n_ij / sum_i n_i,
    P_e = sum_j p_j^2, kappa = (P_bar - P_e) / (1 - P_e). Subjects rated by fewer than two raters are dropped
    (their P_i is undefined); nan when no subject is left or every rating falls in one category.

    Worked example (Fleiss 1971 / the Wikipedia table): 10 subjects, 14 raters, 5 categories give
    P_bar = 0.378, P_e = 0.213 and kappa = 0.210.

    >>> t = [[0,0,0,0,14],[0,2,6,4,2],[0,0,3,5,6],[0,3,9,2,0],[2,2,8,1,1],[7,7,0,0,0],[3,2,6,3,0],
    ...      [2,5,3,2,2],[6,5,2,1,0],[0,2,2,3,7]]
    >>> round(fleiss_kappa(t), 3)
    0.21
    """
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 2:
        raise ValueError(f"counts must be a 2-D (subjects x categories) table, got shape {c.shape}")
    if (c < 0).any() or not np.all(np.isfinite(c)):
        raise ValueError("counts must be finite and non-negative")
    c = c[c.sum(axis=1) >= 2]
    if c.shape[0] == 0:
        return _NAN
    p_i, n_i = _fleiss_rows(c)
    return float(_fleiss_from(p_i, n_i, c)[0])


def fleiss_kappa_interval(counts: Any, *, B: int = 10_000, seed: int = 0, alpha: float = 0.05) -> Estimate:
    """Fleiss' kappa with a percentile bootstrap interval over subjects (multinomial subject multiplicities,
    the same distribution as resampling subject indices); ``n`` is the number of subjects with 2+ ratings.

    Worked example: counts [[3, 0], [0, 3], [3, 0], [2, 1]]: P_i = 1, 1, 1, 1/3 so P_bar = 10/12; p = (8/12, 4/12)
    so P_e = 5/9; kappa = (10/12 - 5/9) / (4/9) = 0.625.

    >>> e = fleiss_kappa_interval([[3, 0], [0, 3], [3, 0], [2, 1]], B=500)
    >>> round(e.point, 4), e.n
    (0.625, 4)
    """
    B = _check_B(B)
    alpha = _check_alpha(alpha)
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 2:
        raise ValueError(f"counts must be a 2-D (subjects x categories) table, got shape {c.shape}")
    c = c[c.sum(axis=1) >= 2]
    N = int(c.shape[0])
    if N == 0:
        return Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    p_i, n_i = _fleiss_rows(c)
    point = float(_fleiss_from(p_i, n_i, c)[0])
    rng = np.random.default_rng(seed)
    w = rng.multinomial(N, np.full(N, 1.0 / N), size=B).astype(np.float64)
    draws = _fleiss_from(p_i, n_i, c, w)
    ok = np.isfinite(draws)
    how = f"Fleiss' kappa; percentile bootstrap over subjects (B={B}, seed={seed})"
    if not ok.all():
        how += f"; {int((~ok).sum())} draws with undefined kappa left out"
    if ok.sum() < 2:
        return Estimate(point, _NAN, _NAN, _NAN, N, how)
    lo, hi = _percentiles(draws[ok], alpha)
    return Estimate(point, _sd(draws[ok]), lo, hi, N, how)

