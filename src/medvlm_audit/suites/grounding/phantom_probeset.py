"""Build the phantom probe set (test split, 512 px) and its training split (224 px) on disk.

``build_phantom`` renders every study image once (in parallel), writes it atomically, and saves two
probe sets; a second call with the same parameters finds the finished build and reuses it.
"""

from __future__ import annotations

import json
import math
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit import __version__
from medvlm_audit.errors import ProbeSetError
from medvlm_audit.phantom.anatomy import RenderTask, atomic_write, write_study_png
from medvlm_audit.phantom.cohort import Study, assign_swaps, attach_boxes, make_cohort, select_cases
from medvlm_audit.suites.grounding.probeset import ProbeSet

PHANTOM_VERSION = "2"  # 2: nodule among the boxed findings
TEST_SIZE = 512
TRAIN_SIZE = 224
STAMP = "phantom.json"

def _render_all(studies: list[Study], out_dir: Path, workers: int) -> None:
    tasks: list[RenderTask] = [
        (str(out_dir / s.image_path), s.findings, s.attributes, s.sex, s.age, s.view, s.seed, s.patient_seed, s.size)
        for s in studies
    ]
    by_path = {str(out_dir / s.image_path): s for s in studies}
    ctx = _pool_context()
    if workers <= 1 or len(tasks) < 64 or ctx is None:
        for path, boxes in map(write_study_png, tasks):
            by_path[path].boxes = boxes
        return
    chunk = max(8, math.ceil(len(tasks) / (workers * 4)))
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
        for path, boxes in ex.map(write_study_png, tasks, chunksize=chunk):
            by_path[path].boxes = boxes


def _pool_context() -> Any:
    """A fork context when that is safe (POSIX, no other threads running); otherwise None: render in-process.

    Spawned workers would re-import the caller's ``__main__``, which breaks plain scripts without a main guard.
    """
    if threading.active_count() > 1 or "fork" not in get_all_start_methods():
        return None
    return get_context("fork")


def _draw(n_cases: int, rng_seed: list[int], split: str, size: int) -> tuple[list[dict[str, Any]], list[Study]]:
    """Grow the cohort until it holds enough studies for every stratum of ``n_cases`` (deterministic)."""
    n_patients = max(40, math.ceil(n_cases * 0.45))
    for _ in range(8):
        rng = np.random.default_rng(rng_seed)
        studies = make_cohort(n_patients, rng, split=split, size=size)
        try:
            rows, used = select_cases(studies, n_cases, rng, split=split)
            if split == "test":
                assign_swaps(rows, {s.study_id: s for s in used}, rng)
            return rows, used
        except ValueError:
            n_patients = math.ceil(n_patients * 1.5)
    raise ProbeSetError(f"could not draw {n_cases} phantom {split} cases")  # pragma: no cover


def _stamp_params(n_cases: int, n_train: int, seed: int) -> dict[str, Any]:
    return {"builder": "phantom", "version": PHANTOM_VERSION, "n_cases": int(n_cases), "n_train": int(n_train),
            "seed": int(seed), "test_size": TEST_SIZE, "train_size": TRAIN_SIZE}


def _reuse(out_dir: Path, params: dict[str, Any]) -> tuple[ProbeSet, ProbeSet] | None:
    stamp = out_dir / STAMP
    if not stamp.exists():
        return None
    try:
        info = json.loads(stamp.read_text())
        if info.get("params") != params:
            return None
        test = ProbeSet.load(out_dir / "probeset", validate=True)
        train = ProbeSet.load(out_dir / "train", validate=True)
    except (ProbeSetError, json.JSONDecodeError, OSError):
        return None
    if test.content_hash != info.get("test_hash") or train.content_hash != info.get("train_hash"):
        return None
    return test, train


def build_phantom(out_dir: str | Path, n_cases: int = 800, n_train: int = 1500, seed: int = 42,
                  workers: int | None = None) -> tuple[ProbeSet, ProbeSet]:
    """Write the phantom images and two probe sets (``out_dir/probeset`` test, ``out_dir/train``); reuse a finished build.

    Test and training patients are disjoint. Same parameters, same bytes.
    """
    if n_cases < 60:
        raise ValueError(f"n_cases must be at least 60 (one case per stratum), got {n_cases}")
    if n_train < 60:
        raise ValueError(f"n_train must be at least 60, got {n_train}")
    out_dir = Path(out_dir)
    params = _stamp_params(n_cases, n_train, seed)
    found = _reuse(out_dir, params)
    if found is not None:
        return found
    (out_dir / "images").mkdir(parents=True, exist_ok=True)
    stamp = out_dir / STAMP
    if stamp.exists():
        stamp.unlink()  # the build below replaces whatever was here

    test_rows, test_studies = _draw(n_cases, [seed, 1], "test", TEST_SIZE)
    train_rows, train_studies = _draw(n_train, [seed, 2], "train", TRAIN_SIZE)
    if workers is None:
        workers = min(4, os.cpu_count() or 1)
    _render_all(test_studies + train_studies, out_dir, workers)
    attach_boxes(test_rows, {s.study_id: s for s in test_studies})
    attach_boxes(train_rows, {s.study_id: s for s in train_studies}, res=TRAIN_SIZE)

    # the package version is provenance, not a build parameter: a reused build keeps the version that built it
    prov = {**params, "package_version": __version__, "content": "synthetic frontal chest radiographs (phantom)"}
    test = ProbeSet(pd.DataFrame(test_rows), out_dir.resolve(), {**prov, "split": "test"}, name="phantom")
    train = ProbeSet(pd.DataFrame(train_rows), out_dir.resolve(), {**prov, "split": "train"}, name="phantom-train")
    test.validate()
    train.validate()
    test.save(out_dir / "probeset")
    train.save(out_dir / "train")
    info = {"params": params, "test_hash": test.content_hash, "train_hash": train.content_hash,
            "n_images": len(test_studies) + len(train_studies)}
    atomic_write(stamp, json.dumps(info, indent=2).encode())
    return ProbeSet.load(out_dir / "probeset"), ProbeSet.load(out_dir / "train")
