"""Box geometry for the masking interventions: rescale to working resolution, place the irrelevant box."""

from __future__ import annotations

import math

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 (xyxy), source pixels
IntBox = tuple[int, int, int, int]


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def working_box(box: Box, src_w: int, src_h: int, res: int = 224) -> IntBox:
    """Rescale an xyxy source-pixel box to a res x res working image, rounded to integer pixels."""
    sx, sy = res / src_w, res / src_h
    x0, y0, x1, y1 = box
    out = (
        max(0, _round_half_up(x0 * sx)),
        max(0, _round_half_up(y0 * sy)),
        min(res, _round_half_up(x1 * sx)),
        min(res, _round_half_up(y1 * sy)),
    )
    return out


def rescale_box(box: IntBox, from_res: int, to_res: int) -> IntBox:
    """Rescale a working-resolution box to another working resolution (224 -> 512 for the resolution probe)."""
    f = to_res / from_res
    x0, y0, x1, y1 = box
    return (
        max(0, _round_half_up(x0 * f)),
        max(0, _round_half_up(y0 * f)),
        min(to_res, _round_half_up(x1 * f)),
        min(to_res, _round_half_up(y1 * f)),
    )


def irrelevant_box(tbox: IntBox, res: int = 224) -> tuple[IntBox, bool]:
    """Box of identical size flush in the image corner farthest from the target box centre.

    Returns the box and whether it overlaps the target (possible for boxes wider or taller than half the image).
    """
    x0, y0, x1, y1 = tbox
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    corners = [(0, 0), (res, 0), (0, res), (res, res)]
    # farthest corner; ties broken by the fixed order above (deterministic)
    corner = max(corners, key=lambda c: (c[0] - cx) ** 2 + (c[1] - cy) ** 2)
    ibox = corner_box(tbox, (corner[0] != 0, corner[1] != 0), res)
    return ibox, boxes_overlap(ibox, tbox)


def corner_box(tbox: IntBox, far: tuple[bool, bool], res: int) -> IntBox:
    """A box of ``tbox``'s exact size flush in a corner of a res x res image: ``far`` = (right?, bottom?)."""
    w, h = tbox[2] - tbox[0], tbox[3] - tbox[1]
    ix0 = res - w if far[0] else 0
    iy0 = res - h if far[1] else 0
    return (ix0, iy0, ix0 + w, iy0 + h)


def flush_corner(box: IntBox, res: int) -> tuple[bool, bool] | None:
    """The corner (right?, bottom?) a box is flush in at res x res, or None when it is not in a corner."""
    x0, y0, x1, y1 = box
    if x0 != 0 and x1 != res or y0 != 0 and y1 != res:
        return None
    return (x0 != 0, y0 != 0)


def boxes_overlap(a: IntBox, b: IntBox) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
