"""Statistics used by every audit suite: plain functions on numpy arrays.

Conventions (DESIGN.md "Statistics conventions"; paper 000, Methods "Statistical analysis"):

* Values are fractions in [0, 1]; callers convert to percent.
* A proportion is reported as the sample mean, the analytic SE sqrt(p(1-p)/n) and a percentile bootstrap
  interval (10,000 resamples, seed 0).
* A paired difference is reported as the difference of means, the SD of the bootstrap differences, the percentile
  interval and a two-sided shift-and-reflect p-value (Supplementary Algorithm 1 of the paper).
* Checked against the authors' released code (github.com/mahshadlotfinia/causal, ``Inference/stats_utils.py``):
  bootstrap SDs use ``ddof=1``; intervals use ``np.percentile`` with its default (linear) interpolation;
  index resampling is ``np.random.RandomState(seed).randint(0, n, size=(B, n))``. The released code has **no**
  clustered bootstrap: the patient-clustered option is this project's addition (beyond the paper). It draws
  ``randint(0, K, size=(B, K))`` over the sorted unique cluster ids and takes the ratio of summed values to
  summed cluster sizes.
* Two resampling modes for 0/1 outcomes. ``"exact-counts"`` draws the resampled counts directly (binomial for one
  proportion, multinomial over the four outcome pairs for a paired difference, multinomial over cluster *types*
  for a clustered bootstrap): the same distribution as index resampling at O(B) cost, from
  ``np.random.default_rng(seed)``. ``"index"`` draws the released code's index matrix chunk by chunk (bounded
  memory) from the same ``RandomState`` stream: the draws, and so the means and intervals of a given vector, are
  bit-identical to the released code's one-shot ``values[idx].mean(1)`` (tested). The released code's *results*
  are reproduced only when the vector is in its row order (the grounding analysis keeps the files' order in
  index mode) and its AUROC is :func:`auroc_released`; :func:`auroc` (Mann-Whitney, ties 1/2) differs from it
  whenever scores are tied.
* Statistics with no count shortcut (AUROC, means of real values such as a Brier score or an ECE bin) resample
  n uniform draws with replacement in ``exact-counts`` mode too, from fixed blocks of 500 resamples, block i
  drawn from ``default_rng(SeedSequence(seed).spawn(...)[i])``; worker threads fill the blocks, and the result
  is the same for any number of threads. With few distinct values the counts come from a multinomial instead.

Degenerate inputs (n = 0, one class, a single group, constant values) never raise and never warn: they return
nan / None and say why in ``method`` / ``note`` (e.g. "not estimable (n = 0)"). Malformed inputs (values outside
{0, 1} where 0/1 is required, nan values, length mismatches) raise ``ValueError`` naming the argument and index.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy import special as _special
from scipy import stats as _sstats

__all__ = [
    "NOT_ESTIMABLE_N0",
    "Estimate",
    "Mode",
    "PairedDiff",
    "PermutationResult",
    "auroc",
    "auroc_interval",
    "auroc_interval_released",
    "auroc_released",
    "benjamini_hochberg",
    "binomial_test",
    "bootstrap_draws_sd",
    "bootstrap_estimate",
    "bootstrap_mean",
    "bootstrap_sd",
    "brier",
    "case_bootstrap",
    "case_bootstrap_ratios",
    "chance_test",
    "cluster_bootstrap_ratios",
    "cluster_paired_difference",
    "cluster_ratio_se",
    "cohen_kappa",
    "ece",
    "ece_terms",
    "kendall_tau_b",
    "mcnemar_exact",
    "mean_estimate",
    "paired_difference",
    "paired_difference_values",
    "paired_from_draws",
    "percentile_interval",
    "permutation_test",
    "poisson_binomial_sf",
    "proportion",
    "shift_reflect_p",
    "spearman_permutation",
    "wilson_interval",
]

Mode = Literal["exact-counts", "index"]
NOT_ESTIMABLE_N0 = "not estimable (n = 0)"

# Index-mode chunking: at most this many (resample x case) elements are materialised at once.
# 2**20 int64 indices = 8 MiB, plus the gathered values.
_CHUNK_ELEMS = 1 << 20

# Fast resampling kernels (AUROC, case bootstrap of means): resamples come in fixed blocks, block i drawn from
# ``default_rng(SeedSequence(seed).spawn(...)[i])``, so results never depend on how many threads fill them.
_BLOCK_ROWS = 500
#: (resample x case) elements per chunk of a fast kernel: sized to stay in the per-core cache.
_CACHE_ELEMS = 1 << 17
#: at most this many distinct cells (e.g. (score, class) pairs): resampled cell counts come from a multinomial.
_CELLS_MAX = 64
#: default number of worker threads of the fast kernels (numpy's draws, sorts and gathers release the GIL).
_MAX_WORKERS = 4

_NAN = float("nan")


# --------------------------------------------------------------------------------------------- result types


@dataclass(frozen=True)
class Estimate:
    """A proportion or mean with uncertainty: point, SE, (1 - alpha) interval, n and how it was computed.

    ``boot_sd`` is the SD (ddof=1) of the bootstrap distribution: the released code's reported "SE" variant.
    """

    point: float
    se: float
    ci_low: float
    ci_high: float
    n: int
    method: str
    boot_sd: float = _NAN

    @property
    def estimable(self) -> bool:
        """True when the point estimate is a number."""
        return not math.isnan(self.point)


@dataclass(frozen=True)
class PairedDiff:
    """mean(a) - mean(b) on shared cases: bootstrap SD, percentile interval, shift-and-reflect two-sided p."""

    diff: float
    sd: float
    ci_low: float
    ci_high: float
    p: float
    n: int
    method: str


@dataclass(frozen=True)
class PermutationResult:
    """A permutation test across groups: observed statistic, Monte-Carlo p = (c + 1)/(B + 1), kept/dropped groups.

    ``p_exact`` is the exact permutation p-value where it is cheap to enumerate (two groups, 0/1 values:
    hypergeometric tail); nan otherwise.
    """

    statistic: float
    p: float
    B: int
    n: int
    groups: tuple[str, ...]
    dropped: tuple[str, ...]
    test: str
    note: str
    p_exact: float = _NAN


# --------------------------------------------------------------------------------------------- validation


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


# --------------------------------------------------------------------------------------------- helpers


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


def _draw_dtype(n: int) -> type[np.signedinteger[Any]]:
    """Smallest integer type holding positions 0..n-1: fewer random bits per draw and a faster sort."""
    return np.int16 if n < (1 << 15) else np.int32 if n < (1 << 31) else np.int64


def _chunk_rows(n: int) -> int:
    """Resamples per cache-sized chunk of a fast kernel."""
    return max(1, min(_BLOCK_ROWS, _CACHE_ELEMS // max(n, 1)))


def _workers(workers: int | None, tasks: int) -> int:
    """Threads to use: ``workers`` (None: the CPU count, at most _MAX_WORKERS), never more than the tasks."""
    if workers is None:
        workers = min(os.cpu_count() or 1, _MAX_WORKERS)
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be a positive integer or None, got {workers!r}")
    return max(1, min(int(workers), tasks))


def _run_blocks(B: int, seed: int, fill: Callable[[int, int, np.random.Generator], None],
                workers: int | None = None) -> None:
    """Call ``fill(lo, hi, rng)`` for each block of resamples [lo, hi), block i with its own PCG64 stream from
    ``SeedSequence(seed).spawn``; blocks run on worker threads, and the result is the same for any thread count."""
    starts = range(0, B, _BLOCK_ROWS)
    seeds = np.random.SeedSequence(seed).spawn(len(starts))
    tasks = [(lo, min(B, lo + _BLOCK_ROWS), ss) for lo, ss in zip(starts, seeds)]

    def one(task: tuple[int, int, np.random.SeedSequence]) -> None:
        fill(task[0], task[1], np.random.default_rng(task[2]))

    w = _workers(workers, len(tasks))
    if w == 1:
        for t in tasks:
            one(t)
        return
    with ThreadPoolExecutor(max_workers=w) as ex:
        list(ex.map(one, tasks))


def _index_chunks(n: int, B: int, seed: int) -> Iterator[np.ndarray]:
    """Yield the rows of ``RandomState(seed).randint(0, n, (B, n))`` in chunks from one stream.

    ``RandomState.randint`` fills its output element by element (masked rejection on 32-bit draws, no carried
    buffer), so successive ``(c, n)`` calls reproduce the one-shot ``(B, n)`` matrix exactly (tested).
    """
    rs = np.random.RandomState(seed)
    rows = max(1, _CHUNK_ELEMS // max(n, 1))
    done = 0
    while done < B:
        c = min(rows, B - done)
        yield rs.randint(0, n, size=(c, n))
        done += c


def _index_means(values: list[np.ndarray], B: int, seed: int) -> list[np.ndarray]:
    """Bootstrap means of each array under shared index resampling, bit-identical to ``values[idx].mean(1)``."""
    n = values[0].shape[0]
    out = [np.empty(B, dtype=np.float64) for _ in values]
    pos = 0
    for idx in _index_chunks(n, B, seed):
        c = idx.shape[0]
        for v, o in zip(values, out):
            o[pos:pos + c] = v[idx].mean(axis=1)
        pos += c
    return out


def _index_binary_means(values: list[np.ndarray], B: int, seed: int) -> list[np.ndarray]:
    """As ``_index_means`` for 0/1 int8 arrays: integer counts k, then k / n.

    For 0/1 data ``float_values[idx].mean(1)`` is the correctly rounded k / n whatever the summation order,
    so counting in integers gives the same bits at lower cost.
    """
    n = values[0].shape[0]
    out = [np.empty(B, dtype=np.float64) for _ in values]
    pos = 0
    for idx in _index_chunks(n, B, seed):
        c = idx.shape[0]
        for v, o in zip(values, out):
            k = v[idx].sum(axis=1, dtype=np.int64)
            o[pos:pos + c] = k / n
        pos += c
    return out


def _cluster_index_means(values: list[np.ndarray], inverse: np.ndarray, K: int, B: int,
                         seed: int) -> list[np.ndarray]:
    """Clustered bootstrap (released code): draw K clusters with replacement; mean = sum(values) / sum(sizes)."""
    counts = np.bincount(inverse, minlength=K).astype(np.float64)
    sums = [np.bincount(inverse, weights=v.astype(np.float64), minlength=K) for v in values]
    out = [np.empty(B, dtype=np.float64) for _ in values]
    pos = 0
    for draw in _index_chunks(K, B, seed):
        c = draw.shape[0]
        total = counts[draw].sum(axis=1)
        for s, o in zip(sums, out):
            o[pos:pos + c] = s[draw].sum(axis=1) / total
        pos += c
    return out


def _cluster_type_counts(columns: list[np.ndarray], inverse: np.ndarray, K: int, B: int,
                         seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact-counts clustered bootstrap for 0/1 data.

    Clusters with the same (size, per-column sums) are interchangeable, so drawing K clusters with replacement
    is the same as a Multinomial(K, type frequencies / K) over the distinct cluster types: O(B x types).
    Returns (resampled column sums (B, ncol), resampled total sizes (B,)).
    """
    size = np.bincount(inverse, minlength=K)
    per = np.stack([size] + [np.bincount(inverse, weights=c, minlength=K).astype(np.int64) for c in columns],
                   axis=1)
    types, freq = np.unique(per, axis=0, return_counts=True)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(K, freq / K, size=B)  # (B, T)
    tot = draws @ types  # (B, 1 + ncol), exact integers
    return tot[:, 1:], tot[:, 0]


