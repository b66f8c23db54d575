"""The robustness score of paper 003 (Appendix A), exactly as the authors' released code computes it.

Accuracies in percent. With chance = 100/k:
  F1 = sum_b max(0, acc_img_b - acc_txt_b) * N_b / sum_b N_b / 100      (over the benchmarks run)
  F2 = max(0, acc_txt_required - chance) / (100 - chance)
  F3 = max(0, txt_orig - txt_reordered) / txt_orig
  F4 = 0.5 max(0, txt_base - txt_4R)/100 + 0.3 max(0, img_4R - img_base)/100 + 0.2 max(0, txt_unknown - txt_base)/100
  F5 = max(0, orig - substituted) / 100
  R_t = 1 - F_t;  mean = (R1 + ... + R5) / 5
Components whose inputs are missing are NaN and so is the mean (``mean_available`` averages the rest).
F3 with txt_orig = 0 is 0 (nothing to lose; the released code would divide by zero).
Paired inputs: the analysis measures each term's two accuracies on the items that have both conditions, so
F4's two text baselines may differ (``t4_txt_base`` against 4R, ``t4_txt_base_unknown`` against 'Unknown';
the latter defaults to the former, which is the paper's single baseline).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

NAN = float("nan")
T4_WEIGHTS: tuple[float, float, float] = (0.5, 0.3, 0.2)


@dataclass(frozen=True)
class StressAccuracies:
    """The accuracies (percent) the score reads. ``t1`` maps benchmark -> (acc_img, acc_txt, N)."""

    t1: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)
    t2_txt_required: float = NAN
    t2_chance: float = 20.0  # percent: 100/k
    t3_txt_orig: float = NAN
    t3_txt_reordered: float = NAN
    t4_txt_base: float = NAN
    t4_txt_4r: float = NAN
    t4_img_base: float = NAN
    t4_img_4r: float = NAN
    t4_txt_unknown: float = NAN
    t4_txt_base_unknown: float = NAN  # text baseline on the 'Unknown' items; NaN = t4_txt_base
    t5_orig: float = NAN
    t5_substituted: float = NAN


@dataclass(frozen=True)
class RobustnessScore:
    F: dict[str, float]
    R: dict[str, float]
    mean: float
    mean_available: float
    n_available: int

    def as_dict(self) -> dict[str, float]:
        return {**self.F, **self.R, "mean": self.mean, "mean_available": self.mean_available}


def _pos(x: float) -> float:
    return max(0.0, x) if not math.isnan(x) else NAN


def f1_modality_sensitivity(t1: Mapping[str, tuple[float, float, float]]) -> float:
    """N-weighted mean drop (img - txt, floored at 0) over benchmarks, as a fraction."""
    rows = [(a, b, n) for a, b, n in t1.values() if not (math.isnan(a) or math.isnan(b)) and n > 0]
    if not rows:
        return NAN
    total = sum(n for _, _, n in rows)
    return sum(max(0.0, a - b) * n for a, b, n in rows) / total / 100.0


def f2_modality_necessity(txt_required: float, chance: float) -> float:
    """Excess text-only accuracy above chance on image-required items, scaled to [0, 1]."""
    if math.isnan(txt_required) or math.isnan(chance) or chance >= 100:
        return NAN
    return _pos(txt_required - chance) / (100.0 - chance)


def f3_format_perturbation(txt_orig: float, txt_reordered: float) -> float:
    """Relative text-only drop under option reordering."""
    if math.isnan(txt_orig) or math.isnan(txt_reordered):
        return NAN
    if txt_orig == 0:
        return 0.0
    return _pos(txt_orig - txt_reordered) / txt_orig


def f4_distractor_replacement(
    txt_base: float, txt_4r: float, img_base: float, img_4r: float, txt_unknown: float,
    weights: tuple[float, float, float] = T4_WEIGHTS, txt_base_unknown: float | None = None,
) -> float:
    """0.5 text drop at 4R + 0.3 image gain at 4R + 0.2 text gain with 'Unknown', each /100.

    ``txt_base_unknown``: the text baseline on the items of the 'Unknown' condition (paired); default txt_base.
    """
    base_unk = txt_base if txt_base_unknown is None or math.isnan(txt_base_unknown) else txt_base_unknown
    vals = (txt_base, txt_4r, img_base, img_4r, txt_unknown, base_unk)
    if any(math.isnan(v) for v in vals):
        return NAN
    w1, w2, w3 = weights
    return (w1 * max(0.0, txt_base - txt_4r) + w2 * max(0.0, img_4r - img_base)
            + w3 * max(0.0, txt_unknown - base_unk)) / 100.0


def f5_visual_substitution(orig: float, substituted: float) -> float:
    """Accuracy drop when the image is replaced by one supporting a distractor, as a fraction."""
    if math.isnan(orig) or math.isnan(substituted):
        return NAN
    return _pos(orig - substituted) / 100.0


def robustness_score(acc: StressAccuracies) -> RobustnessScore:
    """F1-F5, R1-R5 and their unweighted mean from one model's accuracies."""
    F = {
        "F1": f1_modality_sensitivity(acc.t1),
        "F2": f2_modality_necessity(acc.t2_txt_required, acc.t2_chance),
        "F3": f3_format_perturbation(acc.t3_txt_orig, acc.t3_txt_reordered),
        "F4": f4_distractor_replacement(
            acc.t4_txt_base, acc.t4_txt_4r, acc.t4_img_base, acc.t4_img_4r, acc.t4_txt_unknown,
            txt_base_unknown=acc.t4_txt_base_unknown,
        ),
        "F5": f5_visual_substitution(acc.t5_orig, acc.t5_substituted),
    }
    R = {f"R{k[1]}": (1.0 - v if not math.isnan(v) else NAN) for k, v in F.items()}
    vals = np.array(list(R.values()), dtype=float)
    ok = ~np.isnan(vals)
    mean = float(vals.mean()) if ok.all() else NAN
    mean_av = float(vals[ok].mean()) if ok.any() else NAN
    return RobustnessScore(F, R, mean, mean_av, int(ok.sum()))


