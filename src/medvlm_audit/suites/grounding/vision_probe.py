"""Vision-only baseline (paper 000, Methods): a logistic-regression probe per finding on frozen image features.

Features are the encoder's final-block class-token embedding (its own image processor resamples to the
encoder's native size, 518 x 518 for RAD-DINO ``microsoft/rad-dino``, and normalises; any transformers image
model in a local folder works), standardised per dimension on the training-split images. One L2
logistic-regression head (C = 1.0) per finding is fitted on the training (+ validation) cases; the
``no_finding`` head ("any acute abnormality") is fitted on abnormal images (any finding present) against normal
ones. At inference P(yes) comes from the head of the finding named in the prompt (the only thing the probe
reads from the text), and the answer is "Yes" when P(yes) > 0.5. Features are cached on disk by pixel sha256
and encoder identity; a path index lets a second fit skip decoding its training images too.

Which pixels the encoder sees. The paper resamples "each image" to 518 x 518. Here the probe is a Model like
any other: it sees only the condition image the runner renders for every model (224 x 224, or 512 x 512
under the resolution probe, masks already drawn on that grid), and its processor resamples that image to 518.
It is deliberately not handed the source file: (1) a model never sees paths or case data, only its
ModelInput, so every model answers the same pixels and the answer cache stays keyed by those pixels; (2) the
masks are defined on the 224 grid (the rounded working box), so a 518 mask would only rescale that box;
(3) training features go through the same 224 working image (:func:`working_image`), so the heads are applied
to images from the distribution they were fitted on (heads fitted on source-to-518 images but asked about
224-to-518 condition images would be evaluated off their training distribution). The cost: detail finer than
224 px is unavailable to the probe at the 224 conditions, as it is to every VLM in the audit; the @512
conditions give it 512 px images, close to its native size.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import re
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.atomic import write_bytes_atomic
from medvlm_audit.errors import ConfigError, ProbeSetError
from medvlm_audit.findings import DISPLAY_NAMES
from medvlm_audit.models.base import (
    ErrorInfo,
    ImageData,
    LocalModel,
    Modality,
    ModelInput,
    Response,
    pixel_sha256,
)
from medvlm_audit.models.hf import WEIGHT_SUFFIXES, fingerprint, import_torch_transformers, resolve_device
from medvlm_audit.suites.grounding.probeset import ProbeSet

WORKING_RES = 224
TRAIN_SPLITS = ("train",)
FIT_SPLITS = ("train", "validate", "validation", "val")

_shared_finding_from_prompt: Callable[[str], str | None] | None
try:  # the shared prompt parser, when present; else the private matcher below
    from medvlm_audit.suites.grounding.prompt_parsing import (
        finding_from_prompt as _shared_finding_from_prompt,
    )
except ImportError:  # pragma: no cover - depends on the tree
    _shared_finding_from_prompt = None

_NAME_PATTERNS = sorted(
    ((fid, re.compile(r"\b" + re.escape(name.lower()) + r"\b")) for fid, name in DISPLAY_NAMES.items()),
    key=lambda kv: -len(DISPLAY_NAMES[kv[0]]),
)


def _match_display_name(prompt: str) -> str | None:
    """The finding whose display name occurs in the lower-cased prompt (longest names first), or None."""
    low = prompt.lower()
    for fid, pat in _NAME_PATTERNS:
        if pat.search(low):
            return fid
    return None


def finding_of(prompt: str) -> str | None:
    """Finding id named in a prompt (shared parser if available, else display-name matching)."""
    if _shared_finding_from_prompt is not None:
        try:
            got = _shared_finding_from_prompt(prompt)
        except Exception:  # noqa: BLE001 - a parser problem falls back to plain matching
            got = None
        if isinstance(got, str) and got in DISPLAY_NAMES:
            return got
    return _match_display_name(prompt)


# -- image encoder + feature cache ------------------------------------------------------------------
class ImageEncoder:
    """A frozen transformers image encoder from a local folder: uint8 images -> class-token embeddings."""

    def __init__(
        self, path: str | Path, device: str = "auto", batch_size: int = 32, dtype: str = "float32"
    ) -> None:
        if path is None or not Path(path).is_dir():
            raise ConfigError(f"image encoder path {path!s} does not exist or is not a folder")
        torch, transformers = import_torch_transformers()
        self._torch = torch
        self.path = Path(path)
        self.batch_size = batch_size
        self.device = resolve_device(device, torch)
        self.dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        self.processor = transformers.AutoImageProcessor.from_pretrained(
            str(self.path), local_files_only=True
        )
        model = transformers.AutoModel.from_pretrained(
            str(self.path), local_files_only=True, dtype=self.dtype
        )
        self.model = model.to(self.device).eval()
        weights = [f for f in self.path.rglob("*") if f.is_file() and f.suffix in WEIGHT_SUFFIXES]
        cfg = self.model.config.to_json_string(use_diff=False)
        proc = json.dumps(self.processor.to_dict(), sort_keys=True, default=str)
        self._fingerprint = fingerprint(self.path, cfg, weights, proc)
        self.n_forward = 0  # forward passes run (the feature cache test counts these)
        self.n_images = 0

    def identity(self) -> dict[str, Any]:
        """Encoder name_or_path, config + weights + preprocessing fingerprint, dtype, feature definition."""
        return {
            "encoder": str(getattr(self.model.config, "_name_or_path", "") or self.path),
            "fingerprint": self._fingerprint,
            "dtype": str(self.dtype).removeprefix("torch."),
            "feature": "cls_last_hidden_state",
        }

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:24]

    def encode(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """Class-token embeddings (N, D) float32 of uint8 HxW / HxWx3 images (grayscale -> RGB)."""
        from medvlm_audit.models.hf import to_pil

        torch = self._torch
        out: list[np.ndarray] = []
        for start in range(0, len(images), self.batch_size):
            pils = [to_pil(im) for im in images[start : start + self.batch_size]]
            enc = self.processor(images=pils, return_tensors="pt")
            pv = enc["pixel_values"].to(self.device, self.dtype)
            with torch.inference_mode():
                hidden = self.model(pixel_values=pv).last_hidden_state
            self.n_forward += 1
            self.n_images += len(pils)
            out.append(hidden[:, 0, :].float().cpu().numpy())
        dim = int(getattr(self.model.config, "hidden_size", 0))
        return np.concatenate(out, axis=0) if out else np.zeros((0, dim), np.float32)


class FeatureCache:
    """Features on disk, one ``.npy`` per image under ``folder/<encoder key>/<sha[:2]>/<sha>.npy`` (atomic writes)."""

    def __init__(self, folder: str | Path, encoder_key: str) -> None:
        self.root = Path(folder) / encoder_key
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, sha: str) -> Path:
        return self.root / sha[:2] / f"{sha}.npy"

    def get(self, sha: str) -> np.ndarray | None:
        p = self._path(sha)
        if not p.exists():
            return None
        try:
            return np.load(p, allow_pickle=False)
        except (OSError, ValueError):  # a corrupt entry is recomputed
            return None

    def put(self, sha: str, vec: np.ndarray) -> None:
        p = self._path(sha)
        p.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.save(buf, np.asarray(vec, dtype=np.float32), allow_pickle=False)
        write_bytes_atomic(p, buf.getvalue())


def cached_features(
    encoder: ImageEncoder, images: Sequence[ImageData], cache: FeatureCache | None
) -> np.ndarray:
    """Features of ``images`` (N, D): read from the cache, encode only the misses (each distinct pixel hash once)."""
    feats: dict[str, np.ndarray] = {}
    todo: dict[str, np.ndarray] = {}
    for im in images:
        if im.sha256 in feats or im.sha256 in todo:
            continue
        hit = cache.get(im.sha256) if cache is not None else None
        if hit is not None:
            feats[im.sha256] = hit
        else:
            todo[im.sha256] = im.pixels
    if todo:
        shas = list(todo)
        vecs = encoder.encode([todo[s] for s in shas])
        for s, v in zip(shas, vecs):
            feats[s] = v
            if cache is not None:
                cache.put(s, v)
    if not images:
        return np.zeros((0, 0), np.float32)
    return np.stack([feats[im.sha256] for im in images]).astype(np.float32)


def working_image(path: Path, res: int = WORKING_RES) -> ImageData:
    """A source image as the audit's models see it: grayscale, bilinear at the working resolution."""
    from medvlm_audit.images import load_image, resize

    return ImageData.from_array(resize(load_image(path, "L"), res))


