"""What a stage asks: Trial, Skip, PlanSource, Plan, StageContext and Stage (shared by the engine and the suites).

A Trial is one question before any model is involved: a case (item) under a condition, as chat messages
plus image recipes (pure functions of source files and recorded parameters). The runner turns a trial into
each model's ModelInput, keys it by content hash, asks each distinct input once and stores the answer.

A suite declares one or more :class:`Stage`s. Each stage plans its trials from a :class:`StageContext` (the
run config, the suite's validated options and, for a later stage, the run store holding the answers of the
earlier ones) and names the models that answer it. Every stage goes through the same runner, store, keys and
resume.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medvlm_audit.images import ImageRecipe
from medvlm_audit.models.base import Message

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pydantic import BaseModel

    from medvlm_audit.config import ModelSpec, RunConfig
    from medvlm_audit.store import RunStore

__all__ = ["Plan", "PlanSource", "Skip", "Stage", "StageContext", "Trial"]


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
    """A probe set (or item set) the plan draws on, recorded in the run store with its rows and hash. ``rows``: a
    table, or a sequence of its rows as JSON-ready dicts (what the store records: Python scalars, None where
    missing)."""

    name: str
    path: str
    content_hash: str
    rows: pd.DataFrame | Sequence[dict[str, Any]]
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
