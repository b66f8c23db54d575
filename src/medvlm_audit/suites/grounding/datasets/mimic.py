"""The paper's primary probe set (paper 000, Methods "Probe set construction"; Supplementary Table 8).

Reads a local MIMIC-CXR-JPG copy (metadata, split and CheXpert-labeler CSVs; images only for checks), MS-CXR
phrase-grounding boxes, ReXErr-v1 sentence-level errors and MIMIC-IV ``hosp/patients`` demographics, and builds
452 MS-CXR + 1,400 MIMIC-CXR + 723 ReXErr = 2,575 cases when the inputs are complete.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.findings import MS_CXR_FINDINGS
from medvlm_audit.suites.grounding.datasets.common import (
    BLANK,
    CHEXPERT_COLUMNS,
    CHEXPERT_FINDINGS,
    NEG,
    POS,
    BuildOptions,
    BuildResult,
    DatasetError,
    ExclusionLog,
    ImageChecker,
    Shortfall,
    SwapPool,
    add_boxes,
    allocate_balanced,
    apply_filters,
    assign_swaps,
    box_outside_reason,
    check_unique,
    decode_chexpert,
    finalize,
    find_file,
    isin,
    normalize_sex,
    normalize_view,
    one_image_per_study,
    py,
    read_csv,
    sample_label_strata,
    select_checked,
    stratum_rng,
    stratum_shortfall,
    vanishing_box_reason,
    view_reasons,
)

METADATA = "mimic-cxr-2.0.0-metadata.csv"
CHEXPERT = "mimic-cxr-2.0.0-chexpert.csv"
SPLIT = "mimic-cxr-2.0.0-split.csv"
MS_CXR_NAMES = ("MS_CXR_Local_Alignment_v1.1.0.csv", "MS_CXR_Local_Alignment_v1.0.0.csv")
MS_CXR_CATEGORIES = {
    "atelectasis": "atelectasis",
    "cardiomegaly": "cardiomegaly",
    "consolidation": "consolidation",
    "edema": "edema",
    "lung opacity": "lung_opacity",
    "pleural effusion": "pleural_effusion",
    "pneumonia": "pneumonia",
    "pneumothorax": "pneumothorax",
}
#: ReXErr error types per group (paper: image-dependent errors / text-only errors), matched case-insensitively
IMAGE_DEPENDENT_ERRORS = (
    "add medical device",
    "change name of device",
    "change position of device",
    "change location",
    "change severity",
    "false negation",
    "false prediction",
    "change view",
)
TEXT_ONLY_ERRORS = ("add typo", "change to homophone", "add repetition")
REXERR_GROUPS = ("image_dependent", "text_only", "no_error")
#: MIMIC-IV patients.anchor_age of a patient over 89 in anchor_year (a de-identification top code), and the age
#: the builders record for it: 90, meaning 90 or older (flag ``age_top_coded``)
TOP_CODED_ANCHOR_AGE = 91
TOP_CODED_AGE = 90.0
NEGATIVE_POLICIES = ("explicit_then_blank", "explicit", "explicit_or_blank")


def _norm_error_type(s: pd.Series) -> pd.Series:
    t = s.astype("string").str.strip().str.lower().str.replace(r"\s+", " ", regex=True)
    return t.replace({"add repetitions": "add repetition", "add typos": "add typo", "change to homophones": "change to homophone"})


def mimic_image_path(subject: pd.Series, study: pd.Series, dicom: pd.Series) -> pd.Series:
    """files/p10/p10000032/s50414267/<dicom_id>.jpg, the MIMIC-CXR-JPG layout (relative to the release root)."""
    sid = subject.astype(str)
    return "files/p" + sid.str[:2] + "/p" + sid + "/s" + study.astype(str) + "/" + dicom.astype(str) + ".jpg"


def _locate_patients(mimic_iv_root: Path) -> Path:
    root = Path(mimic_iv_root)
    for cand in (root / "hosp", root):
        for name in ("patients.csv", "patients.csv.gz"):
            if (cand / name).is_file():
                return cand / name
    raise DatasetError(
        f"MIMIC-IV demographics: neither {root / 'hosp' / 'patients.csv.gz'} nor {root / 'patients.csv.gz'} exists"
    )


def load_mimic_images(
    mimic_root: Path, mimic_iv_root: Path | None, age_at: str = "study"
) -> tuple[pd.DataFrame, dict[str, Path]]:
    """One row per MIMIC-CXR image with view, size, split, demographics and the 14 CheXpert label states.

    ``mimic_iv_root=None`` (training sets only) leaves age and sex empty. ``split`` is None for an image
    whose dicom_id the split CSV lacks (the builders log it as an exclusion)."""
    root = Path(mimic_root)
    f_meta = find_file(root, [METADATA], "MIMIC-CXR-JPG metadata")
    f_split = find_file(root, [SPLIT], "MIMIC-CXR-JPG split")
    f_chex = find_file(root, [CHEXPERT], "MIMIC-CXR-JPG CheXpert labels")
    f_pat = _locate_patients(mimic_iv_root) if mimic_iv_root is not None else None

    meta_cols = ["dicom_id", "subject_id", "study_id", "ViewPosition", "Rows", "Columns"]
    meta = read_csv(f_meta, meta_cols, "MIMIC-CXR-JPG metadata", usecols=lambda c: c in {*meta_cols, "StudyDate"},
                    dtype={"dicom_id": str, "ViewPosition": str})
    check_unique(meta, ["dicom_id"], f_meta, "MIMIC-CXR-JPG metadata")
    split = read_csv(f_split, ["dicom_id", "split"], "MIMIC-CXR-JPG split", usecols=["dicom_id", "split"],
                     dtype={"dicom_id": str, "split": str})
    check_unique(split, ["dicom_id"], f_split, "MIMIC-CXR-JPG split")
    chex = read_csv(f_chex, ["subject_id", "study_id", *CHEXPERT_COLUMNS], "MIMIC-CXR-JPG CheXpert labels")
    check_unique(chex, ["study_id"], f_chex, "MIMIC-CXR-JPG CheXpert labels")
    if f_pat is not None:
        pat = read_csv(f_pat, ["subject_id", "gender", "anchor_age", "anchor_year"], "MIMIC-IV patients",
                       usecols=["subject_id", "gender", "anchor_age", "anchor_year"])
        check_unique(pat, ["subject_id"], f_pat, "MIMIC-IV patients")
    else:
        pat = pd.DataFrame({"subject_id": pd.Series(dtype="int64"), "gender": pd.Series(dtype=object),
                            "anchor_age": pd.Series(dtype=float), "anchor_year": pd.Series(dtype=float)})

    img = meta.rename(columns={"ViewPosition": "view_raw", "Rows": "height", "Columns": "width"})
    img["split"] = img["dicom_id"].map(pd.Series(split["split"].values, index=split["dicom_id"].values))
    states = pd.DataFrame({"study_id": chex["study_id"].values})
    for col, fid in CHEXPERT_COLUMNS.items():
        states[fid] = decode_chexpert(chex[col], f_chex, col)
    img = img.merge(states, on="study_id", how="left")
    img["has_labels"] = img["no_finding"].notna()
    for fid in CHEXPERT_COLUMNS.values():
        img[fid] = img[fid].fillna(BLANK).astype(np.int8)
    p = pat.set_index("subject_id")
    img["sex"] = normalize_sex(img["subject_id"].map(p["gender"]))
    anchor_age = pd.to_numeric(img["subject_id"].map(p["anchor_age"]), errors="coerce")
    if age_at == "study" and "StudyDate" in img:
        year = pd.to_numeric(img["StudyDate"], errors="coerce") // 10000
        anchor_year = pd.to_numeric(img["subject_id"].map(p["anchor_year"]), errors="coerce")
        age = anchor_age + (year - anchor_year).fillna(0)
    else:
        age = anchor_age
    # anchor_age 91 is MIMIC-IV's top code for "over 89 in anchor_year", not an age: no year offset is added to
    # it (that gave ages up to 119); the case is kept as 90+ (age 90, age_top_coded True)
    top = (anchor_age >= TOP_CODED_ANCHOR_AGE).fillna(False).astype(bool)
    img["age"] = age.astype(float).where(~top, TOP_CODED_AGE)
    img["age_top_coded"] = top
    img["view"] = normalize_view(img["view_raw"])
    img["patient_id"] = img["subject_id"].astype(str)
    img["record_id"] = img["dicom_id"].astype(str)
    inputs = {"metadata": f_meta, "split": f_split, "chexpert": f_chex}
    if f_pat is not None:
        inputs["patients"] = f_pat
    return img, inputs


def log_missing_split(img: pd.DataFrame, log: ExclusionLog, source: str, stage: str, pool: str) -> int:
    """Log every image whose dicom_id the split CSV lacks: it belongs to no split, so not to ``pool``."""
    nosplit = img["split"].isna()
    return log.add_many(img.loc[nosplit, "record_id"], source, stage,
                        f"dicom_id missing from {SPLIT} (no split: left out of the {pool})")


def _demographic_reason(df: pd.DataFrame) -> pd.Series:
    r = pd.Series([None] * len(df), index=df.index, dtype=object)
    r[df["sex"].isna()] = "missing sex (subject absent from MIMIC-IV patients or gender blank)"
    r[(df["age"] > 120) | (df["age"] < 0)] = "implausible age (outside 0-120 years)"
    r[df["age"].isna()] = "missing age (subject absent from MIMIC-IV patients or anchor_age blank)"
    return r


def _load_ms_cxr(ms_cxr_root: Path) -> tuple[pd.DataFrame, Path]:
    root = Path(ms_cxr_root)
    if root.is_file():
        f = root
    else:
        try:
            f = find_file(root, list(MS_CXR_NAMES), "MS-CXR")
        except DatasetError:
            found = sorted(root.glob("MS_CXR_Local_Alignment_v*.csv"))
            if not found:
                raise
            f = found[-1]
    cols = ["dicom_id", "category_name", "x", "y", "w", "h", "image_width", "image_height"]
    df = read_csv(f, cols, "MS-CXR", dtype={"dicom_id": str})
    for c in ("x", "y", "w", "h", "image_width", "image_height"):
        num = pd.to_numeric(df[c], errors="coerce")
        if num.isna().any():
            i = int(np.flatnonzero(num.isna().to_numpy())[0])
            raise DatasetError(f"MS-CXR: {f} column {c!r} row {i + 2} has non-numeric value {py(df[c].iloc[i])!r}")
        df[c] = num.astype(float)
    df["record_id"] = df["dicom_id"] + "#" + (df.index + 2).astype(str)
    key = ["dicom_id", "category_name", "x", "y", "w", "h"]
    first_row = (df.index + 2).to_series(index=df.index).groupby([df[k] for k in key]).transform("min")
    df["_dup_of"] = first_row.where(df.duplicated(key, keep="first"))
    return df, f


def _load_rexerr(rexerr_root: Path, split: str) -> tuple[pd.DataFrame, Path]:
    root = Path(rexerr_root)
    name = f"ReXErr-sentence-level_{split}.csv"
    f = root if root.is_file() else find_file(root, [f"ReXErr-sentence-level/{name}", name], "ReXErr-v1 sentence level")
    cols = ["dicom_id", "study_id", "subject_id", "original_sentence", "error_sentence", "error_present", "error_type"]
    df = read_csv(f, cols, "ReXErr-v1", dtype={"dicom_id": str, "error_type": str})
    ep = pd.to_numeric(df["error_present"], errors="coerce")
    bad = ep.isna() | ~ep.isin([0, 1, 2])
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DatasetError(
            f"ReXErr-v1: {f} column 'error_present' row {i + 2} has value {py(df['error_present'].iloc[i])!r}; "
            "expected 0 (unchanged), 1 (error) or 2 (neutral)"
        )
    df["error_present"] = ep.astype(int)
    df["record_id"] = f"rexerr_{split}#" + (df.index + 2).astype(str)
    return df, f


_DICOM_SPLIT = re.compile(r"[\s,;\[\]'\"]+")


def _ms_cxr_cases(ms_cxr_root: str | Path, by_dicom: pd.DataFrame, dicom_set: set[str], *, min_box_side: float,
                  ms_cxr_cap: int, seed: int, checker: ImageChecker | None, log: ExclusionLog
                  ) -> tuple[pd.DataFrame, pd.Series, Path, dict[str, dict[str, int]], list[Shortfall]]:
    """MS-CXR's boxed positives (every annotation a present finding): linked to their image, filtered, capped at
    ``ms_cxr_cap`` per finding (seeded) and image-checked; with the study of every MS-CXR annotation, the file
    read, and the strata and shortfalls."""
    strata_info: dict[str, dict[str, int]] = {}
    shortfalls: list[Shortfall] = []
    ms, f_ms = _load_ms_cxr(Path(ms_cxr_root))
    ms_all_studies = ms["dicom_id"].map(by_dicom["study_id"]).dropna()
    ms["finding"] = ms["category_name"].astype(str).str.strip().str.lower().map(MS_CXR_CATEGORIES)
    known = pd.Series(isin(ms["dicom_id"], dicom_set), index=ms.index)
    j = ms["dicom_id"].where(known)
    for c in ("subject_id", "study_id", "view", "vreason", "dreason", "age", "age_top_coded", "sex", "split",
              "image_path", "width", "height", "patient_id"):
        ms[c] = j.map(by_dicom[c])
    x0, y0 = ms["x"], ms["y"]
    x1, y1 = ms["x"] + ms["w"], ms["y"] + ms["h"]
    ms_outside = box_outside_reason(x0, y0, x1, y1, ms["image_width"], ms["image_height"])
    sw, sh = ms["w"] * 224 / ms["image_width"], ms["h"] * 224 / ms["image_height"]
    small = (sw < min_box_side) | (sh < min_box_side)
    small_reason = ("box " + sw.round(1).astype(str) + "x" + sh.round(1).astype(str)
                    + f" px at 224 is below {min_box_side:g}x{min_box_side:g}").where(small)
    dup_reason = ("duplicate annotation: same dicom_id, category_name and box as row "
                  + ms["_dup_of"].astype("Int64").astype(str)).where(ms["_dup_of"].notna())
    ms = apply_filters(ms, [
        ("ms_cxr:duplicate", dup_reason),
        ("ms_cxr:category", ("category " + ms["category_name"].astype(str)
                             + " is not one of the eight MS-CXR findings").where(ms["finding"].isna())),
        ("ms_cxr:link", pd.Series(np.where(known, None, "dicom_id not found in mimic-cxr-2.0.0-metadata"), index=ms.index)),
        ("ms_cxr:box", ms_outside),
        ("ms_cxr:box_size", small_reason),
        ("ms_cxr:box_size", vanishing_box_reason(x0, y0, x1, y1, ms["image_width"], ms["image_height"])),
        ("ms_cxr:view", ms["vreason"]),
        ("ms_cxr:demographics", ms["dreason"]),
    ], log, "ms_cxr")
    ms["_ann_x0"], ms["_ann_y0"] = ms["x"], ms["y"]
    ms["_ann_x1"], ms["_ann_y1"] = ms["x"] + ms["w"], ms["y"] + ms["h"]
    ms["_ann_w"], ms["_ann_h"] = ms["image_width"], ms["image_height"]
    ms_strata, ms_want = {}, {}
    for f in MS_CXR_FINDINGS:
        sub = ms[ms["finding"] == f].sort_values("record_id", kind="mergesort")
        sub = sub.iloc[stratum_rng(seed, "ms_cxr", f).permutation(len(sub))]
        ms_strata[f] = sub
        ms_want[f] = min(ms_cap := int(ms_cxr_cap), len(sub))
        if len(sub) > ms_cap:
            log.add_many(sub["record_id"].iloc[ms_cap:], "ms_cxr", "ms_cxr:cap",
                         f"over the cap of {ms_cap} {f} annotations (seeded random selection)")
    ms_sel = select_checked(ms_strata, ms_want, checker, log, "ms_cxr")
    ms_rows = []
    for f in MS_CXR_FINDINGS:
        sel = ms_sel[f]
        strata_info[f"ms_cxr:{f}"] = {"requested": int(ms_cxr_cap), "obtained": len(sel), "available": len(ms_strata[f]),
                                      "target": ms_want[f]}
        s = stratum_shortfall(f"ms_cxr:{f}", ms_want[f], len(sel), len(ms_strata[f]),
                              "candidate images failed the image check (no eligible annotation left to replace them)")
        if s:  # below the cap is not a shortfall; an eligible box lost to a failing image is
            shortfalls.append(s)
        ms_rows.append(sel)
    ms_cases = pd.concat(ms_rows, ignore_index=True)
    ms_cases = _scale_boxes_to_image(ms_cases)
    ms_cases = ms_cases.assign(
        case_id="mscxr-" + ms_cases["finding"] + "-" + ms_cases["record_id"].str.replace("#", "-r", regex=False),
        kind="finding_presence", label=1, finding_state=POS, source="ms_cxr",
        stratum="ms_cxr:" + ms_cases["finding"], swap_key=ms_cases["finding"] + "=1",
    )
    return ms_cases, ms_all_studies, f_ms, strata_info, shortfalls


def _mimic_cases(img: pd.DataFrame, ms_studies: set[int], *, mimic_split: str, per_finding: int, n_normal: int,
                 negatives: str, seed: int, checker: ImageChecker | None, log: ExclusionLog
                 ) -> tuple[pd.DataFrame, list[Shortfall], dict[str, dict[str, int]]]:
    """The balanced MIMIC-CXR strata of ``mimic_split`` (MS-CXR studies left out), with their shortfalls and
    strata."""
    log_missing_split(img, log, "mimic_cxr", "mimic:split", f"MIMIC-CXR {mimic_split}-split pool")
    pool = img[img["split"] == mimic_split]
    pool = apply_filters(pool, [
        ("mimic:labels", pd.Series(np.where(pool["has_labels"], None, "study has no row in mimic-cxr-2.0.0-chexpert"), index=pool.index)),
        ("mimic:view", pool["vreason"]),
        ("mimic:demographics", pool["dreason"]),
        ("mimic:ms_cxr_overlap", pd.Series(np.where(isin(pool["study_id"], ms_studies), "study is an MS-CXR study (removed from the MIMIC pool)", None), index=pool.index)),
    ], log, "mimic_cxr")
    pool = one_image_per_study(pool, log, "mimic_cxr", "mimic:one_image_per_study", "dicom_id")
    mimic_cases, sf, info = sample_label_strata(
        pool, findings=CHEXPERT_FINDINGS, per_finding=per_finding, n_normal=n_normal, negatives=negatives,
        seed=seed, prefix="mimic", source="mimic_cxr", log=log, checker=checker,
        eligible="frontal, complete age/sex, certain label, one per patient, not MS-CXR")
    lab_word = np.where(mimic_cases["finding"] == "no_finding", "normal",
                        np.where(mimic_cases["label"] == 1, "present", "absent"))
    mimic_cases["case_id"] = "mimic-" + mimic_cases["finding"] + "-" + lab_word + "-" + mimic_cases["dicom_id"].astype(str)
    mimic_cases = mimic_cases.assign(kind="finding_presence", source="mimic_cxr")
    return mimic_cases, sf, info


def _rexerr_cases(rexerr_root: str | Path, rexerr_split: str, by_dicom: pd.DataFrame, dicom_set: set[str], *,
                  rexerr_counts: tuple[int, int, int], seed: int, checker: ImageChecker | None, log: ExclusionLog
                  ) -> tuple[pd.DataFrame, Path, dict[str, dict[str, int]], list[Shortfall]]:
    """ReXErr-v1's report-error sentences: grouped (image-dependent, text-only, no error), each linked to one
    frontal image of its study, sampled per error type to ``rexerr_counts`` (seeded) and image-checked; with
    the file read, and the strata and shortfalls."""
    strata_info: dict[str, dict[str, int]] = {}
    shortfalls: list[Shortfall] = []
    rx, f_rx = _load_rexerr(Path(rexerr_root), rexerr_split)
    et = _norm_error_type(rx["error_type"])
    group = pd.Series(np.where(et.isin(IMAGE_DEPENDENT_ERRORS), "image_dependent",
                               np.where(et.isin(TEXT_ONLY_ERRORS), "text_only", None)), index=rx.index, dtype=object)
    group[rx["error_present"] == 0] = "no_error"
    rx["error_group"], rx["error_type_norm"] = group, et
    neutral = pd.Series(np.where(rx["error_present"] == 2, "neutral sentence (error_present = 2)", None), index=rx.index)
    nosent = pd.Series(np.where(rx["error_sentence"].isna() | rx["original_sentence"].isna(),
                                "empty original or error sentence", None), index=rx.index)
    other = ("error type " + rx["error_type"].astype(str)
             + " is in neither the image-dependent nor the text-only group").where(rx["error_group"].isna())
    rx = apply_filters(rx, [("rexerr:neutral", neutral), ("rexerr:sentence", nosent), ("rexerr:error_type", other)],
                       log, "rexerr")
    # link each sentence to one frontal image of its study with complete metadata
    ex = rx[["record_id", "dicom_id"]].copy()
    ex["cand"] = ex["dicom_id"].fillna("").astype(str).map(lambda s: [t for t in _DICOM_SPLIT.split(s) if t])
    ex = ex.explode("cand")
    ex["order"] = ex.groupby("record_id").cumcount()
    ex_known = isin(ex["cand"], dicom_set)
    ex["reason"] = np.where(~ex_known, "dicom_id not found in mimic-cxr-2.0.0-metadata", None)
    okj = ex["cand"].where(ex_known)
    vr = okj.map(by_dicom["vreason"])
    dr = okj.map(by_dicom["dreason"])
    ex["reason"] = ex["reason"].where(ex["reason"].notna(), vr.where(vr.notna(), dr))
    good = ex[ex["reason"].isna()].sort_values(["record_id", "order"]).drop_duplicates("record_id")
    first_reason = ex.sort_values(["record_id", "order"]).drop_duplicates("record_id").set_index("record_id")["reason"]
    link_reason = pd.Series(np.where(isin(rx["record_id"], good["record_id"]), None,
                                     "no linked frontal image with complete age/sex: "
                                     + rx["record_id"].map(first_reason).astype(object).fillna("no dicom_id").astype(str)),
                            index=rx.index)
    rx = apply_filters(rx, [("rexerr:link", link_reason)], log, "rexerr")
    rx = rx.drop(columns=["dicom_id", "study_id", "subject_id"]).merge(
        good[["record_id", "cand"]].rename(columns={"cand": "dicom_id"}), on="record_id", how="left")
    for c in ("subject_id", "study_id", "view", "age", "age_top_coded", "sex", "split", "image_path", "width",
              "height", "patient_id"):
        rx[c] = rx["dicom_id"].map(by_dicom[c])
    rx = rx.sort_values("record_id", key=lambda s: s.str.split("#").str[1].astype(int), kind="mergesort")
    dupr = rx.duplicated(["study_id", "original_sentence", "error_sentence"], keep="first")
    log.add_many(rx.loc[dupr, "record_id"], "rexerr", "rexerr:duplicate", "same sentence pair of the same study already listed")
    rx = rx.loc[~dupr]
    rx_strata: dict[str, pd.DataFrame] = {}
    rx_want: dict[str, int] = {}
    n_img, n_txt, n_no = (int(v) for v in rexerr_counts)
    for g, n in (("image_dependent", n_img), ("text_only", n_txt)):
        sub = rx[rx["error_group"] == g]
        types = {t: int(c) for t, c in sub["error_type_norm"].value_counts().items()}
        alloc = allocate_balanced(types, n)
        for t in sorted(types):
            s = sub[sub["error_type_norm"] == t].sort_values("record_id", kind="mergesort")
            s = s.iloc[stratum_rng(seed, "rexerr", g, t).permutation(len(s))]
            rx_strata[f"{g}:{t}"], rx_want[f"{g}:{t}"] = s, alloc[t]
    sub = rx[rx["error_group"] == "no_error"].sort_values("record_id", kind="mergesort")
    rx_strata["no_error"] = sub.iloc[stratum_rng(seed, "rexerr", "no_error").permutation(len(sub))]
    rx_want["no_error"] = n_no
    rx_sel = select_checked(rx_strata, rx_want, checker, log, "rexerr")
    rx_cases = pd.concat(list(rx_sel.values()), ignore_index=True) if rx_sel else rx.iloc[:0]
    for g, n in (("image_dependent", n_img), ("text_only", n_txt), ("no_error", n_no)):
        got = int((rx_cases["error_group"] == g).sum())
        av = int((rx["error_group"] == g).sum())
        strata_info[f"rexerr:{g}"] = {"requested": n, "obtained": got, "available": av}
        s = stratum_shortfall(f"rexerr:{g}", n, got, av, "too few eligible sentences (frontal image with complete "
                              "age/sex, error type in the group, not neutral)" if got >= av else
                              "candidate images failed the image check")
        if s:
            shortfalls.append(s)
    # swap key: the first positive CheXpert finding of the study, else No Finding, else any frontal
    keys = pd.Series([None] * len(rx_cases), index=rx_cases.index, dtype=object)
    sts = rx_cases["dicom_id"].map(by_dicom["study_id"])
    for f in reversed(CHEXPERT_FINDINGS):
        pos = rx_cases["dicom_id"].map(by_dicom[f]).to_numpy() == POS
        keys[pos] = f + "=1"
    nf = (rx_cases["dicom_id"].map(by_dicom["no_finding"]).to_numpy() == POS) & keys.isna().to_numpy()
    keys[nf] = "no_finding=1"
    rx_cases = rx_cases.assign(
        swap_key=keys, kind="report_error", source="rexerr", finding=None, finding_state=pd.NA,
        label=(rx_cases["error_group"] == "no_error").astype(int), sentence=rx_cases["error_sentence"],
        error_type=rx_cases["error_type"].where(rx_cases["error_group"] != "no_error"),
        stratum="rexerr:" + rx_cases["error_group"], study_id=sts,
        case_id="rexerr-" + rx_cases["error_group"] + "-" + rx_cases["record_id"].str.split("#").str[1],
    )
    return rx_cases, f_rx, strata_info, shortfalls


def build_mimic(
    mimic_root: str | Path,
    ms_cxr_root: str | Path,
    rexerr_root: str | Path,
    mimic_iv_root: str | Path,
    out_dir: str | Path,
    *,
    per_finding: int = 50,
    n_normal: int = 100,
    ms_cxr_cap: int = 100,
    min_box_side: float = 50.0,
    rexerr_counts: tuple[int, int, int] = (483, 120, 120),
    rexerr_split: str = "test",
    mimic_split: str = "test",
    negatives: str = "explicit_then_blank",
    exclude_ms_cxr_studies: bool = True,
    swap_pool_split: str = "all",
    swap_same_view: bool = False,
    age_at: str = "study",
    options: BuildOptions | None = None,
    **option_kw: Any,
) -> BuildResult:
    """Build the paper's MIMIC probe set (MS-CXR boxed positives, balanced MIMIC-CXR strata, ReXErr errors).

    ``per_finding`` present and ``per_finding`` absent studies for each of the 13 CheXpert findings plus
    ``n_normal`` No-Finding studies (asked "Is any acute abnormality present?", correct answer No);
    MS-CXR boxes whose sides are >= ``min_box_side`` px at 224 (capped at ``ms_cxr_cap`` per finding);
    ReXErr sentences: ``rexerr_counts`` = (image-dependent, text-only, no-error). Shortfalls are reported.
    """
    opts = BuildOptions.of(options, option_kw, "build_mimic")
    if negatives not in NEGATIVE_POLICIES:
        raise ValueError(f"negatives={negatives!r}; choose one of {NEGATIVE_POLICIES}")
    mimic_root, out_dir = Path(mimic_root), Path(out_dir)
    log = ExclusionLog()
    shortfalls: list[Shortfall] = []
    strata_info: dict[str, dict[str, int]] = {}
    checker = opts.checker(out_dir, mimic_root)

    img, inputs = load_mimic_images(mimic_root, mimic_iv_root, age_at)
    img["image_path"] = mimic_image_path(img["subject_id"], img["study_id"], img["dicom_id"])
    img["vreason"] = view_reasons(img["view"])
    img["dreason"] = _demographic_reason(img)
    by_dicom = img.set_index("dicom_id")
    dicom_set = set(img["dicom_id"].tolist())

    # ------------------------------------------------------------------ MS-CXR (boxed, all positive)
    ms_cases, ms_all_studies, inputs["ms_cxr"], info, sf = _ms_cxr_cases(
        ms_cxr_root, by_dicom, dicom_set, min_box_side=min_box_side, ms_cxr_cap=ms_cxr_cap, seed=opts.seed,
        checker=checker, log=log)
    strata_info.update(info)
    shortfalls.extend(sf)
    ms_studies = set(ms_all_studies.astype(int)) if exclude_ms_cxr_studies else set()

    # ------------------------------------------------------------------ MIMIC-CXR strata (test split)
    mimic_cases, sf, info = _mimic_cases(img, ms_studies, mimic_split=mimic_split, per_finding=per_finding,
                                         n_normal=n_normal, negatives=negatives, seed=opts.seed,
                                         checker=checker, log=log)
    shortfalls.extend(sf)
    strata_info.update(info)

    # ------------------------------------------------------------------ ReXErr-v1 sentences
    rx_cases, inputs["rexerr"], info, sf = _rexerr_cases(rexerr_root, rexerr_split, by_dicom, dicom_set,
                                                         rexerr_counts=rexerr_counts, seed=opts.seed,
                                                         checker=checker, log=log)
    strata_info.update(info)
    shortfalls.extend(sf)

    # ------------------------------------------------------------------ swaps, boxes, manifest
    swap_src = img if swap_pool_split == "all" else img[img["split"] == swap_pool_split]
    swap_src = swap_src[swap_src["vreason"].isna() & swap_src["has_labels"]].sort_values("dicom_id")
    keys_idx: dict[str, np.ndarray] = {}
    for f in CHEXPERT_COLUMNS.values():
        st = swap_src[f].to_numpy()
        keys_idx[f"{f}=1"] = np.flatnonzero(st == POS)
        keys_idx[f"{f}=0"] = np.flatnonzero(st == NEG)
    swap_pool = SwapPool(swap_src["image_path"].to_numpy(), swap_src["patient_id"].to_numpy(), keys_idx,
                         swap_src["view"].to_numpy())
    cases = pd.concat([ms_cases, mimic_cases, rx_cases], ignore_index=True)
    sampled = cases[["case_id", "stratum"]].copy()
    fin = []
    for src, fallback in (("ms_cxr", False), ("mimic_cxr", False), ("rexerr", True)):
        part = cases[cases["source"] == src]
        if len(part):
            fin.append(assign_swaps(part, swap_pool, "swap_key", opts.seed, log, src, checker, swap_same_view, fallback))
    cases = pd.concat(fin, ignore_index=True) if fin else cases
    cases = add_boxes(cases)
    cases["image_width"] = cases["_checked_w"].fillna(cases["width"]) if "_checked_w" in cases else cases["width"]
    cases["image_height"] = cases["_checked_h"].fillna(cases["height"]) if "_checked_h" in cases else cases["height"]
    cases["patient_id"] = cases["patient_id"].astype(str)
    cases["study_id"] = cases["study_id"].astype("Int64").astype(str)
    keep = ["case_id", "kind", "label", "finding", "sentence", "image_path", "image_width", "image_height",
            "box_x0", "box_y0", "box_x1", "box_y1", "tbox_x0", "tbox_y0", "tbox_x1", "tbox_y1",
            "ibox_x0", "ibox_y0", "ibox_x1", "ibox_y1", "ibox_overlaps", "swap_image_path", "swap_patient_id",
            "patient_id", "study_id", "age", "age_top_coded", "sex", "view", "source", "split", "dicom_id", "error_type",
            "error_group", "label_text", "original_sentence", "finding_state", "stratum", "swap_match"]
    for c in keep:
        if c not in cases:
            cases[c] = None
    manifest = cases[keep].copy()
    manifest["finding_state"] = pd.array(pd.to_numeric(manifest["finding_state"], errors="coerce"), dtype="Int64")
    manifest["age_top_coded"] = manifest["age_top_coded"].eq(True)
    counts = {
        "ms_cxr": int((manifest["source"] == "ms_cxr").sum()),
        "mimic_cxr": int((manifest["source"] == "mimic_cxr").sum()),
        "rexerr": int((manifest["source"] == "rexerr").sum()),
        "total": len(manifest),
    }
    params: dict[str, Any] = {
        "per_finding": per_finding, "n_normal": n_normal, "ms_cxr_cap": ms_cxr_cap, "min_box_side": min_box_side,
        "rexerr_counts": list(rexerr_counts), "rexerr_split": rexerr_split, "mimic_split": mimic_split,
        "negatives": negatives, "exclude_ms_cxr_studies": exclude_ms_cxr_studies, "swap_pool_split": swap_pool_split,
        "swap_same_view": swap_same_view, "age_at": age_at, "check_images": opts.check_images, "full_decode": opts.full_decode,
        "normal_question": "no_finding: 'Is any acute abnormality present ...?' with correct answer No (label 0)",
    }
    return finalize(manifest, name=opts.named("mimic"), builder="mimic", image_root=mimic_root, out_dir=out_dir, params=params,
                    inputs=inputs, log=log, shortfalls=shortfalls, counts=counts, checker=checker, seed=opts.seed,
                    verbose=opts.verbose, fingerprint=opts.fingerprint_inputs, strata=strata_info, sampled=sampled)


def _scale_boxes_to_image(df: pd.DataFrame) -> pd.DataFrame:
    """box_* in the pixel frame of the image file (annotation frame rescaled when the checked size differs)."""
    df = df.copy()
    w = df["width"].astype(float) if "width" in df else df["_ann_w"]
    h = df["height"].astype(float) if "height" in df else df["_ann_h"]
    if "_checked_w" in df:
        w = df["_checked_w"].astype(float).fillna(w)
        h = df["_checked_h"].astype(float).fillna(h)
    sx, sy = w / df["_ann_w"], h / df["_ann_h"]
    df["box_x0"], df["box_x1"] = df["_ann_x0"] * sx, df["_ann_x1"] * sx
    df["box_y0"], df["box_y1"] = df["_ann_y0"] * sy, df["_ann_y1"] * sy
    return df