# -- the probe -------------------------------------------------------------------------------------
#: findings that do not make a study abnormal for the "any acute abnormality" head (CheXpert's No Finding
#: can be 1.0 with a support device present)
NOT_ABNORMAL = frozenset({"no_finding", "support_devices"})
#: the finding whose head answers "Is any acute abnormality present ...?"
ANY_ABNORMALITY = "no_finding"
PATH_INDEX = "path_index.jsonl"
WORKING_IMAGE_RECIPE = f"gray-bilinear-{WORKING_RES}-v1"


@dataclass(frozen=True)
class Head:
    """One finding's logistic-regression head on standardised features."""

    coef: np.ndarray  # (D,)
    intercept: float
    n_train: int
    n_pos: int

    def p_yes(self, z: np.ndarray) -> np.ndarray:
        """Sigmoid of the linear score for standardised features z (N, D)."""
        s = z @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-s))


class PathIndex:
    """(file path, size, mtime, working-image recipe) -> pixel sha256 of the working image, on disk.

    Lets a second fit find cached features without decoding the training images again (a JSONL file,
    appended; a torn last line is ignored)."""

    def __init__(self, folder: str | Path) -> None:
        self.path = Path(folder) / PATH_INDEX
        self._d: dict[str, str] = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    k, v = json.loads(line)
                    self._d[k] = v
                except (ValueError, TypeError):
                    continue

    @staticmethod
    def key(path: str) -> str | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return f"{path}|{st.st_size}|{st.st_mtime_ns}|{WORKING_IMAGE_RECIPE}"

    def get(self, key: str | None) -> str | None:
        return None if key is None else self._d.get(key)

    def add(self, items: Sequence[tuple[str, str]]) -> None:
        if not items:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.write("".join(json.dumps([k, v]) + "\n" for k, v in items))
        self._d.update(items)


