"""Analysis of a stress run: plain functions on the tidy table (one row per model x item x condition x repeat).

* :func:`~medvlm_audit.suites.stress.scoring.score_stress` parses every answer (option / refusal / abstain / unparsed) and marks it correct. The
  headline accuracy is over all trials with a response, as the paper's denominators are all items: refusals,
  abstentions ("Unknown", "N/A", ...) and unparsed answers are wrong answers (their rates are reported); the
  parsed-only accuracy (over trials that chose an option) is reported beside it. Calls without a response are
  excluded and listed in the exclusion log.
* :func:`accuracy_table` - accuracy per model x condition (x benchmark): point, cluster-robust analytic SE,
  the interval of ``stats.rate_interval`` with one trial per item, else the percentile interval from the item
  bootstrap (an item's repeats stay together: repeats are folded into the uncertainty), Wilson on trials where
  fewer than 10 are right or wrong.
* :func:`paired_changes` - every T-change as a paired difference on the same items (trials matched on item
  and repeat), bootstrap SD and interval, two-sided shift-and-reflect p; BH-FDR within each model's family;
  ``support``: the share of item-bootstrap draws whose change has the observed sign (how firm a verdict read
  from it is; nan for no change).
* :func:`chance_tests` - text-only accuracy on the required items against chance (both the modal-answer accuracy
  over items, which is tested, and the trial-level accuracy, each in its own labelled column): each item's modal answer
  over its repeats, exact binomial (Poisson-binomial when items have different numbers of options) on items.
* :func:`robustness_table` - F1-F5, R1-R5, the mean and mean_available (:mod:`.score`) with percentile
  intervals; each F-term's two accuracies on the items that have both conditions (n and a note per component;
  F4 falls back to the highest replaced level any item could show, and says so).
* :func:`distractor_curve`, :func:`item_table` - the Base/UNK/1R-4R curve (one item set for all levels) and
  the per-item view; :func:`exclusion_log` - planning skips and unscorable trials with their reasons.

Every interval of one analysis comes from a single item bootstrap (:func:`medvlm_audit.stats.cluster_bootstrap_ratios`:
B draws of n items with replacement, ``numpy.random.default_rng(seed)``): each draw is one resampled benchmark,
so all accuracies, paired differences and robustness scores of a draw are computed on the same items. All
statistics come from :mod:`medvlm_audit.stats` (percentile interval with linear interpolation, SD with ddof=1,
shift-and-reflect p floored at 1/B and 1 when the observed difference is 0); the tests check agreement with
``stats.proportion`` and ``stats.paired_difference`` with clusters.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit import stats
from medvlm_audit.results import MetricRow, metrics_frame
from medvlm_audit.scorers.option import STATUSES
from medvlm_audit.suites.stress.items import LETTERS
from medvlm_audit.suites.stress.parse_rates import ASSESSABLE_PARSE_RATE, NOT_ASSESSABLE
from medvlm_audit.suites.stress.robustness import StressAccuracies, robustness_score, robustness_score_arrays
from medvlm_audit.suites.stress.scoring import normalize_tidy, score_stress  # noqa: F401  (score_stress re-exported)
from medvlm_audit.suites.stress.verdicts import VERDICT_COLUMNS, Evidence, evidence_text, verdict_table

SUBSETS: tuple[str, ...] = ("all", "required", "substitution")

# -------------------------------------------------------------------------------------------- scoring


# ----------------------------------------------------------------------------------------------- cube

#: answer codes in :attr:`StressCube.answer`: an option index (0-based), or one of these
REFUSED, NOT_SCORED = -1, -2


@dataclass
class StressCube:
    """The scored table as arrays: ``correct[model, condition, item, repeat]`` (NaN = no scorable trial)."""

    models: list[str]
    conditions: list[str]
    items: pd.Index
    benchmark: np.ndarray  # per item
    required: np.ndarray  # per item, bool
    substitution: np.ndarray  # per item, bool: has a substitution trial
    n_options: np.ndarray  # per item (as shown under 'original', else first seen)
    correct: np.ndarray  # (M, K, N, R) float
    present: np.ndarray  # (M, K, N, R) bool: a trial exists
    status: dict[str, np.ndarray]  # status -> (M, K, N) trial counts
    answer: np.ndarray  # (M, K, N, R) int16: option index, REFUSED or NOT_SCORED

    def cond(self, name: str) -> int | None:
        return self.conditions.index(name) if name in self.conditions else None

    def mask(self, subset: str, benchmark: str | None = None) -> np.ndarray:
        if subset == "all":
            m = np.ones(len(self.items), dtype=bool)
        elif subset == "required":
            m = self.required.copy()
        elif subset == "substitution":
            m = self.substitution.copy()
        else:
            raise ValueError(f"unknown subset {subset!r}; known: {SUBSETS}")
        if benchmark is not None:
            m &= self.benchmark == benchmark
        return m

    def shown(self, name: str, mask: np.ndarray) -> np.ndarray:
        """Items of ``mask`` that have a trial under condition ``name`` for any model (all False if it did not run)."""
        k = self.cond(name)
        if k is None:
            return np.zeros(len(self.items), dtype=bool)
        return self.present[:, k].any(axis=(0, 2)) & mask


def _answer_codes(scored: pd.DataFrame) -> np.ndarray:
    """Per row: the chosen option's index, REFUSED (any non-answer: refusal, abstention, unparsed), or NOT_SCORED
    (no response)."""
    st = scored["status"].to_numpy()
    inv, uniq = pd.factorize(scored["parsed"].to_numpy())
    lookup = np.array([LETTERS.find(u) if isinstance(u, str) and u else NOT_SCORED for u in uniq] + [NOT_SCORED])
    codes = np.where(st == "answer", lookup[inv], NOT_SCORED)  # inv = -1 (missing) picks the appended NOT_SCORED
    return np.where(np.isin(st, ("refusal", "abstain", "unparsed")), REFUSED, codes).astype(np.int16)


def build_cube(scored: pd.DataFrame) -> StressCube:
    """Index the scored table by codes once, so every analysis is array arithmetic."""
    mc, models = pd.factorize(scored["model"].astype(str).to_numpy(), sort=True)
    kc, conds = pd.factorize(scored["condition"].astype(str).to_numpy(), sort=True)
    ic, items = pd.factorize(scored["item_id"].astype(str).to_numpy(), sort=True)
    rc, _ = pd.factorize(scored["sample_index"].to_numpy(), sort=True)
    M, K, N, R = len(models), len(conds), len(items), int(rc.max()) + 1 if len(rc) else 1
    flat = ((mc * K + kc) * N + ic) * R + rc
    if len(flat) and np.bincount(flat, minlength=M * K * N * R).max() > 1:
        i = int(np.flatnonzero(np.bincount(flat) > 1)[0])
        r0 = scored.iloc[int(np.flatnonzero(flat == i)[0])]
        raise ValueError(f"the stress table has more than one row for model {r0['model']!r}, item "
                         f"{r0['item_id']!r}, condition {r0['condition']!r}, repeat {r0['sample_index']}")
    correct = np.full(M * K * N * R, np.nan)
    correct[flat] = scored["correct"].to_numpy(dtype=float)
    present = np.zeros(M * K * N * R, dtype=bool)
    present[flat] = True
    answer = np.full(M * K * N * R, NOT_SCORED, dtype=np.int16)
    answer[flat] = _answer_codes(scored)
    first = np.unique(ic, return_index=True)[1]
    bench = scored["benchmark"].astype(str).to_numpy()[first]
    req = np.zeros(N, dtype=bool)
    req[ic[scored["required"].to_numpy(dtype=bool)]] = True
    sub = np.zeros(N, dtype=bool)
    if "substitution" in conds:
        sub[ic[kc == list(conds).index("substitution")]] = True
    nopt = scored["n_options"].to_numpy(dtype=float)[first]
    st = scored["status"].to_numpy()
    cell = (mc * K + kc) * N + ic
    status = {name: np.bincount(cell[st == name], minlength=M * K * N).reshape(M, K, N) for name in STATUSES}
    shape = (M, K, N, R)
    return StressCube(list(models), list(conds), pd.Index(items), bench, req, sub, nopt,
                      correct.reshape(shape), present.reshape(shape), status, answer.reshape(shape))


class _Columns:
    """Per-item (numerator, denominator) columns of an analysis; one ``stats.cluster_bootstrap_ratios`` call
    resamples the items (each with its repeats) for all of them, so every table shares the same draws."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.num: list[np.ndarray] = []
        self.den: list[np.ndarray] = []
        self.draws: np.ndarray | None = None
        self.B, self.seed = 10_000, 0

    def add(self, num: np.ndarray, den: np.ndarray) -> int:
        self.num.append(np.asarray(num, dtype=np.float64))
        self.den.append(np.asarray(den, dtype=np.float64))
        return len(self.num) - 1

    def point(self, j: int) -> float:
        d = self.den[j].sum()
        return float(self.num[j].sum() / d) if d > 0 else float("nan")

    def se(self, j: int) -> float:
        return stats.cluster_ratio_se(self.num[j], self.den[j])

    def interval_method(self, j: int) -> str:
        """The words for :meth:`rate_interval`'s interval of column ``j``."""
        k, n = float(self.num[j].sum()), float(self.den[j].sum())
        if n <= 0:
            return "not estimable (n = 0)"
        if self.den[j].max() <= 1.0:
            return stats.rate_interval_method(round(k), round(n), B=self.B, seed=self.seed)
        if min(k, n - k) < stats.RATE_WILSON_EVENTS:
            return "Wilson 95% score interval on trials (fewer than 10 right or wrong; ignores the repeats' clustering)"
        return f"item (cluster) percentile bootstrap 95% interval, repeats kept together (B={self.B}, seed={self.seed})"

    def rate_interval(self, j: int, alpha: float = 0.05) -> tuple[float, float]:
        """The printed interval of an accuracy (DESIGN.md, statistics conventions): ``stats.rate_interval`` when
        every item has one trial (a plain rate k/n); with repeats, the item (cluster) bootstrap, except Wilson on
        the trial counts where fewer than 10 trials are right or wrong (the bootstrap is degenerate there)."""
        k, n = float(self.num[j].sum()), float(self.den[j].sum())
        if n <= 0:
            return float("nan"), float("nan")
        if self.den[j].max() <= 1.0:
            return stats.rate_interval(round(k), round(n), B=self.B, seed=self.seed, alpha=alpha)
        if min(k, n - k) < stats.RATE_WILSON_EVENTS:
            return stats.wilson_interval(round(k), round(n), alpha)
        return _interval(self.col(j), alpha)

    def run(self, B: int, seed: int) -> None:
        self.B, self.seed = B, seed
        self.draws = (stats.cluster_bootstrap_ratios(np.stack(self.num, axis=1), np.stack(self.den, axis=1), B, seed)
                      if self.num else None)

    def col(self, j: int | None) -> np.ndarray | None:
        return None if self.draws is None or j is None else self.draws[:, j]


