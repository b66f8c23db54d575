"""Per-model outcome vectors of the grounding audit and their estimates (paper 000, Eqs. 6-9; DESIGN.md).

The tidy run table is turned once into *panels*: for one probe set x resolution x prompt variant, an
``(n_models, n_cases)`` int8 answer matrix per condition (1 = Yes, 0 = No, -1 = unparsed, -2 = no row) plus
per-case metadata arrays. Every metric is then a pair of boolean vectors over the cases -- who is eligible and
who scores 1 -- so a subset (a finding, a sex, a view) is one boolean AND, with no DataFrame filtering in the
hot path. Estimates come only from :mod:`medvlm_audit.stats`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import numpy as np
import pandas as pd

from medvlm_audit import stats
from medvlm_audit.errors import AuditError

__all__ = [
    "AGE_BINS",
    "DEGENERATE",
    "METRIC_NAMES",
    "NOT_ESTIMABLE",
    "AnalysisInputError",
    "Options",
    "Panel",
    "Vec",
    "build_panels",
    "model_metric_rows",
    "model_rate_rows",
    "model_vectors",
    "rate_row",
    "subgroup_masks",
]

NOT_ESTIMABLE = "not estimable (n = 0)"
DEGENERATE = "N/A (degenerate confidence)"
MISSING, UNPARSED = -2, -1
CONDITIONS = ("original", "swap", "target_mask", "irrelevant_mask", "no_image")
MASK_CONDITIONS = ("target_mask", "irrelevant_mask")
#: age strata of the subgroup analysis: the released code's [0, 50), [50, 70), [70, inf) bins.
AGE_BINS: tuple[tuple[str, float, float], ...] = (("<50", -math.inf, 50.0), ("50-70", 50.0, 70.0),
                                                   (">70", 70.0, math.inf))
METRIC_NAMES = ("accuracy", "sensitivity", "specificity", "parse_rate", "cgr", "uar", "is", "is_all_parsed", "gsp",
                "image_contingent", "no_image_accuracy", "auroc", "brier", "ece", "confidence_coverage",
                "conf_grounded_correct", "conf_ungrounded_correct", "conf_incorrect", "conf_ungrounded_correct_boxed")
REQUIRED_COLUMNS = ("probe_set", "model", "case_id", "label", "condition", "parsed")
OPTIONAL_COLUMNS: dict[str, Any] = {
    "modality": "multimodal", "run_id": None, "kind": None, "finding": None, "source": None, "patient_id": None,
    "sex": None, "view": None, "age": np.nan, "has_box": False, "ibox_overlaps": False, "resolution": 224,
    "prompt_variant": "default", "sample_index": 0, "confidence": np.nan, "case_order": np.nan,
}


class AnalysisInputError(AuditError, ValueError):
    """The tidy run table is malformed (the message names the row, model, case or column)."""


@dataclass(frozen=True)
class Options:
    """Resampling and definition choices shared by every estimate of one analysis."""

    B: int = 10_000
    seed: int = 0
    mode: Literal["exact-counts", "index"] = "exact-counts"
    is_denominator: Literal["correct", "all"] = "correct"
    cluster_by_patient: bool = False
    n_perm: int = 1_000
    #: threads of the resampling kernels (None: the CPU count, capped); results do not depend on it
    workers: int | None = None


@dataclass
class Panel:
    """Answers of every model on one probe set at one resolution and prompt variant, as arrays."""

    probe_set: str
    resolution: int
    prompt_variant: str
    case_ids: np.ndarray
    label: np.ndarray
    has_box: np.ndarray
    finding: np.ndarray
    source: np.ndarray
    sex: np.ndarray
    view: np.ndarray
    age: np.ndarray
    patient: np.ndarray
    ibox_overlaps: np.ndarray
    models: tuple[str, ...]
    modality: dict[str, str]
    answers: dict[str, np.ndarray]
    confidence: np.ndarray
    filled: dict[str, list[str]] = field(default_factory=dict)

    @property
    def n_cases(self) -> int:
        return int(self.case_ids.shape[0])

    def index(self, model: str) -> int:
        return self.models.index(model)

    def answer(self, cond: str, i: int) -> np.ndarray:
        """Answers of model ``i`` under ``cond`` (all -2 when the condition is absent)."""
        a = self.answers.get(cond)
        if a is None:
            return np.full(self.n_cases, MISSING, dtype=np.int8)
        return a[i]


@dataclass(frozen=True)
class Vec:
    """A binary metric over the cases of a panel: ``elig`` (who enters the denominator), ``val`` (who scores 1)."""

    elig: np.ndarray
    val: np.ndarray

    def take(self, sel: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(0/1 values, case positions) of the eligible cases, optionally within the subset ``sel``."""
        m = self.elig if sel is None else self.elig & sel
        pos = np.flatnonzero(m)
        return self.val[pos].astype(np.int8), pos


# ------------------------------------------------------------------------------------------------ panels


def _col(df: pd.DataFrame, name: str) -> np.ndarray:
    if name in df.columns:
        return df[name].to_numpy()
    return np.full(len(df), OPTIONAL_COLUMNS[name], dtype=object)


def _as_obj(a: np.ndarray) -> np.ndarray:
    """Object array with None for missing values (NaN, pd.NA)."""
    out = np.asarray(a, dtype=object).copy()
    miss = pd.isna(out)
    out[miss] = None
    return out


def _row_desc(df: pd.DataFrame, i: int) -> str:
    r = df.iloc[i]
    return (f"row {int(df.index[i])} (model {r['model']!r}, case {r['case_id']!r}, condition {r['condition']!r})")


