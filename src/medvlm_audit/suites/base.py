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

    from medvlm_audit.columns import Columns
    from medvlm_audit.readers.tasks import ReaderTask
    from medvlm_audit.report.sections import Section
    from medvlm_audit.store import RunStore

__all__ = ["COMPARISONS_COLUMNS", "METRICS_COLUMNS", "Plan", "PlanSource", "Skip", "Stage", "StageContext", "Suite",
           "SuiteResult", "Trial"]


class Suite(Protocol):
    """An audit: its options, stages, scoring, analysis and embedded default. Registered by name in
    :mod:`medvlm_audit.suites`; the core calls nothing else of it.

    A suite class subclasses this protocol explicitly (``class MySuite(Suite): ...``), so the optional members
    below come with their defaults and the core reads every member directly (never with ``getattr``):

    * ``backends``: model-backend names this suite brings (its reference models) -> ``"module:factory"``,
      registered when the suite is loaded (default: none);
    * ``image_ops``: image operations this suite brings (e.g. overlays) -> ``"module:function"`` (default: none);
    * ``parquet_tables``: also write each extra report table as Parquet (default: CSV only);
    * ``report_modules``: modules its report's sections need (e.g. the figure code and matplotlib), imported in a
      process forked when a report starts, while the run is read and analysed (``report.parallel.prepare``);
    * ``analysis_modules``: modules its analysis needs, imported by a report while that process reads the run;
    * ``tidy_by_model``: its :meth:`tidy` is row-wise within each model (the tidy table of a store restricted to
      some models is those models' rows of the whole table, in order), so a report on many cores reads it in
      forked parts, one group of models each (``export.tidy_by_model``; default: read whole);
    * ``view``: what the run explorer shows of its tidy table (default: the generic view);
    * :meth:`commands`: this suite's own CLI commands (default: none);
    * :meth:`preflight`: problems found before the run (default: none);
    * :meth:`cases_section`: the report's cases behind the verdicts (default: read through ``view``);
    * :meth:`reader_tasks`: this suite's reader-study tasks (default: none);
    * :meth:`parse_rate_lines`: the run's console warnings on answers or judges that are not assessable (default:
      :func:`medvlm_audit.health.results_parse_rate_lines`).
    """

    name: ClassVar[str]
    title: ClassVar[str]
    Options: ClassVar[type[BaseModel]]
    backends: ClassVar[dict[str, str]] = {}
    image_ops: ClassVar[dict[str, str]] = {}
    parquet_tables: ClassVar[bool] = False
    report_modules: ClassVar[tuple[str, ...]] = ()
    analysis_modules: ClassVar[tuple[str, ...]] = ()
    tidy_by_model: ClassVar[bool] = False
    #: what the run explorer (`medvlm-audit view`) shows of this suite's tidy table (``view.data.ViewSpec``: the
    #: item column, the base condition, the columns that make two trials comparable, filters, labels); empty: the
    #: explorer's generic view
    view: ClassVar[dict[str, Any]] = {}

    def stages(self) -> Sequence[Stage]: ...

    def embedded_config(self, out: Path, **flags: Any) -> dict[str, Any]:
        """The run config of the offline embedded default, preparing its data under ``out`` when needed."""
        ...

    def tidy(self, store: RunStore) -> pd.DataFrame:
        """The scored tidy table of a run store (one row per model x case x condition x sample)."""
        ...

    def tidy_columns(self, store: RunStore) -> Columns | None:
        """:meth:`tidy` without pandas, as plain columns with the dtypes pandas gives them (what a run exports
        at its end, so that a run needs no pandas: :mod:`medvlm_audit.columns`); None (the default) where the
        suite does not build it, or not for this store: the export then writes :meth:`tidy`'s table."""
        return None

    def analyse(self, tidy: pd.DataFrame, options: BaseModel, **report_options: Any) -> SuiteResult: ...

    def commands(self) -> dict[str, str]:
        """This suite's own CLI commands: ``"name"`` (or ``"build name"`` for a ``build`` subcommand) ->
        ``"module:function"`` (a typer command function, imported only when the command is used or listed).
        The CLI reads them from every registered suite when a command it does not know is asked for, or when
        it lists its commands."""
        return {}

    def preflight(self, ctx: StageContext) -> Sequence[str]:
        """Every problem that would stop this suite's run or report and can be found before any work or any
        file (its extras and optional packages, knowledge bases, corpora, model paths), one line each; the run
        lists them all at once and writes nothing. Default: none."""
        return ()

    def cases_section(self, run_dir: Path) -> Section | None:
        """The report's "cases behind the verdicts" (flipped answers per model and condition, read from the run
        folder as the run explorer reads it, through this suite's ``view``); None when the suite has no flips.
        Default: :func:`medvlm_audit.view.cases.cases_section` of this suite."""
        from medvlm_audit.view.cases import cases_section

        return cases_section(run_dir, self)

    def parse_rate_lines(self, results_parquet: Path) -> Sequence[str]:
        """The warnings ``run`` prints after the run, one per model (or judge) not assessable somewhere, read from
        the exported ``results.parquet``; a suite whose analysis decides "not assessable" by another rule than the
        default gives its own, so the console says what the report says. Default:
        :func:`medvlm_audit.health.results_parse_rate_lines` (the parse rate per condition; judges' valid outputs)."""
        from medvlm_audit.health import results_parse_rate_lines

        return results_parse_rate_lines(results_parquet)

    def reader_tasks(self) -> Sequence[ReaderTask]:
        """The reading tasks this suite brings to the reader study (:class:`~medvlm_audit.readers.tasks.ReaderTask`:
        the answer scales, a sampler of items from a run or an items file, the analysis of the exported reads).
        Task names are unique across suites. Default: none."""
        return ()
