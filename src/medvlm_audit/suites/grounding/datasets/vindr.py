"""An open probe set with radiologist boxes from VinDr-CXR (PhysioNet 1.0.0 or the Kaggle VinBigData layout).

Reads ``annotations/annotations_{split}.csv`` (image_id, rad_id, class_name, x_min, y_min, x_max, y_max) and, when
present, ``annotations/image_labels_{split}.csv``; images from ``{split}/<image_id>.dicom`` (or .dcm/.png/.jpg).
One boxed positive case per (image, finding) whose box is the enclosing box of every reader's boxes for that
finding, ``n_absent`` absent images per boxed finding and ``n_normal`` "No finding" images.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.suites.grounding.datasets.common import (
    NEG,
    POS,
    BuildOptions,
    BuildResult,
    DatasetError,
    ExclusionLog,
    Shortfall,
    SwapPool,
    add_boxes,
    apply_filters,
    assign_swaps,
    box_outside_reason,
    finalize,
    normalize_sex,
    normalize_view,
    py,
    read_csv,
    select_checked,
    shuffled_one_per_patient,
    stratum_rng,
    stratum_shortfall,
    vanishing_box_reason,
    view_reasons,
)

#: VinDr-CXR class name -> finding id (None: a VinDr class outside the prompt vocabulary, logged and skipped)
VINDR_CLASSES: dict[str, str | None] = {
    "Aortic enlargement": "aortic_enlargement", "Atelectasis": "atelectasis", "Calcification": "calcification",
    "Cardiomegaly": "cardiomegaly", "Consolidation": "consolidation", "Edema": "edema", "Emphysema": "emphysema",
    "ILD": "ild", "Infiltration": "infiltration", "Lung Opacity": "lung_opacity", "Nodule/Mass": "nodule",
    "Pleural effusion": "pleural_effusion", "Pleural thickening": "pleural_thickening",
    "Pneumothorax": "pneumothorax", "Pulmonary fibrosis": "fibrosis", "Rib fracture": "fracture",
    "Clavicle fracture": None, "Enlarged PA": None, "Lung cavity": None, "Lung cyst": None,
    "Mediastinal shift": None, "Other lesion": None, "No finding": "no_finding",
    # global (image-level) labels of the PhysioNet release
    "COPD": None, "Lung tumor": None, "Pneumonia": "pneumonia", "Tuberculosis": None, "Other diseases": None,
    "Other disease": None,
}
IMAGE_EXTS = (".dicom", ".dcm", ".png", ".jpg", ".jpeg")


def _index_images(folder: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    if folder.is_dir():
        with os.scandir(folder) as it:
            for e in it:
                stem, ext = os.path.splitext(e.name)
                if ext.lower() in IMAGE_EXTS and stem not in out:
                    out[stem] = f"{folder.name}/{e.name}"
    return out


def _read_annotations(root: Path, split: str, log: ExclusionLog, inputs: dict[str, Path]
                      ) -> tuple[pd.DataFrame, pd.Series, pd.Series, list[str], dict[str, set[str]]]:
    """The split's box annotations (``annotations_<split>.csv``) and, when present, its image labels: the
    annotations with their finding and record id, which rows are boxes of a finding (``boxable``) and why a box's
    coordinates are unusable, every image id, and the images positive for each finding (normal only when no
    reader marked anything). The files read are added to ``inputs``; unusable rows go to ``log``."""
    ann_path = None
    for cand in (root / "annotations" / f"annotations_{split}.csv", root / f"{split}.csv"):
        if cand.is_file():
            ann_path = cand
            break
    if ann_path is None:
        raise DatasetError(f"VinDr-CXR: neither {root / 'annotations' / f'annotations_{split}.csv'} nor "
                           f"{root / f'{split}.csv'} exists")
    inputs["annotations"] = ann_path
    ann = read_csv(ann_path, ["image_id", "class_name", "x_min", "y_min", "x_max", "y_max"], "VinDr-CXR annotations",
                   dtype={"image_id": str, "class_name": str})
    unknown = ~ann["class_name"].isin(list(VINDR_CLASSES))
    if unknown.any():
        i = int(np.flatnonzero(unknown.to_numpy())[0])
        raise DatasetError(f"VinDr-CXR: {ann_path} row {i + 2} has class_name {ann['class_name'].iloc[i]!r}, "
                           f"not a VinDr-CXR class")
    ann["finding"] = ann["class_name"].map(VINDR_CLASSES)
    ann["record_id"] = ann["image_id"] + "#" + (ann.index + 2).astype(str)
    # coordinates: a boxed class needs four numbers; a blank or non-numeric one is logged, never silently dropped
    boxable = ann["finding"].notna() & (ann["finding"] != "no_finding")
    coord_reason = pd.Series([None] * len(ann), index=ann.index, dtype=object)
    for c in ("x_min", "y_min", "x_max", "y_max"):
        raw = ann[c]
        num = pd.to_numeric(raw, errors="coerce")
        blank = raw.isna() | (raw.astype(str).str.strip() == "")
        nonnum = num.isna() & ~blank
        coord_reason[boxable & nonnum & coord_reason.isna()] = (
            f"non-numeric box coordinate {c} = " + raw.astype(str).map(repr))[boxable & nonnum & coord_reason.isna()]
        coord_reason[boxable & blank & coord_reason.isna()] = f"box coordinate {c} is missing"
        ann[c] = num
    bad_coords = ann[coord_reason.notna()]
    log.add_many(bad_coords["record_id"], "vindr", "vindr_box:coordinates",
                 (bad_coords["class_name"] + " box: " + coord_reason[coord_reason.notna()]).tolist())
    images = sorted(set(ann["image_id"]))
    lab_path = root / "annotations" / f"image_labels_{split}.csv"
    pos_sets: dict[str, set[str]] = {}
    if lab_path.is_file():
        inputs["image_labels"] = lab_path
        lab = read_csv(lab_path, ["image_id"], "VinDr-CXR image labels", dtype={"image_id": str})
        images = sorted(set(images) | set(lab["image_id"]))
        for col in lab.columns:
            if col in VINDR_CLASSES and VINDR_CLASSES[col] is not None:
                v = pd.to_numeric(lab[col], errors="coerce")
                bad = v.isna() | ~v.isin([0, 1])
                if bad.any():
                    i = int(np.flatnonzero(bad.to_numpy())[0])
                    raise DatasetError(f"VinDr-CXR: {lab_path} column {col!r} row {i + 2} has value "
                                       f"{py(lab[col].iloc[i])!r}; expected 0 or 1")
                pos_sets.setdefault(VINDR_CLASSES[col], set()).update(lab.loc[v == 1, "image_id"])
    for f, ids in ann.dropna(subset=["finding"]).groupby("finding")["image_id"]:
        pos_sets.setdefault(str(f), set()).update(ids)
    # normal only when no reader marked anything (multi-reader train sets mix "No finding" with findings)
    marked = set(ann.loc[ann["class_name"] != "No finding", "image_id"])
    pos_sets["no_finding"] = pos_sets.get("no_finding", set()) - marked
    skipped = ann[ann["finding"].isna()]
    log.add_many(skipped["record_id"], "vindr", "vindr:class",
                 ("class " + skipped["class_name"] + " has no finding id in the prompt vocabulary").tolist())
    return ann, boxable, coord_reason, images, pos_sets


def _boxed_cases(ann: pd.DataFrame, boxable: pd.Series, coord_reason: pd.Series, by_img: pd.DataFrame,
                 min_box_side: float, log: ExclusionLog) -> pd.DataFrame:
    """One boxed candidate per (image, finding): the enclosing box of every reader's box inside the image,
    filtered by size at 224 px, with ``box_*`` in the checked image's frame."""
    boxes = ann[boxable & coord_reason.isna()]
    gone = ~boxes["image_id"].isin(by_img.index)
    log.add_many(boxes.loc[gone, "record_id"], "vindr", "vindr_box:image",
                 ("image " + boxes.loc[gone, "image_id"] + " was excluded (see its vindr:image or image_check row)"
                  ).tolist())
    boxes = boxes[~gone].copy()
    # each reader's box must lie inside its image (the enclosing box is built from the boxes that do)
    bw, bh = boxes["image_id"].map(by_img["_ann_w"]), boxes["image_id"].map(by_img["_ann_h"])
    nosize = pd.Series(np.where(bw.isna() | bh.isna(), "image size unknown (image not checked and not in sizes_csv)",
                                None), index=boxes.index)
    boxes = apply_filters(boxes, [
        ("vindr_box:size", nosize),
        ("vindr_box:box", box_outside_reason(boxes["x_min"], boxes["y_min"], boxes["x_max"], boxes["y_max"], bw, bh)),
    ], log, "vindr")
    g = boxes.groupby(["image_id", "finding"], sort=True)
    agg = g.agg(x0=("x_min", "min"), y0=("y_min", "min"), x1=("x_max", "max"), y1=("y_max", "max"),
                n_boxes=("x_min", "size")).reset_index()
    agg["record_id"] = agg["image_id"] + ":" + agg["finding"]
    for c in ("image_path", "patient_id", "study_id", "age", "sex", "view", "_ann_w", "_ann_h", "_checked_w", "_checked_h"):
        if c in by_img:
            agg[c] = agg["image_id"].map(by_img[c])
    sw = (agg["x1"] - agg["x0"]) * 224 / agg["_ann_w"]
    sh = (agg["y1"] - agg["y0"]) * 224 / agg["_ann_h"]
    small = (sw < min_box_side) | (sh < min_box_side)
    agg = apply_filters(agg, [
        ("vindr_box:box", box_outside_reason(agg["x0"], agg["y0"], agg["x1"], agg["y1"], agg["_ann_w"], agg["_ann_h"])),
        ("vindr_box:box_size", ("box " + sw.round(1).astype(str) + "x" + sh.round(1).astype(str)
                                + f" px at 224 is below {min_box_side:g}x{min_box_side:g}").where(small)),
        ("vindr_box:box_size", lambda d: vanishing_box_reason(d["x0"], d["y0"], d["x1"], d["y1"], d["_ann_w"],
                                                              d["_ann_h"])),
    ], log, "vindr")
    for a, b in (("x0", "x0"), ("y0", "y0"), ("x1", "x1"), ("y1", "y1")):
        agg[f"_ann_{a}"] = agg[b]
    cw = agg["_checked_w"].astype(float) if "_checked_w" in agg else agg["_ann_w"]
    ch = agg["_checked_h"].astype(float) if "_checked_h" in agg else agg["_ann_h"]
    agg["box_x0"], agg["box_x1"] = agg["x0"] * cw / agg["_ann_w"], agg["x1"] * cw / agg["_ann_w"]
    agg["box_y0"], agg["box_y1"] = agg["y0"] * ch / agg["_ann_h"], agg["y1"] * ch / agg["_ann_h"]
    return agg


