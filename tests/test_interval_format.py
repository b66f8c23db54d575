"""Issue 21 (defects 5 and 12): a printed interval of nonzero width never prints as zero width, a nonzero point
never prints as 0, and a zero SE never sits beside an interval of nonzero width (report.html's shared formatter,
used by the reports suite's tables and verdicts and by every ``format_estimate``)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from medvlm_audit.report.html import format_estimate, format_interval
from medvlm_audit.suites.reports.sections import _ci


def _numbers(text: str) -> list[str]:
    return re.findall(r"[-+]?\d+\.\d+", text)


@pytest.mark.parametrize("unit", ["%", "pp", "z", "prob"])
def test_nonzero_width_never_prints_zero_width(unit: str) -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        scale = 10.0 ** rng.integers(-6, 3)
        lo = float(rng.uniform(-1, 1) * scale)
        hi = lo + float(rng.uniform(1e-3, 1) * scale)
        point = float(rng.uniform(lo, hi))
        p, a, b = _numbers(format_interval(point, lo, hi, unit))
        assert a != b, (point, lo, hi, unit)
        assert float(a) <= float(p) <= float(b)
        if point != 0:
            assert float(p) != 0.0, (point, unit)


def test_the_audit_examples() -> None:
    # WAE_pred printed "0.0 [0.0, 0.0]", WAE_ref "0.1 [0.1, 0.1]" (metrics.csv: 0.0039 [0.00055, 0.0092] and
    # 0.0828 [0.0784, 0.0833])
    assert _ci(0.003896782, 0.000545817, 0.009215737) == "0.0039 [0.0005, 0.0092]"
    assert _ci(0.082777944, 0.078380245, 0.083318917) == "0.0828 [0.0784, 0.0833]"
    assert _ci(0.0039, float("nan"), float("nan")) == "0.0039 (no interval)"
    # ordinary widths keep the unit's precision
    assert format_interval(78.34, 75.91, 80.62) == "78.3 [75.9, 80.6]"
    assert format_interval(0.5, 0.41, 0.6, "prob") == "0.500 [0.410, 0.600]"


def test_zero_se_beside_a_wide_interval_is_not_printed() -> None:
    # grounding printed "0.0 ± 0.0 [0.0, 39.0] (n = 6)" (analytic SE at 0 events beside Wilson's interval)
    assert format_estimate(0.0, 0.0, 0.0, 39.0, 6) == "0.0 [0.0, 39.0] (n = 6)"
    assert "±" not in format_estimate(0.0, 0.0, -12.5, 30.0, 6, "pp")
    # a real SE stays, and a zero-width interval keeps its (consistent) zero SE
    assert format_estimate(78.3, 1.2, 75.9, 80.6, 412) == "78.3 ± 1.2 [75.9, 80.6] (n = 412)"
    assert format_estimate(50.0, 0.0, 50.0, 50.0, 4) == "50.0 ± 0.0 [50.0, 50.0] (n = 4)"
    assert format_estimate(1.5, 0.3, 1.0, 2.0, 9, "pp") == "+1.5 ± 0.3 [+1.0, +2.0] (n = 9)"


def test_rouge_of_zero_overlap_gets_the_exact_bound_not_zero_width() -> None:
    # the audit's ROUGE 0.0 [0.0, 0.0] at n = 12: every pair scored 0, so every cluster resample is 0
    from medvlm_audit import stats
    from medvlm_audit.suites.reports.audit import surface_frame
    from medvlm_audit.suites.reports.corpus import make_corpus

    ref = make_corpus(({"id": f"c{i}", "text": "heart size normal lungs clear", "group": "FM"[i % 2]}
                       for i in range(12)), "ref")
    pred = make_corpus(({"id": f"c{i}", "text": "blorp quux zing", "group": "FM"[i % 2]} for i in range(12)), "pred")
    f = surface_frame(ref, pred, B=200).set_index("metric")
    for m in ("rouge1", "rougeL"):
        r = f.loc[m]
        assert r["value"] == 0.0 and r["ci_low"] == 0.0
        assert r["ci_high"] == pytest.approx(1 - 0.025 ** (1 / 12)) and "degenerate" in r["method"]
    # the exact bound: Clopper-Pearson's upper end for 0 of 12, (alpha/2)-quantile of Beta(1, 12)
    from scipy.stats import beta
    assert stats.bounded_mean_interval_at_edge(12, 0.0)[1] == pytest.approx(beta.ppf(0.975, 1, 12))
    # a model with some overlap keeps its cluster-bootstrap interval
    pred2 = make_corpus(({"id": f"c{i}", "text": "heart size normal" if i % 3 else "blorp", "group": "FM"[i % 2]}
                         for i in range(12)), "pred")
    r = surface_frame(ref, pred2, B=200).set_index("metric").loc["rouge1"]
    assert "degenerate" not in r["method"] and r["ci_low"] < r["value"] < r["ci_high"]
