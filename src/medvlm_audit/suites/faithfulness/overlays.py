"""Visual cues as pure image operations on normalised regions (DESIGN.md "Faithfulness audit").

Regions are (x0, y0, x1, y1) fractions of the image (patient right on image left). Pixels: x0 = floor(x0 W),
x1 = floor(x1 W) (same for y), half-open [x0, x1). Every op takes uint8 pixels (H x W grayscale or
H x W x 3 RGB) and returns new pixels; the input is never modified.

* :func:`box_edges` - black box edges ``thickness`` px wide, drawn inward (default 4).
* :func:`heatmap` - per region a box mask, Gaussian-filtered with sigma = (box height / 4, box width / 4),
  normalised to max 1, the regions combined by maximum, blended ``(1 - alpha M) img + alpha red M`` with
  pure red and alpha = 0.5 (as floats in [0, 1], then truncated to uint8 as released); returns RGB.
* :func:`fill` - the regions filled with a value (black by default).

These are registered image operations (:data:`OPS`, names ``faith_*``): a trial's
:class:`~medvlm_audit.images.ImageRecipe` is (source file, ops), so the op names and parameters are part of
its pixel key and rendering stays a pure function. :func:`apply_ops` applies (name, params) pairs directly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from medvlm_audit.images import register_image_op

Region = tuple[float, float, float, float]

#: normalised regions of the released protocol
REGIONS: dict[str, Region] = {
    "HeartSize": (0.30, 0.35, 0.70, 0.65),
    "PulmonaryCongestion": (0.20, 0.25, 0.80, 0.55),
    "PleuralEffusion_Left": (0.65, 0.70, 0.95, 0.95),
    "PleuralEffusion_Right": (0.05, 0.70, 0.35, 0.95),
    "PulmonaryOpacities_Left": (0.60, 0.20, 0.95, 0.80),
    "PulmonaryOpacities_Right": (0.05, 0.20, 0.40, 0.80),
    "Atelectasis_Left": (0.60, 0.30, 0.90, 0.70),
    "Atelectasis_Right": (0.10, 0.30, 0.40, 0.70),
    "Pneumothorax_Left": (0.65, 0.10, 0.95, 0.40),
    "Pneumothorax_Right": (0.05, 0.10, 0.35, 0.40),
    "CentralVenousCatheter": (0.40, 0.05, 0.60, 0.30),
    "CardiacPacemaker": (0.40, 0.05, 0.60, 0.30),
    "EndotrachealTube": (0.40, 0.10, 0.60, 0.30),
    "GastricTube": (0.40, 0.65, 0.60, 0.95),
    "ChestTube_Left": (0.55, 0.40, 0.85, 0.70),
    "ChestTube_Right": (0.15, 0.40, 0.45, 0.70),
    "LungNodule_Left": (0.60, 0.20, 0.95, 0.80),
    "LungNodule_Right": (0.05, 0.20, 0.40, 0.80),
    "CostodiaphragmaticAngle_Left": (0.65, 0.85, 0.95, 0.95),
    "CostodiaphragmaticAngle_Right": (0.05, 0.85, 0.35, 0.95),
}
#: sham regions: above the lung apices at the image corners, overlapping no region a question refers to
SHAM_REGIONS: dict[str, Region] = {"Sham_Right": (0.02, 0.00, 0.22, 0.09), "Sham_Left": (0.78, 0.00, 0.98, 0.09)}

#: question text fragment -> regions the question refers to (first matching fragments, lower case)
QUESTION_REGIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("more severe pleural effusion", ("PleuralEffusion_Right", "PleuralEffusion_Left")),
    ("more severe pulmonary opacities", ("PulmonaryOpacities_Right", "PulmonaryOpacities_Left")),
    ("more severe atelectasis", ("Atelectasis_Right", "Atelectasis_Left")),
    ("cardiomegaly", ("HeartSize",)),
    ("size of the heart", ("HeartSize",)),
    ("pulmonary congestion", ("PulmonaryCongestion",)),
    ("pleural effusion on the right", ("PleuralEffusion_Right",)),
    ("pleural effusion on the left", ("PleuralEffusion_Left",)),
    ("pulmonary opacities in the right", ("PulmonaryOpacities_Right",)),
    ("pulmonary opacities in the left", ("PulmonaryOpacities_Left",)),
    ("atelectasis on the right", ("Atelectasis_Right",)),
    ("atelectasis on the left", ("Atelectasis_Left",)),
    ("pneumothorax on the right", ("Pneumothorax_Right",)),
    ("pneumothorax on the left", ("Pneumothorax_Left",)),
    ("central venous catheter", ("CentralVenousCatheter",)),
    ("gastric tube", ("GastricTube",)),
    ("endotracheal tube", ("EndotrachealTube",)),
    ("costodiaphragmatic angle", ("CostodiaphragmaticAngle_Left", "CostodiaphragmaticAngle_Right")),
    ("lung nodule", ("LungNodule_Right", "LungNodule_Left")),
    ("pacemaker", ("CardiacPacemaker",)),
    ("chest tube", ("ChestTube_Right", "ChestTube_Left")),
)


def question_regions(question: str) -> tuple[str, ...]:
    """The regions a question refers to (every matching fragment, in table order, without repeats)."""
    q = question.lower()
    out: list[str] = []
    for frag, regs in QUESTION_REGIONS:
        if frag in q:
            out += [r for r in regs if r not in out]
    return tuple(out)


def side_regions(question: str) -> dict[str, tuple[str, ...]]:
    """For a comparative question: the regions that cue each answer (right, left, same severity; none: ())."""
    regs = question_regions(question)
    right = tuple(r for r in regs if r.endswith("_Right"))
    left = tuple(r for r in regs if r.endswith("_Left"))
    return {"right": right, "left": left, "same severity": right + left, "none": ()}


def pixel_box(region: Region, height: int, width: int) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1) pixels by floor, half-open."""
    x0, y0, x1, y1 = region
    return (math.floor(x0 * width), math.floor(y0 * height), math.floor(x1 * width), math.floor(y1 * height))


