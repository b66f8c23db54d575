"""Comparisons of the grounding audit: paired bootstrap against text-only baselines and between all pairs,
subgroup permutation tests, Benjamini-Hochberg within declared families, and the robustness analyses
(resolution, prompt phrasing, cross-dataset rank agreement). Paper 000, Methods "Statistical analysis".

Families (one BH adjustment each):
``baseline:<probe_set>:<metric>:<baseline>`` every model against one text-only baseline on accuracy or UAR;
``pairs:<probe_set>:accuracy`` all model pairs; every paired accuracy test has an exact McNemar row beside it
(family ``<family>|mcnemar``); below 10 shared cases no test is made and the row says why; ``subgroups:<probe_set>:<model>`` the model's five subgroup
tests (CGR by sex, view and age; UAR by sex and age -- the five the paper's Table 2 reports).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit import stats
from medvlm_audit.results import COMPARISONS_COLUMNS
from medvlm_audit.suites.grounding.categories import Rate, categorize
from medvlm_audit.suites.grounding.metrics import (
    AGE_BINS,
    MISSING,
    NOT_ESTIMABLE,
    Options,
    Panel,
    Vec,
    model_vectors,
    rate_row,
)

__all__ = [
    "COMPARISON_COLUMNS",
    "ROBUSTNESS_COLUMNS",
    "SUBGROUP_TESTS",
    "adjust_families",
    "baseline_comparisons",
    "cross_dataset",
    "paired_row",
    "pairwise_comparisons",
    "prompt_robustness",
    "resolution_robustness",
    "subgroup_tests",
]

#: the shared comparisons schema (:data:`medvlm_audit.results.COMPARISONS_COLUMNS`) with grounding's ``statistic``
COMPARISON_COLUMNS = [*COMPARISONS_COLUMNS, "statistic"]
ROBUSTNESS_COLUMNS = ["probe_set", "kind", "model", "metric", "variant", "point", "ci_low", "ci_high", "n",
                      "parse_rate", "reference_point", "reference_n", "category", "reference_category", "changed",
                      "rho", "p", "n_models", "note"]
#: (metric, contrast) of the five per-model subgroup tests (paper Table 2).
SUBGROUP_TESTS: tuple[tuple[str, str], ...] = (("cgr", "sex"), ("cgr", "view"), ("cgr", "age"), ("uar", "sex"),
                                               ("uar", "age"))


def _clusters(panel: Panel, pos: np.ndarray, opts: Options) -> np.ndarray | None:
    return panel.patient[pos] if opts.cluster_by_patient else None


#: fewer shared cases than this: no paired test (the row says why); DESIGN.md "Comparisons"
MIN_PAIRED = 10


def paired_row(family: str, panel: Panel, metric: str, model_a: str, model_b: str, va: Vec, vb: Vec,
               opts: Options, subset: str = "all") -> dict[str, Any]:
    """Paired bootstrap of model_a minus model_b (points) on the cases eligible for both; no test (p = nan, the
    note says why) below ``MIN_PAIRED`` shared cases."""
    shared = va.elig & vb.elig
    pos = np.flatnonzero(shared)
    a = va.val[pos].astype(np.int8)
    b = vb.val[pos].astype(np.int8)
    row = {"family": family, "probe_set": panel.probe_set, "metric": metric, "subset": subset, "model_a": model_a,
           "model_b": model_b, "p_adj": np.nan, "n": int(pos.size), "test": "paired-bootstrap"}
    if pos.size < MIN_PAIRED:
        diff = 100.0 * (a.mean() - b.mean()) if pos.size else np.nan
        why = (NOT_ESTIMABLE if pos.size == 0 else
               f"no test: {pos.size} shared case(s), fewer than {MIN_PAIRED} (a bootstrap p on so few cases is "
               f"meaningless); {model_a} {100 * a.mean():.1f} vs {model_b} {100 * b.mean():.1f}")
        return {**row, "diff": diff, "sd": np.nan, "ci_low": np.nan, "ci_high": np.nan, "p": np.nan, "note": why,
                "statistic": diff}
    d = stats.paired_difference(a, b, B=opts.B, seed=opts.seed, mode=opts.mode, clusters=_clusters(panel, pos, opts))
    note = f"{model_a} {100 * a.mean():.1f} vs {model_b} {100 * b.mean():.1f} on shared cases"
    return {**row, "diff": 100.0 * d.diff, "sd": 100.0 * d.sd, "ci_low": 100.0 * d.ci_low,
            "ci_high": 100.0 * d.ci_high, "p": d.p, "note": note, "statistic": 100.0 * d.diff}


def mcnemar_row(boot_row: dict[str, Any], va: Vec, vb: Vec, opts: Options) -> dict[str, Any]:
    """Exact McNemar test beside a paired accuracy test, on the same shared cases; its own BH family
    (``<family>|mcnemar``) so the bootstrap family's adjustment is unchanged."""
    pos = np.flatnonzero(va.elig & vb.elig)
    a = va.val[pos].astype(np.int8)
    b = vb.val[pos].astype(np.int8)
    n10 = int(np.count_nonzero((a == 1) & (b == 0)))
    n01 = int(np.count_nonzero((a == 0) & (b == 1)))
    row = {**boot_row, "family": f"{boot_row['family']}|mcnemar", "test": "mcnemar-exact", "sd": np.nan,
           "ci_low": np.nan, "ci_high": np.nan, "p_adj": np.nan, "statistic": float(min(n10, n01))}
    if pos.size < MIN_PAIRED:
        return {**row, "p": np.nan, "note": boot_row["note"]}
    note = f"discordant pairs: {n10} only {boot_row['model_a']} correct, {n01} only {boot_row['model_b']} correct"
    if opts.cluster_by_patient:
        note += "; cases treated as independent (McNemar has no patient clustering)"
    return {**row, "p": stats.mcnemar_exact(a, b), "note": note}