def path_features(
    paths: Sequence[str],
    encoder: ImageEncoder,
    cache: FeatureCache | None,
    index: PathIndex | None = None,
    chunk: int = 512,
    workers: int = 2,
    shas_out: list[str] | None = None,
) -> np.ndarray:
    """Features (N, D) float32 of the working images of ``paths``, streamed in chunks.

    A path whose (size, mtime) is in ``index`` and whose features are cached is neither decoded nor
    encoded; other images are decoded in ``workers`` threads, hashed, and encoded only on a cache miss.
    ``shas_out`` (a list) receives each path's working-image pixel sha256, in order.
    """
    from concurrent.futures import ThreadPoolExecutor

    out: list[np.ndarray] = []
    with ThreadPoolExecutor(max(1, workers)) as pool:
        for start in range(0, len(paths), chunk):
            part = list(paths[start : start + chunk])
            vecs: list[np.ndarray | None] = [None] * len(part)
            shas: list[str | None] = [None] * len(part)
            keys = [PathIndex.key(p) for p in part] if index is not None else [None] * len(part)
            todo = []
            for i, (p, k) in enumerate(zip(part, keys)):
                sha = index.get(k) if index is not None else None
                hit = cache.get(sha) if (sha is not None and cache is not None) else None
                if hit is not None:
                    vecs[i] = hit
                    shas[i] = sha
                else:
                    todo.append(i)
            if todo:
                imgs = list(pool.map(working_image, [Path(part[i]) for i in todo]))
                feats = cached_features(encoder, imgs, cache)
                new = []
                for j, i in enumerate(todo):
                    vecs[i] = feats[j]
                    shas[i] = imgs[j].sha256
                    if keys[i] is not None:
                        new.append((keys[i], imgs[j].sha256))
                if index is not None:
                    index.add(new)
            if shas_out is not None:
                shas_out.extend(str(h) for h in shas)
            out.append(np.stack([np.asarray(v, np.float32) for v in vecs]))
    if not out:
        return np.zeros((0, 0), np.float32)
    return np.concatenate(out, axis=0)


@dataclass
class TrainingData:
    """Labelled finding-presence rows of one or more probe sets and one feature row per distinct image."""

    rows: pd.DataFrame  # finding, label, split, case_id, patient_id, _img (index into X), _set
    X: np.ndarray  # (n_images, D) float32
    img_split: np.ndarray  # (n_images,) lower-cased split of each image ("" when empty)
    names: list[str]
    img_sha: list[str] = dataclasses.field(default_factory=list)  # working-image pixel sha256 per image
    n_empty_split: int = 0  # labelled rows left out because their split is empty (not training data)


def gather_training(
    sets: Sequence[ProbeSet],
    encoder: ImageEncoder,
    cache_dir: str | Path | None,
    splits: Sequence[str] | None = FIT_SPLITS,
    findings: Iterable[str] | None = None,
    workers: int = 2,
) -> TrainingData:
    """Collect finding_presence rows with a label and an image (``splits`` filter; None = every row) and their
    features (cache, then encoder). With a ``splits`` filter a row whose ``split`` is empty is not training
    data: it is left out (and counted in ``n_empty_split``)."""
    parts = []
    n_empty = 0
    for ps in sets:
        df = ps.df
        cols = ["case_id", "finding", "label", "split", "image_path"]
        cols += ["patient_id"] if "patient_id" in df.columns else []
        rows = df.loc[(df["kind"] == "finding_presence") & df["image_path"].notna() & df["label"].notna(),
                      cols].copy()
        if "patient_id" not in rows.columns:
            rows["patient_id"] = None
        if splits is not None:
            sp = rows["split"].astype("string").str.strip().str.lower().fillna("")
            n_empty += int((sp == "").sum())
            rows = rows[sp.isin([s.lower() for s in splits])]
        lab = pd.to_numeric(rows["label"], errors="coerce")
        bad = ~lab.isin([0, 1])
        if bad.any():
            r = rows[bad].iloc[0]
            raise ProbeSetError(f"probe set {ps.name!r}: case {r.case_id!r}: field 'label' = {r.label!r} is not 0/1")
        rows["label"] = lab.astype(int)
        uniq = pd.unique(rows["image_path"])
        full = {p: str(ps.resolve(p)) for p in uniq}
        rows["_path"] = rows["image_path"].map(full)
        rows["_set"] = ps.name
        parts.append(rows)
    names = [ps.name for ps in sets]
    rows = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if rows.empty:
        why = (f" ({n_empty} labelled row(s) have an empty 'split' and are not training data; give them a split "
               f"or fit with splits=None to use every row)" if n_empty else "")
        raise ProbeSetError(f"probe set(s) {names} have no labelled finding_presence cases with images to fit on"
                            f"{why}")
    if findings is not None:
        for f in findings:
            if f not in DISPLAY_NAMES:
                raise ConfigError(f"unknown finding {f!r}; known: {sorted(DISPLAY_NAMES)}")
    paths = pd.unique(rows["_path"])
    for p in paths:  # fail before any encoding, naming the first case of a missing image
        if not os.path.exists(p):
            r = rows[rows["_path"] == p].iloc[0]
            raise ProbeSetError(f"case {r.case_id!r}: field 'image_path': file {p} does not exist")
    pos = {p: i for i, p in enumerate(paths)}
    rows["_img"] = rows["_path"].map(pos).astype(np.int64)
    cache = FeatureCache(cache_dir, encoder.key) if cache_dir is not None else None
    index = PathIndex(cache_dir) if cache_dir is not None else None
    shas: list[str] = []
    X = path_features(list(paths), encoder, cache, index, workers=workers, shas_out=shas)
    sp = rows.drop_duplicates("_img").set_index("_img")["split"].astype("string").str.strip().str.lower().fillna("")
    img_split = sp.reindex(range(len(paths))).fillna("").to_numpy(dtype=object)
    return TrainingData(rows.reset_index(drop=True), X, img_split, names, shas, n_empty)


