"""An open probe set with boxes from NIH ChestX-ray14 (no credentials needed).

Reads ``Data_Entry_2017_v2020.csv`` (or ``Data_Entry_2017.csv``) and ``BBox_List_2017.csv`` from the user's copy
or, when absent there, from the copies bundled in the ``torchxrayvision`` PyPI package; images always come from the
user's copy (``images/`` or the Kaggle-style ``images_0NN/images/`` folders of 1024x1024 PNGs). Boxed positives
(masking conditions) + 50 present / 50 absent images per finding + 100 normals, as the MIMIC set is built.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.extras import torchxrayvision_data_dir
from medvlm_audit.suites.grounding.datasets.common import (
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
    apply_filters,
    assign_swaps,
    box_outside_reason,
    finalize,
    isin,
    normalize_sex,
    normalize_view,
    py,
    read_csv,
    sample_label_strata,
    select_checked,
    stratum_rng,
    stratum_shortfall,
    vanishing_box_reason,
    view_reasons,
)

#: NIH label (Data_Entry "Finding Labels" and BBox "Finding Label") -> finding id
NIH_LABELS: dict[str, str] = {
    "Atelectasis": "atelectasis",
    "Cardiomegaly": "cardiomegaly",
    "Effusion": "pleural_effusion",
    "Infiltration": "infiltration",
    "Infiltrate": "infiltration",
    "Mass": "mass",
    "Nodule": "nodule",
    "Pneumonia": "pneumonia",
    "Pneumothorax": "pneumothorax",
    "Consolidation": "consolidation",
    "Edema": "edema",
    "Emphysema": "emphysema",
    "Fibrosis": "fibrosis",
    "Pleural_Thickening": "pleural_thickening",
    "Hernia": "hernia",
    "No Finding": "no_finding",
}
NIH_FINDINGS: tuple[str, ...] = (
    "atelectasis", "cardiomegaly", "consolidation", "edema", "emphysema", "fibrosis", "hernia", "infiltration",
    "mass", "nodule", "pleural_effusion", "pleural_thickening", "pneumonia", "pneumothorax",
)
DATA_ENTRY_NAMES = ("Data_Entry_2017_v2020.csv", "Data_Entry_2017.csv")
#: the sex column's name: "Patient Gender" (Data_Entry_2017.csv, Kaggle and torchxrayvision copies of the v2020 file)
#: or "Patient Sex" (Data_Entry_2017_v2020.csv as downloaded from NIH's Box folder)
SEX_COLUMNS = ("Patient Gender", "Patient Sex")
BBOX_NAME = "BBox_List_2017.csv"




def _locate(nih_root: Path, names: tuple[str, ...], metadata_from: str) -> Path:
    dirs = []
    if metadata_from in ("auto", "root"):
        dirs.append(nih_root)
    if metadata_from in ("auto", "torchxrayvision"):
        t = torchxrayvision_data_dir()
        if t is not None:
            dirs.append(t)
    for d in dirs:
        for n in names:
            for cand in (d / n, d / (n + ".gz")):
                if cand.is_file():
                    return cand
    where = ", ".join(str(d) for d in dirs) or "(no folder: torchxrayvision is not installed)"
    raise DatasetError(f"NIH ChestX-ray14: none of {list(names)} (or .gz) found in {where}")


def index_nih_images(nih_root: Path) -> dict[str, str]:
    """Image Index -> path relative to nih_root, for ``images/`` and ``images_0NN/images/`` layouts."""
    out: dict[str, str] = {}
    dirs = [nih_root / "images"] + sorted(nih_root.glob("images_*/images")) + sorted(nih_root.glob("images_*"))
    for d in dirs:
        if not d.is_dir():
            continue
        rel = os.path.relpath(d, nih_root)
        with os.scandir(d) as it:
            for e in it:
                if e.name.endswith(".png") and e.name not in out:
                    out[e.name] = f"{rel}/{e.name}"
    return out


_AGE_UNIT = {"": 1.0, "Y": 1.0, "M": 1 / 12, "W": 7 / 365.25, "D": 1 / 365.25}


def _parse_age(values: pd.Series) -> pd.Series:
    """Patient Age in years: ``58`` (Data_Entry_2017_v2020) or the original release's ``058Y`` / ``010M`` /
    ``003W`` / ``020D`` (DICOM age strings); anything else -> NaN (logged as an unparseable age)."""
    s = values.astype("string").str.strip().str.upper()
    parts = s.str.extract(r"^(\d+(?:\.\d+)?)\s*([YMWD]?)$")
    num = pd.to_numeric(parts[0], errors="coerce")
    return (num * parts[1].map(_AGE_UNIT).astype(float)).astype(float)


def _read_data_entry(nih_root: Path, f_entry: Path) -> tuple[pd.DataFrame, dict[str, Path]]:
    """One row per image of Data_Entry: ids, age (parsed), sex, view, one label column per finding, the image's
    file and split (from ``<split>_list.txt``), and why it cannot be a case (``vreason``, ``dreason``,
    ``freason``); with the split lists looked for."""
    cols = ["Image Index", "Finding Labels", "Patient ID", "Patient Age", "View Position"]
    # index_col=False: NIH's Box copy ends every line with a comma; a header without it would otherwise make
    # pandas read the first field as the index and shift every column silently
    ent = read_csv(f_entry, cols, "NIH Data_Entry", dtype={"Image Index": str, "Finding Labels": str}, index_col=False)
    sex_col = next((c for c in SEX_COLUMNS if c in ent.columns), None)
    if sex_col is None:
        raise DatasetError(f"NIH Data_Entry: {f_entry} has neither {SEX_COLUMNS[0]!r} nor {SEX_COLUMNS[1]!r} "
                           f"(the sex column); found columns {list(ent.columns)[:30]}")
    dup = ent["Image Index"].duplicated()
    if dup.any():
        raise DatasetError(f"NIH Data_Entry: {f_entry} lists image {ent['Image Index'][dup].iloc[0]!r} twice")
    tokens = ent["Finding Labels"].fillna("").str.split("|")
    unknown = tokens.map(lambda t: next((x for x in t if x not in NIH_LABELS), None))
    if unknown.notna().any():
        i = int(np.flatnonzero(unknown.notna().to_numpy())[0])
        raise DatasetError(f"NIH Data_Entry: {f_entry} row {i + 2} column 'Finding Labels' has label "
                           f"{unknown.iloc[i]!r}, not one of {sorted(NIH_LABELS)}")
    df = pd.DataFrame({"record_id": ent["Image Index"], "patient_id": ent["Patient ID"].astype(str),
                       "age": _parse_age(ent["Patient Age"]), "sex": normalize_sex(ent[sex_col]),
                       "view": normalize_view(ent["View Position"]).astype(str)})
    found = {NIH_LABELS[x] for t in tokens for x in t}
    for f in (*NIH_FINDINGS, "no_finding"):
        present = tokens.map(lambda t, f=f: any(NIH_LABELS[x] == f for x in t)).to_numpy() if f in found else np.zeros(len(df), bool)
        df[f] = np.where(present, POS, NEG).astype(np.int8)
    df["study_id"] = df["record_id"].str.replace(".png", "", regex=False)
    index = index_nih_images(nih_root)
    df["image_path"] = df["record_id"].map(index)
    if not index:
        df["image_path"] = "images/" + df["record_id"]
    lists = {n: nih_root / f"{n}_list.txt" for n in ("test", "train_val")}
    df["split"] = None
    for n, p in lists.items():
        if p.is_file():
            names = set(p.read_text().split())
            df.loc[isin(df["record_id"], names), "split"] = n
    dreason = pd.Series([None] * len(df), index=df.index, dtype=object)
    dreason[df["sex"].isna()] = "missing sex"
    dreason[(df["age"] < 0) | (df["age"] > 120)] = "implausible age (outside 0-120 years)"
    dreason[df["age"].isna()] = "missing age"
    raw_age = ent["Patient Age"].astype("string").str.strip()
    unparsed = df["age"].isna() & raw_age.notna() & (raw_age != "")
    dreason[unparsed] = "unparseable Patient Age " + raw_age[unparsed].map(repr).astype(str)
    df["vreason"] = view_reasons(df["view"])
    df["dreason"] = dreason
    df["freason"] = np.where(df["image_path"].isna(), "image file not found under images/ or images_*/images/", None)
    return df, lists


def _boxed_cases(f_bbox: Path, by_img: pd.DataFrame, *, box_cap: int, min_box_side: float, image_size: int,
                 seed: int, checker: ImageChecker | None, log: ExclusionLog
                 ) -> tuple[pd.DataFrame, set[str], dict[str, dict[str, Any]], list[Shortfall]]:
    """The boxed positives of BBox_List: each box linked to its image, filtered (view, demographics, file, box
    inside the image and large enough at 224 px), capped at ``box_cap`` per finding (seeded) and image-checked,
    ``box_*`` in the checked image's frame; with every boxed image (they leave the labelled pool), the strata
    and the shortfalls."""
    try:  # header "Image Index,Finding Label,Bbox [x,y,w,h],,,": read the six fields by position
        bb = pd.read_csv(f_bbox, header=None, skiprows=1, usecols=range(6), dtype=str,
                         names=["image", "label", "x", "y", "w", "h"])
    except (ValueError, pd.errors.ParserError) as e:
        raise DatasetError(f"NIH BBox list: cannot read {f_bbox} as Image Index, Finding Label, x, y, w, h ({e})") from e
    for c in ("x", "y", "w", "h"):
        num = pd.to_numeric(bb[c], errors="coerce")
        if num.isna().any():
            i = int(np.flatnonzero(num.isna().to_numpy())[0])
            raise DatasetError(f"NIH BBox list: {f_bbox} row {i + 2} has non-numeric {c} = {py(bb[c].iloc[i])!r}")
        bb[c] = num
    badlab = ~bb["label"].isin(list(NIH_LABELS))
    if badlab.any():
        i = int(np.flatnonzero(badlab.to_numpy())[0])
        raise DatasetError(f"NIH BBox list: {f_bbox} row {i + 2} has Finding Label {bb['label'].iloc[i]!r}, "
                           f"not one of {sorted(NIH_LABELS)}")
    bb["finding"] = bb["label"].map(NIH_LABELS)
    boxed = set(bb["image"])  # every image with a box leaves the labelled pool, kept box or not
    bb["record_id"] = bb["image"] + "#" + (bb.index + 2).astype(str)
    known = pd.Series(isin(bb["image"], set(by_img.index)), index=bb.index)
    j = bb["image"].where(known)
    for c in ("patient_id", "age", "sex", "view", "study_id", "image_path", "split", "vreason", "dreason", "freason"):
        bb[c] = j.map(by_img[c])
    x0, y0, x1, y1 = bb["x"], bb["y"], bb["x"] + bb["w"], bb["y"] + bb["h"]
    size = pd.Series(float(image_size), index=bb.index)
    sw, sh = bb["w"] * 224 / image_size, bb["h"] * 224 / image_size
    small = ((sw < min_box_side) | (sh < min_box_side))
    bb = apply_filters(bb, [
        ("nih_box:link", pd.Series(np.where(known, None, "image not listed in Data_Entry"), index=bb.index)),
        ("nih_box:box", box_outside_reason(x0, y0, x1, y1, size, size)),
        ("nih_box:box_size", ("box " + sw.round(1).astype(str) + "x" + sh.round(1).astype(str)
                              + f" px at 224 is below {min_box_side:g}x{min_box_side:g}").where(small)),
        ("nih_box:box_size", vanishing_box_reason(x0, y0, x1, y1, size, size)),
        ("nih_box:view", bb["vreason"]), ("nih_box:demographics", bb["dreason"]), ("nih_box:file", bb["freason"]),
    ], log, "nih")
    bb["_ann_x0"], bb["_ann_y0"], bb["_ann_x1"], bb["_ann_y1"] = bb["x"], bb["y"], bb["x"] + bb["w"], bb["y"] + bb["h"]
    bb["_ann_w"] = bb["_ann_h"] = float(image_size)
    strata, want = {}, {}
    for f in sorted(bb["finding"].unique()):
        sub = bb[bb["finding"] == f].sort_values("record_id", kind="mergesort")
        sub = sub.iloc[stratum_rng(seed, "nih_box", f).permutation(len(sub))]
        strata[f], want[f] = sub, min(box_cap, len(sub))
        if len(sub) > box_cap:
            log.add_many(sub["record_id"].iloc[box_cap:], "nih", "nih_box:cap", f"over the cap of {box_cap} {f} boxes")
    sel = select_checked(strata, want, checker, log, "nih")
    box_cases = pd.concat(list(sel.values()), ignore_index=True) if sel else bb.iloc[:0].copy()
    w = box_cases["_checked_w"].astype(float) if "_checked_w" in box_cases else box_cases["_ann_w"]
    h = box_cases["_checked_h"].astype(float) if "_checked_h" in box_cases else box_cases["_ann_h"]
    box_cases["box_x0"], box_cases["box_x1"] = box_cases["_ann_x0"] * w / image_size, box_cases["_ann_x1"] * w / image_size
    box_cases["box_y0"], box_cases["box_y1"] = box_cases["_ann_y0"] * h / image_size, box_cases["_ann_y1"] * h / image_size
    box_cases = box_cases.assign(
        case_id="nih-box-" + box_cases["finding"] + "-" + box_cases["record_id"].str.replace(".png#", "-r", regex=False),
        kind="finding_presence", label=1, finding_state=POS, stratum="nih_box:" + box_cases["finding"],
        swap_key=box_cases["finding"] + "=1", dicom_id=box_cases["image"])
    info = {f"nih_box:{f}": {"requested": box_cap, "obtained": int((box_cases["finding"] == f).sum()),
                             "available": len(s), "target": want[f]} for f, s in strata.items()}
    box_short = [s for f, i in info.items() if (s := stratum_shortfall(
        f, i["target"], i["obtained"], i["available"],
        "candidate images failed the image check (no eligible box left to replace them)"))]
    return box_cases, boxed, info, box_short


def build_nih(
    nih_root: str | Path,
    out_dir: str | Path,
    *,
    metadata_from: str = "auto",
    split: str = "all",
    per_finding: int = 50,
    n_normal: int = 100,
    box_cap: int = 100,
    min_box_side: float = 50.0,
    image_size: int = 1024,
    swap_same_view: bool = False,
    options: BuildOptions | None = None,
    **option_kw: Any,
) -> BuildResult:
    """Build an NIH ChestX-ray14 probe set: boxed positives (capped per finding) + balanced labelled strata.

    ``metadata_from``: ``auto`` (user's folder, then torchxrayvision), ``root`` or ``torchxrayvision``.
    ``split``: ``all``, ``test`` (test_list.txt) or ``train_val`` (train_val_list.txt) for the unboxed strata.
    Boxes are in the 1024x1024 PNG frame (``image_size``) and are rescaled if a checked image differs.
    """
    opts = BuildOptions.of(options, option_kw, "build_nih")
    nih_root, out_dir = Path(nih_root), Path(out_dir)
    log = ExclusionLog()
    f_entry = _locate(nih_root, DATA_ENTRY_NAMES, metadata_from)
    f_bbox = _locate(nih_root, (BBOX_NAME,), metadata_from)
    df, lists = _read_data_entry(nih_root, f_entry)
    by_img = df.set_index("record_id")

    # ------------------------------------------------------------ boxed positives
    checker = opts.checker(out_dir, nih_root)
    box_cases, boxed, info, box_short = _boxed_cases(f_bbox, by_img, box_cap=box_cap, min_box_side=min_box_side,
                                                     image_size=image_size, seed=opts.seed, checker=checker,
                                                     log=log)

    # ------------------------------------------------------------ labelled strata (boxed images removed)
    pool = df if split == "all" else df[df["split"] == split]
    if pool.empty:
        raise DatasetError(f"NIH: no image in split {split!r} (needs {lists.get(split, split)})")
    pool = apply_filters(pool, [
        ("nih:view", pool["vreason"]), ("nih:demographics", pool["dreason"]), ("nih:file", pool["freason"]),
        ("nih:box_overlap", pd.Series(np.where(isin(pool["record_id"], boxed), "image has boxes (boxed stratum)", None), index=pool.index)),
    ], log, "nih")
    lab_cases, shortfalls, info2 = sample_label_strata(
        pool, findings=NIH_FINDINGS, per_finding=per_finding, n_normal=n_normal, negatives="explicit", seed=opts.seed,
        prefix="nih", source="nih", log=log, checker=checker,
        eligible="PA/AP, complete age/sex, one per patient, no boxes; absent = label not listed")
    info.update(info2)
    lw = np.where(lab_cases["finding"] == "no_finding", "normal", np.where(lab_cases["label"] == 1, "present", "absent"))
    lab_cases["case_id"] = "nih-" + lab_cases["finding"] + "-" + lw + "-" + lab_cases["record_id"].str.replace(".png", "", regex=False)
    lab_cases["dicom_id"] = lab_cases["record_id"]
    cases = pd.concat([box_cases, lab_cases], ignore_index=True).assign(kind="finding_presence", source="nih")

    swap_src = df[df["vreason"].isna() & df["freason"].isna()].sort_values("record_id")
    keys = {}
    for f in (*NIH_FINDINGS, "no_finding"):
        st = swap_src[f].to_numpy()
        keys[f"{f}=1"], keys[f"{f}=0"] = np.flatnonzero(st == POS), np.flatnonzero(st == NEG)
    sp = SwapPool(swap_src["image_path"].to_numpy(), swap_src["patient_id"].to_numpy(), keys, swap_src["view"].to_numpy())
    sampled = cases[["case_id", "stratum"]].copy()
    cases = assign_swaps(cases, sp, "swap_key", opts.seed, log, "nih", checker, swap_same_view)
    cases = add_boxes(cases)
    cases["image_width"] = cases.get("_checked_w", image_size)
    cases["image_height"] = cases.get("_checked_h", image_size)
    keep = ["case_id", "kind", "label", "finding", "image_path", "image_width", "image_height", "box_x0", "box_y0",
            "box_x1", "box_y1", "tbox_x0", "tbox_y0", "tbox_x1", "tbox_y1", "ibox_x0", "ibox_y0", "ibox_x1", "ibox_y1",
            "ibox_overlaps", "swap_image_path", "swap_patient_id", "patient_id", "study_id", "age", "sex", "view",
            "source", "split", "dicom_id", "finding_state", "stratum", "swap_match"]
    manifest = cases[keep].rename(columns={"dicom_id": "image_index"})
    sf: list[Shortfall] = [*box_short, *shortfalls]
    counts = {"nih_boxed": len(box_cases), "nih_labelled": len(lab_cases), "total": len(manifest)}
    params: dict[str, Any] = {
        "metadata_from": metadata_from, "split": split, "per_finding": per_finding, "n_normal": n_normal,
        "box_cap": box_cap, "min_box_side": min_box_side, "image_size": image_size, "check_images": opts.check_images,
    }
    return finalize(manifest, name=opts.named("nih"), builder="nih", image_root=nih_root, out_dir=out_dir, params=params,
                    inputs={"data_entry": f_entry, "bbox_list": f_bbox}, log=log, shortfalls=sf, counts=counts,
                    checker=checker, seed=opts.seed, verbose=opts.verbose, fingerprint=opts.fingerprint_inputs, strata=info, sampled=sampled)
