"""Reference MCQ answerers with known shortcuts, computing only from ModelInput pixels and prompt text.

* :class:`FirstOptionAnswerer` always picks option A (pure position bias; ignores the image).
* :class:`TextPriorAnswerer` scores each option by a small clinical association table against the
  question's words and the patient's age (a text prior; ignores the image; never picks 'Unknown').
* :class:`PhantomImageReader` reads the phantom radiograph with a ridge classifier trained on phantom
  renders (seeds disjoint from the probe sets) and picks the option naming the finding it sees; it
  declines when no image is given.
:func:`ask_plan` drives any models over a stress plan without the runner (tests, benchmarks).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
from PIL import Image

from medvlm_audit.images import SourceCache
from medvlm_audit.models.base import Decoding, ImageData, LocalModel, Model, ModelInput, Response
from medvlm_audit.suites.base import Plan, Trial
from medvlm_audit.suites.stress.items import LETTERS
from medvlm_audit.suites.stress.prompts import options_from_prompt

REFUSAL_TEXT = "I cannot determine the answer without the image."


def _answer(options: Sequence[str], i: int) -> str:
    return f"<answer>{LETTERS[i]}. {options[i]}</answer>"


class FirstOptionAnswerer(LocalModel):
    """Always answers the first option shown: accuracy tracks where the gold happens to sit."""

    name = "first-option"
    modality = "text_only"
    designed = "position_bias"  # the shortcut it was built to show

    def predict(self, inputs: Sequence[ModelInput]) -> list[Response]:
        out = []
        for inp in inputs:
            _, opts = options_from_prompt(inp.prompt)
            out.append(Response(_answer(opts, 0) if opts else "A", finish_reason="stop"))
        return out


#: (cue word stems, diagnosis keyword, weight): what a text-prior model 'knows'
ASSOCIATIONS: tuple[tuple[tuple[str, ...], str, float], ...] = (
    (("ankle", "oedema", "edema", "palpitation", "exertional"), "cardiomegaly", 2.0),
    (("pleuritic", "dull", "percussion"), "effusion", 2.0),
    (("sudden", "abrupt", "sharp", "basketball"), "pneumothorax", 2.0),
    (("fever", "rigor", "productive", "purulent", "sputum"), "consolidation", 1.5),
    (("fever", "rigor", "productive", "purulent"), "pneumonia", 1.5),
    (("orthopn", "frothy", "nocturnal", "crackles"), "edema", 2.0),
    (("surgery", "operation", "shallow", "postoperative"), "atelectasis", 2.0),
    (("smok", "pack-year", "weight", "haemoptysis", "hemoptysis"), "nodule", 2.0),
    (("smok", "weight"), "mass", 1.5),
    (("fever", "night sweats"), "tuberculosis", 0.5),
)
#: (age range, diagnosis keyword, weight): demographic priors
AGE_PRIORS: tuple[tuple[float, float, str, float], ...] = (
    (0, 40, "pneumothorax", 1.0),
    (65, 200, "cardiomegaly", 0.6),
    (65, 200, "edema", 0.55),
    (60, 200, "effusion", 0.45),
    (50, 75, "nodule", 0.3),
)
#: content-based tie-break: how common a diagnosis is (never the option position)
BASE_RATE: tuple[str, ...] = ("consolidation", "pneumonia", "effusion", "cardiomegaly", "atelectasis", "edema",
                              "nodule", "pneumothorax")
_AGE = re.compile(r"(\d{1,3})[- ]year[- ]old")


class TextPriorAnswerer(LocalModel):
    """Picks the option best supported by cue words and age in the question; ignores the image."""

    name = "text-prior"
    modality = "text_only"
    designed = "text_prior"  # the shortcut it was built to show

    @staticmethod
    def option_scores(question: str, options: Sequence[str]) -> np.ndarray:
        """Association score of each option with the question text (higher = more plausible)."""
        q = question.casefold()
        m = _AGE.search(q)
        age = float(m.group(1)) if m else None
        scores = np.zeros(len(options))
        for j, o in enumerate(options):
            ok = o.casefold()
            if ok.strip() == "unknown":
                scores[j] = -np.inf
                continue
            for stems, dx, w in ASSOCIATIONS:
                if dx in ok and any(s in q for s in stems):
                    scores[j] += w
            if age is not None:
                for lo, hi, dx, w in AGE_PRIORS:
                    if lo <= age < hi and dx in ok:
                        scores[j] += w
            for r, dx in enumerate(BASE_RATE):
                if dx in ok:
                    scores[j] += 0.01 * (len(BASE_RATE) - r)
                    break
        return scores

    def predict(self, inputs: Sequence[ModelInput]) -> list[Response]:
        out = []
        for inp in inputs:
            q, opts = options_from_prompt(inp.prompt)
            if not opts:
                out.append(Response("", finish_reason="stop"))
                continue
            s = self.option_scores(q, opts)
            # ties broken by option text, so the choice never depends on the order shown
            best = max(range(len(opts)), key=lambda j: (s[j], opts[j].casefold()))
            out.append(Response(_answer(opts, best), finish_reason="stop"))
        return out


# ------------------------------------------------------------------------------------------ image reader

_FEAT = 64


def _features(pixels: np.ndarray) -> np.ndarray:
    """Grayscale, bilinear 64x64, scaled to [0, 1], image mean removed."""
    px = pixels if pixels.ndim == 2 else np.asarray(Image.fromarray(pixels).convert("L"))
    a = np.asarray(Image.fromarray(px).resize((_FEAT, _FEAT), Image.Resampling.BILINEAR), dtype=np.float64)
    a /= 255.0
    return (a - a.mean()).ravel()


@lru_cache(maxsize=4)
def _train_reader(classes: tuple[str, ...], n_per_class: int, train_seed: int, alpha: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Ridge (dual form) one-vs-rest weights from phantom renders with seeds disjoint from probe sets."""
    from medvlm_audit.phantom import render_study

    rng = np.random.default_rng([train_seed, 77])
    X, y = [], []
    for j in range(n_per_class):
        for ci, f in enumerate(classes):
            sex = "M" if rng.random() < 0.5 else "F"
            age = float(rng.uniform(20, 90))
            view = "PA" if rng.random() < 0.7 else "AP"
            px, _ = render_study({f: True}, sex=sex, age=age, view=view, seed=-(1 + train_seed * 100_000 + j * 64 + ci),
                                 size=128)
            X.append(_features(px))
            y.append(ci)
    Xa = np.asarray(X)
    mu = Xa.mean(axis=0)
    Xc = Xa - mu
    Y = -np.ones((len(y), len(classes)))
    Y[np.arange(len(y)), y] = 1.0
    K = Xc @ Xc.T
    coef = np.linalg.solve(K + alpha * np.eye(len(y)), Y)
    W = Xc.T @ coef  # (d, classes)
    return W, mu


