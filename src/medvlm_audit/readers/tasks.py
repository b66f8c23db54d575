"""The reader-task interface: what a suite gives the reader study (papers 000, 001, 003) for each reading task.

A :class:`ReaderTask` is declared by a suite (``Suite.reader_tasks()``): its :class:`TaskSpec` (what a reader
is asked and the answers offered), a sampler that builds the study's items from a run or an items file, an
analysis that turns exported reads into metric rows, and optional hooks (a figure or section that needs
several tasks' metrics, extra export files). The study store, the app, export and the agreement statistics
(:mod:`medvlm_audit.readers`) are the same for every task and name no suite's columns.

A task is a list of *scales* (most have one); a scale is a question part with its answer choices, each with
the key that selects it in the reading view. An item is complete when every scale has an answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medvlm_audit.errors import AuditError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["YES_NO", "AnalysisRequest", "Choice", "ReaderAnalysis", "ReaderTask", "SampleRequest", "Scale",
           "StudyError", "TaskSpec", "likert", "numbered"]


class StudyError(AuditError):
    """A study cannot be created or opened (the message names the file, column or option)."""


@dataclass(frozen=True)
class Choice:
    value: str  # what is stored
    label: str  # what the reader sees
    key: str  # the keyboard key that selects it


@dataclass(frozen=True)
class Scale:
    name: str  # stored axis name ("answer" for single-scale tasks)
    prompt: str  # shown above the buttons ("" for single-scale tasks: the item's question is the prompt)
    choices: tuple[Choice, ...]
    ordinal: bool = False


@dataclass(frozen=True)
class TaskSpec:
    name: str
    title: str  # shown on the reader's page
    instructions: str
    scales: tuple[Scale, ...]
    shows_image: bool = True


def numbered(values: list[tuple[str, str]]) -> tuple[Choice, ...]:
    """Choices keyed 1, 2, 3, ... from (value, label) pairs."""
    return tuple(Choice(v, lab, str(i)) for i, (v, lab) in enumerate(values, 1))


def likert(low: str, high: str, n: int = 5) -> tuple[Choice, ...]:
    """An n-point scale 1..n, the ends labelled ``low`` and ``high``."""
    return tuple(Choice(str(i), f"{i}" + (f" {low}" if i == 1 else f" {high}" if i == n else ""), str(i))
                 for i in range(1, n + 1))


YES_NO = (Choice("yes", "Yes", "y"), Choice("no", "No", "n"))


@dataclass(frozen=True)
class SampleRequest:
    """What a task's sampler is given: the run to sample from (``None`` for tasks read from an items file),
    ``n`` (what it counts is the task's), the seed, the items file when one was given, and the study options
    (``probe_set``, ``models``, and task options such as ``boxed_only`` or ``resolution``)."""

    task: str
    run_dir: Path | None
    n: int
    seed: int
    items: pd.DataFrame | None = None
    probe_set: str | None = None
    models: Sequence[str] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def need_run(self) -> Path:
        """The run directory, or a StudyError when none was given."""
        if self.run_dir is None:
            raise StudyError(f"task {self.task} samples from a run: give RUN_DIR")
        return self.run_dir


@dataclass(frozen=True)
class AnalysisRequest:
    """One export to analyse: its manifest, answers (one row per reader x item x scale), reads in the run's
    tidy shape (when the task exports them), the run's tidy table (when known), bootstrap resamples and the
    analysis options (e.g. ``min_readers``, ``landscape``)."""

    manifest: dict[str, Any]
    answers: pd.DataFrame
    reads: pd.DataFrame
    run_tidy: pd.DataFrame | None
    B: int
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class ReaderAnalysis:
    """The analysis of one or more exports: metrics (long schema, suite = "readers"), comparisons, report
    sections, extra tables, item lists (written as NAME.txt), figures by key, extra files and a summary."""

    metrics: pd.DataFrame
    comparisons: pd.DataFrame
    sections: list[Any] = field(default_factory=list)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    item_lists: dict[str, list[str]] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    #: figure key -> section title (given by the task that drew it)
    figure_titles: dict[str, str] = field(default_factory=dict)
    #: sections a task adds after the metric and comparison tables
    task_sections: list[Any] = field(default_factory=list)
    #: extra files written beside the tables: name -> bytes
    files: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class ReaderTask:
    """A reading task a suite brings to the reader study.

    ``sample`` builds the study's items: dicts with ``item_id`` (opaque), ``unit`` (items of one unit are never
    shown back to back), ``view`` (exactly what the reader sees, in the reading view's slots: ``question``,
    ``options`` (letter, text) pairs, ``facts`` (label, value) pairs, ``text`` (a passage shown verbatim),
    ``samples``, ``box`` (drawn on the image), ``n_images``) and ``source`` (what the reader never sees; its
    ``images`` are image recipes the app renders). ``analyse`` adds one export's metric rows (and figures,
    tables) to a :class:`ReaderAnalysis`; ``finish`` runs once after every export is analysed; ``export`` gives
    extra export files of a study of this task as (name, bytes) pairs. ``axis_choices``: the choices of a
    rubric axis given at creation (``--axis``); ``None`` when the task takes no axes. ``answer_fields``: fields
    of an item's source copied into the exported answers table (after ``model``), e.g. a finding or benchmark
    the task's analysis groups by. ``options``: the task's creation options and their defaults (given as
    ``create_study(..., NAME=value)`` or ``readers create --option NAME=VALUE``; the type of the default is the
    type of the option). ``n_means``: what the sampler's ``n`` counts (shown by ``readers tasks``)."""

    spec: TaskSpec
    sample: Callable[[SampleRequest], list[dict[str, Any]]]
    analyse: Callable[[AnalysisRequest, ReaderAnalysis], None]
    finish: Callable[[ReaderAnalysis], None] | None = None
    export: Callable[[Any], list[tuple[str, bytes]]] | None = None
    axis_choices: tuple[Choice, ...] | None = None
    answer_fields: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    n_means: str = "items"

    @property
    def name(self) -> str:
        return self.spec.name

    def spec_for(self, axes: Sequence[tuple[str, str]] | None = None) -> TaskSpec:
        """The spec of a study of this task: with the study's own rubric axes when given and the task takes them."""
        if not axes or self.axis_choices is None:
            return self.spec
        return replace(self.spec, scales=tuple(Scale(name, prompt, self.axis_choices, ordinal=True)
                                               for name, prompt in axes))
