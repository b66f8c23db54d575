"""The phantom MCQ set of the embedded default: diagnosis questions over phantom chest radiographs.

Each item is a short vignette (age, sex, a presenting complaint) asking for the diagnosis shown on a
phantom radiograph rendered with :func:`medvlm_audit.phantom.render_study`, with five options (the gold,
drawable distractors and distractors the phantom never draws). Shortcuts are built in on purpose, so the
audit has something to find:

* text cues: a share ``p_cue`` of vignettes name a complaint typical of the diagnosis (``needs_image`` is
  False for them); the rest give only age and sex, which still correlate with the diagnosis (young
  patients have pneumothorax, old ones cardiomegaly or edema) - a prior, not a cue: ``needs_image`` True;
* position: the gold is option A with probability ``p_gold_first`` (uniform over B-E otherwise). The
  default 0.7 makes the shortcut decisive: an always-A answerer scores about 0.7 on the original order and
  about 1/k once options are reordered, a drop the paired test resolves on the ~70 required items;
* substitution: ``n_substitutions`` items get a second study of the same patient that shows one of the
  item's drawable distractors instead (``substitute_image`` / ``substitute_answer``).
Everything is a deterministic function of ``seed``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from medvlm_audit.suites.stress.items import ItemSet, MCQItem, save_items, validate_items

#: the findings the MCQ set asks about (visually distinct on the phantom) and their option texts
MCQ_FINDINGS: dict[str, str] = {
    "cardiomegaly": "Cardiomegaly",
    "pleural_effusion": "Pleural effusion",
    "pneumothorax": "Pneumothorax",
    "consolidation": "Consolidation",
    "edema": "Pulmonary edema",
    "atelectasis": "Atelectasis",
    "nodule": "Lung nodule",
}
#: distractors the phantom never draws
EXTRA_DISTRACTORS: tuple[str, ...] = (
    "Pulmonary embolism", "Sarcoidosis", "Emphysema", "Hiatal hernia", "Rib fracture", "Aortic dissection",
    "Tuberculosis", "Lung abscess", "Interstitial lung disease", "Mesothelioma", "Pericardial effusion",
    "Bronchiectasis",
)
#: complaints typical of each diagnosis (the text cue)
CUES: dict[str, tuple[str, ...]] = {
    "cardiomegaly": ("exertional breathlessness and swollen ankles", "palpitations and ankle oedema"),
    "pleural_effusion": ("pleuritic chest pain and dullness to percussion at the right base",
                         "breathlessness and a stony dull lung base"),
    "pneumothorax": ("sudden sharp chest pain and breathlessness after a coughing fit",
                     "abrupt one-sided chest pain while playing basketball"),
    "consolidation": ("fever, rigors and a productive cough", "three days of fever and purulent sputum"),
    "edema": ("orthopnoea and pink frothy sputum", "paroxysmal nocturnal dyspnoea and crackles at both bases"),
    "atelectasis": ("shallow breathing two days after abdominal surgery",
                    "reduced breath sounds after a long operation"),
    "nodule": ("a long smoking history and weight loss", "haemoptysis and a forty pack-year smoking history"),
}
#: complaints that point nowhere
VAGUE: tuple[str, ...] = ("shortness of breath", "a cough", "chest discomfort", "fatigue", "a vague malaise")
#: age (mean, sd) by diagnosis: the demographic prior
AGE: dict[str, tuple[float, float]] = {
    "cardiomegaly": (74, 7), "pleural_effusion": (68, 10), "pneumothorax": (29, 7), "consolidation": (55, 15),
    "edema": (76, 7), "atelectasis": (58, 10), "nodule": (63, 8),
}


def _question(age: int, sex: str, complaint: str) -> str:
    who = "man" if sex == "M" else "woman"
    return (f"A {age}-year-old {who} presents with {complaint}. A frontal chest radiograph is shown. "
            f"What is the most likely diagnosis?")


def _save_png(pixels: np.ndarray, path: Path) -> None:
    """The phantom's one PNG encoder, written by the one atomic writer."""
    from medvlm_audit.atomic import write_bytes_atomic
    from medvlm_audit.phantom.anatomy import encode_png

    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, encode_png(pixels))