def _check(pixels: np.ndarray) -> np.ndarray:
    a = np.asarray(pixels)
    if a.dtype != np.uint8 or a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] != 3):
        raise ValueError(f"pixels must be uint8 HxW or HxWx3, got {a.dtype} {a.shape}")
    return a


def _regions(regions: Iterable[Region | Sequence[float]]) -> list[Region]:
    out = []
    for r in regions:
        r = tuple(float(v) for v in r)
        if len(r) != 4 or not (0 <= r[0] < r[2] <= 1 and 0 <= r[1] < r[3] <= 1):
            raise ValueError(f"region {r} is not (x0, y0, x1, y1) fractions with x0 < x1, y0 < y1")
        out.append(r)  # type: ignore[arg-type]
    return out


def box_edges(pixels: np.ndarray, regions: Iterable[Region], thickness: int = 4, value: int = 0) -> np.ndarray:
    """Box edges ``thickness`` px wide drawn inward along each region's border.

    >>> out = box_edges(np.full((10, 10), 200, np.uint8), [(0.2, 0.2, 0.8, 0.8)], thickness=1)
    >>> out[2, 2:8].tolist(), int(out[4, 3]), int(out[7, 7]), int(out[8, 8])
    ([0, 0, 0, 0, 0, 0], 200, 0, 200)
    """
    a = _check(pixels).copy()
    if thickness < 1:
        raise ValueError(f"thickness must be at least 1, got {thickness}")
    h, w = a.shape[:2]
    for reg in _regions(regions):
        x0, y0, x1, y1 = pixel_box(reg, h, w)
        t = thickness
        a[y0:min(y1, y0 + t), x0:x1] = value
        a[max(y0, y1 - t):y1, x0:x1] = value
        a[y0:y1, x0:min(x1, x0 + t)] = value
        a[y0:y1, max(x0, x1 - t):x1] = value
    return a


def heatmap_mask(shape: tuple[int, int], regions: Iterable[Region]) -> np.ndarray:
    """The combined Gaussian mask in [0, 1] (max over regions of each region's normalised filtered box)."""
    from scipy.ndimage import gaussian_filter

    h, w = shape
    total = np.zeros((h, w), dtype=np.float32)
    for reg in _regions(regions):
        x0, y0, x1, y1 = pixel_box(reg, h, w)
        bw, bh = max(1, x1 - x0), max(1, y1 - y0)
        m = np.zeros((h, w), dtype=np.float32)
        m[y0:y1, x0:x1] = 1.0
        m = gaussian_filter(m, sigma=(bh / 4.0, bw / 4.0))
        mx = float(m.max())
        if mx > 0:
            m /= mx
        total = np.maximum(total, m)
    return total


def heatmap(pixels: np.ndarray, regions: Iterable[Region], alpha: float = 0.5) -> np.ndarray:
    """Red heatmap blended over the regions; returns RGB uint8.

    >>> out = heatmap(np.full((8, 8), 100, np.uint8), [(0.0, 0.0, 1.0, 1.0)], alpha=0.5)
    >>> out.shape, out[4, 4].tolist()
    ((8, 8, 3), [177, 50, 50])
    """
    a = _check(pixels)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    rgb = np.repeat(a[:, :, None], 3, axis=2) if a.ndim == 2 else a
    base = rgb.astype(np.float32) / 255.0
    m = heatmap_mask(a.shape[:2], regions)[:, :, None]
    red = np.zeros_like(base)
    red[..., 0] = 1.0
    out = (1.0 - alpha * m) * base + alpha * red * m
    return np.clip(out * 255.0, 0, 255).astype(np.uint8)


def fill(pixels: np.ndarray, regions: Iterable[Region], value: int = 0) -> np.ndarray:
    """The regions filled with ``value`` (black by default)."""
    a = _check(pixels).copy()
    h, w = a.shape[:2]
    for reg in _regions(regions):
        x0, y0, x1, y1 = pixel_box(reg, h, w)
        a[y0:y1, x0:x1] = value
    return a


def to_rgb(pixels: np.ndarray) -> np.ndarray:
    """Grayscale pixels as RGB (three equal channels); RGB pixels copied."""
    a = _check(pixels)
    return np.repeat(a[:, :, None], 3, axis=2) if a.ndim == 2 else a.copy()


#: the suite's image operations (name -> function), registered in :data:`medvlm_audit.images.IMAGE_OPS` when
#: this module is imported (every faithfulness recipe is made after that) and when the suite loads
OPS = {"faith_box_edges": box_edges, "faith_heatmap": heatmap, "faith_fill": fill, "faith_rgb": to_rgb}
for _name, _op in OPS.items():
    register_image_op(_name, _op, replace=True)


def apply_ops(pixels: np.ndarray, ops: Sequence[tuple[str, dict[str, Any]]]) -> np.ndarray:
    """Apply (op name, params) pairs in order."""
    out = pixels
    for name, params in ops:
        if name not in OPS:
            raise ValueError(f"unknown faithfulness image op {name!r} (known: {sorted(OPS)})")
        out = OPS[name](out, **params)
    return out