def build_vindr(
    vindr_root: str | Path,
    out_dir: str | Path,
    *,
    split: str = "test",
    n_absent: int = 50,
    n_normal: int = 100,
    box_cap: int = 100,
    min_box_side: float = 50.0,
    metadata_csv: str | Path | None = None,
    sizes_csv: str | Path | None = None,
    require_demographics: bool = False,
    options: BuildOptions | None = None,
    **option_kw: Any,
) -> BuildResult:
    """Build a VinDr-CXR probe set (boxed positives + absent images per boxed finding + normals).

    Box coordinates are in the original image's pixel frame; that frame's size comes from the image header
    (``check_images``) or ``sizes_csv`` (image_id, width, height: needed for resized PNG copies).
    ``metadata_csv`` (image_id, age, sex, view) adds demographics; VinDr has no patient ids, so each image is its
    own patient for swaps.
    """
    opts = BuildOptions.of(options, option_kw, "build_vindr")
    root, out_dir = Path(vindr_root), Path(out_dir)
    log = ExclusionLog()
    inputs: dict[str, Path] = {}
    ann, boxable, coord_reason, images, pos_sets = _read_annotations(root, split, log, inputs)

    img = pd.DataFrame({"record_id": images})
    idx = _index_images(root / split)
    img["image_path"] = img["record_id"].map(idx)
    img["patient_id"] = img["record_id"]
    img["study_id"] = img["record_id"]
    img["age"], img["sex"], img["view"] = np.nan, None, None
    if metadata_csv is not None:
        inputs["metadata"] = Path(metadata_csv)
        meta = read_csv(Path(metadata_csv), ["image_id"], "VinDr-CXR metadata", dtype={"image_id": str}).set_index("image_id")
        if "age" in meta:
            img["age"] = pd.to_numeric(img["record_id"].map(meta["age"]), errors="coerce").astype(float)
        if "sex" in meta:
            img["sex"] = normalize_sex(img["record_id"].map(meta["sex"]))
        if "view" in meta:
            img["view"] = normalize_view(img["record_id"].map(meta["view"]).astype("string")).replace("", None)
    checker = opts.checker(out_dir, root)
    reasons = pd.Series([None] * len(img), index=img.index, dtype=object)
    reasons[img["image_path"].isna()] = f"no image file {split}/<image_id>{{{','.join(IMAGE_EXTS)}}}"
    if require_demographics:
        reasons[img["sex"].isna() & reasons.isna()] = "missing sex"
        reasons[img["age"].isna() & reasons.isna()] = "missing age"
    has_view = img["view"].notna()
    vr = view_reasons(img["view"].where(has_view, "PA"))  # known non-frontal codes vs unknown codes
    reasons[has_view & vr.notna() & reasons.isna()] = vr
    img = apply_filters(img, [("vindr:image", reasons)], log, "vindr")
    # the box frame: header size (checked) or sizes_csv
    size = {}
    if sizes_csv is not None:
        inputs["sizes"] = Path(sizes_csv)
        sz = read_csv(Path(sizes_csv), ["image_id", "width", "height"], "VinDr-CXR sizes", dtype={"image_id": str})
        size = {r.image_id: (float(r.width), float(r.height)) for r in sz.itertuples()}
    if checker is not None:
        res = checker.check(img["image_path"])
        failed = [p for p, r in res.items() if not r.ok]
        for p in failed:
            log.add(p, "vindr", "image_check", res[p].error or "image check failed")
        img = img[~img["image_path"].isin(failed)]
        img["_checked_w"] = img["image_path"].map(lambda p: res[p].width)
        img["_checked_h"] = img["image_path"].map(lambda p: res[p].height)
    elif not size:
        raise DatasetError("VinDr-CXR: box coordinates need each image's size: keep check_images on "
                           "(reads the DICOM/PNG header) or pass sizes_csv (image_id, width, height)")
    img["_ann_w"] = img["record_id"].map(lambda i: size.get(i, (np.nan, np.nan))[0])
    img["_ann_h"] = img["record_id"].map(lambda i: size.get(i, (np.nan, np.nan))[1])
    if "_checked_w" in img:
        img["_ann_w"] = img["_ann_w"].fillna(img["_checked_w"].astype(float))
        img["_ann_h"] = img["_ann_h"].fillna(img["_checked_h"].astype(float))
    findings = sorted(f for f in pos_sets if f != "no_finding")
    for f in (*findings, "no_finding"):
        img[f] = np.where(img["record_id"].isin(pos_sets.get(f, set())), POS, NEG).astype(np.int8)
    by_img = img.set_index("record_id")

    # ------------------------------------------------------------ boxed positives: one per (image, finding)
    agg = _boxed_cases(ann, boxable, coord_reason, by_img, min_box_side, log)
    strata, want, avail, meta = {}, {}, {}, {}
    for f in findings:
        sub = agg[agg["finding"] == f].sort_values("record_id", kind="mergesort")
        sub = sub.iloc[stratum_rng(opts.seed, "vindr_box", f).permutation(len(sub))]
        k = f"vindr_box:{f}"
        strata[k], want[k], avail[k], meta[k] = sub, min(box_cap, len(sub)), len(sub), (f, 1, POS)
        if len(sub) > box_cap:
            log.add_many(sub["record_id"].iloc[box_cap:], "vindr", "vindr_box:cap", f"over the cap of {box_cap} {f} cases")
    pool = img.copy()
    boxed_findings = [f for f in findings if avail.get(f"vindr_box:{f}", 0) > 0]
    for f in boxed_findings:
        k = f"vindr:{f}:absent"
        cand = shuffled_one_per_patient(pool[pool[f].to_numpy() == NEG], stratum_rng(opts.seed, "vindr", f, "absent"))
        strata[k], want[k], avail[k], meta[k] = cand, n_absent, len(cand), (f, 0, NEG)
    k = "vindr:no_finding:normal"
    cand = shuffled_one_per_patient(pool[pool["no_finding"].to_numpy() == POS], stratum_rng(opts.seed, "vindr", "no_finding"))
    strata[k], want[k], avail[k], meta[k] = cand, n_normal, len(cand), ("no_finding", 0, POS)
    sel = select_checked(strata, want, None, log, "vindr")  # images were checked above
    parts, shortfalls, info = [], [], {}
    for k, df in sel.items():
        f, lab, state = meta[k]
        df = df.copy()
        df["finding"], df["label"], df["finding_state"], df["stratum"] = f, lab, state, k
        df["swap_key"] = f + ("=1" if state == POS else "=0")
        word = "box" if k.startswith("vindr_box") else ("normal" if f == "no_finding" else "absent")
        df["case_id"] = f"vindr-{word}-{f}-" + (df["image_id"] if "image_id" in df and df["image_id"].notna().all() else df["record_id"])
        df["image_id"] = df["image_id"] if "image_id" in df and df["image_id"].notna().all() else df["record_id"]
        parts.append(df)
        info[k] = {"requested": want[k] if not k.startswith("vindr_box") else box_cap, "obtained": len(df),
                   "available": avail[k], "target": want[k]}
        if not k.startswith("vindr_box"):
            s = stratum_shortfall(k, want[k], len(df), avail[k], "too few eligible images")
            if s:
                shortfalls.append(s)
    cases = pd.concat(parts, ignore_index=True).assign(kind="finding_presence", source="vindr", split=split)
    keys = {}
    srt = img.sort_values("record_id")
    for f in (*findings, "no_finding"):
        st = srt[f].to_numpy()
        keys[f"{f}=1"], keys[f"{f}=0"] = np.flatnonzero(st == POS), np.flatnonzero(st == NEG)
    sp = SwapPool(srt["image_path"].to_numpy(), srt["patient_id"].to_numpy(), keys, srt["view"].to_numpy())
    sampled = cases[["case_id", "stratum"]].copy()
    cases = assign_swaps(cases, sp, "swap_key", opts.seed, log, "vindr", None, False)
    cases = add_boxes(cases)
    cases["image_width"] = cases["_checked_w"] if "_checked_w" in cases else cases["_ann_w"]
    cases["image_height"] = cases["_checked_h"] if "_checked_h" in cases else cases["_ann_h"]
    keep = ["case_id", "kind", "label", "finding", "image_path", "image_width", "image_height", "box_x0", "box_y0",
            "box_x1", "box_y1", "tbox_x0", "tbox_y0", "tbox_x1", "tbox_y1", "ibox_x0", "ibox_y0", "ibox_x1", "ibox_y1",
            "ibox_overlaps", "swap_image_path", "swap_patient_id", "patient_id", "study_id", "age", "sex", "view",
            "source", "split", "image_id", "finding_state", "stratum", "swap_match", "n_boxes"]
    for c in keep:
        if c not in cases:
            cases[c] = None
    manifest = cases[keep]
    sf: list[Shortfall] = shortfalls
    counts = {"vindr_boxed": int(manifest["stratum"].str.startswith("vindr_box").sum()), "total": len(manifest)}
    params: dict[str, Any] = {"split": split, "n_absent": n_absent, "n_normal": n_normal, "box_cap": box_cap,
                              "min_box_side": min_box_side, "require_demographics": require_demographics,
                              "box_policy": "enclosing box of all readers' boxes per (image, finding)"}
    return finalize(manifest, name=opts.named("vindr"), builder="vindr", image_root=root, out_dir=out_dir, params=params,
                    inputs=inputs, log=log, shortfalls=sf, counts=counts, checker=checker, seed=opts.seed,
                    verbose=opts.verbose, fingerprint=opts.fingerprint_inputs, strata=info, sampled=sampled)
