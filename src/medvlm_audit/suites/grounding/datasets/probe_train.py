"""Training sets for the vision-only probe: every labelled frontal study of the given splits (paper 000, Methods).

The paper fits the probe's per-finding heads "on the training and validation splits of the source dataset,
MIMIC-CXR for the MIMIC probe and the CheXpert training split for the CheXpert probe". This builder writes such
a training set as a probe set of ``finding_presence`` rows: one frontal image per study (PA before AP), one row
per finding with a usable label, no 50/50 cap and no MS-CXR or ReXErr input.

* label 1 = the finding is present (``1.0``); label 0 = explicit ``0.0`` and, with ``negatives =
  "explicit_or_blank"`` (default), not mentioned (blank) as well; uncertain (``-1.0``) labels are never used
  (one ``exclusions.csv`` row per image and finding).
* a No Finding = ``1.0`` study adds a ``no_finding`` row with label 0 (a normal study asked "any acute
  abnormality?"); the probe fits that head on these normals against every abnormal image.
* demographics are not needed to fit a probe (``require_demographics`` to enforce them).
* ``exclude_probe_sets``: studies whose images are cases of these probe sets are left out (e.g. the MS-CXR
  cases of the MIMIC probe set come from MIMIC train/validate; the paper does not remove them).

Every dropped record is logged with its reason; counts per finding go to the provenance.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.suites.grounding.datasets.common import (
    BLANK,
    CHEXPERT_FINDINGS,
    NEG,
    POS,
    UNC,
    BuildOptions,
    BuildResult,
    DatasetError,
    ExclusionLog,
    apply_filters,
    finalize,
    isin,
    one_image_per_study,
)
from medvlm_audit.suites.grounding.probeset import ProbeSet

TRAIN_SOURCES = ("mimic", "chexpert")
DEFAULT_SPLITS = {"mimic": ("train", "validate"), "chexpert": ("train",)}
TRAIN_NEGATIVES = ("explicit_or_blank", "explicit")


def _demographic_reason(pool: pd.DataFrame) -> pd.Series:
    r = pd.Series([None] * len(pool), index=pool.index, dtype=object)
    r[pool["sex"].isna()] = "missing sex"
    r[(pool["age"] < 0) | (pool["age"] > 120)] = "implausible age (outside 0-120 years)"
    r[pool["age"].isna()] = "missing age"
    return r


def _excluded_studies(img: pd.DataFrame, probe_sets: Sequence[str | Path]) -> tuple[dict[str, str], dict[str, Path]]:
    """study_id -> reason for every study with an image that is a case of one of ``probe_sets``."""
    out: dict[str, str] = {}
    inputs: dict[str, Path] = {}
    path_study = pd.Series(img["study_id"].astype(str).values, index=img["image_path"].values)
    path_study = path_study[~path_study.index.duplicated()]
    for k, p in enumerate(probe_sets):
        ps = ProbeSet.load(p, validate=False)
        inputs[f"exclude_probe_set_{k}"] = Path(p) / "manifest.parquet"
        paths = pd.unique(ps.df["image_path"].dropna())
        studies = path_study.reindex(paths).dropna()
        for s in studies.tolist():
            out.setdefault(s, f"study has images in probe set {ps.name!r} (exclude_probe_sets)")
    return out, inputs


#: a source's images: the frame, the files read, the image root, why a row has no labels, the tie-break column
_Images = tuple[pd.DataFrame, dict[str, Path], Path, pd.Series, str]


def _mimic_images(mimic_root: str | Path | None, mimic_iv_root: str | Path | None, *, splits: tuple[str, ...],
                  require_demographics: bool, log: ExclusionLog, tag: str) -> _Images:
    """MIMIC-CXR-JPG's images (with MIMIC-IV age and sex when given): the frame, the files read, the image root,
    why a study has no labels, and the column that breaks ties between a study's images."""
    from medvlm_audit.suites.grounding.datasets.mimic import (
        load_mimic_images,
        log_missing_split,
        mimic_image_path,
    )

    if mimic_root is None:
        raise DatasetError("probe-train mimic: mimic_root (the MIMIC-CXR-JPG folder) is required")
    if require_demographics and mimic_iv_root is None:
        raise DatasetError("probe-train mimic: require_demographics needs mimic_iv_root (MIMIC-IV patients)")
    image_root = Path(mimic_root)
    img, inputs = load_mimic_images(image_root, None if mimic_iv_root is None else Path(mimic_iv_root))
    img["image_path"] = mimic_image_path(img["subject_id"], img["study_id"], img["dicom_id"])
    from medvlm_audit.suites.grounding.datasets.common import view_reasons

    img["vreason"] = view_reasons(img["view"])
    img["study_id"] = img["study_id"].astype(str)
    log_missing_split(img, log, tag, f"{tag}:split", "training splits " + "+".join(splits))
    label_reason = pd.Series(np.where(img["has_labels"], None, "study has no row in mimic-cxr-2.0.0-chexpert"),
                             index=img.index)
    tiebreak = "dicom_id"
    return img, inputs, image_root, label_reason, tiebreak


