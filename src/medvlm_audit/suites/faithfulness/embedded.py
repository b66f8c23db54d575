"""The phantom VQA set of the embedded default (filled in below)."""

from __future__ import annotations

#: the phantom questions, keyed by kind:detail (texts as in the TAIX-Ray VQA templates)
PHANTOM_QUESTIONS: dict[str, str] = {
    "effusion_binary:right": "Is there a pleural effusion on the right? (yes or no)",
    "effusion_binary:left": "Is there a pleural effusion on the left? (yes or no)",
    "effusion_severity:right": "What is the severity of pleural effusion on the right? "
                               "(none, questionable, mild, moderate, severe)",
    "effusion_severity:left": "What is the severity of pleural effusion on the left? "
                              "(none, questionable, mild, moderate, severe)",
    "comparative:pleural_effusion": "Which side shows more severe pleural effusion? (right, left, same severity, none)",
    "comparative:pulmonary_opacities": "Which side shows more severe pulmonary opacities? "
                                       "(right, left, same severity, none)",
    "comparative:atelectasis": "Which side shows more severe atelectasis? (right, left, same severity, none)",
    "heart_binary:": "Does the chest X-ray show cardiomegaly? (yes or no)",
    "heart_size:": "What is the size of the heart? (normal, borderline, enlarged, massively enlarged)",
    "ett_binary:": "Is an endotracheal tube present in this image? (yes or no)",
    "ett_position:": "What is the position of the endotracheal tube? (not present, correctly positioned, too low, "
                     "too high)",
    "chest_tube_side:": "On which side is a chest tube present? (right, left, both, none)",
}

# ---------------------------------------------------------------------------------------------------------------
# The builder. Each item is one phantom study (medvlm_audit.phantom.render_study) drawn for its question, with
# the findings the question asks about set by hand (side, severity, zone), tubes drawn as bright double lines,
# and no finding that would confound the reading (an effusion study has no cardiomegaly, ...). An item is kept
# only when its answer is readable from the pixels by the documented features of
# medvlm_audit.suites.faithfulness.reference (image_answer), at baseline and, for comparative questions, under
# every visual cue of the run (box edges and heatmaps over each side); otherwise the study seed is redrawn.
# ---------------------------------------------------------------------------------------------------------------

from pathlib import Path
from typing import Any

import numpy as np

from medvlm_audit.suites.faithfulness.items import VQAItem, save_items, validate_items

#: tip position (fraction of the image height) of the drawn endotracheal tube per answer
ETT_TIPS: dict[str, tuple[float, float]] = {"too high": (0.09, 0.12), "correctly positioned": (0.20, 0.24),
                                            "too low": (0.32, 0.36)}


def draw_tube(px: np.ndarray, centre: float, v0: float, v1: float, value: int = 252) -> np.ndarray:
    """Two bright 1-px vertical lines at centre +- 0.01 (image width) from v0 to v1."""
    from medvlm_audit.suites.faithfulness.reference import TUBE_HALF_GAP

    out = px.copy()
    h, w = out.shape[:2]
    for c in (round((centre - TUBE_HALF_GAP) * w), round((centre + TUBE_HALF_GAP) * w)):
        out[int(v0 * h):int(v1 * h), c] = value
    return out


def _scenario(key: str, answer: str, rng: np.random.Generator) -> tuple[dict[str, bool], dict[str, Any], dict[str, Any]]:
    kind, _, detail = key.partition(":")
    f: dict[str, bool] = {}
    at: dict[str, Any] = {}
    dev: dict[str, Any] = {}
    sev3 = ("mild", "moderate", "severe")
    if kind == "effusion_binary":
        if answer == "yes":
            side = detail if rng.random() < 0.75 else "bilateral"
            f["pleural_effusion"] = True
            at["pleural_effusion"] = {"side": side, "severity": sev3[int(rng.integers(3))]}
        elif rng.random() < 0.5:
            other = "left" if detail == "right" else "right"
            f["pleural_effusion"] = True
            at["pleural_effusion"] = {"side": other, "severity": sev3[int(rng.integers(3))]}
    elif kind == "effusion_severity":
        if answer != "none":
            f["pleural_effusion"] = True
            at["pleural_effusion"] = {"side": detail, "severity": answer}
    elif kind == "comparative":
        finding = {"pleural_effusion": "pleural_effusion", "pulmonary_opacities": "lung_opacity",
                   "atelectasis": "atelectasis"}[detail]
        if answer != "none":
            side = "bilateral" if answer == "same severity" else answer
            f[finding] = True
            at[finding] = {"side": side, "severity": sev3[int(rng.integers(1, 3))],
                           "zone": "upper" if finding == "atelectasis" else ("upper", "mid")[int(rng.integers(2))]}
    elif kind in ("heart_binary", "heart_size"):
        sev = {"yes": ("moderate", "severe")[int(rng.integers(2))], "no": None, "normal": None,
               "borderline": "mild", "enlarged": "moderate", "massively enlarged": "severe"}[answer]
        if sev is not None:
            f["cardiomegaly"] = True
            at["cardiomegaly"] = {"severity": sev}
    elif kind in ("ett_binary", "ett_position"):
        pos = None if answer in ("no", "not present") else (
            answer if kind == "ett_position" else ("too high", "correctly positioned", "too low")[int(rng.integers(3))])
        if pos is not None:
            lo, hi = ETT_TIPS[pos]
            dev["ett_tip"] = float(rng.uniform(lo, hi))
    elif kind == "chest_tube_side":
        dev["chest_tubes"] = {"none": [], "right": ["right"], "left": ["left"], "both": ["right", "left"]}[answer]
    return f, at, dev


