"""The deterministic grounding category rule (paper 000, "Three behavioral categories"; DESIGN.md).

Every category reads intervals (the 95% interval the report prints, ``stats.rate_interval``), never a point alone:
ignores_image: CGR = 0, UAR = 100 and IS = 100, each on at least 100 cases (no image edit changed an answer);
unstable: IS's interval lies entirely below 70 (answers move under an irrelevant occlusion, so CGR is not
localized grounding);
uses_image: CGR's interval excludes 0 and IS's interval lies entirely above 70, with IS >= 90;
indeterminate: anything else, with the reason in plain words ("IS 42.9% [15.8, 75.0] on 7 cases: too few to
call unstable");
not_assessable: the model's parse rate on the original image is below 50% (every metric uses that condition).
Beside each category, its bootstrap support (:func:`category_support`): the share of case-resampling draws, every
metric and interval recomputed, that give the same category. The rule reads rates, intervals and counts only;
accuracy never enters it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np

__all__ = ["SUPPORT_DRAWS", "SWEEP_THRESHOLDS", "Category", "Rate", "categorize", "categorize_counts",
           "category_support", "support_weights",
           "threshold_sweep", "verdict"]

Category = Literal["uses_image", "ignores_image", "unstable", "indeterminate", "not_assessable"]
#: IS thresholds of the stability sweep (paper: 50-90, Supplementary Table 13).
SWEEP_THRESHOLDS: tuple[int, ...] = tuple(range(50, 95, 5))
#: case-resampling draws of the category's bootstrap support
SUPPORT_DRAWS = 1_000


@dataclass(frozen=True)
class Rate:
    """A rate in percent with its printed 95% interval, denominator n and count k of ones (n = 0: not
    estimable; a nan point with n > 0: not assessable, ``note`` says why)."""

    point: float
    ci_low: float
    ci_high: float
    n: int
    k: int
    note: str = ""

    @classmethod
    def from_row(cls, row: dict[str, Any] | None) -> Rate:
        if row is None:
            return cls(math.nan, math.nan, math.nan, 0, 0)
        return cls(float(row["point"]), float(row["ci_low"]), float(row["ci_high"]), int(row["n"]), int(row["k"]),
                   str(row.get("note") or ""))

    @classmethod
    def from_counts(cls, k: int, n: int) -> Rate:
        """The rate k/n with ``stats.rate_interval`` (the interval every report prints)."""
        lo, hi = _rate_interval_pct(int(k), int(n))
        return cls(100.0 * k / n if n else math.nan, lo, hi, int(n), int(k))

    @property
    def estimable(self) -> bool:
        return self.n > 0 and math.isfinite(self.point)

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.ci_low) and math.isfinite(self.ci_high)

    def text(self, name: str) -> str:
        if not self.estimable:
            if self.n > 0 and self.note:
                return f"{name} {self.note}"
            return f"{name} not estimable (n = 0)"
        ci = f" [{self.ci_low:.1f}, {self.ci_high:.1f}]" if self.has_interval else ""
        return f"{name} = {self.point:.1f}{ci} (n = {self.n})"

    def on_cases(self, name: str) -> str:
        """'IS 42.9% [15.8, 75.0] on 7 cases'."""
        ci = f" [{self.ci_low:.1f}, {self.ci_high:.1f}]" if self.has_interval else ""
        return f"{name} {self.point:.1f}%{ci} on {self.n} case{'s' if self.n != 1 else ''}"


@lru_cache(maxsize=65536)
def _rate_interval_pct(k: int, n: int) -> tuple[float, float]:
    # stats (scipy) imported here, not with this module: the report's figure code reads its colours and labels
    from medvlm_audit import stats

    lo, hi = stats.rate_interval(k, n)
    return 100.0 * lo, 100.0 * hi


def categorize(cgr: Rate, uar: Rate, is_: Rate, *, unstable_below: float = 70.0, uses_image_is_min: float = 90.0,
               min_n: int = 100, not_assessable: str = "") -> tuple[Category, str]:
    """Category and the plain-language reason from CGR, UAR and IS (percent, with intervals and counts).

    Checked in the paper's order: ignores image, then unstable, then uses image; else indeterminate.
    "CGR = 0", "UAR = 100" and "IS = 100" are read from the counts (no float comparison); "unstable" and
    "uses image" from the intervals. ``not_assessable``: why the model cannot be assessed (its parse rate on the
    original image below 50%), which decides the category.

    >>> categorize(Rate(50.0, 10.0, 90.0, 4, 2), Rate(100.0, 51.0, 100.0, 4, 4), Rate.from_counts(3, 7))
    ('indeterminate', 'IS 42.9% [15.8, 75.0] on 7 cases: too few to call unstable')
    """
    if not_assessable:
        return "not_assessable", not_assessable
    never_changed = (cgr.estimable and uar.estimable and is_.estimable and cgr.k == 0 and uar.k == uar.n
                     and is_.k == is_.n)
    if never_changed:
        small = [f"{nm} n = {r.n}" for nm, r in (("CGR", cgr), ("UAR", uar), ("IS", is_)) if r.n < min_n]
        if not small:
            return "ignores_image", (f"CGR = 0 (n = {cgr.n}), UAR = 100 (n = {uar.n}) and IS = 100 (n = {is_.n}): "
                                     f"no image edit changed any answer")
        return "indeterminate", (f"no image edit changed any answer (CGR = 0, UAR = 100, IS = 100) but on fewer than "
                                 f"{min_n} cases ({', '.join(small)}), too few to call it ignores image")
    is_ok = is_.estimable and is_.has_interval
    if is_ok and is_.ci_high < unstable_below:
        return "unstable", (f"{is_.text('IS')} lies entirely below {unstable_below:g}: answers change when an "
                            f"irrelevant region is masked, so CGR does not measure localized grounding")
    cgr_excl0 = cgr.estimable and cgr.has_interval and cgr.ci_low > 0
    is_above = is_ok and is_.ci_low > unstable_below and is_.point >= uses_image_is_min
    if cgr_excl0 and is_above:
        return "uses_image", (f"{cgr.text('CGR')} excludes 0, and {is_.text('IS')} lies above {unstable_below:g} "
                              f"with IS >= {uses_image_is_min:g}: masking the finding's region flips correct answers "
                              f"while an irrelevant mask of the same size does not")
    if not cgr.estimable and not is_.estimable and uar.estimable:
        axis = ("UAR = 100: no answer changed with another patient's image" if uar.k == uar.n
                else "UAR below 100: some answers depend on the patient's image")
        return "indeterminate", (f"no maskable case with parsed mask answers, so CGR and IS are not estimable; only the "
                                 f"swap axis is: {uar.text('UAR')}, {axis}")
    why: list[str] = []
    if is_ok and is_.point < unstable_below:
        why.append(f"{is_.on_cases('IS')}: too few to call unstable")
    if not cgr.estimable:
        why.append(cgr.text("CGR") if cgr.n > 0 else
                   "CGR not estimable (n = 0: no correct boxed case with a parsed target-mask answer)")
    elif cgr.k == 0:
        why.append(f"CGR = 0 (n = {cgr.n})" + ("" if uar.estimable and uar.k == uar.n else
                                               f" but {uar.text('UAR')} is below 100" if uar.estimable else
                                               " but UAR not estimable"))
    elif not cgr_excl0:
        why.append(f"{cgr.on_cases('CGR')}: its interval does not exclude 0")
    if not is_.estimable:
        why.append(is_.text("IS") if is_.n > 0 else
                   "IS not estimable (n = 0: no boxed case with a parsed irrelevant-mask answer)")
    elif is_.point >= uses_image_is_min and not is_above and cgr_excl0:
        why.append(f"{is_.on_cases('IS')}: its interval does not lie above {unstable_below:g}, too few to call "
                   f"uses image")
    elif unstable_below <= is_.point < uses_image_is_min:
        why.append(f"{is_.text('IS')} lies between {unstable_below:g} and {uses_image_is_min:g}")
    elif cgr.k == 0 and is_.k < is_.n and cgr.estimable and is_.point >= uses_image_is_min:
        why.append(f"{is_.text('IS')} is below 100")
    if not why:
        why.append("the estimates meet no category's conditions")
    return "indeterminate", "; ".join(dict.fromkeys(why))


def threshold_sweep(cgr: Rate, uar: Rate, is_: Rate, thresholds: Sequence[float] = SWEEP_THRESHOLDS,
                    min_n: int = 100, not_assessable: str = "") -> list[tuple[float, Category]]:
    """The rule re-run with one IS threshold T per step: unstable when IS's interval lies below T, uses image
    when it lies above T with IS >= T.

    The paper's Supplementary Table 13 assigns its IS = 56 model to uses image at T = 50 and to unstable for
    T = 60-90, so the uses-image IS floor moves with T (at T = 90 this is the main rule's floor).
    """
    return [(t, categorize(cgr, uar, is_, unstable_below=t, uses_image_is_min=t, min_n=min_n,
                           not_assessable=not_assessable)[0])
            for t in thresholds]


_CODES: tuple[Category, ...] = ("ignores_image", "unstable", "uses_image", "indeterminate")


def categorize_counts(cgr: tuple[np.ndarray, np.ndarray], uar: tuple[np.ndarray, np.ndarray],
                      is_: tuple[np.ndarray, np.ndarray], *, unstable_below: float = 70.0,
                      uses_image_is_min: float = 90.0, min_n: int = 100) -> np.ndarray:
    """:func:`categorize` on many count triples at once ((k, n) arrays per rate), with the intervals of
    ``stats.rate_intervals_limit``: an array of category names. Agrees with :func:`categorize` on
    ``Rate.from_counts`` wherever the bootstrap's finite-B endpoints and their limit fall on the same side of a
    threshold (tested)."""
    from medvlm_audit import stats

    (ck, cn), (uk, un), (ik, i_n) = (tuple(np.asarray(x, dtype=np.int64) for x in r) for r in (cgr, uar, is_))
    i_lo, i_hi = stats.rate_intervals_limit(ik, i_n)
    c_lo, _ = stats.rate_intervals_limit(ck, cn)
    with np.errstate(divide="ignore", invalid="ignore"):
        i_pt = np.where(i_n > 0, 100.0 * ik / np.maximum(i_n, 1), np.nan)
    est = (cn > 0) & (un > 0) & (i_n > 0)
    never = est & (ck == 0) & (uk == un) & (ik == i_n)
    ignores = never & (cn >= min_n) & (un >= min_n) & (i_n >= min_n)
    is_ok = i_n > 0
    unstable = ~never & is_ok & (100.0 * i_hi < unstable_below)
    uses = (~never & ~unstable & (cn > 0) & (100.0 * c_lo > 0) & is_ok & (100.0 * i_lo > unstable_below)
            & (i_pt >= uses_image_is_min))
    code = np.select([ignores, unstable, uses], [0, 1, 2], default=3)
    return np.asarray(_CODES, dtype=object)[code]


def support_weights(n_cases: int, draws: int = SUPPORT_DRAWS, seed: int = 0) -> np.ndarray:
    """(draws, n_cases) multinomial case weights of the support bootstrap (shared by the models of a panel)."""
    return np.random.default_rng(seed).multinomial(n_cases, np.full(n_cases, 1.0 / n_cases), size=draws)


def category_support(counts: Callable[[np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]], n_cases: int,
                     category: str, *, draws: int = SUPPORT_DRAWS, seed: int = 0, min_n: int = 100,
                     weights: np.ndarray | None = None) -> float:
    """Bootstrap support of a category: the share of ``draws`` case-resampling draws (cases drawn with
    replacement as multinomial weights, ``numpy.random.default_rng(seed)``) in which CGR, UAR and IS, recomputed
    with their intervals (:func:`categorize_counts`), give the same category. ``counts(w)`` maps a
    (draws, n_cases) weight matrix to {"cgr", "uar", "is"} -> (k*, n*) arrays. nan when there are no cases or
    the model is not assessable."""
    if n_cases == 0 or category == "not_assessable":
        return math.nan
    w = support_weights(n_cases, draws, seed) if weights is None else weights
    c = counts(w)
    cats = categorize_counts(c["cgr"], c["uar"], c["is"], min_n=min_n)
    return float(np.mean(cats == category))


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
    if category == "not_assessable":
        return reason
    return f"indeterminate: {reason}"


#: category -> fill colour, as in the paper's figures (blue uses image, red ignores image, orange unstable).
CATEGORY_COLORS: dict[str, str] = {
    "uses_image": "#1f77b4",
    "ignores_image": "#d62728",
    "unstable": "#ff7f0e",
    "indeterminate": "#7f7f7f",
    "not_assessable": "#8c564b",
}
CATEGORY_LABELS: dict[str, str] = {
    "uses_image": "uses image",
    "ignores_image": "ignores image",
    "unstable": "unstable",
    "indeterminate": "indeterminate",
    "not_assessable": "not assessable",
}
