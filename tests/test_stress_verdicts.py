"""The stress verdict reads intervals, says indeterminate with its reason, and carries its bootstrap support
(DESIGN.md, stress audit and statistics conventions; issue 21 item 2)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from test_stress_analysis import probe_items

from medvlm_audit import stats
from medvlm_audit.suites.stress.analysis import analyse_stress
from medvlm_audit.suites.stress.sections import stress_result, stress_verdicts
from medvlm_audit.suites.stress.verdicts import (
    ABSENT,
    FOUND,
    INDETERMINATE,
    Evidence,
    status_for,
    verdict_table,
    verdict_tags,
)

# ------------------------------------------------------------------------------------------- the rule, by hand


@pytest.mark.parametrize(("test", "point", "lo", "hi", "q", "ref", "expect"), [
    ("T2", 0.50, 0.30, 0.70, 0.01, 0.20, FOUND),  # interval above chance, q < 0.05
    ("T2", 0.50, 0.30, 0.70, 0.20, 0.20, INDETERMINATE),  # above chance, but q is not below 0.05
    ("T2", 0.25, 0.10, 0.40, 0.30, 0.20, INDETERMINATE),  # straddles chance and chance + 10 pp
    ("T2", 0.10, 0.00, 0.25, 1.00, 0.20, ABSENT),  # below chance + 10 pp = 30%
    ("T2", 0.20, 0.10, 0.31, 1.00, 0.20, INDETERMINATE),  # hi = 31% is not below 30%
    ("T3", -0.30, -0.43, -0.18, 0.01, 0.0, FOUND),
    ("T3", 0.30, 0.18, 0.43, 0.01, 0.0, FOUND),  # either direction
    ("T3", -0.05, -0.18, 0.07, 0.50, 0.0, INDETERMINATE),
    ("T3", 0.01, -0.05, 0.08, 0.90, 0.0, ABSENT),  # within +-10 pp
    ("T1", -0.50, -0.70, -0.30, 0.001, 0.0, FOUND),
    ("T1", 0.00, -0.05, 0.05, 1.0, 0.0, ABSENT),  # the image adds less than 10 pp
    ("T1", -0.08, -0.20, 0.04, 0.3, 0.0, INDETERMINATE),
])
def test_status_by_hand(test, point, lo, hi, q, ref, expect):
    assert status_for(test, point, point - lo, hi - point, q, ref)[0] == expect


def test_support_is_the_share_of_draws_giving_the_same_verdict():
    # T3 observed -0.30 [-0.43, -0.18] (widths 0.13 below, 0.12 above), q 0.01: position bias.
    # Draws -0.30, -0.05, -0.25, -0.10: their moved intervals [-0.43, -0.18], [-0.18, +0.07], [-0.38, -0.13],
    # [-0.23, +0.02] -> found, indeterminate, found, indeterminate: support 2/4.
    # T2 observed 0.10 [0.00, 0.25] vs chance 0.20 (absent); draws 0.10, 0.10, 0.20, 0.10 -> hi 0.25, 0.25,
    # 0.35, 0.25 -> absent, absent, indeterminate, absent: support 3/4.
    # Verdict per draw: position bias, indeterminate, position bias, indeterminate -> support 2/4.
    ev = {"m": {
        "T3": Evidence("T3", -0.30, -0.43, -0.18, 40, 0.01, draws=np.array([-0.30, -0.05, -0.25, -0.10]),
                       text="t3"),
        "T2": Evidence("T2", 0.10, 0.00, 0.25, 40, 1.0, ref=0.20, draws=np.array([0.10, 0.10, 0.20, 0.10]),
                       text="t2"),
    }}
    row = verdict_table(ev).iloc[0]
    assert row["T3_status"] == FOUND and row["T3_support"] == pytest.approx(0.5)
    assert row["T2_status"] == ABSENT and row["T2_support"] == pytest.approx(0.75)
    assert row["T1_status"] == "not run" and math.isnan(row["T1_support"])
    assert row["verdict"] == "position bias" and row["support"] == pytest.approx(0.5)
    assert "support 50%" in row["T3_reason"] and "support 75%" in row["T2_reason"]


def test_tags():
    s = {"T1": np.array([FOUND, INDETERMINATE, FOUND]), "T2": np.array([ABSENT, ABSENT, FOUND]),
         "T3": np.array([ABSENT, INDETERMINATE, ABSENT])}
    assert verdict_tags(s, 3).tolist() == ["reads the image, no shortcut found", "indeterminate",
                                           "reads the image, text shortcut"]
    assert verdict_tags({"T2": "not assessable", "T3": ABSENT}, 1).tolist() == ["not assessable"]
    assert verdict_tags({"T2": ABSENT, "T3": ABSENT}, 1, model_na=True).tolist() == ["not assessable"]
    assert verdict_tags({"T2": FOUND, "T3": "not assessable"}, 1).tolist() == ["text shortcut"]


def test_no_shortcut_found_needs_a_test_that_ran():
    ev = {"m": {"T1": Evidence("T1", -0.5, -0.7, -0.3, 40, 0.001, text="t1")}}
    row = verdict_table(ev).iloc[0]
    assert row["verdict"] == "reads the image, indeterminate" and "no shortcut test ran" in row["reason"]
    ev["m"]["T3"] = Evidence("T3", 0.0, -0.05, 0.05, 40, 1.0, text="t3")
    assert verdict_table(ev).iloc[0]["verdict"] == "reads the image, no shortcut found"
    assert verdict_tags({"T2": "not run", "T3": "not run"}, 1).tolist() == [INDETERMINATE]


def test_q_gate_reason():
    ev = {"m": {"T2": Evidence("T2", 0.40, 0.25, 0.55, 30, 0.08, ref=0.20, text="t2")}}
    row = verdict_table(ev).iloc[0]
    assert row["T2_status"] == INDETERMINATE and "q 0.080 is not below 0.05" in row["T2_reason"]
    assert row["verdict"] == INDETERMINATE and math.isnan(row["support"])  # no draws: no support


# ------------------------------------------------------------------------------- DESIGN conformance, end to end


def _steady(n_items: int, n_right: int) -> pd.DataFrame:
    """Every T1-T5 trial on ``n_items`` five-option items, answered by a model right on the first ``n_right``
    items and wrong on the others whatever the condition (its answers never change)."""
    from medvlm_audit.suites.stress.conditions import StressOptions, plan_stress
    from medvlm_audit.suites.stress.items import LETTERS

    plan = plan_stress(probe_items(0, n_items), StressOptions(check_files=False))
    right = {f"q{i:02d}" for i in range(n_right)}
    rows = []
    for t in plan.trials:
        p = t.payload
        gold = LETTERS.index(p["gold"])
        pick = gold if t.case_id in right else (gold + 1) % p["n_options"]
        rows.append({"model": "steady", "item_id": t.case_id, "condition": t.condition, "sample_index": 0,
                     "answer_text": f"<answer>{LETTERS[pick]}</answer>", **p})
    return pd.DataFrame(rows)


def test_a_too_small_pilot_is_indeterminate_with_a_reason():
    # 2 of 8 items right whatever the condition: text-only 25% [Wilson 7.1, 59.1] vs chance 20% straddles both
    # chance and chance + 10 pp; no answer changes under reordering, so T3 reads +-(Wilson upper of 0/8) = 32.4 pp
    res = analyse_stress(_steady(8, 2), B=500)
    row = res.verdicts.set_index("model").loc["steady"]
    assert row["verdict"] == INDETERMINATE
    assert row["T2_status"] == INDETERMINATE and row["T3_status"] == INDETERMINATE
    u = 100 * stats.rate_interval(0, 8)[1]
    assert f"± {u:.1f} pp" in row["T3_reason"] and "on 8 items neither" in row["T3_reason"]
    assert "25.0% [7.1, 59.1]" in row["T2_reason"] and "on 8 items neither lies above chance" in row["T2_reason"]
    tags, text = stress_verdicts(res)["steady"]
    assert tags == [INDETERMINATE] and "indeterminate" in text
    assert 0 <= row["support"] <= 1
    ch = res.chance.set_index("model").loc["steady"]
    assert ch["verdict"] == INDETERMINATE and ch["verdict_support"] == row["T2_support"]


def test_the_same_behaviour_on_enough_items_is_no_shortcut_found():
    # 24 of 120 right (20% = chance) whatever the condition: T2 interval below 30%, T3 within +-10 pp
    res = analyse_stress(_steady(120, 24), B=500)
    row = res.verdicts.set_index("model").loc["steady"]
    assert row["T2_status"] == ABSENT and row["T3_status"] == ABSENT
    assert row["verdict"] == "no shortcut found"
    # T1 and T3 never change in a draw (no answer changes), so the verdict is as firm as T2's call
    assert row["T3_support"] == 1.0 and row["support"] == pytest.approx(row["T2_support"]) and row["support"] > 0.5


def test_verdict_table_in_summary_csv_and_report(tmp_path):
    from medvlm_audit.report import write_report

    res = analyse_stress(_steady(8, 2), B=300)
    write_report(stress_result(res, "p"), tmp_path / "r", suite="stress", title="t", parquet_tables=True)
    summ = json.loads((tmp_path / "r" / "summary.json").read_text())
    v = summ["verdict_table"]["steady"]
    assert v["verdict"] == INDETERMINATE and 0 <= v["support"] <= 1
    assert v["tests"]["T3"]["status"] == INDETERMINATE and "neither" in v["tests"]["T3"]["reason"]
    assert summ["verdicts"]["steady"].startswith("indeterminate")
    csv = pd.read_csv(tmp_path / "r" / "stress_verdicts.csv")
    assert list(csv["verdict"]) == [INDETERMINATE] and "support" in csv.columns
    html = (tmp_path / "r" / "report.html").read_text()
    assert f"support {100 * v['support']:.0f}%" in html
