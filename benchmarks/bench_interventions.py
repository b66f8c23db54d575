"""Image interventions per core at 224 x 224: decode + resize + box + PNG encode, timed per image.

    flock /tmp/bench.lock .venv/bin/python benchmarks/bench_interventions.py [--seconds 3] [--rounds 3]

Every image a model sees costs, on one core: decoding its source file, resizing it to 224 x 224 (bilinear),
copying it and filling the box (masks), and PNG-encoding the result (level 1, the default for a remote server).
The runner decodes and resizes each source once and derives all of a case's conditions from that base
(original, target_mask, irrelevant_mask; the swap condition is another case's original, so its pixels come
from the same cache), so the realistic unit is one decode + resize shared by 3-4 encoded images. Reported:

* ``shared x4``: one decode + resize per 4 images (original, target_mask, irrelevant_mask, swap);
* ``shared x3``: one decode + resize per 3 images (a boxed case whose swap partner's decode is not shared);
* ``no sharing``: decode + resize for every image (the worst case: a source cache that never hits).

Nothing is decoded before the clock starts (files sit in the OS page cache after the first round, so disk
reads are not timed: this is CPU work). Rates are images per CPU-second of this single-threaded process
(``time.process_time``), i.e. per core, so other jobs on a shared machine do not deflate them; wall-clock
rates are printed beside them. Source kinds: the phantom's own 512 px PNGs; 1024 px PNGs like NIH ChestX-ray14
and 2544 x 3056 quality-95 JPEGs like MIMIC-CXR-JPG (a typical frontal), synthetic, with film grain chosen so a
file has about the dataset's average size (NIH ~0.4 MB: ~42 GB / 112,120 images; MIMIC-CXR-JPG ~1.5 MB), since
decode cost follows the compressed size.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from PIL import Image
from threadpoolctl import threadpool_limits

from medvlm_audit.boxes import irrelevant_box
from medvlm_audit.images import fill_box, load_image, resize
from medvlm_audit.models.encoding import encode_png

RES = 224
TBOX = (38, 52, 121, 150)  # a typical MS-CXR-sized box at 224 (83 x 98 px)
IBOX = irrelevant_box(TBOX, RES)[0]
#: label -> (width, height), format, film grain SD (None: the phantom's own images)
SOURCES: dict[str, tuple[tuple[int, int], str, float | None]] = {
    "phantom 512x512 PNG": ((512, 512), "png", None),
    "NIH-like 1024x1024 PNG (~0.4 MB)": ((1024, 1024), "png", 1.0),
    "MIMIC-CXR-JPG-like 2544x3056 JPEG q95 (~1.5 MB)": ((2544, 3056), "jpg", 2.0),
}


def radiograph_like(w: int, h: int, seed: int, grain: float) -> np.ndarray:
    """Smooth anatomy-like field plus film grain: compresses like a radiograph, not like a flat test card."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:h, :w].astype(np.float32)
    s = w / 512
    base = 110 + 50 * np.sin(x / (40 * s) + seed) * np.cos(y / (55 * s)) + 30 * np.exp(-((x - w / 2) / (w / 5)) ** 2)
    return np.clip(base + rng.normal(0, grain, (h, w)), 0, 255).astype(np.uint8)


def phantom_sources(folder: Path, n: int) -> list[Path]:
    from medvlm_audit.suites.grounding.phantom_probeset import build_phantom

    test, _ = build_phantom(folder, n_cases=60, n_train=60)
    return [test.resolve(p) for p in test.df["image_path"].drop_duplicates()[:n]]


def write_sources(folder: Path, size: tuple[int, int], fmt: str, n: int, grain: float) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        p = folder / f"src{i:03d}.{fmt}"
        im = Image.fromarray(radiograph_like(*size, seed=i, grain=grain))
        if fmt == "png":
            im.save(p, compress_level=6)  # how most datasets ship their PNGs
        else:
            im.save(p, quality=95)
        paths.append(p)
    return paths


def case_images(path: Path, k: int) -> int:
    """One decode + resize of a case's source, then k images: original, target mask, irrelevant mask, swap."""
    base = resize(load_image(path, "L"), RES)
    encode_png(base, 1)  # original
    if k >= 2:
        encode_png(fill_box(base, TBOX), 1)  # target_mask
    if k >= 3:
        encode_png(fill_box(base, IBOX), 1)  # irrelevant_mask
    if k >= 4:
        encode_png(base, 1)  # swap: another case's original, already decoded and resized; encoded for this request
    return k


def no_sharing(path: Path) -> int:
    """Every image decodes and resizes its source again (cycling through original / target / irrelevant)."""
    for fill in (None, TBOX, IBOX, None):
        px = resize(load_image(path, "L"), RES)
        encode_png(px if fill is None else fill_box(px, fill), 1)
    return 4


def measure(paths: list[Path], unit: Callable[[Path], int], seconds: float) -> tuple[float, float]:
    """(images per CPU-second, images per wall-second) of one thread running ``unit`` over the sources."""
    n = i = 0
    c0, t0 = time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds or i < len(paths):
        n += unit(paths[i % len(paths)])
        i += 1
    return n / (time.process_time() - c0), n / (time.perf_counter() - t0)


def stages(paths: list[Path], reps: int = 3) -> dict[str, float]:
    """Milliseconds of CPU per stage, per call (median over the sources)."""
    out: dict[str, list[float]] = {"decode": [], "resize": [], "box": [], "png": []}
    for _ in range(reps):
        for p in paths:
            c = time.process_time()
            src = load_image(p, "L")
            out["decode"].append(time.process_time() - c)
            c = time.process_time()
            base = resize(src, RES)
            out["resize"].append(time.process_time() - c)
            c = time.process_time()
            for _ in range(100):
                masked = fill_box(base, TBOX)
            out["box"].append((time.process_time() - c) / 100)
            c = time.process_time()
            for _ in range(10):
                encode_png(masked, 1)
            out["png"].append((time.process_time() - c) / 10)
    return {k: 1000 * float(np.median(v)) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-sources", type=int, default=24)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    print(f"one thread, images per CPU-second (wall in brackets); median of {args.rounds} rounds of "
          f"{args.seconds:.0f} s; target >= 300 images/s per core at 224x224")
    with threadpool_limits(1):
        for label, (size, fmt, grain) in SOURCES.items():
            if grain is None:
                paths = phantom_sources(tmp / "phantom", args.n_sources)
            else:
                paths = write_sources(tmp / fmt / f"{size[0]}x{size[1]}", size, fmt, args.n_sources, grain)
            mb = np.mean([p.stat().st_size for p in paths]) / 1e6
            for p in paths:  # into the page cache; nothing is kept decoded
                p.read_bytes()
            st = stages(paths[:8])
            print(f"\n{label}, {len(paths)} files of {mb:.2f} MB on average: CPU ms per call  decode {st['decode']:.2f}  resize->224 {st['resize']:.2f}  "
                  f"box {st['box']:.3f}  PNG encode {st['png']:.2f}")
            for name, unit in (("shared x4", lambda p: case_images(p, 4)), ("shared x3", lambda p: case_images(p, 3)),
                               ("no sharing", no_sharing)):
                cpu, wall = zip(*(measure(paths, unit, args.seconds) for _ in range(args.rounds)))
                print(f"  {name:<11} {np.median(cpu):8,.0f} images/s per core  (wall {np.median(wall):,.0f}/s)  "
                      f"rounds {[round(x) for x in cpu]}")


if __name__ == "__main__":
    main()
