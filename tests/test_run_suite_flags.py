"""`run --suite NAME` with other flags but neither --probe-set nor --model: the suite's embedded default with those
flags over it (an audit's user tries `--set phantom_items=3` or `--conditions ...` on the default before pointing
it at a model); it stopped with "key 'probe_sets': Field required; key 'models': Field required"."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from medvlm_audit.cli import app


def test_suite_flags_apply_over_the_embedded_default(tmp_path: Path) -> None:
    run = tmp_path / "faith"
    res = CliRunner().invoke(app, ["run", "--suite", "faithfulness", "--run-dir", str(run), "--set", "phantom_items=3",
                                   "--conditions", "baseline,tb_rad:misleading", "--no-progress", "--no-report"])
    assert res.exit_code == 0, res.output
    df = pd.read_parquet(run / "results.parquet")
    answers = df[df["stage"] == "answer"]
    assert answers["case_id"].nunique() == 3
    assert set(answers["condition"]) == {"baseline", "tb_rad:misleading"}
    assert set(answers["model"]) == {"cue-follower", "cue-admitter", "cue-ignorer"}  # the default's models


def test_a_flag_the_suite_refuses_is_still_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["run", "--suite", "stress", "--run-dir", str(tmp_path / "s"), "--conditions",
                                   "no_such_condition", "--no-progress", "--no-report"])
    assert res.exit_code != 0 and "no_such_condition" in res.output and "Traceback" not in res.output
