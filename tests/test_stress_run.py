"""The stress suite through the real runner and run store: plan from a config, execute, tidy table, report."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from medvlm_audit.config import validate_config
from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Decoding
from medvlm_audit.runner import execute
from medvlm_audit.store import STORE_FILE, RunStore
from medvlm_audit.suites.stress.conditions import DEFAULT_CONDITIONS
from medvlm_audit.suites.stress.phantom_mcq import build_phantom_mcq
from medvlm_audit.suites.stress.reference import reference_mcq_panel
from medvlm_audit.suites.stress.run import plan_stress, report_stress, tidy_stress


def config(tmp_path: Path, items: str, **kw):
    return validate_config({"suite": "stress", "run_dir": str(tmp_path / "run"), "probe_sets": [items],
                            "models": [{"name": "x", "backend": "reference"}], **kw})


def test_run_store_round_trip_and_report(tmp_path: Path) -> None:
    build_phantom_mcq(tmp_path / "set", n_items=42, size=128, n_substitutions=14, p_gold_first=0.7)
    cfg = config(tmp_path, str(tmp_path / "set"))
    plan = plan_stress(cfg)
    assert {t.condition for t in plan.trials} == set(DEFAULT_CONDITIONS)
    store = RunStore(tmp_path / "run" / STORE_FILE)
    try:
        asyncio.run(execute(store, plan, reference_mcq_panel(), Decoding(max_new_tokens=64), progress=False))
        tidy = tidy_stress(store)
        assert len(tidy) == 3 * len(plan.trials)
        assert set(tidy["status"]) <= {"answer", "refusal"}
        page = report_stress(store, tmp_path / "report", B=300)
    finally:
        store.close()
    text = page.read_text()
    assert "Robustness score" in text and text.count("<svg") == 3  # three inline figures
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["robustness"]["text-prior"]["R3"] == 1.0
    assert summary["robustness"]["first-option"]["R3"] < 0.8
    assert (tmp_path / "report" / "stress_changes.parquet").exists()


def test_config_conditions(tmp_path: Path) -> None:
    build_phantom_mcq(tmp_path / "set", n_items=10, size=64, n_substitutions=3)
    plan = plan_stress(config(tmp_path, str(tmp_path / "set" / "items.jsonl"), conditions=["original", "cot"],
                              repeats=2))
    assert {t.condition for t in plan.trials} == {"original", "cot"} and len(plan.trials) == 40
    with pytest.raises(ConfigError, match="unknown stress condition"):
        plan_stress(config(tmp_path, str(tmp_path / "set"), conditions=["original", "swap"]))


def test_cli_run_suite_stress_embedded_default(tmp_path) -> None:
    """`medvlm-audit run --suite stress` runs the phantom MCQ set with the reference panel and reports it."""
    import pandas as pd
    from typer.testing import CliRunner

    from medvlm_audit.cli import app

    res = CliRunner().invoke(app, ["run", "--suite", "stress", "--run-dir", str(tmp_path / "r"), "--no-progress"])
    assert res.exit_code == 0, res.output
    df = pd.read_parquet(tmp_path / "r" / "results.parquet")
    assert {"first-option", "text-prior", "image-reader"} == set(df["model"])
    assert (tmp_path / "r" / "report" / "report.html").exists()
    # chain-of-thought trials were asked with the longer decoding budget recorded in their request
    import json
    import sqlite3

    db = sqlite3.connect(tmp_path / "r" / "run.sqlite")
    budgets = {json.loads(x)["decoding"]["max_new_tokens"] for (x,) in db.execute("SELECT input FROM requests")}
    assert budgets == {64, 1024}
