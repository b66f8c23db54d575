"""build_folder: a directory of images + a CSV of (image, finding, label, box, patient, age, sex, view)."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from medvlm_audit.boxes import working_box
from medvlm_audit.suites.grounding.datasets.common import DatasetError
from medvlm_audit.suites.grounding.datasets.folder import build_folder


@pytest.fixture()
def folder(tmp_path) -> tuple[Path, Path]:
    d = tmp_path / "imgs"
    d.mkdir()
    rows = []
    for i in range(24):
        Image.fromarray(np.full((200, 160), i * 9, np.uint8)).save(d / f"img{i:02d}.png")
        fin = ["Cardiomegaly", "Pleural Effusion", "no_finding"][i % 3]
        lab = "yes" if (i // 3) % 2 == 0 and fin != "no_finding" else "no"
        box = (20, 30, 120, 150) if lab == "yes" else ("", "", "", "")
        rows.append([f"img{i:02d}.png", fin, lab, *box, f"P{i // 2}", 40 + i, "F" if i % 2 else "M", "PA"])
    rows.append(["img00.png", "edema", "-1", "", "", "", "", "P0", 40, "M", "PA"])  # uncertain -> excluded
    rows.append(["img01.png", "edema", "1", "", "", "", "", "P0", 40, "M", "LATERAL"])  # lateral -> excluded
    rows.append(["missing.png", "edema", "1", "", "", "", "", "P9", 40, "M", "PA"])  # file missing -> excluded
    csv = tmp_path / "cases.csv"
    pd.DataFrame(rows, columns=["image", "finding", "label", "x0", "y0", "x1", "y1", "patient_id", "age", "sex",
                                "view"]).to_csv(csv, index=False)
    return d, csv


def test_folder_build(folder, tmp_path):
    d, csv = folder
    res = build_folder(d, csv, tmp_path / "o", verbose=False)
    df = res.probe_set.df
    assert len(df) == 24 and set(df.finding) == {"cardiomegaly", "pleural_effusion", "no_finding"}
    yes = df[df.label == 1]
    assert yes.tbox_x0.notna().all() and df[df.label == 0].tbox_x0.isna().all()
    assert tuple(yes.iloc[0][["tbox_x0", "tbox_y0", "tbox_x1", "tbox_y1"]]) == working_box((20, 30, 120, 150), 160, 200)
    assert (df.swap_patient_id != df.patient_id).all()
    key = df.set_index("image_path")
    for r in df.itertuples():  # swap partner carries the same finding and label
        partner = pd.read_csv(csv).query("image == @r.swap_image_path")
        assert ((partner.finding.str.lower().str.replace(" ", "_") == r.finding) & (partner.label.isin(
            ["yes", "1"] if r.label == 1 else ["no", "0"]))).any()
    assert len(key) == 24
    reasons = " | ".join(res.exclusions.reason)
    assert "uncertain label" in reasons and "not frontal" in reasons and "missing.png" in reasons


def test_folder_bad_values(folder, tmp_path):
    d, csv = folder
    df = pd.read_csv(csv, dtype=str, keep_default_na=False)
    df.loc[3, "label"] = "maybe"
    df.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DatasetError, match=r"row 5 column 'label' has value 'maybe'"):
        build_folder(d, tmp_path / "bad.csv", tmp_path / "o", verbose=False)
    df.loc[3, "label"], df.loc[4, "finding"] = "1", "Pneumonitis"
    df.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DatasetError, match=r"row 6 column 'finding' has unknown finding 'Pneumonitis'"):
        build_folder(d, tmp_path / "bad.csv", tmp_path / "o", verbose=False)
    df.loc[4, "finding"], df.loc[0, "x1"] = "edema", "400"
    df.to_csv(tmp_path / "bad.csv", index=False)
    res = build_folder(d, tmp_path / "bad.csv", tmp_path / "o", verbose=False)
    assert res.exclusions.reason.str.contains("outside the 160.0x200.0 image").any()


def test_folder_unreadable_age_or_sex_is_an_exclusion_not_a_silent_blank(folder, tmp_path):
    d, csv = folder
    df = pd.read_csv(csv, dtype=str, keep_default_na=False)
    df.loc[0, "age"], df.loc[1, "sex"], df.loc[2, "sex"], df.loc[3, "age"] = "forty", "X", "Unknown", ""
    df.to_csv(tmp_path / "c.csv", index=False)
    res = build_folder(d, tmp_path / "c.csv", tmp_path / "o", verbose=False)
    ex = res.exclusions
    rows = ex[ex.stage == "folder:demographics"].set_index("record_id").reason
    assert rows["img00.png"] == "non-numeric age 'forty'"
    assert rows["img01.png"].startswith("unrecognised sex value 'X'")
    out = res.probe_set.df.set_index("image_path")
    assert "img00.png" not in out.index and "img01.png" not in out.index
    assert pd.isna(out.loc["img02.png", "sex"]) and np.isnan(out.loc["img03.png", "age"])  # blank/Unknown: kept


def test_a_box_that_vanishes_at_224_is_an_exclusion_not_a_crash(folder, tmp_path):
    d, csv = folder
    Image.fromarray(np.zeros((2000, 2000), np.uint8)).save(d / "big.png")
    df = pd.read_csv(csv, dtype=str, keep_default_na=False)
    row = df.iloc[0].copy()
    row[["image", "x0", "y0", "x1", "y1", "patient_id"]] = ["big.png", "100", "100", "102", "102", "PB"]
    pd.concat([df, row.to_frame().T]).to_csv(tmp_path / "c.csv", index=False)  # 2 px of 2000: 0.2 px at 224
    res = build_folder(d, tmp_path / "c.csv", tmp_path / "o", verbose=False)  # min_box_side 0 by default
    ex = res.exclusions
    hit = ex[(ex.stage == "folder:box_size") & (ex.record_id == "big.png")]
    assert len(hit) == 1 and "under 1 px" in hit.reason.iloc[0]


def _xywh_csv(path: Path, layout: str) -> list[tuple]:
    """The folder fixture's cases with boxes written as top-left corner + size, in one of three layouts."""
    rows = [("img00.png", "Cardiomegaly", "1", 20, 30, 100, 120, "P0"), ("img01.png", "Cardiomegaly", "1", 5, 6, 50, 60, "P1"),
            ("img02.png", "edema", "0", "", "", "", "", "P2"), ("img03.png", "edema", "0", "", "", "", "", "P3"),
            ("img04.png", "edema", "1", 10, 10, "", 40, "P4")]  # a box without its width: excluded
    if layout == "nih":  # NIH's BBox_List_2017.csv header "Bbox [x,y,w,h]" and its trailing commas
        lines = ["image,finding,label,Bbox [x,y,w,h],patient_id,,"]
        lines += [",".join(str(v) for v in (*r[:3], *r[3:7], r[7])) + ",," for r in rows]
        path.write_text("\n".join(lines) + "\n")
    else:
        names = {"box": ["box_x", "box_y", "box_w", "box_h"], "short": ["x", "y", "w", "h"]}[layout]
        pd.DataFrame(rows, columns=["image", "finding", "label", *names, "patient_id"]).to_csv(path, index=False)
    return rows