def build_phantom_mcq(
    out_dir: str | Path,
    *,
    n_items: int = 120,
    seed: int = 42,
    size: int = 256,
    p_cue: float = 0.4,
    p_gold_first: float = 0.7,
    n_substitutions: int = 40,
    n_options: int = 5,
) -> ItemSet:
    """Render the phantom MCQ set into ``out_dir`` (``images/`` + ``items.jsonl``) and return it validated."""
    from medvlm_audit.phantom import render_study

    if not 2 <= n_options <= 1 + len(MCQ_FINDINGS) - 1 + len(EXTRA_DISTRACTORS):
        raise ValueError(f"n_options must be between 2 and {len(MCQ_FINDINGS) + len(EXTRA_DISTRACTORS)}")
    out = Path(out_dir)
    rng = np.random.default_rng([seed, 3003])
    findings = list(MCQ_FINDINGS)
    sub_every = max(1, n_items // max(1, n_substitutions)) if n_substitutions else 0
    items: list[MCQItem] = []
    n_sub = 0
    for i in range(n_items):
        f = findings[i % len(findings)] if i < len(findings) else findings[int(rng.integers(len(findings)))]
        sex = "M" if rng.random() < 0.5 else "F"
        mu, sd = AGE[f]
        age = int(np.clip(round(rng.normal(mu, sd)), 18, 95))
        view = "PA" if rng.random() < 0.7 else "AP"
        cue = bool(rng.random() < p_cue)
        complaint = CUES[f][int(rng.integers(2))] if cue else VAGUE[int(rng.integers(len(VAGUE)))]
        # distractors: at least two the phantom can draw, the rest drawn from the whole vocabulary
        drawable = [g for g in findings if g != f]
        rng.shuffle(drawable)
        n_d = n_options - 1
        n_draw = min(len(drawable), max(2, int(rng.integers(2, n_d + 1))) if n_d >= 2 else n_d)
        d_find = drawable[:n_draw]
        extras = list(EXTRA_DISTRACTORS)
        rng.shuffle(extras)
        distractors = [MCQ_FINDINGS[g] for g in d_find] + extras[: n_d - n_draw]
        rng.shuffle(distractors)
        gold_pos = 0 if rng.random() < p_gold_first else int(rng.integers(1, n_options))
        options = distractors[:gold_pos] + [MCQ_FINDINGS[f]] + distractors[gold_pos:]
        item_id = f"phantom-mcq-{i:04d}"
        study_seed = int(rng.integers(1, 2**31 - 1))
        px, _ = render_study({f: True}, sex=sex, age=float(age), view=view, seed=study_seed, size=size)
        img = out / "images" / f"{item_id}.png"
        _save_png(px, img)
        sub_img = sub_ans = None
        if sub_every and n_sub < n_substitutions and i % sub_every == 0:
            g = d_find[int(rng.integers(len(d_find)))]
            spx, _ = render_study({g: True}, sex=sex, age=float(age), view=view, seed=study_seed + 1,
                                  patient_seed=study_seed, size=size)
            sub_img = out / "images" / f"{item_id}_sub.png"
            _save_png(spx, sub_img)
            sub_ans = options.index(MCQ_FINDINGS[g])
            n_sub += 1
        items.append(
            MCQItem(
                item_id=item_id,
                question=_question(age, sex, complaint),
                options=tuple(options),
                answer=gold_pos,
                images=(str(img),),
                needs_image=not cue,
                substitute_image=None if sub_img is None else str(sub_img),
                substitute_answer=sub_ans,
                benchmark="phantom",
                meta={"finding": f, "sex": sex, "age": age, "view": view, "image_mode": "L",
                      "substitute_finding": None if sub_img is None else g},
            )
        )
    checked = validate_items(items)
    save_items(checked.items, out / "items.jsonl")
    checked.source = str(out / "items.jsonl")
    return checked