#: the note of a paired change whose bootstrap collapsed (every item moved alike, usually: no item changed)
UNCHANGED = "no item changed"


def unchanged_interval(diff: float, n_items: int) -> dict[str, Any]:
    """The interval of a paired change whose item bootstrap has zero width (every item's change is the same,
    usually 0: no item changed): ``diff`` +- the 95% upper bound of a change rate of 0 in ``n_items`` items
    (:func:`stats.rate_interval`), clipped to [-1, 1], with a note saying so; never a zero-width interval.

    >>> r = unchanged_interval(0.0, 16)
    >>> round(r["ci_low"], 3), round(r["ci_high"], 3), r["note"][:15]
    (-0.194, 0.194, 'no item changed')
    """
    u = stats.rate_interval(0, n_items)[1]
    lo, hi = stats.collapsed_change_interval(diff, n_items)
    what = (f"{UNCHANGED} in {n_items} items" if diff == 0 else
            f"every one of {n_items} items changed by the same amount (the bootstrap interval has zero width)")
    return {"ci_low": lo, "ci_high": hi,
            "note": f"{what}: the interval is the change \u00b1 {100 * u:.1f} pp (clipped to \u00b1100 pp), the 95% "
                    f"upper bound of a rate of 0 in {n_items} items (rate_interval)"}


def text_only(condition: str) -> bool:
    """Whether a condition drops the image (``no_image`` and the ``+no_image`` variants)."""
    return condition == "no_image" or condition.endswith("+no_image")


def parse_rates(cube: StressCube) -> np.ndarray:
    """(models, conditions) parse rate over the trials with a response; nan where no trial had a response.

    Parsed: an option chosen, or an abstention ("Unknown", "I don't know": an answer, a wrong one, DESIGN.md), or,
    in a condition without the image (:func:`text_only`), a refusal ("I cannot answer without the image" is the
    answer a model that reads the image should give there). Not parsed: refusals where the image was shown ("As
    an AI, I cannot...") and unparsed text (prose naming no option, or several). A model that chose an option in
    under half of the trials of *every* condition gives no usable answer at all: its parse rate is the option
    rate, so it is not assessable everywhere. Refusals and abstentions stay wrong answers in every accuracy (the
    paper's denominators); this rate only decides what is assessable, so a model that refuses or abstains
    throughout never scores R = 1.0 (issue 21 item 3)."""
    rate = response_parse_rates(cube)
    opt = option_rates(cube)
    for m in range(rate.shape[0]):
        if no_usable_answer(opt[m]):
            rate[m] = opt[m]
    return rate


def response_parse_rates(cube: StressCube) -> np.ndarray:
    """:func:`parse_rates` before the no-usable-answer rule: the share of responses parsed, per condition."""
    txt = np.array([text_only(c) for c in cube.conditions], dtype=bool)
    refused = cube.status["refusal"].sum(axis=2)
    parsed = sum(cube.status[s].sum(axis=2) for s in ("answer", "abstain")) + np.where(txt[None, :], refused, 0)
    responded = sum(cube.status[s].sum(axis=2) for s in ("answer", "abstain", "refusal", "unparsed"))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(responded > 0, parsed / np.maximum(responded, 1), np.nan)


def no_usable_answer(option_rate: np.ndarray) -> bool:
    """Whether a model's option rates (one per condition) are all below the assessable floor."""
    return bool(np.isfinite(option_rate).any() and np.nanmax(option_rate) < ASSESSABLE_PARSE_RATE)


def option_rates(cube: StressCube) -> np.ndarray:
    """(models, conditions) share of the trials with a response that chose an option (refusals, abstentions
    and unparsed answers did not); nan where no trial had a response."""
    responded = sum(cube.status[s].sum(axis=2) for s in ("answer", "refusal", "abstain", "unparsed"))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(responded > 0, cube.status["answer"].sum(axis=2) / np.maximum(responded, 1), np.nan)


def parse_rate_lines(tidy_or_scored: pd.DataFrame) -> list[str]:
    """The run's console warnings: one per model not assessable under some condition, by the rule and over the
    denominators of the analysis (:func:`parse_rates`: the trials with a response; a model that chose an option in
    under half the trials of every condition gives no usable answer), so the console says what the report says.

    >>> t = pd.DataFrame({"model": ["m"] * 4, "item_id": ["a", "b", "a", "b"], "sample_index": 0,
    ...     "condition": ["original", "original", "no_image", "no_image"], "probe_set": "s", "benchmark": "b",
    ...     "correct": [0.0, 0.0, 0.0, 0.0], "parsed": [None] * 4, "required": False, "n_options": 4,
    ...     "status": ["refusal", "no_response", "refusal", "abstain"]})
    >>> parse_rate_lines(t)
    ["warning: model 'm' has no usable answer (an option chosen in 0.0% of the responses under every condition; refusals, abstentions and unparsed answers choose none; 0.0% under no_image, n = 2 responses; 0.0% under original, n = 1 response of 2 trials): not assessable"]
    """
    scored = _prepared(tidy_or_scored)
    if scored.empty:
        return []
    cube = build_cube(scored)
    rate, opt, raw = parse_rates(cube), option_rates(cube), response_parse_rates(cube)
    responded = sum(cube.status[s].sum(axis=2) for s in ("answer", "abstain", "refusal", "unparsed"))
    trials = cube.present.sum(axis=(2, 3))
    lines = []
    for m, model in enumerate(cube.models):
        low = [k for k in range(len(cube.conditions)) if rate[m, k] < ASSESSABLE_PARSE_RATE]
        if not low:
            continue

        def where(k: int, m: int = m) -> str:
            r, t = int(responded[m, k]), int(trials[m, k])
            n = f"n = {r} response{'s' if r != 1 else ''}" + (f" of {t} trials" if t != r else "")
            return f"{100 * rate[m, k]:.1f}% under {cube.conditions[k]}, {n}"

        each = "; ".join(where(k) for k in low)
        if no_usable_answer(opt[m]) and np.nanmax(np.nan_to_num(raw[m], nan=0.0)) >= ASSESSABLE_PARSE_RATE:
            lines.append(f"warning: model {model!r} has no usable answer (an option chosen in "
                         f"{100 * float(np.nanmax(opt[m])):.1f}% of the responses under every condition; refusals, "
                         f"abstentions and unparsed answers choose none; {each}): {NOT_ASSESSABLE}")
        else:
            lines.append(f"warning: model {model!r} has a parse rate below {100 * ASSESSABLE_PARSE_RATE:g}% "
                         f"({each}): {NOT_ASSESSABLE} there")
    return lines


