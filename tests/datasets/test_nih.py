"""build_nih on a generated NIH ChestX-ray14 tree (real CSV headers, pipe-joined labels, 1024 px PNGs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

#: the fast lane (`pytest -m "not slow"`) leaves this module out: its fixtures build runs or start processes
pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).parent))
import dsfixtures as F

from medvlm_audit.boxes import working_box
from medvlm_audit.suites.grounding.datasets import nih
from medvlm_audit.suites.grounding.datasets.common import DatasetError
from medvlm_audit.suites.grounding.datasets.nih import build_nih


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return F.make_nih_tree(tmp_path_factory.mktemp("nih"), n_images=500, n_boxes=50, layout="kaggle")


def test_build_boxes_strata_swaps(tree, tmp_path):
    res = build_nih(tree, tmp_path / "o", per_finding=10, n_normal=20, check_images=True, verbose=False,
                    metadata_from="root")
    df = res.probe_set.df
    boxed = df[df.stratum.str.startswith("nih_box:")]
    bbox = pd.read_csv(tree / "BBox_List_2017.csv", header=None, skiprows=1, names=["i", "l", "x", "y", "w", "h"])
    big = bbox[(bbox.w * 224 / 1024 >= 50) & (bbox.h * 224 / 1024 >= 50)]
    assert len(boxed) == len(big) and (boxed.label == 1).all()
    for r in boxed.itertuples():
        b = bbox[bbox.i == r.image_index].iloc[0]
        assert (r.tbox_x0, r.tbox_y0, r.tbox_x1, r.tbox_y1) == working_box((b.x, b.y, b.x + b.w, b.y + b.h), 1024, 1024)
    assert boxed.image_path.str.startswith("images_001/images/").all()
    ex = res.exclusions
    assert (ex.stage == "nih_box:box_size").sum() == len(bbox) - len(big)
    lab = df[~df.stratum.str.startswith("nih_box:")]
    assert not set(lab.image_index) & set(bbox.i)
    assert (df[df.finding == "no_finding"].label == 0).all()
    entry = pd.read_csv(tree / "Data_Entry_2017_v2020.csv", index_col=False).set_index("Image Index")
    for r in df.itertuples():
        assert r.swap_patient_id != r.patient_id
        partner = entry.loc[Path(r.swap_image_path).name, "Finding Labels"].split("|")
        tok = {"pleural_effusion": "Effusion", "no_finding": "No Finding"}.get(r.finding, r.finding.capitalize())
        tok = {"Infiltration": "Infiltration", "Pleural_thickening": "Pleural_Thickening"}.get(tok, tok)
        assert (tok in partner) == (r.finding_state == 1), r.case_id
    for s in res.shortfalls:
        assert s.obtained < s.requested


def test_bad_label_token_and_fallback_to_torchxrayvision(tree, tmp_path, monkeypatch):
    bad = tmp_path / "bad"
    bad.mkdir()
    txt = (tree / "Data_Entry_2017_v2020.csv").read_text().splitlines()
    first = txt[1].split(",")
    first[1] = "Cardiomegaly|Pneumonitis"
    (bad / "Data_Entry_2017_v2020.csv").write_text("\n".join([txt[0], ",".join(first), *txt[2:]]) + "\n")
    (bad / "BBox_List_2017.csv").write_text((tree / "BBox_List_2017.csv").read_text())
    with pytest.raises(DatasetError, match="row 2 column 'Finding Labels' has label 'Pneumonitis'"):
        build_nih(bad, tmp_path / "o", check_images=False, verbose=False, metadata_from="root")
    # no CSVs in the user's folder: they are read from the torchxrayvision package data folder
    empty = tmp_path / "imgs_only"
    empty.mkdir()
    monkeypatch.setattr(nih, "torchxrayvision_data_dir", lambda: tree)
    res = build_nih(empty, tmp_path / "o2", per_finding=5, n_normal=5, check_images=False, verbose=False)
    assert res.probe_set.provenance["inputs"]["data_entry"]["path"] == str(tree / "Data_Entry_2017_v2020.csv")
    monkeypatch.setattr(nih, "torchxrayvision_data_dir", lambda: None)
    with pytest.raises(DatasetError, match="Data_Entry_2017"):
        build_nih(empty, tmp_path / "o3", check_images=False, verbose=False)


def test_old_style_ages(tree, tmp_path):
    """The original Data_Entry_2017.csv wrote ages as DICOM age strings ("058Y", months "010M")."""
    old = tmp_path / "old"
    old.mkdir()
    ent = pd.read_csv(tree / "Data_Entry_2017_v2020.csv", index_col=False, dtype=str)
    ages = ent["Patient Age"].astype(int)
    ent["Patient Age"] = ages.map(lambda a: f"{a:03d}Y")
    ent.loc[0, "Patient Age"], ent.loc[1, "Patient Age"], ent.loc[2, "Patient Age"] = "010M", "abc", ""
    ent.to_csv(old / "Data_Entry_2017.csv", index=False)
    (old / "BBox_List_2017.csv").write_text((tree / "BBox_List_2017.csv").read_text())
    res = build_nih(old, tmp_path / "o", per_finding=10, n_normal=10, check_images=False, verbose=False,
                    metadata_from="root")
    df = res.probe_set.df
    by = dict(zip(ent["Image Index"], ages))
    lab = df[df.image_index.notna()]
    assert len(lab) and (lab.age == lab.image_index.map(by).astype(float)).all()  # "058Y" -> 58.0
    assert nih._parse_age(pd.Series(["058Y", "010M", "58", "003W", "x"])).round(3).tolist()[:4] == [58.0, 0.833, 58.0, 0.057]
    ex = res.exclusions.set_index("record_id")
    assert ex.loc[ent["Image Index"][1], "reason"] == "unparseable Patient Age 'abc'"
    assert ex.loc[ent["Image Index"][2], "reason"] == "missing age"


@pytest.mark.parametrize("header", ["box", "rows_only_comma"])
def test_data_entry_header_variants_give_the_same_probe_set(tmp_path, header):
    """NIH's Box copy of Data_Entry_2017_v2020.csv names the column "Patient Sex" and ends every line with a comma;
    a header without that comma over rows with it must not shift the columns (pandas' silent index column)."""
    ref = F.make_nih_tree(tmp_path / "kaggle", n_images=300, n_boxes=20, images=False)
    var = F.make_nih_tree(tmp_path / header, n_images=300, n_boxes=20, images=False, header=header)
    assert "Patient Sex" in (var / "Data_Entry_2017_v2020.csv").read_text().splitlines()[0]
    kw = {"per_finding": 5, "n_normal": 5, "check_images": False, "verbose": False, "metadata_from": "root"}
    a = build_nih(ref, tmp_path / "o1", **kw)
    b = build_nih(var, tmp_path / "o2", **kw)
    assert len(b.probe_set) > 0 and b.probe_set.df.sex.isin(["M", "F"]).all()
    assert b.probe_set.content_hash == a.probe_set.content_hash
    ent = pd.read_csv(var / "Data_Entry_2017_v2020.csv", index_col=False).set_index("Image Index")
    df = b.probe_set.df
    assert (df.sex.to_numpy() == ent.loc[df.image_index, "Patient Sex"].to_numpy()).all()
    assert (df.age.to_numpy() == ent.loc[df.image_index, "Patient Age"].astype(float).to_numpy()).all()


def test_data_entry_without_a_sex_column_names_both_names(tmp_path):
    root = F.make_nih_tree(tmp_path / "n", n_images=50, n_boxes=5, images=False)
    f = root / "Data_Entry_2017_v2020.csv"
    f.write_text(f.read_text().replace("Patient Gender", "Sex of patient", 1))
    with pytest.raises(DatasetError, match=r"neither 'Patient Gender' nor 'Patient Sex'"):
        build_nih(root, tmp_path / "o", check_images=False, verbose=False, metadata_from="root")
