"""The CheXpert generalization probe set (paper 000, Methods; Supplementary Table 9).

Reads CheXpert-v1.0 label CSVs (``train.csv``/``valid.csv``: Path, Sex, Age, Frontal/Lateral, AP/PA and the 14
labels encoded 1.0 / 0.0 / -1.0 / blank). 50 present / 50 absent frontal studies per finding plus 100 normals
from the test split, swap partners drawn within CheXpert; no boxes, so only original and swap conditions apply.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.datasets.common import (
    CHEXPERT_COLUMNS,
    CHEXPERT_FINDINGS,
    NEG,
    POS,
    SEED,
    BuildResult,
    DatasetError,
    ExclusionLog,
    SwapPool,
    apply_filters,
    assign_swaps,
    checker_for,
    decode_chexpert,
    finalize,
    normalize_sex,
    normalize_view,
    one_image_per_study,
    read_csv,
    sample_label_strata,
    stratum_rng,
    view_reasons,
)

REQUIRED = ["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA", *CHEXPERT_COLUMNS]
_PATIENT = re.compile(r"(patient\d+)")
_STUDY = re.compile(r"(patient\d+/study\d+)")


def chexpert_patient_split(patients: pd.Series, test_fraction: float = 0.2, seed: int = SEED) -> pd.Series:
    """Deterministic patient-level split: a seeded ``test_fraction`` of patients -> "test", the rest "train".

    The paper's released code used such a 20 % held-out split of CheXpert (its vision probe trains on the rest).
    """
    uniq = np.array(sorted(pd.unique(patients.astype(str))))
    perm = stratum_rng(seed, "chexpert_split").permutation(len(uniq))
    n_test = round(test_fraction * len(uniq))
    test = set(uniq[perm[:n_test]].tolist())
    return pd.Series(np.where([p in test for p in patients.astype(str)], "test", "train"), index=patients.index)


def load_chexpert_labels(
    chexpert_root: Path, labels_csv: Path | None = None
) -> tuple[pd.DataFrame, dict[str, Path], Path]:
    """All labelled images (train.csv + valid.csv, or one given CSV) with decoded states; returns image root."""
    root = Path(chexpert_root)
    files: dict[str, Path] = {}
    if labels_csv is not None:
        files["labels"] = Path(labels_csv)
    else:
        for name in ("train", "valid"):
            if (root / f"{name}.csv").is_file():
                files[name] = root / f"{name}.csv"
        if not files:
            raise DatasetError(f"CheXpert: neither {root / 'train.csv'} nor {root / 'valid.csv'} exists "
                               "(pass labels_csv for another label file in the CheXpert format)")
    parts = []
    for tag, f in files.items():
        df = read_csv(f, REQUIRED, "CheXpert labels", dtype={"Path": str, "AP/PA": str, "Frontal/Lateral": str})
        states = {fid: decode_chexpert(df[col], f, col) for col, fid in CHEXPERT_COLUMNS.items()}
        df = df.assign(**states)
        if "split" not in df.columns:
            df["split"] = None if tag != "valid" else "validate"  # MIMIC's name for it
        df["_file"] = str(f)
        parts.append(df)
    df = pd.concat(parts, ignore_index=True)
    dup = df["Path"].duplicated()
    if dup.any():
        raise DatasetError(f"CheXpert: image Path {df['Path'][dup].iloc[0]!r} is listed more than once across {list(files.values())}")
    first = df["Path"].iloc[0].split("/")[0] if len(df) else ""
    image_root = root.parent if first == root.name else root
    df["patient_id"] = df["Path"].str.extract(_PATIENT, expand=False)
    df["study_id"] = df["Path"].str.extract(_STUDY, expand=False)
    if df["patient_id"].isna().any():
        bad = df.loc[df["patient_id"].isna(), "Path"].iloc[0]
        raise DatasetError(f"CheXpert: Path {bad!r} has no patientNNNNN component")
    df["record_id"] = df["Path"]
    df["image_path"] = df["Path"]
    df["sex"] = normalize_sex(df["Sex"])
    df["age"] = pd.to_numeric(df["Age"], errors="coerce").astype(float)
    fl = normalize_view(df["Frontal/Lateral"])
    ap = normalize_view(df["AP/PA"])
    df["view"] = np.where(fl == "FRONTAL", ap, np.where(fl == "LATERAL", "LATERAL", fl))
    df["view"] = df["view"].astype(str)
    return df, files, image_root


def build_chexpert(
    chexpert_root: str | Path,
    out_dir: str | Path,
    *,
    labels_csv: str | Path | None = None,
    split: str = "test",
    test_fraction: float = 0.2,
    per_finding: int = 50,
    n_normal: int = 100,
    negatives: str = "explicit",
    swap_same_view: bool = False,
    check_images: bool = True,
    full_decode: bool = False,
    workers: int = 2,
    seed: int = SEED,
    name: str = "chexpert",
    verbose: bool = True,
    fingerprint_inputs: bool = True,
) -> BuildResult:
    """Build the CheXpert generalization set: 50/50 per finding + 100 normals from ``split`` (1,380 in the paper).

    Rows without a ``split`` column value are assigned by :func:`chexpert_patient_split`; ``split="all"`` uses
    every image (e.g. the official 500-study test labels passed as ``labels_csv``).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = ExclusionLog()
    df, files, image_root = load_chexpert_labels(Path(chexpert_root), None if labels_csv is None else Path(labels_csv))
    checker = checker_for(out_dir, image_root, check_images, workers, full_decode)
    unassigned = df["split"].isna()
    if unassigned.any():
        df.loc[unassigned, "split"] = chexpert_patient_split(df.loc[unassigned, "patient_id"], test_fraction, seed)
    df["vreason"] = view_reasons(df["view"])
    df["split"] = df["split"].astype(str)
    pool = df if split == "all" else df[df["split"] == split]
    if pool.empty:
        raise DatasetError(f"CheXpert: no image in split {split!r}; splits present: {sorted(df['split'].unique())}")
    dreason = pd.Series([None] * len(pool), index=pool.index, dtype=object)
    dreason[pool["sex"].isna()] = "missing sex (Sex is Unknown or blank)"
    dreason[(pool["age"] < 0) | (pool["age"] > 120)] = "implausible age (outside 0-120 years)"
    dreason[pool["age"].isna()] = "missing age"
    pool = apply_filters(pool, [("chexpert:view", pool["vreason"]), ("chexpert:demographics", dreason)], log, "chexpert")
    pool = one_image_per_study(pool, log, "chexpert", "chexpert:one_image_per_study", "Path")
    cases, shortfalls, info = sample_label_strata(
        pool, findings=CHEXPERT_FINDINGS, per_finding=per_finding, n_normal=n_normal, negatives=negatives,
        seed=seed, prefix="chexpert", source="chexpert", log=log, checker=checker,
        eligible="frontal PA/AP, complete age/sex, certain label, one per patient")
    lab_word = np.where(cases["finding"] == "no_finding", "normal", np.where(cases["label"] == 1, "present", "absent"))
    cases["case_id"] = ("chexpert-" + cases["finding"] + "-" + lab_word + "-"
                        + cases["Path"].str.replace(r"^.*?(patient)", r"\1", regex=True).str.replace("/", "_").str.replace(".jpg", "", regex=False))
    cases = cases.assign(kind="finding_presence", source="chexpert")
    swap_src = df[df["vreason"].isna()].sort_values("Path")
    keys: dict[str, np.ndarray] = {}
    for f in CHEXPERT_COLUMNS.values():
        st = swap_src[f].to_numpy()
        keys[f"{f}=1"], keys[f"{f}=0"] = np.flatnonzero(st == POS), np.flatnonzero(st == NEG)
    pool_s = SwapPool(swap_src["image_path"].to_numpy(), swap_src["patient_id"].to_numpy(), keys, swap_src["view"].to_numpy())
    cases = assign_swaps(cases, pool_s, "swap_key", seed, log, "chexpert", checker, swap_same_view)
    cases["image_width"] = cases.get("_checked_w")
    cases["image_height"] = cases.get("_checked_h")
    keep = ["case_id", "kind", "label", "finding", "image_path", "image_width", "image_height", "swap_image_path",
            "swap_patient_id", "patient_id", "study_id", "age", "sex", "view", "source", "split", "finding_state",
            "stratum", "swap_match"]
    manifest = cases[keep].copy()
    counts = {"chexpert": len(manifest), "total": len(manifest)}
    params: dict[str, Any] = {
        "split": split, "test_fraction": test_fraction, "per_finding": per_finding, "n_normal": n_normal,
        "negatives": negatives, "swap_same_view": swap_same_view, "check_images": check_images,
        "normal_question": "no_finding: 'Is any acute abnormality present ...?' with correct answer No (label 0)",
    }
    return finalize(manifest, name=name, builder="chexpert", image_root=image_root, out_dir=out_dir, params=params,
                    inputs=files, log=log, shortfalls=shortfalls, counts=counts, checker=checker, seed=seed,
                    verbose=verbose, fingerprint=fingerprint_inputs, extra={"strata": info})
