"""Analysis of a stress run: plain functions on the tidy table (one row per model x item x condition x repeat).

* :func:`score_stress` parses every answer (option / refusal / unparsed) and marks it correct. Accuracy is
  over answered-or-refused trials (a refusal is a wrong answer, as in the paper; its rate is reported);
  unparsed and missing answers are excluded and counted in the parse rate.
* :func:`accuracy_table` - accuracy per model x condition (x benchmark): point, cluster-robust analytic SE,
  percentile interval from the item bootstrap (an item's repeats stay together: repeats are folded into the
  uncertainty).
* :func:`paired_changes` - every T-change as a paired difference on the same items (trials matched on item
  and repeat), bootstrap SD and interval, two-sided shift-and-reflect p; BH-FDR within each model's family.
* :func:`chance_tests` - text-only accuracy on the required items against chance (exact binomial on one
  repeat; Poisson-binomial when items have different numbers of options).
* :func:`robustness_table` - F1-F5, R1-R5 and the mean (:mod:`.score`) with percentile intervals.
* :func:`distractor_curve`, :func:`item_table` - the Base/UNK/1R-4R curve and the per-item view.

Every interval of one analysis comes from a single item bootstrap (B draws of n items with replacement,
``numpy.random.default_rng(seed)``): each draw is one resampled benchmark, so all accuracies, paired
differences and robustness scores of a draw are computed on the same items. Conventions follow
:mod:`medvlm_audit.stats` (percentile interval with linear interpolation, SD with ddof=1, p floored at
1/B and 1 when the observed difference is 0); the tests check agreement with ``stats.proportion`` and
``stats.paired_difference`` with clusters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit import stats
from medvlm_audit.suites.stress.parse import STATUSES, ParsedOption, parse_option
from medvlm_audit.suites.stress.score import StressAccuracies, robustness_score, robustness_score_arrays

SUBSETS: tuple[str, ...] = ("all", "required", "substitution")

# -------------------------------------------------------------------------------------------- scoring


def _options_tuple(v: Any) -> tuple[str, ...]:
    if isinstance(v, tuple):
        return v
    if isinstance(v, str):
        return tuple(json.loads(v))
    if isinstance(v, list):
        return tuple(v)
    if hasattr(v, "tolist"):
        return tuple(v.tolist())
    raise ValueError(f"options must be a list, got {type(v).__name__}")


def normalize_tidy(tidy: pd.DataFrame) -> pd.DataFrame:
    """Accept the runner's table (``case_id``, JSON ``payload``) or the planned-fields form; one shape out."""
    df = tidy.copy()
    if "payload" in df.columns:
        pl = [json.loads(p) if isinstance(p, str) else (p or {}) for p in df["payload"]]
        extra = pd.DataFrame(pl, index=df.index)
        for c in extra.columns:
            if c not in df.columns:
                df[c] = extra[c]
        df = df.drop(columns=["payload"])
    if "item_id" not in df.columns:
        if "case_id" not in df.columns:
            raise ValueError("the stress table needs an item_id (or case_id) column")
        df["item_id"] = df["case_id"]
    missing = [c for c in ("model", "condition", "answer_text", "options", "gold") if c not in df.columns]
    if missing:
        raise ValueError(f"the stress table lacks column(s) {missing}")
    if "sample_index" not in df.columns:
        df["sample_index"] = 0
    if "benchmark" not in df.columns:
        df["benchmark"] = "custom"
    df["options"] = [_options_tuple(o) for o in df["options"]]
    if "n_options" not in df.columns:
        df["n_options"] = [len(o) for o in df["options"]]
    if "required" not in df.columns:
        flagged = df["needs_image"].fillna(False).astype(bool) if "needs_image" in df.columns else None
        df["required"] = flagged if flagged is not None and flagged.any() else True
    df["required"] = df["required"].fillna(False).astype(bool)
    return df