def build_panels(tidy: pd.DataFrame, *, file_order: bool = False) -> tuple[dict[tuple[str, int, str], Panel], list[str]]:
    """Validate the tidy table and turn it into panels keyed by (probe_set, resolution, prompt_variant).

    Cases are sorted by ``case_id``; with ``file_order`` (index mode) they keep the probe set's own row order
    (``case_order``, e.g. the released manifest's MS-CXR, MIMIC, ReXErr order; else first appearance), the order
    the released code resamples them in.

    Returns the panels and a list of plain-language notes (repeats ignored, text-only answers reused).
    Raises AnalysisInputError naming the row, model, case or column on malformed input.
    """
    if not isinstance(tidy, pd.DataFrame):
        raise AnalysisInputError(f"expected a pandas DataFrame (the tidy run table), got {type(tidy).__name__}")
    missing = [c for c in REQUIRED_COLUMNS if c not in tidy.columns]
    if missing:
        raise AnalysisInputError(f"tidy table lacks required column(s) {missing}; has {list(tidy.columns)}")
    notes: list[str] = []
    df = tidy
    if len(df) == 0:
        return {}, ["the tidy table is empty"]
    for name in ("probe_set", "model", "case_id", "condition"):
        bad = pd.isna(df[name].to_numpy())
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise AnalysisInputError(f"column {name!r} is missing at row {int(df.index[i])}")
    if "sample_index" in df.columns:
        si = pd.to_numeric(df["sample_index"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        if (si > 0).any():
            notes.append(f"{int((si > 0).sum())} repeat rows (sample_index > 0) ignored: metrics use sample 0")
            df = df.loc[~(si > 0)]
    parsed = pd.to_numeric(df["parsed"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    bad = ~((parsed == 1.0) | (parsed == 0.0) | (parsed == -1.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AnalysisInputError(f"column 'parsed' must be 1, 0 or -1; got {df['parsed'].iloc[i]!r} at "
                                 f"{_row_desc(df, i)}")
    label = pd.to_numeric(df["label"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    bad = ~((label == 1.0) | (label == 0.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AnalysisInputError(f"column 'label' must be 1 or 0; got {df['label'].iloc[i]!r} at {_row_desc(df, i)}")
    conf = pd.to_numeric(pd.Series(_col(df, "confidence")), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    badc = np.isfinite(conf) & ((conf < 0) | (conf > 1))
    if badc.any():
        i = int(np.flatnonzero(badc)[0])
        raise AnalysisInputError(f"column 'confidence' must lie in [0, 1] or be NaN; got {conf[i]!r} at "
                                 f"{_row_desc(df, i)}")
    res = pd.to_numeric(pd.Series(_col(df, "resolution")), errors="coerce").fillna(224).to_numpy(dtype=np.int64)
    variant = pd.Series(_col(df, "prompt_variant")).fillna("default").astype(str).to_numpy(dtype=object)
    cond = df["condition"].astype(str).to_numpy(dtype=object)
    unknown = sorted(set(pd.unique(cond)) - set(CONDITIONS))
    if unknown:
        notes.append(f"conditions {unknown} are not part of the grounding audit and were ignored")

    model_codes, model_names = pd.factorize(df["model"].astype(str), sort=False)
    modality_col = pd.Series(_col(df, "modality")).fillna("multimodal").astype(str).to_numpy(dtype=object)
    modality: dict[str, str] = {}
    first_model_row = np.unique(model_codes, return_index=True)[1]
    for code, row in enumerate(first_model_row):
        modality[str(model_names[code])] = str(modality_col[row])
    incons = modality_col != np.array([modality[str(model_names[c])] for c in range(len(model_names))],
                                      dtype=object)[model_codes]
    if incons.any():
        i = int(np.flatnonzero(incons)[0])
        raise AnalysisInputError(f"model {df['model'].iloc[i]!r} has two modalities "
                                 f"({modality[str(df['model'].iloc[i])]!r} and {modality_col[i]!r}) at {_row_desc(df, i)}")

    ps_codes, ps_names = pd.factorize(df["probe_set"].astype(str), sort=False)
    panels: dict[tuple[str, int, str], Panel] = {}
    meta_cols = {c: _col(df, c) for c in ("finding", "source", "sex", "view", "patient_id")}
    age_all = pd.to_numeric(pd.Series(_col(df, "age")), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    box_all = pd.Series(_col(df, "has_box")).fillna(False).astype(bool).to_numpy()
    ovl_all = pd.Series(_col(df, "ibox_overlaps")).fillna(False).astype(bool).to_numpy()
    case_all = df["case_id"].astype(str).to_numpy(dtype=object)
    cond_code_map = {c: j for j, c in enumerate(CONDITIONS)}
    cond_codes = np.array([cond_code_map.get(c, -1) for c in pd.unique(cond)], dtype=np.int64)
    cond_lookup = dict(zip(pd.unique(cond), cond_codes))
    cond_idx = pd.Series(cond).map(cond_lookup).to_numpy(dtype=np.int64)

    for p, ps in enumerate(ps_names):
        rows = np.flatnonzero(ps_codes == p)
        if file_order:
            order = pd.to_numeric(pd.Series(_col(df, "case_order")), errors="coerce").to_numpy(dtype=float)[rows]
            if np.isfinite(order).all():
                rows = rows[np.argsort(order, kind="stable")]
        case_codes, case_names = pd.factorize(case_all[rows], sort=not file_order)
        n_cases = len(case_names)
        first = np.unique(case_codes, return_index=True)[1]
        fr = rows[first]
        lab = label[fr].astype(np.int8)
        clash = label[rows] != lab[case_codes]
        if clash.any():
            i = int(rows[np.flatnonzero(clash)[0]])
            raise AnalysisInputError(f"case {case_all[i]!r} of probe set {ps!r} has two labels "
                                     f"({int(lab[case_codes[np.flatnonzero(clash)[0]]])} and {int(label[i])}) at "
                                     f"{_row_desc(df, i)}")
        patient = _as_obj(meta_cols["patient_id"][fr])
        no_pat = np.array([v is None for v in patient], dtype=bool)
        patient[no_pat] = np.asarray(case_names, dtype=object)[no_pat]
        base: dict[str, Any] = {
            "case_ids": np.asarray(case_names, dtype=object), "label": lab, "has_box": box_all[fr],
            "finding": _as_obj(meta_cols["finding"][fr]), "source": _as_obj(meta_cols["source"][fr]),
            "sex": _as_obj(meta_cols["sex"][fr]), "view": _as_obj(meta_cols["view"][fr]), "age": age_all[fr],
            "patient": np.array([str(v) for v in patient], dtype=object), "ibox_overlaps": ovl_all[fr],
        }
        settings = pd.factorize(pd.Series(list(zip(res[rows].tolist(), variant[rows].tolist()))), sort=False)
        set_codes, set_names = settings
        for s, (r, v) in enumerate(set_names):
            srows = rows[set_codes == s]
            scase = case_codes[set_codes == s]
            smodels = model_codes[srows]
            present_models = np.unique(smodels)
            mpos = np.full(len(model_names), -1, dtype=np.int64)
            mpos[present_models] = np.arange(present_models.size)
            models = tuple(str(model_names[c]) for c in present_models)
            nm = len(models)
            scond = cond_idx[srows]
            # duplicate (model, case, condition) rows are an error: which answer would count?
            keyv = (mpos[smodels] * n_cases + scase) * len(CONDITIONS) + np.maximum(scond, 0)
            known = scond >= 0
            uniq, counts = np.unique(keyv[known], return_counts=True)
            if (counts > 1).any():
                dup = uniq[counts > 1][0]
                i = int(srows[known][np.flatnonzero(keyv[known] == dup)[1]])
                raise AnalysisInputError(f"duplicate answer for model {df['model'].iloc[i]!r}, case {case_all[i]!r}, "
                                         f"condition {cond[i]!r}, resolution {r}, prompt {v!r} at {_row_desc(df, i)}")
            answers: dict[str, np.ndarray] = {}
            confm = np.full((nm, n_cases), np.nan)
            for cname, cj in cond_code_map.items():
                m = scond == cj
                if not m.any():
                    continue
                arr = np.full((nm, n_cases), MISSING, dtype=np.int8)
                arr[mpos[smodels[m]], scase[m]] = parsed[srows[m]].astype(np.int8)
                answers[cname] = arr
                if cname == "original":
                    confm[mpos[smodels[m]], scase[m]] = conf[srows[m]]
            panel = Panel(probe_set=str(ps), resolution=int(r), prompt_variant=str(v), models=models,
                          modality={mm: modality[mm] for mm in models}, answers=answers, confidence=confm, **base)
            _fill_text_only(panel)
            panels[(str(ps), int(r), str(v))] = panel
    filled = sorted({(m, c) for pnl in panels.values() for m, cs in pnl.filled.items() for c in cs})
    if filled:
        by_model: dict[str, list[str]] = {}
        for m, c in filled:
            by_model.setdefault(m, []).append(c)
        notes.append("text-only models receive no image, so missing image-condition answers were taken from their "
                     "original answer: " + "; ".join(f"{m}: {', '.join(cs)}" for m, cs in by_model.items()))
    return panels, notes


def _fill_text_only(panel: Panel) -> None:
    """Text-only models never see the image: a missing swap / mask answer equals the original answer."""
    orig = panel.answers.get("original")
    if orig is None:
        return
    for i, m in enumerate(panel.models):
        if panel.modality[m] != "text_only":
            continue
        for cond in ("swap", "target_mask", "irrelevant_mask"):
            applies = orig[i] != MISSING
            if cond in MASK_CONDITIONS:
                applies &= panel.has_box
            arr = panel.answers.get(cond)
            gap = applies & (arr[i] == MISSING if arr is not None else True)
            if gap.any():
                if arr is None:
                    arr = np.full_like(orig, MISSING)
                    panel.answers[cond] = arr
                arr[i, gap] = orig[i, gap]
                panel.filled.setdefault(m, []).append(cond)


# ------------------------------------------------------------------------------------------------ vectors


def model_vectors(panel: Panel, i: int, is_denominator: Literal["correct", "all"] = "correct") -> dict[str, Vec]:
    """Eligibility and outcome vectors of every binary metric for model ``i`` of ``panel``.

    CGR (Eq. 6): flips under target_mask among correct-on-original boxed cases with a parsed target-mask answer.
    UAR (Eq. 7): unchanged under swap among correct-on-original cases with a parsed swap answer.
    IS: unchanged under irrelevant_mask among correct-on-original boxed cases with a parsed answer (default) or
    among all boxed cases parsed in both conditions (Eq. 8, ``is_denominator="all"``); ``is_all_parsed`` is
    always the Eq. 8 version.
    """
    if is_denominator not in ("correct", "all"):
        raise ValueError(f"is_denominator must be 'correct' or 'all', got {is_denominator!r}")
    y = panel.label
    box = panel.has_box
    a_o = panel.answer("original", i)
    a_s = panel.answer("swap", i)
    a_t = panel.answer("target_mask", i)
    a_i = panel.answer("irrelevant_mask", i)
    a_n = panel.answer("no_image", i)
    present = a_o != MISSING
    parsed = a_o >= 0
    correct = parsed & (a_o == y)
    p_s, p_t, p_i = a_s >= 0, (a_t >= 0) & box, (a_i >= 0) & box
    out = {
        "accuracy": Vec(parsed, correct),
        "sensitivity": Vec(parsed & (y == 1), a_o == 1),
        "specificity": Vec(parsed & (y == 0), a_o == 0),
        "parse_rate": Vec(present, parsed),
        "cgr": Vec(correct & p_t, a_t != a_o),
        "uar": Vec(correct & p_s, a_s == a_o),
        "is_all_parsed": Vec(parsed & p_i, a_i == a_o),
        "no_image_accuracy": Vec(a_n >= 0, a_n == y),
    }
    out["is"] = Vec(correct & p_i, a_i == a_o) if is_denominator == "correct" else out["is_all_parsed"]
    for cond in ("swap", "target_mask", "irrelevant_mask", "no_image"):
        a = panel.answer(cond, i)
        out[f"parse_rate:{cond}"] = Vec(a != MISSING, a >= 0)
    return out


def subgroup_masks(panel: Panel) -> dict[str, tuple[str, np.ndarray]]:
    """Subset name -> (contrast, case mask) for sex (M/F), view (PA/AP) and the three age strata."""
    out: dict[str, tuple[str, np.ndarray]] = {}
    for s in ("M", "F"):
        out[f"sex={s}"] = ("sex", panel.sex == s)
    for v in ("PA", "AP"):
        out[f"view={v}"] = ("view", panel.view == v)
    age = panel.age
    for name, lo, hi in AGE_BINS:
        out[f"age={name}"] = ("age", np.isfinite(age) & (age >= lo) & (age < hi))
    return out


# ------------------------------------------------------------------------------------------------ estimates


def _finite(x: float) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)



@lru_cache(maxsize=8192)
def _proportion_from_counts(k: int, n: int, B: int, seed: int) -> stats.Estimate:
    """stats.proportion in exact-counts mode without clusters, interval of ``stats.rate_interval``: its result
    depends on (k, n) only, so identical count pairs (common across subsets and ignores-image models) are
    estimated once."""
    x = np.zeros(n, dtype=np.int8)
    x[:k] = 1
    return stats.proportion(x, B=B, seed=seed, mode="exact-counts", interval="rate")


#: ``ci_method`` of a row: how its interval was made.
CI_WILSON, CI_BOOT, CI_PAIRED, CI_NONE = "wilson", "bootstrap-percentile", "paired-bootstrap-percentile", "none"
#: GSP where CGR or IS has few events: the Bonferroni combination of the two rates' Wilson intervals
CI_WILSON_BONF = "wilson-bonferroni"


def rate_row(values: np.ndarray, clusters: np.ndarray | None, opts: Options, *, label: str = "") -> dict[str, Any]:
    """Estimate of a 0/1 proportion in percent (point, SE in pp, 95% interval, n, k, method, note, ci_method).

    The interval is ``stats.rate_interval``'s for every proportion (overall, per source, finding, subgroup,
    resolution or prompt variant): Wilson where min(k, n - k) < 10, the percentile bootstrap elsewhere
    (BENCHMARKS.md, exact coverage grid). With patient clusters the bootstrap is the cluster bootstrap (Wilson,
    which ignores clustering, only where fewer than 10 events make the bootstrap degenerate). ``index`` mode keeps
    the released code's percentile bootstrap at every n (it reproduces the released intervals bit for bit).
    """
    k = int(values.sum()) if values.shape[0] else 0
    if clusters is None and opts.mode == "exact-counts":
        est = _proportion_from_counts(k, int(values.shape[0]), opts.B, opts.seed)
    else:
        est = stats.proportion(values, B=opts.B, seed=opts.seed, mode=opts.mode, clusters=clusters,
                               interval="bootstrap" if opts.mode == "index" else "rate")
    n = int(est.n)
    note = ""
    wilson = opts.mode != "index" and n > 0 and min(k, n - k) < stats.RATE_WILSON_EVENTS
    if n == 0:
        note = NOT_ESTIMABLE
    elif wilson:
        note = f"Wilson interval (min(k, n - k) = {min(k, n - k)} < {stats.RATE_WILSON_EVENTS})"
        if clusters is not None:
            note += "; it ignores the patient clustering"
    method = est.method if not label else f"{label}; {est.method}"
    ci_method = CI_NONE if n == 0 else CI_WILSON if wilson else CI_BOOT
    return {"point": 100.0 * est.point, "se": 100.0 * est.se, "ci_low": 100.0 * est.ci_low,
            "ci_high": 100.0 * est.ci_high, "n": n, "k": k if n else 0, "unit": "%",
            "method": method, "note": note, "ci_method": ci_method}


def _empty_row(unit: str, note: str, method: str = "") -> dict[str, Any]:
    return {"point": np.nan, "se": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n": 0, "k": 0, "unit": unit,
            "method": method, "note": note, "ci_method": CI_NONE}


def _reflect(row: dict[str, Any], method: str) -> dict[str, Any]:
    """100 - rate, with the interval reflected (the image-contingent fraction from UAR)."""
    out = dict(row)
    if row["n"]:
        out.update(point=100.0 - row["point"], ci_low=100.0 - row["ci_high"], ci_high=100.0 - row["ci_low"],
                   k=row["n"] - row["k"])
    out["method"] = method + "; " + row["method"] if row["method"] else method
    return out


def _clusters(panel: Panel, pos: np.ndarray, opts: Options) -> np.ndarray | None:
    return panel.patient[pos] if opts.cluster_by_patient else None


def _rate(vec: Vec, panel: Panel, opts: Options, sel: np.ndarray | None = None, label: str = "") -> dict[str, Any]:
    x, pos = vec.take(sel)
    return rate_row(x, _clusters(panel, pos, opts), opts, label=label)


def _subsets(values: Iterable[Any]) -> list[str]:
    return sorted({str(v) for v in values if v is not None})


def model_metric_rows(panel: Panel, i: int, opts: Options, vecs: dict[str, Vec] | None = None,
                      calib: dict[str, np.ndarray] | None = None) -> list[dict[str, Any]]:
    """All metric rows (schema of ``GroundingAnalysis.metrics``) of model ``i`` on a main panel; ``calib``: its
    entry of :func:`calibration_draws` when computed for several models at once."""
    vecs = vecs if vecs is not None else model_vectors(panel, i, opts.is_denominator)
    return model_rate_rows(panel, i, opts, vecs) + calibration_rows(panel, i, opts, vecs, calib)


def model_rate_rows(panel: Panel, i: int, opts: Options, vecs: dict[str, Vec] | None = None
                    ) -> list[dict[str, Any]]:
    """:func:`model_metric_rows` before its calibration rows (:func:`calibration_rows`): the rates overall and per
    source, finding and subgroup, and GSP; they need no calibration draws."""
    vecs = vecs if vecs is not None else model_vectors(panel, i, opts.is_denominator)
    model = panel.models[i]
    rows: list[dict[str, Any]] = []

    def add(metric: str, subset: str, row: dict[str, Any]) -> dict[str, Any]:
        rows.append({"probe_set": panel.probe_set, "model": model, "modality": panel.modality[model],
                     "metric": metric, "subset": subset, **row})
        return row

    is_label = ("IS over correct-on-original boxed cases (default denominator)" if opts.is_denominator == "correct"
                else "IS over all parsed boxed cases (Eq. 8)")
    for metric in ("accuracy", "sensitivity", "specificity", "parse_rate"):
        add(metric, "all", _rate(vecs[metric], panel, opts))
    for cond in ("swap", "target_mask", "irrelevant_mask"):
        if cond in panel.answers:
            add("parse_rate", f"condition={cond}", _rate(vecs[f"parse_rate:{cond}"], panel, opts))
    cgr = add("cgr", "all", _rate(vecs["cgr"], panel, opts))
    uar = add("uar", "all", _rate(vecs["uar"], panel, opts))
    is_ = add("is", "all", _rate(vecs["is"], panel, opts, label=is_label))
    add("is_all_parsed", "all", _rate(vecs["is_all_parsed"], panel, opts, label="IS over all parsed boxed cases (Eq. 8)"))
    add("gsp", "all", gsp_row(cgr, is_, vecs, panel, opts))
    add("image_contingent", "all", _reflect(uar, "100 - UAR"))
    if "no_image" in panel.answers:
        add("no_image_accuracy", "all", _rate(vecs["no_image_accuracy"], panel, opts))

    # per source
    sources = _subsets(panel.source)
    if len(sources) > 1:
        for s in sources:
            sel = panel.source == s
            add("accuracy", f"source={s}", _rate(vecs["accuracy"], panel, opts, sel))
            add("uar", f"source={s}", _rate(vecs["uar"], panel, opts, sel))
            if (panel.has_box & sel).any():
                add("cgr", f"source={s}", _rate(vecs["cgr"], panel, opts, sel))
    # per finding (stats.rate_interval, as for every rate: Wilson where min(k, n - k) < 10)
    for f in _subsets(panel.finding):
        sel = panel.finding == f
        if (panel.has_box & sel).any():
            add("cgr", f"finding={f}", _rate(vecs["cgr"], panel, opts, sel))
        add("accuracy", f"finding={f}", _rate(vecs["accuracy"], panel, opts, sel))
        add("uar", f"finding={f}", _rate(vecs["uar"], panel, opts, sel))
    # subgroups (descriptive rates; the tests are in comparisons)
    for name, (_, sel) in subgroup_masks(panel).items():
        if not sel.any():
            continue
        add("accuracy", name, _rate(vecs["accuracy"], panel, opts, sel))
        add("uar", name, _rate(vecs["uar"], panel, opts, sel))
        if (panel.has_box & sel).any():
            add("cgr", name, _rate(vecs["cgr"], panel, opts, sel))
    return rows


def gsp_row(cgr: dict[str, Any], is_: dict[str, Any], vecs: dict[str, Vec], panel: Panel,
            opts: Options) -> dict[str, Any]:
    """GSP = CGR - (100 - IS) in points (Eq. 9). Interval: cases entering CGR or IS are resampled together and, in
    each draw, CGR and IS are recomputed on their own denominators (DESIGN.md), so the point lies inside its
    interval; with ``cluster_by_patient`` whole patients are resampled."""
    if not cgr["n"] or not is_["n"]:
        which = "CGR" if not cgr["n"] else "IS"
        return _empty_row("pp", NOT_ESTIMABLE, f"GSP = CGR - (100 - IS); {which} has n = 0")
    point = cgr["point"] - (100.0 - is_["point"])
    vc, vi = vecs["cgr"], vecs["is"]
    pos = np.flatnonzero(vc.elig | vi.elig)
    num = np.stack([(vc.elig & vc.val)[pos], (vi.elig & vi.val)[pos]], axis=1).astype(np.float64)
    den = np.stack([vc.elig[pos], vi.elig[pos]], axis=1).astype(np.float64)
    if opts.cluster_by_patient:
        inverse = np.unique(panel.patient[pos], return_inverse=True)[1].reshape(-1)
        K = int(inverse.max()) + 1
        num = np.stack([np.bincount(inverse, weights=c, minlength=K) for c in num.T], axis=1)
        den = np.stack([np.bincount(inverse, weights=c, minlength=K) for c in den.T], axis=1)
        draws = stats.cluster_bootstrap_ratios(num, den, B=opts.B, seed=opts.seed)
        unit = f"{K} patient clusters"
    else:
        draws = stats.case_bootstrap_ratios(num, den, B=opts.B, seed=opts.seed, mode=opts.mode, workers=opts.workers)
        unit = f"{pos.size} cases"
    gsp_draws = 100.0 * (draws[:, 0] - (1.0 - draws[:, 1]))
    how = f"bootstrap ({unit}, {opts.mode}, B={opts.B}, seed={opts.seed})"
    est = stats.bootstrap_estimate(point, gsp_draws, int(pos.size), how=how)
    row = {"point": point, "se": est.se, "ci_low": est.ci_low, "ci_high": est.ci_high, "n": int(pos.size), "k": 0,
           "unit": "pp",
           "method": (f"GSP = CGR - (100 - IS); in each draw CGR (n = {cgr['n']}) and IS (n = {is_['n']}) are "
                      f"recomputed on their own denominators over the {pos.size} cases entering either; "
                      f"{est.method}"),
           "note": "", "ci_method": CI_BOOT}
    few = {name: min(int(r["k"]), int(r["n"]) - int(r["k"])) for name, r in (("CGR", cgr), ("IS", is_))}
    if opts.mode != "index" and min(few.values()) < stats.RATE_WILSON_EVENTS:
        row.update(gsp_few_events_interval(cgr, is_, few))
    return row


def gsp_few_events_interval(cgr: dict[str, Any], is_: dict[str, Any], few: dict[str, int]) -> dict[str, Any]:
    """GSP's interval where CGR or IS has fewer than 10 events on a side (where each rate prints Wilson's
    interval): the case bootstrap is degenerate there (0 flips on 6 cases and IS 6/6 gave [+0.0, +0.0] beside
    CGR's [0.0, 39.0]), so the interval is the Bonferroni combination of the two rates' 97.5% Wilson intervals,
    [CGR_lo - (100 - IS_lo), CGR_hi - (100 - IS_hi)]: both cover together with probability >= 95% (as far as
    Wilson's do), it contains the point and has nonzero width for n >= 1. Index mode keeps the released code's
    bootstrap. The SE is then not printed (the bootstrap SD of degenerate draws is 0).

    >>> r = gsp_few_events_interval({"k": 0, "n": 6}, {"k": 6, "n": 6}, {"CGR": 0, "IS": 0})
    >>> round(r["ci_low"], 1), round(r["ci_high"], 1), r["ci_method"]
    (-45.6, 45.6, 'wilson-bonferroni')
    """
    c_lo, c_hi = stats.wilson_interval(int(cgr["k"]), int(cgr["n"]), 0.025)
    i_lo, i_hi = stats.wilson_interval(int(is_["k"]), int(is_["n"]), 0.025)
    which = ", ".join(f"{k} min(k, n - k) = {v}" for k, v in few.items() if v < stats.RATE_WILSON_EVENTS)
    return {"ci_low": 100.0 * (c_lo - (1.0 - i_lo)), "ci_high": 100.0 * (c_hi - (1.0 - i_hi)), "se": math.nan,
            "ci_method": CI_WILSON_BONF,
            "note": (f"Bonferroni combination of CGR's and IS's 97.5% Wilson intervals ({which} < "
                     f"{stats.RATE_WILSON_EVENTS}: the case bootstrap is degenerate with so few events)")}


def _value_row(est: stats.Estimate, unit: str, note: str = "") -> dict[str, Any]:
    n = int(est.n)
    if n == 0:
        note = note or NOT_ESTIMABLE
    ci = CI_BOOT if math.isfinite(est.ci_low) and math.isfinite(est.ci_high) else CI_NONE
    return {"point": est.point, "se": est.se, "ci_low": est.ci_low, "ci_high": est.ci_high, "n": n, "k": 0,
            "unit": unit, "method": est.method, "note": note, "ci_method": ci}


#: mean confidence in the given answer by decision regime, over all parsed cases as in the paper's Table 3:
#: grounded-correct = correct and flips under the target mask; ungrounded-correct = every other correct case;
#: incorrect. ``conf_ungrounded_correct_boxed`` is the boxed-only variant (correct boxed cases whose answer
#: does not flip under the target mask), kept beside it and named so.
REGIMES = ("conf_grounded_correct", "conf_ungrounded_correct", "conf_incorrect", "conf_ungrounded_correct_boxed")
#: what each regime row's method says
REGIME_TEXT = {
    "conf_grounded_correct": "grounded-correct: correct and flips under the target mask",
    "conf_ungrounded_correct": "ungrounded-correct: every other correct case (paper Table 3: all parsed cases)",
    "conf_incorrect": "incorrect",
    "conf_ungrounded_correct_boxed": ("ungrounded-correct, boxed-only variant: correct boxed cases with a parsed "
                                      "target-mask answer that does not flip (not the paper's Table 3 split)"),
}


@dataclass(frozen=True)
class CalibrationInputs:
    """One model's cases with a parsed original answer and a defined P(yes): what every calibration metric uses."""

    pos: np.ndarray  # case positions in the panel
    p_yes: np.ndarray
    label: np.ndarray
    given: np.ndarray  # confidence in the given answer: P(yes) for a Yes, 1 - P(yes) for a No
    correct: np.ndarray
    regimes: dict[str, np.ndarray]  # regime -> membership over ``pos``


def calibration_inputs(panel: Panel, i: int, vecs: dict[str, Vec]) -> CalibrationInputs:
    """The calibration cases of model ``i`` (every case with a parsed original answer and a defined P(yes));
    grounded-correct needs a flip under the target mask, ungrounded-correct is every other correct case."""
    a_o = panel.answer("original", i)
    conf = panel.confidence[i]
    pos = np.flatnonzero((a_o >= 0) & np.isfinite(conf))
    p_yes = conf[pos]
    answer = a_o[pos]
    label = panel.label[pos]
    correct = (answer == label).astype(np.int8)
    cgr = vecs["cgr"]
    grounded = (cgr.elig & cgr.val.astype(bool))[pos]
    regimes = {"conf_grounded_correct": grounded, "conf_ungrounded_correct": (correct == 1) & ~grounded,
               "conf_incorrect": correct == 0,
               "conf_ungrounded_correct_boxed": (cgr.elig & ~cgr.val.astype(bool))[pos]}
    return CalibrationInputs(pos, p_yes, label, np.where(answer == 1, p_yes, 1.0 - p_yes), correct, regimes)


def _calibration_columns(ci: CalibrationInputs) -> tuple[list[np.ndarray], list[np.ndarray], dict[str, slice]]:
    """Numerator / denominator columns whose resampled ratios give the Brier score, the ECE bin terms and the
    regime means of one model, and the columns each metric owns."""
    ones = np.ones(ci.pos.size)
    nums: list[np.ndarray] = [(ci.p_yes - ci.label) ** 2]
    dens: list[np.ndarray] = [ones]
    where = {"brier": slice(0, 1)}
    terms = stats.ece_terms(ci.given, ci.correct)
    used = np.flatnonzero(np.any(terms != 0.0, axis=0))  # an all-zero bin adds |0| to every resample
    where["ece"] = slice(1, 1 + used.size)
    nums.extend(terms[:, used].T)
    dens.extend([ones] * used.size)
    for name in REGIMES:
        m = ci.regimes[name]
        if m.any():
            where[name] = slice(len(nums), len(nums) + 1)
            nums.append(ci.given * m)
            dens.append(m.astype(np.float64))
    return nums, dens, where


def calibration_draws(panel: Panel, models: Iterable[int], opts: Options,
                      vecs: dict[int, dict[str, Vec]]) -> dict[int, dict[str, np.ndarray]]:
    """Bootstrap draws of the AUROC, the Brier score, the ECE and the confidence by regime of several models.

    Models with the same calibration cases share one resampling of those cases (:func:`stats.case_bootstrap`
    over all their columns): each model's draws have the plain case-bootstrap distribution (its AUROC draws
    equal ``stats.auroc_interval`` on its own), and one set of per-case multiplicities serves every model, which
    keeps these intervals cheap. ``index`` mode resamples the ratios with the released code's index matrix and
    leaves the AUROC to ``stats.auroc_interval_released`` (the released code's AUROC and draws); ``cluster_by_patient`` resamples patients
    (:func:`stats.cluster_bootstrap_ratios`; the AUROC stays case-level). Returns model -> metric -> draws (B,).
    """
    inputs = {i: calibration_inputs(panel, i, vecs[i]) for i in models}
    groups: dict[bytes, list[int]] = {}
    for i, ci in inputs.items():
        if ci.pos.size:
            groups.setdefault(ci.pos.tobytes(), []).append(i)
    out: dict[int, dict[str, np.ndarray]] = {i: {} for i in inputs}
    for members in groups.values():
        nums: list[np.ndarray] = []
        dens: list[np.ndarray] = []
        owned: list[tuple[int, dict[str, slice]]] = []
        for i in members:
            num, den, where = _calibration_columns(inputs[i])
            off = len(nums)
            owned.append((i, {k: slice(s.start + off, s.stop + off) for k, s in where.items()}))
            nums.extend(num)
            dens.extend(den)
        N, D = np.stack(nums, axis=1), np.stack(dens, axis=1)
        pos = inputs[members[0]].pos
        if opts.cluster_by_patient:
            inverse = np.unique(panel.patient[pos], return_inverse=True)[1].reshape(-1)
            K = int(inverse.max()) + 1
            Nc = np.stack([np.bincount(inverse, weights=c, minlength=K) for c in N.T], axis=1)
            Dc = np.stack([np.bincount(inverse, weights=c, minlength=K) for c in D.T], axis=1)
            draws = stats.cluster_bootstrap_ratios(Nc, Dc, B=opts.B, seed=opts.seed)
        elif opts.mode == "index":
            draws = stats.case_bootstrap_ratios(N, D, B=opts.B, seed=opts.seed, mode="index")
        else:
            # AUROC columns: models whose P(yes) varies (a constant one is N/A) and whose cases hold both labels
            ranked = [i for i in members if np.ptp(inputs[i].p_yes) > 0 and 0 < inputs[i].label.sum() < pos.size]
            scores = np.stack([inputs[i].p_yes for i in ranked], axis=1) if ranked else None
            auc, draws = stats.case_bootstrap(pos.size, opts.B, opts.seed, scores=scores,
                                              labels=inputs[members[0]].label if ranked else None, num=N, den=D,
                                              workers=opts.workers)
            for j, i in enumerate(ranked):
                out[i]["auroc"] = auc[:, j]
        for i, where in owned:
            for metric, s in where.items():
                block = draws[:, s]
                out[i][metric] = np.abs(block).sum(axis=1) if metric == "ece" else block[:, 0]
    return out


def _boot_row(point: float, draws: np.ndarray | None, n: int, unit: str, method: str, opts: Options,
              note: str = "") -> dict[str, Any]:
    """A metric row from bootstrap draws over cases: se = bootstrap SD, percentile 95% interval."""
    clusters = "patient clusters, " if opts.cluster_by_patient else ""
    how = f"case bootstrap ({clusters}{opts.mode}, B={opts.B}, seed={opts.seed})"
    if draws is None:
        draws = np.full(1, np.nan)
    est = stats.bootstrap_estimate(point, draws, n, how=how)
    return {**_value_row(est, unit, note), "method": f"{method}; {est.method}"}


def calibration_rows(panel: Panel, i: int, opts: Options, vecs: dict[str, Vec],
                     calib: dict[str, np.ndarray] | None = None) -> list[dict[str, Any]]:
    """AUROC of P(yes) vs the label, Brier, ECE of the confidence in the given answer, coverage of defined
    confidences, and mean confidence (in the given answer) by decision regime, each with a bootstrap SE and
    interval over cases (``calib``: this model's :func:`calibration_draws`, computed here when absent)."""
    model = panel.models[i]
    a_o = panel.answer("original", i)
    conf = panel.confidence[i]
    parsed = a_o >= 0
    defined = parsed & np.isfinite(conf)
    rows: list[dict[str, Any]] = []

    def add(metric: str, row: dict[str, Any]) -> None:
        rows.append({"probe_set": panel.probe_set, "model": model, "modality": panel.modality[model],
                     "metric": metric, "subset": "all", **row})

    add("confidence_coverage", rate_row(defined[parsed].astype(np.int8),
                                        _clusters(panel, np.flatnonzero(parsed), opts), opts,
                                        label="share of parsed original answers with a defined P(yes)"))
    ci = calibration_inputs(panel, i, vecs)
    n = int(ci.pos.size)
    if n and calib is None:
        calib = calibration_draws(panel, [i], opts, {i: vecs})[i]
    calib = calib or {}
    p_yes = ci.p_yes
    constant = n > 0 and bool(np.all(p_yes == p_yes[0]))
    # the paper's N/A rule: more than 90% of confidences exactly 0 or 1 -> AUROC, Brier and ECE are all N/A
    binary = n > 0 and int(np.count_nonzero((p_yes == 0.0) | (p_yes == 1.0))) > 0.9 * n
    if n == 0:
        for m, unit in (("auroc", "prob"), ("brier", "prob"), ("ece", "prob")):
            add(m, _empty_row(unit, NOT_ESTIMABLE, "no parsed original answer with a defined confidence"))
    elif binary:
        why = (f"{int(np.count_nonzero((p_yes == 0.0) | (p_yes == 1.0)))} of {n} confidences are exactly 0 or 1 "
               f"(> 90%): no usable confidence")
        for m in ("auroc", "brier", "ece"):
            add(m, {**_empty_row("prob", DEGENERATE, why), "n": n})
    else:
        if constant:
            add("auroc", {**_empty_row("prob", DEGENERATE, "all confidences identical"), "n": n})
        elif "auroc" in calib:  # drawn with the model's other calibration metrics (stats.case_bootstrap)
            add("auroc", _boot_row(stats.auroc(p_yes, ci.label), calib["auroc"], n, "prob",
                                   "AUROC of P(yes) vs label (Mann-Whitney, ties 1/2)", opts))
        elif opts.mode == "index" and not opts.cluster_by_patient:  # the released code's AUROC and draws
            est = stats.auroc_interval_released(p_yes, ci.label, B=opts.B, seed=opts.seed)
            note = "" if math.isfinite(est.point) else f"not estimable (one label class among the n = {n} cases)"
            add("auroc", {**_value_row(est, "prob", note), "method": "AUROC of P(yes) vs label; " + est.method})
        else:
            est = stats.auroc_interval(p_yes, ci.label, B=opts.B, seed=opts.seed, mode=opts.mode,
                                       workers=opts.workers)
            note = "" if math.isfinite(est.point) else f"not estimable (one label class among the n = {n} cases)"
            if opts.cluster_by_patient and not note:
                note = "interval ignores patient clustering (cases resampled individually for the AUROC)"
            add("auroc", {**_value_row(est, "prob", note),
                          "method": "AUROC of P(yes) vs label (Mann-Whitney, ties 1/2); " + est.method
                          + ("; cases resampled individually (no clustered AUROC bootstrap)"
                             if opts.cluster_by_patient else "")})
        add("brier", _boot_row(stats.brier(p_yes, ci.label), calib.get("brier"), n, "prob",
                               "Brier score mean((P(yes) - label)^2)", opts, DEGENERATE if constant else ""))
        e = stats.ece(ci.given, ci.correct)
        ece_method = "ECE, 10 equal-width bins of the confidence in the given answer vs correctness"
        if e is None or constant:
            add("ece", {"point": np.nan if e is None else e, "se": np.nan, "ci_low": np.nan, "ci_high": np.nan,
                        "n": n, "k": 0, "unit": "prob", "method": ece_method + "; no interval",
                        "note": DEGENERATE, "ci_method": CI_NONE})
        else:
            add("ece", _boot_row(e, calib.get("ece"), n, "prob", ece_method, opts))
    for name in REGIMES:
        v = ci.given[ci.regimes[name]]
        if v.size == 0:
            add(name, _empty_row("prob", NOT_ESTIMABLE, "mean confidence in the given answer"))
            continue
        sd = float(np.std(v, ddof=1)) if v.size > 1 else float("nan")
        add(name, _boot_row(float(v.mean()), calib.get(name), int(v.size), "prob",
                            f"{REGIME_TEXT[name]}; mean confidence in the given answer (paper Table 3 reports mean "
                            "+/- SD; SD in note); "
                            "cases resampled from all of the model's calibration cases, the regime following its "
                            "case", opts,
                            f"sd = {sd:.3f}" if math.isfinite(sd) else "sd not estimable (n = 1)"))
    return rows
