"""What a suite's analysis produces: the long metrics schema, the comparisons schema and :class:`SuiteResult`,
which the one report writer (:mod:`medvlm_audit.report`) renders."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from medvlm_audit.report.sections import Section

__all__ = ["COMPARISONS_COLUMNS", "METRICS_COLUMNS", "SuiteResult"]


METRICS_COLUMNS: tuple[str, ...] = ("suite", "probe_set", "model", "metric", "subset", "point", "se", "ci_low",
                                    "ci_high", "n", "unit", "method", "note")
#: columns of every suite's paired comparisons (one row per test; p_adj is BH within ``family``).
COMPARISONS_COLUMNS: tuple[str, ...] = ("family", "probe_set", "metric", "subset", "model_a", "model_b", "diff",
                                        "sd", "ci_low", "ci_high", "p", "p_adj", "n", "test", "note")


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


