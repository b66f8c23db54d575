"""Rendering of synthetic frontal chest radiographs: anatomy plus findings with localized appearance.

Everything is drawn in normalised coordinates (u = x / size, v = y / size, image y downward), so a
study renders the same picture at any size. Image left is the patient's right. Pixels are uint8
grayscale and never darker than :data:`MIN_PIXEL` (pure black only appears when a mask is applied).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from medvlm_audit.atomic import write_bytes_atomic
from medvlm_audit.models.encoding import encode_png as _encode_png

#: findings the phantom can draw (identifiers from :mod:`medvlm_audit.findings`)
PHANTOM_FINDINGS: tuple[str, ...] = (
    "cardiomegaly",
    "pleural_effusion",
    "pneumothorax",
    "consolidation",
    "pneumonia",
    "edema",
    "atelectasis",
    "lung_opacity",
    "nodule",
)
#: drawable but never asked about: lines, tubes and ECG leads of sicker (often AP, portable) patients
DEVICES = "support_devices"
#: findings drawn on one side of the chest (``side`` attribute: the patient's "left" or "right")
LATERAL_FINDINGS: frozenset[str] = frozenset(
    {"pleural_effusion", "pneumothorax", "consolidation", "pneumonia", "atelectasis", "lung_opacity", "nodule"}
)
SEVERITIES: tuple[str, ...] = ("mild", "moderate", "severe")
ZONES: tuple[str, ...] = ("upper", "mid", "lower")
MIN_PIXEL = 8
#: resolution at which the (smooth) anatomy is drawn before upsampling; fine grain is added at full size
ANATOMY_RES = 256
#: smallest side of a radiologist box for the boxed findings (normalised): > 50 px at 224
MIN_BOX_SIDE = 0.235

BoxN = tuple[float, float, float, float]


@dataclass(frozen=True)
class Geometry:
    """Patient/study anatomy in normalised coordinates."""

    rl_cu: float  # patient's right lung (image left)
    rl_cv: float
    rl_a: float
    rl_b: float
    ll_cu: float
    ll_cv: float
    ll_a: float
    ll_b: float
    heart_cu: float
    heart_cv: float
    heart_a: float
    heart_b: float
    med_half: float

    def lung(self, side: str) -> tuple[float, float, float, float]:
        """(cu, cv, a, b) of the patient's ``side`` lung."""
        if side == "right":
            return self.rl_cu, self.rl_cv, self.rl_a, self.rl_b
        return self.ll_cu, self.ll_cv, self.ll_a, self.ll_b


# ----------------------------------------------------------------------------------------------- attributes


def sample_attributes(findings: Mapping[str, bool], rng: np.random.Generator) -> dict[str, dict[str, Any]]:
    """Draw side / severity / zone / size for every present finding (what the report will describe)."""
    out: dict[str, dict[str, Any]] = {}
    for f in PHANTOM_FINDINGS:
        if not findings.get(f, False):
            continue
        a: dict[str, Any] = {"severity": SEVERITIES[int(rng.choice(3, p=[0.45, 0.4, 0.15]))]}
        if f in LATERAL_FINDINGS:
            a["side"] = "right" if rng.random() < 0.5 else "left"
            if f == "pleural_effusion" and rng.random() < 0.35:
                a["side"] = "bilateral"
        if f == "edema" or a.get("side") == "bilateral":  # bilateral: the radiologist boxed one side
            a["box_side"] = "right" if rng.random() < 0.5 else "left"
        if f in ("consolidation", "pneumonia", "lung_opacity", "nodule", "atelectasis"):
            p = {
                "consolidation": [0.15, 0.35, 0.5],
                "pneumonia": [0.1, 0.3, 0.6],
                "lung_opacity": [0.25, 0.4, 0.35],
                "nodule": [0.4, 0.35, 0.25],
                "atelectasis": [0.0, 0.15, 0.85],
            }[f]
            a["zone"] = ZONES[int(rng.choice(3, p=p))]
        if f == "nodule":
            a["size_mm"] = int(rng.integers(7, 22))
        out[f] = a
    return out


# ----------------------------------------------------------------------------------------------- helpers


@lru_cache(maxsize=8)
def _grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    c = (np.arange(size, dtype=np.float32) + 0.5) / size
    return c[None, :], c[:, None]  # u (1, W), v (H, 1)


