"""The suite interface: what every audit gives the core (options, stages, tidy scoring, analysis, embedded default).

A Trial is one question before any model is involved: a case (item) under a condition, as chat messages
plus image recipes (pure functions of source files and recorded parameters). The runner turns a trial into
each model's ModelInput, keys it by content hash, asks each distinct input once and stores the answer.

A suite declares one or more :class:`Stage`s. Each stage plans its trials from a :class:`StageContext` (the
run config, the suite's validated options and, for a later stage, the run store holding the answers of the
earlier ones) and names the models that answer it. Every stage goes through the same runner, store, keys and
resume. After the run, :meth:`Suite.tidy` scores the store into one tidy table and :meth:`Suite.analyse`
turns that table into a :class:`SuiteResult` that the one report writer (:mod:`medvlm_audit.report`) renders.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from medvlm_audit.images import ImageRecipe
from medvlm_audit.models.base import Message

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pydantic import BaseModel

    from medvlm_audit.config import ModelSpec, RunConfig
    from medvlm_audit.readers.tasks import ReaderTask
    from medvlm_audit.report.sections import Section
    from medvlm_audit.store import RunStore


@dataclass(frozen=True, slots=True)
class Trial:
    probe_set: str
    case_id: str
    condition: str
    messages: tuple[Message, ...]
    images: tuple[ImageRecipe, ...] = ()
    sample_index: int = 0
    payload: dict[str, Any] | None = None  # suite-specific fields kept in the store (e.g. options shown, gold)
    #: decoding fields this trial overrides (e.g. a longer max_new_tokens for chain-of-thought)
    decoding: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class Skip:
    probe_set: str
    case_id: str
    condition: str
    reason: str


@dataclass(frozen=True, slots=True)
class PlanSource:
    """A probe set (or item set) the plan draws on, recorded in the run store with its rows and hash."""

    name: str
    path: str
    content_hash: str
    rows: pd.DataFrame
    provenance: dict[str, Any]


@dataclass
class Plan:
    trials: list[Trial] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    sources: list[PlanSource] = field(default_factory=list)

    def extend(self, other: Plan) -> None:
        self.trials.extend(other.trials)
        self.skipped.extend(other.skipped)
        self.sources.extend(other.sources)


@dataclass
class StageContext:
    """What a stage's planner sees: the run config, the suite's validated options, the run directory, and the
    run store (``None`` while the first stage plans: the store is created only after every source checks out)."""

    config: RunConfig
    options: BaseModel
    run_dir: Path
    store: RunStore | None = None


def _config_models(ctx: StageContext) -> list[ModelSpec]:
    return list(ctx.config.models)


@dataclass(frozen=True)
class Stage:
    """One round of model calls: ``plan`` builds its trials, ``models`` names who answers (default: the run's
    models). A later stage reads the answers of earlier ones through ``ctx.store``."""

    name: str
    plan: Callable[[StageContext], Plan]
    models: Callable[[StageContext], list[ModelSpec]] = _config_models
    #: checks the built models against the stage's plan before anything is written (e.g. a decoding a backend
    #: cannot do); raises ConfigError naming the option
    check: Callable[[StageContext, list[Any]], None] | None = None


#: columns of every suite's metrics table (one row per model x metric x subset), in this order.
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

    def reader_tasks(self) -> Sequence[ReaderTask]:
        """The reading tasks this suite brings to the reader study (:class:`~medvlm_audit.readers.tasks.ReaderTask`:
        the answer scales, a sampler of items from a run or an items file, the analysis of the exported reads).
        Task names are unique across suites. Default: none."""
        return ()