OVERLAP_MODES = ("refuse", "report")


def training_overlap(data: TrainingData, audited: Sequence[ProbeSet], cache_dir: str | Path | None = None,
                     workers: int = 2) -> dict[str, Any]:
    """Training images and patients that are also in the audited probe sets.

    Images are compared by the pixel sha256 of the working image (what the probe sees: a copy of a file, or
    the same pixels in another format, is the same image); patients by ``patient_id`` (rows without one are
    not compared). Returns counts and up to five examples of each (audited case ids)."""
    train_sha = set(data.img_sha)
    train_pat = {str(p) for p in data.rows["patient_id"].dropna() if str(p).strip()}
    index = PathIndex(cache_dir) if cache_dir is not None else None
    img_hits: list[str] = []
    pat_hits: list[str] = []
    audited_names = []
    for ps in audited:
        audited_names.append(ps.name)
        df = ps.df
        if "patient_id" in df.columns:
            pid = df["patient_id"].dropna().astype(str)
            pat_hits += [f"{ps.name}:{c}" for c, p in zip(df.loc[pid.index, "case_id"], pid) if p in train_pat]
        with_img = df[df["image_path"].notna()]
        uniq = list(pd.unique(with_img["image_path"]))
        full = [str(ps.resolve(p)) for p in uniq]
        keys = [PathIndex.key(p) for p in full] if index is not None else [None] * len(full)
        sha = {}
        todo = []
        for p, f, k in zip(uniq, full, keys):
            known = index.get(k) if index is not None else None
            if known is not None:
                sha[p] = known
            elif os.path.exists(f):
                todo.append((p, f, k))
        if todo:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max(1, workers)) as pool:
                imgs = list(pool.map(working_image, [Path(f) for _, f, _ in todo]))
            for (p, _, _), im in zip(todo, imgs):
                sha[p] = im.sha256
            if index is not None:
                index.add([(k, im.sha256) for (_, _, k), im in zip(todo, imgs) if k is not None])
        img_hits += [f"{ps.name}:{c}" for c, p in zip(with_img["case_id"], with_img["image_path"])
                     if sha.get(p) in train_sha]
    return {"audited": audited_names, "n_cases_same_image": len(img_hits), "n_cases_same_patient": len(pat_hits),
            "examples_same_image": img_hits[:5], "examples_same_patient": pat_hits[:5]}


def check_overlap(data: TrainingData, audited: Sequence[ProbeSet] | None, on_overlap: str = "refuse",
                  cache_dir: str | Path | None = None, workers: int = 2) -> dict[str, Any] | None:
    """:func:`training_overlap`, then refuse (``ProbeSetError``) or report (a warning; the counts go into
    ``probe.training["overlap"]``) when any audited case shares an image or a patient with the training data."""
    if on_overlap not in OVERLAP_MODES:
        raise ConfigError(f"on_overlap must be one of {OVERLAP_MODES}, got {on_overlap!r}")
    if not audited:
        return None
    ov = training_overlap(data, audited, cache_dir, workers)
    if ov["n_cases_same_image"] or ov["n_cases_same_patient"]:
        msg = (f"vision probe: training set(s) {data.names} overlap the audited probe set(s) {ov['audited']}: "
               f"{ov['n_cases_same_image']} audited case(s) show a training image (e.g. "
               f"{ov['examples_same_image'][:3]}), {ov['n_cases_same_patient']} belong to a training patient "
               f"(e.g. {ov['examples_same_patient'][:3]})")
        if on_overlap == "refuse":
            raise ProbeSetError(msg + "; the probe would be audited on its own training data. Remove them from "
                                "the training set, or set on_overlap: report to fit anyway and record the overlap")
        warnings.warn(msg, stacklevel=2)
    return ov