class PhantomImageReader(LocalModel):
    """Reads the phantom image: classifies the drawn finding, answers the option that names it."""

    name = "image-reader"
    modality = "multimodal"
    designed = "reads_image"  # the behaviour it was built to show

    def __init__(self, n_per_class: int = 60, train_seed: int = 7, alpha: float = 1.0) -> None:
        from medvlm_audit.suites.stress.embedded import MCQ_FINDINGS

        self.classes = tuple(MCQ_FINDINGS)
        self.names = tuple(MCQ_FINDINGS[c].casefold() for c in self.classes)
        self.n_per_class, self.train_seed, self.alpha = n_per_class, train_seed, alpha

    def identity(self) -> dict[str, object]:
        return {"backend": "PhantomImageReader", "n_per_class": self.n_per_class, "train_seed": self.train_seed,
                "alpha": self.alpha}

    def class_scores(self, pixels: np.ndarray) -> np.ndarray:
        W, mu = _train_reader(self.classes, self.n_per_class, self.train_seed, self.alpha)
        return (_features(pixels) - mu) @ W

    def predict(self, inputs: Sequence[ModelInput]) -> list[Response]:
        out = []
        for inp in inputs:
            _, opts = options_from_prompt(inp.prompt)
            if not inp.images:
                out.append(Response(REFUSAL_TEXT, finish_reason="stop"))
                continue
            s = self.class_scores(inp.images[0].pixels)
            best, best_s = None, -np.inf
            for j, o in enumerate(opts):
                oc = o.casefold()
                for ci, nm in enumerate(self.names):
                    if oc == nm and s[ci] > best_s:
                        best, best_s = j, s[ci]
            if best is None:
                out.append(Response("None of the options matches what the image shows.", finish_reason="stop"))
            else:
                out.append(Response(_answer(opts, best), finish_reason="stop"))
        return out


def reference_mcq_panel() -> list[Model]:
    """The three MCQ reference answerers."""
    return [FirstOptionAnswerer(), TextPriorAnswerer(), PhantomImageReader()]


# ------------------------------------------------------------------------------- runner-less driving


def build_input(trial: Trial, cache: SourceCache | None = None, decoding: Decoding | None = None) -> ModelInput:
    """The ModelInput of one planned trial (images rendered from their recipes)."""
    imgs = tuple(ImageData.from_array(r.render(cache)) for r in trial.images)
    return ModelInput(trial.messages, imgs, decoding or Decoding(max_new_tokens=64), trial.sample_index)


def ask_plan(models: Sequence[LocalModel], plan: Plan, decoding: Decoding | None = None) -> pd.DataFrame:
    """Ask local models every planned trial directly; the tidy table the runner would return."""
    cache = SourceCache(256)
    inputs = [build_input(t, cache, decoding) for t in plan.trials]
    rows = []
    for m in models:
        prepared = [m.prepare(i) for i in inputs]
        resp: list[Response] = []
        bs = max(1, m.batch_size)
        for s in range(0, len(prepared), bs):
            resp.extend(m.predict(prepared[s:s + bs]))
        for t, r in zip(plan.trials, resp, strict=True):
            rows.append({"model": m.name, "case_id": t.case_id, "condition": t.condition,
                         "sample_index": t.sample_index, "answer_text": r.text, **(t.payload or {})})
    return pd.DataFrame(rows)


_KINDS: dict[str, type[LocalModel]] = {"first_option": FirstOptionAnswerer, "text_prior": TextPriorAnswerer,
                                       "image_reader": PhantomImageReader}


def build_stress_reference(name: str, params: dict[str, Any], context: dict[str, Any]) -> Model:
    """Backend ``stress_reference``: ``kind`` in first_option | text_prior | image_reader."""
    from medvlm_audit.errors import ConfigError

    params = dict(params)
    kind = params.pop("kind", None)
    if kind not in _KINDS:
        raise ConfigError(f"model {name!r}: backend 'stress_reference' needs kind in {sorted(_KINDS)}")
    model = _KINDS[kind](**params)
    model.name = name
    return model
