"""`medvlm-audit build <dataset>` from fixture trees in the real layouts, then a grounding run on the result."""

from __future__ import annotations

import sys
from pathlib import Path

import dsfixtures as F
import pytest
from typer.testing import CliRunner

from medvlm_audit import api
from medvlm_audit.cli import app
from medvlm_audit.suites.grounding.probeset import ProbeSet

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import BrightSpotModel

SMALL = {"n_subjects": 60, "n_studies": 150, "n_images": 220, "test_every": 2, "n_rexerr": 200,
         "ms_eligible": dict.fromkeys(F.MS_CATS, 3), "ms_ineligible_per_cat": 2, "size": (256, 320), "gz": True}


@pytest.mark.slow
def test_build_mimic_cli_reports_shortfalls_and_runs(tmp_path: Path) -> None:
    roots = F.make_mimic_tree(tmp_path / "mimic", images=True, **SMALL)
    out = tmp_path / "ps"
    args = ["build", "mimic", "--out", str(out), "--no-check-images"]
    for k, v in roots.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "short" in res.output.lower()  # the small tree cannot fill 50 per stratum
    assert (out / "exclusions.csv").exists()
    ps = ProbeSet.load(out)
    assert {"finding_presence", "report_error"} <= set(ps.df["kind"])
    # the built probe set runs under every grounding condition; masks only where boxes exist
    m = BrightSpotModel()
    result = api.run({"suite": "grounding", "probe_sets": [str(out)], "run_dir": str(tmp_path / "run"),
                      "models": [{"name": "bright-spot", "backend": "openai", "model": "x", "base_urls": "http://x"}]},
                     models=[m], progress=False)
    import pandas as pd

    df = pd.read_parquet(result.results_parquet)
    boxed = set(ps.df.loc[ps.df["tbox_x0"].notna(), "case_id"])
    assert set(df.loc[df.condition == "target_mask", "case_id"]) == boxed
    assert result.summary.n_skipped == 2 * (len(ps) - len(boxed))  # target + irrelevant mask skipped, counted


@pytest.mark.slow
def test_build_nih_and_folder_cli(tmp_path: Path) -> None:
    root = F.make_nih_tree(tmp_path / "nih", n_images=300, n_boxes=30)
    res = CliRunner().invoke(app, ["build", "nih", "--nih-root", str(root), "--out", str(tmp_path / "nih_ps"),
                                   "--per-finding", "5", "--n-normal", "5", "--no-check-images"])
    assert res.exit_code == 0, res.output
    assert len(ProbeSet.load(tmp_path / "nih_ps")) > 0
    res = CliRunner().invoke(app, ["build", "mimic", "--mimic-root", str(tmp_path / "nope"), "--ms-cxr-root", "x",
                                   "--rexerr-root", "x", "--mimic-iv-root", "x", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "error" in res.output and "Traceback" not in res.output


def test_build_chexpert_official_test_layout_cli(tmp_path: Path) -> None:
    root, labels, (by_image, _) = F.make_chexpert_official_test(tmp_path / "chx")
    out = tmp_path / "ps"
    args = ["build", "chexpert", "--chexpert-root", str(root), "--labels-csv", str(labels), "--out", str(out),
            "--per-finding", "5", "--n-normal", "5"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "demographics" in res.output.replace("\n", " ") and "Traceback" not in res.output
    res = CliRunner().invoke(app, [*args, "--demographics-csv", str(by_image)])
    assert res.exit_code == 0, res.output
    ps = ProbeSet.load(out)
    assert (ps.df.split == "test").all() and ps.df.sex.isin(["M", "F"]).all()
    assert "exclusions" in res.output


def test_build_vindr_cli(tmp_path: Path) -> None:
    root = F.make_vindr_tree(tmp_path / "vindr", n_images=60)
    out = tmp_path / "ps"
    res = CliRunner().invoke(app, ["build", "vindr", "--vindr-root", str(root), "--out", str(out), "--n-absent", "5",
                                   "--n-normal", "5"])
    assert res.exit_code == 0, res.output
    ps = ProbeSet.load(out)
    assert ps.df.tbox_x0.notna().any() and (out / "exclusions.csv").exists()
    res = CliRunner().invoke(app, ["build", "vindr", "--vindr-root", str(root), "--split", "train", "--out",
                                   str(tmp_path / "o2")])
    assert res.exit_code == 2 and "annotations_train.csv" in res.output.replace("\n", "")


def test_build_probe_train_cli(tmp_path: Path) -> None:
    roots = F.make_mimic_tree(tmp_path / "mimic", images=False, **SMALL)
    out = tmp_path / "train"
    res = CliRunner().invoke(app, ["build", "probe-train", "--source", "mimic", "--mimic-root", str(roots["mimic_root"]),
                                   "--splits", "train,validate", "--no-check-images", "--out", str(out)])
    assert res.exit_code == 0, res.output
    ps = ProbeSet.load(out, validate=False)
    assert set(ps.df.split) <= {"train", "validate"} and ps.provenance["builder"] == "probe_train"
    res = CliRunner().invoke(app, ["build", "probe-train", "--source", "mimic", "--out", str(out)])
    assert res.exit_code == 2 and "mimic_root" in res.output.replace("\n", "")