def robustness_score_arrays(
    t1_img: np.ndarray, t1_txt: np.ndarray, t1_n: np.ndarray, t2_txt: np.ndarray, chance: float,
    t3_orig: np.ndarray, t3_reord: np.ndarray, t4_txt_base: np.ndarray, t4_txt_4r: np.ndarray,
    t4_img_base: np.ndarray, t4_img_4r: np.ndarray, t4_txt_unk: np.ndarray, t5_orig: np.ndarray,
    t5_sub: np.ndarray, t4_txt_base_unk: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Vectorised :func:`robustness_score` over bootstrap draws (percent inputs; t1_* are (B, n_bench));
    ``t4_txt_base_unk`` is the paired text baseline of the 'Unknown' term (default t4_txt_base)."""
    base_unk = t4_txt_base if t4_txt_base_unk is None else t4_txt_base_unk
    t1_n = np.asarray(t1_n, dtype=float)
    F1 = (np.maximum(0.0, t1_img - t1_txt) * t1_n).sum(axis=-1) / t1_n.sum() / 100.0 if t1_n.size else None
    F2 = np.maximum(0.0, t2_txt - chance) / (100.0 - chance)
    with np.errstate(divide="ignore", invalid="ignore"):
        F3 = np.where(t3_orig == 0, 0.0, np.maximum(0.0, t3_orig - t3_reord) / t3_orig)
    w1, w2, w3 = T4_WEIGHTS
    F4 = (w1 * np.maximum(0.0, t4_txt_base - t4_txt_4r) + w2 * np.maximum(0.0, t4_img_4r - t4_img_base)
          + w3 * np.maximum(0.0, t4_txt_unk - base_unk)) / 100.0
    F5 = np.maximum(0.0, t5_orig - t5_sub) / 100.0
    out = {"F1": F1, "F2": F2, "F3": F3, "F4": F4, "F5": F5}
    out = {k: (np.full(np.shape(t2_txt), np.nan) if v is None else np.asarray(v, dtype=float)) for k, v in out.items()}
    for i in range(1, 6):
        out[f"R{i}"] = 1.0 - out[f"F{i}"]
    out["mean"] = np.mean([out[f"R{i}"] for i in range(1, 6)], axis=0)
    return out
