"""Resampling kernels: index draws (the released code's RandomState stream) and exact-counts draws in fixed seeded blocks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from medvlm_audit.cpus import usable_cpus

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


#: default number of worker threads of the fast kernels (numpy's draws, sorts and gathers release the GIL);
#: 4, as the report's worker processes (``report.parallel.MAX_WORKERS``, measured there).
_MAX_WORKERS = 4


def _draw_dtype(n: int) -> type[np.signedinteger[Any]]:
    """Smallest integer type holding positions 0..n-1: fewer random bits per draw and a faster sort."""
    return np.int16 if n < (1 << 15) else np.int32 if n < (1 << 31) else np.int64


def _chunk_rows(n: int) -> int:
    """Resamples per cache-sized chunk of a fast kernel."""
    return max(1, min(_BLOCK_ROWS, _CACHE_ELEMS // max(n, 1)))


def _workers(workers: int | None, tasks: int) -> int:
    """Threads to use: ``workers`` (None: the CPU count, at most _MAX_WORKERS), never more than the tasks."""
    if workers is None:
        workers = min(usable_cpus(), _MAX_WORKERS)
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

