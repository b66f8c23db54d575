"""Case: one probe item, with its ground truth and the metadata the analyses stratify on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["finding_presence", "report_error", "mcq", "ordinal", "comparative", "spatial", "report"]
KINDS: tuple[str, ...] = ("finding_presence", "report_error", "mcq", "ordinal", "comparative", "spatial", "report")

from medvlm_audit.boxes import Box, IntBox


@dataclass(frozen=True, slots=True)
class Case:
    """One probe item. ``label`` is the yes/no ground truth (1 = Yes) for binary kinds.

    ``target_box`` is in source pixels (of an ``image_size`` = (width, height) image); ``tbox``/``ibox`` are
    the fixed target and irrelevant boxes at the working resolution (224), recorded in the probe set so every
    model sees identical masks.
    """

    case_id: str
    kind: str
    label: int | None
    finding: str | None = None
    sentence: str | None = None
    image: str | None = None
    target_box: Box | None = None
    tbox: IntBox | None = None
    ibox: IntBox | None = None
    ibox_overlaps: bool = False
    image_size: tuple[int, int] | None = None
    swap_image: str | None = None
    options: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def patient_id(self) -> str | None:
        return self.meta.get("patient_id")
