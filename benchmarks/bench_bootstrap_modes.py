"""Time and peak memory of the bootstrap modes of medvlm_audit.stats against the released code's one-shot index.

proportion + paired_difference on n = 2,575 cases, B = 10,000 resamples, in
  exact-counts (binomial / multinomial counts), index (chunked RandomState stream), and
  naive one-shot (the released code: idx = RandomState(0).randint(0, n, (B, n)); values[idx].mean(1)).
Prints best-of-R wall time, peak traced memory (tracemalloc; numpy reports its buffers to it), ratios against the
naive baseline, and checks that index mode is bit-identical to the naive one.

Usage:  .venv/bin/python benchmarks/bench_bootstrap_modes.py [--n 2575] [--B 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from medvlm_audit.stats import paired_difference, proportion


def naive_proportion(x: np.ndarray, B: int, seed: int = 0) -> tuple[float, float, float]:
    """Released code (Inference/stats_utils.py bootstrap_proportion), one-shot index matrix."""
    values = np.asarray(x, dtype=float)
    rng = np.random.RandomState(seed)
    idx = rng.randint(0, len(values), size=(B, len(values)))
    boot = values[idx].mean(axis=1)
    return float(boot.std(ddof=1)), float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))


def naive_paired(a: np.ndarray, b: np.ndarray, B: int, seed: int = 0) -> tuple[float, float, float, float]:
    """Released code (paired_bootstrap_diff), one-shot index matrix, shift-and-reflect p."""
    va, vb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n = len(va)
    rng = np.random.RandomState(seed)
    idx = rng.randint(0, n, size=(B, n))
    point = float(va.mean() - vb.mean())
    boot = va[idx].mean(axis=1) - vb[idx].mean(axis=1)
    p = max(float(np.mean(np.abs(boot - point) >= abs(point))), 1.0 / B)
    return float(boot.std(ddof=1)), float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5)), p


def measure(fn: Callable[[], object], repeats: int) -> tuple[float, float, object]:
    """Best-of-``repeats`` wall time (s) and peak traced memory (MiB) of one extra call."""
    best = float("inf")
    out = None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return best, peak / 2**20, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2575)
    ap.add_argument("--B", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    n, B, R = args.n, args.B, args.repeats
    rng = np.random.default_rng(0)
    a = (rng.random(n) < 0.72).astype(np.int8)
    b = np.where(rng.random(n) < 0.85, a, 1 - a).astype(np.int8)

    rows = []
    for label, fp, fd in (
        ("exact-counts", lambda: proportion(a, B=B, mode="exact-counts"),
         lambda: paired_difference(a, b, B=B, mode="exact-counts")),
        ("index (chunked)", lambda: proportion(a, B=B, mode="index"),
         lambda: paired_difference(a, b, B=B, mode="index")),
        ("naive one-shot (released code)", lambda: naive_proportion(a, B), lambda: naive_paired(a, b, B)),
    ):
        tp, mp, op = measure(fp, R)
        td, md, od = measure(fd, R)
        rows.append((label, tp, mp, td, md, op, od))

    base = rows[-1]
    print(f"n = {n}, B = {B}, best of {R}; peak = tracemalloc peak of one call; ratio = naive time / mode time\n")
    print("| mode | proportion s | peak MiB | paired_difference s | peak MiB | speed-up vs naive (prop / paired) "
          "| memory ratio naive/mode (prop / paired) |")
    print("|---|---|---|---|---|---|---|")
    for label, tp, mp, td, md, _, _ in rows:
        print(f"| {label} | {tp:.4f} | {mp:.1f} | {td:.4f} | {md:.1f} | {base[1] / tp:.1f}x / {base[3] / td:.1f}x "
              f"| {base[2] / mp:.1f}x / {base[4] / md:.1f}x |")

    ex_p, ix_p, nv_p = rows[0][5], rows[1][5], rows[2][5]
    ex_d, ix_d, nv_d = rows[0][6], rows[1][6], rows[2][6]
    same_p = (ix_p.boot_sd, ix_p.ci_low, ix_p.ci_high) == nv_p
    same_d = (ix_d.sd, ix_d.ci_low, ix_d.ci_high, ix_d.p) == nv_d
    print(f"\nindex mode bit-identical to the naive one-shot code: proportion {same_p}, paired {same_d}")
    print("\nresults (fractions):")
    print(f"  proportion  point {ex_p.point:.6f}  analytic se {ex_p.se:.6f}")
    print(f"    exact-counts boot sd {ex_p.boot_sd:.6f}  CI [{ex_p.ci_low:.6f}, {ex_p.ci_high:.6f}]")
    print(f"    index        boot sd {ix_p.boot_sd:.6f}  CI [{ix_p.ci_low:.6f}, {ix_p.ci_high:.6f}]")
    print(f"  paired diff {ex_d.diff:+.6f}")
    print(f"    exact-counts sd {ex_d.sd:.6f}  CI [{ex_d.ci_low:+.6f}, {ex_d.ci_high:+.6f}]  p {ex_d.p:.4g}")
    print(f"    index        sd {ix_d.sd:.6f}  CI [{ix_d.ci_low:+.6f}, {ix_d.ci_high:+.6f}]  p {ix_d.p:.4g}")


if __name__ == "__main__":
    main()
