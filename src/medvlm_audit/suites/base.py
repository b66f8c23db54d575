"""The suite interface: what every audit gives the core (options, stages, tidy scoring, analysis, embedded default).

The plan types (:mod:`medvlm_audit.plan`) and the result types (:mod:`medvlm_audit.results`) are shared by the
engine and the suites and are re-exported here. After the run, :meth:`Suite.tidy` scores the store into one tidy
table and :meth:`Suite.analyse` turns that table into a :class:`SuiteResult` that the one report writer renders.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from medvlm_audit.plan import Plan, PlanSource, Skip, Stage, StageContext, Trial
from medvlm_audit.results import COMPARISONS_COLUMNS, METRICS_COLUMNS, SuiteResult

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pydantic import BaseModel

    from medvlm_audit.store import RunStore

__all__ = ["COMPARISONS_COLUMNS", "METRICS_COLUMNS", "Plan", "PlanSource", "Skip", "Stage", "StageContext", "Suite",
           "SuiteResult", "Trial"]


class Suite(Protocol):
    """An audit: its options, stages, scoring, analysis and embedded default. Registered by name in
    :mod:`medvlm_audit.suites`; the core calls nothing else of it.

    ``backends`` maps model-backend names this suite brings (its reference models) to ``"module:factory"``;
    they are registered when the suite is loaded. A suite's own CLI commands are registered by name in
    :data:`medvlm_audit.suites.COMMANDS` (lazily, so the CLI starts without loading any suite)."""

    name: ClassVar[str]
    title: ClassVar[str]
    Options: ClassVar[type[BaseModel]]
    backends: ClassVar[dict[str, str]]

    def stages(self) -> Sequence[Stage]: ...

    def embedded_config(self, out: Path, **flags: Any) -> dict[str, Any]:
        """The run config of the offline embedded default, preparing its data under ``out`` when needed."""
        ...

    def tidy(self, store: RunStore) -> pd.DataFrame:
        """The scored tidy table of a run store (one row per model x case x condition x sample)."""
        ...

    def analyse(self, tidy: pd.DataFrame, options: BaseModel, **report_options: Any) -> SuiteResult: ...