def _win(size: int, u0: float, v0: float, u1: float, v1: float) -> tuple[slice, slice]:
    x0, x1 = max(0, int(u0 * size)), min(size, math.ceil(u1 * size))
    y0, y1 = max(0, int(v0 * size)), min(size, math.ceil(v1 * size))
    return slice(y0, max(y0, y1)), slice(x0, max(x0, x1))


def _sub(size: int, sl: tuple[slice, slice]) -> tuple[np.ndarray, np.ndarray]:
    u, v = _grid(size)
    return u[:, sl[1]], v[sl[0], :]


def _ellipse(u: np.ndarray, v: np.ndarray, cu: float, cv: float, a: float, b: float, soft: float, p: int = 2) -> np.ndarray:
    """Soft-edged (super)ellipse mask in [0, 1]; ``p`` is 2 (ellipse) or 4 (squarer)."""
    du = (u - cu) * (1.0 / a)
    dv = (v - cv) * (1.0 / b)
    du = du * du
    dv = dv * dv
    if p == 4:
        r = np.sqrt(np.sqrt(du * du + dv * dv))
    else:
        r = np.sqrt(du + dv)
    return np.clip((1.0 - r) * (min(a, b) / soft), 0.0, 1.0)


def _add_ellipse(A: np.ndarray, amp: float, cu: float, cv: float, a: float, b: float, soft: float = 0.01, p: int = 2) -> None:
    size = A.shape[0]
    sl = _win(size, cu - a - soft, cv - b - soft, cu + a + soft, cv + b + soft)
    u, v = _sub(size, sl)
    A[sl] += amp * _ellipse(u, v, cu, cv, a, b, soft, p)


def _add_gauss(A: np.ndarray, amp: float, cu: float, cv: float, su: float, sv: float, mask: np.ndarray | None = None) -> None:
    size = A.shape[0]
    sl = _win(size, cu - 3 * su, cv - 3 * sv, cu + 3 * su, cv + 3 * sv)
    u, v = _sub(size, sl)
    g = amp * np.exp(-0.5 * (((u - cu) / su) ** 2 + ((v - cv) / sv) ** 2))
    if mask is not None:
        g = g * mask[sl]
    A[sl] += g


def _add_segment(A: np.ndarray, amp: float, p0: tuple[float, float], p1: tuple[float, float], width: float) -> None:
    size = A.shape[0]
    sl = _win(size, min(p0[0], p1[0]) - 3 * width, min(p0[1], p1[1]) - 3 * width,
              max(p0[0], p1[0]) + 3 * width, max(p0[1], p1[1]) + 3 * width)
    u, v = _sub(size, sl)
    du, dv = p1[0] - p0[0], p1[1] - p0[1]
    L2 = du * du + dv * dv
    t = np.clip(((u - p0[0]) * du + (v - p0[1]) * dv) / L2, 0.0, 1.0)
    d2 = (u - p0[0] - t * du) ** 2 + (v - p0[1] - t * dv) ** 2
    A[sl] += amp * np.exp(-0.5 * d2 / (width * width))


@lru_cache(maxsize=4)
def _noise_bank(n: int = 1024) -> np.ndarray:
    """Fixed fine-noise tile, integer, sd 8 (same in every process), cropped at seeded offsets."""
    z = np.random.default_rng(20240601).standard_normal((n, n), dtype=np.float32) * 8
    return np.clip(np.rint(z), -120, 120).astype(np.int16)


def _smooth_field(rng: np.random.Generator, size: int, cells: int) -> np.ndarray:
    """Low-frequency random field (unit-ish std), defined on a cells x cells lattice and upsampled."""
    small = rng.standard_normal((cells, cells)).astype(np.float32)
    return np.asarray(Image.fromarray(small, mode="F").resize((size, size), Image.Resampling.BILINEAR), dtype=np.float32)


def _upsample2(x: np.ndarray) -> np.ndarray:
    """Bilinear 2x upsampling with half-pixel centres (as Pillow), edges clamped; faster than Pillow on floats."""
    def axis0(a: np.ndarray) -> np.ndarray:
        prev = np.concatenate([a[:1], a[:-1]], axis=0)
        nxt = np.concatenate([a[1:], a[-1:]], axis=0)
        out = np.empty((2 * a.shape[0],) + a.shape[1:], np.float32)
        out[0::2] = 0.75 * a + 0.25 * prev
        out[1::2] = 0.75 * a + 0.25 * nxt
        return out

    return np.ascontiguousarray(axis0(axis0(x).T).T)


