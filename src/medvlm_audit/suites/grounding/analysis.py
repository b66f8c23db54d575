"""The grounding analysis: from a tidy run table to the paper's tables (paper 000; DESIGN.md "Grounding audit").

``analyse_grounding(tidy)`` computes, per probe set and model, accuracy, sensitivity, specificity, parse rate,
CGR, UAR, IS (default denominator and the all-parsed Eq. 8 version, labelled), GSP, the image-contingent
fraction, per-finding / per-source / subgroup rates, confidence by regime and calibration; the deterministic
categories with reasons and their threshold sweep; paired comparisons against text-only baselines and between
all pairs with Benjamini-Hochberg per declared family; subgroup permutation tests; resolution, prompt and
cross-dataset robustness; and a plain-language verdict per model. Main metrics use resolution 224 and the
default prompt. Nothing here raises on degenerate data: such cells carry a note instead of a number.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import numpy as np
import pandas as pd

from medvlm_audit import stats
from medvlm_audit.health import ASSESSABLE_PARSE_RATE  # the floor every suite shares (DESIGN.md)
from medvlm_audit.results import METRICS_COLUMNS
from medvlm_audit.suites.grounding.categories import (
    SUPPORT_DRAWS,
    SWEEP_THRESHOLDS,
    Rate,
    categorize,
    category_support,
    support_weights,
    threshold_sweep,
    verdict,
)
from medvlm_audit.suites.grounding.comparisons import (
    COMPARISON_COLUMNS,
    ROBUSTNESS_COLUMNS,
    adjust_families,
    baseline_comparisons,
    cross_dataset,
    pairwise_comparisons,
    prompt_robustness,
    resolution_robustness,
    subgroup_tests,
)
from medvlm_audit.suites.grounding.metrics import (
    AnalysisInputError,
    Options,
    build_panels,
    calibration_draws,
    calibration_rows,
    model_rate_rows,
    model_vectors,
)

__all__ = ["CATEGORY_COLUMNS", "METRIC_COLUMNS", "GroundingAnalysis", "analyse_grounding"]

#: forked workers for the models' rate rows (``workers=None``): the paper-sized run's 0.36 CPU-s over 4 finish
#: beside the calibration draws (1.5 CPU-s in up to 8 threads), and each further fork of this process (~250 MB,
#: the run's table in it) costs its main thread ~5 ms of CPU, more in a sandbox (8 workers started in 0.035-0.042
#: CPU-s, 4 in 0.020-0.021)
RATE_ROW_WORKERS = 4

#: the shared long metrics schema (:data:`medvlm_audit.results.METRICS_COLUMNS`; ``suite`` is added by the report
#: writer) with grounding's ``modality`` after ``model`` and its ``k`` and ``ci_method`` at the end
METRIC_COLUMNS = [*METRICS_COLUMNS[1:3], "modality", *METRICS_COLUMNS[3:], "k", "ci_method"]
CATEGORY_COLUMNS = ["probe_set", "model", "modality", "category", "support", "reason", "cgr", "cgr_low", "cgr_high", "n_cgr",
                    "uar", "uar_low", "uar_high", "n_uar", "is_", "is_low", "is_high", "n_is", "accuracy", "acc_low",
                    "acc_high", "n_acc", "gsp", "sweep_stable"]
MAIN_RESOLUTION, MAIN_PROMPT = 224, "default"


@dataclass
class GroundingAnalysis:
    """Everything the grounding report shows (tables as DataFrames, verdicts, a JSON-able summary).

    Beyond the shared schema: ``metrics.k`` (count of ones of a rate), ``metrics.ci_method`` (how the interval
    was made: "wilson" where min(k, n - k) < 10 (stats.rate_interval), "bootstrap-percentile",
    "paired-bootstrap-percentile" or "none"),
    ``comparisons.statistic`` (the test
    statistic: difference in points, F, or rho), ``categories.sweep_stable`` (same category for every sweep
    threshold). Extra subsets: ``condition=<cond>`` (parse rate per condition) and ``prompt=default`` (the default
    prompt on the prompt-probe cases, the reference of the prompt variants).
    """

    metrics: pd.DataFrame
    comparisons: pd.DataFrame
    categories: pd.DataFrame
    threshold_sweep: pd.DataFrame
    robustness: pd.DataFrame
    verdicts: dict[str, str]
    summary: dict[str, Any] = field(default_factory=dict)


def _json(v: Any) -> Any:
    """JSON-able copy: numpy scalars to Python, NaN / inf to None."""
    if isinstance(v, dict):
        return {str(k): _json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else None
    return v


def _main_rates(rows: list[dict[str, Any]]) -> dict[str, dict[str, Rate]]:
    """model -> metric -> Rate for the subset "all" rows."""
    out: dict[str, dict[str, Rate]] = {}
    for r in rows:
        if r["subset"] == "all" and r["unit"] == "%":
            out.setdefault(r["model"], {})[r["metric"]] = Rate.from_row(r)
    return out


#: the conditions each metric reads (parse-rate rows read none: they are the parse rate)
METRIC_CONDITIONS: dict[str, tuple[str, ...]] = {
    "accuracy": ("original",), "sensitivity": ("original",), "specificity": ("original",),
    "cgr": ("original", "target_mask"), "uar": ("original", "swap"), "is": ("original", "irrelevant_mask"),
    "is_all_parsed": ("original", "irrelevant_mask"), "gsp": ("original", "target_mask", "irrelevant_mask"),
    "image_contingent": ("original", "swap"), "no_image_accuracy": ("no_image",),
    "auroc": ("original",), "brier": ("original",), "ece": ("original",), "confidence_coverage": ("original",),
    "conf_grounded_correct": ("original", "target_mask"), "conf_ungrounded_correct": ("original", "target_mask"),
    "conf_incorrect": ("original",), "conf_ungrounded_correct_boxed": ("original", "target_mask"),
}


def parse_rates(vecs: dict[str, Any]) -> dict[str, float]:
    """Condition -> parse rate (share of asked cases with a parsed answer) of one model on a main panel."""
    out = {}
    for cond, key in (("original", "parse_rate"), *((c, f"parse_rate:{c}") for c in
                                                    ("swap", "target_mask", "irrelevant_mask", "no_image"))):
        v = vecs.get(key)
        if v is not None and v.elig.any():
            out[cond] = float(v.val[v.elig].mean())
    return out


def not_assessable_note(rates: dict[str, float], conds: tuple[str, ...]) -> str:
    """'not assessable (parse rate 12.0% under swap)' when a condition of ``conds`` is below 50%, else ''."""
    bad = [f"{100 * rates[c]:.1f}% under {c}" for c in conds if c in rates and rates[c] < ASSESSABLE_PARSE_RATE]
    return f"not assessable (parse rate {', '.join(bad)})" if bad else ""


def _mark_not_assessable(rows: list[dict[str, Any]], rates: dict[str, float]) -> None:
    """Blank the point and interval of every row whose metric reads a condition the model mostly did not parse."""
    for r in rows:
        note = not_assessable_note(rates, METRIC_CONDITIONS.get(r["metric"], ()))
        if note and r.get("n"):  # n = 0 rows already say "not estimable"
            r.update(point=np.nan, se=np.nan, ci_low=np.nan, ci_high=np.nan, ci_method="none",
                     note=f"{note}; {r['note']}" if r.get("note") else note)


def _mark_comparisons_not_assessable(rows: list[dict[str, Any]], prates: dict[str, dict[str, float]]) -> None:
    """Blank a comparison (difference, interval, p) when either model is not assessable for its metric."""
    for r in rows:
        conds = METRIC_CONDITIONS.get(str(r.get("metric")), ())
        notes = [f"{m}: {n}" for m in dict.fromkeys((r.get("model_a"), r.get("model_b")))
                 if m in prates and (n := not_assessable_note(prates[m], conds))]
        if notes:
            r.update(diff=np.nan, sd=np.nan, ci_low=np.nan, ci_high=np.nan, p=np.nan, statistic=np.nan,
                     note="; ".join(notes) + (f"; {r['note']}" if r.get("note") else ""))


def _support_counts(vec: dict[str, Any]):
    """counts(w) for :func:`category_support`: weighted (k*, n*) of CGR, UAR and IS under case weights w."""
    names = ("cgr", "uar", "is")
    # the six 0/1 columns (k, n of each rate) as one float matrix: one BLAS product per weight matrix instead of
    # six integer ones; exact, as every sum is an integer far below 2**53
    cols = np.stack([c for name in names for c in (vec[name].elig & vec[name].val.astype(bool), vec[name].elig)],
                    axis=1).astype(np.float64)

    def counts(w: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        s = (np.asarray(w, dtype=np.float64) @ cols).astype(np.int64)  # no copy of float64 weights
        return {name: (s[:, 2 * j], s[:, 2 * j + 1]) for j, name in enumerate(names)}

    return counts


def _support_matrix(n_cases: int, seed: int) -> np.ndarray | None:
    """The category-support bootstrap's case weights (:func:`support_weights`) as float64; None without cases."""
    return support_weights(n_cases, SUPPORT_DRAWS, seed).astype(np.float64) if n_cases else None