def any_abnormality_targets(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(image indices, labels) for the "any acute abnormality" head: 1 = abnormal, 0 = normal.

    Abnormal: an image with a positive finding (support devices alone do not count, as CheXpert's No Finding)
    or an explicit ``no_finding`` label 1; normal: a ``no_finding`` label 0 (the builders' normal studies).
    An image that is both is left out. Absent labels of single findings say nothing about the others.
    """
    fnd, lab, img = rows["finding"].to_numpy(), rows["label"].to_numpy(), rows["_img"].to_numpy()
    abnormal = ((lab == 1) & ~np.isin(fnd, list(NOT_ABNORMAL))) | ((fnd == ANY_ABNORMALITY) & (lab == 1))
    normal = (fnd == ANY_ABNORMALITY) & (lab == 0)
    pos, neg = set(img[abnormal].tolist()), set(img[normal].tolist())
    both = pos & neg
    idx = np.array(sorted((pos | neg) - both), dtype=np.int64)
    return idx, np.array([1 if i in pos else 0 for i in idx.tolist()], dtype=int)


def fit_heads(
    data: TrainingData,
    findings: Iterable[str] | None = None,
    C: float = 1.0,
    max_iter: int = 2000,
) -> tuple[np.ndarray, np.ndarray, dict[str, Head], dict[str, str]]:
    """Scaler on the training-split images, then one L2 logistic-regression head per finding."""
    from sklearn.linear_model import LogisticRegression

    rows, X = data.rows, data.X
    explicit = findings is not None
    wanted = list(dict.fromkeys(findings)) if findings is not None else sorted(rows["finding"].dropna().unique())
    is_train = np.isin(data.img_split, list(TRAIN_SPLITS))  # an empty split is not training data
    mean, scale = standardiser(X[is_train].astype(np.float64) if is_train.any() else X.astype(np.float64))
    heads: dict[str, Head] = {}
    skipped: dict[str, str] = {}
    fnd = rows["finding"].to_numpy()
    for f in wanted:
        if f == ANY_ABNORMALITY:
            idx, y = any_abnormality_targets(rows)
            what = "image(s) (abnormal = any finding present, normal = no_finding label 0)"
        else:
            sel = fnd == f
            idx, y = rows["_img"].to_numpy()[sel], rows["label"].to_numpy()[sel]
            what = "training case(s)"
        if len(idx) == 0 or len(np.unique(y)) < 2:
            why = f"finding {f!r}: {len(idx)} {what} with labels {sorted(set(y.tolist()))}; need both classes"
            if explicit:
                raise ProbeSetError(f"probe set(s) {data.names}: {why}")
            skipped[f] = why
            continue
        Z = (X[idx].astype(np.float64) - mean) / scale
        lr = LogisticRegression(C=C, l1_ratio=0.0, max_iter=max_iter)
        lr.fit(Z, y)
        heads[f] = Head(lr.coef_[0].astype(np.float64), float(lr.intercept_[0]), len(idx), int(y.sum()))
    return mean, scale, heads, skipped


class VisionProbe(LocalModel):
    """Frozen image features + per-finding L2 logistic regression, behind the Model interface.

    Reads the prompt only to pick the head (the finding it names); answers "Yes" when P(yes) > 0.5 and
    returns first-token style ``top_logprobs`` (("Yes", log p), ("No", log(1-p))). A report-error sentence
    question or an input without an image is answered with a ``not_applicable`` error, never guessed.
    """

    modality: Modality = "vision_only"

    def __init__(
        self,
        encoder: ImageEncoder,
        mean: np.ndarray,
        scale: np.ndarray,
        heads: dict[str, Head],
        cache_dir: str | Path | None = None,
        name: str = "vision-probe",
        C: float = 1.0,
        batch_size: int = 32,
    ) -> None:
        self.encoder = encoder
        self.mean = np.asarray(mean, np.float64)
        self.scale = np.asarray(scale, np.float64)
        self.heads = dict(heads)
        self.C = C
        self.name = name
        self.batch_size = batch_size
        self.max_concurrency = 1
        self.cache = FeatureCache(cache_dir, encoder.key) if cache_dir is not None else None
        self.skipped: dict[str, str] = {}
        self.training: dict[str, Any] = {}

    # -- fitting ------------------------------------------------------------------------------------
    @classmethod
    def fit(
        cls,
        train: ProbeSet | Sequence[ProbeSet],
        encoder_path: str | Path | None = None,
        cache_dir: str | Path | None = None,
        findings: Iterable[str] | None = None,
        C: float = 1.0,
        *,
        name: str = "vision-probe",
        device: str = "auto",
        splits: Sequence[str] | None = FIT_SPLITS,
        max_iter: int = 2000,
        workers: int = 2,
        encoder: ImageEncoder | None = None,
        audited: Sequence[ProbeSet] | None = None,
        on_overlap: str = "refuse",
    ) -> VisionProbe:
        """Fit the scaler (training-split images) and one head per finding (training + validation cases).

        ``train`` is one probe set or several (e.g. ``build probe-train`` outputs of MIMIC train and
        validate); finding_presence cases with a label and an image are used. Rows whose ``split`` is empty
        are not training data (left out, counted in ``probe.training["rows_empty_split"]``); ``splits=None``
        uses every row. The ``no_finding`` head ("any acute abnormality") is fitted on abnormal images (any
        finding present) against normal ones. A requested finding with a single class is an error; with
        ``findings=None`` such findings are skipped and listed in ``probe.skipped``. ``audited``: the probe
        sets the probe will be audited on; a training image (pixel hash) or patient among them is refused
        (``on_overlap="refuse"``) or recorded in ``probe.training["overlap"]`` with a warning (``"report"``).
        """
        sets = [train] if isinstance(train, ProbeSet) else list(train)
        if not sets:
            raise ProbeSetError("no training probe set given")
        if on_overlap not in OVERLAP_MODES:
            raise ConfigError(f"on_overlap must be one of {OVERLAP_MODES}, got {on_overlap!r}")
        if encoder is None:
            encoder = ImageEncoder(encoder_path, device=device)
        data = gather_training(sets, encoder, cache_dir, splits, findings, workers)
        overlap = check_overlap(data, audited, on_overlap, cache_dir, workers)
        probe = cls._from_data(data, encoder, cache_dir, findings, C, name, max_iter)
        probe.training["overlap"] = overlap
        return probe

    @classmethod
    def _from_data(
        cls,
        data: TrainingData,
        encoder: ImageEncoder,
        cache_dir: str | Path | None,
        findings: Iterable[str] | None,
        C: float,
        name: str,
        max_iter: int,
    ) -> VisionProbe:
        mean, scale, heads, skipped = fit_heads(data, findings, C, max_iter)
        probe = cls(encoder, mean, scale, heads, cache_dir=cache_dir, name=name, C=C)
        probe.skipped = skipped
        probe.training = {
            "probe_sets": data.names,
            "images": len(data.X),
            "cases": len(data.rows),
            "rows_empty_split": data.n_empty_split,
            "heads": {f: {"n_train": h.n_train, "n_pos": h.n_pos} for f, h in heads.items()},
        }
        return probe

    # -- Model interface ----------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """Encoder identity + a hash of the scaler and every head (what changes the answers)."""
        return {
            "backend": "vision_probe",
            "encoder": self.encoder.identity(),
            "C": self.C,
            "heads": _heads_hash(self.mean, self.scale, self.heads),
        }

    def p_yes(self, finding: str, images: Sequence[ImageData]) -> np.ndarray:
        """P(yes) of ``finding``'s head for each image."""
        if finding not in self.heads:
            raise KeyError(f"vision probe has no head for finding {finding!r}; heads: {sorted(self.heads)}")
        X = cached_features(self.encoder, images, self.cache).astype(np.float64)
        return self.heads[finding].p_yes((X - self.mean) / self.scale)

    def predict(self, inputs: Sequence[ModelInput]) -> list[Response]:
        """Answer each input from its first image and the head of the finding its prompt names."""
        return _predict(inputs, self.encoder, self.cache, lambda X: [(self.mean, self.scale, self.heads)] * len(X))

    # -- persistence --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the scaler and heads to one .npz (atomic), with the encoder path and identity."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "name": self.name,
            "C": self.C,
            "encoder_path": str(self.encoder.path),
            "encoder": self.encoder.identity(),
            "heads": {
                f: {"intercept": h.intercept, "n_train": h.n_train, "n_pos": h.n_pos}
                for f, h in self.heads.items()
            },
        }
        arrays: dict[str, Any] = {"mean": self.mean, "scale": self.scale, "meta": np.array(json.dumps(meta))}
        arrays.update({f"coef__{f}": h.coef for f, h in self.heads.items()})
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        write_bytes_atomic(path, buf.getvalue())
        return path

    @classmethod
    def load(
        cls,
        path: str | Path,
        cache_dir: str | Path | None = None,
        encoder_path: str | Path | None = None,
        device: str = "auto",
    ) -> VisionProbe:
        """Read a probe saved by :meth:`save`; refuses an encoder whose identity differs from the one fitted."""
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"vision probe file {path} does not exist")
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            mean, scale = z["mean"], z["scale"]
            coefs = {k.removeprefix("coef__"): z[k] for k in z.files if k.startswith("coef__")}
        encoder = ImageEncoder(encoder_path or meta["encoder_path"], device=device)
        if encoder.identity()["fingerprint"] != meta["encoder"]["fingerprint"]:
            raise ConfigError(
                f"{path}: the probe was fitted on encoder {meta['encoder']} but {encoder.path} differs"
            )
        heads = {
            f: Head(coefs[f], float(h["intercept"]), int(h["n_train"]), int(h["n_pos"]))
            for f, h in meta["heads"].items()
        }
        return cls(encoder, mean, scale, heads, cache_dir=cache_dir, name=meta["name"], C=float(meta["C"]))


class RoutedVisionProbe(LocalModel):
    """Per-source heads in one model: e.g. MIMIC-fitted heads for MIMIC images, CheXpert-fitted for CheXpert.

    The paper fits one probe per source dataset. A model never learns which probe set an input comes from
    (it sees only pixels and the prompt), so the source is read from the pixels too: a logistic-regression
    source classifier on the same frozen features (fitted on every training image, C = ``C``) picks the
    sub-probe whose heads answer. Its cross-validated accuracy is in ``training["router_cv_accuracy"]``.
    """

    modality: Modality = "vision_only"

    def __init__(
        self,
        probes: dict[str, VisionProbe],
        router_mean: np.ndarray,
        router_scale: np.ndarray,
        router_coef: np.ndarray,
        router_intercept: np.ndarray,
        name: str = "vision-probe",
    ) -> None:
        first = next(iter(probes.values()))
        self.probes = dict(probes)
        self.sources = list(probes)
        self.encoder = first.encoder
        self.cache = first.cache
        self.router_mean = np.asarray(router_mean, np.float64)
        self.router_scale = np.asarray(router_scale, np.float64)
        self.router_coef = np.atleast_2d(np.asarray(router_coef, np.float64))
        self.router_intercept = np.atleast_1d(np.asarray(router_intercept, np.float64))
        self.name = name
        self.batch_size = first.batch_size
        self.max_concurrency = 1
        self.training: dict[str, Any] = {}

    @classmethod
    def fit(
        cls,
        train: dict[str, ProbeSet | Sequence[ProbeSet]],
        encoder_path: str | Path | None = None,
        cache_dir: str | Path | None = None,
        findings: Iterable[str] | None = None,
        C: float = 1.0,
        *,
        name: str = "vision-probe",
        device: str = "auto",
        splits: Sequence[str] | None = FIT_SPLITS,
        max_iter: int = 2000,
        workers: int = 2,
        encoder: ImageEncoder | None = None,
        audited: Sequence[ProbeSet] | None = None,
        on_overlap: str = "refuse",
    ) -> RoutedVisionProbe:
        """One :class:`VisionProbe` per source key (each on its own training sets) plus the source router;
        ``audited`` / ``on_overlap`` as :meth:`VisionProbe.fit`, checked per source."""
        from sklearn.linear_model import LogisticRegression
        from sklearn.model_selection import StratifiedKFold, cross_val_score

        if len(train) < 2:
            raise ConfigError(f"per-source training needs at least two sources, got {sorted(train)}")
        if encoder is None:
            encoder = ImageEncoder(encoder_path, device=device)
        probes: dict[str, VisionProbe] = {}
        feats: list[np.ndarray] = []
        ys: list[np.ndarray] = []
        for k, (src, sets) in enumerate(train.items()):
            sets_l = [sets] if isinstance(sets, ProbeSet) else list(sets)
            data = gather_training(sets_l, encoder, cache_dir, splits, findings, workers)
            overlap = check_overlap(data, audited, on_overlap, cache_dir, workers)
            probes[src] = VisionProbe._from_data(data, encoder, cache_dir, findings, C, f"{name}[{src}]", max_iter)
            probes[src].training["overlap"] = overlap
            feats.append(data.X)
            ys.append(np.full(len(data.X), k))
        X = np.concatenate(feats).astype(np.float64)
        y = np.concatenate(ys)
        mean, scale = standardiser(X)
        Z = (X - mean) / scale
        router = LogisticRegression(C=C, l1_ratio=0.0, max_iter=max_iter).fit(Z, y)
        folds = int(min(5, np.bincount(y).min()))
        cv = None
        if folds >= 2:
            skf = StratifiedKFold(folds, shuffle=True, random_state=42)
            est = LogisticRegression(C=C, l1_ratio=0.0, max_iter=max_iter)
            cv = float(cross_val_score(est, Z, y, cv=skf).mean())
        model = cls(probes, mean, scale, router.coef_, router.intercept_, name=name)
        model.training = {
            "sources": {s: p.training for s, p in probes.items()},
            "router_train_accuracy": float((router.predict(Z) == y).mean()),
            "router_cv_accuracy": cv,
        }
        return model

    def route(self, X: np.ndarray) -> np.ndarray:
        """Index (into ``sources``) of the source each feature row resembles."""
        Z = (np.asarray(X, np.float64) - self.router_mean) / self.router_scale
        s = Z @ self.router_coef.T + self.router_intercept
        if s.shape[1] == 1:  # binary: sklearn keeps one score column for class 1
            return (s[:, 0] > 0).astype(int)
        return np.argmax(s, axis=1)

    def identity(self) -> dict[str, Any]:
        h = hashlib.sha256()
        for a in (self.router_mean, self.router_scale, self.router_coef, self.router_intercept):
            h.update(np.ascontiguousarray(a).tobytes())
        return {
            "backend": "vision_probe",
            "encoder": self.encoder.identity(),
            "sources": {s: p.identity()["heads"] for s, p in self.probes.items()},
            "router": h.hexdigest()[:16],
        }

    def predict(self, inputs: Sequence[ModelInput]) -> list[Response]:
        def pick(X: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, dict[str, Head]]]:
            out = []
            for k in self.route(X).tolist():
                p = self.probes[self.sources[k]]
                out.append((p.mean, p.scale, p.heads))
            return out

        return _predict(inputs, self.encoder, self.cache, pick)


