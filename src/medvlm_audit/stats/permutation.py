"""Permutation tests: group differences and ANOVA F, Spearman with a permutation p, p-values from a null."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from medvlm_audit.stats import kernels
from medvlm_audit.stats.distributions import hypergeom_pmf, rankdata
from medvlm_audit.stats.types import _NAN, PermutationResult
from medvlm_audit.stats.validation import _as_1d, _as_real, _check_B, _check_same_length

__all__ = ['permutation_p_two_sided', 'permutation_p_upper', 'permutation_test', 'spearman_permutation']


def _perm_rows(rng: np.random.Generator, base: np.ndarray, c: int) -> np.ndarray:
    """c independent uniform permutations of ``base`` (one per row)."""
    return rng.permuted(np.tile(base, (c, 1)), axis=1)


def _ssb_from_sums(sums: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Between-group sum of squares of centred data: sum_g S_g^2 / n_g (group sums of centred values)."""
    return np.sum(sums * sums / sizes, axis=-1)


def permutation_test(values: Any, groups: Any, B: int = 1_000, seed: int = 0,
                     min_stratum: int = 2) -> PermutationResult:
    """Permutation test that ``values`` have the same mean in every group (labels pooled and reshuffled).

    Two groups: statistic |mean_1 - mean_2| (groups in sorted label order); k > 2: one-way ANOVA F. Groups with
    fewer than ``min_stratum`` cases are dropped first (reported). p = (c + 1)/(B + 1), c = # permuted
    statistics >= observed (both statistics are increasing in the between-group sum of squares, which is what
    is compared, with a 1e-9 relative tolerance for float ties).
    Exactness: for 0/1 values the permuted group counts of 1s are drawn directly -- hypergeometric (2 groups) or
    multivariate hypergeometric (k groups) -- which is exactly the distribution of a uniform label permutation,
    at O(B x k) cost; for two 0/1 groups ``p_exact`` also gives the exact (enumerated) permutation p. Real values
    are permuted row by row (``Generator.permuted``). The RNG is ``np.random.default_rng(seed)``.
    """
    B = _check_B(B)
    v = _as_real(values, "values")
    g = _as_1d(groups, "groups")
    _check_same_length(v, g, "values", "groups")
    if g.dtype == object:
        for i, lab in enumerate(g):
            if lab is None or (isinstance(lab, float) and math.isnan(lab)):
                raise ValueError(f"groups[{i}] is missing ({lab!r}); drop the case or give it a group")
    elif np.issubdtype(g.dtype, np.floating) and np.isnan(g).any():
        raise ValueError(f"groups[{int(np.flatnonzero(np.isnan(g))[0])}] is nan; drop the case or give it a group")
    labels = np.array([str(x) for x in g.tolist()], dtype=object)
    names_all = sorted(set(labels.tolist()))
    sizes_all = {nm: int(np.count_nonzero(labels == nm)) for nm in names_all}
    kept = tuple(nm for nm in names_all if sizes_all[nm] >= min_stratum)
    dropped = tuple(nm for nm in names_all if sizes_all[nm] < min_stratum)
    notes = []
    if dropped:
        listed = ", ".join(f"{nm} (n={sizes_all[nm]})" for nm in dropped)
        notes.append(f"dropped groups with < {min_stratum} cases: {listed}")
    k = len(kept)
    test = "two-group |difference of means|" if k == 2 else "one-way ANOVA F"
    if k < 2:
        why = "no groups" if not names_all else f"{k} group(s) with >= {min_stratum} cases"
        notes.insert(0, f"not estimable ({why})")
        n_kept = sum(sizes_all[nm] for nm in kept)
        return PermutationResult(_NAN, _NAN, B, n_kept, kept, dropped, test, "; ".join(notes))

    order = np.concatenate([np.flatnonzero(labels == nm) for nm in kept])
    x = v[order]
    sizes = np.array([sizes_all[nm] for nm in kept], dtype=np.int64)
    N = int(sizes.sum())
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    grand = float(x.mean())
    xc = x - grand
    sums_obs = np.add.reduceat(xc, starts)
    ssb_obs = float(_ssb_from_sums(sums_obs, sizes))
    sst = float(np.sum(xc * xc))
    ssw_obs = max(sst - ssb_obs, 0.0)
    means = np.add.reduceat(x, starts) / sizes
    if k == 2:
        statistic = float(abs(means[0] - means[1]))
    elif sst == 0.0:
        statistic = 0.0
    elif ssw_obs <= 1e-12 * sst:
        statistic = math.inf
    else:
        statistic = float((ssb_obs / (k - 1)) / (ssw_obs / (N - k)))
    if sst == 0.0:
        notes.append("all values identical: no between-group difference possible (p = 1)")
    tol = 1e-9 * abs(ssb_obs) + 1e-12 * sst

    rng = np.random.default_rng(seed)
    is_binary = bool(np.all((x == 0.0) | (x == 1.0)))
    p_exact = _NAN
    if is_binary:
        K1 = int(x.sum())
        if k == 2:
            k1 = rng.hypergeometric(K1, N - K1, int(sizes[0]), size=B)
            cnt = np.stack([k1, K1 - k1], axis=1)
            # exact permutation p: hypergeometric mass of all k1 with SSB >= observed
            support = np.arange(max(0, K1 - int(sizes[1])), min(K1, int(sizes[0])) + 1)
            s_sup = np.stack([support, K1 - support], axis=1) - sizes * (K1 / N)
            ssb_sup = _ssb_from_sums(s_sup, sizes)
            pmf = hypergeom_pmf(support, N, K1, int(sizes[0]))
            p_exact = float(min(1.0, pmf[ssb_sup >= ssb_obs - tol].sum()))
        else:
            cnt = rng.multivariate_hypergeometric(sizes, K1, size=B)
        sums = cnt - sizes * (K1 / N)
        ssb = _ssb_from_sums(sums, sizes)
        c_ge = int(np.count_nonzero(ssb >= ssb_obs - tol))
        how = "count-based (hypergeometric)" if k == 2 else "count-based (multivariate hypergeometric)"
    else:
        c_ge = 0
        rows = max(1, kernels._CHUNK_ELEMS // N)
        done = 0
        while done < B:
            c = min(rows, B - done)
            perm = _perm_rows(rng, xc, c)
            ssb = _ssb_from_sums(np.add.reduceat(perm, starts, axis=1), sizes)
            c_ge += int(np.count_nonzero(ssb >= ssb_obs - tol))
            done += c
        how = "label permutation"
    p = (c_ge + 1) / (B + 1)
    notes.append(f"{how}, B={B}, seed={seed}; p = (c + 1)/(B + 1)")
    return PermutationResult(statistic, p, B, N, kept, dropped, test, "; ".join(notes), p_exact)


def spearman_permutation(x: Any, y: Any, B: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Spearman rho (average ranks for ties, as scipy) with a two-sided permutation p = (c + 1)/(B + 1),
    c = # permutations of y with |rho*| >= |rho|. (nan, nan) when n < 3 or either variable is constant."""
    B = _check_B(B)
    xv = _as_real(x, "x")
    yv = _as_real(y, "y")
    _check_same_length(xv, yv, "x", "y")
    n = int(xv.shape[0])
    if n < 3:
        return _NAN, _NAN
    rx = rankdata(xv)
    ry = rankdata(yv)
    rx = rx - rx.mean()
    ry = ry - ry.mean()
    sxx, syy = float(rx @ rx), float(ry @ ry)
    if sxx == 0.0 or syy == 0.0:
        return _NAN, _NAN
    num = float(rx @ ry)
    rho = num / math.sqrt(sxx * syy)
    rho = max(-1.0, min(1.0, rho))
    tol = 1e-9 * abs(num) + 1e-12 * math.sqrt(sxx * syy)
    rng = np.random.default_rng(seed)
    c_ge = 0
    rows = max(1, kernels._CHUNK_ELEMS // n)
    done = 0
    while done < B:
        c = min(rows, B - done)
        perm = _perm_rows(rng, ry, c)
        c_ge += int(np.count_nonzero(np.abs(perm @ rx) >= abs(num) - tol))
        done += c
    return float(rho), (c_ge + 1) / (B + 1)


def permutation_p_upper(observed: float, null: Any) -> float:
    """One-sided permutation p = (1 + #{null >= observed}) / (1 + n), nan draws dropped.

    >>> permutation_p_upper(2.0, [0.5, 1.0, 2.0, 3.0])
    0.6
    """
    x = np.asarray(null, dtype=np.float64)
    x = x[~np.isnan(x)]
    if x.shape[0] == 0 or math.isnan(observed):
        return _NAN
    return float((1 + np.count_nonzero(x >= observed)) / (1 + x.shape[0]))


def permutation_p_two_sided(observed: float, null: Any) -> float:
    """Two-sided permutation p = (1 + #{|null| >= |observed|}) / (1 + n), nan draws dropped.

    >>> permutation_p_two_sided(-2.0, [0.5, -1.0, 2.0, -3.0])
    0.6
    """
    x = np.asarray(null, dtype=np.float64)
    x = x[~np.isnan(x)]
    if x.shape[0] == 0 or math.isnan(observed):
        return _NAN
    return float((1 + np.count_nonzero(np.abs(x) >= abs(observed))) / (1 + x.shape[0]))