def _finalize_box(box: BoxN, min_side: float) -> BoxN:
    u0, v0, u1, v1 = box
    for lo, hi, idx in ((u0, u1, 0), (v0, v1, 1)):
        if hi - lo < min_side:
            c = (lo + hi) / 2
            lo, hi = c - min_side / 2, c + min_side / 2
            if lo < 0:
                lo, hi = 0.0, min_side
            if hi > 1:
                lo, hi = 1.0 - min_side, 1.0
        if idx == 0:
            u0, u1 = lo, hi
        else:
            v0, v1 = lo, hi
    return (max(0.0, u0), max(0.0, v0), min(1.0, u1), min(1.0, v1))


# ----------------------------------------------------------------------------------------------- rendering


def patient_geometry(rng: np.random.Generator, *, sex: str, age: float, view: str) -> Geometry:
    """Lung, heart and mediastinum placement for one study (patient habitus + acquisition)."""
    scale = rng.uniform(0.93, 1.04) * (1.02 if sex == "M" else 0.97)
    du, dv = rng.normal(0, 0.012), rng.normal(0, 0.012)
    vol = rng.uniform(0.94, 1.03) * (0.93 if view == "AP" else 1.0)  # AP: lower lung volumes
    rl_a, ll_a = 0.165 * scale, 0.155 * scale
    rl_b, ll_b = 0.30 * scale * vol, 0.31 * scale * vol
    heart_mag = 1.10 if view == "AP" else 1.0  # AP magnifies the heart
    ctr = rng.uniform(0.9, 1.06) * (1 + 0.002 * max(0.0, age - 50))
    return Geometry(
        rl_cu=0.31 + du - 0.01 * (scale - 1), rl_cv=0.455 + dv, rl_a=rl_a, rl_b=rl_b,
        ll_cu=0.69 + du + 0.01 * (scale - 1), ll_cv=0.465 + dv, ll_a=ll_a, ll_b=ll_b,
        heart_cu=0.535 + du, heart_cv=0.64 + dv + 0.3 * (rl_b - 0.30),
        heart_a=0.14 * scale * heart_mag * ctr, heart_b=0.105 * scale * heart_mag,
        med_half=0.055 * scale * (1.08 if view == "AP" else 1.0),
    )


def _lung_mask(size: int, g: Geometry) -> np.ndarray:
    u, v = _grid(size)
    m = np.zeros((size, size), np.float32)
    for side in ("right", "left"):
        cu, cv, a, b = g.lung(side)
        sl = _win(size, cu - a - 0.02, cv - b - 0.02, cu + a + 0.02, cv + b + 0.02)
        uu, vv = u[:, sl[1]], v[sl[0], :]
        e = _ellipse(uu, vv, cu, cv, a, b, 0.012, p=4)
        # flatter medial border
        medial = 0.5 - g.med_half if side == "right" else 0.5 + g.med_half
        if side == "right":
            e = e * np.clip((medial - uu) / 0.01, 0.0, 1.0)
        else:
            e = e * np.clip((uu - medial) / 0.01, 0.0, 1.0)
        m[sl] = np.maximum(m[sl], e)
    return m