def baseline_comparisons(panel: Panel, vecs: dict[str, dict[str, Vec]], baselines: Sequence[str],
                         opts: Options) -> list[dict[str, Any]]:
    """Accuracy (cases parsed by both) and UAR (cases correct on the original for both, swap parsed by both)
    of every other model against each baseline: one family per probe set x metric x baseline."""
    rows: list[dict[str, Any]] = []
    for base in baselines:
        if base not in panel.models:
            continue
        for metric in ("accuracy", "uar"):
            fam = f"baseline:{panel.probe_set}:{metric}:{base}"
            for m in panel.models:
                if m == base:
                    continue
                r = paired_row(fam, panel, metric, m, base, vecs[m][metric], vecs[base][metric], opts)
                rows.append(r)
                if metric == "accuracy":
                    rows.append(mcnemar_row(r, vecs[m][metric], vecs[base][metric], opts))
    return rows


def pairwise_comparisons(panel: Panel, vecs: dict[str, dict[str, Vec]], opts: Options) -> list[dict[str, Any]]:
    """Accuracy of every pair of models on the cases parsed by both: one family per probe set."""
    fam = f"pairs:{panel.probe_set}:accuracy"
    rows: list[dict[str, Any]] = []
    for a, b in combinations(panel.models, 2):
        r = paired_row(fam, panel, "accuracy", a, b, vecs[a]["accuracy"], vecs[b]["accuracy"], opts)
        rows.extend([r, mcnemar_row(r, vecs[a]["accuracy"], vecs[b]["accuracy"], opts)])
    return rows


def _contrast_groups(panel: Panel, contrast: str) -> np.ndarray:
    """Group label per case for a contrast (None where the case has no usable value)."""
    g = np.full(panel.n_cases, None, dtype=object)
    if contrast == "sex":
        ok = (panel.sex == "M") | (panel.sex == "F")
        g[ok] = panel.sex[ok]
    elif contrast == "view":
        ok = (panel.view == "PA") | (panel.view == "AP")
        g[ok] = panel.view[ok]
    elif contrast == "age":
        age = panel.age
        for name, lo, hi in AGE_BINS:
            g[np.isfinite(age) & (age >= lo) & (age < hi)] = name
    else:
        raise ValueError(f"unknown contrast {contrast!r}")
    return g


