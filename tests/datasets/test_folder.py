"""build_folder: a directory of images + a CSV of (image, finding, label, box, patient, age, sex, view)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from medvlm_audit.boxes import working_box
from medvlm_audit.datasets.common import DatasetError
from medvlm_audit.datasets.folder import build_folder


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