def _heads_hash(mean: np.ndarray, scale: np.ndarray, heads: dict[str, Head]) -> str:
    h = hashlib.sha256()
    h.update(mean.tobytes())
    h.update(scale.tobytes())
    for f in sorted(heads):
        hd = heads[f]
        h.update(f.encode())
        h.update(hd.coef.tobytes())
        h.update(repr(hd.intercept).encode())
    return h.hexdigest()[:16]


def _sentence_prefixes() -> tuple[str, ...]:
    try:
        from medvlm_audit.suites.grounding.prompts import SENTENCE_TEMPLATES
    except ImportError:  # pragma: no cover - depends on the tree
        return ()
    return tuple(t.split("{sentence}")[0].strip().lower() for t in SENTENCE_TEMPLATES.values())


_SENTENCE_PREFIXES = _sentence_prefixes()


def is_sentence_question(prompt: str) -> bool:
    """True for the report-error question ("Does the following sentence accurately describe ...")."""
    low = prompt.strip().lower()
    return any(p and low.startswith(p) for p in _SENTENCE_PREFIXES)


def _predict(
    inputs: Sequence[ModelInput],
    encoder: ImageEncoder,
    cache: FeatureCache | None,
    pick: Callable[[np.ndarray], list[tuple[np.ndarray, np.ndarray, dict[str, Head]]]],
) -> list[Response]:
    """Shared answer loop: validate each input, encode the distinct images once, apply the picked head."""
    t0 = time.perf_counter()
    out: list[Response | None] = [None] * len(inputs)
    todo: list[tuple[int, str]] = []
    for i, inp in enumerate(inputs):
        if is_sentence_question(inp.prompt):
            out[i] = _not_applicable("the vision-only probe answers finding-presence questions only; a "
                                     "report-error sentence question is not applicable to it")
            continue
        finding = finding_of(inp.prompt)
        if not inp.images:
            out[i] = _not_applicable("the vision-only probe needs an image; the input has none")
        elif finding is None:
            out[i] = _error(f"the prompt names no known finding: {inp.prompt[:80]!r}")
        else:
            todo.append((i, finding))
    if todo:
        try:
            X = cached_features(encoder, [inputs[i].images[0] for i, _ in todo], cache).astype(np.float64)
            picked = pick(X)
        except Exception as e:  # noqa: BLE001 - recorded per input, the run goes on
            for i, _ in todo:
                out[i] = _error(f"{type(e).__name__}: {e}")
            todo = []
        latency = (time.perf_counter() - t0) / max(1, len(inputs))
        for row, (i, finding) in enumerate(todo):
            mean, scale, heads = picked[row]
            if finding not in heads:
                out[i] = _error(f"no probe head for finding {finding!r}; heads: {sorted(heads)}")
                continue
            p = float(heads[finding].p_yes((X[row : row + 1] - mean) / scale)[0])
            out[i] = answer_from_probability(p, latency)
    return [r for r in out if r is not None]


