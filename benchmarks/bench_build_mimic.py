"""Benchmark: build the paper's MIMIC probe set (2,575 cases) from a synthetic metadata tree of MIMIC's full size.

Writes MIMIC-CXR-JPG 2.0.0 CSVs (377,110 images, 227,835 studies; .csv.gz as released), MS-CXR, ReXErr-v1 and
MIMIC-IV patients into a temp folder (no images: check_images=False), then times
  baseline: reading every input CSV with pandas (the floor any builder pays),
  build:    build_mimic(...) end to end (manifest + exclusions + provenance with input sha256s),
and a small tree with images for the image checks: 1 vs 2 workers, then a resumed (cached) rerun.
Also times build_probe_train("mimic", splits train+validate) on the same tree: the vision probe's training set
(every labelled frontal study, no cap; ~221k studies x up to 14 findings).
Target: build < 60 s.  Run: .venv/bin/python benchmarks/bench_build_mimic.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "datasets"))
import dsfixtures as F

from medvlm_audit.suites.grounding.datasets.mimic import build_mimic
from medvlm_audit.suites.grounding.datasets.probe_train import build_probe_train


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", type=Path, default=None, help="write/reuse the synthetic tree here")
    args = ap.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench_mimic_"))
    tree_root = tmp / "tree"
    t0 = time.perf_counter()
    if (tree_root / "mimic-cxr-jpg").exists():
        tree = {"mimic_root": tree_root / "mimic-cxr-jpg" / "2.0.0", "ms_cxr_root": tree_root / "ms-cxr" / "1.1.0",
                "rexerr_root": tree_root / "rexerr-v1" / "1.0.0", "mimic_iv_root": tree_root / "mimiciv" / "3.1"}
        gen = 0.0
    else:
        tree = F.make_mimic_tree(tree_root)
        gen = time.perf_counter() - t0
    csvs = sorted(p for p in tree_root.rglob("*.csv*"))
    t0 = time.perf_counter()
    rows = sum(len(pd.read_csv(p)) for p in csvs)
    base = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = build_mimic(out_dir=tmp / "out", check_images=False, verbose=False, **tree)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    build_build_nofp = build_mimic(out_dir=tmp / "out2", check_images=False, verbose=False, fingerprint_inputs=False,
                                   **tree)
    build_nofp = time.perf_counter() - t0
    meta = pd.read_csv(tree["mimic_root"] / "mimic-cxr-2.0.0-metadata.csv.gz", usecols=["dicom_id", "study_id"])
    print(f"synthetic tree: {len(meta):,} images, {meta.study_id.nunique():,} studies, {rows:,} CSV rows in "
          f"{len(csvs)} files (generated in {gen:.1f} s)")
    print(f"baseline  read all input CSVs:            {base:6.2f} s")
    print(f"build     build_mimic (with sha256s):     {build:6.2f} s  ratio to baseline {build / base:4.2f}x")
    print(f"build     build_mimic (no fingerprints):  {build_nofp:6.2f} s  ratio to baseline {build_nofp / base:4.2f}x")
    c = res.counts
    print(f"cases: {c['ms_cxr']} MS-CXR + {c['mimic_cxr']} MIMIC-CXR + {c['rexerr']} ReXErr = {c['total']} "
          f"(paper: 452 + 1,400 + 723 = 2,575); shortfalls: {len(res.shortfalls)}; "
          f"identical rebuild: {build_build_nofp.probe_set.content_hash == res.probe_set.content_hash}")
    print(f"target build < 60 s: {'PASS' if build < 60 else 'FAIL'}")
    t0 = time.perf_counter()
    tr = build_probe_train("mimic", tmp / "train", mimic_root=tree["mimic_root"], check_images=False, verbose=False,
                           fingerprint_inputs=False)
    t_train = time.perf_counter() - t0
    print(f"probe-train mimic train+validate: {t_train:6.2f} s  {tr.counts['images']:,} studies, "
          f"{tr.counts['rows']:,} training rows, {len(tr.exclusions):,} exclusion rows")

    small = F.make_mimic_tree(tmp / "small", n_subjects=80, n_studies=200, n_images=300, test_every=2, n_rexerr=300,
                              ms_eligible=dict.fromkeys(F.MS_CATS, 4), images=True, size=(1024, 1280), gz=False)
    times = {}
    for w in (1, 2):
        t0 = time.perf_counter()
        r = build_mimic(out_dir=tmp / f"chk{w}", check_images=True, workers=w, full_decode=True, verbose=False, **small)
        times[w] = (time.perf_counter() - t0, r.probe_set.provenance["image_checks"])
    t0 = time.perf_counter()
    r = build_mimic(out_dir=tmp / "chk2", check_images=True, workers=2, full_decode=True, verbose=False, **small)
    resumed = (time.perf_counter() - t0, r.probe_set.provenance["image_checks"])
    print(f"image checks (full decode, 1024x1280 JPEGs): 1 worker {times[1][0]:.2f} s {times[1][1]}; "
          f"2 workers {times[2][0]:.2f} s {times[2][1]} (speed-up {times[1][0] / times[2][0]:.2f}x); "
          f"resumed rerun {resumed[0]:.2f} s {resumed[1]}")


if __name__ == "__main__":
    main()
