"""build_vindr on generated VinDr-CXR trees (PhysioNet layout; PNG and DICOM images)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import dsfixtures as F

from medvlm_audit.boxes import working_box
from medvlm_audit.suites.grounding.datasets.common import DatasetError
from medvlm_audit.suites.grounding.datasets.vindr import build_vindr


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return F.make_vindr_tree(tmp_path_factory.mktemp("vindr"))


def test_png_build(tree, tmp_path):
    res = build_vindr(tree, tmp_path / "o", n_absent=20, n_normal=30, verbose=False)
    df = res.probe_set.df
    ann = pd.read_csv(tree / "annotations" / "annotations_test.csv")
    boxed = df[df.stratum.str.startswith("vindr_box")]
    assert len(boxed) > 0 and (boxed.label == 1).all()
    assert "nodule" in set(boxed.finding) and "Other lesion" not in set(boxed.finding)
    for r in boxed.itertuples():
        cls = {"cardiomegaly": "Cardiomegaly", "pleural_effusion": "Pleural effusion", "nodule": "Nodule/Mass",
               "aortic_enlargement": "Aortic enlargement", "lung_opacity": "Lung Opacity"}[r.finding]
        a = ann[(ann.image_id == r.image_id) & (ann.class_name == cls)]
        enclosing = (a.x_min.min(), a.y_min.min(), a.x_max.max(), a.y_max.max())
        assert (r.tbox_x0, r.tbox_y0, r.tbox_x1, r.tbox_y1) == working_box(enclosing, 512, 640)
        assert r.n_boxes == len(a)
    assert (df[df.finding == "no_finding"].label == 0).all()
    absent = df[df.stratum.str.endswith(":absent")]
    lab = pd.read_csv(tree / "annotations" / "image_labels_test.csv").set_index("image_id")
    assert (lab.loc[absent[absent.finding == "cardiomegaly"].image_id, "Cardiomegaly"] == 0).all()
    assert (df.swap_patient_id != df.patient_id).all()
    ex = res.exclusions
    assert ex.reason.str.contains("Other lesion has no finding id").any()
    assert ex.reason.str.contains("below 50x50").any()


def test_dicom_images_and_bad_class(tmp_path):
    pytest.importorskip("pydicom")
    root = F.make_vindr_tree(tmp_path / "d", n_images=40, fmt="dicom", size=(300, 360))
    res = build_vindr(root, tmp_path / "o", n_absent=5, n_normal=5, verbose=False)
    df = res.probe_set.df
    assert df.image_path.str.endswith(".dicom").all() and df.image_width.eq(300).all()
    with pytest.raises(DatasetError, match="need each image's size"):
        build_vindr(root, tmp_path / "o3", check_images=False, verbose=False)
    a = pd.read_csv(root / "annotations" / "annotations_test.csv")
    a.loc[0, "class_name"] = "Pneumonitis"
    a.to_csv(root / "annotations" / "annotations_test.csv", index=False)
    with pytest.raises(DatasetError, match="row 2 has class_name 'Pneumonitis'"):
        build_vindr(root, tmp_path / "o2", verbose=False)


def test_bad_coordinates_and_boxes_outside_the_image_are_logged(tmp_path):
    root = F.make_vindr_tree(tmp_path / "t", n_images=60)
    f = root / "annotations" / "annotations_test.csv"
    a = pd.read_csv(f, dtype=str)
    boxed = a[a.class_name.isin(["Cardiomegaly", "Pleural effusion", "Aortic enlargement", "Lung Opacity"])]
    i_txt, i_blank, i_out = boxed.index[:3]
    a.loc[i_txt, "x_min"] = "12,5"  # a decimal comma: not a number
    a.loc[i_blank, "y_max"] = ""
    a.loc[i_out, "x_max"] = "900"  # the images are 512 wide
    # a second reader's good box on the image whose first box is outside: that one is kept
    extra = a.loc[[i_out]].assign(rad_id="R9", x_min="10", y_min="10", x_max="300", y_max="400")
    pd.concat([a, extra], ignore_index=True).to_csv(f, index=False)
    res = build_vindr(root, tmp_path / "o", n_absent=5, n_normal=5, verbose=False)
    ex = res.exclusions.set_index("record_id")
    rid = lambda i: f"{a.image_id[i]}#{i + 2}"
    assert ex.loc[rid(i_txt), "reason"].endswith("non-numeric box coordinate x_min = '12,5'")
    assert ex.loc[rid(i_txt), "stage"] == "vindr_box:coordinates"
    assert ex.loc[rid(i_blank), "reason"].endswith("box coordinate y_max is missing")
    assert "lies outside the 512.0x640.0 image" in ex.loc[rid(i_out), "reason"]
    df = res.probe_set.df
    fid = {"Cardiomegaly": "cardiomegaly", "Pleural effusion": "pleural_effusion",
           "Aortic enlargement": "aortic_enlargement", "Lung Opacity": "lung_opacity"}[a.class_name[i_out]]
    kept = df[(df.image_id == a.image_id[i_out]) & (df.finding == fid) & df.stratum.str.startswith("vindr_box")]
    others = a[(a.image_id == a.image_id[i_out]) & (a.class_name == a.class_name[i_out])].index.difference([i_out])
    assert len(kept) == 1  # the enclosing box comes only from the boxes inside the image
    assert kept.box_x1.iloc[0] <= 512 and kept.n_boxes.iloc[0] == len(others) + 1


def test_view_codes_known_lateral_vs_unknown(tmp_path):
    root = F.make_vindr_tree(tmp_path / "t", n_images=30)
    ids = pd.read_csv(root / "annotations" / "image_labels_test.csv").image_id.tolist()
    meta = pd.DataFrame({"image_id": ids, "age": 50, "sex": "F", "view": "PA"})
    meta.loc[0, "view"], meta.loc[1, "view"] = "LATERAL", "WEIRD"
    meta.to_csv(tmp_path / "meta.csv", index=False)
    res = build_vindr(root, tmp_path / "o", n_absent=5, n_normal=5, metadata_csv=tmp_path / "meta.csv", verbose=False)
    ex = res.exclusions[res.exclusions.stage == "vindr:image"].set_index("record_id")
    assert ex.loc[ids[0], "reason"] == "view LATERAL is not frontal (PA/AP)"
    assert ex.loc[ids[1], "reason"] == "unknown view code 'WEIRD'"
    assert not {ids[0], ids[1]} & set(res.probe_set.df.image_id)
    # every box of an excluded image has its own row pointing at the image's exclusion
    boxes = res.exclusions[res.exclusions.stage == "vindr_box:image"]
    ann = pd.read_csv(root / "annotations" / "annotations_test.csv")
    n_boxed = ann[ann.image_id.isin(ids[:2]) & (ann.class_name != "No finding") & (ann.class_name != "Other lesion")]
    assert len(boxes) == len(n_boxed) and boxes.reason.str.contains("was excluded").all()