# --------------------------------------------------------------------------------------------- proportions


def wilson_interval(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials; (nan, nan) when n == 0.

    The paper uses it for per-finding cells with fewer than 30 cases, where the percentile bootstrap undercovers.
    """
    alpha = _check_alpha(alpha)
    k, n = int(k), int(n)
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"wilson_interval: need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return _NAN, _NAN
    z = float(_special.ndtri(1.0 - alpha / 2.0))
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2.0 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, center - half)  # exactly 0 / 1 at the edges (float rounding aside)
    hi = 1.0 if k == n else min(1.0, center + half)
    return lo, hi


def proportion(x: Any, B: int = 10_000, seed: int = 0, mode: Mode = "exact-counts", clusters: Any = None,
               alpha: float = 0.05, wilson_below: int = 0) -> Estimate:
    """Proportion of 1s: mean, analytic SE sqrt(p(1-p)/n), percentile bootstrap interval, n.

    ``mode="exact-counts"``: k* ~ Binomial(n, p_hat) (same distribution as index resampling, O(B)).
    ``mode="index"``: the released code's ``RandomState(seed).randint(0, n, (B, n))``, chunked; bit-identical draws
    (the released interval of the same vector in the same order).
    ``clusters``: patient ids; resample whole clusters (ratio of sums). The SE is then the cluster-robust
    (linearised ratio) SE sqrt(sum_c (s_c - p m_c)^2) / n, which equals sqrt(p(1-p)/n) when every cluster is one
    case. ``wilson_below``: if n < wilson_below, the interval is Wilson's instead (paper: 30 for per-finding cells).
    """
    B = _check_B(B)
    alpha = _check_alpha(alpha)
    _check_mode(mode)
    xb = _as_binary(x, "x")
    n = int(xb.shape[0])
    if n == 0:
        return Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    k = int(xb.sum(dtype=np.int64))
    p = k / n
    inverse = None
    if clusters is not None:
        inverse, K = _cluster_inverse(clusters, n)
        s_c = np.bincount(inverse, weights=xb, minlength=K)
        m_c = np.bincount(inverse, minlength=K)
        se = float(math.sqrt(float(np.sum((s_c - p * m_c) ** 2))) / n)
        se_txt = f"cluster-robust analytic SE ({K} clusters)"
    else:
        se = math.sqrt(p * (1.0 - p) / n)
        se_txt = "analytic SE sqrt(p(1-p)/n)"

    if inverse is not None:
        if mode == "index":
            (boot,) = _cluster_index_means([xb], inverse, K, B, seed)
        else:
            sums, tot = _cluster_type_counts([xb], inverse, K, B, seed)
            boot = sums[:, 0] / tot
        how = f"cluster bootstrap ({K} clusters, {mode}, B={B}, seed={seed})"
    elif mode == "index":
        (boot,) = _index_binary_means([xb], B, seed)
        how = f"bootstrap ({mode}, B={B}, seed={seed})"
    else:
        rng = np.random.default_rng(seed)
        boot = rng.binomial(n, p, size=B) / n
        how = f"bootstrap ({mode}, B={B}, seed={seed})"
    boot_sd = _sd(boot)
    if n < wilson_below:
        lo, hi = wilson_interval(k, n, alpha)
        method = f"Wilson {_pct(alpha)} interval (n = {n} < {wilson_below}); {se_txt}; boot_sd from {how}"
    else:
        lo, hi = _percentiles(boot, alpha)
        method = f"percentile {how} {_pct(alpha)} interval; {se_txt}"
        if k == 0 or k == n:
            method += f"; all outcomes are {int(k == n)}: bootstrap interval degenerate, consider Wilson"
    return Estimate(p, se, lo, hi, n, method, boot_sd)


def bootstrap_sd(x: Any, B: int = 10_000, seed: int = 0, mode: Mode = "index") -> float:
    """SD (ddof=1) of the bootstrap proportions: the SE the released code reports; nan when n == 0."""
    B = _check_B(B)
    _check_mode(mode)
    xb = _as_binary(x, "x")
    n = int(xb.shape[0])
    if n == 0:
        return _NAN
    if mode == "index":
        (boot,) = _index_binary_means([xb], B, seed)
    else:
        boot = np.random.default_rng(seed).binomial(n, xb.mean(), size=B) / n
    return _sd(boot)


def mean_estimate(values: Any, B: int = 10_000, seed: int = 0, clusters: Any = None,
                  alpha: float = 0.05) -> Estimate:
    """Mean of real values: analytic SE s/sqrt(n) (ddof=1; cluster-robust with clusters), index-resampling
    percentile bootstrap interval (bit-identical to the released code's ``values[idx].mean(1)``)."""
    B = _check_B(B)
    alpha = _check_alpha(alpha)
    v = _as_real(values, "values")
    n = int(v.shape[0])
    if n == 0:
        return Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    point = float(v.mean())
    if clusters is not None:
        inverse, K = _cluster_inverse(clusters, n)
        resid = np.bincount(inverse, weights=v - point, minlength=K)
        se = float(math.sqrt(float(np.sum(resid ** 2))) / n)
        se_txt = f"cluster-robust analytic SE ({K} clusters)"
        (boot,) = _cluster_index_means([v], inverse, K, B, seed)
        how = f"cluster bootstrap ({K} clusters, index, B={B}, seed={seed})"
    else:
        se = float(np.std(v, ddof=1) / math.sqrt(n)) if n > 1 else _NAN
        se_txt = "analytic SE s/sqrt(n)" if n > 1 else "SE not estimable (n = 1)"
        (boot,) = _index_means([v], B, seed)
        how = f"bootstrap (index, B={B}, seed={seed})"
    lo, hi = _percentiles(boot, alpha)
    return Estimate(point, se, lo, hi, n, f"percentile {how} {_pct(alpha)} interval; {se_txt}", _sd(boot))


def _dedupe_columns(N: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct columns of [N | D] (shared denominators such as all-ones are resampled once) and where each went."""
    uniq: dict[bytes, int] = {}
    cols: list[np.ndarray] = []
    refs: list[int] = []
    for v in [*N.T, *D.T]:
        key = v.tobytes()
        if key not in uniq:
            uniq[key] = len(cols)
            cols.append(v)
        refs.append(uniq[key])
    k = N.shape[1]
    return np.stack(cols, axis=1), np.array(refs[:k]), np.array(refs[k:])


def case_bootstrap_ratios(num: Any, den: Any = None, B: int = 10_000, seed: int = 0, mode: Mode = "exact-counts",
                          workers: int | None = None) -> np.ndarray:
    """Bootstrap draws, shape (B, k), of sum(num[:, j]) / sum(den[:, j]) over n cases (rows) drawn uniformly with
    replacement, the same cases for every column (columns of a draw are paired). ``den=None``: plain means.

    A vectorised bootstrap of means and ratios of means (a Brier score, the per-bin terms of an ECE, a mean over a
    subset whose membership travels with the case). ``exact-counts``: with few distinct rows (<= _CELLS_MAX) their
    resampled counts come from a multinomial (same distribution); otherwise :func:`case_bootstrap` (per-case
    multiplicities of n draws from the PCG64 block streams, any number of ``workers``, same result).
    ``index``: the released code's ``RandomState(seed).randint(0, n, (B, n))`` draws. A zero denominator gives nan.
    """
    B = _check_B(B)
    _check_mode(mode)
    N = _as_cluster_matrix(num, "num")
    D = np.ones_like(N) if den is None else _as_cluster_matrix(den, "den")
    if N.shape != D.shape:
        raise ValueError(f"num and den must have the same shape (cases x columns): {N.shape} != {D.shape}")
    n, k = N.shape
    out = np.empty((B, k))
    if n == 0 or k == 0:
        out.fill(_NAN)
        return out
    V, ia, ib = _dedupe_columns(N, D)

    def put(lo: int, hi: int, sums: np.ndarray) -> None:
        den_sums = sums[:, ib]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[lo:hi] = np.where(den_sums == 0.0, _NAN, sums[:, ia] / den_sums)

    if mode == "index":
        pos = 0
        for idx in _index_chunks(n, B, seed):
            c = idx.shape[0]
            flat = (idx + (np.arange(c, dtype=np.int64) * n)[:, None]).ravel()
            put(pos, pos + c, np.bincount(flat, minlength=c * n).reshape(c, n).astype(np.float64) @ V)
            pos += c
        return out
    rows_v, freq = np.unique(V, axis=0, return_counts=True)
    if rows_v.shape[0] <= _CELLS_MAX:
        p = freq / n

        def fill_cells(lo: int, hi: int, rng: np.random.Generator) -> None:
            put(lo, hi, rng.multinomial(n, p, size=hi - lo).astype(np.float64) @ rows_v)

        _run_blocks(B, seed, fill_cells, workers=1)
        return out
    return case_bootstrap(n, B, seed, num=N, den=D, workers=workers)[1]


def bootstrap_estimate(point: float, draws: Any, n: int, alpha: float = 0.05, how: str = "bootstrap") -> Estimate:
    """An Estimate from bootstrap draws of a statistic: se = SD of the draws (ddof=1), percentile interval; nan
    draws (resamples where the statistic is undefined) are left out and counted in ``method``."""
    alpha = _check_alpha(alpha)
    if n == 0:
        return Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    d = np.asarray(draws, dtype=np.float64).reshape(-1)
    ok = ~np.isnan(d)
    method = f"percentile {how} {_pct(alpha)} interval; se = bootstrap SD"
    if not ok.all():
        method += f"; {int((~ok).sum())} resample(s) where it is undefined skipped"
    if not ok.any():
        return Estimate(float(point), _NAN, _NAN, _NAN, int(n), method + "; interval not estimable")
    lo, hi = _percentiles(d[ok], alpha)
    sd = _sd(d[ok])
    return Estimate(float(point), sd, lo, hi, int(n), method, sd)


def bootstrap_mean(values: Any, B: int = 10_000, seed: int = 0, alpha: float = 0.05, mode: Mode = "exact-counts",
                   workers: int | None = None) -> Estimate:
    """Mean of real values with se = bootstrap SD and a percentile bootstrap interval (cases resampled with
    :func:`case_bootstrap_ratios`); compare :func:`mean_estimate` (analytic SE, index draws only)."""
    B = _check_B(B)
    v = _as_real(values, "values")
    n = int(v.shape[0])
    if n == 0:
        return Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    draws = case_bootstrap_ratios(v[:, None], None, B, seed, mode, workers)[:, 0]
    return bootstrap_estimate(float(v.mean()), draws, n, alpha, f"bootstrap of the mean ({mode}, B={B}, seed={seed})")


# --------------------------------------------------------------------------------------------- paired


def _shift_reflect_p(boot: np.ndarray, d: float, B: int) -> float:
    """Two-sided p: share of recentred draws with |d* - d| >= |d|, floored at 1/B; 1 when d == 0."""
    if d == 0.0:
        return 1.0
    share = float(np.count_nonzero(np.abs(boot - d) >= abs(d))) / boot.shape[0]
    return max(share, 1.0 / B)


def _paired_result(boot: np.ndarray, d: float, n: int, B: int, alpha: float, how: str) -> PairedDiff:
    lo, hi = _percentiles(boot, alpha)
    p = _shift_reflect_p(boot, d, B)
    method = (f"paired percentile {how} {_pct(alpha)} interval; sd = bootstrap SD (ddof=1); "
              f"two-sided shift-and-reflect p floored at 1/B")
    if d == 0.0:
        method += "; observed difference is 0 (p = 1)"
    return PairedDiff(d, _sd(boot), lo, hi, p, n, method)


def paired_difference(a: Any, b: Any, B: int = 10_000, seed: int = 0, mode: Mode = "exact-counts",
                      clusters: Any = None, alpha: float = 0.05) -> PairedDiff:
    """Paired bootstrap of mean(a) - mean(b) for 0/1 outcomes on the same cases (Supplementary Algorithm 1).

    ``exact-counts``: (n11, n10, n01, n00)* ~ Multinomial(n, observed pair shares), O(B); ``index``: the
    released code's shared ``RandomState(seed).randint`` index matrix, chunked; bit-identical draws.
    """
    B = _check_B(B)
    alpha = _check_alpha(alpha)
    _check_mode(mode)
    ab = _as_binary(a, "a")
    bb = _as_binary(b, "b")
    _check_same_length(ab, bb, "a", "b")
    n = int(ab.shape[0])
    if n == 0:
        return PairedDiff(_NAN, _NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    ka, kb = int(ab.sum(dtype=np.int64)), int(bb.sum(dtype=np.int64))
    d = ka / n - kb / n  # same float arithmetic as mean(a) - mean(b) on 0/1 data
    if clusters is not None:
        inverse, K = _cluster_inverse(clusters, n)
        if mode == "index":
            ma, mb = _cluster_index_means([ab, bb], inverse, K, B, seed)
        else:
            sums, tot = _cluster_type_counts([ab, bb], inverse, K, B, seed)
            ma, mb = sums[:, 0] / tot, sums[:, 1] / tot
        how = f"cluster bootstrap ({K} clusters, {mode}, B={B}, seed={seed})"
    elif mode == "index":
        ma, mb = _index_binary_means([ab, bb], B, seed)
        how = f"bootstrap ({mode}, B={B}, seed={seed})"
    else:
        n11 = int(np.count_nonzero((ab == 1) & (bb == 1)))
        n10 = ka - n11
        n01 = kb - n11
        n00 = n - n11 - n10 - n01
        rng = np.random.default_rng(seed)
        cnt = rng.multinomial(n, np.array([n11, n10, n01, n00], dtype=np.float64) / n, size=B)
        ma = (cnt[:, 0] + cnt[:, 1]) / n
        mb = (cnt[:, 0] + cnt[:, 2]) / n
        how = f"bootstrap ({mode}, B={B}, seed={seed})"
    return _paired_result(ma - mb, d, n, B, alpha, how)


def paired_difference_values(a: Any, b: Any, B: int = 10_000, seed: int = 0, clusters: Any = None,
                             alpha: float = 0.05) -> PairedDiff:
    """Paired bootstrap of mean(a) - mean(b) for real values on the same cases (index resampling, as released)."""
    B = _check_B(B)
    alpha = _check_alpha(alpha)
    av = _as_real(a, "a")
    bv = _as_real(b, "b")
    _check_same_length(av, bv, "a", "b")
    n = int(av.shape[0])
    if n == 0:
        return PairedDiff(_NAN, _NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
    d = float(av.mean() - bv.mean())
    if clusters is not None:
        inverse, K = _cluster_inverse(clusters, n)
        ma, mb = _cluster_index_means([av, bv], inverse, K, B, seed)
        how = f"cluster bootstrap ({K} clusters, index, B={B}, seed={seed})"
    else:
        ma, mb = _index_means([av, bv], B, seed)
        how = f"bootstrap (index, B={B}, seed={seed})"
    return _paired_result(ma - mb, d, n, B, alpha, how)


def mcnemar_exact(a: Any, b: Any) -> float:
    """Exact two-sided McNemar p on the discordant pairs: min(1, 2 * BinomCDF(min(n10, n01); n10 + n01, 1/2)).

    Same definition as ``statsmodels.stats.contingency_tables.mcnemar(exact=True)``; 1.0 with no discordant pair.
    """
    ab = _as_binary(a, "a")
    bb = _as_binary(b, "b")
    _check_same_length(ab, bb, "a", "b")
    n10 = int(np.count_nonzero((ab == 1) & (bb == 0)))
    n01 = int(np.count_nonzero((ab == 0) & (bb == 1)))
    m = n10 + n01
    if m == 0:
        return 1.0
    return float(min(1.0, 2.0 * _sstats.binom.cdf(min(n10, n01), m, 0.5)))


# --------------------------------------------------------------------------------------------- cluster ratios
# Many ratios sum(num) / sum(den) over the same clusters (an item and its repeats, a patient and its images),
# resampled together: one draw of clusters serves every ratio, so a difference of two ratios is paired.



def _as_cluster_matrix(x: Any, name: str) -> np.ndarray:
    """Per-cluster sums as a finite float64 (n_clusters, n_columns) matrix (a vector is one column)."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected an (n_clusters, n_columns) array, got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"{name}{list(i)} = {arr[i]!r}: expected a finite number")
    return arr


def cluster_ratio_se(num: Any, den: Any) -> float:
    """Cluster-robust (linearised ratio) SE of sum(num) / sum(den), one (num, den) pair per cluster.

    sqrt(sum_c (num_c - p den_c)^2) / sum(den), the SE ``proportion(x, clusters=...)`` reports; it is
    sqrt(p(1-p)/n) when every cluster holds one 0/1 trial. nan when sum(den) == 0.
    """
    nv = _as_real(num, "num")
    dv = _as_real(den, "den")
    _check_same_length(nv, dv, "num", "den")
    total = float(dv.sum())
    if total <= 0.0:
        return _NAN
    p = float(nv.sum()) / total
    return float(math.sqrt(float(np.sum((nv - p * dv) ** 2))) / total)


def cluster_bootstrap_ratios(num: Any, den: Any, B: int = 10_000, seed: int = 0) -> np.ndarray:
    """Bootstrap draws, shape (B, n_columns), of sum(num[:, j]) / sum(den[:, j]) with clusters resampled together.

    ``num``/``den`` hold per-cluster sums (e.g. an item's correct and scored trials over its repeats, so repeats
    stay with their item); a cluster is then one row of :func:`case_bootstrap_ratios`, which draws them."""
    return case_bootstrap_ratios(num, den, B, seed)


def percentile_interval(draws: Any, alpha: float = 0.05) -> tuple[float, float]:
    """Percentile interval (linear interpolation) of bootstrap draws, nan draws left out; (nan, nan) if none."""
    alpha = _check_alpha(alpha)
    d = np.asarray(draws, dtype=np.float64).reshape(-1)
    d = d[~np.isnan(d)]
    if not d.size:
        return _NAN, _NAN
    return _percentiles(d, alpha)


def bootstrap_bias(point: float, draws: Any, alpha: float = 0.05) -> tuple[float, float, float, float]:
    """Bootstrap bias and the bias-aware estimates of a statistic (Efron & Tibshirani 1993, ch. 10 and 13.4):
    ``(bias, point - bias, basic_low, basic_high)`` with bias = mean(draws) - point and the basic (reverse
    percentile) interval [2·point - q_(1-alpha/2), 2·point - q_(alpha/2)]. nan draws are left out.

    Use it beside :func:`percentile_interval` for a statistic that resampling inflates, such as a sum of squared
    noisy z-scores (WAE): its draws run above the observed value, so the percentile interval can miss the point,
    while the basic interval targets the population value with the bias removed.

    >>> b, corrected, lo, hi = bootstrap_bias(1.0, [1.5, 2.0, 2.5], alpha=0.5)   # q_.25 = 1.75, q_.75 = 2.25
    >>> round(b, 6), round(corrected, 6), round(lo, 6), round(hi, 6)
    (1.0, 0.0, -0.25, 0.25)
    """
    alpha = _check_alpha(alpha)
    d = np.asarray(draws, dtype=np.float64).reshape(-1)
    d = d[~np.isnan(d)]
    if not d.size or math.isnan(point):
        return _NAN, _NAN, _NAN, _NAN
    q_lo, q_hi = _percentiles(d, alpha)
    bias = float(d.mean()) - float(point)
    return bias, float(point) - bias, 2.0 * float(point) - q_hi, 2.0 * float(point) - q_lo


def bootstrap_draws_sd(draws: Any) -> float:
    """SD (ddof=1) of bootstrap draws, nan draws left out; nan for fewer than two draws."""
    d = np.asarray(draws, dtype=np.float64).reshape(-1)
    return _sd(d[~np.isnan(d)])


def shift_reflect_p(draws: Any, d: float, B: int | None = None) -> float:
    """Two-sided shift-and-reflect p of an observed difference ``d`` from its bootstrap draws.

    Share of draws with |d* - d| >= |d| (nan draws left out), floored at 1/B (B = number of draws by default);
    1 when d == 0; nan when d is nan or no draw is a number.
    """
    x = np.asarray(draws, dtype=np.float64).reshape(-1)
    x = x[~np.isnan(x)]
    if math.isnan(d) or not x.size:
        return _NAN
    return _shift_reflect_p(x, float(d), _check_B(B if B is not None else int(x.size)))


def paired_from_draws(draws_a: Any, draws_b: Any, d: float, n: int, B: int | None = None,
                      alpha: float = 0.05, how: str = "cluster bootstrap") -> PairedDiff:
    """mean(a) - mean(b) = ``d`` on ``n`` shared clusters, summarised from paired bootstrap draws of both means.

    SD (ddof=1), percentile interval and shift-and-reflect p of draws_a - draws_b (nan draws left out).
    """
    alpha = _check_alpha(alpha)
    if n == 0 or math.isnan(d):
        return PairedDiff(_NAN, _NAN, _NAN, _NAN, _NAN, int(n), NOT_ESTIMABLE_N0 if n == 0 else "not estimable")
    diff = np.asarray(draws_a, dtype=np.float64) - np.asarray(draws_b, dtype=np.float64)
    lo, hi = percentile_interval(diff, alpha)
    p = shift_reflect_p(diff, d, B)
    method = (f"paired percentile {how} {_pct(alpha)} interval; sd = bootstrap SD (ddof=1); "
              "two-sided shift-and-reflect p floored at 1/B")
    return PairedDiff(float(d), bootstrap_draws_sd(diff), lo, hi, p, int(n), method)


def cluster_paired_difference(num_a: Any, den_a: Any, num_b: Any, den_b: Any, B: int = 10_000, seed: int = 0,
                              alpha: float = 0.05) -> PairedDiff:
    """ratio_a - ratio_b (ratio = sum(num) / sum(den)) on the same clusters, clusters resampled together.

    For 0/1 trials grouped in clusters (an item's repeats), num = correct and den = trials per cluster: the
    clustered paired bootstrap of ``paired_difference(..., clusters=...)``, from :func:`cluster_bootstrap_ratios`.
    """
    B = _check_B(B)
    na, da, nb, db = (_as_real(v, nm) for v, nm in ((num_a, "num_a"), (den_a, "den_a"), (num_b, "num_b"),
                                                      (den_b, "den_b")))
    for v, nm in ((da, "den_a"), (nb, "num_b"), (db, "den_b")):
        _check_same_length(na, v, "num_a", nm)
    n = int(np.count_nonzero((da > 0) | (db > 0)))
    if da.sum() <= 0 or db.sum() <= 0:
        return PairedDiff(_NAN, _NAN, _NAN, _NAN, _NAN, n, NOT_ESTIMABLE_N0)
    d = float(na.sum() / da.sum() - nb.sum() / db.sum())
    draws = cluster_bootstrap_ratios(np.stack([na, nb], axis=1), np.stack([da, db], axis=1), B, seed)
    return paired_from_draws(draws[:, 0], draws[:, 1], d, n, B, alpha,
                             f"cluster bootstrap ({na.shape[0]} clusters, B={B}, seed={seed})")


# --------------------------------------------------------------------------------------------- permutation


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
            pmf = _sstats.hypergeom.pmf(support, N, K1, int(sizes[0]))
            p_exact = float(min(1.0, pmf[ssb_sup >= ssb_obs - tol].sum()))
        else:
            cnt = rng.multivariate_hypergeometric(sizes, K1, size=B)
        sums = cnt - sizes * (K1 / N)
        ssb = _ssb_from_sums(sums, sizes)
        c_ge = int(np.count_nonzero(ssb >= ssb_obs - tol))
        how = "count-based (hypergeometric)" if k == 2 else "count-based (multivariate hypergeometric)"
    else:
        c_ge = 0
        rows = max(1, _CHUNK_ELEMS // N)
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


# --------------------------------------------------------------------------------------------- multiplicity


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


# --------------------------------------------------------------------------------------------- rank statistics


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
    rx = _sstats.rankdata(xv)
    ry = _sstats.rankdata(yv)
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
    rows = max(1, _CHUNK_ELEMS // n)
    done = 0
    while done < B:
        c = min(rows, B - done)
        perm = _perm_rows(rng, ry, c)
        c_ge += int(np.count_nonzero(np.abs(perm @ rx) >= abs(num) - tol))
        done += c
    return float(rho), (c_ge + 1) / (B + 1)


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
    r = _sstats.rankdata(s)
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


# --------------------------------------------------------------------------------------------- calibration


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


# --------------------------------------------------------------------------------------------- agreement


def cohen_kappa(a: Any, b: Any, weights: Literal["linear", "quadratic"] | None = None) -> float:
    """Cohen's kappa between two raters (weighted by category index distance if asked), as sklearn's
    ``cohen_kappa_score``; nan when n == 0 or chance agreement is total (both raters use one category)."""
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
    res = _sstats.kendalltau(xv, yv, variant="b")
    return float(res.statistic), float(res.pvalue)


def binomial_test(k: int, n: int, p0: float, alternative: str = "greater") -> float:
    """Exact binomial test p-value (``scipy.stats.binomtest``); nan when n == 0."""
    k, n = int(k), int(n)
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"binomial_test: need 0 <= k <= n, got k={k}, n={n}")
    if not (0.0 <= float(p0) <= 1.0):
        raise ValueError(f"binomial_test: p0 must lie in [0, 1], got {p0!r}")
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative must be 'greater', 'less' or 'two-sided', got {alternative!r}")
    if n == 0:
        return _NAN
    return float(_sstats.binomtest(k, n, float(p0), alternative=alternative).pvalue)


def poisson_binomial_sf(k: int, probs: Any) -> float:
    """P(X >= k) for X a sum of independent Bernoulli(probs[i]) (exact, dynamic programming over the count)."""
    pv = _as_real(probs, "probs")
    if ((pv < 0) | (pv > 1)).any():
        i = int(np.flatnonzero((pv < 0) | (pv > 1))[0])
        raise ValueError(f"probs[{i}] = {pv[i]!r}: probabilities must lie in [0, 1]")
    k = int(k)
    if k <= 0:
        return 1.0
    if k > pv.shape[0]:
        return 0.0
    dist = np.zeros(pv.shape[0] + 1)
    dist[0] = 1.0
    for i, p in enumerate(pv, 1):
        dist[1 : i + 1] = dist[1 : i + 1] * (1.0 - p) + dist[0:i] * p
        dist[0] *= 1.0 - p
    return float(min(1.0, dist[k:].sum()))


def chance_test(k: int, probs: Any) -> float:
    """Exact one-sided p that k or more of n items are right when item i is right with chance probs[i] (1/k_i).

    The binomial test when all chances are equal, the Poisson-binomial tail otherwise; nan when n == 0.
    """
    pv = _as_real(probs, "probs")
    n = int(pv.shape[0])
    if n == 0:
        return _NAN
    if np.all(pv == pv[0]):
        return binomial_test(k, n, float(pv[0]), alternative="greater")
    if not 0 <= int(k) <= n:
        raise ValueError(f"chance_test: need 0 <= k <= n, got k={k}, n={n}")
    return poisson_binomial_sf(k, pv)


# ---- released-code AUROC (index mode; issue 12 item 2) ----


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

# ---- inter-rater agreement (reader study: Cohen's and Fleiss' kappa with bootstrap intervals) ----

__all__ += ["cohen_kappa_interval", "fleiss_kappa", "fleiss_kappa_interval", "percent_agreement",
            "ratings_to_counts"]


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
    """Cohen's kappa of each (q, q) confusion table in a (B, q, q) stack; nan where chance agreement is total."""
    tot = obs.sum(axis=(1, 2))
    exp = obs.sum(axis=2)[:, :, None] * obs.sum(axis=1)[:, None, :] / np.where(tot > 0, tot, 1.0)[:, None, None]
    den = np.einsum("ij,bij->b", w, exp)
    num = np.einsum("ij,bij->b", w, obs)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, 1.0 - num / np.where(den > 0, den, 1.0), _NAN)


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

# ---- report audit: tokens, CAD, WAE, resampling, diversity, baselines (paper 002; DESIGN.md "Report audit") ----

#: English stop words (the NLTK list), removed before every association metric.
REPORT_STOP_WORDS = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his himself
she she's her hers herself it it's its itself they them their theirs themselves what which who whom this that
that'll these those am is are was were be been being have has had having do does did doing a an the and but if or
because as until while of at by for with about against between into through during before after above below to
from up down in out on off over under again further then once here there when where why how all any both each few
more most other some such no nor not only own same so than too very s t can will just don don't should should've
now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven
haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren
weren't won won't wouldn wouldn't""".split())  # noqa: SIM905

_REPORT_WORD = None  # compiled lazily (re)
CAD_CATEGORIES = ("erasure", "new_bias", "bias_flip", "preservation", "none")


def _word_pattern() -> Any:
    global _REPORT_WORD
    if _REPORT_WORD is None:
        import re

        _REPORT_WORD = re.compile(r"[a-z]+(?:['\-][a-z]+)*")
    return _REPORT_WORD


def report_tokens(text: str, stop_words: Any = REPORT_STOP_WORDS) -> list[str]:
    """Lowercase word tokens (letters, inner hyphens/apostrophes kept) without ``stop_words`` (None: keep all).

    >>> report_tokens("No focal consolidation. The x-ray is NORMAL.")
    ['focal', 'consolidation', 'x-ray', 'normal']
    """
    toks = _word_pattern().findall(text.lower())
    if stop_words:
        toks = [t for t in toks if t not in stop_words]
    return toks


def report_count_matrices(*corpora: Any, stop_words: Any = REPORT_STOP_WORDS) -> tuple[list[Any], list[str]]:
    """Sparse report x word count matrices (CSR, int64), one per corpus, over their shared vocabulary.

    The vocabulary is the union of the corpora's words after stop-word removal, sorted. Every later statistic
    (CAD, WAE, their bootstrap and permutation null) works on these counts: nothing is tokenised twice.

    >>> (A, B), vocab = report_count_matrices(["effusion effusion"], ["no effusion", "mastectomy"])
    >>> vocab, A.toarray().tolist(), B.toarray().tolist()
    (['effusion', 'mastectomy'], [[2, 0]], [[1, 0], [0, 1]])
    """
    from scipy import sparse

    index: dict[str, int] = {}
    parts = []
    for texts in corpora:
        ids: list[int] = []
        lens: list[int] = []
        for t in texts:
            toks = report_tokens(t, stop_words)
            ids.extend(index.setdefault(w, len(index)) for w in toks)
            lens.append(len(toks))
        parts.append((np.asarray(ids, dtype=np.int64), np.asarray(lens, dtype=np.int64)))
    vocab_unsorted = list(index)
    order = np.argsort(np.asarray(vocab_unsorted, dtype=object)) if vocab_unsorted else np.zeros(0, np.int64)
    rank = np.empty(len(vocab_unsorted), dtype=np.int64)
    rank[order] = np.arange(len(vocab_unsorted))
    V = len(vocab_unsorted)
    mats = []
    for ids, lens in parts:
        rows = np.repeat(np.arange(lens.shape[0]), lens)
        m = sparse.coo_matrix((np.ones(ids.shape[0], np.int64), (rows, rank[ids] if V else ids)),
                              shape=(lens.shape[0], V)).tocsr()
        m.sum_duplicates()
        mats.append(m)
    return mats, [vocab_unsorted[i] for i in order]


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
    its |z_disp| stays below about 0.9 at alpha = 0.1 and the gate can never flag its erasure: report both.

    >>> out = cad([30, 5, 5], [2, 5, 5], [5, 5, 5], [5, 5, 5], alpha=0.1)
    >>> out["category_ungated"].tolist(), bool(out["z_ref"][0] > 2)
    (['erasure', 'none', 'none'], True)
    """
    s_r, v_r, z_r = word_association(c_ref_f, c_ref_m, alpha)
    s_p, v_p, z_p = word_association(c_pred_f, c_pred_m, alpha)
    zd = (s_p - s_r) / np.sqrt(v_p + v_r)
    p = 2.0 * _sstats.norm.sf(np.abs(zd))
    q = benjamini_hochberg(p) if p.ndim == 1 else np.full(p.shape, np.nan)
    ungated = cad_category(z_r, z_p, z_neutral, z_strong)
    gated = ungated.copy()
    gated[~(q < p_star)] = "stable"
    return {"s_ref": s_r, "z_ref": z_r, "var_ref": v_r, "s_pred": s_p, "z_pred": z_p, "var_pred": v_p,
            "z_disp": zd, "p": p, "q": q, "category": gated, "category_ungated": ungated}


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


def template_diversity(texts: Any) -> float:
    """Share of unique reports (after lowercasing and collapsing whitespace); nan for an empty corpus.

    >>> template_diversity(["No acute disease.", "no  acute disease.", "Small effusion."])
    0.6666666666666666
    """
    norm = [" ".join(str(t).lower().split()) for t in texts]
    return len(set(norm)) / len(norm) if norm else _NAN


def type_token_ratio(texts: Any) -> float:
    """Corpus type-token ratio: distinct word tokens / all word tokens (lowercase, stop words kept).

    >>> type_token_ratio(["the heart is normal", "the lungs are clear"])   # 7 types / 8 tokens
    0.875
    """
    toks = [w for t in texts for w in report_tokens(str(t), None)]
    return len(set(toks)) / len(toks) if toks else _NAN


def _sample_indices(n: int, max_n: int | None, seed: int) -> np.ndarray:
    if max_n is None or n <= max_n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=max_n, replace=False))


def self_bleu(texts: Any, max_n: int | None = 1000, seed: int = 0) -> float:
    """Self-BLEU (Zhu et al. 2018): mean sentence BLEU of each report against all the others as references, as a
    fraction; identical to sacrebleu's ``BLEU(effective_order=True).sentence_score(h, others)`` per report (13a
    tokens, exponential smoothing, closest reference length), but each report's n-grams are extracted once and
    the clip count "max over the others" comes from each n-gram's two largest counts. Above ``max_n`` reports a
    seeded sample of ``max_n`` is used. nan below two reports. ``1 - self_bleu`` is the diversity reported.

    >>> round(self_bleu(["no acute disease", "no acute disease"]), 6)
    1.0
    """
    from sacrebleu.metrics import BLEU
    from sacrebleu.metrics.helpers import extract_all_word_ngrams

    t = [str(x) for x in texts]
    idx = _sample_indices(len(t), max_n, seed)
    n = int(idx.shape[0])
    if n < 2:
        return _NAN
    bleu = BLEU(effective_order=True)
    grams = []
    lens = np.empty(n, dtype=np.int64)
    top: dict[Any, list[int]] = {}  # ngram -> [max count, its owner, second max count]
    for j, i in enumerate(idx):
        g, L = extract_all_word_ngrams(bleu._preprocess_segment(t[i]), 1, bleu.max_ngram_order)
        grams.append(g)
        lens[j] = L
        for k, c in g.items():
            e = top.get(k)
            if e is None:
                top[k] = [c, j, 0]
            elif c > e[0]:
                e[2], e[0], e[1] = e[0], c, j
            elif c > e[2]:
                e[2] = c
    order_ = bleu.max_ngram_order
    scores = np.empty(n)
    for j in range(n):
        others = np.delete(lens, j)
        diff = np.abs(others - lens[j])
        best = diff.min()
        ref_len = int(others[diff == best].min())
        correct = [0] * order_
        total = [0] * order_
        for k, c in grams[j].items():
            o = len(k) - 1
            total[o] += c
            e = top[k]
            m = e[2] if e[1] == j else e[0]
            if m:
                correct[o] += min(c, m)
        scores[j] = bleu._compute_score_from_stats([int(lens[j]), ref_len] + correct + total).score
    return float(scores.mean()) / 100.0


def semantic_diversity(embeddings: Any, weights: Any = None) -> float:
    """1 - mean cosine similarity over all pairs of distinct reports, from one embedding row per distinct text
    and its multiplicity ``weights`` (None: 1 each). With unit rows e_u and S = sum_u m_u e_u, the sum over the
    n(n-1) ordered pairs is |S|^2 - n, so the cost is linear. nan below two reports.

    >>> round(semantic_diversity([[1.0, 0.0], [0.0, 1.0]], weights=[2, 1]), 6)   # pairs: 1 same, 2 orthogonal
    0.666667
    """
    E = np.asarray(embeddings, dtype=np.float64)
    if E.ndim != 2:
        raise ValueError(f"embeddings must be 2-D, got shape {E.shape}")
    m = np.ones(E.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    norms = np.linalg.norm(E, axis=1, keepdims=True)
    E = E / np.where(norms > 0, norms, 1.0)
    n = float(m.sum())
    if n < 2:
        return _NAN
    S = (m[:, None] * E).sum(axis=0)
    self_sim = float((m * (E * E).sum(axis=1)).sum())
    return 1.0 - (float(S @ S) - self_sim) / (n * (n - 1))


def corpus_bleu(hypotheses: Any, references: Any) -> float:
    """Corpus BLEU (sacrebleu defaults: 13a tokens, exponential smoothing) as a fraction; one reference each.

    >>> round(corpus_bleu(["the heart is normal in size"], ["the heart is normal in size"]), 6)
    1.0
    """
    import sacrebleu

    h = [str(x) for x in hypotheses]
    r = [str(x) for x in references]
    if len(h) != len(r):
        raise ValueError(f"{len(h)} hypotheses but {len(r)} references")
    if not h:
        return _NAN
    return float(sacrebleu.corpus_bleu(h, [r], force=True).score) / 100.0


def rouge_pair_scores(hypotheses: Any, references: Any) -> dict[str, np.ndarray]:
    """Per-pair ROUGE-1 and ROUGE-L F-measures (rouge-score, Porter stemming), ``hypotheses[i]`` against
    ``references[i]``.

    >>> rouge_pair_scores(["heart normal", "no effusion"], ["heart size normal", "no effusion"])["rouge1"]
    array([0.8, 1. ])
    """
    from rouge_score import rouge_scorer

    h = [str(x) for x in hypotheses]
    r = [str(x) for x in references]
    if len(h) != len(r):
        raise ValueError(f"{len(h)} hypotheses but {len(r)} references")
    sc = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    r1 = np.empty(len(h))
    rl = np.empty(len(h))
    for i, (a, b) in enumerate(zip(h, r)):
        s = sc.score(b, a)
        r1[i] = s["rouge1"].fmeasure
        rl[i] = s["rougeL"].fmeasure
    return {"rouge1": r1, "rougeL": rl}


def rouge_scores(hypotheses: Any, references: Any) -> dict[str, float]:
    """Mean ROUGE-1 and ROUGE-L F-measures (rouge-score, Porter stemming) over paired reports.

    >>> rouge_scores(["heart normal"], ["heart size normal"])["rouge1"]   # P 1, R 2/3
    0.8
    """
    per = rouge_pair_scores(hypotheses, references)
    if not per["rouge1"].shape[0]:
        return {"rouge1": _NAN, "rougeL": _NAN}
    return {k: float(v.mean()) for k, v in per.items()}


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

# ---- judge validation: z-consensus, weighted Kendall tau-b, bootstrap, leave-one-out (faithfulness) ----


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


# ---- clinical metrics (CheXbert / RadGraph) ----


def multilabel_f1_terms(y_true: Any, y_pred: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-case F1 terms of a multi-label task: ``num = 2·TP`` and ``den = 2·TP + FP + FN``, shape (n, k) each.

    F1 of label j over any set of cases is ``sum(num[:, j]) / sum(den[:, j])`` (= 2PR / (P + R)), so F1 over
    resampled cases is a ratio of resampled sums (:func:`case_bootstrap_ratios`). Inputs are 0/1 matrices,
    cases x labels, positive = 1.

    >>> num, den = multilabel_f1_terms([[1, 0]], [[1, 1]])
    >>> num.tolist(), den.tolist()
    ([[2.0, 0.0]], [[2.0, 1.0]])
    """
    T = np.asarray(y_true)
    P = np.asarray(y_pred)
    if T.ndim != 2 or P.ndim != 2:
        raise ValueError(f"y_true and y_pred must be 2-D (cases x labels), got shapes {T.shape} and {P.shape}")
    if T.shape != P.shape:
        raise ValueError(f"y_true and y_pred must have the same shape: {T.shape} != {P.shape}")
    for name, M in (("y_true", T), ("y_pred", P)):
        bad = ~np.isin(M, (0, 1))
        if bad.any():
            i, j = (int(v) for v in np.argwhere(bad)[0])
            raise ValueError(f"{name} must be 0/1; row {i}, column {j} is {M[i, j]!r}")
    t = T.astype(bool)
    p = P.astype(bool)
    tp = (t & p).astype(np.float64)
    fp = (~t & p).astype(np.float64)
    fn = (t & ~p).astype(np.float64)
    return 2.0 * tp, 2.0 * tp + fp + fn


def _f1_from_sums(num: np.ndarray, den: np.ndarray, zero_division: float) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den == 0.0, zero_division, num / np.where(den == 0.0, 1.0, den))


def multilabel_f1(y_true: Any, y_pred: Any, average: Literal["micro", "macro"] = "micro",
                  zero_division: float = 0.0) -> float:
    """Micro or macro F1 of 0/1 label matrices (cases x labels), as scikit-learn's ``f1_score`` on multilabel
    indicators (``average="micro"`` / ``"macro"``) and so as the ``f1chexbert`` package's classification report.

    micro: 2·ΣTP / (2·ΣTP + ΣFP + ΣFN) over all cells; macro: the unweighted mean of the per-label F1, a label
    with no positive in either matrix counting ``zero_division`` (0, scikit-learn's default).

    Example (hand-computed): labels (a, b, c), y_true = [[1, 0, 0], [1, 1, 0], [0, 0, 0]],
    y_pred = [[1, 1, 0], [0, 1, 0], [0, 1, 0]]. a: TP 1, FN 1 -> F1 = 2 / 3; b: TP 1, FP 2 -> F1 = 2 / 4;
    c: never positive -> 0. micro = 2·2 / (2·2 + 2 + 1) = 4 / 7 = 0.5714; macro = (2/3 + 1/2 + 0) / 3 = 0.3889.

    >>> t = [[1, 0, 0], [1, 1, 0], [0, 0, 0]]; p = [[1, 1, 0], [0, 1, 0], [0, 1, 0]]
    >>> round(multilabel_f1(t, p, "micro"), 4), round(multilabel_f1(t, p, "macro"), 4)
    (0.5714, 0.3889)
    """
    num, den = multilabel_f1_terms(y_true, y_pred)
    if average == "micro":
        return float(_f1_from_sums(np.asarray(num.sum()), np.asarray(den.sum()), zero_division))
    if average == "macro":
        if num.shape[1] == 0:
            return _NAN
        return float(_f1_from_sums(num.sum(axis=0), den.sum(axis=0), zero_division).mean())
    raise ValueError(f"average must be 'micro' or 'macro', got {average!r}")


def multilabel_f1_bootstrap(y_true: Any, y_pred: Any, B: int = 10_000, seed: int = 0, alpha: float = 0.05,
                            zero_division: float = 0.0, mode: Mode = "exact-counts") -> dict[str, Estimate]:
    """Micro and macro F1 (:func:`multilabel_f1`) with percentile bootstrap intervals over cases (rows).

    Each resample draws n cases with replacement (the same cases for both averages) and recomputes both F1s from
    the resampled sums of :func:`multilabel_f1_terms` (:func:`case_bootstrap_ratios`, ``mode`` as there); a
    label without a positive in a resample counts ``zero_division`` in the macro mean, as in the point
    estimate. Returns ``{"micro": Estimate, "macro": Estimate}`` (se = bootstrap SD).

    Example: the cases of :func:`multilabel_f1` give the points 4 / 7 and 7 / 18.

    >>> t = [[1, 0, 0], [1, 1, 0], [0, 0, 0]]; p = [[1, 1, 0], [0, 1, 0], [0, 1, 0]]
    >>> est = multilabel_f1_bootstrap(t, p, B=200)
    >>> round(est["micro"].point, 4), round(est["macro"].point, 4), est["micro"].n
    (0.5714, 0.3889, 3)
    """
    B = _check_B(B)
    num, den = multilabel_f1_terms(y_true, y_pred)
    n, k = num.shape
    how = f"bootstrap over cases ({mode}, B={B}, seed={seed})"
    if n == 0 or k == 0:
        nan_est = Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
        return {"micro": nan_est, "macro": nan_est}
    N = np.column_stack([num.sum(axis=1), num])
    D = np.column_stack([den.sum(axis=1), den])
    draws = case_bootstrap_ratios(N, D, B, seed, mode)  # nan where a resampled denominator is 0
    draws = np.where(np.isnan(draws), zero_division, draws)
    return {"micro": bootstrap_estimate(multilabel_f1(y_true, y_pred, "micro", zero_division), draws[:, 0], n,
                                        alpha, how),
            "macro": bootstrap_estimate(multilabel_f1(y_true, y_pred, "macro", zero_division),
                                        draws[:, 1:].mean(axis=1), n, alpha, how)}


def set_f1(hypothesis: Any, reference: Any) -> float:
    """F1 of two sets of hashable items as the ``radgraph`` package computes it: precision = |H ∩ R| / |H|
    (0 when H is empty), recall = |H ∩ R| / |R| (0 when R is empty), F1 = 2PR / (P + R) (0 when P + R = 0).

    >>> round(set_f1({"a", "b", "c"}, {"a", "b", "d", "e"}), 4)  # P = 2/3, R = 2/4
    0.5714
    """
    H = set(hypothesis)
    R = set(reference)
    common = len(H & R)
    precision = common / len(H) if H else 0.0
    recall = common / len(R) if R else 0.0
    return 2.0 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


RADGRAPH_LEVELS = ("simple", "partial", "complete")


def radgraph_items(entities: dict[str, Any], level: str) -> set[tuple[Any, ...]]:
    """The items a RadGraph reward compares, from one report's ``entities`` (RadGraph JSON:
    ``{id: {"tokens", "label", "relations": [[type, target_id], ...]}}``), as in Delbrouck et al. 2022 and the
    ``radgraph`` package 0.1.18 (``rewards.py``):

    * ``simple`` (RG_E): ``(tokens, label)`` per entity;
    * ``partial`` (RG_ER): ``(tokens, label)`` for an entity without relations, ``(tokens, label, True)`` for one
      with at least one relation;
    * ``complete`` (RG_ER-bar): ``(tokens, label)`` for an entity without relations; for one with relations,
      ``(tokens.lower(), label, relation_type, target_tokens.lower())`` per relation (the package lower-cases
      only these).

    >>> ents = {"1": {"tokens": "effusion", "label": "OBS-DP", "relations": [["located_at", "2"]]},
    ...         "2": {"tokens": "pleural", "label": "ANAT-DP", "relations": []}}
    >>> sorted(radgraph_items(ents, "complete"))
    [('effusion', 'OBS-DP', 'located_at', 'pleural'), ('pleural', 'ANAT-DP')]
    """
    out: set[tuple[Any, ...]] = set()
    for key, ent in entities.items():
        rels = ent.get("relations") or []
        if level == "simple" or not rels:
            out.add((ent["tokens"], ent["label"]))
        elif level == "partial":
            out.add((ent["tokens"], ent["label"], True))
        elif level == "complete":
            for rel in rels:
                target = entities.get(str(rel[1]))
                if target is None:
                    raise ValueError(f"entity {key!r} has a {rel[0]!r} relation to entity {rel[1]!r}, "
                                     "which is not in the report's entities")
                out.add((ent["tokens"].lower(), ent["label"], rel[0], target["tokens"].lower()))
        else:
            raise ValueError(f"level must be one of {RADGRAPH_LEVELS}, got {level!r}")
    return out


def radgraph_rewards(hypothesis: dict[str, Any], reference: dict[str, Any]) -> tuple[float, float, float]:
    """RadGraph F1 of one report pair at the three levels (simple = RG_E, partial = RG_ER, complete =
    RG_ER-bar): :func:`set_f1` of the :func:`radgraph_items` of the two ``entities`` dicts. As in the package,
    a pair where either report has no entity scores (0, 0, 0). RadGraph F1 of a corpus is the mean over pairs.

    Example (hand-computed): the hypothesis has effusion (OBS-DP) located_at lung (ANAT-DP) and pleural
    (ANAT-DP); the reference has effusion located_at pleural, pleural, and cardiomegaly (OBS-DP).
    simple: 2 of 3 entities shared each way -> 2/3; partial: effusion-with-a-relation and pleural shared ->
    2/3; complete: only (pleural, ANAT-DP) shared (the relation targets differ) -> P = R = 1/3, F1 = 1/3.

    >>> h = {"1": {"tokens": "effusion", "label": "OBS-DP", "relations": [["located_at", "3"]]},
    ...      "2": {"tokens": "pleural", "label": "ANAT-DP", "relations": []},
    ...      "3": {"tokens": "lung", "label": "ANAT-DP", "relations": []}}
    >>> r = {"1": {"tokens": "effusion", "label": "OBS-DP", "relations": [["located_at", "2"]]},
    ...      "2": {"tokens": "pleural", "label": "ANAT-DP", "relations": []},
    ...      "3": {"tokens": "cardiomegaly", "label": "OBS-DP", "relations": []}}
    >>> [round(v, 4) for v in radgraph_rewards(h, r)]
    [0.6667, 0.6667, 0.3333]
    """
    if not hypothesis or not reference:
        return (0.0, 0.0, 0.0)
    s, p, c = (set_f1(radgraph_items(hypothesis, lv), radgraph_items(reference, lv)) for lv in RADGRAPH_LEVELS)
    return (s, p, c)


# ---- clinical metrics (RaTEScore / GREEN) ----
# RaTEScore (Zhao et al., EMNLP 2024; released package ``RaTEScore`` 0.6.0, ``RaTEScore/utils.py::compute`` and
# ``scorer.py::compute_score``) and GREEN (Ostmeier et al. 2024; github.com/Stanford-AIMI/GREEN at d72c1951,
# ``green_score/green.py::compute_green``). The models that produce their inputs live in the reports suite's
# clinical adapters; here only the formulas, on arrays.

#: entity types of RaTE-NER; the negated finding types and the positive finding types they contradict
RATESCORE_TYPES = ("ABNORMALITY", "NON-ABNORMALITY", "DISEASE", "NON-DISEASE", "ANATOMY")
RATESCORE_NEGATED_TYPES = ("NON-ABNORMALITY", "NON-DISEASE")
RATESCORE_POSITIVE_TYPES = ("ABNORMALITY", "DISEASE")


def ratescore_penalty(types: Any, neg_weight: float) -> np.ndarray:
    """(T, T) multipliers of RaTEScore's negation penalty: ``neg_weight`` where one entity type is a negated
    finding (NON-ABNORMALITY, NON-DISEASE) and the other a positive finding (ABNORMALITY, DISEASE), in either
    order; 1 elsewhere (same polarity, or ANATOMY on either side).

    >>> ratescore_penalty(["ABNORMALITY", "NON-DISEASE", "ANATOMY"], 0.5).tolist()
    [[1.0, 0.5, 1.0], [0.5, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    names = [str(t).upper() for t in types]
    neg = np.array([t in RATESCORE_NEGATED_TYPES for t in names])
    pos = np.array([t in RATESCORE_POSITIVE_TYPES for t in names])
    clash = (neg[:, None] & pos[None, :]) | (pos[:, None] & neg[None, :])
    return np.where(clash, float(neg_weight), 1.0)


def _ratescore_inputs(emb: Any, types: Any, name: str, T: int) -> tuple[np.ndarray, np.ndarray]:
    E = np.asarray(emb, dtype=np.float64)
    t = np.asarray(types, dtype=np.int64).reshape(-1)
    if E.size == 0:
        return E.reshape(0, E.shape[-1] if E.ndim == 2 else 0), t[:0]
    if E.ndim != 2:
        raise ValueError(f"{name} embeddings must be 2-D (entities x dims), got shape {E.shape}")
    if t.shape[0] != E.shape[0]:
        raise ValueError(f"{name}: {E.shape[0]} embeddings but {t.shape[0]} types")
    if np.any((t < 0) | (t >= T)):
        bad = int(np.flatnonzero((t < 0) | (t >= T))[0])
        raise ValueError(f"{name} types[{bad}] = {int(t[bad])} is not a row of the {T} x {T} weight matrix")
    if not np.all(np.isfinite(E)):
        raise ValueError(f"{name} embeddings contain nan or inf")
    return E, t


def ratescore_match(emb_from: Any, types_from: Any, emb_to: Any, types_to: Any, weights: Any,
                    penalty: Any) -> float:
    """One direction of RaTEScore: each entity i of ``from`` is matched to its most cosine-similar entity j(i)
    of ``to`` (the first one on ties), and

        sum_i cos(i, j(i)) * W[t_i, t_j(i)] * P[t_i, t_j(i)] / sum_i W[t_i, t_j(i)]

    with W the type-pair weight (affinity) matrix and P the negation penalty (:func:`ratescore_penalty`); the
    penalty is in the numerator only, as released. 0 when the weights sum to 0; nan when either side has no
    entity (the caller applies the empty rule of :func:`ratescore`). A zero vector has cosine 0 with everything.

    >>> W = [[0.5, 0.2], [0.4, 0.1]]; P = [[1.0, 0.8], [0.8, 1.0]]
    >>> round(ratescore_match([[1, 0], [0, 1]], [0, 0], [[3, 4]], [1], W, P), 6)  # (.6*.2*.8 + .8*.2*.8) / .4
    0.56
    """
    Wm = np.asarray(weights, dtype=np.float64)
    Pm = np.asarray(penalty, dtype=np.float64)
    if Wm.ndim != 2 or Wm.shape[0] != Wm.shape[1] or Pm.shape != Wm.shape:
        raise ValueError(f"weights and penalty must be the same square (T, T) matrix, got {Wm.shape} and {Pm.shape}")
    T = Wm.shape[0]
    A, ta = _ratescore_inputs(emb_from, types_from, "from", T)
    Bm, tb = _ratescore_inputs(emb_to, types_to, "to", T)
    if A.shape[0] == 0 or Bm.shape[0] == 0:
        return _NAN
    if A.shape[1] != Bm.shape[1]:
        raise ValueError(f"embedding sizes differ: {A.shape[1]} (from) != {Bm.shape[1]} (to)")
    An = A / np.maximum(np.linalg.norm(A, axis=1, keepdims=True), 1e-12)
    Bn = Bm / np.maximum(np.linalg.norm(Bm, axis=1, keepdims=True), 1e-12)
    sim = An @ Bn.T
    j = np.argmax(sim, axis=1)
    best = sim[np.arange(sim.shape[0]), j]
    w = Wm[ta, tb[j]]
    den = float(w.sum())
    if den == 0.0:
        return 0.0
    return float((best * w * Pm[ta, tb[j]]).sum() / den)


def ratescore(hyp_emb: Any, hyp_types: Any, ref_emb: Any, ref_types: Any, weights: Any, penalty: Any,
              empty: float = 0.5) -> float:
    """RaTEScore of one report pair: the harmonic mean 2 P R / (P + R) of the two matching directions
    (:func:`ratescore_match` reference -> hypothesis and hypothesis -> reference); 0 when both are 0; ``empty``
    (0.5 in the released code) when either report has no entity.

    ``*_emb``: (entities, dims) entity embeddings; ``*_types``: each entity's row in the (T, T) ``weights``.

    Example (hand-computed): types 0 = ABNORMALITY, 1 = NON-ABNORMALITY, W = [[.5, .2], [.4, .1]], negation
    penalty .8 across the two types. Reference entities (1, 0) and (0, 1), both type 0; hypothesis entity
    (3, 4) of type 1 (cosines .6 and .8). Reference -> hypothesis: (.6 * .2 * .8 + .8 * .2 * .8) / (.2 + .2) =
    .56; hypothesis -> reference: the best match is (0, 1): .8 * .4 * .8 / .4 = .64; RaTEScore =
    2 * .56 * .64 / (.56 + .64) = .597333.

    >>> W = [[0.5, 0.2], [0.4, 0.1]]; P = [[1.0, 0.8], [0.8, 1.0]]
    >>> round(ratescore([[3, 4]], [1], [[1, 0], [0, 1]], [0, 0], W, P), 6)
    0.597333
    >>> ratescore([], [], [[1, 0]], [0], W, P)
    0.5
    """
    r = ratescore_match(ref_emb, ref_types, hyp_emb, hyp_types, weights, penalty)
    p = ratescore_match(hyp_emb, hyp_types, ref_emb, ref_types, weights, penalty)
    if math.isnan(r) or math.isnan(p):
        return float(empty)
    if p + r == 0.0:
        return 0.0
    return 2.0 * p * r / (p + r)


def green_scores(matched: Any, significant: Any) -> np.ndarray:
    """GREEN per report pair: matched / (matched + clinically significant errors), and 0 where the judge matched
    no finding (the released rule, whatever the error count). ``significant``: (n,) totals or (n, 6) counts of
    the error categories (a)-(f), summed per pair. Counts must be non-negative integers.

    >>> green_scores([3, 0, 2], [[1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]).tolist()
    [0.75, 0.0, 1.0]
    >>> green_scores([4], [2]).tolist()   # 4 / (4 + 2)
    [0.6666666666666666]
    """
    m = np.asarray(matched, dtype=np.float64).reshape(-1)
    s = np.asarray(significant, dtype=np.float64)
    if s.ndim == 2:
        s = s.sum(axis=1)
    s = s.reshape(-1)
    if s.shape[0] != m.shape[0]:
        raise ValueError(f"matched has {m.shape[0]} pairs but significant has {s.shape[0]}")
    for name, v in (("matched", m), ("significant", s)):
        bad = ~np.isfinite(v) | (v < 0) | (v != np.round(v))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name}[{i}] = {v[i]} is not a non-negative whole count")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(m > 0, m / np.where(m > 0, m + s, 1.0), 0.0)
