"""A probe set from any folder of images plus a CSV of (image, finding, label, box, patient, age, sex, view).

Each CSV row becomes one finding-presence case; ``label`` is the correct answer to "Is [display] present ...?"
(so a normal image asked about ``no_finding`` - "any acute abnormality" - has label 0). Boxes in the image's pixels,
as corners (x0, y0, x1, y1) or as top-left corner and size (x, y, w, h: ``box_x, box_y, box_w, box_h``, ``x, y, w,
h`` or NIH's ``Bbox [x, y, w, h]``), enable the masking conditions; swap partners are drawn from the other rows.
A CSV column the builder does not read is named in a warning (printed summary and provenance).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.findings import normalize_finding
from medvlm_audit.suites.grounding.datasets.common import (
    BuildOptions,
    BuildResult,
    DatasetError,
    ExclusionLog,
    ImageChecker,
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
    vanishing_box_reason,
    view_reasons,
)
from medvlm_audit.suites.grounding.probeset import outside_root

LABEL_VALUES = {
    "1": 1, "1.0": 1, "yes": 1, "true": 1, "present": 1, "positive": 1,
    "0": 0, "0.0": 0, "no": 0, "false": 0, "absent": 0, "negative": 0,
    "-1": -1, "-1.0": -1, "uncertain": -1,
}
#: sex values read as "not given" (allowed unless require_demographics); any other non-M/F value is excluded
SEX_UNKNOWN = ("U", "UNKNOWN", "O", "OTHER", "NA", "N/A")
ALIASES = {
    "image": ("image", "image_path", "path", "file"),
    "patient_id": ("patient_id", "patient", "subject_id"),
    "x0": ("x0", "box_x0", "x_min", "xmin"),
    "y0": ("y0", "box_y0", "y_min", "ymin"),
    "x1": ("x1", "box_x1", "x_max", "xmax"),
    "y1": ("y1", "box_y1", "y_max", "ymax"),
}
#: box as top-left corner + width and height, in the order x, y, w, h (the last is NIH's BBox_List_2017.csv header
#: ``Bbox [x,y,w,h]`` as a CSV reader splits it)
XYWH_LAYOUTS = (("box_x", "box_y", "box_w", "box_h"), ("x", "y", "w", "h"), ("Bbox [x", "y", "w", "h]"))
#: optional columns read under their own name
OPTIONAL = ("age", "sex", "view", "study_id", "split", "case_id", "width", "height")


def _col(df: pd.DataFrame, key: str) -> str | None:
    for c in ALIASES.get(key, (key,)):
        if c in df.columns:
            return c
    return None


def check_image_root(df: pd.DataFrame, images_dir: Path, csv_path: Path, allow: bool) -> int:
    """How many rows' images lie outside ``images_dir``; an error naming the first row unless ``allow``."""
    why = df["image_path"].map(lambda p: outside_root(p, images_dir))
    bad = why.notna()
    if bad.any() and not allow:
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DatasetError(f"folder CSV: {csv_path} row {int(df['row'].iloc[i])}: image {why.iloc[i]}; "
                           f"{int(bad.sum())} row(s) in all. Pass --allow-outside-root (allow_outside_root=True) "
                           "to accept images outside the image root")
    return int(bad.sum())


def check_case_ids(raw: pd.DataFrame, csv_path: Path) -> None:
    """A ``case_id`` column, when given, must name every row: an empty or blank id is an error naming the row
    (it would be stored as None in one table and NaN in another, and break the report)."""
    if "case_id" not in raw:
        return
    ids = raw["case_id"].astype("string").str.strip()
    bad = ids.isna() | (ids == "")
    if bad.any():
        rows = [int(i) + 2 for i in np.flatnonzero(bad.to_numpy())]
        more = f" (and {len(rows) - 1} more rows)" if len(rows) > 1 else ""
        raise DatasetError(f"folder CSV: {csv_path} row {rows[0]} has an empty case_id{more}; give every row an id, "
                           "or drop the case_id column to have ids made from the finding and row number")