def score_stress(tidy: pd.DataFrame, *, refusal_as_wrong: bool = True) -> pd.DataFrame:
    """Add ``status``, ``parsed`` (letter), ``via`` and ``correct`` (1/0, NaN when not scorable)."""
    df = normalize_tidy(tidy)
    memo: dict[tuple[Any, tuple[str, ...]], ParsedOption] = {}
    status, letter, via = [], [], []
    for text, opts in zip(df["answer_text"].tolist(), df["options"].tolist(), strict=True):
        t = None if text is None or (isinstance(text, float) and math.isnan(text)) else text
        key = (t, opts)
        p = memo.get(key)
        if p is None:
            p = parse_option(t, opts)
            memo[key] = p
        status.append(p.status)
        letter.append(p.letter)
        via.append(p.via)
    df["status"] = status
    df["parsed"] = letter
    df["via"] = via
    st = df["status"].to_numpy()
    hit = (df["parsed"].to_numpy() == df["gold"].to_numpy()) & (st == "answer")
    correct = np.where(st == "answer", hit.astype(float), np.nan)
    if refusal_as_wrong:
        correct = np.where(st == "refusal", 0.0, correct)
    df["correct"] = correct
    return df


# ----------------------------------------------------------------------------------------------- cube


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
    return StressCube(list(models), list(conds), pd.Index(items), bench, req, sub, nopt,
                      correct.reshape(M, K, N, R), present.reshape(M, K, N, R), status)