def _interval(draws: np.ndarray | None, alpha: float = 0.05) -> tuple[float, float]:
    return (float("nan"), float("nan")) if draws is None else stats.percentile_interval(draws, alpha)


def _sums(cube: StressCube, m: int, k: int, mask: np.ndarray, pair_with: int | None = None
          ) -> tuple[np.ndarray, np.ndarray]:
    """Per-item (correct count, scorable count) over repeats; with ``pair_with`` only repeats scorable in both."""
    c = cube.correct[m, k]
    ok = ~np.isnan(c)
    if pair_with is not None:
        ok &= ~np.isnan(cube.correct[m, pair_with])
    num = np.where(ok, c, 0.0).sum(axis=1) * mask
    den = ok.sum(axis=1) * mask
    return num, den.astype(np.float64)


def subset_items(scored: pd.DataFrame, subset: str) -> set[str]:
    """Item ids of a subset: 'all', 'required' (needs_image; all when none flagged), 'substitution'."""
    if subset == "all":
        return set(scored["item_id"].unique())
    if subset == "required":
        return set(scored.loc[scored["required"].to_numpy(dtype=bool), "item_id"].unique())
    if subset == "substitution":
        return set(scored.loc[scored["condition"] == "substitution", "item_id"].unique())
    raise ValueError(f"unknown subset {subset!r}; known: {SUBSETS}")


# ------------------------------------------------------------------------------------------ comparisons


@dataclass(frozen=True, slots=True)
class Comparison:
    """A paired T-change: accuracy under ``perturbed`` minus accuracy under ``base`` on ``subset`` items."""

    test: str
    name: str
    base: str
    perturbed: str
    subset: str = "all"
    benchmark: str | None = None


DEFAULT_COMPARISONS: tuple[Comparison, ...] = (
    Comparison("T1", "image removed", "original", "no_image", "all"),
    Comparison("T2", "image removed (required items)", "original", "no_image", "required"),
    Comparison("T3", "options reordered, text-only", "no_image", "reordered+no_image", "required"),
    Comparison("T3", "options reordered, image+text", "original", "reordered", "required"),
    *(Comparison("T4", f"{k} distractor(s) replaced, text-only", "no_image", f"replaced:{k}+no_image", "required")
      for k in range(1, 5)),
    *(Comparison("T4", f"{k} distractor(s) replaced, image+text", "original", f"replaced:{k}", "required")
      for k in range(1, 5)),
    Comparison("T4", "'Unknown' distractor, text-only", "no_image", "unknown+no_image", "required"),
    Comparison("T4", "'Unknown' distractor, image+text", "original", "unknown", "required"),
    Comparison("T5", "visual substitution", "original", "substitution", "substitution"),
    Comparison("T6", "chain-of-thought prompt", "original", "cot", "all"),
)


def suite_comparisons(conditions: Iterable[str], benchmarks: Iterable[str],
                      comparisons: Iterable[Comparison] = DEFAULT_COMPARISONS) -> list[Comparison]:
    """The declared family: comparisons whose conditions ran, plus T1 per benchmark when there are several."""
    have = set(conditions)
    out = [c for c in comparisons if c.base in have and c.perturbed in have]
    benches = sorted(set(benchmarks))
    if len(benches) > 1 and {"original", "no_image"} <= have:
        out += [Comparison("T1", f"image removed ({b})", "original", "no_image", "all", b) for b in benches]
    return out


# ------------------------------------------------------------------------------------------ robustness


@dataclass(frozen=True, slots=True)
class _Term:
    """Two accuracies of the score measured on the same items: (field a, condition a, field b, condition b)."""

    a: str
    cond_a: str
    b: str
    cond_b: str
    subset: str


_CURVE = (("Base", "original", "no_image"), ("UNK", "unknown", "unknown+no_image"),
          *((f"{k}R", f"replaced:{k}", f"replaced:{k}+no_image") for k in range(1, 5)))


def replaced_level(cube: StressCube, suffix: str = "") -> tuple[int | None, str]:
    """The T4 level F4 uses: 4R, else the highest level any required item could show, with the reason."""
    req = cube.mask("required")
    for level in (4, 3, 2, 1):
        if cube.shown(f"replaced:{level}{suffix}", req).any():
            return level, "" if level == 4 else f"{level}R used: {_why_not(cube, f'replaced:4{suffix}', req)}"
    return None, f"not estimable: {_why_not(cube, f'replaced:1{suffix}', req)}"


def _why_not(cube: StressCube, cond: str, mask: np.ndarray) -> str:
    """Why no item of ``mask`` was shown under ``cond``."""
    if cond.startswith("replaced:") and mask.any():
        need = int(cond.split(":")[1].split("+")[0])
        most = int(np.nanmax(cube.n_options[mask])) - 1
        if most < need:
            return f"{need}R not estimable (items have at most {most} distractors)"
    if cond not in cube.conditions:
        return f"{cond} did not run"
    if not mask.any():
        return f"{cond}: no item in its subset"
    return f"{cond} was skipped for every item (see the exclusion log)"