def analyse_grounding(tidy: pd.DataFrame, *, B: int = 10_000, seed: int = 0,
                      mode: Literal["exact-counts", "index"] = "exact-counts",
                      is_denominator: Literal["correct", "all"] = "correct", cluster_by_patient: bool = False,
                      baselines: list[str] | None = None, workers: int | None = None) -> GroundingAnalysis:
    """Run the full grounding analysis on a tidy run table (schema of ``medvlm_audit.api.tidy``).

    ``mode``: bootstrap resampling ("exact-counts", or "index": the released code's draws over the cases in the
    probe set's own row order, its bootstrap interval at every n and its AUROC, so the intervals equal the
    released code's);
    ``is_denominator``: "correct" (correct-on-original boxed cases, the paper's Table 1) or "all" (Eq. 8);
    ``baselines``: models compared against (default: every text-only model); ``workers``: threads of the
    resampling kernels (the results do not depend on it). Raises AnalysisInputError on a
    malformed table (naming the row / column) or an unknown baseline.
    """
    if mode not in ("exact-counts", "index"):
        raise ValueError(f"mode must be 'exact-counts' or 'index', got {mode!r}")
    if is_denominator not in ("correct", "all"):
        raise ValueError(f"is_denominator must be 'correct' or 'all', got {is_denominator!r}")
    opts = Options(B=int(B), seed=int(seed), mode=mode, is_denominator=is_denominator,
                   cluster_by_patient=bool(cluster_by_patient), workers=workers)
    panels, notes = build_panels(tidy, file_order=mode == "index")
    all_models: list[str] = []
    modality: dict[str, str] = {}
    for p in panels.values():
        for m in p.models:
            if m not in modality:
                all_models.append(m)
                modality[m] = p.modality[m]
    if baselines is None:
        base = [m for m in all_models if modality[m] == "text_only"]
    else:
        unknown = [b for b in baselines if b not in modality]
        if unknown:
            raise AnalysisInputError(f"baseline(s) {unknown} are not models of this run; models: {all_models}")
        base = list(baselines)

    probe_sets = list(dict.fromkeys(k[0] for k in panels))
    metric_rows: list[dict[str, Any]] = []
    comp_rows: list[dict[str, Any]] = []
    robust_rows: list[dict[str, Any]] = []
    cat_rows: list[dict[str, Any]] = []
    sweep_rows: list[dict[str, Any]] = []
    rates_by_ps: dict[str, dict[str, dict[str, Rate]]] = {}
    verdict_parts: dict[str, list[tuple[str, str, int]]] = {}
    ps_info: dict[str, Any] = {}

    for ps in probe_sets:
        main = panels.get((ps, MAIN_RESOLUTION, MAIN_PROMPT))
        if main is None:
            notes.append(f"probe set {ps!r} has no rows at resolution {MAIN_RESOLUTION} with the default prompt: "
                         f"no main metrics")
            continue
        answered = sorted(c for c, a in main.answers.items() if (a != -2).any())
        for cond in ("original", "swap", "target_mask", "irrelevant_mask"):
            if cond not in answered:
                notes.append(f"probe set {ps!r}: condition {cond!r} absent; metrics that need it are not estimable")
        n_boxed = int(main.has_box.sum())
        ps_info[ps] = {"n_cases": main.n_cases, "n_boxed": n_boxed,
                       "n_ibox_overlaps": int((main.has_box & main.ibox_overlaps).sum()),
                       "models": list(main.models), "conditions": answered}
        vecs = {m: model_vectors(main, i, opts.is_denominator) for i, m in enumerate(main.models)}
        # each model's rate rows in forked worker processes (their bootstraps are seeded per row: the same rows in
        # any process), forked before the calibration threads start (a fork beside running threads is unsafe), so
        # that they run beside the calibration resampling and the comparisons; in this process with one worker,
        # one CPU or other threads running (then when collected below)
        from medvlm_audit.cpus import usable_cpus
        from medvlm_audit.report.parallel import map_forked

        rate_workers = opts.workers if opts.workers is not None else min(usable_cpus(), RATE_ROW_WORKERS)
        rate_rows = map_forked([partial(model_rate_rows, main, i, opts, vecs[m]) for i, m in enumerate(main.models)],
                               workers=1 if threading.active_count() > 1 else rate_workers, warm=False)
        # the calibration resampling (numpy kernels that release the GIL) runs in a thread while this one
        # computes what does not need it: parse rates, the support weights and the paired comparisons
        with ThreadPoolExecutor(max_workers=2) as pool:
            calib_job = pool.submit(calibration_draws, main, range(len(main.models)), opts,
                                    {i: vecs[m] for i, m in enumerate(main.models)})
            # the shared case weights as float64 once (their counts come from one BLAS product per model); numpy's
            # multinomial draws release the GIL
            sup_job = pool.submit(_support_matrix, main.n_cases, opts.seed)
            prates = {m: parse_rates(vecs[m]) for m in main.models}
            ps_comps = (baseline_comparisons(main, vecs, [b for b in base if b in main.models], opts)
                        + pairwise_comparisons(main, vecs, opts) + subgroup_tests(main, vecs, opts))
            sup_w = sup_job.result()
            calib = calib_job.result()
        # a model's metric rows: its rate rows, then its calibration rows (model_metric_rows)
        rows_ps: list[dict[str, Any]] = []
        for i, (m, mrows) in enumerate(zip(main.models, rate_rows())):
            mrows = mrows + calibration_rows(main, i, opts, vecs[m], calib[i])
            _mark_not_assessable(mrows, prates[m])
            rows_ps.extend(mrows)
        metric_rows.extend(rows_ps)
        rates = _main_rates(rows_ps)
        rates_by_ps[ps] = rates
        gsp = {r["model"]: r["point"] for r in rows_ps if r["metric"] == "gsp" and r["subset"] == "all"}
        cats: dict[str, str] = {}
        for m in main.models:
            r = rates[m]
            cgr, uar, is_, acc = r["cgr"], r["uar"], r["is"], r["accuracy"]
            na = not_assessable_note(prates[m], ("original",))
            cat, reason = categorize(cgr, uar, is_, not_assessable=na)
            sweep = threshold_sweep(cgr, uar, is_, not_assessable=na)
            support = category_support(_support_counts(vecs[m]), main.n_cases, cat, seed=opts.seed, weights=sup_w)
            cats[m] = cat
            cat_rows.append({"probe_set": ps, "model": m, "modality": main.modality[m], "category": cat,
                             "support": support, "reason": reason, "cgr": cgr.point, "cgr_low": cgr.ci_low, "cgr_high": cgr.ci_high,
                             "n_cgr": cgr.n, "uar": uar.point, "uar_low": uar.ci_low, "uar_high": uar.ci_high,
                             "n_uar": uar.n, "is_": is_.point, "is_low": is_.ci_low, "is_high": is_.ci_high,
                             "n_is": is_.n, "accuracy": acc.point, "acc_low": acc.ci_low, "acc_high": acc.ci_high,
                             "n_acc": acc.n, "gsp": gsp.get(m, np.nan),
                             "sweep_stable": len({c for _, c in sweep}) == 1})
            sweep_rows.extend({"probe_set": ps, "model": m, "threshold": t, "category": c} for t, c in sweep)
            v = vecs[m]
            n_edited = int((v["cgr"].elig | v["uar"].elig | v["is"].elig).sum())
            if acc.n == 0:
                text = (f"no parsed answer on the original image ({r['parse_rate'].n} asked): not assessable"
                        if r["parse_rate"].n else "no answers on the original image: not assessable")
            else:
                text = verdict(cat, reason, cgr, uar, is_, acc.n, n_edited)
            verdict_parts.setdefault(m, []).append((ps, text, n_boxed))
        _mark_comparisons_not_assessable(ps_comps, prates)
        comp_rows.extend(ps_comps)
        for (ps2, res, var), pnl in panels.items():
            if ps2 == ps and var == MAIN_PROMPT and res != MAIN_RESOLUTION:
                rb, cp, mr = resolution_robustness(main, pnl, rates, cats, opts)
                robust_rows.extend(rb)
                comp_rows.extend(cp)
                metric_rows.extend(mr)
        variants = [pnl for (ps2, res, var), pnl in panels.items()
                    if ps2 == ps and res == MAIN_RESOLUTION and var != MAIN_PROMPT]
        if variants:
            rb, mr = prompt_robustness(main, variants, cats, opts)
            robust_rows.extend(rb)
            metric_rows.extend(mr)
    rb, cp = cross_dataset(rates_by_ps, modality, opts)
    robust_rows.extend(rb)
    comp_rows.extend(cp)

    metrics = pd.DataFrame(metric_rows, columns=METRIC_COLUMNS)
    comparisons = adjust_families(pd.DataFrame(comp_rows, columns=COMPARISON_COLUMNS))
    categories = pd.DataFrame(cat_rows, columns=CATEGORY_COLUMNS)
    sweep_df = pd.DataFrame(sweep_rows, columns=["probe_set", "model", "threshold", "category"])
    robustness = pd.DataFrame(robust_rows, columns=ROBUSTNESS_COLUMNS)

    verdicts: dict[str, str] = {}
    for m, parts in verdict_parts.items():
        if len(parts) == 1:
            verdicts[m] = parts[0][1]
        else:
            # lead with the probe set that has the most boxed cases (where all three interventions apply)
            parts = sorted(parts, key=lambda t: -t[2])
            verdicts[m] = " | ".join(f"{ps}: {text}" for ps, text, _ in parts)

    key: dict[str, Any] = {}
    for row in metric_rows:
        if row["subset"] == "all" and row["metric"] in ("accuracy", "cgr", "uar", "is", "is_all_parsed", "gsp"):
            key.setdefault(row["probe_set"], {}).setdefault(row["model"], {})[row["metric"]] = {
                "point": row["point"], "ci_low": row["ci_low"], "ci_high": row["ci_high"], "n": row["n"],
                "note": row["note"]}
    run_ids = []
    if isinstance(tidy, pd.DataFrame) and "run_id" in tidy.columns:
        run_ids = [str(x) for x in pd.unique(tidy["run_id"].dropna())]
    summary = {
        "run_ids": run_ids,
        "probe_sets": ps_info,
        "models": {m: modality[m] for m in all_models},
        "baselines": base,
        "categories": {ps: {r["model"]: r["category"] for r in cat_rows if r["probe_set"] == ps} for ps in ps_info},
        "key_metrics": key,
        "is_denominator": ("correct-on-original boxed cases with a parsed irrelevant-mask answer (paper Table 1)"
                           if is_denominator == "correct"
                           else "all boxed cases parsed under original and irrelevant mask (Eq. 8)"),
        "is_denominator_option": is_denominator,
        "resampling": {"mode": mode, "B": opts.B, "seed": opts.seed, "permutations": opts.n_perm,
                       "cluster_by_patient": opts.cluster_by_patient,
                       "rate_interval": ("released percentile bootstrap at every n (index mode)" if mode == "index"
                                         else f"stats.rate_interval: Wilson where min(k, n - k) < "
                                              f"{stats.RATE_WILSON_EVENTS}, percentile bootstrap elsewhere")},
        "category_rule": {"ignores_image": "CGR = 0, UAR = 100, IS = 100, each on >= 100 cases",
                          "unstable": "IS's 95% interval lies entirely below 70",
                          "uses_image": "CGR's 95% interval excludes 0 and IS's interval lies entirely above 70, "
                                        "with IS >= 90",
                          "indeterminate": "anything else, with the reason",
                          "not_assessable": f"parse rate on the original image below "
                                            f"{100 * ASSESSABLE_PARSE_RATE:g}%",
                          "support": f"share of {SUPPORT_DRAWS} case-resampling draws (every rate and interval "
                                     f"recomputed) that give the same category",
                          "threshold_sweep": f"one IS threshold T in {list(SWEEP_THRESHOLDS)}: unstable below T, "
                                             f"uses image at or above T (paper Supplementary Table 13)"},
        "families": sorted(set(comparisons["family"])) if len(comparisons) else [],
        "main_setting": {"resolution": MAIN_RESOLUTION, "prompt_variant": MAIN_PROMPT},
        "notes": notes,
    }
    return GroundingAnalysis(metrics=metrics, comparisons=comparisons, categories=categories,
                             threshold_sweep=sweep_df, robustness=robustness, verdicts=verdicts,
                             summary=_json(summary))