def _chexpert_images(chexpert_root: str | Path | None, labels_csv: str | Path | None,
                     demographics_csv: str | Path | None, *, require_demographics: bool, test_fraction: float,
                     seed: int) -> _Images:
    """CheXpert's images, split by patient where the source has no split (as the CheXpert probe set is): the
    frame, the files read, the image root, why a row has no labels (never), and the tie-break column."""
    from medvlm_audit.suites.grounding.datasets.chexpert import (
        chexpert_patient_split,
        chexpert_view_reasons,
        load_chexpert_labels,
    )

    if chexpert_root is None:
        raise DatasetError("probe-train chexpert: chexpert_root (the CheXpert folder) is required")
    img, files, image_root = load_chexpert_labels(
        Path(chexpert_root), None if labels_csv is None else Path(labels_csv),
        None if demographics_csv is None else Path(demographics_csv), require_demographics=require_demographics)
    inputs = dict(files)
    if demographics_csv is not None:
        inputs["demographics"] = Path(demographics_csv)
    unassigned = img["split"].isna()
    if unassigned.any():
        img.loc[unassigned, "split"] = chexpert_patient_split(img.loc[unassigned, "patient_id"], test_fraction, seed)
    img["vreason"] = chexpert_view_reasons(img["view"])
    label_reason = pd.Series([None] * len(img), index=img.index, dtype=object)
    tiebreak = "Path"
    return img, inputs, image_root, label_reason, tiebreak


def _training_rows(pool: pd.DataFrame, findings: Sequence[str], negatives: str, tag: str, log: ExclusionLog
                   ) -> tuple[pd.DataFrame, dict[str, int]]:
    """One row per (image, finding) with a usable label (uncertain labels logged, blanks as ``negatives`` says)
    plus one no_finding row per normal image; with the counts."""
    rid = pool["record_id"].astype(str).str.replace(r"^.*?(patient)", r"\1", regex=True)
    rid = rid.str.replace("/", "_", regex=False).str.replace(".jpg", "", regex=False)
    parts: list[pd.DataFrame] = []
    counts: dict[str, int] = {"images": len(pool)}
    for f in findings:
        st = pool[f].to_numpy()
        unc = st == UNC
        log.add_many(pool.loc[unc, "record_id"].astype(str) + f":{f}", tag, f"{tag}:{f}",
                     f"uncertain (-1.0) label for {f} (not used for this finding)")
        pos, neg = st == POS, st == NEG
        if negatives == "explicit_or_blank":
            neg = neg | (st == BLANK)
        else:
            counts[f"{f}:blank_unused"] = int((st == BLANK).sum())
        use = pos | neg
        parts.append(pd.DataFrame({"_i": np.flatnonzero(use), "finding": f, "label": pos[use].astype(int),
                                   "finding_state": st[use].astype(int)}))
        counts[f"{f}:present"], counts[f"{f}:absent"] = int(pos.sum()), int(neg.sum())
    normal = pool["no_finding"].to_numpy() == POS
    parts.append(pd.DataFrame({"_i": np.flatnonzero(normal), "finding": "no_finding", "label": 0,
                               "finding_state": int(POS)}))
    counts["no_finding:normal"] = int(normal.sum())
    rows = pd.concat(parts, ignore_index=True)
    meta_cols = [c for c in ("image_path", "image_width", "image_height", "patient_id", "study_id", "age", "sex",
                             "view", "split", "dicom_id") if c in pool]
    base = pool[meta_cols].reset_index(drop=True)
    manifest = pd.concat([rows[["finding", "label", "finding_state"]], base.iloc[rows["_i"].to_numpy()]
                          .reset_index(drop=True)], axis=1)
    word = np.where(manifest["finding"] == "no_finding", "normal", np.where(manifest["label"] == 1, "present", "absent"))
    manifest.insert(0, "case_id", f"{tag}-" + manifest["finding"] + "-" + word + "-"
                    + rid.reset_index(drop=True).iloc[rows["_i"].to_numpy()].to_numpy())
    manifest.insert(1, "kind", "finding_presence")
    manifest["source"] = tag
    manifest["patient_id"] = manifest["patient_id"].astype(str)
    manifest["study_id"] = manifest["study_id"].astype(str)
    manifest["finding_state"] = pd.array(manifest["finding_state"], dtype="Int64")
    counts["rows"] = len(manifest)
    counts["total"] = len(manifest)
    return manifest, counts


