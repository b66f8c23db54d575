"""Tests of the HTML report and its files, on hand-made analysis tables that follow the shared schema exactly."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from medvlm_audit.report import Section, figure_to_html, format_estimate, format_p, table_to_html
from medvlm_audit.report import write as W
from medvlm_audit.report.figures import n_table_of
from medvlm_audit.suites.grounding import figures as F
from medvlm_audit.suites.grounding.figures import build_figures, caption_of
from medvlm_audit.suites.grounding.suite import REPORT_FILES
from medvlm_audit.suites.grounding.suite import write_grounding_report as write_report

#: the fast lane (`pytest -m "not slow"`) leaves this module out: its fixtures build runs or start processes
pytestmark = pytest.mark.slow

NAN = float("nan")
PS = "phantom"


@dataclass
class FakeAnalysis:
    """Duck-typed GroundingAnalysis: the seven schema fields and nothing else."""

    metrics: pd.DataFrame
    comparisons: pd.DataFrame
    categories: pd.DataFrame
    threshold_sweep: pd.DataFrame
    robustness: pd.DataFrame
    verdicts: dict[str, str]
    summary: dict[str, Any] = field(default_factory=dict)


MODELS = {  # model -> (modality, category)
    "reader": ("multimodal", "uses_image"),
    "prior": ("text_only", "ignores_image"),
    "wobbly": ("multimodal", "unstable"),
    "flat": ("vision_only", "uses_image"),  # all-identical confidences
    "broken": ("multimodal", "indeterminate"),  # zero parsed answers
}


def _m(model: str, metric: str, subset: str, point: float, se: float, lo: float, hi: float, n: int,
       unit: str = "%", note: str = "", method: str = "bootstrap-percentile") -> dict[str, Any]:
    return {"probe_set": PS, "model": model, "modality": MODELS[model][0], "metric": metric, "subset": subset,
            "point": point, "se": se, "ci_low": lo, "ci_high": hi, "n": n, "unit": unit, "method": method,
            "note": note}


def _rate(model: str, metric: str, subset: str, k: int, n: int, note: str = "") -> dict[str, Any]:
    if n == 0:
        return _m(model, metric, subset, NAN, NAN, NAN, NAN, 0, note=note or "not estimable (n = 0)")
    p = k / n
    se = math.sqrt(p * (1 - p) / n)
    return _m(model, metric, subset, 100 * p, 100 * se, 100 * max(0, p - 1.96 * se), 100 * min(1, p + 1.96 * se), n,
              note=note)


def make_metrics() -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    spec = {  # accuracy, sens, spec, parse, cgr, uar, is as (k, n)
        "reader": [(300, 412), (160, 200), (140, 212), (412, 412), (75, 300), (230, 300), (296, 300)],
        "prior": [(250, 412), (200, 200), (50, 212), (412, 412), (0, 250), (250, 250), (250, 250)],
        "wobbly": [(260, 412), (130, 200), (130, 212), (400, 412), (50, 250), (200, 250), (150, 250)],
        "flat": [(280, 412), (150, 200), (130, 212), (412, 412), (30, 280), (220, 280), (279, 280)],
        "broken": [(0, 0), (0, 0), (0, 0), (0, 412), (0, 0), (0, 0), (0, 0)],
    }
    names = ["accuracy", "sensitivity", "specificity", "parse_rate", "cgr", "uar", "is"]
    for model, vals in spec.items():
        for name, (k, n) in zip(names, vals):
            rows.append(_rate(model, name, "all", k, n))
        rows.append(_rate(model, "image_contingent", "all", vals[5][1] - vals[5][0], vals[5][1]))
        # GSP in percentage points
        cgr, is_ = rows[-4]["point"], rows[-2]["point"]
        if model == "broken":
            rows.append(_m(model, "gsp", "all", NAN, NAN, NAN, NAN, 0, unit="pp", note="not estimable (n = 0)"))
        else:
            g = cgr - (100 - is_)
            rows.append(_m(model, "gsp", "all", g, 2.0, g - 4, g + 4, vals[4][1], unit="pp"))
        # calibration
        if model == "flat":
            for c in ("auroc", "ece", "brier"):
                rows.append(_m(model, c, "all", NAN, NAN, NAN, NAN, 412, unit="prob",
                               note="N/A (degenerate confidence)"))
        elif model == "broken":
            for c in ("auroc", "ece", "brier"):
                rows.append(_m(model, c, "all", NAN, NAN, NAN, NAN, 0, unit="prob", note="not estimable (n = 0)"))
        else:
            rows.append(_m(model, "auroc", "all", 0.71, 0.02, 0.67, 0.75, 412, unit="prob"))
            rows.append(_m(model, "ece", "all", 0.12, 0.01, 0.10, 0.14, 412, unit="prob"))
            rows.append(_m(model, "brier", "all", 0.21, 0.01, 0.19, 0.23, 412, unit="prob"))
        for reg, pt in (("conf_grounded_correct", 0.9), ("conf_ungrounded_correct", 0.6), ("conf_incorrect", 0.5)):
            if model in ("broken", "prior") and reg == "conf_grounded_correct":
                rows.append(_m(model, reg, "all", NAN, NAN, NAN, NAN, 0, unit="prob", note="not estimable (n = 0)"))
            else:
                rows.append(_m(model, reg, "all", pt, 0.02, pt - 0.04, pt + 0.04, 60, unit="prob"))
        # per-finding CGR: one finding with n = 0, one with n < 30 (Wilson)
        for f, (k, n) in {"cardiomegaly": (20, 60), "pleural_effusion": (4, 12), "edema": (0, 0)}.items():
            if model == "broken":
                k, n = 0, 0
            note = "Wilson interval (n < 30)" if 0 < n < 30 else ""
            rows.append(_rate(model, "cgr", f"finding={f}", k, n, note=note))
        # subgroups
        for sub, (k, n) in {"sex=M": (40, 150), "sex=F": (35, 150), "view=PA": (50, 140), "view=AP": (25, 160),
                            "age=<50": (20, 90), "age=50-70": (30, 110), "age=>70": (25, 100)}.items():
            if model != "broken":
                rows.append(_rate(model, "cgr", sub, k, n))
                rows.append(_rate(model, "uar", sub, n - k // 2, n))
        rows.append(_rate(model, "cgr", "res=512", *((0, 0) if model == "broken" else (70, 290))))
        for pv, k in (("prompt=terse", 80), ("prompt=radiologist", 97)):
            rows.append(_rate(model, "parse_rate", pv, 0 if model == "broken" else k, 100))
    df = pd.DataFrame(rows)
    df["n"] = df["n"].astype(int)
    return df


def make_categories(metrics: pd.DataFrame) -> pd.DataFrame:
    reasons = {
        "uses_image": "CGR 25.0 > 0 with 95% interval excluding 0 and IS ≥ 90",
        "ignores_image": "CGR = 0, UAR = 100 and IS = 100, each on at least 100 cases",
        "unstable": "IS 60.0 < 70",
        "indeterminate": "no parsed answers: CGR, UAR and IS not estimable (n = 0)",
    }
    rows = []
    for model, (mod, cat) in MODELS.items():
        def g(metric: str, col: str, model: str = model) -> Any:
            r = metrics[(metrics["model"] == model) & (metrics["metric"] == metric) & (metrics["subset"] == "all")]
            return r[col].iloc[0]

        rows.append({
            "probe_set": PS, "model": model, "modality": mod, "category": cat, "support": 0.9, "reason": reasons[cat],
            "cgr": g("cgr", "point"), "cgr_low": g("cgr", "ci_low"), "cgr_high": g("cgr", "ci_high"),
            "n_cgr": g("cgr", "n"), "uar": g("uar", "point"), "uar_low": g("uar", "ci_low"),
            "uar_high": g("uar", "ci_high"), "n_uar": g("uar", "n"), "is_": g("is", "point"),
            "is_low": g("is", "ci_low"), "is_high": g("is", "ci_high"), "n_is": g("is", "n"),
            "accuracy": g("accuracy", "point"), "acc_low": g("accuracy", "ci_low"),
            "acc_high": g("accuracy", "ci_high"), "n_acc": g("accuracy", "n"), "gsp": g("gsp", "point"),
        })
    return pd.DataFrame(rows)


def _c(family: str, metric: str, a: str, b: str, diff: float, p: float, p_adj: float, n: int,
       test: str = "paired-bootstrap", subset: str = "all", note: str = "") -> dict[str, Any]:
    return {"family": family, "probe_set": PS, "metric": metric, "subset": subset, "model_a": a, "model_b": b,
            "diff": diff, "sd": 1.2 if not math.isnan(diff) else NAN, "ci_low": diff - 2.4, "ci_high": diff + 2.4,
            "p": p, "p_adj": p_adj, "n": n, "test": test, "note": note}


def make_comparisons() -> pd.DataFrame:
    fam = f"baseline:{PS}:accuracy:prior"
    rows = [
        _c(fam, "accuracy", "reader", "prior", 12.1, 0.0001, 0.0003, 412),
        _c(fam, "accuracy", "wobbly", "prior", 2.4, 0.2, 0.3, 400),
        _c(fam, "accuracy", "flat", "prior", 7.3, 0.004, 0.006, 412),
        _c(fam, "accuracy", "broken", "prior", NAN, NAN, NAN, 0, note="not estimable (n = 0)"),
        _c(f"baseline:{PS}:uar:prior", "uar", "reader", "prior", -23.3, 0.0001, 0.0002, 230),
        _c(f"baseline:{PS}:uar:prior", "uar", "flat", "prior", -21.4, 0.0001, 0.0002, 220),
        # a family with one test: p_adj equals p
        _c(f"pairs:{PS}:accuracy", "accuracy", "reader", "flat", 4.8, 0.03, 0.03, 412),
        _c(f"subgroups:{PS}:reader", "cgr", "reader", "", 6.0, 0.01, 0.04, 300, test="permutation-|diff|",
           subset="view=PA|view=AP"),
        _c(f"subgroups:{PS}:reader", "cgr", "reader", "", NAN, 0.5, 0.6, 300, test="permutation-anova-F",
           subset="age"),
    ]
    return pd.DataFrame(rows)


def make_sweep() -> pd.DataFrame:
    rows = []
    for model, (_, cat) in MODELS.items():
        for t in range(50, 91, 5):
            c = cat
            if model == "wobbly" and t < 60:
                c = "indeterminate"
            rows.append({"probe_set": PS, "model": model, "threshold": t, "category": c})
    return pd.DataFrame(rows)


def make_analysis() -> FakeAnalysis:
    met = make_metrics()
    return FakeAnalysis(
        metrics=met,
        comparisons=make_comparisons(),
        categories=make_categories(met),
        threshold_sweep=make_sweep(),
        robustness=pd.DataFrame([
            {"probe_set": PS, "kind": "resolution", "spearman_rho": 0.9, "p": 0.02, "category_changes": 0},
            {"probe_set": PS, "kind": "prompt", "spearman_rho": NAN, "p": NAN, "category_changes": 1},
        ]),
        verdicts={
            "reader": "answers flip under target masking on 75 of 300 cases and stay put under an irrelevant mask: "
                      "uses the image",
            "prior": "answers unchanged by any image edit on 412 cases: ignores the image",
            "wobbly": "answers move under any occlusion: unstable",
            "flat": "uses the image; confidence is constant, so calibration is not estimable",
            "broken": "no parsed answer on 412 cases: nothing can be said",
        },
        summary={"run_id": "run-abc123", "n_cases": 412, "is_denominator": "correct-on-original",
                 "resampling_mode": "exact-counts", "B": 10000, "seeds": {"resampling": 0, "probe_set": 42}},
    )


def make_missing_conditions() -> FakeAnalysis:
    """A run without irrelevant_mask and swap: IS / GSP not estimable, UAR rows absent, no comparisons at all."""
    a = make_analysis()
    met = a.metrics
    met = met[~met["metric"].isin(["uar", "image_contingent"])].copy()
    is_rows = met["metric"].isin(["is", "gsp"])
    met.loc[is_rows, ["point", "se", "ci_low", "ci_high"]] = NAN
    met.loc[is_rows, "n"] = 0
    met.loc[is_rows, "note"] = "not estimable (n = 0)"
    cats = a.categories.copy()
    cats[["uar", "uar_low", "uar_high", "is_", "is_low", "is_high", "gsp"]] = NAN
    cats[["n_uar", "n_is"]] = 0
    cats["category"] = "indeterminate"
    cats["reason"] = "IS not estimable (no irrelevant_mask condition in this run)"
    return FakeAnalysis(metrics=met.reset_index(drop=True), comparisons=pd.DataFrame(), categories=cats,
                        threshold_sweep=pd.DataFrame(), robustness=pd.DataFrame(),
                        verdicts={m: "not categorised: IS not estimable" for m in MODELS}, summary={})


# ----------------------------------------------------------------------------------------------------------------

NAN_WORD = re.compile(r"\bnan\b", re.IGNORECASE)
EXTERNAL_REF = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)


def _strip_svg_namespaces(page: str) -> str:
    return re.sub(r'\sxmlns(:\w+)?="[^"]*"', "", page)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, FakeAnalysis, str]:
    out = tmp_path_factory.mktemp("report")
    analysis = make_analysis()
    path = write_report(analysis, out, title="Phantom grounding audit",
                        run_info={"run_id": "run-abc123", "probe_sets": [PS], "config": {"suite": "grounding"}})
    return out, analysis, path.read_text(encoding="utf-8")


def test_format_estimate_paper_style() -> None:
    assert format_estimate(78.3, 1.2, 75.9, 80.6, 412) == "78.3 ± 1.2 [75.9, 80.6] (n = 412)"
    assert format_estimate(0.8123, 0.01, 0.79, 0.83, 2575, "prob") == "0.812 ± 0.010 [0.790, 0.830] (n = 2,575)"
    assert format_estimate(12.34, 2.0, 8.3, 16.3, 300, "pp") == "+12.3 ± 2.0 [+8.3, +16.3] (n = 300)"
    assert format_estimate(NAN, NAN, NAN, NAN, 0) == "not estimable (n = 0)"
    assert format_estimate(NAN, NAN, NAN, NAN, 412, "prob", "N/A (degenerate confidence)") == \
        "N/A (degenerate confidence) (n = 412)"
    assert format_estimate(55.0, NAN, NAN, NAN, 20) == "55.0 (n = 20)"
    assert format_p(0.0001) == "< 0.001" and format_p(0.0314) == "0.031" and format_p(NAN) == "not estimable"


def test_table_to_html_escapes_and_never_prints_nan() -> None:
    df = pd.DataFrame({"model": ["<script>alert(1)</script>", "a&b"], "x": [NAN, 1.5], "y": [None, "ok"]})
    page = table_to_html(df)
    assert "<script>" not in page and "&lt;script&gt;" in page and "a&amp;b" in page
    assert not NAN_WORD.search(page)
    assert page.count("<tr>") == 3


def test_files_written(written: tuple[Path, FakeAnalysis, str]) -> None:
    out, analysis, _ = written
    assert sorted(p.name for p in out.iterdir()) == sorted(REPORT_FILES)
    csv = pd.read_csv(out / "metrics.csv")
    pq = pd.read_parquet(out / "metrics.parquet")
    assert len(csv) == len(pq) == len(analysis.metrics)
    assert list(csv.columns[:13]) == list(W.METRICS_COLUMNS)
    comp = pd.read_csv(out / "comparisons.csv")
    assert len(comp) == len(analysis.comparisons)
    assert {"family", "p", "p_adj"} <= set(comp.columns)
    cats = pd.read_csv(out / "categories.csv")
    assert cats["category"].tolist() == analysis.categories["category"].tolist()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run_id"] == "run-abc123" and summary["B"] == 10000
    assert summary["report"]["run_info"]["config"] == {"suite": "grounding"}
    assert summary["verdicts"]["prior"].endswith("ignores the image")
    assert not list(out.glob(".*.tmp"))


def test_metrics_csv_rows_equal_metrics_table(written: tuple[Path, FakeAnalysis, str]) -> None:
    out, _, page = written
    table = re.search(r'<table class="tbl" id="metrics-all">(.*?)</table>', page, re.DOTALL)
    assert table is not None
    body_rows = table.group(1).split("<tbody>", 1)[1].count("<tr>")
    assert body_rows == len(pd.read_csv(out / "metrics.csv"))


def test_report_is_self_contained(written: tuple[Path, FakeAnalysis, str]) -> None:
    _, _, page = written
    assert not EXTERNAL_REF.search(page)
    assert "<script" not in page.lower()
    assert "<link" not in page.lower() and "@import" not in page
    assert "http://" not in _strip_svg_namespaces(page) and "https://" not in page
    # figures inline: one <svg> per <figure>, no image files referenced
    n_fig = page.count('<figure class="fig">')
    assert n_fig >= 10
    assert page.count("<svg") == n_fig
    assert "<img" not in page  # SVG mode: no raster, and never a patient image


def test_expected_figures_and_captions_present(written: tuple[Path, FakeAnalysis, str]) -> None:
    _, _, page = written
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", page, re.DOTALL)
    for needle in ("Causal triad on phantom", "Grounding-specificity premium on phantom",
                   "Unrelated-image answer rate on phantom", "Sensitivity against specificity on phantom",
                   "Accuracy on phantom", "Paired accuracy differences",
                   "Paired UAR differences", "All pairwise differences", "IS &#39;unstable&#39; threshold",
                   "Calibration of first-token P(yes)", "Subgroup rates", "Causal grounding rate on phantom at 512",
                   "Parse rate (%) on phantom"):
        assert any(needle in c for c in captions), needle
    # every per-finding CGR of this analysis is 33.3 (20/60 and 4/12): the figure is one sentence saying so
    assert re.search(r'<p class="fignote"><strong>Figure \d+\. Per-finding CGR:</strong> not drawn, every value it '
                     r"would show is 33\.3 \(nothing varies\)\.</p>", page)
    # every caption states n (the standalone letter n: "n = 412", "n per model", "n (224 / 512)")
    assert all(re.search(r"\bn\b", c) for c in captions), [c[:80] for c in captions if not re.search(r"\bn\b", c)]


def test_verdicts_and_run_info_at_top(written: tuple[Path, FakeAnalysis, str]) -> None:
    _, _, page = written
    head = page.split('<section id="figures">')[0]
    assert "answers unchanged by any image edit on 412 cases: ignores the image" in head
    assert head.count('class="badge"') == len(MODELS)
    assert ">ignores image</span>" in head and ">uses image</span>" in head and ">unstable</span>" in head
    for text in ("run-abc123", "correct-on-original", "exact-counts", "10,000", "<dt>Suite</dt><dd>grounding</dd>",
                 "0.1.0"):
        assert text in head, text
    # verdicts come first, then how to read the report, then the run's details in a collapsible block
    assert head.index('id="verdicts"') < head.index('<details class="runinfo">')
    assert "not recorded" not in head and "False" not in head


def test_degenerate_inputs_render_with_notes_and_no_nan(written: tuple[Path, FakeAnalysis, str]) -> None:
    _, _, page = written
    assert not NAN_WORD.search(page)
    assert "N/A (degenerate confidence)" in page
    assert "not estimable (n = 0)" in page
    # the zero-parsed model's accuracy in the key-metrics table
    # (the key metrics are split into narrow tables key-metrics-phantom, -2, -3: one model's cells across them)
    key = re.findall(r'id="key-metrics-phantom(?:-\d)?">(.*?)</table>', page, re.DOTALL)
    assert len(key) >= 2
    broken_row = "".join(r for k in key for r in k.split("<tr>") if "<td>broken</td>" in r)
    assert "not estimable (n = 0)" in broken_row and "0.0 ± 0.0" in broken_row  # parse rate 0 of 412
    flat_row = "".join(r for k in key for r in k.split("<tr>") if "<td>flat</td>" in r)
    assert flat_row.count("N/A (degenerate confidence) (n = 412)") == 2  # AUROC and ECE columns
    # a family with one test keeps p_adj = p in the comparisons table (one table per family, titled in words)
    comp = re.search(r"<caption>Accuracy on phantom: every pair of models</caption>(.*?)</table>", page,
                     re.DOTALL).group(1)
    pair_row = next(r for r in comp.split("<tr>") if "<td>" in r)
    assert pair_row.count("<td>0.030</td>") == 2


def test_missing_conditions_render(tmp_path: Path) -> None:
    analysis = make_missing_conditions()
    path = write_report(analysis, tmp_path, title="no swap, no irrelevant mask", run_info={})
    page = path.read_text()
    assert not NAN_WORD.search(page)
    # the triad has no estimable point: a one-line note instead of an empty figure (report.figures.information),
    # naming which of the two is missing (no irrelevant mask here: IS; CGR is estimable for 4 of the 5 models)
    assert ("Causal triad:</strong> not drawn, IS not estimable for any model (n = 0); CGR is for 4 of 5, but a point "
            "needs both") in page
    assert "No comparisons were computed" in page
    assert "Unrelated-image answer rate on" not in page  # no UAR rows: no UAR figure
    assert len(pd.read_csv(tmp_path / "comparisons.csv")) == 0
    assert list(pd.read_csv(tmp_path / "comparisons.csv").columns) == list(W.COMPARISONS_COLUMNS)


def test_figure_functions_return_figures_with_n_captions() -> None:
    a = make_analysis()
    fig = F.triad_figure(a.categories, probe_set=PS)
    cap = caption_of(fig)
    counts = n_table_of(fig)  # n per model: a table under the figure, not a list in the caption
    assert counts.set_index("model").loc["reader"].tolist() == ["300", "300"] and "broken" not in set(counts["model"])
    assert "broken" in cap.split("Not shown")[1]  # not estimable: listed, not plotted
    # the triad plots every estimable model: one marker line per model (plus the ignores-image ring)
    ax = fig.axes[0]
    from matplotlib.collections import PathCollection

    plotted = sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection))
    assert plotted == 1 + (len(MODELS) - 1)  # the ignores-image ring plus every estimable model
    heat = F.finding_heatmap_figure(a.metrics, probe_set=PS)
    texts = [t.get_text() for t in heat.axes[0].texts]
    assert "N/A\nn = 0" in texts and "25.0\nn = 12" not in texts
    assert "33.3\nn = 60" in texts and "33.3\nn = 12" in texts


def test_empty_triad_and_one_category_sweep_say_why_in_words() -> None:
    """The triad with CGR estimable but IS not says which one is missing (not 'CGR and IS'); a threshold sweep where
    every model is indeterminate at every threshold names the category, not its internal colour code."""
    from medvlm_audit.report.figures import information

    nan = float("nan")
    cats = pd.DataFrame({"probe_set": [PS, PS], "model": ["a", "b"], "modality": ["multimodal"] * 2,
                         "category": ["indeterminate"] * 2, "cgr": [40.0, nan], "cgr_low": [20.0, nan],
                         "cgr_high": [60.0, nan], "is_": [nan, nan], "is_low": [nan, nan], "is_high": [nan, nan],
                         "n_cgr": [16, 0], "n_is": [0, 0]})
    level, why = information(F.triad_figure(cats, probe_set=PS))
    assert level == "none" and why.startswith("IS not estimable for any model (n = 0); CGR is for 1 of 2"), why
    sweep = pd.DataFrame([{"probe_set": PS, "model": m, "threshold": t, "category": "indeterminate"}
                          for m in ("a", "b") for t in (50.0, 60.0, 70.0)])
    level, why = information(F.threshold_sweep_figure(sweep, cats, probe_set=PS))
    assert level == "none" and why == "every model is 'indeterminate' at every threshold (nothing varies)", why


def test_accuracy_brackets_follow_comparisons() -> None:
    a = make_analysis()
    fig = F.accuracy_figure(a.metrics, a.categories, a.comparisons, probe_set=PS)
    labels = sorted(t.get_text() for t in fig.axes[0].texts)
    assert labels == ["+12.1 ***", "+2.4 n.s.", "+7.3 **"]  # the NaN comparison is not drawn
    assert F._assign_levels([(0, 1), (0, 2), (1, 2), (3, 4)]) == [0, 2, 1, 0]


def test_extra_sections_and_png_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    a = make_analysis()
    few = [F.triad_figure(a.categories, probe_set=PS), F.uar_figure(a.metrics, a.categories, probe_set=PS)]
    monkeypatch.setattr(F, "figure_builders", lambda analysis: [lambda f=f: f for f in few])  # PNG is slow
    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1], [1, 0])
    sec = Section("Stress suite", figure_to_html(fig, "Option reordering (n = 30)", fmt="png")
                  + table_to_html(pd.DataFrame({"item": ["q1"], "acc": [NAN]})))
    assert sec.anchor == "stress-suite"
    path = write_report(a, tmp_path, title="t", run_info={}, extra_sections=[sec], fmt="png")
    page = path.read_text()
    assert '<section id="stress-suite"><h2>Stress suite</h2>' in page
    assert "Option reordering (n = 30)" in page
    assert page.count('src="data:image/png;base64,') == 3 and "<svg" not in page
    assert "Causal triad on phantom" in page  # the caption travels with the PNG
    assert not NAN_WORD.search(page) and not EXTERNAL_REF.search(page)
    with pytest.raises(TypeError, match="Section"):
        write_report(make_analysis(), tmp_path, title="t", run_info={}, extra_sections=["<p>raw</p>"])  # type: ignore[list-item]


def test_section_validation() -> None:
    with pytest.raises(ValueError, match="title"):
        Section("  ", "<p>x</p>")
    with pytest.raises(TypeError, match="html must be a str"):
        Section("Stress", None)  # type: ignore[arg-type]
    assert Section("T1: modality removal", "").anchor == "t1-modality-removal"


def test_bad_analysis_names_field_and_column(tmp_path: Path) -> None:
    a = make_analysis()
    with pytest.raises(ValueError, match=r"result.metrics lacks column\(s\) \['ci_low'\]"):
        write_report(replace(a, metrics=a.metrics.drop(columns=["ci_low"])), tmp_path, title="t", run_info={})
    with pytest.raises(TypeError, match="result.verdicts"):
        write_report(replace(a, verdicts=["x"]), tmp_path, title="t", run_info={})  # type: ignore[arg-type]
    assert not (tmp_path / "report.html").exists()


def test_failure_while_rendering_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "report.html").write_text("OLD REPORT")

    def boom(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("figure failed")

    monkeypatch.setattr(F, "calibration_figure", boom)
    with pytest.raises(RuntimeError, match="figure failed"):
        write_report(make_analysis(), tmp_path, title="t", run_info={})
    assert (tmp_path / "report.html").read_text() == "OLD REPORT"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def _no_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """File-level tests need no figures: skip the (slow) rendering."""
    monkeypatch.setattr(F, "figure_builders", lambda analysis: [])


def test_failure_while_writing_leaves_no_partial_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_figures(monkeypatch)
    real_fdopen = os.fdopen
    calls = {"n": 0}

    class FailingFile:
        def __init__(self, fh: Any) -> None:
            self.fh = fh

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()

        def write(self, data: bytes) -> int:
            self.fh.write(data[: len(data) // 2])  # half the bytes reach the disk, then the disk fills
            raise OSError(28, "No space left on device")

    def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        fh = real_fdopen(fd, *args, **kwargs)
        return FailingFile(fh) if calls["n"] == len(REPORT_FILES) else fh  # fail on report.html

    monkeypatch.setattr(W.os, "fdopen", fdopen)
    with pytest.raises(OSError, match="No space left"):
        write_report(make_analysis(), tmp_path, title="t", run_info={})
    assert list(tmp_path.iterdir()) == []  # neither a partial report.html nor temp files nor the tables


def test_failure_during_rename_keeps_report_html_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_figures(monkeypatch)
    real_replace = os.replace

    def replace_(src: Any, dst: Any) -> None:
        if str(dst).endswith("report.html"):
            raise OSError("rename failed")
        real_replace(src, dst)

    monkeypatch.setattr(W.os, "replace", replace_)
    with pytest.raises(OSError, match="rename failed"):
        write_report(make_analysis(), tmp_path, title="t", run_info={})
    assert not (tmp_path / "report.html").exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_build_figures_skips_absent_material() -> None:
    a = make_missing_conditions()
    figs = build_figures(a)
    titles = [F.figure_title(f) for f in figs]
    assert "Unrelated-image answer rate" not in titles
    assert "Causal triad" in titles and "Accuracy with paired comparisons" in titles
    assert all(caption_of(f) for f in figs)
    assert not any(NAN_WORD.search(caption_of(f)) for f in figs)


def test_two_probe_sets_adds_cross_dataset_figure(tmp_path: Path) -> None:
    a = make_analysis()
    met2 = a.metrics.assign(probe_set="chexpert")
    met2 = met2[met2["metric"].isin(["accuracy", "uar", "parse_rate"]) & (met2["subset"] == "all")]
    cats2 = a.categories.assign(probe_set="chexpert")  # box-free, like CheXpert: CGR and IS on n = 0
    cats2[["cgr", "cgr_low", "cgr_high", "is_", "is_low", "is_high", "gsp"]] = NAN
    cats2[["n_cgr", "n_is"]] = 0
    rob = pd.concat([a.robustness, pd.DataFrame([{"probe_set": "phantom|chexpert", "kind": "cross_dataset",
                                                  "metric": "uar", "variant": "all models", "rho": 0.9,
                                                  "p": 0.004}])], ignore_index=True)
    b = replace(a, metrics=pd.concat([a.metrics, met2], ignore_index=True),
                categories=pd.concat([a.categories, cats2], ignore_index=True), robustness=rob)
    page = write_report(b, tmp_path, title="t", run_info={}).read_text()
    assert page.count("Cross-dataset transfer.</strong>") == 1
    assert "UAR and accuracy on chexpert against phantom" in page
    assert "Key metrics — chexpert" in page and not NAN_WORD.search(page)
    assert "Causal triad on phantom" in page and "Accuracy on chexpert" in page  # figures per probe set
    assert "Causal triad on chexpert" not in page  # no boxed cases: no occlusion figures
    assert "Spearman ρ = 0.900, p 0.004 (all models)" in page


def test_numpy_values_in_summary_are_json_safe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_figures(monkeypatch)
    a = replace(make_analysis(), summary={"B": np.int64(10000), "auroc": np.float64(NAN), "ok": np.bool_(True),
                                          "seeds": (0, 42)})
    write_report(a, tmp_path, title="t", run_info={"when": pd.Timestamp("2026-11-22")})
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["B"] == 10000 and s["auroc"] is None and s["ok"] is True and s["seeds"] == [0, 42]


# ----------------------------------------------------------------------------------------------------------------
# against the real grounding analysis (analysis/grounding.py), on small synthetic runs


def _real_analysis(drop_conditions: tuple[str, ...] = ()) -> Any:
    syn = pytest.importorskip("medvlm_audit.suites.grounding.synthetic")
    grounding = pytest.importorskip("medvlm_audit.suites.grounding.analysis")
    models = [syn.uses_image("reader"), syn.ignores_image("prior"), syn.always_yes("yes"), syn.unstable("wobbly"),
              syn.uses_image("mute", parse_rate=0.0), syn.ignores_image("flatconf", confidence="binary")]
    tidy = syn.make_tidy(models, syn.SyntheticDesign(n_cases=200, n_boxed=120, n_res512=40, n_prompt=30))
    if drop_conditions:
        tidy = tidy[~tidy["condition"].isin(drop_conditions)].reset_index(drop=True)
    return grounding.analyse_grounding(tidy, B=200)


def test_real_analysis_renders(tmp_path: Path) -> None:
    a = _real_analysis()
    path = write_report(a, tmp_path, title="real analysis", run_info={"run_id": "synthetic-run"})
    page = path.read_text()
    assert not NAN_WORD.search(page) and not EXTERNAL_REF.search(page)
    assert len(pd.read_csv(tmp_path / "metrics.csv")) == len(a.metrics)
    table = re.search(r'id="metrics-all">(.*?)</table>', page, re.DOTALL).group(1)
    assert table.split("<tbody>", 1)[1].count("<tr>") == len(a.metrics)
    head = page.split('<section id="figures">')[0]
    for model, cat in zip(a.categories["model"], a.categories["category"]):
        row = next(li for li in head.split("<li>") if f'<span class="model">{model}</span>' in li)
        label = {"uses_image": "uses image", "ignores_image": "ignores image",
                 "not_assessable": "not assessable"}.get(cat, cat)
        assert f">{label}</span>" in row, (model, cat)
    # the resampling block of the real summary feeds the run-information header
    assert "exact-counts" in head and "10000" not in head and ">200<" in head
    assert "Causal triad on" in page and "Per-finding causal grounding rate" in page
    assert "not estimable (n = 0)" in page  # the model with no parsed answer


def test_real_analysis_with_missing_conditions_renders(tmp_path: Path) -> None:
    a = _real_analysis(drop_conditions=("irrelevant_mask", "swap"))
    page = write_report(a, tmp_path, title="no swap, no irrelevant mask", run_info={}).read_text()
    assert not NAN_WORD.search(page)
    assert "Causal triad" in page and "CGR or IS not estimable" in page
    assert "<strong>Analysis notes</strong>" in page  # the analysis' own notes reach the header
    assert "IS not estimable (n = 0" in page  # category reasons


def test_empty_analysis_renders(tmp_path: Path) -> None:
    a = FakeAnalysis(metrics=pd.DataFrame(columns=list(W.METRICS_COLUMNS)), comparisons=pd.DataFrame(),
                     categories=pd.DataFrame(), threshold_sweep=pd.DataFrame(), robustness=pd.DataFrame(),
                     verdicts={}, summary={})
    page = write_report(a, tmp_path, title="empty run", run_info={}).read_text()
    assert "No figures." in page and "No comparisons were computed" in page and not NAN_WORD.search(page)
    assert len(pd.read_csv(tmp_path / "metrics.csv")) == 0


def test_format_estimate_never_prints_nan_or_inf() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    num = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))

    @settings(max_examples=300, deadline=None)
    @given(num, num, num, num, st.one_of(st.none(), st.integers(0, 10**6), st.just(NAN)),
           st.sampled_from(["%", "pp", "prob"]), st.sampled_from(["", "N/A (degenerate confidence)", None]))
    def check(point: Any, se: Any, lo: Any, hi: Any, n: Any, unit: str, note: Any) -> None:
        text = format_estimate(point, se, lo, hi, n, unit, note)
        assert not re.search(r"\b(nan|inf)\b", text, re.IGNORECASE), text
        assert text

    check()


def test_p_value_columns_print_below_one_thousandth_never_zero() -> None:
    from medvlm_audit.report.html import table_to_html

    html = table_to_html(pd.DataFrame({"p": [0.00001, 0.25], "q": [0.0, 0.5], "n": [3, 4]}))
    assert "0.000<" not in html and html.count("&lt; 0.001") == 2 and "0.250" in html
