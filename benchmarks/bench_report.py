"""Benchmark: render the full grounding report for a paper-sized, 9-model synthetic analysis (target: <= 15 s).

Builds a GroundingAnalysis-shaped object that follows the shared schema (9 models x 2,575 cases: every metric and
subset, every baseline / pairwise / subgroup comparison, a 41-step threshold sweep), then times
  1. building all figures, 2. rendering them to inline SVG and assembling the page, 3. write_report end to end,
and, as the in-script baseline, the same figures rendered as 110-dpi PNG (Agg raster, base64-embedded).

Run: .venv/bin/python benchmarks/bench_report.py [--repeats 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.findings import MS_CXR_FINDINGS
from medvlm_audit.report import build_figures, figure_title, figure_to_html, write_report
from medvlm_audit.report.html import render_report_html

PS = "mimic"
N_CASES = 2575
#: model -> (modality, category, accuracy, cgr, uar, is) shaped after the paper's Table 1.
MODELS: dict[str, tuple[str, str, float, float, float, float]] = {
    "Gemma-4-26B": ("multimodal", "uses_image", 66.2, 32.4, 78.0, 97.5),
    "GPT-5": ("multimodal", "uses_image", 62.0, 27.0, 75.4, 96.8),
    "Qwen3-VL-32B": ("multimodal", "uses_image", 61.0, 18.0, 80.0, 98.0),
    "MedGemma-1.5-4B": ("multimodal", "uses_image", 56.4, 12.0, 82.1, 97.9),
    "RAD-DINO": ("vision_only", "uses_image", 58.8, 6.4, 79.0, 99.5),
    "LLaVA-Med-7B": ("multimodal", "ignores_image", 50.1, 0.0, 100.0, 100.0),
    "MedGemma-27B-text": ("text_only", "ignores_image", 60.1, 0.0, 100.0, 100.0),
    "DeepSeek-R1-7B": ("text_only", "ignores_image", 52.3, 0.0, 100.0, 100.0),
    "Mistral-Small-4-119B": ("multimodal", "unstable", 53.0, 40.0, 85.0, 59.9),
}


@dataclass
class SyntheticAnalysis:
    metrics: pd.DataFrame
    comparisons: pd.DataFrame
    categories: pd.DataFrame
    threshold_sweep: pd.DataFrame
    robustness: pd.DataFrame
    verdicts: dict[str, str]
    summary: dict[str, Any] = field(default_factory=dict)


def _rate(rng: np.random.RandomState, model: str, metric: str, subset: str, p: float, n: int,
          note: str = "") -> dict[str, Any]:
    mod = MODELS[model][0]
    if n <= 0:
        return {"probe_set": PS, "model": model, "modality": mod, "metric": metric, "subset": subset, "point": math.nan,
                    "se": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": 0, "unit": "%", "method": "bootstrap-percentile",
                    "note": "not estimable (n = 0)"}
    k = rng.binomial(n, min(1.0, max(0.0, p / 100)))
    ph = k / n
    se = math.sqrt(ph * (1 - ph) / n)
    return {"probe_set": PS, "model": model, "modality": mod, "metric": metric, "subset": subset, "point": 100 * ph,
                "se": 100 * se, "ci_low": 100 * max(0.0, ph - 1.96 * se), "ci_high": 100 * min(1.0, ph + 1.96 * se), "n": n,
                "unit": "%", "method": "wilson" if n < 30 else "bootstrap-percentile",
                "note": "Wilson interval (n < 30)" if n < 30 else note}


def _prob(model: str, metric: str, value: float, n: int, note: str = "") -> dict[str, Any]:
    if not math.isfinite(value):
        return {"probe_set": PS, "model": model, "modality": MODELS[model][0], "metric": metric, "subset": "all",
                    "point": math.nan, "se": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": n, "unit": "prob",
                    "method": "bootstrap-percentile", "note": note}
    return {"probe_set": PS, "model": model, "modality": MODELS[model][0], "metric": metric, "subset": "all", "point": value,
                "se": 0.01, "ci_low": value - 0.02, "ci_high": value + 0.02, "n": n, "unit": "prob", "method": "bootstrap-percentile",
                "note": ""}


def synthetic_analysis(seed: int = 0) -> SyntheticAnalysis:
    """A paper-sized analysis following /tmp/schemas.md: ~1,000 metric rows, ~120 comparisons, 9 models."""
    rng = np.random.RandomState(seed)
    rows: list[dict[str, Any]] = []
    cats: list[dict[str, Any]] = []
    for model, (mod, cat, acc, cgr, uar, is_) in MODELS.items():
        n_correct = int(N_CASES * acc / 100)
        n_box = int(n_correct * 0.45)
        base = {
            "accuracy": (acc, N_CASES), "sensitivity": (acc + 8, N_CASES // 2), "specificity": (acc - 8, N_CASES // 2),
            "parse_rate": (99.0, N_CASES), "cgr": (cgr, n_box), "uar": (uar, n_correct), "is": (is_, n_box),
            "is_all_parsed": (is_, int(N_CASES * 0.45)), "image_contingent": (100 - uar, n_correct),
            "no_image_accuracy": (acc - 3, N_CASES),
        }
        rec = {k: _rate(rng, model, k, "all", p, n) for k, (p, n) in base.items()}
        rows.extend(rec.values())
        gsp = rec["cgr"]["point"] - (100 - rec["is"]["point"])
        rows.append(dict(rec["cgr"], metric="gsp", point=gsp, se=2.0, ci_low=gsp - 4, ci_high=gsp + 4, unit="pp"))
        degenerate = model == "DeepSeek-R1-7B"
        for metric, v in (("auroc", 0.62), ("brier", 0.24), ("ece", 0.35)):
            rows.append(_prob(model, metric, math.nan if degenerate else v + rng.uniform(-0.05, 0.05), N_CASES,
                              "N/A (degenerate confidence)" if degenerate else ""))
        rows.append(_prob(model, "confidence_coverage", 0.98, N_CASES))
        for metric, v in (("conf_grounded_correct", 0.95), ("conf_ungrounded_correct", 0.6), ("conf_incorrect", 0.55)):
            empty = metric == "conf_grounded_correct" and cat == "ignores_image"
            rows.append(_prob(model, metric, math.nan if empty else v, 0 if empty else 120,
                              "not estimable (n = 0)" if empty else ""))
        for f in MS_CXR_FINDINGS:
            n = 0 if (model == "RAD-DINO" and f == "edema") else int(rng.randint(8, 90))
            rows.append(_rate(rng, model, "cgr", f"finding={f}", cgr * rng.uniform(0, 2), n))
        for sub in ("sex=M", "sex=F", "view=PA", "view=AP", "age=<50", "age=50-70", "age=>70"):
            for metric, p, n in (("cgr", cgr, n_box // 2), ("uar", uar, n_correct // 2), ("accuracy", acc, N_CASES // 2)):
                rows.append(_rate(rng, model, metric, sub, p * rng.uniform(0.8, 1.2), n))
        for metric, p, n in (("cgr", cgr, n_box), ("uar", uar, n_correct), ("is", is_, n_box),
                             ("accuracy", acc, N_CASES), ("parse_rate", 98.0, N_CASES)):
            rows.append(_rate(rng, model, metric, "res=512", p * rng.uniform(0.9, 1.1), n))
        for sub in ("prompt=terse", "prompt=radiologist"):
            rows.append(_rate(rng, model, "parse_rate", sub, rng.uniform(30, 100), 100))
            rows.append(_rate(rng, model, "accuracy", sub, acc, 100))
        cats.append({"probe_set": PS, "model": model, "modality": mod, "category": cat, "reason": f"rule applied: {cat}",
                         "cgr": rec["cgr"]["point"], "cgr_low": rec["cgr"]["ci_low"], "cgr_high": rec["cgr"]["ci_high"],
                         "n_cgr": rec["cgr"]["n"], "uar": rec["uar"]["point"], "uar_low": rec["uar"]["ci_low"],
                         "uar_high": rec["uar"]["ci_high"], "n_uar": rec["uar"]["n"], "is_": rec["is"]["point"],
                         "is_low": rec["is"]["ci_low"], "is_high": rec["is"]["ci_high"], "n_is": rec["is"]["n"],
                         "accuracy": rec["accuracy"]["point"], "acc_low": rec["accuracy"]["ci_low"],
                         "acc_high": rec["accuracy"]["ci_high"], "n_acc": rec["accuracy"]["n"], "gsp": gsp})
    metrics = pd.DataFrame(rows)
    categories = pd.DataFrame(cats)

    comp: list[dict[str, Any]] = []

    def c(family: str, metric: str, a: str, b: str, subset: str = "all", test: str = "paired-bootstrap") -> None:
        d = rng.normal(0, 6)
        p = float(min(1.0, math.exp(-abs(d) / 2)))
        comp.append({"family": family, "probe_set": PS, "metric": metric, "subset": subset, "model_a": a, "model_b": b, "diff": d,
                         "sd": 1.2, "ci_low": d - 2.4, "ci_high": d + 2.4, "p": p, "p_adj": min(1.0, p * 1.5), "n": N_CASES,
                         "test": test, "note": ""})

    baselines = [m for m, v in MODELS.items() if v[0] == "text_only"]
    for b in baselines:
        for m in MODELS:
            if m != b:
                c(f"baseline:{PS}:accuracy:{b}", "accuracy", m, b)
                if MODELS[m][0] != "text_only":
                    c(f"baseline:{PS}:uar:{b}", "uar", m, b)
    for a, b in combinations(MODELS, 2):
        c(f"pairs:{PS}:accuracy", "accuracy", a, b)
    for m in MODELS:
        for metric, sub, test in (("cgr", "sex", "permutation-|diff|"), ("cgr", "view", "permutation-|diff|"),
                                  ("cgr", "age", "permutation-anova-F"), ("uar", "sex", "permutation-|diff|"),
                                  ("uar", "age", "permutation-anova-F")):
            c(f"subgroups:{PS}:{m}", metric, m, "", sub, test)
    sweep = pd.DataFrame([{"probe_set": PS, "model": m, "threshold": t, "category": v[1] if not (
        v[1] == "unstable" and t <= 59) else "indeterminate"} for m, v in MODELS.items() for t in range(50, 91)])
    robustness = pd.DataFrame([
        {"probe_set": PS, "kind": "resolution", "spearman_rho": 0.95, "p": 0.001, "category_changes": 0},
        {"probe_set": PS, "kind": "prompt", "spearman_rho": math.nan, "p": math.nan, "category_changes": 1},
    ])
    verdicts = {m: f"synthetic verdict for {m}: {v[1].replace('_', ' ')}" for m, v in MODELS.items()}
    summary = {"run_id": "bench-run", "n_cases": N_CASES, "models": list(MODELS), "is_denominator": "correct-on-original",
                   "resampling_mode": "exact-counts", "B": 10000, "seeds": {"resampling": 0, "probe_set": 42}}
    return SyntheticAnalysis(metrics, pd.DataFrame(comp), categories, sweep, robustness, verdicts, summary)


def _time(fn: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="keep the written report here")
    ap.add_argument("--real", action="store_true",
                    help="render the real analyse_grounding output of the paper-sized synthetic run instead")
    args = ap.parse_args()

    if args.real:
        from medvlm_audit.suites.grounding.analysis import analyse_grounding
        from medvlm_audit.suites.grounding.synthetic import paper_sized_run

        t_an, analysis = _time(lambda: analyse_grounding(paper_sized_run()))
        print(f"analyse_grounding on the paper-sized synthetic run: {t_an:.1f} s (not part of the report timing)")
    else:
        analysis = synthetic_analysis()
    print(f"analysis: {analysis.metrics['model'].nunique()} models, {len(analysis.metrics):,} metric rows, "
          f"{len(analysis.comparisons):,} comparisons, {len(analysis.threshold_sweep):,} sweep rows")
    _time(lambda: build_figures(analysis))  # warm-up: imports, font cache

    build, svg, page, total, png, cpu = [], [], [], [], [], []
    per_fig: dict[str, float] = {}
    html_bytes = 0
    for _ in range(args.repeats):
        t_build, figs = _time(lambda: build_figures(analysis))
        t0 = time.perf_counter()
        for f in figs:
            t = time.perf_counter()
            figure_to_html(f)
            per_fig[figure_title(f)] = time.perf_counter() - t
        t_svg = time.perf_counter() - t0
        t_png, _ = _time(lambda figs=figs: [figure_to_html(f, fmt="png") for f in figs])
        t_page, html = _time(lambda figs=figs: render_report_html(analysis, title="bench", run_info={},
                                                                  figures=figs))
        html_bytes = len(html.encode())
        with tempfile.TemporaryDirectory() as tmp:
            out = args.out or Path(tmp)
            c0 = time.process_time()
            t_total, _ = _time(lambda out=out: write_report(analysis, out, title="Benchmark report",
                                                            run_info={"run_id": "bench-run"}))
            cpu.append(time.process_time() - c0)
        for lst, v in ((build, t_build), (svg, t_svg), (png, t_png), (page, t_page), (total, t_total)):
            lst.append(v)
    med = statistics.median
    print(f"figures: {len(figs)}; report.html {html_bytes / 1e6:.2f} MB")
    print("per-figure SVG render (last repeat, s): " + ", ".join(f"{k} {v:.2f}" for k, v in per_fig.items()))
    print(f"build figures        {med(build):6.2f} s (median of {args.repeats})")
    print(f"render SVG (inline)  {med(svg):6.2f} s")
    print(f"render PNG baseline  {med(png):6.2f} s  (110 dpi, base64)")
    print(f"assemble page        {med(page):6.2f} s  (SVG + tables, figures pre-built)")
    print(f"write_report total   {med(total):6.2f} s  (build + render + tables + atomic write)  target <= 15 s: "
          f"{'PASS' if med(total) <= 15 else 'FAIL'}")
    print(f"write_report CPU     {med(cpu):6.2f} s  (process CPU time: the figure without other load)")
    print(f"ratio SVG / PNG render: {med(svg) / med(png):.2f}")


if __name__ == "__main__":
    main()
