"""The reference panel: small real models (numpy + scikit-learn) with known behaviour, fitted on the phantom's training split.

Each model sees only its ModelInput (pixels and prompt text): it reads the queried finding or the
report sentence back from the prompt (:mod:`medvlm_audit.suites.grounding.prompt_parsing`) and the evidence from the
pixels, normalised to a fixed 64 x 64 grid so 224 and 512 inputs are read alike. The designed behaviours:

- ``local_evidence`` (multimodal): per-finding logistic regression on local patch statistics inside the
  region where that finding appears; a masked cell reads as finding-free -> uses the image (high CGR,
  IS near 100, UAR < 100). Report sentences: the finding's evidence (on the named side) against the
  sentence's claim, plus a vocabulary/repetition check for text errors.
- ``finding_prior`` (text_only): training prevalence of the asked finding; bag-of-words logistic
  regression for report sentences -> ignores the image.
- ``always_yes`` (multimodal input, ignored): always "Yes".
- ``global_probe`` (vision_only): L2 logistic regression per finding on a global embedding (top principal
  components of a 16 x 16 thumbnail + body intensity histogram, black pixels read as padding); the prompt
  only picks the head -> uses the image through global appearance, low CGR, IS near 100.
- ``occlusion_unstable`` (multimodal): a global reader whose score falls with the share of pure-black
  pixels, so any occlusion moves its answers -> IS < 70.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from medvlm_audit.cache import LRU
from medvlm_audit.errors import ProbeSetError
from medvlm_audit.models.base import LocalModel, Modality, ModelInput, Response
from medvlm_audit.suites.grounding.probeset import ProbeSet
from medvlm_audit.suites.grounding.prompt_parsing import ParsedPrompt, parse_prompt

REFERENCE_VERSION = "1"
REFERENCE_KINDS: tuple[str, ...] = ("local_evidence", "finding_prior", "always_yes", "global_probe", "occlusion_unstable")
GRID = 64  # every image is read on a 64 x 64 area-averaged grid, whatever its resolution
CELL = 4  # local patches: 16 x 16 cells of 4 x 4 grid pixels
DARK_LEVEL = 2  # "pure black": what a mask leaves, never produced by the phantom renderer (min 8)
_LAT = ("left", "right")


# ----------------------------------------------------------------------------------------------- image features


#: per-image grids keyed by the pixel sha256, shared by every panel model
_CACHE = LRU(max_items=8192)


def image_grid(pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """64 x 64 area-averaged grayscale in [0, 1] and the share of non-black pixels per grid pixel, from gray or RGB."""
    px = np.asarray(pixels)
    if px.ndim == 3:
        px = px[..., :3].mean(axis=2).astype(np.uint8) if px.shape[2] > 1 else px[..., 0]
    if px.ndim != 2 or px.size == 0:
        raise ValueError(f"expected a grayscale or RGB image, got shape {np.asarray(pixels).shape}")
    px = np.ascontiguousarray(px, dtype=np.uint8)
    g = np.asarray(Image.fromarray(px).resize((GRID, GRID), Image.Resampling.BOX), dtype=np.float32) / 255.0
    lit = np.asarray(Image.fromarray((px > DARK_LEVEL) * np.uint8(255)).resize((GRID, GRID), Image.Resampling.BOX),
                     dtype=np.float32) / 255.0
    return g, lit


def _grid_of(inp: ModelInput) -> tuple[np.ndarray, np.ndarray] | None:
    if not inp.images:
        return None
    im = inp.images[0]
    hit = _CACHE.get(im.sha256)
    if hit is None:
        hit = image_grid(im.pixels)
        _CACHE.put(im.sha256, hit)
    return hit


# Feature functions take stacks of grids but compute image by image: a numpy reduction over a stack may sum in
# another order when the stack size changes, and an answer must not depend on which batch its input came in.


def _cell_stats_one(g: np.ndarray, lit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k = GRID // CELL

    def cells(a: np.ndarray) -> np.ndarray:
        return a.reshape(k, CELL, k, CELL).transpose(0, 2, 1, 3).reshape(k, k, CELL * CELL)

    w = cells(lit.astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        v = np.where(w > 0.01, cells(g.astype(np.float64)) / np.maximum(w, 1e-6), 0.0)  # grid value of lit pixels
        n = w.sum(axis=2)
        mean = (w * v).sum(axis=2) / n
        var = (w * v * v).sum(axis=2) / n - mean * mean
        ok = n > 0.5
        return np.where(ok, mean, np.nan), np.where(ok, np.sqrt(np.maximum(var, 0.0)), np.nan)


def cell_stats(grids: np.ndarray, lit: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-cell mean and standard deviation (n, 16, 16) of the lit pixels of each 64 x 64 grid (NaN: all black)."""
    lit = np.ones_like(grids) if lit is None else lit
    pairs = [_cell_stats_one(g, m) for g, m in zip(grids, lit)]
    return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def _lit_thumbnail_one(g: np.ndarray, lit: np.ndarray) -> np.ndarray:
    k = GRID // CELL
    s = (g * 1.0).reshape(k, CELL, k, CELL).transpose(0, 2, 1, 3).reshape(k, k, -1).sum(axis=2)
    w = lit.reshape(k, CELL, k, CELL).transpose(0, 2, 1, 3).reshape(k, k, -1).sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(w > 0.5, s / np.maximum(w, 1e-6), np.nan).reshape(-1)