def standardiser(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension mean and standard deviation (ddof=0, as sklearn's StandardScaler; 0 -> 1)."""
    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    return mean, scale


def answer_from_probability(p: float, latency_s: float | None = None) -> Response:
    """'Yes' when p > 0.5 else 'No', with (("Yes", log p), ("No", log(1 - p))) as the first-token log-probs."""
    p = min(max(p, 0.0), 1.0)
    lp_yes = math.log(max(p, 1e-300))  # finite, so the store's JSON stays standard
    lp_no = math.log(max(1.0 - p, 1e-300))
    top = (("Yes", lp_yes), ("No", lp_no)) if p > 0.5 else (("No", lp_no), ("Yes", lp_yes))
    return Response(
        text="Yes" if p > 0.5 else "No",
        top_logprobs=top,
        finish_reason="stop",
        prompt_tokens=None,
        completion_tokens=1,
        latency_s=latency_s,
    )


def _error(message: str) -> Response:
    return Response(text=None, error=ErrorInfo(kind="model", message=message))


def _not_applicable(message: str) -> Response:
    return Response(text=None, error=ErrorInfo(kind="not_applicable", message=message))


__all__ = [
    "FeatureCache",
    "Head",
    "ImageEncoder",
    "PathIndex",
    "RoutedVisionProbe",
    "TrainingData",
    "VisionProbe",
    "answer_from_probability",
    "any_abnormality_targets",
    "cached_features",
    "check_overlap",
    "finding_of",
    "fit_heads",
    "gather_training",
    "is_sentence_question",
    "path_features",
    "pixel_sha256",
    "standardiser",
    "training_overlap",
    "working_image",
]


def build_vision_probe(name: str, params: dict[str, Any], context: dict[str, Any]) -> Any:
    """``train``: one training probe-set folder, a list of them (fitted together), or a mapping
    source -> folder(s) for per-source heads (e.g. ``{mimic: [...], chexpert: [...]}``, routed by a source
    classifier on the same features). Other keys go to :meth:`VisionProbe.fit` (``encoder_path``,
    ``cache_dir``, ``findings``, ``C``, ``device``, ``splits``, ``max_iter``, ``workers``, ``on_overlap``).
    ``audited``: probe-set folder(s) the probe is audited on (the grounding suite fills in the run's probe
    sets); training images or patients among them are refused, or reported with ``on_overlap: report``."""
    from medvlm_audit.suites.grounding.probeset import ProbeSet

    params = dict(params)
    train = params.pop("train", None)
    audited_paths = params.pop("audited", None)
    if train is None or params.get("encoder_path") is None:
        raise ConfigError(f"model {name!r}: backend 'vision_probe' needs 'train' (training probe set folder(s)) "
                          "and 'encoder_path' (a local image-encoder folder, e.g. microsoft/rad-dino)")

    def sets(value: Any, where: str) -> list[ProbeSet]:
        paths = [value] if isinstance(value, str) else list(value or [])
        if not paths or not all(isinstance(p, str) for p in paths):
            raise ConfigError(f"model {name!r}: {where} must be a probe-set folder or a list of them, got {value!r}")
        # fit() checks every image it reads; the row-by-row file check of a 200k-study training set is skipped
        return [ProbeSet.load(p, validate=False) for p in paths]

    if audited_paths:
        params["audited"] = sets(audited_paths, "audited")
    if isinstance(train, dict):
        model: Any = RoutedVisionProbe.fit({str(k): sets(v, f"train.{k}") for k, v in train.items()},
                                             name=name, **params)
    else:
        model = VisionProbe.fit(sets(train, "train"), name=name, **params)
    model.name = name
    return model