class _Boot:
    """Columns of per-item (numerator, denominator) sums; one shared item bootstrap gives every ratio's draws."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.num: list[np.ndarray] = []
        self.den: list[np.ndarray] = []
        self.draws: np.ndarray | None = None

    def add(self, num: np.ndarray, den: np.ndarray) -> int:
        self.num.append(np.asarray(num, dtype=np.float64))
        self.den.append(np.asarray(den, dtype=np.float64))
        return len(self.num) - 1

    def point(self, j: int) -> float:
        d = self.den[j].sum()
        return float(self.num[j].sum() / d) if d > 0 else float("nan")

    def se(self, j: int) -> float:
        """Cluster-robust (linearised ratio) analytic SE; sqrt(p(1-p)/n) when every item has one trial."""
        d = self.den[j].sum()
        if d <= 0:
            return float("nan")
        p = self.num[j].sum() / d
        return float(math.sqrt(float(np.sum((self.num[j] - p * self.den[j]) ** 2))) / d)

    def run(self, B: int, seed: int) -> None:
        """B item-bootstrap draws of every ratio. Identical columns are computed once; counts and sums are
        small integers, exact in float32, so the products run in float32 and the ratios in float64."""
        if B < 1 or not self.num:
            self.draws = None
            return
        uniq: dict[bytes, int] = {}
        cols: list[np.ndarray] = []
        ref_num, ref_den = [], []
        for v_list, refs in ((self.num, ref_num), (self.den, ref_den)):
            for v in v_list:
                key = v.tobytes()
                if key not in uniq:
                    uniq[key] = len(cols)
                    cols.append(v)
                refs.append(uniq[key])
        V = np.stack(cols, axis=1).astype(np.float32)
        ia, ib = np.array(ref_num), np.array(ref_den)
        n = self.n
        out = np.empty((B, len(ia)))
        rng = np.random.default_rng(seed)
        chunk = max(1, 4_000_000 // max(n, 1))
        offs = None
        for s0 in range(0, B, chunk):
            c = min(chunk, B - s0)
            idx = rng.integers(0, n, size=(c, n))
            if offs is None or offs.shape[0] != c:
                offs = (np.arange(c) * n)[:, None]
            idx += offs
            counts = np.bincount(idx.ravel(), minlength=c * n).reshape(c, n).astype(np.float32)
            prod = (counts @ V).astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[s0 : s0 + c] = prod[:, ia] / prod[:, ib]
        self.draws = out

    def col(self, j: int) -> np.ndarray | None:
        return None if self.draws is None else self.draws[:, j]


def _interval(draws: np.ndarray | None, alpha: float = 0.05) -> tuple[float, float]:
    if draws is None:
        return float("nan"), float("nan")
    d = draws[~np.isnan(draws)]
    if not d.size:
        return float("nan"), float("nan")
    lo, hi = np.percentile(d, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(lo), float(hi)


def _sd(draws: np.ndarray | None) -> float:
    if draws is None:
        return float("nan")
    d = draws[~np.isnan(draws)]
    return float(np.std(d, ddof=1)) if d.size > 1 else float("nan")


def _shift_reflect_p(draws: np.ndarray | None, d: float, B: int) -> float:
    """As stats: share of draws with |d* - d| >= |d|, floored at 1/B; 1 when d == 0."""
    if draws is None or math.isnan(d):
        return float("nan")
    if d == 0.0:
        return 1.0
    x = draws[~np.isnan(draws)]
    return max(float(np.count_nonzero(np.abs(x - d) >= abs(d))) / max(x.size, 1), 1.0 / B)


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


# ---------------------------------------------------------------------------------------------- analysis

#: (label, condition, subset) the score reads besides T1
_SCORE_CELLS: tuple[tuple[str, str, str], ...] = (
    ("txt_req", "no_image", "required"),
    ("txt_reord", "reordered+no_image", "required"),
    ("txt_4r", "replaced:4+no_image", "required"),
    ("img_req", "original", "required"),
    ("img_4r", "replaced:4", "required"),
    ("txt_unk", "unknown+no_image", "required"),
    ("img_sub_orig", "original", "substitution"),
    ("img_sub", "substitution", "substitution"),
)
_CURVE = (("Base", "original", "no_image"), ("UNK", "unknown", "unknown+no_image"),
          *((f"{k}R", f"replaced:{k}", f"replaced:{k}+no_image") for k in range(1, 5)))


class _Plan:
    """Registers every quantity of an analysis, runs one bootstrap, and assembles the tables."""

    def __init__(self, cube: StressCube) -> None:
        self.cube = cube
        self.boot = _Boot(len(cube.items))
        self._acc: list[tuple[dict[str, Any], int, np.ndarray, int, int]] = []
        self._pairs: list[tuple[dict[str, Any], int, int, np.ndarray]] = []
        self._rob: dict[str, dict[str, Any]] = {}

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
                    self._acc.append((key, self.boot.add(num, den), mask, m, k))

    def pairs(self, comparisons: Iterable[Comparison] | None = None) -> None:
        cb = self.cube
        comps = (suite_comparisons(cb.conditions, cb.benchmark) if comparisons is None else list(comparisons))
        for m, model in enumerate(cb.models):
            for c in comps:
                ka, kb = cb.cond(c.base), cb.cond(c.perturbed)
                if ka is None or kb is None:
                    continue
                mask = cb.mask(c.subset, c.benchmark)
                na, da = _sums(cb, m, ka, mask, pair_with=kb)
                nb, _ = _sums(cb, m, kb, mask, pair_with=ka)
                key = {"model": model, "test": c.test, "comparison": c.name, "base": c.base,
                       "perturbed": c.perturbed, "subset": c.subset, "benchmark": c.benchmark}
                self._pairs.append((key, self.boot.add(na, da), self.boot.add(nb, da), da))

    def robustness(self) -> None:
        cb = self.cube
        k_orig, k_txt = cb.cond("original"), cb.cond("no_image")
        benches = sorted(set(cb.benchmark[cb.present[:, k_orig].any(axis=(0, 2))])) if k_orig is not None else []
        req = cb.mask("required")
        chance = float(np.mean(100.0 / cb.n_options[req])) if req.any() else float("nan")
        for m, model in enumerate(cb.models):
            cols: dict[str, int | None] = {}
            n_bench: dict[str, int] = {}
            for b in benches:
                bm = cb.mask("all", b)
                n_bench[b] = int((cb.present[m, k_orig].any(axis=1) & bm).sum()) if k_orig is not None else 0
                for lab, k in (("t1_img", k_orig), ("t1_txt", k_txt)):
                    cols[f"{lab}:{b}"] = None if k is None else self.boot.add(*_sums(cb, m, k, bm))
            for lab, cond, subset in _SCORE_CELLS:
                k = cb.cond(cond)
                cols[lab] = None if k is None else self.boot.add(*_sums(cb, m, k, cb.mask(subset)))
            self._rob[model] = {"cols": cols, "benches": benches, "n_bench": n_bench, "chance": chance}

    # results --------------------------------------------------------------------------------
    def run(self, B: int, seed: int) -> None:
        self.B = B
        self.boot.run(B, seed)

    def accuracy_frame(self) -> pd.DataFrame:
        cb, rows = self.cube, []
        for key, j, mask, m, k in self._acc:
            lo, hi = _interval(self.boot.col(j))
            st = {s: int(cb.status[s][m, k][mask].sum()) for s in STATUSES}
            n_trials = int(cb.present[m, k][mask].sum())
            sel = cb.present[m, k][mask]
            chance = float(np.sum(sel.sum(axis=1) / cb.n_options[mask]) / max(n_trials, 1))
            rows.append({**key, "n_items": int(sel.any(axis=1).sum()), "n_trials": n_trials,
                         "n_scored": int(self.boot.den[j].sum()), "accuracy": self.boot.point(j),
                         "se": self.boot.se(j), "ci_low": lo, "ci_high": hi,
                         "refusal_rate": st["refusal"] / max(n_trials, 1),
                         "unparsed_rate": (st["unparsed"] + st["no_response"]) / max(n_trials, 1),
                         "parse_rate": (st["answer"] + st["refusal"]) / max(n_trials, 1), "chance": chance})
        return pd.DataFrame(rows)

    def pairs_frame(self) -> pd.DataFrame:
        rows = []
        for key, ja, jb, da in self._pairs:
            n_pairs = int(da.sum())
            if n_pairs == 0:
                rows.append({**key, "n_items": 0, "n_pairs": 0, "acc_base": np.nan, "acc_perturbed": np.nan,
                             "diff": np.nan, "sd": np.nan, "ci_low": np.nan, "ci_high": np.nan, "p": np.nan})
                continue
            a, b = self.boot.point(ja), self.boot.point(jb)
            d = b - a
            ca, cbb = self.boot.col(ja), self.boot.col(jb)
            draws = None if ca is None else cbb - ca
            lo, hi = _interval(draws)
            rows.append({**key, "n_items": int((da > 0).sum()), "n_pairs": n_pairs, "acc_base": a,
                         "acc_perturbed": b, "diff": d, "sd": _sd(draws), "ci_low": lo, "ci_high": hi,
                         "p": _shift_reflect_p(draws, d, self.B)})
        out = pd.DataFrame(rows)
        if not out.empty:
            out["q"] = np.nan
            for idx in out.groupby("model").groups.values():
                p = out.loc[idx, "p"].to_numpy(dtype=float)
                ok = ~np.isnan(p)
                if ok.any():
                    q = np.full(p.shape, np.nan)
                    q[ok] = stats.benjamini_hochberg(p[ok])
                    out.loc[idx, "q"] = q
        return out

    def robustness_inputs(self) -> dict[str, StressAccuracies]:
        out = {}
        for model, r in self._rob.items():
            def pt(lab: str, r: dict[str, Any] = r) -> float:
                j = r["cols"].get(lab)
                return 100.0 * self.boot.point(j) if j is not None else float("nan")

            out[model] = StressAccuracies(
                t1={b: (pt(f"t1_img:{b}"), pt(f"t1_txt:{b}"), r["n_bench"][b]) for b in r["benches"]},
                t2_txt_required=pt("txt_req"), t2_chance=r["chance"],
                t3_txt_orig=pt("txt_req"), t3_txt_reordered=pt("txt_reord"),
                t4_txt_base=pt("txt_req"), t4_txt_4r=pt("txt_4r"), t4_img_base=pt("img_req"),
                t4_img_4r=pt("img_4r"), t4_txt_unknown=pt("txt_unk"),
                t5_orig=pt("img_sub_orig"), t5_substituted=pt("img_sub"),
            )
        return out

    def robustness_frame(self, alpha: float = 0.05) -> pd.DataFrame:
        rows = []
        inputs = self.robustness_inputs()
        for model, r in self._rob.items():
            s = robustness_score(inputs[model])
            vals = s.as_dict()
            boot = None
            if self.boot.draws is not None:
                B = self.boot.draws.shape[0]

                def dr(lab: str, r: dict[str, Any] = r, B: int = B) -> np.ndarray:
                    j = r["cols"].get(lab)
                    return 100.0 * self.boot.draws[:, j] if j is not None else np.full(B, np.nan)

                benches = r["benches"]
                t1i = np.stack([dr(f"t1_img:{b}") for b in benches], axis=1) if benches else np.zeros((B, 0))
                t1t = np.stack([dr(f"t1_txt:{b}") for b in benches], axis=1) if benches else np.zeros((B, 0))
                boot = robustness_score_arrays(
                    t1i, t1t, np.array([r["n_bench"][b] for b in benches]), dr("txt_req"), r["chance"],
                    dr("txt_req"), dr("txt_reord"), dr("txt_req"), dr("txt_4r"), dr("img_req"), dr("img_4r"),
                    dr("txt_unk"), dr("img_sub_orig"), dr("img_sub"),
                )
            for comp in [*s.F, *s.R, "mean"]:
                lo = hi = float("nan")
                if boot is not None and not math.isnan(vals[comp]):
                    lo, hi = _interval(boot[comp], alpha)
                rows.append({"model": model, "component": comp, "value": vals[comp], "ci_low": lo, "ci_high": hi})
        return pd.DataFrame(rows)


def _prepared(scored: pd.DataFrame) -> pd.DataFrame:
    return scored if "correct" in scored.columns and "status" in scored.columns else score_stress(scored)


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
    """Each model's :class:`StressAccuracies` (percent) from the scored table."""
    plan = _Plan(build_cube(_prepared(scored)))
    plan.robustness()
    return plan.robustness_inputs()


