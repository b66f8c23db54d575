"""The deterministic grounding category rule (paper 000, "Three behavioral categories"; DESIGN.md).

ignores_image: CGR = 0, UAR = 100 and IS = 100, each on at least 100 cases (no image edit changed an answer);
unstable: IS < 70 (answers move under an irrelevant occlusion, so CGR is not localized grounding);
uses_image: CGR > 0 with its 95% percentile-bootstrap interval excluding 0 (also where a Wilson interval is
displayed: one flip in 20 is indeterminate), and IS >= 90;
indeterminate: anything else, with the reason in plain words.
The rule reads point estimates, intervals and counts only; accuracy never enters it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["SWEEP_THRESHOLDS", "Category", "Rate", "categorize", "threshold_sweep", "verdict"]

Category = Literal["uses_image", "ignores_image", "unstable", "indeterminate"]
#: IS thresholds of the stability sweep (paper: 50-90, Supplementary Table 13).
SWEEP_THRESHOLDS: tuple[int, ...] = tuple(range(50, 95, 5))


@dataclass(frozen=True)
class Rate:
    """A rate in percent with its displayed 95% interval, denominator n and count k of ones (n = 0: not
    estimable). ``boot_low`` / ``boot_high``: its 95% percentile-bootstrap interval, the one the category rule
    reads (DESIGN.md: a Wilson interval may be displayed at small n, the rule reads the bootstrap interval);
    nan means the displayed interval is already the bootstrap one."""

    point: float
    ci_low: float
    ci_high: float
    n: int
    k: int
    boot_low: float = math.nan
    boot_high: float = math.nan

    @classmethod
    def from_row(cls, row: dict[str, Any] | None) -> Rate:
        if row is None:
            return cls(math.nan, math.nan, math.nan, 0, 0)
        return cls(float(row["point"]), float(row["ci_low"]), float(row["ci_high"]), int(row["n"]), int(row["k"]),
                   float(row.get("boot_low", math.nan)), float(row.get("boot_high", math.nan)))

    @property
    def rule_interval(self) -> tuple[float, float]:
        """The percentile-bootstrap interval the category rule reads."""
        if math.isfinite(self.boot_low) and math.isfinite(self.boot_high):
            return self.boot_low, self.boot_high
        return self.ci_low, self.ci_high

    @property
    def estimable(self) -> bool:
        return self.n > 0 and math.isfinite(self.point)

    def text(self, name: str) -> str:
        if not self.estimable:
            return f"{name} not estimable (n = 0)"
        ci = (f" [{self.ci_low:.1f}, {self.ci_high:.1f}]" if math.isfinite(self.ci_low) and math.isfinite(self.ci_high)
              else "")
        return f"{name} = {self.point:.1f}{ci} (n = {self.n})"


def categorize(cgr: Rate, uar: Rate, is_: Rate, *, unstable_below: float = 70.0, uses_image_is_min: float = 90.0,
               min_n: int = 100) -> tuple[Category, str]:
    """Category and the plain-language reason from CGR, UAR and IS (percent, with intervals and counts).

    Checked in the paper's order: ignores image, then unstable, then uses image; else indeterminate.
    "CGR = 0", "UAR = 100" and "IS = 100" are read from the counts (no float comparison).
    """
    never_changed = (cgr.estimable and uar.estimable and is_.estimable and cgr.k == 0 and uar.k == uar.n
                     and is_.k == is_.n)
    if never_changed:
        small = [f"{nm} n = {r.n}" for nm, r in (("CGR", cgr), ("UAR", uar), ("IS", is_)) if r.n < min_n]
        if not small:
            return "ignores_image", (f"CGR = 0 (n = {cgr.n}), UAR = 100 (n = {uar.n}) and IS = 100 (n = {is_.n}): "
                                     f"no image edit changed any answer")
        return "indeterminate", (f"no image edit changed any answer (CGR = 0, UAR = 100, IS = 100) but on fewer than "
                                 f"{min_n} cases ({', '.join(small)}), too few to call it ignores image")
    if is_.estimable and is_.point < unstable_below:
        return "unstable", (f"{is_.text('IS')} < {unstable_below:g}: answers change when an irrelevant region is "
                            f"masked, so CGR does not measure localized grounding")
    b_lo, b_hi = cgr.rule_interval
    boot_txt = f"its 95% bootstrap interval [{b_lo:.1f}, {b_hi:.1f}]" if math.isfinite(b_lo) else "its interval"
    cgr_excl0 = cgr.estimable and cgr.k > 0 and math.isfinite(b_lo) and b_lo > 0
    if cgr_excl0 and is_.estimable and is_.point >= uses_image_is_min:
        return "uses_image", (f"{cgr.text('CGR')} with {boot_txt} excluding 0, and {is_.text('IS')} >= "
                              f"{uses_image_is_min:g}: masking the finding's region flips correct answers while an "
                              f"irrelevant mask of the same size does not")
    why: list[str] = []
    if not cgr.estimable and not is_.estimable and uar.estimable:
        axis = ("UAR = 100: no answer changed with another patient's image" if uar.k == uar.n
                else "UAR below 100: some answers depend on the patient's image")
        return "indeterminate", (f"no maskable case with parsed mask answers, so CGR and IS are not estimable; only the "
                                 f"swap axis is: {uar.text('UAR')}, {axis}")
    if not cgr.estimable:
        why.append("CGR not estimable (n = 0: no correct boxed case with a parsed target-mask answer)")
    elif cgr.k == 0:
        why.append(f"CGR = 0 (n = {cgr.n})" + ("" if uar.estimable and uar.k == uar.n else
                                               f" but {uar.text('UAR')} is below 100" if uar.estimable else
                                               " but UAR not estimable (n = 0)"))
    elif not cgr_excl0:
        why.append(f"{cgr.text('CGR')}: {boot_txt} does not exclude 0")
    if not is_.estimable:
        why.append("IS not estimable (n = 0: no boxed case with a parsed irrelevant-mask answer)")
    elif unstable_below <= is_.point < uses_image_is_min:
        why.append(f"{is_.text('IS')} lies between {unstable_below:g} and {uses_image_is_min:g}")
    elif cgr.k == 0 and is_.k < is_.n and cgr.estimable:
        why.append(f"{is_.text('IS')} is below 100")
    if not why:
        why.append("the estimates meet no category's conditions")
    return "indeterminate", "; ".join(why)


def threshold_sweep(cgr: Rate, uar: Rate, is_: Rate, thresholds: Sequence[float] = SWEEP_THRESHOLDS,
                    min_n: int = 100) -> list[tuple[float, Category]]:
    """The rule re-run with one IS threshold T per step: unstable below T, uses image at or above T.

    The paper's Supplementary Table 13 assigns its IS = 56 model to uses image at T = 50 and to unstable for
    T = 60-90, so the uses-image IS floor moves with T (at T = 90 this is the main rule's floor).
    """
    return [(t, categorize(cgr, uar, is_, unstable_below=t, uses_image_is_min=t, min_n=min_n)[0])
            for t in thresholds]


def _pct(r: Rate) -> str:
    """'93.5% [89.1, 96.3] (n = 62)': a rate with its displayed interval and n, or 'not estimable (n = 0)'."""
    if not r.estimable:
        return f"not estimable (n = {r.n})"
    ci = (f" [{r.ci_low:.1f}, {r.ci_high:.1f}]" if math.isfinite(r.ci_low) and math.isfinite(r.ci_high) else "")
    return f"{r.point:.1f}%{ci} (n = {r.n})"


def _flip(r: Rate) -> str:
    """The complement of a rate (share changed rather than kept), with its interval and n."""
    if not r.estimable:
        return f"not estimable (n = {r.n})"
    ci = (f" [{100.0 - r.ci_high:.1f}, {100.0 - r.ci_low:.1f}]" if math.isfinite(r.ci_low)
          and math.isfinite(r.ci_high) else "")
    return f"{100.0 - r.point:.1f}%{ci} (n = {r.n})"


def verdict(category: Category, reason: str, cgr: Rate, uar: Rate, is_: Rate, n_cases: int, n_edited: int) -> str:
    """A short plain-language verdict for the top of a report (``n_edited``: distinct cases compared under an
    image edit); every number is a percent with its 95% interval and n."""
    if category == "ignores_image":
        return (f"answers unchanged by any image edit on {n_edited} cases (CGR {_pct(cgr)}, UAR {_pct(uar)}, "
                f"IS {_pct(is_)}): ignores the image")
    if category == "unstable":
        tail = f"; its CGR of {_pct(cgr)} is not evidence of grounding" if cgr.estimable else ""
        return (f"changes {_flip(is_)} of answers when an irrelevant region is masked (IS {_pct(is_)}): "
                f"unstable{tail}")
    if category == "uses_image":
        tail = (f"; {_flip(uar)} of correct answers change with another patient's image" if uar.estimable else "")
        return (f"masking the finding's region flips {_pct(cgr)} of correct answers while an irrelevant mask keeps "
                f"{_pct(is_)}{tail}: uses the image")
    if n_cases == 0:
        return "no answers: not assessable"
    return f"indeterminate: {reason}"


#: category -> fill colour, as in the paper's figures (blue uses image, red ignores image, orange unstable).
CATEGORY_COLORS: dict[str, str] = {
    "uses_image": "#1f77b4",
    "ignores_image": "#d62728",
    "unstable": "#ff7f0e",
    "indeterminate": "#7f7f7f",
}
CATEGORY_LABELS: dict[str, str] = {
    "uses_image": "uses image",
    "ignores_image": "ignores image",
    "unstable": "unstable",
    "indeterminate": "indeterminate",
}
