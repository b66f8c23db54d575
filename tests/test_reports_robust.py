"""Regression test of issue 22 for the reports suite: one-word reports leave ΔWAE undefined (no word of the
F reports is scored), and the report is written with it shown as undefined, not a ``KeyError: 'delta_wae'``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd

WORDS = ["heart", "lungs", "clear", "effusion", "normal", "pneumothorax", "mild", "cardiomegaly", "breast", "tissue", "prostate"]


def reference_file(path: Path, n: int = 40, seed: int = 0) -> Path:
    rnd = random.Random(seed)
    path.write_text("".join(json.dumps({"id": f"r{i}", "text": " ".join(rnd.choice(WORDS) for _ in range(8)),
                                        "group": "F" if i % 2 else "M"}) + "\n" for i in range(n)))
    return path


def test_one_word_reports_give_a_report_with_undefined_delta_wae(tmp_path: Path) -> None:
    from medvlm_audit.report import write_report
    from medvlm_audit.suites.reports.analysis import analyse_reports
    from medvlm_audit.suites.reports.suite import ReportsOptions

    ref = reference_file(tmp_path / "ref.jsonl")
    tidy = pd.DataFrame([{"run_id": "x", "model": "m", "probe_set": "p", "case_id": f"c{i}", "strategy": "greedy",
                          "sample_index": 0, "group": "F" if i % 2 else "M", "report": "normal normal"}
                         for i in range(10)])  # one word (twice: a one-word report is not assessable, assess.py)
    opts = ReportsOptions(reference=str(ref), B=20, n_perm=20, semantic="off", bertscore="off")
    res = analyse_reports(tidy, opts)
    delta = res.metrics[res.metrics.metric == "delta_wae"]
    assert len(delta) == 1 and pd.isna(delta["point"].item())
    assert "undefined" in delta["note"].item()
    page = write_report(res, tmp_path / "report", suite="reports", title="one-word reports")
    assert page.exists() and (tmp_path / "report" / "summary.json").exists()
    assert "—" in page.read_text()  # the undefined ΔWAE is shown as a dash


def test_reports_of_one_group_only_give_a_report_saying_why(tmp_path: Path) -> None:
    from medvlm_audit.report import write_report
    from medvlm_audit.suites.reports.analysis import analyse_reports
    from medvlm_audit.suites.reports.suite import ReportsOptions

    ref = reference_file(tmp_path / "ref.jsonl")
    tidy = pd.DataFrame([{"run_id": "x", "model": "m", "probe_set": "p", "case_id": f"c{i}", "strategy": "greedy",
                          "sample_index": 0, "group": "F", "report": "heart normal"} for i in range(4)])
    res = analyse_reports(tidy, ReportsOptions(reference=str(ref), B=20, n_perm=20, semantic="off",
                                               bertscore="off"))
    assert set(res.metrics.metric) == {"assessable_share"} and "undefined" in res.verdicts["m"]
    page = write_report(res, tmp_path / "report", suite="reports", title="one group")
    assert "Nothing to audit" in page.read_text() and "every report is in group F" in page.read_text()
    assert ">not assessable</span>" in page.read_text()  # the verdict block opens the page with its badge
