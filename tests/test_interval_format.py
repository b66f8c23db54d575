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