def render_item_image(findings: dict[str, bool], attributes: dict[str, Any], devices: dict[str, Any], *,
                      sex: str, age: float, seed: int, size: int) -> np.ndarray:
    from medvlm_audit.phantom import render_study
    from medvlm_audit.suites.faithfulness.reference import CHEST_TUBE_CENTRE, ETT_CENTRE

    px, _ = render_study(findings, sex=sex, age=age, view="PA", seed=seed, size=size, attributes=attributes)
    if "ett_tip" in devices:
        px = draw_tube(px, ETT_CENTRE, 0.0, devices["ett_tip"])
    for side in devices.get("chest_tubes", []):
        px = draw_tube(px, CHEST_TUBE_CENTRE[side], 0.45, 0.72)
    return px


def _readable(px: np.ndarray, question: str, answer: str, qtype: str) -> bool:
    from medvlm_audit.suites.faithfulness import overlays
    from medvlm_audit.suites.faithfulness.reference import features, image_answer, parse_question

    q = parse_question(f"Now consider this new case:\n{question}\n")
    views = [px]
    if qtype == "comparative":
        sides = overlays.side_regions(question)
        for regs in (sides["right"], sides["left"], sides["same severity"]):
            r = [overlays.REGIONS[k] for k in regs]
            views += [overlays.box_edges(overlays.to_rgb(px), r, 4), overlays.heatmap(px, r, 0.5)]
    return all(image_answer(q, features(v)) == (answer, True) for v in views)


def build_phantom_vqa(out_dir: str | Path, *, n_items: int = 48, seed: int = 42, size: int = 256,
                      max_tries: int = 40) -> list[VQAItem]:
    """Render the phantom VQA set into ``out_dir`` (``images/`` + ``items.jsonl``); deterministic in ``seed``.

    Questions cycle through :data:`PHANTOM_QUESTIONS`; answers cycle through each question's vocabulary
    (``questionable`` severities and ``borderline`` hearts are left out: the phantom draws no equivocal
    finding); each kept study is readable (see the block comment above).
    """
    from medvlm_audit.phantom.anatomy import atomic_write, encode_png
    from medvlm_audit.suites.faithfulness.vocab import normalise_type, vocabulary

    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, 1001])
    keys = list(PHANTOM_QUESTIONS)
    qtypes = {"effusion_binary": "binary", "effusion_severity": "ordinal", "comparative": "comparative",
              "heart_binary": "binary", "heart_size": "ordinal", "ett_binary": "binary", "ett_position": "spatial",
              "chest_tube_side": "spatial"}
    counters: dict[str, int] = {}
    starts = {k: int(rng.integers(8)) for k in keys}
    items: list[VQAItem] = []
    for i in range(n_items):
        key = keys[i % len(keys)]
        q = PHANTOM_QUESTIONS[key]
        qtype = normalise_type(qtypes[key.split(":")[0]])
        vocab = [a for a in vocabulary(qtype, q) if a not in ("questionable", "borderline")]
        if key.startswith("comparative:") and not key.endswith("pleural_effusion"):
            vocab = [a for a in vocab if a != "same severity"]  # one lesion per finding: no symmetric pair
        k = counters.get(key, 0)
        counters[key] = k + 1
        answer = vocab[(k + starts[key]) % len(vocab)]
        for _ in range(max_tries):
            study_seed = int(rng.integers(1, 2**31 - 1))
            sex = "M" if rng.random() < 0.5 else "F"
            age = float(rng.integers(35, 85))
            f, at, dev = _scenario(key, answer, rng)
            px = render_item_image(f, at, dev, sex=sex, age=age, seed=study_seed, size=size)
            if _readable(px, q, answer, qtype):
                break
        else:
            raise RuntimeError(f"phantom VQA: no readable study for {key!r} = {answer!r} in {max_tries} tries")
        item_id = f"phantom-vqa-{i:04d}"
        path = out / "images" / f"{item_id}.png"
        atomic_write(path, encode_png(px))
        items.append(VQAItem(item_id, q, qtype, answer, str(path),
                             {"source": "phantom", "key": key, "sex": sex, "age": int(age), "seed": study_seed,
                              "findings": {k2: dict(v) for k2, v in at.items()}, "devices": dev}))
    items = validate_items(items, str(out))
    save_items(items, out / "items.jsonl")
    return items