def build_probe_train(
    source: str,
    out_dir: str | Path,
    *,
    mimic_root: str | Path | None = None,
    mimic_iv_root: str | Path | None = None,
    chexpert_root: str | Path | None = None,
    labels_csv: str | Path | None = None,
    demographics_csv: str | Path | None = None,
    splits: Sequence[str] | None = None,
    negatives: str = "explicit_or_blank",
    findings: Sequence[str] = CHEXPERT_FINDINGS,
    exclude_probe_sets: Sequence[str | Path] = (),
    require_demographics: bool = False,
    test_fraction: float = 0.2,
    options: BuildOptions | None = None,
    **option_kw: Any,
) -> BuildResult:
    """The vision probe's training set from MIMIC-CXR-JPG (``splits`` default train + validate) or CheXpert
    (default train: the rows :func:`~medvlm_audit.suites.grounding.datasets.chexpert.chexpert_patient_split` does not hold out
    for the CheXpert probe set, with the same ``test_fraction`` and seed)."""
    opts = BuildOptions.of(options, option_kw, "build_probe_train")
    if source not in TRAIN_SOURCES:
        raise ValueError(f"source={source!r}; choose one of {TRAIN_SOURCES}")
    if negatives not in TRAIN_NEGATIVES:
        raise ValueError(f"negatives={negatives!r}; choose one of {TRAIN_NEGATIVES}")
    splits = tuple(splits) if splits else DEFAULT_SPLITS[source]
    out_dir = Path(out_dir)
    log = ExclusionLog()
    tag = f"{source}_train"
    if source == "mimic":
        img, inputs, image_root, label_reason, tiebreak = _mimic_images(
            mimic_root, mimic_iv_root, splits=splits, require_demographics=require_demographics, log=log, tag=tag)
    else:
        img, inputs, image_root, label_reason, tiebreak = _chexpert_images(
            chexpert_root, labels_csv, demographics_csv, require_demographics=require_demographics,
            test_fraction=test_fraction, seed=opts.seed)
    pool = img[isin(img["split"].astype(object), set(splits))]
    if pool.empty:
        raise DatasetError(f"probe-train {source}: no image in split(s) {list(splits)}; splits present: "
                           f"{sorted(img['split'].dropna().astype(str).unique())}")
    filters: list[tuple[str, Any]] = [(f"{tag}:labels", label_reason), (f"{tag}:view", pool["vreason"])]
    if require_demographics:
        filters.append((f"{tag}:demographics", _demographic_reason(pool)))
    excl, ex_inputs = _excluded_studies(img, exclude_probe_sets) if exclude_probe_sets else ({}, {})
    inputs.update(ex_inputs)
    if excl:
        filters.append((f"{tag}:probe_set_overlap", pool["study_id"].astype(str).map(excl)))
    pool = apply_filters(pool, filters, log, tag)
    pool = one_image_per_study(pool, log, tag, f"{tag}:one_image_per_study", tiebreak)

    checker = opts.checker(out_dir, image_root)
    if checker is not None:
        res = checker.check(pool["image_path"])
        bad = pool["image_path"].map(lambda p: None if res[p].ok else (res[p].error or "image check failed"))
        pool = apply_filters(pool, [("image_check", bad)], log, tag)
        pool = pool.assign(image_width=pool["image_path"].map(lambda p: res[p].width),
                           image_height=pool["image_path"].map(lambda p: res[p].height))
    elif "width" in pool:
        pool = pool.assign(image_width=pool["width"], image_height=pool["height"])

    manifest, counts = _training_rows(pool, findings, negatives, tag, log)
    params: dict[str, Any] = {
        "source": source, "splits": list(splits), "negatives": negatives, "findings": list(findings),
        "require_demographics": require_demographics, "exclude_probe_sets": [str(p) for p in exclude_probe_sets],
        "check_images": opts.check_images, "test_fraction": test_fraction if source == "chexpert" else None,
        "normal_rows": "No Finding = 1.0 studies: no_finding with label 0 (the probe's abnormal-vs-normal head)",
    }
    return finalize(manifest, name=opts.name or tag, builder="probe_train", image_root=image_root, out_dir=out_dir,
                    params=params, inputs=inputs, log=log, shortfalls=[], counts=counts, checker=checker, seed=opts.seed,
                    verbose=opts.verbose, fingerprint=opts.fingerprint_inputs, validate=False)