_ORDER = {"sex": ("M", "F"), "view": ("PA", "AP"), "age": tuple(n for n, _, _ in AGE_BINS)}


def subgroup_tests(panel: Panel, vecs: dict[str, dict[str, Vec]], opts: Options) -> list[dict[str, Any]]:
    """The five subgroup permutation tests per model (|difference of means| for two groups, one-way ANOVA F for
    the three age strata; 1,000 permutations; strata with < 2 cases dropped); one BH family per model."""
    groups = {c: _contrast_groups(panel, c) for c in ("sex", "view", "age")}
    rows: list[dict[str, Any]] = []
    for m in panel.models:
        fam = f"subgroups:{panel.probe_set}:{m}"
        for metric, contrast in SUBGROUP_TESTS:
            v = vecs[m][metric]
            g = groups[contrast]
            sel = v.elig & (g != None)
            pos = np.flatnonzero(sel)
            x = v.val[pos].astype(np.float64)
            gl = g[pos]
            res = stats.permutation_test(x, gl, B=opts.n_perm, seed=opts.seed, min_stratum=2)
            means = []
            for name in _ORDER[contrast]:
                mm = gl == name
                cnt = int(mm.sum())
                means.append(f"{name} {100 * x[mm].mean():.1f} (n = {cnt})" if cnt else f"{name}: no cases")
            two = contrast in ("sex", "view")
            diff = np.nan
            if two and len(res.groups) == 2:
                a_, b_ = _ORDER[contrast]
                diff = 100.0 * (x[gl == a_].mean() - x[gl == b_].mean())
            note = "; ".join(means)
            if opts.cluster_by_patient:
                note += "; permutation of cases, not of patients (ignores patient clustering)"
            if not math.isfinite(res.p):
                note = f"{res.note or NOT_ESTIMABLE}; {note}"
            elif res.dropped:
                note = f"{note}; {res.note.split(';')[0]}"
            rows.append({"family": fam, "probe_set": panel.probe_set, "metric": metric, "subset": contrast,
                         "model_a": m, "model_b": "", "diff": diff, "sd": np.nan, "ci_low": np.nan, "ci_high": np.nan,
                         "p": res.p, "p_adj": np.nan, "n": int(res.n),
                         "test": "permutation-|diff|" if two else "permutation-anova-F", "note": note,
                         "statistic": (100.0 * res.statistic if two else res.statistic)
                         if math.isfinite(res.statistic) else np.nan})
    return rows


def adjust_families(df: pd.DataFrame) -> pd.DataFrame:
    """Fill ``p_adj`` with Benjamini-Hochberg q-values computed within each family (nan p stays nan)."""
    if len(df) == 0:
        return df
    out = df.copy()
    p = out["p"].to_numpy(dtype=float)
    q = np.full(p.shape, np.nan)
    codes, _ = pd.factorize(out["family"])
    for c in range(codes.max() + 1):
        idx = np.flatnonzero(codes == c)
        q[idx] = stats.benjamini_hochberg(p[idx])
    out["p_adj"] = q
    return out


