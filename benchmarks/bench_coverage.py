"""Coverage of the 95% intervals produced by medvlm_audit.stats.

One proportion: exact coverage of ``rate_interval`` (the interval printed for every single rate) over the grid
n in {10 ... 1000} x p in {0.01 ... 0.99}, summed over the binomial (no simulation), beside the bare percentile
bootstrap and Wilson. Paired and clustered settings: by simulation. For each such setting, draw data from a known truth, call the library function, and count how often the interval
contains the truth. Target: 93-97% (Monte-Carlo SE of a 95% coverage over 2,000 simulations is 0.49 points).

Usage:  .venv/bin/python benchmarks/bench_coverage.py [--sims 2000] [--B 2000] [--seed 1]

Resampling: exact-counts mode with B resamples per simulation (default 2,000 rather than the reporting
default 10,000, to keep the run to a couple of minutes; B only adds Monte-Carlo noise to each endpoint, it does
not change what the percentile interval converges to).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from scipy.stats import binom

from medvlm_audit.stats import (
    RATE_WILSON_EVENTS,
    paired_difference,
    proportion,
    rate_interval,
    wilson_interval,
)

#: the grid of DESIGN.md / issue 21 on which rate_interval must cover (>= 0.90 per cell, 0.94-0.97 on average)
NS = (10, 20, 30, 40, 50, 75, 100, 200, 500, 1000)
PS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.95, 0.98, 0.99)
# paired settings: n, P(a=1,b=0), P(a=0,b=1), P(a=1,b=1)
PAIRED = (
    (100, 0.10, 0.10, 0.50),
    (100, 0.15, 0.05, 0.50),
    (300, 0.05, 0.02, 0.60),
    (300, 0.20, 0.10, 0.30),
    (1000, 0.03, 0.01, 0.80),
    (1000, 0.10, 0.10, 0.40),
    (2575, 0.08, 0.05, 0.70),
)
# clustered: n_patients, cases per patient, mean p, between-patient SD of p (Beta)
CLUSTERED = ((100, 3, 0.7, 0.25), (300, 4, 0.5, 0.3))


def _flag(cov: float) -> str:
    return "" if 0.93 <= cov <= 0.97 else (" <" if cov < 0.93 else " >")


def _boot_interval(k: int, n: int, B: int) -> tuple[float, float]:
    b = np.random.default_rng(0).binomial(n, k / n, size=B) / n
    lo, hi = np.percentile(b, [2.5, 97.5])
    return float(lo), float(hi)


def exact_coverage(n: int, interval) -> list[float]:
    """Coverage at each p of PS, summed over the binomial: the interval of every count k = 0..n is computed once
    (seed 0, so the bootstrap endpoints are fixed functions of (k, n)); no simulation."""
    bounds = np.array([interval(k, n) for k in range(n + 1)])
    ks = np.arange(n + 1)
    out = []
    for p in PS:
        pmf = binom.pmf(ks, n, p)
        out.append(float(pmf[(bounds[:, 0] <= p) & (p <= bounds[:, 1])].sum()))
    return out


def proportions(B: int) -> list[str]:
    notes = []
    print("\n## One proportion: exact coverage of the 95% interval (%), summed over the binomial")
    print(f"rate_interval (Wilson where min(k, n-k) < {RATE_WILSON_EVENTS}, else the exact-counts percentile bootstrap, "
          f"B = {B}, seed 0) / bare percentile bootstrap / Wilson; target: >= 90 in every cell, 94-97 on average\n")
    print("| n | " + " | ".join(f"p={p:g}" for p in PS) + " |")
    print("|" + "---|" * (1 + len(PS)))
    allc = {"rate_interval": [], "percentile bootstrap": [], "Wilson": []}
    for n in NS:
        cr = exact_coverage(n, lambda k, m: rate_interval(k, m, B=B))
        cb = exact_coverage(n, lambda k, m: _boot_interval(k, m, B))
        cw = exact_coverage(n, wilson_interval)
        allc["rate_interval"] += cr
        allc["percentile bootstrap"] += cb
        allc["Wilson"] += cw
        cells = [f"**{100 * r:.1f}**{_flag(r)} / {100 * b:.1f} / {100 * w:.1f}" for r, b, w in zip(cr, cb, cw)]
        print(f"| {n} | " + " | ".join(cells) + " |")
        for p, r in zip(PS, cr):
            if r < 0.90:
                notes.append(f"rate_interval covers {100 * r:.1f}% < 90 at n={n}, p={p:g}")
    print("\n| interval | min over the grid | mean over the grid | cells < 90 | cells < 93 |")
    print("|---|---|---|---|---|")
    for name, cs in allc.items():
        a = np.array(cs)
        print(f"| {name} | {100 * a.min():.1f} | {100 * a.mean():.1f} | {int((a < 0.90).sum())} | "
              f"{int((a < 0.93).sum())} |")
    return notes


def paired(sims: int, B: int, rng: np.random.Generator) -> None:
    print("\n## Paired difference: coverage (%) of the 95% percentile interval, and size of the p-value")
    print(f"{sims} simulations per row, B = {B}; Wald = d +- 1.96 sqrt((p10 + p01 - d^2)/n) for comparison;")
    print("'reject' = share of simulations with shift-and-reflect p < 0.05 (the type-I error rate when d = 0)\n")
    print("| n | p10 | p01 | true d | bootstrap | Wald | reject (p<0.05) |")
    print("|---|---|---|---|---|---|---|")
    for n, p10, p01, p11 in PAIRED:
        d_true = p10 - p01
        probs = [p11, p10, p01, 1 - p11 - p10 - p01]
        counts = rng.multinomial(n, probs, size=sims)
        hit_b = hit_w = rej = 0
        for s, (c11, c10, c01, c00) in enumerate(counts):
            a = np.repeat(np.array([1, 1, 0, 0], np.int8), [c11, c10, c01, c00])
            b = np.repeat(np.array([1, 0, 1, 0], np.int8), [c11, c10, c01, c00])
            r = paired_difference(a, b, B=B, seed=s, mode="exact-counts")
            hit_b += r.ci_low <= d_true <= r.ci_high
            rej += r.p < 0.05
            q10, q01 = c10 / n, c01 / n
            d = q10 - q01
            se = math.sqrt(max(q10 + q01 - d * d, 0.0) / n)
            hit_w += d - 1.96 * se <= d_true <= d + 1.96 * se
        cb, cw = hit_b / sims, hit_w / sims
        print(f"| {n} | {p10:g} | {p01:g} | {d_true:+.2f} | {100 * cb:.1f}{_flag(cb)} | {100 * cw:.1f}{_flag(cw)} "
              f"| {100 * rej / sims:.1f} |")


def clustered(sims: int, B: int, rng: np.random.Generator) -> None:
    print("\n## Clustered cases (several cases per patient): iid vs cluster bootstrap, coverage (%)")
    print(f"{sims} simulations per row, B = {B}; patient p ~ Beta with the given mean and SD; truth = mean p\n")
    print("| patients | cases/patient | mean p | SD of patient p | iid bootstrap | cluster bootstrap |")
    print("|---|---|---|---|---|---|")
    for k, m, mu, sd in CLUSTERED:
        conc = mu * (1 - mu) / sd**2 - 1
        al, be = mu * conc, (1 - mu) * conc
        cl = np.repeat(np.arange(k), m)
        hit_i = hit_c = 0
        for s in range(sims):
            pp = rng.beta(al, be, size=k)
            x = (rng.random(k * m) < pp[cl]).astype(np.int8)
            ei = proportion(x, B=B, seed=s)
            ec = proportion(x, B=B, seed=s, clusters=cl)
            hit_i += ei.ci_low <= mu <= ei.ci_high
            hit_c += ec.ci_low <= mu <= ec.ci_high
        ci, cc = hit_i / sims, hit_c / sims
        print(f"| {k} | {m} | {mu:g} | {sd:g} | {100 * ci:.1f}{_flag(ci)} | {100 * cc:.1f}{_flag(cc)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--B", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--B-rate", type=int, default=10_000, help="B of rate_interval in the exact grid (reporting default)")
    ap.add_argument("--rates-only", action="store_true", help="only the exact one-proportion grid")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    notes = proportions(args.B_rate)
    t1 = time.perf_counter()
    if not args.rates_only:
        paired(args.sims, args.B, rng)
    t2 = time.perf_counter()
    if not args.rates_only:
        clustered(args.sims, args.B, rng)
    t3 = time.perf_counter()
    print("\nNotes:")
    if notes:
        for s in notes:
            print(f"- {s}")
    else:
        print("- rate_interval covers >= 90% in every cell of the grid")
    print(f"\ntime: proportions {t1 - t0:.1f} s, paired {t2 - t1:.1f} s, clustered {t3 - t2:.1f} s, "
          f"total {t3 - t0:.1f} s")


if __name__ == "__main__":
    main()