class _Plan:
    """Registers every quantity of an analysis, runs one bootstrap, and assembles the tables."""

    def __init__(self, cube: StressCube, cols: _Columns | None = None) -> None:
        self.cube = cube
        self.cols = cols or _Columns(len(cube.items))
        self.parse = parse_rates(cube)
        #: models that chose an option in under half the trials of every condition (parse rate = option rate),
        #: though their responses parse (refusals, abstentions): not assessable for want of a usable answer
        opt, raw = option_rates(cube), response_parse_rates(cube)
        self.no_usable_answer = {m for m in range(len(cube.models)) if no_usable_answer(opt[m])
                                 and np.nanmax(np.nan_to_num(raw[m], nan=0.0)) >= ASSESSABLE_PARSE_RATE}
        #: models whose parse rate is their option rate (:func:`parse_rates`)
        self.answer_only = {m for m in range(len(cube.models)) if no_usable_answer(opt[m])}
        self.B = 0
        self._acc: list[tuple[dict[str, Any], int, np.ndarray, int, int]] = []
        self._pairs: list[tuple[dict[str, Any], int, int, np.ndarray]] = []
        self._rob: dict[str, dict[str, Any]] = {}
        self._rob_notes: dict[str, str] = {}
        self._curve: list[tuple[dict[str, Any], int, np.ndarray, int, int]] = []

    def not_assessable(self, m: int, conds: Iterable[str]) -> str:
        """'' when model ``m`` is assessable under every condition of ``conds``, else
        'not assessable (parse rate 0.0% under original, ...)' naming each condition below the floor."""
        bad = []
        for c in dict.fromkeys(conds):
            k = self.cube.cond(c)
            if k is not None and self.parse[m, k] < ASSESSABLE_PARSE_RATE:
                bad.append(f"{100.0 * self.parse[m, k]:.1f}% under {c}")
        return f"{NOT_ASSESSABLE} (parse rate {', '.join(bad)})" if bad else ""

    # registration ---------------------------------------------------------------------------
    def accuracy(self, by_benchmark: bool = False, subset: str = "all") -> None:
        cb = self.cube
        benches = sorted(set(cb.benchmark)) if by_benchmark else [None]
        for m, model in enumerate(cb.models):
            for k, cond in enumerate(cb.conditions):
                for b in benches:
                    mask = cb.mask(subset, b)
                    if not (cb.present[m, k].any(axis=1) & mask).any():
                        continue
                    num, den = _sums(cb, m, k, mask)
                    key = {"model": model, **({"benchmark": b} if by_benchmark else {}), "condition": cond}
                    self._acc.append((key, self.cols.add(num, den), mask, m, k))

    def _pair(self, m: int, ka: int, kb: int, mask: np.ndarray) -> tuple[int, int, np.ndarray]:
        """Columns of two conditions on the same items and repeats (scorable in both), and the paired counts."""
        na, da = _sums(self.cube, m, ka, mask, pair_with=kb)
        nb, _ = _sums(self.cube, m, kb, mask, pair_with=ka)
        return self.cols.add(na, da), self.cols.add(nb, da), da

    def pairs(self, comparisons: Iterable[Comparison] | None = None) -> None:
        cb = self.cube
        comps = (suite_comparisons(cb.conditions, cb.benchmark) if comparisons is None else list(comparisons))
        for m, model in enumerate(cb.models):
            for c in comps:
                ka, kb = cb.cond(c.base), cb.cond(c.perturbed)
                if ka is None or kb is None:
                    continue
                ja, jb, da = self._pair(m, ka, kb, cb.mask(c.subset, c.benchmark))
                key = {"model": model, "test": c.test, "comparison": c.name, "base": c.base,
                       "perturbed": c.perturbed, "subset": c.subset, "benchmark": c.benchmark}
                self._pairs.append((key, ja, jb, da))

    def _score_terms(self) -> dict[str, _Term]:
        """The paired terms of F3-F5 (F4 at the highest replaced level available) and their notes."""
        cb = self.cube
        lt, note_t = replaced_level(cb, "+no_image")
        li, note_i = replaced_level(cb, "")
        terms = {
            "F3": _Term("t3_txt_orig", "no_image", "t3_txt_reordered", "reordered+no_image", "required"),
            "F4_txt": _Term("t4_txt_base", "no_image", "t4_txt_4r", f"replaced:{lt or 1}+no_image", "required"),
            "F4_img": _Term("t4_img_base", "original", "t4_img_4r", f"replaced:{li or 1}", "required"),
            "F4_unk": _Term("t4_txt_base_unknown", "no_image", "t4_txt_unknown", "unknown+no_image", "required"),
            "F5": _Term("t5_orig", "original", "t5_substituted", "substitution", "substitution"),
        }
        self._rob_notes = {"F4_txt": note_t, "F4_img": note_i, "level_txt": f"{lt}R" if lt else "",
                           "level_img": f"{li}R" if li else ""}
        return terms

    def robustness(self) -> None:
        """Register F1-F5's accuracies, each F-term's pair on the items that have both of its conditions."""
        cb = self.cube
        k_orig, k_txt = cb.cond("original"), cb.cond("no_image")
        benches = sorted(set(cb.benchmark[cb.shown("original", cb.mask("all"))]))
        req = cb.mask("required")
        chance = float(np.mean(100.0 / cb.n_options[req])) if req.any() else float("nan")
        terms = self._score_terms()
        self._rob_terms = terms
        for m, model in enumerate(cb.models):
            cols: dict[str, int | None] = {}
            n: dict[str, int] = {}
            n_bench: dict[str, int] = {}
            for b in benches:
                if k_orig is None or k_txt is None:
                    cols[f"t1_img:{b}"] = cols[f"t1_txt:{b}"] = None
                    n_bench[b] = 0
                    continue
                ja, jb, da = self._pair(m, k_orig, k_txt, cb.mask("all", b))
                # F1's weight: the benchmark's size (fixed, as in the released code), not the items this model
                # happened to score under both conditions
                cols[f"t1_img:{b}"], cols[f"t1_txt:{b}"] = ja, jb
                n_bench[b] = int(cb.shown("original", cb.mask("all", b)).sum())
            cols["t2_txt_required"] = None
            if k_txt is not None:
                num, den = _sums(cb, m, k_txt, req)
                cols["t2_txt_required"], n["F2"] = self.cols.add(num, den), int((den > 0).sum())
            for name, t in terms.items():
                ka, kb = cb.cond(t.cond_a), cb.cond(t.cond_b)
                if ka is None or kb is None:
                    cols[t.a] = cols[t.b] = None
                    n[name] = 0
                    continue
                cols[t.a], cols[t.b], da = self._pair(m, ka, kb, cb.mask(t.subset))
                n[name] = int((da > 0).sum())
            self._rob[model] = {"cols": cols, "benches": benches, "n_bench": n_bench, "chance": chance, "n": n}

    def curve(self) -> None:
        """Register the Base/UNK/1R-4R curve per modality on one item set: the required items shown at every level
        that any item could show (so the levels compare the same items)."""
        cb = self.cube
        req = cb.mask("required")
        for mi, modality in ((1, "image+text"), (2, "text-only")):
            levels = [(row[0], row[mi]) for row in _CURVE]
            shown = {lvl: cb.shown(c, req) for lvl, c in levels}
            usable = [(lvl, c) for lvl, c in levels if shown[lvl].any()]
            common = np.logical_and.reduce([shown[lvl] for lvl, _ in usable]) if usable else req & False
            n_any = int(np.logical_or.reduce([shown[lvl] for lvl, _ in usable]).sum()) if usable else 0
            missing = [lvl for lvl, _ in levels if not shown[lvl].any()]
            note = f"the {int(common.sum())} required items shown at every level"
            if n_any > common.sum():
                note += f" ({n_any - int(common.sum())} items lacking a level left out)"
            if missing:
                note += f"; not estimable: {', '.join(missing)}"
            for m, model in enumerate(cb.models):
                for lvl, c in usable:
                    k = cb.cond(c)
                    assert k is not None
                    num, den = _sums(cb, m, k, common)
                    key = {"model": model, "modality": modality, "level": lvl, "condition": c, "note": note}
                    self._curve.append((key, self.cols.add(num, den), common, m, k))

    # results --------------------------------------------------------------------------------
    def run(self, B: int, seed: int) -> None:
        self.B = B
        self.cols.run(B, seed)

    def accuracy_frame(self) -> pd.DataFrame:
        cb, rows = self.cube, []
        for key, j, mask, m, k in self._acc:
            lo, hi = self.cols.rate_interval(j)
            na = self.not_assessable(m, [key["condition"]])
            acc, se = self.cols.point(j), self.cols.se(j)
            if na:
                acc = se = lo = hi = float("nan")
            st = {s: int(cb.status[s][m, k][mask].sum()) for s in STATUSES}
            n_trials = int(cb.present[m, k][mask].sum())
            sel = cb.present[m, k][mask]
            chance = float(np.sum(sel.sum(axis=1) / cb.n_options[mask]) / max(n_trials, 1))
            rows.append({**key, "n_items": int(sel.any(axis=1).sum()), "n_trials": n_trials,
                         "n_scored": int(self.cols.den[j].sum()), "accuracy": acc,
                         "se": se, "ci_low": lo, "ci_high": hi, "note": na,
                         "ci_method": self.cols.interval_method(j),
                         # beside the headline: accuracy over the trials that chose an option (non-answers count 0
                         # in the numerator, so the correct count is the same)
                         "accuracy_parsed": (float(self.cols.num[j].sum()) / st["answer"]) if st["answer"]
                         else float("nan"), "n_parsed": st["answer"],
                         "refusal_rate": st["refusal"] / max(n_trials, 1),
                         "abstain_rate": st["abstain"] / max(n_trials, 1),
                         "unparsed_rate": (st["unparsed"] + st["no_response"]) / max(n_trials, 1),
                         # the not-assessable rule's rate (parse_rates): over the trials with a response
                         "parse_rate": (st["answer"] if m in self.answer_only else
                                        st["answer"] + st["abstain"] + (st["refusal"] if text_only(key["condition"])
                                                                        else 0)) / (n_trials - st["no_response"])
                         if n_trials > st["no_response"] else float("nan"),
                         "chance": chance})
        if not rows:  # nothing estimable: the table keeps its columns (key columns named by the caller's grouping)
            return pd.DataFrame(columns=["model", "condition", "n_items", "n_trials", "n_scored", "accuracy", "se",
                                         "ci_low", "ci_high", "accuracy_parsed", "n_parsed", "refusal_rate",
                                         "abstain_rate", "unparsed_rate", "parse_rate", "chance"])
        return pd.DataFrame(rows)

    def curve_frame(self) -> pd.DataFrame:
        rows = []
        for key, j, _, m, _ in self._curve:
            lo, hi = self.cols.rate_interval(j)
            acc = self.cols.point(j)
            na = self.not_assessable(m, [key["condition"]])
            if na:
                acc = lo = hi = float("nan")
                key = {**key, "note": f"{na}; {key['note']}"}
            rows.append({**key, "accuracy": acc, "ci_low": lo, "ci_high": hi,
                         "n_items": int((self.cols.den[j] > 0).sum())})
        cols = ["model", "modality", "level", "condition", "accuracy", "ci_low", "ci_high", "n_items", "note"]
        return pd.DataFrame(rows, columns=cols)

    def pairs_frame(self) -> pd.DataFrame:
        rows = []
        for key, ja, jb, da in self._pairs:
            n_pairs = int(da.sum())
            a, b = self.cols.point(ja), self.cols.point(jb)
            na = self.not_assessable(self.cube.models.index(key["model"]), [key["base"], key["perturbed"]])
            res = stats.paired_from_draws(
                self.cols.col(jb) if self.cols.draws is not None else np.full(1, np.nan),
                self.cols.col(ja) if self.cols.draws is not None else np.full(1, np.nan),
                b - a if n_pairs else float("nan"), int((da > 0).sum()), max(self.B, 1))
            support = np.nan
            if self.cols.draws is not None and n_pairs and math.isfinite(res.diff) and res.diff != 0:
                dd = self.cols.col(jb) - self.cols.col(ja)
                dd = dd[np.isfinite(dd)]
                support = float(np.mean(np.sign(dd) == np.sign(res.diff))) if dd.size else np.nan
            row = {**key, "n_items": int((da > 0).sum()), "n_pairs": n_pairs,
                   "acc_base": a if n_pairs else np.nan, "acc_perturbed": b if n_pairs else np.nan,
                   "diff": res.diff, "sd": res.sd, "ci_low": res.ci_low, "ci_high": res.ci_high, "p": res.p,
                   "support": support, "note": na}
            if not na and row["n_items"] > 0 and math.isfinite(res.diff) and res.ci_low == res.ci_high:
                row.update(unchanged_interval(res.diff, row["n_items"]))
            if na:
                row.update({c: np.nan for c in ("acc_base", "acc_perturbed", "diff", "sd", "ci_low", "ci_high", "p",
                                                "support")})
            rows.append(row)
        # named columns even when no pair is estimable (a run with one condition), so readers never KeyError
        out = pd.DataFrame(rows, columns=PAIR_COLUMNS)
        if not out.empty:
            out["q"] = np.nan
            for idx in out.groupby("model").groups.values():
                out.loc[idx, "q"] = stats.benjamini_hochberg(out.loc[idx, "p"].to_numpy(dtype=float))
        return out

    def _pt(self, r: dict[str, Any], lab: str) -> float:
        j = r["cols"].get(lab)
        return 100.0 * self.cols.point(j) if j is not None else float("nan")

    def robustness_inputs(self) -> dict[str, StressAccuracies]:
        out = {}
        for model, r in self._rob.items():
            def pt(lab: str, r: dict[str, Any] = r) -> float:
                return self._pt(r, lab)

            out[model] = StressAccuracies(
                t1={b: (pt(f"t1_img:{b}"), pt(f"t1_txt:{b}"), r["n_bench"][b]) for b in r["benches"]},
                t2_txt_required=pt("t2_txt_required"), t2_chance=r["chance"],
                **{f: pt(f) for f in ("t3_txt_orig", "t3_txt_reordered", "t4_txt_base", "t4_txt_4r", "t4_img_base",
                                      "t4_img_4r", "t4_txt_unknown", "t4_txt_base_unknown", "t5_orig",
                                      "t5_substituted")},
            )
        return out

    def _component_notes(self, model: str) -> tuple[dict[str, int | None], dict[str, str]]:
        """n items and a note per F-component: the items each F-term's accuracies were measured on, and why a
        component is not estimable or uses a lower replaced level."""
        r, cb, nt = self._rob[model], self.cube, self._rob_notes
        n = r["n"]
        terms = self._rob_terms
        ns: dict[str, int | None] = {}
        notes: dict[str, str] = {}
        benches = [b for b in r["benches"] if r["n_bench"][b]]
        ns["F1"] = sum(r["n_bench"].values())
        notes["F1"] = ("image vs text on the same items: " + ", ".join(f"{b} n={r['n_bench'][b]}" for b in benches)
                       if benches else f"not estimable: {_why_not(cb, 'no_image', cb.mask('all'))}")
        ns["F2"] = n.get("F2", 0)
        notes["F2"] = (f"text-only accuracy on {ns['F2']} required items vs chance {r['chance']:.1f}%" if ns["F2"]
                       else f"not estimable: {_why_not(cb, 'no_image', cb.mask('required'))}")

        def pair_note(name: str, what: str) -> str:
            t = terms[name]
            if n[name]:
                return f"{what} on the same {n[name]} items"
            missing = t.cond_b if cb.cond(t.cond_b) is None or not cb.shown(t.cond_b, cb.mask(t.subset)).any() \
                else t.cond_a
            return f"{what} not estimable: {_why_not(cb, missing, cb.mask(t.subset))}"

        ns["F3"] = n["F3"]
        notes["F3"] = pair_note("F3", "text-only original vs reordered")
        ns["F4"] = n["F4_txt"]
        lt, li = nt["level_txt"] or "a replaced level", nt["level_img"] or "a replaced level"
        parts = [pair_note("F4_txt", f"text base vs {lt}"), pair_note("F4_img", f"image base vs {li}"),
                 pair_note("F4_unk", "text base vs 'Unknown'")]
        parts += [x for x in (nt["F4_txt"], nt["F4_img"]) if x and not x.startswith("not estimable")]
        notes["F4"] = "; ".join(dict.fromkeys(parts))
        ns["F5"] = n["F5"]
        notes["F5"] = pair_note("F5", "original vs substituted image")
        return ns, notes

    def robustness_frame(self, alpha: float = 0.05) -> pd.DataFrame:
        rows = []
        inputs = self.robustness_inputs()
        for model, r in self._rob.items():
            s = robustness_score(inputs[model])
            vals = s.as_dict()
            boot = self._score_draws(r)
            ns, notes = self._component_notes(model)
            m = self.cube.models.index(model)
            for f, conds in self._component_conditions().items():
                na = self.not_assessable(m, conds)
                if na:  # never a robustness computed from answers that are mostly unparsed
                    vals[f] = vals[f"R{f[1]}"] = float("nan")
                    notes[f] = f"{na}; {notes[f]}"
                    if boot is not None:
                        boot[f] = boot[f"R{f[1]}"] = np.full(self.B, np.nan)
            rs = {c: vals[c] for c in s.R}
            avail = [c for c in rs if not math.isnan(rs[c])]
            vals["mean"] = float(np.mean(list(rs.values()))) if len(avail) == len(rs) else float("nan")
            vals["mean_available"] = float(np.mean([rs[c] for c in avail])) if avail else float("nan")
            if boot is not None:
                boot["mean_available"] = (np.mean([boot[c] for c in avail], axis=0) if avail
                                          else np.full(self.B, np.nan))
            bounds: dict[str, tuple[float, float]] = {}
            for comp in [*s.F, *s.R, "mean", "mean_available"]:
                lo = hi = float("nan")
                if boot is not None and not math.isnan(vals[comp]):
                    lo, hi = stats.percentile_interval(boot[comp], alpha)
                f = f"F{comp[1]}" if comp[0] in "FR" else None
                collapsed = math.isfinite(lo) and lo == hi
                if f is not None:
                    n_items, note = ns[f], notes[f]
                    if collapsed and n_items:
                        # every draw gave the same value (no item moved the term): never a zero-width interval
                        u = stats.rate_interval(0, int(n_items))[1]
                        lo, hi = max(0.0, vals[comp] - u), min(1.0, vals[comp] + u)
                        note = (f"{note}; {comp} is {vals[comp]:g} in every bootstrap draw: the interval is the value "
                                f"\u00b1 {u:.3f} (clipped to [0, 1]), the 95% upper bound of a rate of 0 in {n_items} "
                                f"items")
                    bounds[comp] = (lo, hi)
                elif comp == "mean":
                    miss = [c for c in s.R if c not in avail]
                    n_items, note = None, ("mean of R1-R5" if not miss else
                                           f"not estimable: {', '.join(miss)} missing (see mean_available)")
                    nas = [c for c in miss if notes[f"F{c[1]}"].startswith(NOT_ASSESSABLE)]
                    if nas:
                        note = f"{NOT_ASSESSABLE}: {', '.join(nas)} not assessable (parse rate below " \
                               f"{100 * ASSESSABLE_PARSE_RATE:g}%)"
                else:
                    n_items, note = None, (f"mean of the {len(avail)} estimable components ({', '.join(avail)})"
                                           if avail else f"{NOT_ASSESSABLE}: no estimable component")
                if comp in ("mean", "mean_available") and collapsed:
                    # every component collapsed: the mean of their (widened) bounds, a conservative interval
                    used = [c for c in rs if c in avail] if comp == "mean_available" else list(rs)
                    if all(c in bounds and math.isfinite(bounds[c][0]) for c in used) and used:
                        lo = float(np.mean([bounds[c][0] for c in used]))
                        hi = float(np.mean([bounds[c][1] for c in used]))
                        note = f"{note}; the same in every bootstrap draw: the interval is the mean of the " \
                               f"components' intervals"
                rows.append({"model": model, "component": comp, "value": vals[comp], "ci_low": lo, "ci_high": hi,
                             "n_items": n_items, "note": note})
        out = pd.DataFrame(rows, columns=["model", "component", "value", "ci_low", "ci_high", "n_items", "note"])
        out["n_items"] = out["n_items"].astype("Int64")
        return out

    def _component_conditions(self) -> dict[str, list[str]]:
        """The conditions each F-term reads (a term is not assessable when any of them is)."""
        t = self._rob_terms
        return {"F1": ["original", "no_image"], "F2": ["no_image"], "F3": [t["F3"].cond_a, t["F3"].cond_b],
                "F4": [t[x].cond_a for x in ("F4_txt", "F4_img", "F4_unk")]
                + [t[x].cond_b for x in ("F4_txt", "F4_img", "F4_unk")],
                "F5": [t["F5"].cond_a, t["F5"].cond_b]}

    def _score_draws(self, r: dict[str, Any]) -> dict[str, np.ndarray] | None:
        """Bootstrap draws of every component from the shared item bootstrap (percent inputs)."""
        if self.cols.draws is None:
            return None
        B = self.cols.draws.shape[0]

        def dr(lab: str) -> np.ndarray:
            j = r["cols"].get(lab)
            return 100.0 * self.cols.draws[:, j] if j is not None else np.full(B, np.nan)

        benches = r["benches"]
        t1i = np.stack([dr(f"t1_img:{b}") for b in benches], axis=1) if benches else np.zeros((B, 0))
        t1t = np.stack([dr(f"t1_txt:{b}") for b in benches], axis=1) if benches else np.zeros((B, 0))
        return robustness_score_arrays(
            t1i, t1t, np.array([r["n_bench"][b] for b in benches]), dr("t2_txt_required"), r["chance"],
            dr("t3_txt_orig"), dr("t3_txt_reordered"), dr("t4_txt_base"), dr("t4_txt_4r"), dr("t4_img_base"),
            dr("t4_img_4r"), dr("t4_txt_unknown"), dr("t5_orig"), dr("t5_substituted"),
            t4_txt_base_unk=dr("t4_txt_base_unknown"),
        )