def _rrow(**kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {c: np.nan for c in ROBUSTNESS_COLUMNS}
    row.update({"model": "", "metric": "", "variant": "", "category": "", "reference_category": "", "note": "",
                "changed": None})
    row.update(kw)
    return row


def _spearman(x: Sequence[float], y: Sequence[float], opts: Options) -> tuple[float, float, str]:
    rho, p = stats.spearman_permutation(np.asarray(x, float), np.asarray(y, float), B=opts.B, seed=opts.seed)
    note = "descriptive rank agreement (Spearman, permutation p)"
    if not math.isfinite(rho):
        note = (f"not estimable ({len(x)} models with both values)" if len(x) < 3
                else "not estimable (a variable is constant across models)")
    return rho, p, note


def resolution_robustness(main: Panel, res_panel: Panel, main_rates: dict[str, dict[str, Rate]],
                          main_categories: dict[str, str], opts: Options) -> tuple[list[dict], list[dict], list[dict]]:
    """CGR at the probe resolution against the default per model, Spearman across models, category changes.

    Returns (robustness rows, comparison rows, metric rows with subset ``res=<px>``). The category at the probe
    resolution waives the 100-case minimum (the probe's cohorts are small by design) and falls back to the
    default-resolution UAR where no swap was run at the probe resolution.
    """
    ps, tag = main.probe_set, f"res={res_panel.resolution}"
    robust: list[dict] = []
    metrics: list[dict] = []
    xs, ys = [], []
    for i, m in enumerate(res_panel.models):
        v = model_vectors(res_panel, i, opts.is_denominator)
        rr: dict[str, dict[str, Any]] = {}
        for metric in ("accuracy", "parse_rate", "cgr", "uar", "is"):
            if metric == "uar" and "swap" not in res_panel.answers:
                continue
            x, pos = v[metric].take()
            row = rate_row(x, res_panel.patient[pos] if opts.cluster_by_patient else None, opts)
            rr[metric] = row
            metrics.append({"probe_set": ps, "model": m, "modality": res_panel.modality[m], "metric": metric,
                            "subset": tag, **row})
        ref = main_rates.get(m, {})
        cgr_ref = ref.get("cgr", Rate.from_row(None))
        cgr_r = Rate.from_row(rr["cgr"])
        uar_r = Rate.from_row(rr.get("uar")) if "uar" in rr and rr["uar"]["n"] else ref.get("uar", Rate.from_row(None))
        cat, reason = categorize(cgr_r, uar_r, Rate.from_row(rr["is"]), min_n=1)
        ref_cat = main_categories.get(m, "")
        robust.append(_rrow(probe_set=ps, kind="resolution", model=m, metric="cgr", variant=tag, point=cgr_r.point,
                            ci_low=cgr_r.ci_low, ci_high=cgr_r.ci_high, n=cgr_r.n,
                            parse_rate=rr["parse_rate"]["point"], reference_point=cgr_ref.point,
                            reference_n=cgr_ref.n, category=cat, reference_category=ref_cat,
                            changed=bool(ref_cat and cat != ref_cat),
                            note=f"{tag}: {reason} (100-case minimum waived; "
                                 f"{'UAR at this resolution' if 'uar' in rr and rr['uar']['n'] else 'UAR at 224'})"))
        if cgr_r.estimable and cgr_ref.estimable:
            xs.append(cgr_ref.point)
            ys.append(cgr_r.point)
    rho, p, note = _spearman(xs, ys, opts)
    robust.append(_rrow(probe_set=ps, kind="resolution", metric="cgr", variant=tag, rho=rho, p=p, n_models=len(xs),
                        note=f"CGR at 224 vs {tag} across models: {note}"))
    comps = [{"family": f"robustness:{ps}:resolution:cgr", "probe_set": ps, "metric": "cgr", "subset": tag,
              "model_a": "224", "model_b": str(res_panel.resolution), "diff": np.nan, "sd": np.nan, "ci_low": np.nan,
              "ci_high": np.nan, "p": p, "p_adj": np.nan, "n": len(xs), "test": "spearman-permutation",
              "note": f"rho = {rho:.3f} over {len(xs)} models; {note}" if math.isfinite(rho) else note,
              "statistic": rho}]
    return robust, comps, metrics


def prompt_robustness(main: Panel, variant_panels: Sequence[Panel], main_categories: dict[str, str],
                      opts: Options) -> tuple[list[dict], list[dict]]:
    """Parse rate and accuracy per prompt variant on the probe's cases (the default prompt restricted to the
    same cases as reference), and whether the image-use axis holds on the parsed subset: ignores-image models
    must keep UAR = 100, image users must stay below 100 (when the variant was also run with swaps)."""
    ps = main.probe_set
    robust: list[dict] = []
    metrics: list[dict] = []
    if not variant_panels:
        return robust, metrics
    # the default prompt restricted to the cases of the prompt probe
    # panels of one probe set share its case index: a case is in the probe if any variant answered it
    in_probe = np.zeros(main.n_cases, dtype=bool)
    for vp in variant_panels:
        if "original" in vp.answers and vp.n_cases == main.n_cases:
            in_probe |= (vp.answers["original"] != MISSING).any(axis=0)
    for i, m in enumerate(main.models):
        v = model_vectors(main, i, opts.is_denominator)
        for metric in ("parse_rate", "accuracy", "uar"):
            x, pos = v[metric].take(in_probe)
            metrics.append({"probe_set": ps, "model": m, "modality": main.modality[m], "metric": metric,
                            "subset": "prompt=default", **rate_row(x, _clusters(main, pos, opts), opts,
                                                                  label="default prompt on the prompt-probe cases")})
    for vp in variant_panels:
        tag = f"prompt={vp.prompt_variant}"
        for i, m in enumerate(vp.models):
            v = model_vectors(vp, i, opts.is_denominator)
            rr = {}
            for metric in ("parse_rate", "accuracy", "uar"):
                if metric == "uar" and "swap" not in vp.answers:
                    continue
                x, pos = v[metric].take()
                rr[metric] = rate_row(x, _clusters(vp, pos, opts), opts)
                metrics.append({"probe_set": ps, "model": m, "modality": vp.modality[m], "metric": metric,
                                "subset": tag, **rr[metric]})
            ref_cat = main_categories.get(m, "")
            uar = Rate.from_row(rr.get("uar"))
            axis, changed = "", None
            if uar.estimable:
                axis = "UAR = 100" if uar.k == uar.n else "UAR < 100"
                if ref_cat == "ignores_image":
                    changed = uar.k != uar.n
                elif ref_cat == "uses_image":
                    changed = uar.k == uar.n
            acc = rr["accuracy"]
            note = "" if acc["n"] >= 50 else f"accuracy on {acc['n']} parsed cases (< 50): do not interpret"
            if not uar.estimable:
                note = "; ".join(x for x in (note, "image-use axis not checkable (no parsed swap answers)") if x)
            robust.append(_rrow(probe_set=ps, kind="prompt", model=m, metric="accuracy", variant=tag,
                                point=acc["point"], ci_low=acc["ci_low"], ci_high=acc["ci_high"], n=acc["n"],
                                parse_rate=rr["parse_rate"]["point"], category=axis, reference_category=ref_cat,
                                changed=changed, note=note))
    return robust, metrics


def cross_dataset(rates: dict[str, dict[str, dict[str, Rate]]], modality: dict[str, str],
                  opts: Options) -> tuple[list[dict], list[dict]]:
    """Rank agreement of accuracy and UAR across probe sets (the first against each other): Spearman with a
    permutation p over the shared models, for all models and without vision-only probes."""
    robust: list[dict] = []
    comps: list[dict] = []
    names = list(rates)
    if len(names) < 2:
        return robust, comps
    first = names[0]
    for other in names[1:]:
        for metric in ("accuracy", "uar"):
            for scope in ("all models", "excluding vision_only"):
                shared = [m for m in rates[first] if m in rates[other]
                          and rates[first][m].get(metric, Rate.from_row(None)).estimable
                          and rates[other][m].get(metric, Rate.from_row(None)).estimable
                          and (scope == "all models" or modality.get(m) != "vision_only")]
                x = [rates[first][m][metric].point for m in shared]
                y = [rates[other][m][metric].point for m in shared]
                rho, p, note = _spearman(x, y, opts)
                robust.append(_rrow(probe_set=f"{first}|{other}", kind="cross_dataset", metric=metric,
                                    variant=scope, rho=rho, p=p, n_models=len(shared), note=note))
                comps.append({"family": f"cross_dataset:{first}|{other}:{metric}:{scope}", "probe_set": f"{first}|{other}",
                              "metric": metric, "subset": scope, "model_a": first, "model_b": other, "diff": np.nan,
                              "sd": np.nan, "ci_low": np.nan, "ci_high": np.nan, "p": p, "p_adj": np.nan,
                              "n": len(shared), "test": "spearman-permutation",
                              "note": (f"rho = {rho:.3f}; " if math.isfinite(rho) else "") + note, "statistic": rho})
    return robust, comps
