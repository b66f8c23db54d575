"""Clinical report metrics that need model weights (CheXbert F1, RadGraph F1, RaTEScore, GREEN; paper 002 and
DESIGN.md "Report audit"): optional adapters, each loaded from a LOCAL model path the user gives, never from a
model hub. They score predictions against the reference report with the same id, like the surface metrics.

An adapter is a factory ``factory(path: Path, **params) -> ClinicalMetric`` registered by name in
:data:`CLINICAL_METRICS` (imported on first use, so its heavy dependencies are only needed by who names it).
``ClinicalMetric.score`` returns :class:`ClinicalScore` rows that the audit writes to ``clinical.csv`` and the
suite's analysis turns into metrics rows (``metric`` = the row's metric, ``subset`` = the decoding strategy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from medvlm_audit.errors import AuditError
from medvlm_audit.registry import Registry


@dataclass(frozen=True)
class ClinicalScore:
    """One clinical metric over the scored pairs: its point value, interval over pairs, and how it was obtained."""

    metric: str  # e.g. "chexbert_f1_micro_5", "radgraph_f1_er", "ratescore", "green"
    point: float
    n: int  # pairs scored (pairs whose score could be computed)
    method: str  # what was computed and how the interval was obtained
    ci_low: float = math.nan
    ci_high: float = math.nan
    unit: str = "fraction"
    note: str = ""  # e.g. "3 of 50 judge outputs unparsable (left out)"


class ClinicalMetric(Protocol):
    """A loaded clinical metric. ``hypotheses[i]`` is scored against ``references[i]``."""

    name: str

    def score(self, hypotheses: Sequence[str], references: Sequence[str], *, B: int = 1000,
              seed: int = 0) -> list[ClinicalScore]: ...


def check_pairs(metric: str, hypotheses: Sequence[str], references: Sequence[str]) -> tuple[list[str], list[str]]:
    """The pairs as two lists of text; an AuditError naming the metric and the item when the lengths differ or an
    item is not text (every adapter's ``score`` starts here)."""
    hyps, refs = list(hypotheses), list(references)
    if len(hyps) != len(refs):
        raise AuditError(f"{metric}: {len(hyps)} hypotheses but {len(refs)} references (pairs must match by id)")
    for which, texts in (("hypothesis", hyps), ("reference", refs)):
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise AuditError(f"{metric}: {which} {i} is {type(t).__name__}, not text")
    return hyps, refs


#: name -> "module:factory"; factory(path: Path, **params) -> ClinicalMetric
CLINICAL_METRICS = Registry("clinical metric")


def load_clinical_metric(name: str, path: str | Path, where: str = "", **params: Any) -> ClinicalMetric:
    """The adapter ``name`` loaded from the local folder or file ``path`` (a ConfigError names ``where`` when
    the name is unknown; the adapter raises a clear error when the path does not hold what it needs)."""
    factory = CLINICAL_METRICS.load(name, where)
    return factory(Path(path).expanduser(), **params)


for _name in ("chexbert", "radgraph", "ratescore", "green"):
    CLINICAL_METRICS.register(_name, f"medvlm_audit.suites.reports.clinical.{_name}:load")