def _prepared(scored: pd.DataFrame) -> pd.DataFrame:
    """The table as scored (``correct``, ``status``, ``parsed``); scores it when any is missing."""
    return scored if {"correct", "status", "parsed"} <= set(scored.columns) else score_stress(scored)


def accuracy_table(
    scored: pd.DataFrame, by: Sequence[str] = ("model", "condition"), *, B: int = 10_000, seed: int = 0,
    subset: str = "all",
) -> pd.DataFrame:
    """Accuracy per model x condition (``by`` may add ``benchmark``) on ``subset`` items, with intervals."""
    extra = set(by) - {"model", "condition", "benchmark"}
    if extra or not {"model", "condition"} <= set(by):
        raise ValueError(f"by must be (model, [benchmark,] condition), got {tuple(by)}")
    plan = _Plan(build_cube(_prepared(scored)))
    plan.accuracy("benchmark" in by, subset)
    plan.run(B, seed)
    return plan.accuracy_frame()


def paired_changes(
    scored: pd.DataFrame, comparisons: Iterable[Comparison] | None = None, *, B: int = 10_000, seed: int = 0,
) -> pd.DataFrame:
    """Paired differences (perturbed - base) per model x comparison on the same items; BH q per model."""
    plan = _Plan(build_cube(_prepared(scored)))
    plan.pairs(comparisons)
    plan.run(B, seed)
    return plan.pairs_frame()


