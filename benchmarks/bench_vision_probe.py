"""Feature cache of the vision-only probe: features for N images with an empty (cold) vs a filled (warm) cache.

Baseline: encoding with no cache at all. Cold = encode + write each feature (atomic .npy); warm = read them
back (a second run of the audit). The encoder is a random DINOv2 (default ViT at 224 px, hidden 192, 4 layers,
patch 16) built from a config, or any local transformers image model given with --encoder (e.g. RAD-DINO).
Prints wall times, ms per image and the ratios, and checks the warm run ran zero encoder passes.

Usage:  .venv/bin/python benchmarks/bench_vision_probe.py [--n 200] [--encoder PATH] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from medvlm_audit.models.base import ImageData
from medvlm_audit.models.vision_probe import FeatureCache, ImageEncoder, cached_features
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--encoder", type=Path, default=None)
    ap.add_argument("--batch-size", type=int, default=32)
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