def lit_thumbnail(grids: np.ndarray, lit: np.ndarray) -> np.ndarray:
    """16 x 16 thumbnail averaged over non-black pixels only (black reads as padding); NaN where a cell has none."""
    return np.stack([_lit_thumbnail_one(g, m) for g, m in zip(grids, lit)])


def _body_histogram_one(g: np.ndarray, lit: np.ndarray, bins: int) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        val = np.where(lit > 0.01, g / np.maximum(lit, 1e-6), 0.0).reshape(-1)
    wt = lit.reshape(-1) * (val >= 0.125)
    idx = np.clip(((val - 0.125) / 0.875 * bins).astype(np.int64), 0, bins - 1)
    hist = np.bincount(idx, weights=wt, minlength=bins)
    return (hist / max(float(hist.sum()), 1e-6)).astype(np.float32)


def body_histogram(grids: np.ndarray, lit: np.ndarray, bins: int = 14) -> np.ndarray:
    """Intensity histogram of the lit body pixels (grid value >= 1/8; air and black padding left out), normalised."""
    return np.stack([_body_histogram_one(g, m, bins) for g, m in zip(grids, lit)])


class GlobalEmbedding:
    """A whole-image embedding fitted on the training split: top principal components of the lit thumbnail
    plus the body histogram. Unlit (masked) cells are imputed with the training mean, so an occlusion
    removes evidence rather than adding a dark blob; the embedding is dominated by global appearance.
    """

    def __init__(self, grids: np.ndarray, lit: np.ndarray, n_components: int = 6) -> None:
        T = lit_thumbnail(grids, lit)
        self.mean = np.nanmean(T, axis=0)
        T = self._impute(T)
        _, _, vt = np.linalg.svd(T - self.mean, full_matrices=False)
        self.components = vt[:n_components].astype(np.float32)

    def _impute(self, T: np.ndarray) -> np.ndarray:
        bad = np.isnan(T)
        if bad.any():
            T = T.copy()
            T[bad] = np.broadcast_to(self.mean, T.shape)[bad]
        return T

    def __call__(self, grids: np.ndarray, lit: np.ndarray) -> np.ndarray:
        T = self._impute(lit_thumbnail(grids, lit))
        proj = np.stack([self.components @ t for t in (T - self.mean)])  # row by row: batch-invariant
        return np.concatenate([proj, body_histogram(grids, lit)], axis=1)


# ----------------------------------------------------------------------------------------------- training data


@dataclass
class TrainingData:
    """Unique training images on the grid, their full label sets and the training manifest's question rows."""

    grids: np.ndarray  # (n, 64, 64)
    lit: np.ndarray  # (n, 64, 64) share of non-black pixels
    labels: dict[str, np.ndarray]  # finding -> (n,) 0/1
    sides: dict[str, np.ndarray]  # finding -> (n,) "left"/"right"/"" of the present finding
    boxes: dict[str, list[tuple[float, float, float, float]]]  # finding -> normalised boxes of present findings
    image_index: dict[str, int]  # image path -> row in grids
    questions: Any  # the training manifest (DataFrame)
    vocabulary: frozenset[str]  # words of the (error-free) training reports
    train_hash: str