def robustness_inputs(scored: pd.DataFrame) -> dict[str, StressAccuracies]:
    """Each model's :class:`StressAccuracies` (percent), every F-term's pair on its shared items."""
    plan = _Plan(build_cube(_prepared(scored)))
    plan.robustness()
    return plan.robustness_inputs()


def robustness_table(scored: pd.DataFrame, *, B: int = 10_000, seed: int = 0, alpha: float = 0.05
                     ) -> pd.DataFrame:
    """F1-F5, R1-R5, the mean and mean_available per model, with intervals, n items and a note per component."""
    plan = _Plan(build_cube(_prepared(scored)))
    plan.robustness()
    plan.run(B, seed)
    return plan.robustness_frame(alpha)


def distractor_curve(scored: pd.DataFrame, *, B: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """Accuracy at Base, UNK and 1R-4R for image+text and text-only, on the required items shown at every level."""
    plan = _Plan(build_cube(_prepared(scored)))
    plan.curve()
    plan.run(B, seed)
    return plan.curve_frame()


# ------------------------------------------------------------------------------------------- chance


def modal_correct(answer: np.ndarray, correct: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per item (row): 1.0 when its modal scored answer over the repeats is right, 0.0 when wrong, NaN when it has
    no scored repeat. A refusal competes as an answer (and is wrong); ties are broken by a uniform draw that does
    not look at the gold, so a uniform guesser's modal answer is right with probability exactly 1/k."""
    n, R = answer.shape
    codes = np.where(answer >= REFUSED, answer.astype(np.int64) + 1, -1)  # refusal -> 0, option i -> i + 1
    width = int(codes.max(initial=0)) + 1
    counts = np.zeros((n, width), dtype=np.int64)
    ok = codes >= 0
    np.add.at(counts, (np.repeat(np.arange(n), R)[ok.ravel()], codes[ok]), 1)
    gold = np.full(n, -9, dtype=np.int64)
    hit = correct == 1.0
    gold[np.nonzero(hit)[0]] = codes[hit]
    top = counts.max(axis=1)
    tied = (counts == top[:, None]) & (top[:, None] > 0)
    pick = np.floor(rng.random(n) * np.maximum(tied.sum(axis=1), 1)).astype(np.int64)
    chosen = np.argmax(np.cumsum(tied, axis=1) > pick[:, None], axis=1)
    return np.where(top > 0, (chosen == gold).astype(float), np.nan)


#: columns of :meth:`_Plan.pairs_frame` / :func:`chance_tests` (kept when no row is estimable)
PAIR_COLUMNS = ["model", "test", "comparison", "base", "perturbed", "subset", "benchmark", "n_items", "n_pairs",
                "acc_base", "acc_perturbed", "diff", "sd", "ci_low", "ci_high", "p", "support", "note"]
CHANCE_COLUMNS = ["model", "test", "condition", "subset", "n_items", "correct_items", "accuracy_modal_items",
                  "n_trials", "correct_trials", "accuracy_trials", "chance", "p", "method", "note"]


def chance_tests(scored: pd.DataFrame | None, conditions: Sequence[str] = ("no_image",), subset: str = "required",
                 *, cube: StressCube | None = None, seed: int = 0) -> pd.DataFrame:
    """Accuracy against chance (1/k) on items: each item's modal answer over its repeats (:func:`modal_correct`),
    exact one-sided test on the number of items right (binomial; Poisson-binomial when k differs across items).

    Items are the unit (repeats of one item are not independent evidence); with one repeat this is the trial-level
    binomial test. Both accuracies are reported, each labelled: ``accuracy_modal_items`` (``correct_items`` of
    ``n_items``), the items whose modal answer is right, which is what the test tests; ``accuracy_trials``
    (``correct_trials`` of ``n_trials``), the trial-level accuracy every other table of the report prints.
    """
    cb = cube if cube is not None else build_cube(_prepared(scored))
    mask = cb.mask(subset)
    parse = parse_rates(cb)
    rows = []
    for m, model in enumerate(cb.models):
        for cond in conditions:
            k = cb.cond(cond)
            if k is None:
                continue
            c = cb.correct[m, k][mask]
            rng = np.random.default_rng([seed, m, k])
            modal = modal_correct(cb.answer[m, k][mask], c, rng)
            has = ~np.isnan(modal)
            probs = 1.0 / cb.n_options[mask][has]
            n, hits = int(has.sum()), int(modal[has].sum())
            n_trials = int((~np.isnan(c)).sum())
            rows.append({"model": model, "test": "T2", "condition": cond, "subset": subset, "n_items": n,
                         "correct_items": hits, "accuracy_modal_items": hits / n if n else float("nan"),
                         "n_trials": n_trials, "correct_trials": int(np.nansum(c)),
                         "accuracy_trials": float(np.nansum(c) / n_trials) if n_trials else float("nan"),
                         "chance": float(probs.mean()) if n else float("nan"),
                         "p": stats.chance_test(hits, probs),
                         "method": "exact test on items (modal answer over repeats)", "note": ""})
            if parse[m, k] < ASSESSABLE_PARSE_RATE:
                rows[-1].update({"p": float("nan"), "accuracy_modal_items": float("nan"),
                                 "accuracy_trials": float("nan"),
                                 "note": f"{NOT_ASSESSABLE} (parse rate {100 * parse[m, k]:.1f}% under {cond})"})
    return pd.DataFrame(rows, columns=CHANCE_COLUMNS)


# ------------------------------------------------------------------------------------------- views


def item_table(scored: pd.DataFrame | None, *, threshold: float = 0.5, cube: StressCube | None = None
               ) -> pd.DataFrame:
    """Per item x model: accuracy by condition; ``text_solvable`` when correct without the image.

    An item is text-solvable for a model when its text-only accuracy over repeats is >= ``threshold``;
    ``n_models_text_solvable`` counts the models for which it is (likely text-solvable or memorised).
    """
    cb = cube if cube is not None else build_cube(_prepared(scored))
    M, _, N, _ = cb.correct.shape
    n_ok = (~np.isnan(cb.correct)).sum(axis=3)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(n_ok > 0, np.nansum(cb.correct, axis=3) / n_ok, np.nan)
    rows = {"item_id": np.tile(np.asarray(cb.items), M), "benchmark": np.tile(cb.benchmark, M),
            "model": np.repeat(cb.models, N)}
    out = pd.DataFrame(rows)
    for k, cond in enumerate(cb.conditions):
        out[f"acc:{cond}"] = acc[:, k, :].reshape(-1)
    if "acc:no_image" in out.columns:
        out["text_solvable"] = out["acc:no_image"].to_numpy() >= threshold
        out["n_models_text_solvable"] = np.tile(out["text_solvable"].to_numpy().reshape(M, N).sum(axis=0), M)
    return out


#: columns of the exclusion log (exclusions.csv)
EXCLUSION_COLUMNS: tuple[str, ...] = ("item_id", "condition", "reason", "stage", "model", "sample_index")


def scoring_exclusions(scored: pd.DataFrame) -> pd.DataFrame:
    """Trials left out of accuracy (calls without a response) and unparsed answers (counted wrong in the headline
    accuracy, left out of the parsed-only one); one row per trial."""
    df = scored[scored["correct"].isna() | (scored["status"] == "unparsed")]
    reason = np.where(df["status"].to_numpy() == "no_response", "no response",
                      "unparsed answer, counted wrong (" + df["via"].astype(str).to_numpy() + ")")
    out = pd.DataFrame({"item_id": df["item_id"].astype(str).to_numpy(), "condition": df["condition"].to_numpy(),
                        "reason": reason, "stage": "scoring", "model": df["model"].astype(str).to_numpy(),
                        "sample_index": df["sample_index"].to_numpy()})
    return out.reset_index(drop=True)


def exclusion_log(plan_skips: pd.DataFrame | None, scored: pd.DataFrame) -> pd.DataFrame:
    """Everything left out of a stress analysis: planning skips (item x condition, from the run store) and
    unscorable trials, with their reasons, in :data:`EXCLUSION_COLUMNS` order."""
    parts = []
    if plan_skips is not None and len(plan_skips):
        p = plan_skips.rename(columns={"case_id": "item_id"})
        parts.append(pd.DataFrame({"item_id": p["item_id"].astype(str), "condition": p["condition"].astype(str),
                                   "reason": p["reason"].astype(str),
                                   "stage": np.where(p["condition"] == "*", "load", "plan"),
                                   "model": None, "sample_index": None}))
    parts.append(scoring_exclusions(scored))
    parts = [x for x in parts if len(x)]
    if not parts:
        return pd.DataFrame(columns=list(EXCLUSION_COLUMNS))
    return pd.concat(parts, ignore_index=True)[list(EXCLUSION_COLUMNS)]


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_PATHLIKE = re.compile(r"\S*[/\\]\S*")
_ITEM_PREFIX = re.compile(r"^.*?\bitem\s+(?:'[^']*'|\S+):\s*")


def reason_kind(reason: str) -> str:
    """A reason without item-specific detail (quoted values, file paths), for counting exclusions by kind."""
    r = _ITEM_PREFIX.sub("", str(reason))
    return " ".join(_PATHLIKE.sub("<file>", _QUOTED.sub("'…'", r)).split())


def exclusion_summary(log: pd.DataFrame) -> pd.DataFrame:
    """Exclusions counted by stage, model, condition and kind of reason (rows and distinct items)."""
    cols = ["stage", "model", "condition", "reason", "n", "n_items"]
    if log is None or not len(log):
        return pd.DataFrame(columns=cols)
    df = log.assign(reason=log["reason"].map(reason_kind), model=log["model"].fillna("(all)"))
    out = (df.groupby(["stage", "model", "condition", "reason"], dropna=False)
           .agg(n=("item_id", "size"), n_items=("item_id", "nunique")).reset_index())
    return out.sort_values(["n", "stage", "model", "condition"], ascending=[False, True, True, True],
                           ignore_index=True)[cols]


def family_fdr(changes: pd.DataFrame, chance: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """BH q-values over each model's declared family: all its paired T-changes and its chance tests."""
    ch, cc = changes.copy(), chance.copy()
    ch["q"] = np.nan
    cc["q"] = np.nan
    models = (set(ch["model"]) if len(ch) else set()) | (set(cc["model"]) if len(cc) else set())
    for m in sorted(models):
        i1 = ch.index[ch["model"] == m] if len(ch) else pd.Index([])
        i2 = cc.index[cc["model"] == m] if len(cc) else pd.Index([])
        p = np.concatenate([ch.loc[i1, "p"].to_numpy(dtype=float), cc.loc[i2, "p"].to_numpy(dtype=float)])
        q = stats.benjamini_hochberg(p)
        ch.loc[i1, "q"] = q[: len(i1)]
        cc.loc[i2, "q"] = q[len(i1):]
    return ch, cc


@dataclass
class StressAnalysis:
    """Every table of a stress analysis; ``frames()`` for export, ``summary()`` for summary.json."""

    accuracy: pd.DataFrame
    accuracy_by_benchmark: pd.DataFrame
    accuracy_required: pd.DataFrame
    changes: pd.DataFrame
    chance: pd.DataFrame
    robustness: pd.DataFrame
    curve: pd.DataFrame
    items: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    exclusions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(EXCLUSION_COLUMNS)))
    #: one row per model: the verdict, its bootstrap support and each test's status (:mod:`.verdicts`)
    verdicts: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=VERDICT_COLUMNS))

    def frames(self) -> dict[str, pd.DataFrame]:
        return {"stress_accuracy": self.accuracy, "stress_accuracy_by_benchmark": self.accuracy_by_benchmark,
                "stress_accuracy_required": self.accuracy_required, "stress_changes": self.changes,
                "stress_chance": self.chance, "stress_robustness": self.robustness, "stress_curve": self.curve,
                "stress_items": self.items, "stress_verdicts": self.verdicts}

    def summary(self) -> dict[str, Any]:
        rob: dict[str, dict[str, float | None]] = {}
        for _, r in self.robustness.iterrows():
            rob.setdefault(r["model"], {})[r["component"]] = None if math.isnan(r["value"]) else float(r["value"])
        notes = {f"{r['model']}:{r['component']}": r["note"] for _, r in self.robustness.iterrows()
                 if r["component"].startswith("F") and r.get("note")}
        ex = exclusion_summary(self.exclusions)
        detail = {}
        for r in self.verdicts.to_dict("records"):
            detail[r["model"]] = {
                "verdict": r["verdict"], "support": _num(r["support"]), "reason": r["reason"],
                "tests": {t: {"status": r[f"{t}_status"], "support": _num(r[f"{t}_support"]),
                              "reason": r[f"{t}_reason"]} for t in ("T1", "T2", "T3")}}
        return {"meta": self.meta, "t4_variant": self.meta.get("t4_variant"), "robustness": rob,
                "verdict_table": detail,
                "robustness_notes": notes, "not_assessable": self.meta.get("not_assessable", {}),
                "exclusions": {"n": len(self.exclusions),
                               "by_stage": {str(k): int(v) for k, v in ex.groupby("stage")["n"].sum().items()}}}


