"""Feature cache of the vision-only probe: features for N images with an empty (cold) vs a filled (warm) cache.

Baseline: encoding with no cache at all. Cold = encode + write each feature (atomic .npy); warm = read them
back (a second run of the audit). The encoder is a random DINOv2 (default ViT at 224 px, hidden 192, 4 layers,
patch 16) built from a config, or any local transformers image model given with --encoder (e.g. RAD-DINO).
Prints wall times, ms per image and the ratios, and checks the warm run ran zero encoder passes.

Then VisionProbe.fit on --fit-n training images written as 1024 x 1024 PNGs (two findings each): a cold fit
(decode, resize to 224, hash, encode, cache), a warm fit (path index + feature cache: nothing decoded, nothing
encoded) and, as the baseline the path index removes, a warm fit without it (every image decoded and hashed to
find its cached features). Checks the warm fit decoded 0 images and ran 0 encoder passes.

Usage:  .venv/bin/python benchmarks/bench_vision_probe.py [--n 200] [--fit-n 200] [--encoder PATH] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from medvlm_audit.models.base import ImageData
from medvlm_audit.suites.grounding import vision_probe as vp
from medvlm_audit.suites.grounding.probeset import ProbeSet
from medvlm_audit.suites.grounding.vision_probe import (
    PATH_INDEX,
    FeatureCache,
    ImageEncoder,
    VisionProbe,
    cached_features,
)
from medvlm_audit.testing.tiny_models import build_tiny_vit


def images(n: int, res: int = 224, seed: int = 42) -> list[ImageData]:
    """n distinct grayscale images at the working resolution (noise + a bright disc at a random place)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:res, :res]
    out = []
    for _ in range(n):
        a = rng.normal(90, 20, (res, res))
        cy, cx = rng.integers(30, res - 30, 2)
        a[(yy - cy) ** 2 + (xx - cx) ** 2 < 25**2] = 230
        out.append(ImageData.from_array(np.clip(a, 0, 255).astype(np.uint8)))
    return out


def training_set(folder: Path, n: int, seed: int = 7) -> ProbeSet:
    """n 1024 x 1024 PNG radiograph stand-ins, each asked about two findings (a bright disc = present)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:1024, :1024]
    rows = []
    for i in range(n):
        a = rng.normal(90, 20, (1024, 1024))
        labels = {"pleural_effusion": int(rng.random() < 0.5), "pneumothorax": int(rng.random() < 0.5)}
        for (f, on), (cy, cx) in zip(labels.items(), ((760, 280), (240, 760))):
            if on:
                a[(yy - cy) ** 2 + (xx - cx) ** 2 < 140**2] = 230
        Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(folder / f"img{i:04d}.png", compress_level=1)
        for f, lab in labels.items():
            rows.append({"case_id": f"{i}-{f}", "kind": "finding_presence", "finding": f, "label": lab,
                         "image_path": f"img{i:04d}.png", "split": "train" if i % 5 else "validate"})
    return ProbeSet(pd.DataFrame(rows), folder, name="bench-train")


def bench_fit(enc_path: Path, tmp: Path, n: int) -> None:
    (tmp / "train").mkdir()
    train = training_set(tmp / "train", n)
    decoded = [0]
    real = vp.working_image

    def counting(path, *a):
        decoded[0] += 1
        return real(path, *a)

    vp.working_image = counting
    try:
        runs = {}
        for label in ("cold", "warm", "warm, no path index"):
            if label == "warm, no path index":
                (tmp / "fcache" / PATH_INDEX).unlink()
            decoded[0] = 0
            t = time.perf_counter()
            probe = VisionProbe.fit(train, enc_path, tmp / "fcache", device="cpu")
            runs[label] = (time.perf_counter() - t, decoded[0], probe.encoder.n_forward, probe.encoder.n_images)
    finally:
        vp.working_image = real
    assert runs["warm"][1:] == (0, 0, 0), "a warm fit must neither decode nor encode"
    print(f"fit on {n} training images (1024x1024 PNG, 2 findings each):")
    for label, (sec, dec, fwd, imgs) in runs.items():
        print(f"  {label:20s}: {sec:8.3f} s  {1000 * sec / n:8.3f} ms/image  decoded {dec}  encoder passes {fwd}"
              f"  encoded {imgs}")
    print(f"  ratio cold/warm          : {runs['cold'][0] / runs['warm'][0]:8.1f}x")
    print(f"  ratio no-index/warm      : {runs['warm, no path index'][0] / runs['warm'][0]:8.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--encoder", type=Path, default=None)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--fit-n", type=int, default=200)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        enc_path = args.encoder or build_tiny_vit(
            Path(tmp) / "encoder", image_size=224, hidden_size=192, num_layers=4, num_heads=3, patch_size=16
        )
        enc = ImageEncoder(enc_path, device="cpu", batch_size=args.batch_size)
        imgs = images(args.n)
        enc.encode([imgs[0].pixels])  # warm up torch kernels, not timed

        t = time.perf_counter()
        base = cached_features(enc, imgs, None)
        t_none = time.perf_counter() - t

        cache = FeatureCache(Path(tmp) / "cache", enc.key)
        t = time.perf_counter()
        cold = cached_features(enc, imgs, cache)
        t_cold = time.perf_counter() - t

        before = enc.n_forward
        cache2 = FeatureCache(Path(tmp) / "cache", enc.key)  # a fresh object: nothing held in memory
        t = time.perf_counter()
        warm = cached_features(enc, imgs, cache2)
        t_warm = time.perf_counter() - t
        warm_passes = enc.n_forward - before
        if args.fit_n > 0:
            fit_tmp = Path(tmp) / "fit"
            fit_tmp.mkdir()
            bench_fit(Path(enc_path), fit_tmp, args.fit_n)

    assert warm_passes == 0, "warm run must not encode"
    assert np.array_equal(cold, warm) and np.allclose(base, cold, atol=1e-5)
    n, dim = cold.shape
    print(f"encoder: {enc.identity()['encoder']}  feature dim {dim}  images {n}  batch {args.batch_size}")
    print(f"no cache (encode only) : {t_none:8.3f} s  {1000 * t_none / n:8.3f} ms/image")
    print(f"cold cache (encode+put): {t_cold:8.3f} s  {1000 * t_cold / n:8.3f} ms/image")
    print(
        f"warm cache (read only) : {t_warm:8.3f} s  {1000 * t_warm / n:8.3f} ms/image  encoder passes: {warm_passes}"
    )
    print(f"ratio cold/warm        : {t_cold / t_warm:8.1f}x")
    print(f"ratio cold/no-cache    : {t_cold / t_none:8.3f}  (cache write overhead)")


if __name__ == "__main__":
    main()