@pytest.mark.parametrize("layout", ["box", "short", "nih"])
def test_folder_reads_xywh_boxes(folder, tmp_path, layout):
    d, _ = folder
    rows = _xywh_csv(tmp_path / "c.csv", layout)
    res = build_folder(d, tmp_path / "c.csv", tmp_path / "o", verbose=False)
    df = res.probe_set.df.set_index("image_path")
    for img, _, lab, x, y, w, h, _ in rows[:2]:
        r = df.loc[img]
        assert (r.box_x0, r.box_y0, r.box_x1, r.box_y1) == (x, y, x + w, y + h)
        assert (r.tbox_x0, r.tbox_y0, r.tbox_x1, r.tbox_y1) == working_box((x, y, x + w, y + h), 160, 200)
    assert df.loc[["img02.png", "img03.png"], "tbox_x0"].isna().all()
    ex = res.exclusions.set_index("record_id")
    assert ex.loc["img04.png", "reason"] == "box has missing coordinates"
    assert res.counts["boxed"] == 2 and res.warnings == []  # every column read (trailing empty columns ignored)


def test_folder_warns_about_columns_it_does_not_use(folder, tmp_path):
    d, csv = folder
    df = pd.read_csv(csv, dtype=str, keep_default_na=False)
    df["notes"], df["box_x0"] = "seen by R1", df["x0"]  # a free-text column and a second spelling of x0
    df.to_csv(tmp_path / "c.csv", index=False)
    res = build_folder(d, tmp_path / "c.csv", tmp_path / "o", verbose=False)
    assert len(res.warnings) == 1 and "['notes', 'box_x0']" in res.warnings[0] and "c.csv" in res.warnings[0]
    assert f"warning: {res.warnings[0]}" in res.summary()
    assert res.probe_set.provenance["warnings"] == res.warnings