def _num(x: Any) -> float | None:
    return None if x is None or pd.isna(x) else float(x)


#: what each T4 variant means, for the report
T4_VARIANT_TEXT = {
    "replace_then_reorder": "distractors replaced, then the options shown in T3's seeded order (the gold's letter "
                            "may move), as the paper describes and the authors' released T4 files are built",
    "in_place": "distractors replaced in place (every option keeps its letter)",
}


def t4_variant_used(scored: pd.DataFrame) -> str:
    """How the run's replaced:k trials showed their options (the plan records it in each T4 trial's payload):
    ``replace_then_reorder``, ``in_place``, ``mixed (...)``, ``not recorded`` or ``no T4 replacement trials``."""
    t4 = scored[scored["condition"].astype(str).str.startswith("replaced:")]
    if t4.empty:
        return "no T4 replacement trials"
    if "t4_variant" not in t4.columns:
        return "not recorded"
    vals = sorted({str(v) for v in t4["t4_variant"] if isinstance(v, str) and v})
    if not vals:
        return "not recorded"
    return vals[0] if len(vals) == 1 else f"mixed ({', '.join(vals)})"


def _verdict_evidence(main: _Plan, required: _Plan, changes: pd.DataFrame, chance: pd.DataFrame
                      ) -> dict[str, dict[str, Evidence]]:
    """Each model's T1-T3 evidence for :func:`.verdicts.verdict_table`: the printed numbers (changes with their
    q, the text-only accuracy on the image-required items with chance and the chance test's q) and the shared
    item-bootstrap draws of each point."""
    cols = main.cols
    out: dict[str, dict[str, Evidence]] = {}
    for model in main.cube.models:
        ev: dict[str, Evidence] = {}
        for test, perturbed in (("T1", ("no_image",)), ("T3", ("reordered", "reordered+no_image"))):
            for pert in perturbed:
                hit = [(key, ja, jb) for key, ja, jb, _ in main._pairs
                       if key["model"] == model and key["test"] == test and key["perturbed"] == pert
                       and key["benchmark"] is None]
                row = changes[(changes["model"] == model) & (changes["test"] == test)
                              & (changes["perturbed"] == pert) & changes["benchmark"].isna()]
                if not hit or row.empty:
                    continue
                _, ja, jb = hit[0]
                r = row.iloc[0]
                note = str(r.get("note") or "")
                unchanged = note.startswith((UNCHANGED, "every one of"))
                note = "" if unchanged else note  # the not-assessable note, or none
                draws = None if cols.draws is None else cols.col(jb) - cols.col(ja)
                args = (float(r["diff"]), float(r["ci_low"]), float(r["ci_high"]), int(r["n_items"]), float(r["q"]))
                text = (f"{'removing the image' if test == 'T1' else 'reordering the options'}: {note}" if note
                        else evidence_text(test, *args))
                if unchanged:
                    # the bootstrap interval is [0, 0] on any number of items; the changes table (and the rule)
                    # read the interval of the change rate 0/n instead (rate_interval), so a small pilot stays open
                    text += f" ({r['note']})"
                ev[test] = Evidence(test, *args, ref=0.0, draws=draws, note=note, text=text)
                break
        ch = chance[(chance["model"] == model) & (chance["condition"] == "no_image")]
        acc = [(j, key) for key, j, _, _, _ in required._acc if key["model"] == model
               and key["condition"] == "no_image"]
        if len(ch) and acc:
            c = ch.iloc[0]
            j = acc[0][0]
            note = str(c.get("note") or "")
            point = cols.point(j) if not note else float("nan")
            lo, hi = cols.rate_interval(j) if not note else (float("nan"), float("nan"))
            args = (point, lo, hi, int(c["n_items"]), float(c["q"]))
            text = (f"without the image on image-required items: {note}" if note
                    else evidence_text("T2", *args, ref=float(c["chance"])))
            ev["T2"] = Evidence("T2", *args, ref=float(c["chance"]), draws=cols.col(j), note=note, text=text)
        out[model] = ev
    return out


