"""Synthetic tidy run tables with known behaviour, for the grounding-analysis tests and benchmark.

Each synthetic model is described by exact rates (share of correct boxed answers flipped by the target
mask, share of correct answers flipped by the swap, ...). The generator flips exactly
``round(rate * n_eligible)`` answers, so the analysis must recover the designed metric values exactly
(when every answer parses) and each model lands in a known category. The output follows the tidy run
table schema produced by ``medvlm_audit.api.tidy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from medvlm_audit.findings import MS_CXR_FINDINGS

__all__ = [
    "TIDY_COLUMNS",
    "SyntheticDesign",
    "SyntheticModel",
    "always_yes",
    "ignores_image",
    "make_cases",
    "make_tidy",
    "paper_sized_models",
    "paper_sized_run",
    "tidy_from_answers",
    "unstable",
    "uses_image",
]

#: columns of the tidy run table, in order.
TIDY_COLUMNS: tuple[str, ...] = (
    "run_id", "probe_set", "model", "modality", "case_id", "kind", "finding", "label", "source",
    "patient_id", "study_id", "sex", "view", "split", "age", "has_box", "ibox_overlaps", "condition",
    "resolution", "prompt_variant", "sample_index", "key", "image_sha256", "answer_text", "parsed",
    "confidence", "correct", "latency_s", "error_kind", "error_message",
)

ConfidenceMode = Literal["informative", "constant", "binary", "none"]
IMAGE_CONDITIONS = ("original", "swap", "target_mask", "irrelevant_mask")


@dataclass(frozen=True)
class SyntheticModel:
    """Designed behaviour of one synthetic model (all rates are exact shares of the eligible cases).

    accuracy: share of cases answered correctly on the original image (ignored when ``always`` is set).
    always: 1 = answers Yes to everything, 0 = No to everything (an ignores-image model).
    cgr: share of correct-on-original boxed cases whose answer flips under the target mask.
    swap_flip: share of correct-on-original cases whose answer flips under the swap (100 - UAR).
    irrelevant_flip: share of boxed cases (correct and incorrect alike) flipped by the irrelevant mask.
    parse_rate: share of parsed answers in each condition (the unparsed ones are chosen at random).
    ap_cgr: CGR on AP-view boxed cases when given (a view effect); ``cgr`` then applies to PA cases.
    variant_parse_rate: parse rate per prompt variant of the prompt probe (default 1.0).
    """

    name: str
    modality: str = "multimodal"
    accuracy: float = 0.7
    always: int | None = None
    cgr: float = 0.0
    swap_flip: float = 0.0
    irrelevant_flip: float = 0.0
    parse_rate: float = 1.0
    confidence: ConfidenceMode = "informative"
    ap_cgr: float | None = None
    variant_parse_rate: dict[str, float] = field(default_factory=dict)


def uses_image(name: str, cgr: float = 0.3, swap_flip: float = 0.2, irrelevant_flip: float = 0.03,
               accuracy: float = 0.7, modality: str = "multimodal", **kw: object) -> SyntheticModel:
    """A model whose correct answers depend on the image: designed to land in ``uses_image``."""
    return SyntheticModel(name, modality, accuracy, None, cgr, swap_flip, irrelevant_flip, **kw)  # type: ignore[arg-type]


def ignores_image(name: str, accuracy: float = 0.65, modality: str = "text_only", **kw: object) -> SyntheticModel:
    """A model whose answers never change with the image (a text-only baseline or a prior reader)."""
    return SyntheticModel(name, modality, accuracy, None, 0.0, 0.0, 0.0, **kw)  # type: ignore[arg-type]


def always_yes(name: str, modality: str = "multimodal", **kw: object) -> SyntheticModel:
    """A degenerate always-positive classifier: ignores the image."""
    return SyntheticModel(name, modality, 0.0, 1, 0.0, 0.0, 0.0, **kw)  # type: ignore[arg-type]


def unstable(name: str, cgr: float = 0.4, irrelevant_flip: float = 0.45, swap_flip: float = 0.3,
             accuracy: float = 0.6, **kw: object) -> SyntheticModel:
    """A model that flips under any occlusion (IS below 70): designed to land in ``unstable``."""
    return SyntheticModel(name, "multimodal", accuracy, None, cgr, swap_flip, irrelevant_flip, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SyntheticDesign:
    """Shape of a synthetic probe set."""

    n_cases: int = 300
    n_boxed: int = 100
    probe_set: str = "synthetic"
    run_id: str = "synthetic-run"
    n_res512: int = 0  # boxed cases also run at 512 px
    n_prompt: int = 0  # cases of the prompt-variant probe (default + terse + radiologist)
    prompt_variants: tuple[str, ...] = ("terse", "radiologist")
    no_image: bool = False  # also emit a no_image condition for image models
    text_only_rows: Literal["all", "original_only"] = "all"
    seed: int = 42


def make_cases(design: SyntheticDesign) -> pd.DataFrame:
    """Case metadata: boxed cases (label 1, MS-CXR-like) first, then unboxed balanced cases."""
    rng = np.random.default_rng(design.seed)
    n, nb = design.n_cases, design.n_boxed
    if not 0 <= nb <= n:
        raise ValueError(f"n_boxed={nb} must lie in [0, n_cases={n}]")
    findings = np.array(MS_CXR_FINDINGS, dtype=object)
    has_box = np.arange(n) < nb
    finding = findings[np.arange(n) % len(findings)]
    label = np.where(has_box, 1, (np.arange(n) // len(findings)) % 2).astype(np.int64)
    n_rex = (n - nb) // 4
    source = np.where(has_box, "ms_cxr", "mimic_cxr").astype(object)
    source[n - n_rex:] = "rexerr"
    kind = np.where(source == "rexerr", "report_error", "finding_presence").astype(object)
    sex = np.where(rng.random(n) < 0.55, "M", "F").astype(object)
    view = np.where(rng.random(n) < 0.5, "PA", "AP").astype(object)
    age = np.round(rng.uniform(20, 95, n), 0)
    age[rng.random(n) < 0.02] = np.nan
    patient = rng.integers(0, max(1, int(n / 1.3)), n)
    prefix = design.probe_set
    return pd.DataFrame({
        "case_id": [f"{prefix}-{i:05d}" for i in range(n)],
        "kind": kind,
        "finding": finding,
        "label": label,
        "source": source,
        "patient_id": [f"p{p:05d}" for p in patient],
        "study_id": [f"s{i:06d}" for i in range(n)],
        "sex": sex,
        "view": view,
        "split": "test",
        "age": age,
        "has_box": has_box,
        "ibox_overlaps": has_box & (rng.random(n) < 0.03),
    })


def _choose(rng: np.random.Generator, eligible: np.ndarray, rate: float) -> np.ndarray:
    """Boolean mask selecting exactly round(rate * |eligible|) of the eligible positions."""
    idx = np.flatnonzero(eligible)
    k = round(rate * idx.size)
    out = np.zeros(eligible.size, dtype=bool)
    if k:
        out[rng.choice(idx, size=k, replace=False)] = True
    return out


def _simulate(model: SyntheticModel, cases: pd.DataFrame, rng: np.random.Generator,
              parse_rate: float) -> dict[str, np.ndarray]:
    """Answers (1/0/-1; -2 = not run) per image condition for one model on the given cases."""
    label = cases["label"].to_numpy()
    box = cases["has_box"].to_numpy(bool)
    ap = cases["view"].to_numpy() == "AP"
    n = label.size
    if model.always is not None:
        orig = np.full(n, model.always, dtype=np.int64)
    else:
        correct = _choose(rng, np.ones(n, bool), model.accuracy)
        orig = np.where(correct, label, 1 - label)
    correct = orig == label
    out = {"original": orig.copy()}
    flip_sw = _choose(rng, correct, model.swap_flip) | _choose(rng, ~correct, model.swap_flip)
    out["swap"] = np.where(flip_sw, 1 - orig, orig)
    if model.ap_cgr is None:
        flip_tm = _choose(rng, correct & box, model.cgr)
    else:
        flip_tm = _choose(rng, correct & box & ~ap, model.cgr) | _choose(rng, correct & box & ap, model.ap_cgr)
    flip_tm |= _choose(rng, ~correct & box, model.cgr)
    out["target_mask"] = np.where(box, np.where(flip_tm, 1 - orig, orig), -2)
    flip_irr = _choose(rng, correct & box, model.irrelevant_flip) | _choose(rng, ~correct & box, model.irrelevant_flip)
    out["irrelevant_mask"] = np.where(box, np.where(flip_irr, 1 - orig, orig), -2)
    if parse_rate < 1.0:
        for a in out.values():
            lost = _choose(rng, a != -2, 1.0 - parse_rate)
            a[lost] = -1
    return out


def _confidence(mode: ConfidenceMode, parsed: np.ndarray, correct: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """First-token P(yes) for each answer under the given confidence mode (NaN when unparsed)."""
    n = parsed.size
    if mode == "none":
        return np.full(n, np.nan)
    if mode == "constant":
        p = np.full(n, 0.5)
    elif mode == "binary":
        p = (parsed == 1).astype(float)
    else:
        given = np.where(correct, rng.uniform(0.6, 0.99, n), rng.uniform(0.5, 0.8, n))
        p = np.where(parsed == 1, given, 1.0 - given)
    return np.where(parsed >= 0, p, np.nan)


def _rows(cases: pd.DataFrame, design: SyntheticDesign, model: SyntheticModel, cond: str, answers: np.ndarray,
          conf: np.ndarray, resolution: int, variant: str) -> dict[str, np.ndarray]:
    keep = answers != -2
    c = cases.loc[keep]
    a = answers[keep]
    m = int(keep.sum())
    label = c["label"].to_numpy()
    text = np.where(a == 1, "Yes", np.where(a == 0, "No", "I cannot tell from this image.")).astype(object)
    correct = np.where(a >= 0, (a == label).astype(float), np.nan)
    case_ids = c["case_id"].to_numpy(object)
    key = np.array([f"{model.name}|{cond}|{resolution}|{variant}|{cid}" for cid in case_ids], dtype=object)
    cols: dict[str, np.ndarray] = {col: c[col].to_numpy() for col in (
        "case_id", "kind", "finding", "label", "source", "patient_id", "study_id", "sex", "view", "split", "age",
        "has_box", "ibox_overlaps")}
    cols.update({
        "run_id": np.full(m, design.run_id, dtype=object),
        "probe_set": np.full(m, design.probe_set, dtype=object),
        "model": np.full(m, model.name, dtype=object),
        "modality": np.full(m, model.modality, dtype=object),
        "condition": np.full(m, cond, dtype=object),
        "resolution": np.full(m, resolution, dtype=np.int64),
        "prompt_variant": np.full(m, variant, dtype=object),
        "sample_index": np.zeros(m, dtype=np.int64),
        "key": key,
        "image_sha256": np.full(m, None, dtype=object) if cond == "no_image" else key,
        "answer_text": text,
        "parsed": a.astype(np.int64),
        "confidence": conf[keep],
        "correct": correct,
        "latency_s": np.full(m, 0.01),
        "error_kind": np.full(m, None, dtype=object),
        "error_message": np.full(m, None, dtype=object),
    })
    return cols


def make_tidy(models: Sequence[SyntheticModel], design: SyntheticDesign = SyntheticDesign(),
              cases: pd.DataFrame | None = None) -> pd.DataFrame:
    """A tidy run table for the given synthetic models on one synthetic probe set (seeded, deterministic)."""
    cases = make_cases(design) if cases is None else cases
    chunks: list[dict[str, np.ndarray]] = []
    box_idx = np.flatnonzero(cases["has_box"].to_numpy(bool))
    res_cases = cases.iloc[box_idx[: design.n_res512]].reset_index(drop=True)
    prompt_cases = cases.iloc[: 0].copy()
    if design.n_prompt:
        # a finding- and label-balanced sub-sample of the unboxed finding-presence cases
        pool = cases[(~cases["has_box"]) & (cases["kind"] == "finding_presence")]
        order = pool.groupby(["finding", "label"]).cumcount()
        prompt_cases = pool.assign(_o=order.to_numpy()).sort_values("_o", kind="stable").head(design.n_prompt)
        prompt_cases = prompt_cases.drop(columns="_o")
        prompt_cases = prompt_cases.reset_index(drop=True)
    for j, model in enumerate(models):
        rng = np.random.default_rng([design.seed, j])
        runs: list[tuple[pd.DataFrame, int, str, float]] = [(cases, 224, "default", model.parse_rate)]
        if len(res_cases):
            runs.append((res_cases, 512, "default", model.parse_rate))
        if len(prompt_cases):
            for v in design.prompt_variants:
                runs.append((prompt_cases, 224, v, model.variant_parse_rate.get(v, 1.0)))
        for cs, res, variant, pr in runs:
            answers = _simulate(model, cs, rng, pr)
            conds = list(IMAGE_CONDITIONS)
            if variant != "default":
                conds = ["original", "swap"]
            if model.modality == "text_only":
                # the model never sees the image: every image condition repeats the original answer
                for cond in ("swap", "target_mask", "irrelevant_mask"):
                    answers[cond] = np.where(answers[cond] == -2, -2, answers["original"])
                if design.text_only_rows == "original_only":
                    conds = ["original"]
            elif design.no_image and variant == "default":
                # a no-image answer from a finding prior: Yes for half of the findings
                fid = pd.factorize(cs["finding"].fillna("none"))[0]
                answers["no_image"] = (fid % 2 == 0).astype(np.int64)
                conds.append("no_image")
            label = cs["label"].to_numpy()
            for cond in conds:
                a = answers[cond]
                conf = _confidence(model.confidence, a, a == label, rng)
                chunks.append(_rows(cs, design, model, cond, a, conf, res, variant))
    data = {col: np.concatenate([ch[col] for ch in chunks]) for col in TIDY_COLUMNS}
    return pd.DataFrame(data, columns=list(TIDY_COLUMNS))


def tidy_from_answers(answers: dict[str, dict[str, Sequence[int]]], labels: Sequence[int],
                      has_box: Sequence[bool] | None = None, *, modality: dict[str, str] | None = None,
                      confidence: dict[str, Sequence[float]] | None = None, probe_set: str = "tiny",
                      meta: dict[str, Sequence[object]] | None = None) -> pd.DataFrame:
    """A tidy table from explicit answers: ``answers[model][condition]`` lists one parsed value per case
    (1/0/-1, or -2 for "no row"). Used for hand-computed tests on a handful of cases."""
    n = len(labels)
    has_box = [True] * n if has_box is None else list(has_box)
    meta = meta or {}
    cases = pd.DataFrame({
        "case_id": [f"c{i}" for i in range(n)],
        "kind": "finding_presence",
        "finding": list(meta.get("finding", ["cardiomegaly"] * n)),
        "label": np.asarray(labels, dtype=np.int64),
        "source": list(meta.get("source", ["ms_cxr" if b else "mimic_cxr" for b in has_box])),
        "patient_id": list(meta.get("patient_id", [f"p{i}" for i in range(n)])),
        "study_id": [f"s{i}" for i in range(n)],
        "sex": list(meta.get("sex", ["M"] * n)),
        "view": list(meta.get("view", ["PA"] * n)),
        "split": "test",
        "age": np.asarray(meta.get("age", [60.0] * n), dtype=float),
        "has_box": np.asarray(has_box, dtype=bool),
        "ibox_overlaps": False,
    })
    design = SyntheticDesign(n_cases=n, n_boxed=0, probe_set=probe_set, run_id="tiny-run")
    chunks = []
    rng = np.random.default_rng(0)
    modality = modality or {}
    for name, conds in answers.items():
        model = SyntheticModel(name, modality.get(name, "multimodal"))
        for cond, values in conds.items():
            a = np.asarray(values, dtype=np.int64)
            if a.size != n:
                raise ValueError(f"model {name!r} condition {cond!r}: {a.size} answers for {n} cases")
            if confidence and name in confidence and cond == "original":
                conf = np.where(a >= 0, np.asarray(confidence[name], dtype=float), np.nan)
            else:
                conf = _confidence("informative", a, a == cases["label"].to_numpy(), rng)
            chunks.append(_rows(cases, design, model, cond, a, conf, 224, "default"))
    data = {col: np.concatenate([ch[col] for ch in chunks]) for col in TIDY_COLUMNS}
    return pd.DataFrame(data, columns=list(TIDY_COLUMNS))


def paper_sized_models() -> list[SyntheticModel]:
    """Nine models shaped like the paper's cohort: five image users (one vision-only), one unstable,
    an always-yes multimodal model and two text-only baselines."""
    return [
        uses_image("gemma-like", cgr=0.33, swap_flip=0.20, irrelevant_flip=0.04, accuracy=0.60, ap_cgr=0.25),
        uses_image("gpt-like", cgr=0.25, swap_flip=0.24, irrelevant_flip=0.06, accuracy=0.62),
        uses_image("qwen-like", cgr=0.18, swap_flip=0.21, irrelevant_flip=0.05, accuracy=0.58,
                   variant_parse_rate={"terse": 0.9}),
        uses_image("medgemma-like", cgr=0.32, swap_flip=0.23, irrelevant_flip=0.08, accuracy=0.55,
                   variant_parse_rate={"terse": 0.4}),
        uses_image("raddino-like", cgr=0.064, swap_flip=0.18, irrelevant_flip=0.005, accuracy=0.63,
                   modality="vision_only"),
        unstable("mistral-like", cgr=0.40, irrelevant_flip=0.44, swap_flip=0.25, accuracy=0.57),
        always_yes("llava-like", variant_parse_rate={"terse": 0.01}),
        ignores_image("text-27b", accuracy=0.60, modality="text_only", variant_parse_rate={"terse": 0.33}),
        ignores_image("text-7b", accuracy=0.52, modality="text_only", confidence="binary"),
    ]


def paper_sized_run(seed: int = 42, n_cases: int = 2575, n_boxed: int = 700, n_res512: int = 99,
                    n_prompt: int = 100, second_probe_set: int = 0) -> pd.DataFrame:
    """A paper-sized synthetic run (9 models x 2,575 cases; masks on the boxed cases; the resolution and
    prompt probes), optionally with a second, box-free probe set of ``second_probe_set`` cases."""
    models = paper_sized_models()
    design = SyntheticDesign(n_cases=n_cases, n_boxed=n_boxed, probe_set="mimic", run_id="paper-sized",
                             n_res512=n_res512, n_prompt=n_prompt, seed=seed)
    tidy = make_tidy(models, design)
    if second_probe_set:
        d2 = SyntheticDesign(n_cases=second_probe_set, n_boxed=0, probe_set="chexpert", run_id="paper-sized",
                             seed=seed + 1)
        tidy = pd.concat([tidy, make_tidy(models, d2)], ignore_index=True)
    return tidy
