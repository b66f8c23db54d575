"""Regression test of issue 22 for the stress suite (found by the property tests): a run left with one model,
one item and one condition, every answer "yes", has no paired change and no chance test; the report is written
(was: ``KeyError: 'model'`` in the verdicts, from a change table without columns)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from medvlm_audit import api
from medvlm_audit.suites import get_suite
from medvlm_audit.testing.answers import StoreEdit, apply_edit, check_report, report_of, store_shape


@pytest.mark.slow
def test_one_model_one_item_one_condition_gives_a_report(tmp_path: Path) -> None:
    base = api.run(get_suite("stress").embedded_config(tmp_path / "base"), progress=False).run_dir
    shape = store_shape(base / "run.sqlite")
    case = next(c for c in shape.cases if ("first-option", *c, "cot") in shape.trials)
    edit = StoreEdit(models=["first-option"], cases=[case], conditions=["cot"], identical="yes")
    page = report_of(apply_edit(base, edit, tmp_path / "edited"), B=20)
    check_report(page)
    m = pd.read_csv(page.parent / "metrics.csv")
    assert set(m["model"]) == {"first-option"}
