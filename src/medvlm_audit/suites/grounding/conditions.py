"""Conditions of the grounding audit: deterministic transforms of a case into the image a model sees.

A condition is (image operation, working resolution, prompt variant). Its pixels are a pure function of the
source file and the parameters recorded in the probe set (swap partner, target/irrelevant boxes at 224; at
512 the target box from the source-pixel box and the irrelevant box of its exact size in the recorded
corner, see :func:`boxes_at`), described by an :class:`ImageRecipe`. A condition that does not apply to a case (no box,
no swap partner) is skipped with a reason, never faked.
"""

from __future__ import annotations

from dataclasses import dataclass

from medvlm_audit.boxes import corner_box, flush_corner, irrelevant_box, rescale_box, working_box
from medvlm_audit.images import ImageRecipe
from medvlm_audit.suites.grounding.case import Case, IntBox
from medvlm_audit.suites.grounding.prompts import PROMPT_VARIANTS

IMAGE_OPS: tuple[str, ...] = ("original", "swap", "target_mask", "irrelevant_mask", "no_image")
WORKING_RES = 224
RESOLUTIONS: tuple[int, ...] = (224, 512)


@dataclass(frozen=True, slots=True)
class Condition:
    image_op: str = "original"
    resolution: int = WORKING_RES
    prompt_variant: str = "default"

    def __post_init__(self) -> None:
        if self.image_op not in IMAGE_OPS:
            raise ValueError(f"unknown condition {self.image_op!r}; known: {IMAGE_OPS}")
        if self.resolution not in RESOLUTIONS:
            raise ValueError(f"unsupported resolution {self.resolution}; known: {RESOLUTIONS}")
        if self.prompt_variant not in PROMPT_VARIANTS:
            raise ValueError(f"unknown prompt variant {self.prompt_variant!r}; known: {PROMPT_VARIANTS}")

    @property
    def name(self) -> str:
        n = self.image_op
        if self.resolution != WORKING_RES:
            n += f"@{self.resolution}"
        if self.prompt_variant != "default":
            n += f"|prompt={self.prompt_variant}"
        return n

    @classmethod
    def parse(cls, name: str) -> Condition:
        """Inverse of :attr:`name`: ``target_mask@512|prompt=terse``."""
        rest, _, prompt = name.partition("|prompt=")
        op, _, res = rest.partition("@")
        return cls(op, int(res) if res else WORKING_RES, prompt or "default")

    def skip_reason(self, case: Case) -> str | None:
        """Why this condition cannot be applied to the case, or None when it applies."""
        if self.image_op == "no_image":
            return None
        if case.image is None:
            return "case has no image"
        if self.image_op == "swap" and case.swap_image is None:
            return "no swap partner"
        if self.image_op == "target_mask" and case.tbox is None:
            return "no target box"
        if self.image_op == "irrelevant_mask" and case.ibox is None:
            return "no irrelevant box"
        return None

    def recipe(self, case: Case, resolve: callable) -> ImageRecipe | None:  # type: ignore[valid-type]
        """The image recipe for a case (None for no_image). ``resolve`` maps manifest paths to files."""
        if self.image_op == "no_image" or case.image is None:
            return None
        source = case.swap_image if self.image_op == "swap" else case.image
        path = str(resolve(source))
        fill: IntBox | None = None
        if self.image_op in ("target_mask", "irrelevant_mask"):
            tbox, ibox = boxes_at(case, self.resolution)
            fill = tbox if self.image_op == "target_mask" else ibox
        return ImageRecipe.standard(path, self.resolution, fill)


def boxes_at(case: Case, res: int) -> tuple[IntBox | None, IntBox | None]:
    """The (target, irrelevant) boxes of a case at working resolution ``res``.

    At 224 they are the recorded boxes. At another resolution the target box is rescaled from the source-pixel
    box (``box_*`` and the image size; rescaling the rounded 224 box would add a second rounding), and the
    irrelevant box has exactly its size, flush in the corner recorded at 224 (the farthest-corner rule of
    :func:`~medvlm_audit.boxes.irrelevant_box` when the recorded box is not in a corner).
    """
    if res == WORKING_RES:
        return case.tbox, case.ibox
    tbox: IntBox | None = None
    if case.tbox is not None:
        if case.target_box is not None and case.image_size is not None:
            tbox = working_box(case.target_box, case.image_size[0], case.image_size[1], res)
        else:  # a manifest with working boxes only
            tbox = rescale_box(case.tbox, WORKING_RES, res)
    if case.ibox is None:
        return tbox, None
    if tbox is None:
        return None, rescale_box(case.ibox, WORKING_RES, res)
    corner = flush_corner(case.ibox, WORKING_RES)
    return tbox, (irrelevant_box(tbox, res)[0] if corner is None else corner_box(tbox, corner, res))