def robustness_table(scored: pd.DataFrame, *, B: int = 10_000, seed: int = 0, alpha: float = 0.05
                     ) -> pd.DataFrame:
    """F1-F5, R1-R5 and the mean per model, with percentile intervals from the item bootstrap."""
    plan = _Plan(build_cube(_prepared(scored)))
    plan.robustness()
    plan.run(B, seed)
    return plan.robustness_frame(alpha)


def poisson_binomial_sf(k: int, probs: np.ndarray) -> float:
    """P(X >= k) for X a sum of independent Bernoulli(probs) (exact, dynamic programming)."""
    dist = np.zeros(len(probs) + 1)
    dist[0] = 1.0
    for i, p in enumerate(probs, 1):
        dist[1 : i + 1] = dist[1 : i + 1] * (1 - p) + dist[0:i] * p
        dist[0] *= 1 - p
    return float(min(1.0, dist[k:].sum()))


def chance_tests(scored: pd.DataFrame | None, conditions: Sequence[str] = ("no_image",), subset: str = "required",
                 *, cube: StressCube | None = None) -> pd.DataFrame:
    """Accuracy against chance (1/k), exact one-sided test on each item's first scorable repeat."""
    cb = cube if cube is not None else build_cube(_prepared(scored))
    mask = cb.mask(subset)
    rows = []
    for m, model in enumerate(cb.models):
        for cond in conditions:
            k = cb.cond(cond)
            if k is None:
                continue
            c = cb.correct[m, k][mask]
            ok = ~np.isnan(c)
            has = ok.any(axis=1)
            first = np.where(has, c[np.arange(len(c)), ok.argmax(axis=1)], np.nan)[has]
            probs = 1.0 / cb.n_options[mask][has]
            n, hits = int(first.size), int(np.nansum(first))
            if n == 0:
                p = float("nan")
            elif np.all(probs == probs[0]):
                p = stats.binomial_test(hits, n, float(probs[0]), alternative="greater")
            else:
                p = poisson_binomial_sf(hits, probs)
            rows.append({"model": model, "test": "T2", "condition": cond, "subset": subset, "n": n,
                         "correct": hits, "accuracy": hits / n if n else float("nan"),
                         "chance": float(probs.mean()) if n else float("nan"), "p": p})
    return pd.DataFrame(rows)