def render_study(
    findings: Mapping[str, bool],
    *,
    sex: str,
    age: float,
    view: str,
    seed: int,
    size: int = 512,
    patient_seed: int | None = None,
    attributes: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[np.ndarray, dict[str, tuple[float, float, float, float]]]:
    """Render one frontal radiograph; returns uint8 pixels (size x size) and an xyxy box (source pixels) per present finding.

    ``patient_seed`` fixes the habitus shared by a patient's studies (defaults to ``seed``); ``attributes``
    (side / severity / zone per finding, as from :func:`sample_attributes`) default to a draw from ``seed``.
    """
    if sex not in ("M", "F"):
        raise ValueError(f"sex must be 'M' or 'F', got {sex!r}")
    if view not in ("PA", "AP"):
        raise ValueError(f"view must be 'PA' or 'AP', got {view!r}")
    unknown = [f for f in findings if f not in PHANTOM_FINDINGS and f != DEVICES]
    if unknown:
        raise ValueError(f"the phantom cannot draw finding(s) {unknown}; known: {list(PHANTOM_FINDINGS)}")
    if size < 32:
        raise ValueError(f"size must be at least 32, got {size}")
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 7])
    prng = np.random.default_rng([int(seed if patient_seed is None else patient_seed) & 0xFFFFFFFF, 11])
    if attributes is None:
        attributes = sample_attributes(findings, np.random.default_rng([int(seed) & 0xFFFFFFFF, 13]))
    g = patient_geometry(prng, sex=sex, age=age, view=view)
    # study-to-study jitter of the same patient
    g = Geometry(**{k: (val + rng.normal(0, 0.004) if k.endswith(("cu", "cv")) else val) for k, val in g.__dict__.items()})

    out_size = size
    size = max(32, min(size // 2, ANATOMY_RES))  # anatomy is smooth: draw it at half size, add fine grain at full size
    A = np.zeros((size, size), np.float32)
    _u, v = _grid(size)
    # body soft tissue (the four corners stay air)
    body_a = 0.47 * (1.05 if sex == "M" else 1.0) * prng.uniform(0.97, 1.03)
    _add_ellipse(A, 0.50, 0.5, 0.60, body_a, 0.66, soft=0.03)
    # neck
    _add_ellipse(A, 0.25, 0.5, 0.02, 0.09, 0.12, soft=0.02)
    lungs = _lung_mask(size, g)
    A -= 0.34 * lungs
    # lung markings: low-frequency texture inside the lungs, more at the bases
    tex = _smooth_field(rng, size, 14)
    A += lungs * (0.035 * tex + 0.05 * np.clip(v - 0.3, 0, 1))
    # hila and vessels
    for side, sgn in (("right", -1), ("left", 1)):
        _add_gauss(A, 0.10, 0.5 + sgn * 0.09, 0.44, 0.03, 0.05, lungs)
    # mediastinum, spine, heart
    _add_ellipse(A, 0.33, 0.5, 0.33, g.med_half, 0.30, soft=0.015, p=4)
    sl = _win(size, 0.465, 0.0, 0.535, 1.0)
    uu, vv = _sub(size, sl)
    vert = 0.5 + 0.5 * np.cos(2 * np.pi * vv / 0.045)
    A[sl] += 0.12 * _ellipse(uu, vv, 0.5, 0.5, 0.028, 0.6, 0.008, p=4) * (0.7 + 0.3 * vert)
    heart_a, heart_cu = g.heart_a, g.heart_cu
    card = attributes.get("cardiomegaly") if findings.get("cardiomegaly") else None
    if card is not None:
        factor = {"mild": 1.24, "moderate": 1.36, "severe": 1.5}[card.get("severity", "moderate")]
        heart_a = g.heart_a * factor
        heart_cu = g.heart_cu + 0.35 * (heart_a - g.heart_a)
    heart_b = g.heart_b * (1.0 if card is None else 1.12)
    _add_ellipse(A, 0.30, heart_cu, g.heart_cv, heart_a, heart_b, soft=0.015)
    # ribs (posterior arcs, curving down laterally) and clavicles
    for side, sgn in (("right", -1), ("left", 1)):
        cu, cv, a, b = g.lung(side)
        sl = _win(size, cu - a - 0.03, cv - b - 0.03, cu + a + 0.03, cv + b + 0.01)
        uu, vv = _sub(size, sl)
        phase = (vv - 0.10 - 1.6 * (uu - (0.5 + sgn * 0.06)) ** 2) / 0.062
        rib = (0.5 + 0.5 * np.cos(2 * np.pi * phase)) ** 6
        A[sl] += 0.07 * rib * _ellipse(uu, vv, cu, cv - 0.01, a + 0.03, b + 0.02, 0.02)
    cl_v = 0.155 - (0.035 if view == "AP" else 0.0)
    for sgn in (-1, 1):
        _add_segment(A, 0.22, (0.5 + sgn * 0.05, cl_v + 0.045), (0.5 + sgn * 0.34, cl_v - (0.0 if view == "AP" else 0.035)), 0.011)
    if view == "AP":  # scapulae projected over the lateral lungs
        for sgn in (-1, 1):
            _add_ellipse(A, 0.06, 0.5 + sgn * 0.36, 0.3, 0.06, 0.13, soft=0.03)
    if sex == "F":  # breast shadows over the bases
        bs = prng.uniform(0.6, 1.4)
        for sgn in (-1, 1):
            _add_ellipse(A, 0.07 * bs, 0.5 + sgn * 0.2, 0.74, 0.16, 0.10, soft=0.05)

    boxes_n: dict[str, BoxN] = {}
    if card is not None:
        boxes_n["cardiomegaly"] = (heart_cu - heart_a - 0.01, g.heart_cv - heart_b - 0.01,
                                   heart_cu + heart_a + 0.01, g.heart_cv + heart_b + 0.01)
    for f in PHANTOM_FINDINGS:
        if f == "cardiomegaly" or not findings.get(f, False):
            continue
        frng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 17, PHANTOM_FINDINGS.index(f)])  # own stream per finding
        boxes_n[f] = _draw_finding(A, f, dict(attributes.get(f, {})), g, lungs, frng)
    if findings.get(DEVICES, False):
        _draw_devices(A, np.random.default_rng([int(seed) & 0xFFFFFFFF, 19]))

    # exposure: air level, gain, gamma; AP portable films are flatter and noisier
    lo = prng.uniform(10, 20)
    hi = rng.uniform(215, 245) * (0.92 if view == "AP" else 1.0)
    gamma = rng.uniform(0.9, 1.1)
    lut = (lo + (hi - lo) * np.linspace(0.0, 1.0, 1024, dtype=np.float64) ** gamma).astype(np.float32)
    q = np.clip(A, 0.0, 1.3)
    q *= 1023 / 1.3
    img = lut[q.astype(np.int32)]
    img += 2.0 * _smooth_field(rng, size, 40)
    np.clip(img + 0.5, 0, 255, out=img)
    base = img.astype(np.uint8)
    if out_size != size:
        base = np.asarray(Image.fromarray(base).resize((out_size, out_size), Image.Resampling.BILINEAR))
    size = out_size
    # fine grain at full resolution: a fixed integer noise tile (sd 8), cropped at a seeded offset, scaled
    bank = _noise_bank()
    oy, ox = rng.integers(0, bank.shape[0] - size + 1, 2) if size <= bank.shape[0] else (0, 0)
    fine = bank[oy : oy + size, ox : ox + size] if size <= bank.shape[0] else np.resize(bank, (size, size))
    sigma8 = round(8 * (2.2 if view == "PA" else 3.0) * size / 512)
    pix = base.astype(np.int16)
    pix += (fine * sigma8) >> 6
    out = np.clip(pix, MIN_PIXEL, 255, out=pix).astype(np.uint8)

    boxes: dict[str, tuple[float, float, float, float]] = {}
    for f, bn in boxes_n.items():
        bn = _finalize_box(bn, MIN_BOX_SIDE)
        boxes[f] = tuple(round(c * size, 1) for c in bn)  # type: ignore[assignment]
    return out, boxes