def _model_not_assessable(meta: dict[str, Any], model: str) -> str:
    """Why a model is not assessable as a whole ('' when it is): no usable answer, or a parse rate below 50%."""
    na = meta.get("not_assessable", {}).get(model, {})
    no_opt = meta.get("no_usable_answer", {}).get(model)
    if no_opt is not None:
        return (f"{NOT_ASSESSABLE}: no usable answer (an option was chosen in at most {100 * float(no_opt):.1f}% of "
                f"trials in any condition; refusals, abstentions and unparsed answers choose none)")
    if na:
        rates = ", ".join(f"{100 * v:.1f}% under {c}" for c, v in na.items())
        return f"{NOT_ASSESSABLE} (parse rate {rates})"
    return ""


def analyse_stress(tidy_or_scored: pd.DataFrame, *, B: int = 10_000, seed: int = 0,
                   plan_skips: pd.DataFrame | None = None) -> StressAnalysis:
    """Score (if needed) and run every stress analysis on one shared item bootstrap; BH over each model's family.

    ``plan_skips``: the run's planning exclusions (case_id / item_id, condition, reason) for the exclusion log.
    """
    scored = _prepared(tidy_or_scored)
    cube = build_cube(scored)
    cols = _Columns(len(cube.items))
    main, by_bench, required = _Plan(cube, cols), _Plan(cube, cols), _Plan(cube, cols)
    main.accuracy(False, "all")
    by_bench.accuracy(True, "all")
    required.accuracy(False, "required")
    main.pairs()
    main.robustness()
    main.curve()
    main.run(B, seed)
    for pl in (by_bench, required):
        pl.B = B
    changes, chance = family_fdr(main.pairs_frame(), chance_tests(None, cube=cube, seed=seed))
    variant = t4_variant_used(scored)
    robustness = main.robustness_frame()
    not_assessable = {model: {c: round(float(main.parse[m, k]), 4) for k, c in enumerate(cube.conditions)
                              if main.parse[m, k] < ASSESSABLE_PARSE_RATE}
                      for m, model in enumerate(cube.models)}
    f4 = robustness["component"] == "F4"
    robustness.loc[f4, "note"] = [f"{n}; T4 variant: {variant}" if n else f"T4 variant: {variant}"
                                  for n in robustness.loc[f4, "note"].fillna("")]
    meta = {"B": B, "seed": seed, "n_items": len(cube.items), "n_required": int(cube.required.sum()),
            "n_substitution": int(cube.substitution.sum()), "models": cube.models, "conditions": cube.conditions,
            "t4_variant": variant,
            "not_assessable": {m: v for m, v in not_assessable.items() if v},
            "no_usable_answer": {cube.models[m]: round(float(np.nanmax(option_rates(cube)[m])), 4)
                                 for m in sorted(main.no_usable_answer)},
            "not_assessable_rule": f"parse rate (options chosen, abstentions, and refusals where the image was "
                                   f"removed; not refusals with the image or unparsed text; for a model choosing an "
                                   f"option in under half the trials of every condition: options chosen) below "
                                   f"{100 * ASSESSABLE_PARSE_RATE:g}% under a condition: no accuracy, change or "
                                   f"robustness term from that condition",
            "bootstrap": "item bootstrap (repeats stay with their item; stats.cluster_bootstrap_ratios), "
                         "numpy default_rng(seed), shared by all tables; accuracy counts refusals, abstentions and "
                         "unparsed answers as wrong (all items: the paper's denominators), the parsed-only "
                         "accuracy is beside it; each robustness term pairs its two accuracies on the "
                         "items that have both conditions"}
    verdicts = verdict_table(_verdict_evidence(main, required, changes, chance),
                             {m: _model_not_assessable(meta, m) for m in cube.models}, B=B)
    # the T2 chance test's call beside its numbers (text shortcut: found / absent / indeterminate, and support)
    t2 = verdicts.set_index("model")
    is_t2 = (chance["condition"] == "no_image") & (chance["subset"] == "required")
    chance["verdict"] = [t2.loc[m, "T2_status"] if ok and m in t2.index else ""
                         for m, ok in zip(chance["model"], is_t2, strict=True)]
    chance["verdict_support"] = [t2.loc[m, "T2_support"] if ok and m in t2.index else np.nan
                                 for m, ok in zip(chance["model"], is_t2, strict=True)]
    return StressAnalysis(
        accuracy=main.accuracy_frame(),
        accuracy_by_benchmark=by_bench.accuracy_frame(),
        accuracy_required=required.accuracy_frame(),
        changes=changes,
        chance=chance,
        robustness=robustness,
        curve=main.curve_frame(),
        items=item_table(None, cube=cube),
        meta=meta,
        exclusions=exclusion_log(plan_skips, scored),
        verdicts=verdicts,
    )


def metrics_long(res: StressAnalysis, probe_set: str) -> pd.DataFrame:
    """Accuracy per model x condition and R1-R5 / mean per model in the shared long metrics schema."""
    acc = res.accuracy
    rows = [MetricRow("stress", probe_set, r["model"], "accuracy", r["condition"], r["accuracy"], r.get("se"),
                      r["ci_low"], r["ci_high"], r["n_items"], "fraction",
                      r.get("ci_method") or "item bootstrap (percentile)",
                      r.get("note") or ("" if pd.notna(r["accuracy"]) else
                                        f"undefined: no scored trial among {int(r.get('n_trials', 0) or 0)} (every "
                                        "answer errored or missing)"))
            for r in acc.to_dict("records")]
    for r in res.robustness.to_dict("records"):
        rows.append(MetricRow("stress", probe_set, r["model"], "robustness", r["component"], r["value"], None,  # type: ignore[arg-type]
                              r["ci_low"], r["ci_high"], r["n_items"], "fraction", "item bootstrap (percentile)",
                              r.get("note") or ""))
    return metrics_frame(rows)


def comparisons_long(res: StressAnalysis, probe_set: str) -> pd.DataFrame:
    """The paired T-changes in the shared comparisons schema (family: the model's T-tests; p_adj: BH q)."""
    ch = res.changes
    return pd.DataFrame({
        "family": "stress:" + ch["model"].astype(str), "probe_set": probe_set, "metric": "accuracy",
        "subset": ch["test"].astype(str) + ":" + ch["perturbed"].astype(str), "model_a": ch["model"],
        "model_b": ch["model"], "diff": ch["diff"], "sd": ch["sd"], "ci_low": ch["ci_low"],
        "ci_high": ch["ci_high"], "p": ch["p"], "p_adj": ch["q"], "n": ch["n_items"],
        "test": "paired item bootstrap", "note": ch["comparison"],
    })
