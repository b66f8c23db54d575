"""build_vindr on generated VinDr-CXR trees (PhysioNet layout; PNG and DICOM images)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import dsfixtures as F

from medvlm_audit.boxes import working_box
from medvlm_audit.datasets.common import DatasetError
from medvlm_audit.datasets.vindr import build_vindr


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