def _draw_devices(A: np.ndarray, rng: np.random.Generator) -> None:
    """ECG electrodes (bright rings), a central venous line and sometimes an endotracheal tube."""
    for _ in range(int(rng.integers(3, 6))):
        cu, cv = rng.uniform(0.12, 0.88), rng.uniform(0.12, 0.8)
        _add_ellipse(A, 0.55, cu, cv, 0.02, 0.02, soft=0.006)
        _add_ellipse(A, -0.25, cu, cv, 0.009, 0.009, soft=0.004)
    sgn = -1 if rng.random() < 0.6 else 1  # right internal jugular / subclavian approach
    p0 = (0.5 + sgn * rng.uniform(0.15, 0.25), rng.uniform(0.1, 0.16))
    p1 = (0.5 + sgn * 0.06, 0.2)
    p2 = (0.5 + sgn * 0.035, rng.uniform(0.32, 0.4))
    _add_segment(A, 0.35, p0, p1, 0.005)
    _add_segment(A, 0.35, p1, p2, 0.005)
    if rng.random() < 0.5:
        tip = rng.uniform(0.18, 0.26)
        for du in (-0.008, 0.008):
            _add_segment(A, 0.3, (0.5 + du, 0.0), (0.5 + du, tip), 0.004)


def _zone_v(zone: str, cv: float, b: float) -> float:
    return {"upper": cv - 0.5 * b, "mid": cv, "lower": cv + 0.45 * b}[zone]


