"""The whole pipeline on the embedded default: every reference model lands in its designed category."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from medvlm_audit.cli import app
from medvlm_audit.suites.grounding.embedded import run_demo
from medvlm_audit.suites.grounding.sections import badge

#: the fast lane (`pytest -m "not slow"`) leaves this module out: its fixtures build runs or start processes
pytestmark = pytest.mark.slow

DESIGNED = {"local-evidence": "uses_image", "global-probe": "uses_image", "finding-prior": "ignores_image",
            "always-yes": "ignores_image", "occlusion-unstable": "unstable"}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    res = run_demo(out, n_cases=500, n_train=900, progress=False, log=lambda *_: None)
    # the report comes from the command line, as a user runs it: `medvlm-audit report RUN`
    cli = CliRunner().invoke(app, ["report", str(res.run_dir)])
    assert cli.exit_code == 0, cli.output
    assert "report:" in cli.output
    return res.run_dir


def test_reference_panel_lands_in_designed_categories(demo_run: Path) -> None:
    cats = pd.read_csv(demo_run / "report" / "categories.csv").set_index("model")
    assert cats.loc["local-evidence", "category"] == "uses_image"
    assert cats.loc["local-evidence", "cgr"] >= 50 and cats.loc["local-evidence", "uar"] < 100
    assert cats.loc["global-probe", "category"] == "uses_image"
    assert cats.loc["global-probe", "cgr"] < cats.loc["local-evidence", "cgr"] and cats.loc["global-probe", "uar"] < 100
    assert cats.loc["finding-prior", "category"] == "ignores_image"
    assert cats.loc["always-yes", "category"] == "ignores_image"
    assert cats.loc["occlusion-unstable", "category"] == "unstable" and cats.loc["occlusion-unstable", "is_"] < 70


def test_prior_model_is_deduplicated_not_told_the_condition(demo_run: Path) -> None:
    df = pd.read_parquet(demo_run / "results.parquet")
    prior = df[df.model == "finding-prior"]
    # one key per question text: identical inputs across every image condition and resolution
    per_case = prior[prior.prompt_variant == "default"].groupby("case_id")["key"].nunique()
    assert (per_case == 1).all()
    assert prior["image_sha256"].isna().all()
    # the image models got different pixels for different conditions
    le = df[(df.model == "local-evidence") & (df.resolution == 224)]
    assert le.groupby("case_id")["image_sha256"].nunique().max() >= 4


def test_demo_report_is_complete(demo_run: Path) -> None:
    rep = demo_run / "report"
    html = (rep / "report.html").read_text()
    text = html.split("<svg")[0]  # the page text before the first figure: header, verdicts
    assert " nan" not in text.lower() and ">nan<" not in text.lower()
    assert "ignores the image" in text
    summary = json.loads((rep / "summary.json").read_text())
    assert summary["is_denominator"]
    metrics = pd.read_parquet(rep / "metrics.parquet")
    assert {"cgr", "uar", "is", "accuracy", "auroc"} <= set(metrics["metric"])
    # the resolution and prompt probes ran
    assert (metrics["subset"] == "res=512").any() and (metrics["subset"] == "prompt=terse").any()
    # the run store never holds pixels: no BLOB columns, and it is small
    assert (demo_run / "run.sqlite").stat().st_size < 20 * 2**20


def test_demo_report_shows_the_triad_and_each_verdict_with_its_category(demo_run: Path) -> None:
    page = (demo_run / "report" / "report.html").read_text()
    verdicts = json.loads((demo_run / "report" / "summary.json").read_text())["verdicts"]
    figures = re.findall(r'<figure class="fig">(.*?)</figure>', page, flags=re.DOTALL)
    triad = [f for f in figures if re.search(r"<figcaption><strong>Figure \d+\. Causal triad\.</strong>", f)]
    assert len(triad) == 1
    svg, caption = triad[0].split("<figcaption>")
    assert svg.lstrip().startswith("<svg")
    items = re.findall(r"<li>(.*?)</li>", re.search(r'<ul class="verdicts">(.*?)</ul>', page, flags=re.DOTALL).group(1))
    for model, category in DESIGNED.items():
        assert f">{html.escape(model)}<" in svg, model  # a labelled point of the triad
        # its CGR n and IS n in the counts table under the figure
        assert re.search(rf"<td>{re.escape(html.escape(model))}</td><td>[\d,]+</td><td>[\d,]+</td>", caption), model
        (item,) = [li for li in items if f'<span class="model">{html.escape(model)}</span>' in li]
        assert badge(category) in item, (model, category)
        assert html.escape(verdicts[model]) in item, model
    assert "ignores the image" in html.unescape(" ".join(items))
