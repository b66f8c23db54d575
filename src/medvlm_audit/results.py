"""What a suite's analysis produces: the long metrics schema (one typed :class:`MetricRow` per estimate,
:func:`metrics_frame` for the table), the comparisons schema and :class:`SuiteResult`, which the one report
writer (:mod:`medvlm_audit.report`) renders."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from medvlm_audit.report.sections import Section
    from medvlm_audit.stats import Estimate

__all__ = ["COMPARISONS_COLUMNS", "METRICS_COLUMNS", "MetricRow", "SuiteResult", "metrics_frame"]


@dataclass(frozen=True)
class MetricRow:
    """One row of the long metrics schema (docs/tidy-schema.md): an estimate of ``metric`` for ``model`` on
    ``subset`` of ``probe_set``, with its SE, interval, n, unit, how it was computed and a note (why it is
    undefined, what it excludes). Values are kept as given (no conversion), so a table of rows is the table the
    suite built by hand before.

    >>> from medvlm_audit.stats import Estimate
    >>> est = Estimate(point=0.25, se=0.07, ci_low=0.125, ci_high=0.375, n=40, method="percentile bootstrap")
    >>> row = MetricRow.from_estimate(est, suite="faithfulness", probe_set="phantom", model="m1",
    ...                               metric="flip_rate", subset="all", unit="fraction")
    >>> row.point, row.ci_low, row.ci_high, row.n, row.method, row.note
    (0.25, 0.125, 0.375, 40, 'percentile bootstrap', '')
    >>> pct = MetricRow.from_estimate(est, suite="readers", probe_set="p", model="m1", metric="share",
    ...                               subset="all", unit="%", method="k/n", scale=100.0)
    >>> pct.point, pct.ci_high, pct.method
    (25.0, 37.5, 'k/n')
    >>> metrics_frame([row, pct])[["suite", "metric", "point", "unit"]]
              suite     metric  point      unit
    0  faithfulness  flip_rate   0.25  fraction
    1       readers      share  25.00         %
    """

    suite: str
    probe_set: str
    model: str
    metric: str
    subset: str
    point: float
    se: float
    ci_low: float
    ci_high: float
    n: int
    unit: str
    method: str
    note: str = ""

    @classmethod
    def from_estimate(cls, est: Estimate, *, suite: str, probe_set: str, model: str, metric: str, subset: str,
                      unit: str, method: str | None = None, note: str = "", scale: float = 1.0) -> MetricRow:
        """The row of a :class:`~medvlm_audit.stats.Estimate`: its point, SE and interval (times ``scale``, e.g.
        100 for percent), its n, and its own method unless ``method`` is given."""
        if scale != 1.0:
            return cls(suite, probe_set, model, metric, subset, scale * est.point, scale * est.se, scale * est.ci_low,
                       scale * est.ci_high, est.n, unit, est.method if method is None else method, note)
        return cls(suite, probe_set, model, metric, subset, est.point, est.se, est.ci_low, est.ci_high, est.n, unit,
                   est.method if method is None else method, note)

    def as_dict(self) -> dict[str, Any]:
        """The row as ``{column: value}`` in the schema's order."""
        return {c: getattr(self, c) for c in METRICS_COLUMNS}


#: columns of every suite's long metrics table, in order (the fields of :class:`MetricRow`)
METRICS_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(MetricRow))
#: columns of every suite's paired comparisons (one row per test; p_adj is BH within ``family``).
COMPARISONS_COLUMNS: tuple[str, ...] = ("family", "probe_set", "metric", "subset", "model_a", "model_b", "diff",
                                        "sd", "ci_low", "ci_high", "p", "p_adj", "n", "test", "note")


def metrics_frame(rows: Iterable[MetricRow | Mapping[str, Any]], columns: Sequence[str] = METRICS_COLUMNS
                  ) -> pd.DataFrame:
    """The long metrics table of ``rows`` (typed rows, or dicts of a suite that adds columns of its own) with
    ``columns`` in order; no rows give an empty table with those columns."""
    import pandas as pd

    return pd.DataFrame([r.as_dict() if isinstance(r, MetricRow) else r for r in rows], columns=list(columns))


def _empty_frame(columns: Sequence[str]) -> pd.DataFrame:
    import pandas as pd  # imported when a result is built, so importing the registry stays light

    return pd.DataFrame(columns=list(columns))


@dataclass
class SuiteResult:
    """What a suite's analysis hands the report writer.

    ``metrics`` and ``comparisons`` use the shared long schemas above (extra columns are kept after them);
    ``sections`` are the report's blocks in order (the first is usually the verdicts); ``tables`` are extra
    tables written as ``NAME.csv`` and ``NAME.parquet``; ``summary`` goes to ``summary.json``."""

    metrics: pd.DataFrame
    comparisons: pd.DataFrame = field(default_factory=lambda: _empty_frame(COMPARISONS_COLUMNS))
    sections: list[Section] = field(default_factory=list)
    verdicts: dict[str, str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    #: short lines shown under the title ("how to read this" comes from the suite)
    intro: str = ""