def _checked_boxes(df: pd.DataFrame, raw: pd.DataFrame, images_dir: Path, checker: ImageChecker | None,
                   min_box_side: float, log: ExclusionLog) -> pd.DataFrame:
    """The rows whose image passes the check (or exists, with checks off), each with its image size (checked, or
    the CSV's width / height) and its box inside the image and large enough at 224 px; the rest to ``log``."""
    if checker is not None:
        res = checker.check(df["image_path"])
        df = apply_filters(df, [("image_check", df["image_path"].map(lambda p: None if res[p].ok else res[p].error))],
                           log, "folder")
        df["_checked_w"] = df["image_path"].map(lambda p: res[p].width)
        df["_checked_h"] = df["image_path"].map(lambda p: res[p].height)
    else:
        missing = df["image_path"].map(lambda p: None if (images_dir / p).is_file() else f"file {images_dir / p} does not exist")
        df = apply_filters(df, [("folder:file", missing)], log, "folder")
    w = df["_checked_w"] if "_checked_w" in df else (pd.to_numeric(raw["width"], errors="coerce").reindex(df.index) if "width" in raw else np.nan)
    h = df["_checked_h"] if "_checked_h" in df else (pd.to_numeric(raw["height"], errors="coerce").reindex(df.index) if "height" in raw else np.nan)
    df["_ann_w"], df["_ann_h"] = pd.Series(w, index=df.index).astype(float), pd.Series(h, index=df.index).astype(float)
    boxed = df[["_ann_x0", "_ann_y0", "_ann_x1", "_ann_y1"]].notna().all(axis=1)
    nosize = boxed & df["_ann_w"].isna()
    if nosize.any():
        raise DatasetError(f"folder CSV: row {int(df.loc[nosize, 'row'].iloc[0])} has a box but the image size is "
                           "unknown: keep check_images on or add width and height columns")
    out = box_outside_reason(df["_ann_x0"], df["_ann_y0"], df["_ann_x1"], df["_ann_y1"], df["_ann_w"], df["_ann_h"]).where(boxed)
    sw = (df["_ann_x1"] - df["_ann_x0"]) * 224 / df["_ann_w"]
    sh = (df["_ann_y1"] - df["_ann_y0"]) * 224 / df["_ann_h"]
    small = boxed & ((sw < min_box_side) | (sh < min_box_side))
    df = apply_filters(df, [("folder:box", out), ("folder:box_size", (
        "box " + sw.round(1).astype(str) + "x" + sh.round(1).astype(str) + f" px at 224 is below {min_box_side:g}").where(small)),
        ("folder:box_size", lambda d: vanishing_box_reason(d["_ann_x0"], d["_ann_y0"], d["_ann_x1"], d["_ann_y1"],
                                                           d["_ann_w"], d["_ann_h"]))],
        log, "folder")
    return df