def test_folder_box_layouts_must_be_complete_and_single(folder, tmp_path):
    d, csv = folder
    df = pd.read_csv(csv, dtype=str, keep_default_na=False)
    df.assign(x=df["x0"], y=df["y0"], w="10", h="10").to_csv(tmp_path / "both.csv", index=False)
    with pytest.raises(DatasetError, match=r"both box corners \['x0', 'y0', 'x1', 'y1'\] and x, y, w, h"):
        build_folder(d, tmp_path / "both.csv", tmp_path / "o", verbose=False)
    df.drop(columns=["x0", "y0", "x1", "y1"]).assign(box_x="1", box_y="2", box_w="3").to_csv(tmp_path / "p.csv",
                                                                                          index=False)
    with pytest.raises(DatasetError, match=r"box column\(s\) \['box_x', 'box_y', 'box_w'\] but not all four"):
        build_folder(d, tmp_path / "p.csv", tmp_path / "o", verbose=False)
    df.drop(columns=["x0", "y0", "x1", "y1"]).assign(x="1", y="2", w="wide", h="3").to_csv(tmp_path / "n.csv",
                                                                                        index=False)
    with pytest.raises(DatasetError, match=r"row 2 column 'w' has non-numeric value 'wide'"):
        build_folder(d, tmp_path / "n.csv", tmp_path / "o", verbose=False)


def test_build_options_object_and_keywords_build_the_same_probe_set(folder, tmp_path):
    """BuildOptions is what every builder shares: the object and its fields as keywords give the same bytes."""
    from medvlm_audit.suites.grounding.datasets.common import BuildOptions

    d, csv = folder
    a = build_folder(d, csv, tmp_path / "a", seed=7, name="f7", workers=1, verbose=False)
    b = build_folder(d, csv, tmp_path / "b", options=BuildOptions(seed=7, name="f7", workers=1, verbose=False))
    c = build_folder(d, csv, tmp_path / "c", options=BuildOptions(seed=7, name="f7"), workers=1, verbose=False)
    assert a.probe_set.name == b.probe_set.name == c.probe_set.name == "f7"
    for f in ("manifest.parquet", "probeset.json", "exclusions.csv"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() == (tmp_path / "c" / f).read_bytes()
    other = build_folder(d, csv, tmp_path / "o", options=BuildOptions(seed=8, verbose=False))
    assert other.probe_set.name == "folder"  # the builder's own name when none is given
    assert list(other.probe_set.df["swap_image_path"]) != list(a.probe_set.df["swap_image_path"])  # the seed is used
    with pytest.raises(TypeError, match=r"build_folder\(\): unknown option 'seeds' \(did you mean seed\?\)"):
        build_folder(d, csv, tmp_path / "x", seeds=7)
    with pytest.raises(FrozenInstanceError):
        BuildOptions().seed = 1  # type: ignore[misc]
