"""Issue 21, "Done when": no printed rate interval in any suite's embedded default has zero width (a rate of k
events in n >= 1 cases is printed with ``stats.rate_interval``, Wilson where min(k, n - k) < 10). The paper-sized
grounding import is checked in test_grounding_categories.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from medvlm_audit.suites import suite_names

#: metrics in percent or fraction units that are not a rate of k events in n (means of scores or similarities,
#: robustness terms built from differences, a type-token ratio): their intervals may legitimately be [x, x]
NOT_RATES = {"robustness", "bleu", "rouge1", "rougeL", "bertscore_f1", "bertscore_precision", "bertscore_recall",
             "ttr", "one_minus_self_bleu"}


def zero_width_rates(metrics: pd.DataFrame) -> pd.DataFrame:
    """The rate rows of a long metrics table (unit % or fraction, a metric not in NOT_RATES) with n >= 1, a
    printed interval and ci_low == ci_high."""
    m = metrics
    rates = m[m["unit"].isin(["%", "fraction"]) & ~m["metric"].isin(NOT_RATES) & (m["n"] >= 1)
              & m["ci_low"].notna() & m["ci_high"].notna()]
    return rates[rates["ci_low"] >= rates["ci_high"]]


def test_the_scan_finds_a_zero_width_rate():
    m = pd.DataFrame({"metric": ["accuracy", "accuracy", "robustness", "flip_rate"], "unit": ["%", "fraction",
                      "fraction", "fraction"], "n": [33, 40, 12, 0], "ci_low": [0.0, 0.1, 1.0, 0.0],
                      "ci_high": [0.0, 0.3, 1.0, 0.0]})
    assert zero_width_rates(m).index.tolist() == [0]  # CGR 0/33 printed [0, 0] is caught; the others are not rates


@pytest.mark.slow
@pytest.mark.parametrize("suite", suite_names())
def test_embedded_default_prints_no_zero_width_rate_interval(suite: str, tmp_path: Path):
    from medvlm_audit import api

    res = api.demo(suite, tmp_path / suite, progress=False, log=lambda *_: None)
    metrics = pd.read_csv(Path(res.report).parent / "metrics.csv")
    assert len(metrics), f"{suite}: empty metrics.csv"
    # (the reports default prints no single rate with an interval: its rates are counts and diversity shares)
    zero = zero_width_rates(metrics)
    assert zero.empty, zero[["model", "metric", "subset", "n", "ci_low", "ci_high"]].head(10).to_string()


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["stress", "faithfulness"])
def test_stress_and_faithfulness_defaults_print_no_zero_width_interval_at_all(suite: str, tmp_path: Path):
    """Beyond rates (issue 21; audit defects 3-5): no row of metrics.csv or comparisons.csv of the stress and
    faithfulness defaults has a zero-width interval: robustness terms, mean scores and paired changes that every
    bootstrap draw gives alike print a conservative interval with a note (214 of 356 faithfulness rows did)."""
    from medvlm_audit import api

    res = api.demo(suite, tmp_path / suite, progress=False, log=lambda *_: None)
    for name in ("metrics.csv", "comparisons.csv"):
        t = pd.read_csv(Path(res.report).parent / name)
        shown = t[t["ci_low"].notna() & t["ci_high"].notna()]
        assert len(shown), f"{suite} {name}: no interval"
        zero = shown[shown["ci_low"] >= shown["ci_high"]]
        assert zero.empty, f"{suite} {name}:\n" + zero.head(10).to_string()
