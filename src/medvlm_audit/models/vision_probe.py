"""Vision-only baseline (paper 000, Methods): a logistic-regression probe per finding on frozen image features.

Features are the encoder's final-block class-token embedding at its native resolution (its own image
processor resamples and normalises; RAD-DINO ``microsoft/rad-dino`` or any transformers image model in a
local folder), standardised per dimension on the training split. One L2 logistic-regression head
(C = 1.0) per finding is fitted on the training (+ validation) cases; at inference P(yes) comes from
the head of the finding named in the prompt (the only thing the probe reads from the text), and the
answer is "Yes" when P(yes) > 0.5. Features are cached on disk by pixel sha256 and encoder identity.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

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
from medvlm_audit.probeset import ProbeSet

WORKING_RES = 224
TRAIN_SPLITS = ("train",)
FIT_SPLITS = ("train", "validate", "validation", "val")

_shared_finding_from_prompt: Callable[[str], str | None] | None
try:  # the shared prompt parser, when present; else the private matcher below
    from medvlm_audit.prompt_parsing import finding_from_prompt as _shared_finding_from_prompt
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
        fd, tmp = tempfile.mkstemp(prefix=".tmp.", suffix=".npy", dir=p.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                np.save(fh, np.asarray(vec, dtype=np.float32), allow_pickle=False)
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


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


class VisionProbe(LocalModel):
    """Frozen image features + per-finding L2 logistic regression, behind the Model interface.

    Reads the prompt only to pick the head (the finding it names); answers "Yes" when P(yes) > 0.5 and
    returns first-token style ``top_logprobs`` (("Yes", log p), ("No", log(1-p))).
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

    # -- fitting ------------------------------------------------------------------------------------
    @classmethod
    def fit(
        cls,
        train: ProbeSet,
        encoder_path: str | Path,
        cache_dir: str | Path | None = None,
        findings: Iterable[str] | None = None,
        C: float = 1.0,
        *,
        name: str = "vision-probe",
        device: str = "auto",
        splits: Sequence[str] | None = FIT_SPLITS,
        max_iter: int = 2000,
    ) -> VisionProbe:
        """Fit the scaler (training split) and one head per finding (training + validation cases).

        Uses finding_presence cases with a label and an image. Rows whose ``split`` is empty count as
        training; ``splits=None`` uses every row. A requested finding with a single class is an error;
        with ``findings=None`` such findings are skipped and listed in ``probe.skipped``.
        """
        from sklearn.linear_model import LogisticRegression

        encoder = ImageEncoder(encoder_path, device=device)
        df = train.df
        rows = df[(df["kind"] == "finding_presence") & df["image_path"].notna() & df["label"].notna()]
        if splits is not None:
            split = rows["split"].astype("string").str.lower()
            rows = rows[split.isna() | split.isin([s.lower() for s in splits])]
        if rows.empty:
            raise ProbeSetError(
                f"probe set {train.name!r} has no labelled finding_presence cases with images to fit on"
            )
        wanted = (
            list(dict.fromkeys(findings))
            if findings is not None
            else sorted(rows["finding"].dropna().unique())
        )
        for f in wanted:
            if f not in DISPLAY_NAMES:
                raise ConfigError(f"unknown finding {f!r}; known: {sorted(DISPLAY_NAMES)}")
        rows = rows[rows["finding"].isin(wanted)]

        images: dict[str, ImageData] = {}
        row_sha: list[str] = []
        for r in rows.itertuples(index=False):
            p = train.resolve(r.image_path)
            if p is None or not p.exists():
                raise ProbeSetError(f"case {r.case_id!r}: field 'image_path': file {p} does not exist")
            key = str(p)
            if key not in images:
                images[key] = working_image(p)
            row_sha.append(images[key].sha256)
        distinct = {im.sha256: im for im in images.values()}
        cache = FeatureCache(cache_dir, encoder.key) if cache_dir is not None else None
        shas = list(distinct)
        feat = dict(zip(shas, cached_features(encoder, [distinct[s] for s in shas], cache)))
        X = np.stack([feat[s] for s in row_sha]).astype(np.float64)

        split = rows["split"].astype("string").str.lower()
        is_train = (split.isna() | split.isin(TRAIN_SPLITS)).to_numpy()
        mean, scale = standardiser(X[is_train] if is_train.any() else X)
        Z = (X - mean) / scale
        labels = rows["label"].astype(int).to_numpy()
        fnd = rows["finding"].to_numpy()
        heads: dict[str, Head] = {}
        skipped: dict[str, str] = {}
        for f in wanted:
            sel = fnd == f
            y = labels[sel]
            if sel.sum() == 0 or len(np.unique(y)) < 2:
                why = f"finding {f!r}: {int(sel.sum())} training case(s) with labels {sorted(set(y.tolist()))}; need both classes"
                if findings is not None:
                    raise ProbeSetError(f"probe set {train.name!r}: {why}")
                skipped[f] = why
                continue
            lr = LogisticRegression(C=C, l1_ratio=0.0, max_iter=max_iter)
            lr.fit(Z[sel], y)
            heads[f] = Head(
                lr.coef_[0].astype(np.float64), float(lr.intercept_[0]), int(sel.sum()), int(y.sum())
            )
        probe = cls(encoder, mean, scale, heads, cache_dir=cache_dir, name=name, C=C)
        probe.skipped = skipped
        return probe

    # -- Model interface ----------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """Encoder identity + a hash of the scaler and every head (what changes the answers)."""
        h = hashlib.sha256()
        h.update(self.mean.tobytes())
        h.update(self.scale.tobytes())
        for f in sorted(self.heads):
            hd = self.heads[f]
            h.update(f.encode())
            h.update(hd.coef.tobytes())
            h.update(repr(hd.intercept).encode())
        return {
            "backend": "vision_probe",
            "encoder": self.encoder.identity(),
            "C": self.C,
            "heads": h.hexdigest()[:16],
        }

    def p_yes(self, finding: str, images: Sequence[ImageData]) -> np.ndarray:
        """P(yes) of ``finding``'s head for each image."""
        if finding not in self.heads:
            raise KeyError(f"vision probe has no head for finding {finding!r}; heads: {sorted(self.heads)}")
        X = cached_features(self.encoder, images, self.cache).astype(np.float64)
        return self.heads[finding].p_yes((X - self.mean) / self.scale)

    def predict(self, inputs: Sequence[ModelInput]) -> list[Response]:
        """Answer each input from its first image and the head of the finding its prompt names."""
        t0 = time.perf_counter()
        out: list[Response | None] = [None] * len(inputs)
        todo: list[tuple[int, str]] = []
        for i, inp in enumerate(inputs):
            finding = finding_of(inp.prompt)
            if not inp.images:
                out[i] = _error("the vision-only probe needs an image; the input has none")
            elif finding is None:
                out[i] = _error(f"the prompt names no known finding: {inp.prompt[:80]!r}")
            elif finding not in self.heads:
                out[i] = _error(f"no probe head for finding {finding!r}; heads: {sorted(self.heads)}")
            else:
                todo.append((i, finding))
        if todo:
            try:
                X = cached_features(self.encoder, [inputs[i].images[0] for i, _ in todo], self.cache)
                Z = (X.astype(np.float64) - self.mean) / self.scale
            except Exception as e:  # noqa: BLE001 - recorded per input, the run goes on
                for i, _ in todo:
                    out[i] = _error(f"{type(e).__name__}: {e}")
                todo = []
            latency = (time.perf_counter() - t0) / max(1, len(inputs))
            for row, (i, finding) in enumerate(todo):
                p = float(self.heads[finding].p_yes(Z[row : row + 1])[0])
                out[i] = answer_from_probability(p, latency)
        return [r for r in out if r is not None]

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
        fd, tmp = tempfile.mkstemp(prefix=".tmp.", suffix=".npz", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, **arrays)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
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


__all__ = [
    "FeatureCache",
    "Head",
    "ImageEncoder",
    "VisionProbe",
    "answer_from_probability",
    "cached_features",
    "finding_of",
    "pixel_sha256",
    "standardiser",
    "working_image",
]