def build_folder(
    images_dir: str | Path,
    csv_path: str | Path,
    out_dir: str | Path,
    *,
    frontal_only: bool = True,
    require_demographics: bool = False,
    min_box_side: float = 0.0,
    swap_same_view: bool = False,
    allow_outside_root: bool = False,
    options: BuildOptions | None = None,
    **option_kw: Any,
) -> BuildResult:
    """Build a probe set from ``csv_path`` (columns image, finding, label; optional x0, y0, x1, y1, patient_id,
    age, sex, view, study_id, split, case_id, width, height) with image paths relative to ``images_dir``.
    An image outside ``images_dir`` (absolute, ``..``, a symlink out) is an error naming the row unless
    ``allow_outside_root``; the build summary then counts them."""
    opts = BuildOptions.of(options, option_kw, "build_folder")
    images_dir, out_dir, csv_path = Path(images_dir), Path(out_dir), Path(csv_path)
    log = ExclusionLog()
    raw = read_csv(csv_path, ["finding", "label"], "folder CSV", dtype=str, keep_default_na=False, na_values=[""])
    img_col = _col(raw, "image")
    if img_col is None:
        raise DatasetError(f"folder CSV: {csv_path} lacks an image column (one of {ALIASES['image']})")
    df = pd.DataFrame({"image_path": raw[img_col].astype(str), "record_id": raw[img_col].astype(str)})
    df["row"] = raw.index + 2
    n_outside = check_image_root(df, images_dir, csv_path, allow_outside_root)
    # findings and labels: clear errors naming the row and value
    fins = []
    for i, v in enumerate(raw["finding"]):
        try:
            fins.append(normalize_finding(str(v)))
        except KeyError:
            raise DatasetError(f"folder CSV: {csv_path} row {i + 2} column 'finding' has unknown finding {v!r}") from None
    df["finding"] = fins
    lab = raw["label"].astype("string").str.strip().str.lower().map(LABEL_VALUES)
    if lab.isna().any():
        i = int(np.flatnonzero(lab.isna().to_numpy())[0])
        raise DatasetError(f"folder CSV: {csv_path} row {i + 2} column 'label' has value {py(raw['label'].iloc[i])!r}; "
                           f"allowed: {sorted(LABEL_VALUES)}")
    df["label"] = lab.astype(int)
    pcol = _col(raw, "patient_id")
    df["patient_id"] = raw[pcol].astype(str) if pcol else df["image_path"]
    check_case_ids(raw, csv_path)
    df["case_id"] = raw["case_id"].astype(str) if "case_id" in raw else (
        "folder-" + df["finding"] + "-r" + df["row"].astype(str))
    if df["case_id"].duplicated().any():
        raise DatasetError(f"folder CSV: {csv_path} repeats case_id {df['case_id'][df['case_id'].duplicated()].iloc[0]!r}")
    df["study_id"] = raw["study_id"].astype(str) if "study_id" in raw else df["image_path"]
    df["split"] = raw.get("split")
    df["age"] = pd.to_numeric(raw["age"], errors="coerce").astype(float) if "age" in raw else np.nan
    df["sex"] = normalize_sex(raw["sex"]) if "sex" in raw else None
    # a value that is neither blank nor readable is an exclusion with the value, never a silent "missing"
    demo_bad = pd.Series([None] * len(df), index=df.index, dtype=object)
    if "sex" in raw:
        sx = raw["sex"].astype("string").str.strip()
        unknown = sx.notna() & (sx != "") & df["sex"].isna() & ~sx.str.upper().isin(SEX_UNKNOWN)
        demo_bad[unknown] = "unrecognised sex value " + sx[unknown].map(repr).astype(str) + (
            " (expected M/F/Male/Female, or blank/Unknown/Other)")
    if "age" in raw:
        ag = raw["age"].astype("string").str.strip()
        nonnum = ag.notna() & (ag != "") & df["age"].isna()
        demo_bad[nonnum] = "non-numeric age " + ag[nonnum].map(repr).astype(str)
    df["view"] = normalize_view(raw["view"]).astype(str) if "view" in raw else ""
    box_cols = _read_box(raw, df, csv_path)
    used = {img_col, "finding", "label", pcol, *box_cols, *(c for c in OPTIONAL if c in raw)}
    unused = [c for c in raw.columns if c not in used
              and not (str(c).startswith("Unnamed: ") and raw[c].isna().all())]  # empty columns of trailing commas
    note = (f"column(s) {unused} of {csv_path.name} are not used (read: image, finding, label, patient_id, "
            f"box corners x0/y0/x1/y1 or x/y/w/h, {', '.join(OPTIONAL)})")
    warnings = [note] if unused else []
    has_box = df[[f"_ann_{k}" for k in ("x0", "y0", "x1", "y1")]].notna().all(axis=1)
    part_box = df[[f"_ann_{k}" for k in ("x0", "y0", "x1", "y1")]].notna().any(axis=1) & ~has_box
    reasons: list[tuple[str, pd.Series]] = [
        ("folder:demographics", demo_bad),
        ("folder:label", pd.Series(np.where(df["label"] == -1, "uncertain label", None), index=df.index)),
        ("folder:box", pd.Series(np.where(part_box, "box has missing coordinates", None), index=df.index)),
    ]
    if frontal_only and "view" in raw:
        vr = view_reasons(df["view"])
        vr[df["view"] == ""] = None  # a blank view is allowed in a generic folder
        reasons.append(("folder:view", vr))
    if require_demographics:
        d = pd.Series([None] * len(df), index=df.index, dtype=object)
        d[df["sex"].isna()] = "missing sex"
        d[df["age"].isna()] = "missing age"
        reasons.append(("folder:demographics", d))
    df = apply_filters(df, reasons, log, "folder")
    df["view"] = df["view"].replace("", None)
    checker = opts.checker(out_dir, images_dir)
    df = _checked_boxes(df, raw, images_dir, checker, min_box_side, log)
    for k in ("x0", "y0", "x1", "y1"):
        df[f"box_{k}"] = df[f"_ann_{k}"]
    df["swap_key"] = df["finding"] + "=" + df["label"].astype(str)
    pool_src = df.drop_duplicates("image_path").sort_values("image_path")
    keys = {k: np.flatnonzero(pool_src["swap_key"].to_numpy() == k) for k in pool_src["swap_key"].unique()}
    sp = SwapPool(pool_src["image_path"].to_numpy(), pool_src["patient_id"].to_numpy(), keys,
                  pool_src["view"].to_numpy())
    df = df.assign(kind="finding_presence", source="folder", finding_state=df["label"])
    df = assign_swaps(df, sp, "swap_key", opts.seed, log, "folder", None, swap_same_view)
    df = add_boxes(df)
    df["image_width"], df["image_height"] = df["_ann_w"], df["_ann_h"]
    keep = ["case_id", "kind", "label", "finding", "image_path", "image_width", "image_height", "box_x0", "box_y0",
            "box_x1", "box_y1", "tbox_x0", "tbox_y0", "tbox_x1", "tbox_y1", "ibox_x0", "ibox_y0", "ibox_x1", "ibox_y1",
            "ibox_overlaps", "swap_image_path", "swap_patient_id", "patient_id", "study_id", "age", "sex", "view",
            "source", "split", "swap_match"]
    manifest = df[keep]
    params: dict[str, Any] = {"frontal_only": frontal_only, "require_demographics": require_demographics,
                              "min_box_side": min_box_side, "swap_same_view": swap_same_view,
                              "patient_ids": "from CSV" if pcol else "none given: each image is its own patient",
                              "box_columns": box_cols}
    counts = {"folder": len(manifest), "boxed": int(manifest["tbox_x0"].notna().sum()), "total": len(manifest)}
    if allow_outside_root:
        params["allow_outside_root"] = True
        counts["CSV rows with images outside the image root (allowed by allow_outside_root)"] = n_outside
    return finalize(manifest, name=opts.named("folder"), builder="folder", image_root=images_dir, out_dir=out_dir, params=params,
                    inputs={"csv": csv_path}, log=log, shortfalls=[], counts=counts, checker=checker, seed=opts.seed,
                    verbose=opts.verbose, fingerprint=opts.fingerprint_inputs, warnings=warnings)


