"""The CheXpert generalization probe set (paper 000, Methods; Supplementary Table 9).

Reads CheXpert-v1.0 label CSVs (``train.csv``/``valid.csv``: Path, Sex, Age, Frontal/Lateral, AP/PA and the 14
labels encoded 1.0 / 0.0 / -1.0 / blank), or the official test set's ``test_labels.csv`` (Path + 14 labels)
joined with a demographics CSV. 50 present / 50 absent frontal studies per finding plus 100 normals from the
test split, swap partners drawn within CheXpert; no boxes, so only original and swap conditions apply.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.suites.grounding.datasets.common import (
    CHEXPERT_COLUMNS,
    CHEXPERT_FINDINGS,
    NEG,
    POS,
    SEED,
    BuildOptions,
    BuildResult,
    DatasetError,
    ExclusionLog,
    SwapPool,
    apply_filters,
    assign_swaps,
    check_unique,
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

REQUIRED = ["Path", *CHEXPERT_COLUMNS]
METADATA = ["Sex", "Age", "Frontal/Lateral", "AP/PA"]
_PATIENT = re.compile(r"(patient\d+)")
_STUDY = re.compile(r"(patient\d+/study\d+)")
_VIEW_FILE = re.compile(r"view\d+_(frontal|lateral)", re.IGNORECASE)
_IMAGE_KEY = re.compile(r"(patient\d+/study\d+/view\d+_[a-z]+)", re.IGNORECASE)
#: accepted column names of a demographics CSV (CheXpert Plus ``df_chexpert_plus_*.csv``: path_to_image, sex,
#: age, frontal_lateral, ap_pa; the CheXpert demographics sheet saved as CSV: PATIENT, GENDER, AGE_AT_CXR)
DEMOGRAPHIC_ALIASES: dict[str, tuple[str, ...]] = {
    "path": ("Path", "path_to_image", "path", "image_path"),
    "patient": ("patient_id", "PATIENT", "deid_patient_id", "patient"),
    "Sex": ("Sex", "sex", "GENDER", "gender"),
    "Age": ("Age", "age", "AGE_AT_CXR", "age_at_cxr"),
    "Frontal/Lateral": ("Frontal/Lateral", "frontal_lateral"),
    "AP/PA": ("AP/PA", "ap_pa"),
}
#: view code of a frontal image whose AP/PA projection no input gives (kept: it is frontal)
FRONTAL_UNKNOWN = "FRONTAL"


def chexpert_patient_split(patients: pd.Series, test_fraction: float = 0.2, seed: int = SEED) -> pd.Series:
    """Deterministic patient-level split: a seeded ``test_fraction`` of patients -> "test", the rest "train".

    The paper's released code used such a 20 % held-out split of CheXpert (its vision probe trains on the rest).
    """
    uniq = np.array(sorted(pd.unique(patients.astype(str))))
    perm = stratum_rng(seed, "chexpert_split").permutation(len(uniq))
    n_test = round(test_fraction * len(uniq))
    test = set(uniq[perm[:n_test]].tolist())
    return pd.Series(np.where([p in test for p in patients.astype(str)], "test", "train"), index=patients.index)


def _alias(df: pd.DataFrame, key: str) -> str | None:
    return next((c for c in DEMOGRAPHIC_ALIASES[key] if c in df.columns), None)


def join_demographics(df: pd.DataFrame, demographics_csv: Path) -> pd.DataFrame:
    """Fill Sex / Age / Frontal/Lateral / AP/PA that the label CSV lacks from a demographics CSV keyed by image
    path (matched on ``patientN/studyN/viewN_x``, so release prefixes and extensions may differ) or by patient
    id (``patient00001`` or 1). Images without a demographics row keep empty values (excluded later with the
    reason); a key listed twice in the demographics CSV is an error."""
    demo = read_csv(demographics_csv, [], "CheXpert demographics", dtype=str)
    pcol, kcol = _alias(demo, "path"), _alias(demo, "patient")
    fill = [c for c in METADATA if c not in df.columns and _alias(demo, c) is not None]
    if pcol is None and kcol is None:
        raise DatasetError(f"CheXpert demographics: {demographics_csv} has neither an image path column "
                           f"{DEMOGRAPHIC_ALIASES['path']} nor a patient id column {DEMOGRAPHIC_ALIASES['patient']}")
    if not fill:
        raise DatasetError(f"CheXpert demographics: {demographics_csv} supplies none of the missing columns "
                           f"{[c for c in METADATA if c not in df.columns]} (accepted names: "
                           f"{ {c: DEMOGRAPHIC_ALIASES[c] for c in METADATA} })")
    if pcol is not None:
        demo["_key"] = demo[pcol].astype(str).str.extract(_IMAGE_KEY, expand=False).str.lower()
        key = df["Path"].astype(str).str.extract(_IMAGE_KEY, expand=False).str.lower()
    else:
        raw = demo[kcol].astype(str).str.strip()
        num = pd.to_numeric(raw, errors="coerce")
        demo["_key"] = raw.str.extract(_PATIENT, expand=False).where(num.isna(),
                                                                     "patient" + num.astype("Int64").astype(str).str.zfill(5))
        key = df["Path"].astype(str).str.extract(_PATIENT, expand=False)
    bad = demo["_key"].isna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        col = pcol if pcol is not None else kcol
        raise DatasetError(f"CheXpert demographics: {demographics_csv} row {i + 2} column {col!r} has value "
                           f"{demo[col].iloc[i]!r}, not a CheXpert image path or patient id")
    check_unique(demo, ["_key"], demographics_csv, "CheXpert demographics")
    d = demo.set_index("_key")
    df = df.copy()
    for c in fill:
        df[c] = key.map(d[_alias(demo, c)])
    df["_demographics_row"] = key.isin(d.index)
    return df


def load_chexpert_labels(
    chexpert_root: Path, labels_csv: Path | None = None, demographics_csv: Path | None = None,
    require_demographics: bool = True,
) -> tuple[pd.DataFrame, dict[str, Path], Path]:
    """All labelled images (train.csv + valid.csv, or one given CSV) with decoded states; returns image root.

    A label CSV has ``Path`` and the 14 labels, plus either all of Sex, Age, Frontal/Lateral, AP/PA (train.csv,
    valid.csv) or none of them (the official test set's ``test_labels.csv``), in which case
    ``demographics_csv`` supplies them; Frontal/Lateral otherwise comes from the file name
    (``view1_frontal.jpg``) and a frontal image without AP/PA gets view ``FRONTAL`` (kept, projection unknown).
    Paths under a ``test/`` folder are the official test split.
    """
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
        have = [c for c in METADATA if c in df.columns]
        if have and len(have) < len(METADATA):
            raise DatasetError(f"CheXpert labels: {f} lacks required column(s) "
                               f"{[c for c in METADATA if c not in have]} (a CheXpert label CSV has all of "
                               f"{METADATA} or, as the official test_labels.csv, none of them)")
        states = {fid: decode_chexpert(df[col], f, col) for col, fid in CHEXPERT_COLUMNS.items()}
        df = df.assign(**states)
        if "split" not in df.columns:
            df["split"] = None if tag != "valid" else "validate"  # MIMIC's name for it
        df["_file"] = str(f)
        parts.append(df)
    df = pd.concat(parts, ignore_index=True)
    dup = df["Path"].duplicated(keep=False)
    if dup.any():
        p = df.loc[dup, "Path"].iloc[0]
        where = sorted(set(df.loc[df["Path"] == p, "_file"]))
        raise DatasetError(f"CheXpert: image Path {p!r} is listed more than once (in {where})")
    missing = [c for c in METADATA if c not in df.columns]
    if missing and demographics_csv is not None:
        df = join_demographics(df, Path(demographics_csv))
        missing = [c for c in METADATA if c not in df.columns]
    if demographics_csv is not None and "_demographics_row" not in df:
        raise DatasetError(f"CheXpert: the label CSV(s) {list(files.values())} already carry {METADATA}; "
                           "drop --demographics-csv or the columns")
    if require_demographics and ("Sex" in missing or "Age" in missing):
        raise DatasetError(f"CheXpert labels: {list(files.values())} lack {[c for c in ('Sex', 'Age') if c in missing]}"
                           " (the official test_labels.csv has only Path and the 14 labels): pass a demographics "
                           "CSV with Path or patient id plus Sex and Age (e.g. CheXpert Plus path_to_image, sex, age)")
    first = df["Path"].iloc[0].split("/")[0] if len(df) else ""
    image_root = root.parent if first == root.name else root
    df["patient_id"] = df["Path"].str.extract(_PATIENT, expand=False)
    df["study_id"] = df["Path"].str.extract(_STUDY, expand=False)
    if df["patient_id"].isna().any():
        bad = df.loc[df["patient_id"].isna(), "Path"].iloc[0]
        raise DatasetError(f"CheXpert: Path {bad!r} has no patientNNNNN component")
    official_test = df["Path"].str.contains(r"(?:^|/)test/patient", regex=True)
    df.loc[official_test & df["split"].isna(), "split"] = "test"
    df["record_id"] = df["Path"]
    df["image_path"] = df["Path"]
    df["sex"] = normalize_sex(df["Sex"]) if "Sex" in df else None
    df["age"] = pd.to_numeric(df["Age"], errors="coerce").astype(float) if "Age" in df else np.nan
    if "Frontal/Lateral" in df:
        fl = normalize_view(df["Frontal/Lateral"])
    else:
        fl = normalize_view(df["Path"].str.extract(_VIEW_FILE, expand=False))
    if "AP/PA" in df:
        frontal_view = normalize_view(df["AP/PA"])
    else:  # no input gives the projection: the image is frontal, PA or AP unknown
        frontal_view = pd.Series(FRONTAL_UNKNOWN, index=df.index)
    df["view"] = np.where(fl == "FRONTAL", frontal_view, np.where(fl == "LATERAL", "LATERAL", fl))
    df["view"] = df["view"].astype(str)
    df.attrs["view_source"] = {
        "frontal_lateral": "label CSV" if "Frontal/Lateral" in df and "_demographics_row" not in df else
        ("demographics CSV" if "Frontal/Lateral" in df else "file name (viewN_frontal / viewN_lateral)"),
        "ap_pa": "AP/PA column" if "AP/PA" in df else f"unknown: frontal images get view {FRONTAL_UNKNOWN}",
    }
    return df, files, image_root


def chexpert_view_reasons(views: pd.Series) -> pd.Series:
    """view_reasons, with a frontal image of unknown projection (``FRONTAL``) counted as frontal."""
    r = view_reasons(views)
    r[views == FRONTAL_UNKNOWN] = None
    return r


def build_chexpert(
    chexpert_root: str | Path,
    out_dir: str | Path,
    *,
    labels_csv: str | Path | None = None,
    demographics_csv: str | Path | None = None,
    split: str = "test",
    test_fraction: float = 0.2,
    per_finding: int = 50,
    n_normal: int = 100,
    negatives: str = "explicit",
    swap_same_view: bool = False,
    options: BuildOptions | None = None,
    **option_kw: Any,
) -> BuildResult:
    """Build the CheXpert generalization set: 50/50 per finding + 100 normals from ``split`` (1,380 in the paper).

    Rows without a ``split`` column value are assigned by :func:`chexpert_patient_split` (the paper's 20 %
    patient-level held-out split), except images under a ``test/`` folder, which are the official test split.
    The official test labels (``test_labels.csv``: Path and the 14 labels only, so no Sex/Age/view) are read
    with ``labels_csv`` plus ``demographics_csv`` (Path or patient id with Sex and Age, e.g. from CheXpert
    Plus); Frontal/Lateral then comes from the file name. That set has about 500 studies, so most strata fall
    short of 50 (reported).
    """
    opts = BuildOptions.of(options, option_kw, "build_chexpert")
    out_dir = Path(out_dir)
    log = ExclusionLog()
    df, files, image_root = load_chexpert_labels(Path(chexpert_root), None if labels_csv is None else Path(labels_csv),
                                                 None if demographics_csv is None else Path(demographics_csv))
    view_source = dict(df.attrs.get("view_source", {}))
    if demographics_csv is not None:
        files = {**files, "demographics": Path(demographics_csv)}
    checker = opts.checker(out_dir, image_root)
    unassigned = df["split"].isna()
    if unassigned.any():
        df.loc[unassigned, "split"] = chexpert_patient_split(df.loc[unassigned, "patient_id"], test_fraction, opts.seed)
    df["vreason"] = chexpert_view_reasons(df["view"])
    df["split"] = df["split"].astype(str)
    pool = df if split == "all" else df[df["split"] == split]
    if pool.empty:
        raise DatasetError(f"CheXpert: no image in split {split!r}; splits present: {sorted(df['split'].unique())}")
    dreason = pd.Series([None] * len(pool), index=pool.index, dtype=object)
    dreason[pool["sex"].isna()] = "missing sex (Sex is Unknown or blank)"
    dreason[(pool["age"] < 0) | (pool["age"] > 120)] = "implausible age (outside 0-120 years)"
    dreason[pool["age"].isna()] = "missing age"
    if "_demographics_row" in pool:
        dreason[~pool["_demographics_row"].astype(bool)] = "no row for this image or patient in the demographics CSV"
    pool = apply_filters(pool, [("chexpert:view", pool["vreason"]), ("chexpert:demographics", dreason)], log, "chexpert")
    pool = one_image_per_study(pool, log, "chexpert", "chexpert:one_image_per_study", "Path")
    cases, shortfalls, info = sample_label_strata(
        pool, findings=CHEXPERT_FINDINGS, per_finding=per_finding, n_normal=n_normal, negatives=negatives,
        seed=opts.seed, prefix="chexpert", source="chexpert", log=log, checker=checker,
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
    sampled = cases[["case_id", "stratum"]].copy()
    cases = assign_swaps(cases, pool_s, "swap_key", opts.seed, log, "chexpert", checker, swap_same_view)
    cases["image_width"] = cases.get("_checked_w")
    cases["image_height"] = cases.get("_checked_h")
    keep = ["case_id", "kind", "label", "finding", "image_path", "image_width", "image_height", "swap_image_path",
            "swap_patient_id", "patient_id", "study_id", "age", "sex", "view", "source", "split", "finding_state",
            "stratum", "swap_match"]
    manifest = cases[keep].copy()
    counts = {"chexpert": len(manifest), "total": len(manifest)}
    params: dict[str, Any] = {
        "split": split, "test_fraction": test_fraction, "per_finding": per_finding, "n_normal": n_normal,
        "negatives": negatives, "swap_same_view": swap_same_view, "check_images": opts.check_images,
        "normal_question": "no_finding: 'Is any acute abnormality present ...?' with correct answer No (label 0)",
        "view_source": view_source,
    }
    return finalize(manifest, name=opts.named("chexpert"), builder="chexpert", image_root=image_root, out_dir=out_dir, params=params,
                    inputs=files, log=log, shortfalls=shortfalls, counts=counts, checker=checker, seed=opts.seed,
                    verbose=opts.verbose, fingerprint=opts.fingerprint_inputs, strata=info, sampled=sampled)
