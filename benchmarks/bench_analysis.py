"""Benchmark of the grounding analysis on a paper-sized synthetic run, against a naive implementation.

Workload: 9 models x 2,575 cases x 4 conditions (700 boxed cases with both masks), 2 text-only baselines, a
99-case 512 px resolution probe and a 100-case prompt probe (terse, radiologist); all metrics with B = 10,000,
all baseline and pairwise comparisons, all subgroup permutation tests (1,000 permutations).

* fast: ``medvlm_audit.suites.grounding.analysis.analyse_grounding`` (exact-counts resampling, arrays per model).
* naive: the same metric set the way the paper's released code computes it: one wide DataFrame per model,
  DataFrame filtering per metric and subset, ``RandomState(0).randint(0, n, (B, n))`` index resampling for every
  proportion and paired difference, Python-loop permutation tests, a full index matrix for the AUROC bootstrap.

Each variant runs in its own subprocess with default thread settings; the figures are wall time, CPU time, peak
RSS (``ru_maxrss``) and, in a separate run, the tracemalloc peak of the analysis call. Usage::

    flock /tmp/bench.lock .venv/bin/python benchmarks/bench_analysis.py   # fast + naive (naive: ~2.5 minutes)
    .venv/bin/python benchmarks/bench_analysis.py --skip-naive --workers 1  # fast only, one resampling thread
    .venv/bin/python benchmarks/bench_analysis.py --B 2000   # a quicker look
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from itertools import combinations

import numpy as np
import pandas as pd

N_CASES, N_BOXED, N_RES, N_PROMPT = 2575, 700, 99, 100


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _table() -> pd.DataFrame:
    """The input table, read from the Parquet file the parent wrote (as ``report`` reads an exported run)."""
    return pd.read_parquet(os.environ["BENCH_TABLE"])


def _write_table(path: str) -> int:
    from medvlm_audit.suites.grounding.synthetic import paper_sized_run

    t = paper_sized_run(n_cases=N_CASES, n_boxed=N_BOXED, n_res512=N_RES, n_prompt=N_PROMPT)
    t.to_parquet(path, index=False)
    return len(t)


# ------------------------------------------------------------------------------------------------ fast


def child_fast(B: int, trace: bool, workers: int | None = None) -> dict:
    from medvlm_audit import stats
    from medvlm_audit.suites.grounding.analysis import analyse_grounding

    tidy = _table()
    gc.collect()
    rss_before = _rss_mb()
    spent = {"auroc_interval": 0.0, "auroc_interval_cpu": 0.0}
    orig = stats.case_bootstrap

    def timed(*a, **k):
        t, c = time.perf_counter(), time.process_time()
        try:
            return orig(*a, **k)
        finally:
            spent["auroc_interval"] += time.perf_counter() - t
            spent["auroc_interval_cpu"] += time.process_time() - c

    stats.case_bootstrap = timed  # the analysis calls it through the module attribute
    if trace:
        tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    res = analyse_grounding(tidy, B=B, workers=workers)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak_traced = tracemalloc.get_traced_memory()[1] / 2**20 if trace else None
    cats = dict(zip(res.categories.model, res.categories.category))
    return {"variant": "fast", "rows": len(tidy), "wall_s": wall, "cpu_s": cpu, "auroc_interval_s": spent["auroc_interval"],
            "auroc_interval_cpu_s": spent["auroc_interval_cpu"],
            "rss_before_mb": rss_before, "rss_peak_mb": _rss_mb(), "tracemalloc_peak_mb": peak_traced,
            "n_metric_rows": len(res.metrics), "n_comparisons": len(res.comparisons), "categories": cats}


# ------------------------------------------------------------------------------------------------ naive


def _boot_prop(x: np.ndarray, B: int) -> tuple:
    x = np.asarray(x, float)
    n = len(x)
    if n == 0:
        return (np.nan,) * 4
    idx = np.random.RandomState(0).randint(0, n, size=(B, n))
    bm = x[idx].mean(axis=1)
    return x.mean(), bm.std(ddof=1), np.percentile(bm, 2.5), np.percentile(bm, 97.5)


def _boot_paired(a: np.ndarray, b: np.ndarray, B: int) -> tuple:
    n = len(a)
    if n == 0:
        return (np.nan,) * 5
    idx = np.random.RandomState(0).randint(0, n, size=(B, n))
    d = a[idx].mean(axis=1) - b[idx].mean(axis=1)
    point = a.mean() - b.mean()
    p = max(float(np.mean(np.abs(d - point) >= abs(point))), 1.0 / B)
    return point, d.std(ddof=1), np.percentile(d, 2.5), np.percentile(d, 97.5), p


def _perm_test(groups: list[np.ndarray], n_perm: int = 1000) -> float:
    groups = [np.asarray(g, float) for g in groups if len(g) >= 2]
    if len(groups) < 2:
        return np.nan
    sizes = [len(g) for g in groups]
    pooled = np.concatenate(groups)
    k, N = len(groups), len(pooled)

    def stat(gs):
        if k == 2:
            return abs(gs[0].mean() - gs[1].mean())
        grand = pooled.mean()
        ssb = sum(len(g) * (g.mean() - grand) ** 2 for g in gs)
        ssw = sum(((g - g.mean()) ** 2).sum() for g in gs)
        return np.inf if ssw == 0 else (ssb / (k - 1)) / (ssw / (N - k))

    obs = stat(groups)
    rng = np.random.RandomState(0)
    c = 0
    for _ in range(n_perm):
        perm = rng.permutation(pooled)
        parts, s = [], 0
        for size in sizes:
            parts.append(perm[s:s + size])
            s += size
        c += stat(parts) >= obs
    return (c + 1) / (n_perm + 1)


def _bh(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p, float)
    out = p.copy()
    ok = ~np.isnan(p)
    v = p[ok]
    m = len(v)
    if not m:
        return out
    order = np.argsort(v)
    adj = v[order] * m / (np.arange(m) + 1)
    for i in range(m - 2, -1, -1):
        adj[i] = min(adj[i], adj[i + 1])
    res = np.empty(m)
    res[order] = np.minimum(adj, 1)
    out[ok] = res
    return out


def _auroc_boot(s: np.ndarray, y: np.ndarray, B: int) -> tuple:
    from scipy.stats import rankdata

    n = len(s)
    idx = np.random.RandomState(0).randint(0, n, size=(B, n))
    yy = y[idx]
    r = rankdata(s[idx], axis=1)
    n1 = yy.sum(1)
    n0 = n - n1
    with np.errstate(invalid="ignore", divide="ignore"):
        a = ((r * yy).sum(1) - n1 * (n1 + 1) / 2) / (n1 * n0)
    a = a[np.isfinite(a)]
    return np.percentile(a, 2.5), np.percentile(a, 97.5)


def _wide(tidy: pd.DataFrame, model: str, res: int = 224, variant: str = "default") -> pd.DataFrame:
    t = tidy[(tidy.model == model) & (tidy.resolution == res) & (tidy.prompt_variant == variant)]
    meta = t[t.condition == "original"][["case_id", "label", "has_box", "finding", "source", "sex", "view", "age",
                                         "confidence"]].set_index("case_id")
    wide = t.pivot_table(index="case_id", columns="condition", values="parsed", aggfunc="first")
    wide.columns = [f"pa_{c}" for c in wide.columns]
    return meta.join(wide)


def _naive_metrics(df: pd.DataFrame, B: int, per_subsets: bool = True) -> list:
    out = []
    o = df["pa_original"]
    parsed = o.isin([0, 1])
    corr = parsed & (o == df.label)

    def emit(name, mask, val):
        out.append((name, _boot_prop(val[mask].astype(float).to_numpy(), B)))

    emit("accuracy", parsed, corr)
    emit("sensitivity", parsed & (df.label == 1), o == 1)
    emit("specificity", parsed & (df.label == 0), o == 0)
    emit("parse_rate", o.notna(), parsed)
    for c in ("swap", "target_mask", "irrelevant_mask"):
        col = f"pa_{c}"
        if col in df:
            emit(f"parse_rate:{c}", df[col].notna(), df[col].isin([0, 1]))
    tm = df.get("pa_target_mask", pd.Series(np.nan, index=df.index))
    im = df.get("pa_irrelevant_mask", pd.Series(np.nan, index=df.index))
    sw = df.get("pa_swap", pd.Series(np.nan, index=df.index))
    cgr_m, cgr_v = corr & df.has_box & tm.isin([0, 1]), tm != o
    uar_m, uar_v = corr & sw.isin([0, 1]), sw == o
    emit("cgr", cgr_m, cgr_v)
    emit("uar", uar_m, uar_v)
    emit("is", corr & df.has_box & im.isin([0, 1]), im == o)
    emit("is_all", parsed & df.has_box & im.isin([0, 1]), im == o)
    both = cgr_m & im.isin([0, 1])
    out.append(("gsp", _boot_paired((tm != o)[both].astype(float).to_numpy(), (im != o)[both].astype(float).to_numpy(), B)))
    if not per_subsets:
        return out
    for src in sorted(df.source.dropna().unique()):
        sub = df.source == src
        emit(f"acc:{src}", parsed & sub, corr)
        emit(f"uar:{src}", uar_m & sub, uar_v)
        if (df.has_box & sub).any():
            emit(f"cgr:{src}", cgr_m & sub, cgr_v)
    for f in sorted(df.finding.dropna().unique()):
        sub = df.finding == f
        if (df.has_box & sub).any():
            emit(f"cgr:{f}", cgr_m & sub, cgr_v)
        emit(f"acc:{f}", parsed & sub, corr)
        emit(f"uar:{f}", uar_m & sub, uar_v)
    groups = {"sex=M": df.sex == "M", "sex=F": df.sex == "F", "view=PA": df.view == "PA", "view=AP": df.view == "AP",
              "age<50": df.age < 50, "age50-70": (df.age >= 50) & (df.age < 70), "age>70": df.age >= 70}
    for g, sub in groups.items():
        emit(f"acc:{g}", parsed & sub, corr)
        emit(f"uar:{g}", uar_m & sub, uar_v)
        if (df.has_box & sub).any():
            emit(f"cgr:{g}", cgr_m & sub, cgr_v)
    # calibration
    conf = df.confidence
    ok = parsed & conf.notna()
    out.append(("coverage", _boot_prop(ok[parsed].astype(float).to_numpy(), B)))
    s, y = conf[ok].to_numpy(float), df.label[ok].to_numpy(int)
    if ok.sum() and len(np.unique(s)) > 1 and 0 < y.sum() < len(y):
        out.append(("auroc", _auroc_boot(s, y, B)))
    # subgroup tests: CGR by sex/view/age, UAR by sex/age
    tests = []
    for mask, val in ((cgr_m, cgr_v), (uar_m, uar_v)):
        tests.append(_perm_test([val[mask & groups["sex=M"]].to_numpy(), val[mask & groups["sex=F"]].to_numpy()]))
        if mask is cgr_m:
            tests.append(_perm_test([val[mask & groups["view=PA"]].to_numpy(), val[mask & groups["view=AP"]].to_numpy()]))
        tests.append(_perm_test([val[mask & groups[a]].to_numpy() for a in ("age<50", "age50-70", "age>70")]))
    out.append(("subgroup_q", _bh(np.array(tests))))
    return out


def child_naive(B: int) -> dict:
    tidy = _table()
    gc.collect()
    rss_before = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    models = list(dict.fromkeys(tidy.model))
    modality = dict(zip(tidy.model, tidy.modality))
    wides = {m: _wide(tidy, m) for m in models}
    results = {m: _naive_metrics(wides[m], B) for m in models}
    # robustness subsets: 512 px and the prompt variants
    for m in models:
        results[m] += _naive_metrics(_wide(tidy, m, 512), B, per_subsets=False)
        for v in ("terse", "radiologist"):
            results[m] += _naive_metrics(_wide(tidy, m, 224, v), B, per_subsets=False)

    def series(m, kind):
        df = wides[m]
        o = df.pa_original
        ok = o.isin([0, 1])
        if kind == "accuracy":
            return (o == df.label)[ok].astype(float)
        ok = ok & (o == df.label) & df.pa_swap.isin([0, 1])
        return (df.pa_swap == o)[ok].astype(float)

    comps = []
    for base in [m for m in models if modality[m] == "text_only"]:
        for kind in ("accuracy", "uar"):
            ps = []
            for m in models:
                if m == base:
                    continue
                a, b = series(m, kind), series(base, kind)
                shared = a.index.intersection(b.index)
                ps.append(_boot_paired(a.loc[shared].to_numpy(), b.loc[shared].to_numpy(), B)[4])
            comps.append(_bh(np.array(ps)))
    ps = []
    for a, b in combinations(models, 2):
        sa, sb = series(a, "accuracy"), series(b, "accuracy")
        shared = sa.index.intersection(sb.index)
        ps.append(_boot_paired(sa.loc[shared].to_numpy(), sb.loc[shared].to_numpy(), B)[4])
    comps.append(_bh(np.array(ps)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n_est = sum(len(v) for v in results.values())
    return {"variant": "naive", "rows": len(tidy), "wall_s": wall, "cpu_s": cpu, "rss_before_mb": rss_before,
            "rss_peak_mb": _rss_mb(), "n_estimates": n_est, "n_comparison_families": len(comps)}


# ------------------------------------------------------------------------------------------------ driver


def _spawn(args: list[str], table: str) -> dict:
    env = dict(os.environ, BENCH_TABLE=table)  # default thread settings, as `medvlm-audit report` runs
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--B", type=int, default=10_000)
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--workers", type=int, default=None,
                    help="threads of the resampling kernels (default: the CPU count, at most 4)")
    ap.add_argument("--child", choices=["fast", "fast-trace", "naive"])
    a = ap.parse_args()
    if a.child:
        res = child_naive(a.B) if a.child == "naive" else child_fast(a.B, a.child == "fast-trace", a.workers)
        print(json.dumps(res))
        return
    import tempfile

    tmp = tempfile.mkdtemp(prefix="bench_analysis_")
    table = os.path.join(tmp, "tidy.parquet")
    n_rows = _write_table(table)
    print(f"paper-sized synthetic run ({n_rows} tidy rows): 9 models x {N_CASES} cases ({N_BOXED} boxed), res512 {N_RES} cases, "
          f"prompt probe {N_PROMPT} cases; B = {a.B}; resampling threads {a.workers or 'default'}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    wk = [] if a.workers is None else ["--workers", str(a.workers)]
    fast = _spawn(["--child", "fast", "--B", str(a.B), *wk], table)
    trace = _spawn(["--child", "fast-trace", "--B", str(a.B), *wk], table)
    print(f"fast : wall {fast['wall_s']:.2f} s, cpu {fast['cpu_s']:.2f} s "
          f"(of which stats.case_bootstrap, the AUROC/Brier/ECE/regime draws, {fast['auroc_interval_s']:.2f} s wall / "
          f"{fast['auroc_interval_cpu_s']:.2f} s cpu; without it {fast['wall_s'] - fast['auroc_interval_s']:.2f} s wall / "
          f"{fast['cpu_s'] - fast['auroc_interval_cpu_s']:.2f} s cpu), peak RSS {fast['rss_peak_mb']:.0f} MB "
          f"(after reading the input table {fast['rss_before_mb']:.0f} MB), tracemalloc peak of the analysis "
          f"{trace['tracemalloc_peak_mb']:.0f} MB; {fast['n_metric_rows']} metric rows, {fast['n_comparisons']} comparisons")
    print(f"       categories: {fast['categories']}")
    if not a.skip_naive:
        naive = _spawn(["--child", "naive", "--B", str(a.B)], table)
        print(f"naive: wall {naive['wall_s']:.2f} s, cpu {naive['cpu_s']:.2f} s, peak RSS {naive['rss_peak_mb']:.0f} MB "
              f"(after reading the input table {naive['rss_before_mb']:.0f} MB); {naive['n_estimates']} estimates")
        print(f"ratio naive / fast: wall {naive['wall_s'] / fast['wall_s']:.1f}x, cpu {naive['cpu_s'] / fast['cpu_s']:.1f}x; "
              f"excluding stats.case_bootstrap from fast: wall "
              f"{naive['wall_s'] / max(fast['wall_s'] - fast['auroc_interval_s'], 1e-9):.1f}x")


if __name__ == "__main__":
    main()