_TRAIN_CACHE: dict[str, TrainingData] = {}
_TRAIN_LOCK = threading.Lock()


def load_training_data(train: ProbeSet) -> TrainingData:
    """Read the training split once (cached by its content hash): grids, labels, boxes, report vocabulary."""
    key = train.content_hash
    with _TRAIN_LOCK:
        if key in _TRAIN_CACHE:
            return _TRAIN_CACHE[key]
    df = train.df
    if "study_findings" not in df.columns:
        raise ProbeSetError(f"training probe set {train.name!r} lacks the 'study_findings' column (build it with build_phantom)")
    first = df.drop_duplicates("image_path")
    grids: list[np.ndarray] = []
    lits: list[np.ndarray] = []
    labels: list[dict[str, int]] = []
    sides: list[dict[str, str]] = []
    boxes: dict[str, list[tuple[float, float, float, float]]] = {}
    index: dict[str, int] = {}
    for row in first.itertuples(index=False):
        path = train.resolve(row.image_path)
        if path is None:
            raise ProbeSetError(f"training case {row.case_id!r} has no image")
        try:
            with Image.open(path) as im:
                px = np.asarray(im.convert("L"))
        except (OSError, ValueError) as e:
            raise ProbeSetError(f"training image {path} (case {row.case_id!r}) cannot be read: {e}") from e
        g, lit = image_grid(px)
        try:
            sf = json.loads(row.study_findings)
        except (TypeError, json.JSONDecodeError) as e:
            raise ProbeSetError(f"case {row.case_id!r}: field 'study_findings' is not JSON ({e})") from e
        w, h = float(row.image_width or px.shape[1]), float(row.image_height or px.shape[0])
        index[row.image_path] = len(grids)
        grids.append(g)
        lits.append(lit)
        labels.append({f: int(v is not None) for f, v in sf.items()})
        sides.append({f: (v.get("side", "") if v else "") for f, v in sf.items()})
        for f, v in sf.items():
            if v and v.get("box"):
                b = v["box"]
                boxes.setdefault(f, []).append((b[0] / w, b[1] / h, b[2] / w, b[3] / h))
    findings = sorted({f for lab in labels for f in lab})
    vocab: set[str] = set()
    for rep in df["report"].dropna().unique():
        vocab.update(re.findall(r"[a-z]+", str(rep).lower()))
    data = TrainingData(
        grids=np.stack(grids).astype(np.float32),
        lit=np.stack(lits).astype(np.float32),
        labels={f: np.array([lab.get(f, 0) for lab in labels], dtype=np.int64) for f in findings},
        sides={f: np.array([s.get(f, "") for s in sides]) for f in findings},
        boxes=boxes,
        image_index=index,
        questions=df,
        vocabulary=frozenset(vocab),
        train_hash=key,
    )
    with _TRAIN_LOCK:
        _TRAIN_CACHE[key] = data
    return data


# ----------------------------------------------------------------------------------------------- responses

_YES = (("Yes", 0.90), ("yes", 0.07), (" Yes", 0.03))
_NO = (("No", 0.90), ("no", 0.07), (" No", 0.03))


def yes_no_response(p_yes: float, inp: ModelInput, latency_s: float) -> Response:
    """A one-token "Yes"/"No" answer whose first-token top log-probabilities carry P(yes)."""
    p = min(max(float(p_yes), 1e-4), 1 - 1e-4)
    text = "Yes" if p >= 0.5 else "No"
    top: tuple[tuple[str, float], ...] | None = None
    if inp.decoding.logprobs:
        cand = [(t, math.log(p * w)) for t, w in _YES] + [(t, math.log((1 - p) * w)) for t, w in _NO]
        cand.sort(key=lambda t: -t[1])
        top = tuple(cand[: max(1, inp.decoding.top_logprobs)])
    return Response(text=text, top_logprobs=top, finish_reason="stop", prompt_tokens=len(inp.prompt.split()),
                    completion_tokens=1, latency_s=latency_s)