def distractor_curve(scored: pd.DataFrame, *, B: int = 10_000, seed: int = 0,
                     accuracy_required: pd.DataFrame | None = None) -> pd.DataFrame:
    """Accuracy at Base, UNK and 1R-4R for image+text and text-only, on the required items."""
    acc = accuracy_table(scored, B=B, seed=seed, subset="required") if accuracy_required is None \
        else accuracy_required
    rows = []
    for lvl, img_c, txt_c in _CURVE:
        for modality, c in (("image+text", img_c), ("text-only", txt_c)):
            for _, r in acc[acc["condition"] == c].iterrows():
                rows.append({"model": r["model"], "modality": modality, "level": lvl, "condition": c,
                             "accuracy": r["accuracy"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                             "n_items": r["n_items"]})
    return pd.DataFrame(rows)


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
        ok = ~np.isnan(p)
        q = np.full(p.shape, np.nan)
        if ok.any():
            q[ok] = stats.benjamini_hochberg(p[ok])
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

    def frames(self) -> dict[str, pd.DataFrame]:
        return {"stress_accuracy": self.accuracy, "stress_accuracy_by_benchmark": self.accuracy_by_benchmark,
                "stress_accuracy_required": self.accuracy_required, "stress_changes": self.changes,
                "stress_chance": self.chance, "stress_robustness": self.robustness, "stress_curve": self.curve,
                "stress_items": self.items}

    def summary(self) -> dict[str, Any]:
        rob: dict[str, dict[str, float]] = {}
        for _, r in self.robustness.iterrows():
            rob.setdefault(r["model"], {})[r["component"]] = None if math.isnan(r["value"]) else float(r["value"])
        return {"meta": self.meta, "robustness": rob}


def analyse_stress(tidy_or_scored: pd.DataFrame, *, B: int = 10_000, seed: int = 0) -> StressAnalysis:
    """Score (if needed) and run every stress analysis on one shared item bootstrap; BH over each model's family."""
    scored = _prepared(tidy_or_scored)
    cube = build_cube(scored)
    plans = {name: _Plan(cube) for name in ("acc", "accb", "accr")}
    main = plans["acc"]
    # share one _Boot across registrations so a single bootstrap pass serves every table
    for pl in plans.values():
        pl.boot = main.boot
    main.accuracy(False, "all")
    plans["accb"].accuracy(True, "all")
    plans["accr"].accuracy(False, "required")
    main.pairs()
    main.robustness()
    main.run(B, seed)
    for pl in plans.values():
        pl.B = B
    acc_req = plans["accr"].accuracy_frame()
    changes, chance = family_fdr(main.pairs_frame(), chance_tests(None, cube=cube))
    return StressAnalysis(
        accuracy=main.accuracy_frame(),
        accuracy_by_benchmark=plans["accb"].accuracy_frame(),
        accuracy_required=acc_req,
        changes=changes,
        chance=chance,
        robustness=main.robustness_frame(),
        curve=distractor_curve(scored, accuracy_required=acc_req),
        items=item_table(None, cube=cube),
        meta={"B": B, "seed": seed, "n_items": len(cube.items), "n_required": int(cube.required.sum()),
              "n_substitution": int(cube.substitution.sum()), "models": cube.models, "conditions": cube.conditions,
              "bootstrap": "item bootstrap (repeats stay with their item), numpy default_rng(seed), shared by "
                           "all tables; accuracy counts refusals as wrong, excludes unparsed answers"},
    )
