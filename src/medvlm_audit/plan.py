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

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
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

__all__ = ["CompactTrials", "Plan", "PlanSource", "Skip", "Stage", "StageContext", "Trial"]


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


class CompactTrials(Sequence[Trial]):
    """A plan's trials held as columns, each :class:`Trial` built when it is read (equal to the one appended).

    A large plan repeats most of a trial's fields (its probe set, condition, question, decoding): those are
    held once each and referred to by a small int per trial; the case id and the images are one reference each
    (a single image without its tuple), a payload only where one is given. ~30 bytes per trial instead of a
    ~160-byte Trial and its images tuple (issue 23: 50,000 trials of a 10,000-case grounding run, ~6.5 MB).
    Only ``append``/``extend`` change it; reading a trial costs building it (~1 µs).

    >>> from medvlm_audit.models.base import Message
    >>> ts = CompactTrials()
    >>> q = (Message("user", "Is there a nodule?"),)
    >>> ts.extend(Trial("ps", f"c{i}", "original", q, (), i % 2) for i in range(3))
    >>> len(ts), ts[2]
    (3, Trial(probe_set='ps', case_id='c2', condition='original', messages=(Message(role='user', content='Is there a nodule?'),), images=(), sample_index=0, payload=None, decoding=()))
    >>> ts == [Trial("ps", f"c{i}", "original", q, (), i % 2) for i in range(3)]
    True
    """

    __slots__ = ("_case_ids", "_codes", "_images", "_payloads", "_shared", "_values")

    def __init__(self, trials: Iterable[Trial] = ()) -> None:
        self._case_ids: list[str] = []
        self._images: list[Any] = []  # a trial's one image recipe, or its images tuple (none or several)
        #: per trial, one int per shared field: probe set, condition, messages, sample index, decoding
        self._codes = tuple(array("I") for _ in range(5))
        self._values: tuple[list[Any], ...] = tuple([] for _ in range(5))  # code -> value, per shared field
        self._shared: tuple[dict[Any, int], ...] = tuple({} for _ in range(5))  # value -> code, per shared field
        self._payloads: dict[int, dict[str, Any]] = {}  # trial index -> payload, where one is given
        self.extend(trials)

    def append(self, t: Trial) -> None:
        for codes, values, shared, v in zip(self._codes, self._values, self._shared,
                                            (t.probe_set, t.condition, t.messages, t.sample_index, t.decoding)):
            c = shared.get(v)
            if c is None:
                c = shared[v] = len(values)
                values.append(v)
            codes.append(c)
        if t.payload is not None:
            self._payloads[len(self._case_ids)] = t.payload
        self._case_ids.append(t.case_id)
        self._images.append(t.images[0] if len(t.images) == 1 else t.images)

    def extend(self, trials: Iterable[Trial]) -> None:
        for t in trials:
            self.append(t)

    def __len__(self) -> int:
        return len(self._case_ids)

    def _get(self, i: int) -> Trial:
        c, v = self._codes, self._values
        im = self._images[i]
        return Trial(v[0][c[0][i]], self._case_ids[i], v[1][c[1][i]], v[2][c[2][i]],
                     im if type(im) is tuple else (im,), v[3][c[3][i]], self._payloads.get(i), v[4][c[4][i]])

    def image_tuples(self) -> Iterator[tuple[ImageRecipe, ...]]:
        """Each trial's images, in order, without building the trials (what the runner's index reads)."""
        for im in self._images:
            yield im if type(im) is tuple else (im,)

    def __getitem__(self, i: int | slice) -> Any:
        if type(i) is int and 0 <= i < len(self._case_ids):  # the runner's reads
            return self._get(i)
        if isinstance(i, slice):
            return [self._get(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._get(i)

    def __iter__(self) -> Iterator[Trial]:
        for i in range(len(self._case_ids)):
            yield self._get(i)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CompactTrials({len(self)} trials)"


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
    #: the same set's hash as an earlier version computed it (a store that recorded one resumes; the store then
    #: records ``content_hash``)
    earlier_hashes: tuple[str, ...] = ()


@dataclass
class Plan:
    #: a list, or :class:`CompactTrials` for a large plan (both take ``append``/``extend``)
    trials: list[Trial] | CompactTrials = field(default_factory=list)
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