def _logit(p: np.ndarray | float) -> np.ndarray:
    p = np.clip(p, 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


# ----------------------------------------------------------------------------------------------- the models


class ReferenceModel(LocalModel):
    """Base of the panel: batched ``predict`` on ModelInputs; subclasses implement ``p_yes``."""

    kind: str = "reference"
    batch_size = 256
    max_concurrency = 1

    def __init__(self, train: TrainingData, seed: int = 0, name: str | None = None) -> None:
        self.train_hash = train.train_hash
        self.seed = int(seed)
        self.name = name or self.kind

    def identity(self) -> dict[str, Any]:
        return {"backend": "reference", "kind": self.kind, "version": REFERENCE_VERSION,
                "train_hash": self.train_hash, "seed": self.seed}

    def p_yes(self, inputs: Sequence[ModelInput]) -> np.ndarray:
        raise NotImplementedError

    def predict(self, inputs: Sequence[ModelInput]) -> list[Response]:
        from threadpoolctl import threadpool_limits

        t0 = time.perf_counter()
        with threadpool_limits(1):
            p = self.p_yes(inputs) if inputs else np.zeros(0)
        lat = (time.perf_counter() - t0) / max(1, len(inputs))
        return [yes_no_response(float(pi), inp, lat) for pi, inp in zip(p, inputs)]


def _prevalences(data: TrainingData) -> dict[str, float]:
    q = data.questions
    fp = q[q["kind"] == "finding_presence"]
    return {str(f): float(g["label"].mean()) for f, g in fp.groupby("finding")}


def _report_prior(data: TrainingData) -> float:
    q = data.questions
    rep = q[q["kind"] == "report_error"]
    return float(rep["label"].mean()) if len(rep) else 0.5


def _fit_lr(X: Any, y: np.ndarray, C: float, seed: int, balanced: bool = False) -> Any:
    from sklearn.linear_model import LogisticRegression

    if y.min() == y.max():  # one class only: a constant model
        return float(y[0])
    cw = "balanced" if balanced else None
    return LogisticRegression(C=C, max_iter=500, tol=1e-4, class_weight=cw, random_state=seed).fit(X, y)


def _lr_logit(model: Any, X: Any) -> np.ndarray:
    """Decision function, computed row by row so a row's value never depends on which other rows share its batch
    (matrix products and multi-row reductions may change the last bits with the batch size)."""
    if isinstance(model, float):
        return np.full(X.shape[0], float(_logit(model)))
    if isinstance(X, np.ndarray):
        w = np.ascontiguousarray(model.coef_[0], dtype=np.float64)
        b = float(model.intercept_[0])
        return np.array([float(np.dot(np.ascontiguousarray(x, dtype=np.float64), w)) + b for x in X])
    return model.decision_function(X)  # sparse bag of words: sparse row products are per row already


class _Scaler:
    """Standardise on the training split, clipped to the training range (masks read as "no evidence")."""

    def __init__(self, X: np.ndarray) -> None:
        self.lo, self.hi = np.nanmin(X, axis=0), np.nanmax(X, axis=0)
        self.mu, self.sd = np.nanmean(X, axis=0), np.nanstd(X, axis=0) + 1e-6

    def __call__(self, X: np.ndarray) -> np.ndarray:
        Z = (np.clip(X, self.lo, self.hi) - self.mu) / self.sd
        return np.nan_to_num(Z, nan=0.0)


class LocalEvidence(ReferenceModel):
    """Reads local patch statistics (mean, texture) where the asked finding appears (regions learnt from training boxes).

    Statistics are taken over lit pixels; a cell left all black (masked) reads as a typical, finding-free cell.
    """

    kind = "local_evidence"
    designed = "uses_image"  # the grounding category it was built to land in
    modality: Modality = "multimodal"

    def __init__(self, train: TrainingData, seed: int = 0, name: str | None = None, C: float = 0.3) -> None:
        super().__init__(train, seed, name)
        mean, std = cell_stats(train.grids, train.lit)
        self.prior = _prevalences(train)
        self.report_prior = _report_prior(train)
        self.vocabulary = train.vocabulary
        self.heads: dict[tuple[str, str], tuple[np.ndarray, _Scaler, Any]] = {}
        n = len(train.grids)
        for f, y in train.labels.items():
            bxs = train.boxes.get(f, [])
            if not bxs:
                continue
            centre_side = ["right" if (b[0] + b[2]) / 2 < 0.5 else "left" for b in bxs]  # image left = patient right
            for side in ("any",) + _LAT:
                sel = bxs
                target = y
                if side != "any":
                    fs = train.sides[f]
                    if not (fs != "").any():
                        continue
                    target = ((y == 1) & ((fs == side) | (fs == "bilateral"))).astype(np.int64)
                    sel = [b for b, s in zip(bxs, centre_side) if s == side]
                    if len(sel) < 3:
                        continue
                region = self._region(sel)
                X = self._features(mean, std, region)
                sc = _Scaler(X)
                self.heads[(f, side)] = (region, sc, _fit_lr(sc(X), target, C, self.seed, balanced=True))
        self._n = n

    @staticmethod
    def _region(boxes: list[tuple[float, float, float, float]], min_share: float = 0.25) -> np.ndarray:
        """Cells (16 x 16) covered by at least ``min_share`` of the most covered cell's count of training boxes."""
        k = GRID // CELL
        c = (np.arange(k) + 0.5) / k
        cover = np.zeros((k, k))
        for u0, v0, u1, v1 in boxes:
            cover += ((c[:, None] >= v0) & (c[:, None] <= v1)) & ((c[None, :] >= u0) & (c[None, :] <= u1))
        return cover >= max(1.0, min_share * cover.max())

    @staticmethod
    def _features(mean: np.ndarray, std: np.ndarray, region: np.ndarray) -> np.ndarray:
        return np.concatenate([mean[:, region], std[:, region]], axis=1)

    def _p_heads(self, key: tuple[str, str], mean: np.ndarray, std: np.ndarray) -> np.ndarray:
        region, sc, lr = self.heads[key]
        return _sigmoid(_lr_logit(lr, sc(self._features(mean, std, region))))

    def _text_error(self, sentence: str) -> bool:
        words = re.findall(r"[a-z]+", sentence.lower())
        unknown = any(w not in self.vocabulary for w in words)
        repeated = any(a == b for a, b in itertools.pairwise(words))
        return unknown or repeated

    def p_yes(self, inputs: Sequence[ModelInput]) -> np.ndarray:
        out = np.full(len(inputs), 0.5)
        parsed = [parse_prompt(i.prompt) for i in inputs]
        grids = [_grid_of(i) for i in inputs]
        jobs: dict[tuple[str, str], list[int]] = {}
        for k, (pp, g) in enumerate(zip(parsed, grids)):
            if pp.kind == "report_error" and pp.sentence is not None and self._text_error(pp.sentence):
                out[k] = 0.08
                continue
            key = self._head_for(pp)
            if key is None:
                out[k] = self.report_prior if pp.kind == "report_error" else 0.5
            elif g is None:  # no image: fall back on the training prevalence
                out[k] = self.prior.get(key[0], 0.5)
            else:
                jobs.setdefault(key, []).append(k)
        for key, idx in jobs.items():
            G = np.stack([grids[k][0] for k in idx])  # type: ignore[index]
            L = np.stack([grids[k][1] for k in idx])  # type: ignore[index]
            mean, std = cell_stats(G, L)
            out[idx] = self._p_heads(key, mean, std)
        for k, pp in enumerate(parsed):  # a sentence that denies the finding is right when the finding is absent
            denies = pp.kind == "report_error" and pp.asserted is False and self._head_for(pp) is not None
            if denies and grids[k] is not None and not (pp.sentence and self._text_error(pp.sentence)):
                out[k] = 1.0 - out[k]
        return out

    def _head_for(self, pp: ParsedPrompt) -> tuple[str, str] | None:
        if pp.finding is None:
            return None
        if pp.kind == "report_error" and pp.asserted and pp.side and (pp.finding, pp.side) in self.heads:
            return (pp.finding, pp.side)
        return (pp.finding, "any") if (pp.finding, "any") in self.heads else None


class FindingPrior(ReferenceModel):
    """Text only: prevalence of the asked finding among the training questions; BoW regression on report sentences."""

    kind = "finding_prior"
    designed = "ignores_image"  # the grounding category it was built to land in
    modality: Modality = "text_only"

    def __init__(self, train: TrainingData, seed: int = 0, name: str | None = None) -> None:
        super().__init__(train, seed, name)
        from sklearn.feature_extraction.text import CountVectorizer

        self.prior = _prevalences(train)
        q = train.questions
        rep = q[q["kind"] == "report_error"]
        self.vectorizer = None
        self.bow: Any = _report_prior(train)
        if len(rep) and rep["label"].nunique() == 2:
            self.vectorizer = CountVectorizer(ngram_range=(1, 2), lowercase=True, binary=True)
            X = self.vectorizer.fit_transform(rep["sentence"].astype(str))
            self.bow = _fit_lr(X, rep["label"].to_numpy(dtype=np.int64), 1.0, self.seed)

    def p_yes(self, inputs: Sequence[ModelInput]) -> np.ndarray:
        out = np.full(len(inputs), 0.5)
        sent_idx: list[int] = []
        sents: list[str] = []
        for k, inp in enumerate(inputs):
            pp = parse_prompt(inp.prompt)
            if pp.kind == "report_error" and pp.sentence is not None:
                sent_idx.append(k)
                sents.append(pp.sentence)
            elif pp.finding is not None:
                out[k] = self.prior.get(pp.finding, 0.5)
        if sents:
            if self.vectorizer is None:
                out[sent_idx] = float(self.bow)
            else:
                out[sent_idx] = _sigmoid(_lr_logit(self.bow, self.vectorizer.transform(sents)))
        return out


class AlwaysYes(ReferenceModel):
    """Takes the image and prompt and answers "Yes" regardless."""

    kind = "always_yes"
    designed = "ignores_image"  # the grounding category it was built to land in
    modality: Modality = "multimodal"

    def p_yes(self, inputs: Sequence[ModelInput]) -> np.ndarray:
        return np.full(len(inputs), 0.97)


class _GlobalHeads:
    """Per-finding (and one report-sentence) L2 logistic heads on standardised global image features."""

    def __init__(self, train: TrainingData, feats: Any, C: float, seed: int) -> None:
        self.feats = feats
        X = feats(train.grids, train.lit)
        self.scaler = _Scaler(X)
        Xs = self.scaler(X)
        self.heads = {f: _fit_lr(Xs, y, C, seed, balanced=True) for f, y in train.labels.items()}
        q = train.questions
        rep = q[(q["kind"] == "report_error") & q["image_path"].isin(train.image_index)]
        self.report_head: Any = _report_prior(train)
        if len(rep) and rep["label"].nunique() == 2:
            Xr = Xs[[train.image_index[p] for p in rep["image_path"]]]
            self.report_head = _fit_lr(Xr, rep["label"].to_numpy(dtype=np.int64), C, seed)

    def logits(self, head: Any, grids: np.ndarray, lit: np.ndarray) -> np.ndarray:
        return _lr_logit(head, self.scaler(self.feats(grids, lit)))


class GlobalProbe(ReferenceModel):
    """Vision only: the prompt only selects the head; the answer comes from global image features."""

    kind = "global_probe"
    designed = "uses_image"  # the grounding category it was built to land in
    modality: Modality = "vision_only"

    def __init__(self, train: TrainingData, seed: int = 0, name: str | None = None, C: float = 0.1,
                 n_components: int = 6) -> None:
        super().__init__(train, seed, name)
        self.g = _GlobalHeads(train, GlobalEmbedding(train.grids, train.lit, n_components), C, self.seed)
        self.prior = _prevalences(train)

    def p_yes(self, inputs: Sequence[ModelInput]) -> np.ndarray:
        out = np.full(len(inputs), 0.5)
        jobs: dict[str, list[int]] = {}
        grids = [_grid_of(i) for i in inputs]
        for k, inp in enumerate(inputs):
            pp = parse_prompt(inp.prompt)
            head = "__report__" if pp.kind == "report_error" else pp.finding
            if head is None or (head != "__report__" and head not in self.g.heads):
                continue
            if grids[k] is None:
                out[k] = 0.5
                continue
            jobs.setdefault(head, []).append(k)
        for head, idx in jobs.items():
            G = np.stack([grids[k][0] for k in idx])  # type: ignore[index]
            L = np.stack([grids[k][1] for k in idx])  # type: ignore[index]
            model = self.g.report_head if head == "__report__" else self.g.heads[head]
            out[idx] = _sigmoid(self.g.logits(model, G, L))
        return out


def _coarse_features(grids: np.ndarray, lit: np.ndarray) -> np.ndarray:
    """8 x 8 thumbnail (plain means, black included), image by image."""
    return np.stack([g.reshape(8, 8, 8, 8).transpose(0, 2, 1, 3).reshape(8, 8, 64).mean(axis=2).reshape(-1)
                     for g in grids])


class OcclusionUnstable(ReferenceModel):
    """Reads a coarse 8 x 8 thumbnail, but its score drops with the share of pure-black pixels: any occlusion moves it."""

    kind = "occlusion_unstable"
    designed = "unstable"  # the grounding category it was built to land in
    modality: Modality = "multimodal"

    def __init__(self, train: TrainingData, seed: int = 0, name: str | None = None, C: float = 0.1,
                 dark_weight: float = 2.0, dark_scale: float = 0.02) -> None:
        super().__init__(train, seed, name)
        self.g = _GlobalHeads(train, _coarse_features, C, self.seed)
        self.dark_weight, self.dark_scale = dark_weight, dark_scale

    def p_yes(self, inputs: Sequence[ModelInput]) -> np.ndarray:
        out = np.full(len(inputs), 0.5)
        jobs: dict[tuple[str, bool], list[int]] = {}
        grids = [_grid_of(i) for i in inputs]
        for k, inp in enumerate(inputs):
            pp = parse_prompt(inp.prompt)
            if grids[k] is None or pp.finding is None or pp.finding not in self.g.heads:
                continue
            negate = pp.kind == "report_error" and pp.asserted is False
            jobs.setdefault((pp.finding, negate), []).append(k)
        for (f, negate), idx in jobs.items():
            G = np.stack([grids[k][0] for k in idx])  # type: ignore[index]
            L = np.stack([grids[k][1] for k in idx])  # type: ignore[index]
            dark = 1.0 - L.mean(axis=(1, 2))
            z = self.g.logits(self.g.heads[f], G, L)
            z = -z if negate else z
            z = z - self.dark_weight * np.minimum(dark / self.dark_scale, 4.0)
            out[idx] = _sigmoid(z)
        return out


_CLASSES: dict[str, type[ReferenceModel]] = {
    c.kind: c for c in (LocalEvidence, FindingPrior, AlwaysYes, GlobalProbe, OcclusionUnstable)
}


def make_reference_model(kind: str, train: ProbeSet | TrainingData, seed: int = 0, **params: Any) -> ReferenceModel:
    """Fit one reference model of ``kind`` on the training split (a phantom ``train`` probe set)."""
    from threadpoolctl import threadpool_limits

    if kind not in _CLASSES:
        raise ValueError(f"unknown reference model kind {kind!r}; known: {list(_CLASSES)}")
    data = train if isinstance(train, TrainingData) else load_training_data(train)
    with threadpool_limits(1):  # small problems: BLAS threads only oversubscribe the cores
        return _CLASSES[kind](data, seed=seed, **params)


def fit_reference_panel(train: ProbeSet, seed: int = 0, kinds: Sequence[str] | None = None) -> list[ReferenceModel]:
    """Fit the whole panel (or ``kinds``) on the training split; the training images are read once."""
    data = load_training_data(train)
    return [make_reference_model(k, data, seed=seed) for k in (kinds or REFERENCE_KINDS)]


def build_reference(name: str, params: dict[str, Any], context: dict[str, Any]) -> ReferenceModel:
    """Backend ``reference``: ``kind`` (one of the panel's kinds) fitted on ``train`` (a training probe set
    folder); training sets are read once per ``context`` and shared by the panel."""
    from medvlm_audit.errors import ConfigError

    params = dict(params)
    train_path = params.pop("train", None)
    kind = params.pop("kind", None)
    if train_path is None or kind is None:
        raise ConfigError(f"model {name!r}: backend 'reference' needs 'kind' and 'train' (a training probe set)")
    if kind not in _CLASSES:
        raise ConfigError(f"model {name!r}: unknown reference kind {kind!r}; known: {list(_CLASSES)}")
    cache = context.setdefault("train_sets", {})
    train = cache.get(train_path) or cache.setdefault(train_path, ProbeSet.load(train_path))
    model = make_reference_model(kind, train, **params)
    model.name = name
    return model