def _draw_finding(
    A: np.ndarray, f: str, at: dict[str, Any], g: Geometry, lungs: np.ndarray, rng: np.random.Generator
) -> BoxN:
    """Add finding ``f`` to the attenuation map; return its normalised box (before min-size padding)."""
    size = A.shape[0]
    _u, _v = _grid(size)
    side = at.get("side", "right" if rng.random() < 0.5 else "left")
    sev = {"mild": 0.0, "moderate": 1.0, "severe": 2.0}[at.get("severity", "moderate")]
    cu, cv, a, b = g.lung(side if side != "bilateral" else "right")
    lat = -1.0 if side == "right" else 1.0  # direction of the lateral chest wall in u
    if f == "pleural_effusion":
        sides = ("right", "left") if side == "bilateral" else (side,)
        boxed_side = at.get("box_side", "right") if side == "bilateral" else side
        box: BoxN = (0.0, 0.0, 1.0, 1.0)
        for sd in sides:
            cu, cv, a, b = g.lung(sd)
            lat = -1.0 if sd == "right" else 1.0
            level = cv + b * (0.62 - 0.18 * sev) + rng.normal(0, 0.015)
            sl = _win(size, cu - a - 0.03, level - 0.12, cu + a + 0.03, cv + b + 0.04)
            uu, vv = _sub(size, sl)
            lateral = np.clip(lat * (uu - cu) / a, -1, 1)  # 1 at the chest wall
            surface = level - 0.07 * (lateral + 1) / 2  # meniscus rises laterally
            fluid = np.clip((vv - surface) / 0.025, 0, 1)
            A[sl] += (0.26 + 0.04 * sev) * fluid * lungs[sl]  # fluid fills the dependent lung field
            if sd == boxed_side:
                box = (cu - a - 0.02, level - 0.08, cu + a + 0.01, cv + b + 0.03)
        return box
    if f == "pneumothorax":
        depth = 0.16 + 0.07 * sev + rng.uniform(-0.03, 0.03)  # share of the lung width collapsed
        sl = _win(size, cu - a - 0.02, cv - b - 0.02, cu + a + 0.02, cv + 0.1)
        uu, vv = _sub(size, sl)
        lm = lungs[sl]
        # collapsed lung: ellipse shrunk away from the lateral wall and apex
        ca, cb = a * (1 - depth), b * (1 - depth * 0.8)
        ccu, ccv = cu - lat * a * depth * 0.9, cv + b * depth * 0.6
        inner = _ellipse(uu, vv, ccu, ccv, ca, cb, 0.004)
        upper = np.clip((cv + 0.08 - vv) / 0.05, 0, 1)
        gap = lm * (1 - inner) * upper
        A[sl] -= 0.10 * gap  # no lung markings, darker
        r = np.sqrt(((uu - ccu) / ca) ** 2 + ((vv - ccv) / cb) ** 2)
        line = np.exp(-0.5 * ((r - 1.0) / 0.02) ** 2) * upper * lm
        A[sl] += 0.12 * line  # visceral pleural line
        u0 = cu - a if lat < 0 else cu - a * 0.2
        u1 = cu + a * 0.2 if lat < 0 else cu + a
        return (u0, cv - b - 0.01, u1, cv + 0.06)
    if f in ("consolidation", "pneumonia", "lung_opacity"):
        zone = at.get("zone", "lower")
        zc_v = _zone_v(zone, cv, b)
        zc_u = cu + lat * rng.uniform(-0.2, 0.45) * a
        if f == "consolidation":
            blobs, spread, sig, amp = 4, 0.035, 0.035, 0.24 + 0.04 * sev
        elif f == "pneumonia":
            blobs, spread, sig, amp = 8, 0.05, 0.022, 0.16 + 0.03 * sev
        else:
            blobs, spread, sig, amp = 2, 0.03, 0.055, 0.12 + 0.03 * sev
        pts = []
        for _ in range(blobs):
            pu, pv = zc_u + rng.normal(0, spread), zc_v + rng.normal(0, spread)
            s = sig * rng.uniform(0.75, 1.25)
            _add_gauss(A, amp, pu, pv, s * 1.1, s, lungs)
            pts.append((pu - 1.8 * s, pv - 1.8 * s, pu + 1.8 * s, pv + 1.8 * s))
        arr = np.asarray(pts)
        return (arr[:, 0].min(), arr[:, 1].min(), arr[:, 2].max(), arr[:, 3].max())
    if f == "edema":
        amp = 0.10 + 0.04 * sev
        for sgn in (-1, 1):
            _add_gauss(A, amp, 0.5 + sgn * 0.12, 0.47, 0.07, 0.09, lungs)
            # Kerley-like septal lines at the lateral bases
            for k in range(3):
                vv0 = cv + 0.5 * b + 0.025 * k
                _add_segment(A, 0.05 + 0.02 * sev, (0.5 + sgn * 0.25, vv0), (0.5 + sgn * 0.31, vv0 + 0.004), 0.004)
        sgn = -1 if at.get("box_side", "right") == "right" else 1
        u_in, u_out = 0.5 + sgn * 0.02, 0.5 + sgn * 0.27
        return (min(u_in, u_out), 0.34, max(u_in, u_out), 0.62)
    if f == "atelectasis":
        zone = at.get("zone", "lower")
        pv = _zone_v(zone, cv, b) + 0.05
        pu = cu + lat * rng.uniform(-0.1, 0.3) * a
        ang = rng.uniform(-0.35, 0.35)
        half = 0.08 + 0.02 * sev
        p0 = (pu - half * math.cos(ang), pv - half * math.sin(ang))
        p1 = (pu + half * math.cos(ang), pv + half * math.sin(ang))
        tmp = np.zeros_like(A)
        _add_segment(tmp, 0.26 + 0.05 * sev, p0, p1, 0.012 + 0.003 * sev)
        _add_gauss(tmp, 0.06, pu, pv + 0.02, 0.06, 0.03)
        A += tmp * lungs
        return (min(p0[0], p1[0]) - 0.03, min(p0[1], p1[1]) - 0.04, max(p0[0], p1[0]) + 0.03, max(p0[1], p1[1]) + 0.05)
    if f == "nodule":
        zone = at.get("zone", "mid")
        pv = _zone_v(zone, cv, b) + rng.normal(0, 0.03)
        pu = cu + lat * rng.uniform(-0.3, 0.5) * a
        r = at.get("size_mm", 12) / 1000.0 * 1.4  # ~ 1.4 normalised units per metre of chest
        _add_ellipse(A, 0.30, pu, pv, r, r * rng.uniform(0.85, 1.15), soft=0.004)
        return (pu - r - 0.012, pv - r - 0.012, pu + r + 0.012, pv + r + 0.012)
    raise ValueError(f"unknown phantom finding {f!r}")  # pragma: no cover


