"""The suite interface: a suite turns its inputs into a :class:`Plan` of trials, and scores a tidy table.

A Trial is one question before any model is involved: a case (item) under a condition, as chat messages
plus image recipes (pure functions of source files and recorded parameters). The runner turns a trial into
each model's ModelInput, keys it by content hash, asks each distinct input once and stores the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import pandas as pd

from medvlm_audit.images import ImageRecipe
from medvlm_audit.models.base import Message


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


class Suite(Protocol):
    """What the runner and the CLI need from a suite."""

    name: str

    def plan(self, config: Any) -> Plan: ...

    def score(self, tidy: pd.DataFrame) -> pd.DataFrame:
        """Add parsed / confidence / correct columns to a tidy table of raw answers."""
        ...