def _numeric(raw: pd.DataFrame, col: str, csv_path: Path) -> pd.Series:
    """A box column as floats (blank -> NaN); a value that is neither blank nor a number is an error naming it."""
    v = pd.to_numeric(raw[col], errors="coerce")
    bad = raw[col].notna() & v.isna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DatasetError(f"folder CSV: {csv_path} row {i + 2} column {col!r} has non-numeric value {raw[col].iloc[i]!r}")
    return v.astype(float)


def _read_box(raw: pd.DataFrame, df: pd.DataFrame, csv_path: Path) -> list[str]:
    """Fill df's _ann_x0.._ann_y1 from corner columns or from x, y, w, h columns; returns the columns read."""
    corners = {k: _col(raw, k) for k in ("x0", "y0", "x1", "y1")}
    xywh = next((lay for lay in XYWH_LAYOUTS if all(c in raw.columns for c in lay)), None)
    given = [c for c in corners.values() if c]
    if xywh is not None and given:
        raise DatasetError(f"folder CSV: {csv_path} has both box corners {given} and x, y, w, h columns {list(xywh)}; "
                           "keep one box layout")
    if xywh is None:
        partial = [c for c in dict.fromkeys(c for lay in XYWH_LAYOUTS for c in lay) if c in raw.columns]
        if partial and not given:
            raise DatasetError(f"folder CSV: {csv_path} has box column(s) {partial} but not all four of x, y, w, h "
                               f"(accepted: {', '.join(str(list(lay)) for lay in XYWH_LAYOUTS)})")
        for k, c in corners.items():
            df[f"_ann_{k}"] = _numeric(raw, c, csv_path).to_numpy() if c else np.nan
        return given
    x, y, w, h = (_numeric(raw, c, csv_path).to_numpy() for c in xywh)
    df["_ann_x0"], df["_ann_y0"], df["_ann_x1"], df["_ann_y1"] = x, y, x + w, y + h
    return list(xywh)
