"""The one typed metrics row (issue 19 item 5): MetricRow's fields are the long schema, from_estimate keeps an
estimate's numbers (scaled when asked), metrics_frame keeps the schema's order, and the suites' tables use it."""

from __future__ import annotations

import dataclasses
import math

import pytest

from medvlm_audit.results import COMPARISONS_COLUMNS, METRICS_COLUMNS, MetricRow, metrics_frame
from medvlm_audit.stats import Estimate

EST = Estimate(point=0.4, se=0.05, ci_low=0.3, ci_high=0.5, n=80, method="percentile bootstrap")


def test_fields_are_the_long_schema_and_the_row_is_frozen() -> None:
    assert METRICS_COLUMNS == ("suite", "probe_set", "model", "metric", "subset", "point", "se", "ci_low", "ci_high",
                               "n", "unit", "method", "note")
    row = MetricRow.from_estimate(EST, suite="s", probe_set="p", model="m", metric="acc", subset="all", unit="fraction")
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.point = 1.0  # type: ignore[misc]
    assert list(row.as_dict()) == list(METRICS_COLUMNS)


def test_from_estimate_keeps_or_scales_the_numbers() -> None:
    row = MetricRow.from_estimate(EST, suite="s", probe_set="p", model="m", metric="acc", subset="all", unit="fraction")
    assert (row.point, row.se, row.ci_low, row.ci_high, row.n, row.method, row.note) == \
        (0.4, 0.05, 0.3, 0.5, 80, "percentile bootstrap", "")
    pct = MetricRow.from_estimate(EST, suite="s", probe_set="p", model="m", metric="acc", subset="all", unit="%",
                                  method="own words", note="why", scale=100.0)
    assert pct.point == pytest.approx(40.0) and pct.ci_low == pytest.approx(30.0) and pct.ci_high == pytest.approx(50.0)
    assert (pct.n, pct.method, pct.note, pct.unit) == (80, "own words", "why", "%")
    nan = MetricRow.from_estimate(Estimate(math.nan, math.nan, math.nan, math.nan, 0, "none"), suite="s",
                                  probe_set="p", model="m", metric="acc", subset="all", unit="%", scale=100.0)
    assert math.isnan(nan.point) and nan.n == 0


def test_metrics_frame_orders_columns_and_keeps_them_when_empty() -> None:
    row = MetricRow("s", "p", "m", "acc", "all", 0.5, math.nan, 0.4, 0.6, 10, "fraction", "k/n")
    extra = {**row.as_dict(), "extra": 1}
    df = metrics_frame([extra, row], columns=[*METRICS_COLUMNS, "extra"])
    assert list(df.columns) == [*METRICS_COLUMNS, "extra"] and df["extra"].isna().tolist() == [False, True]
    assert list(metrics_frame([]).columns) == list(METRICS_COLUMNS) and metrics_frame([]).empty


def test_the_suites_tables_use_the_one_schema() -> None:
    from medvlm_audit.readers.agreement import COMPARISON_COLUMNS, METRIC_COLUMNS, metric_row
    from medvlm_audit.suites.grounding.analysis import METRIC_COLUMNS as GROUNDING
    from medvlm_audit.suites.grounding.comparisons import COMPARISON_COLUMNS as GROUNDING_COMP

    assert METRIC_COLUMNS == list(METRICS_COLUMNS) and COMPARISON_COLUMNS == list(COMPARISONS_COLUMNS)
    assert GROUNDING == ["probe_set", "model", "modality", "metric", "subset", "point", "se", "ci_low", "ci_high", "n",
                         "unit", "method", "note", "k", "ci_method"]
    assert GROUNDING_COMP == [*COMPARISONS_COLUMNS, "statistic"]
    assert metric_row("p", "m", "kappa", "all", 0.5, 0.1, 0.3, 0.7, 12.0, "kappa", "how") == \
        MetricRow("readers", "p", "m", "kappa", "all", 0.5, 0.1, 0.3, 0.7, 12, "kappa", "how").as_dict()