# ----------------------------------------------------------------------------------------------- files


def encode_png(pixels: np.ndarray, level: int = 1) -> bytes:
    """Lossless grayscale PNG of a phantom image (Huffman-only deflate: the filtered rows of these noisy images
    gain nothing from match search, so it is faster and smaller than the default strategy)."""
    px = np.ascontiguousarray(pixels, dtype=np.uint8)
    if px.ndim != 2:
        raise ValueError(f"encode_png expects a 2-D grayscale array, got shape {px.shape}")
    return _encode_png(px, level, strategy=zlib.Z_HUFFMAN_ONLY)


atomic_write = write_bytes_atomic  # the one atomic writer


#: (path, findings, attributes, sex, age, view, seed, patient_seed, size)
RenderTask = tuple[str, dict[str, bool], dict[str, Any], str, int, str, int, int, int]


def write_study_png(task: RenderTask) -> tuple[str, dict[str, tuple[float, float, float, float]]]:
    """Render one study and write it as a PNG atomically; returns the path and the finding boxes (worker function)."""
    path, findings, attributes, sex, age, view, seed, pseed, size = task
    px, boxes = render_study(findings, sex=sex, age=age, view=view, seed=seed, size=size, patient_seed=pseed,
                             attributes=attributes)
    atomic_write(Path(path), encode_png(px))
    return path, boxes
