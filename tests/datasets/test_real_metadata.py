"""Builders on the REAL metadata CSVs that the torchxrayvision PyPI package ships (NIH ChestX-ray14 Data_Entry +
BBox list, CheXpert-v1.0-small train.csv, VinBigData train.csv): real columns, encodings and sizes, no images.

Skipped unless torchxrayvision is installed (``pip install torchxrayvision --no-deps``).
"""

from __future__ import annotations

import gzip
import shutil

import pandas as pd
import pytest

from medvlm_audit.extras import torchxrayvision_data_dir
from medvlm_audit.suites.grounding.datasets.nih import build_nih
from medvlm_audit.suites.grounding.datasets.vindr import VINDR_CLASSES

DATA = torchxrayvision_data_dir()
pytestmark = pytest.mark.skipif(DATA is None, reason="torchxrayvision is not installed")


@pytest.mark.slow
def test_nih_real_csvs(tmp_path):
    res = build_nih(tmp_path / "no_images", tmp_path / "o", check_images=False, verbose=False)
    df = res.probe_set.df
    boxed = df[df.stratum.str.startswith("nih_box:")]
    assert boxed.finding.value_counts().to_dict() == {
        "cardiomegaly": 100, "infiltration": 47, "pneumonia": 44, "pleural_effusion": 34, "pneumothorax": 25,
        "mass": 14, "atelectasis": 9}
    assert len(df) == 273 + 14 * 100 + 100 and res.shortfalls == []
    assert (res.exclusions.stage == "nih_box:box_size").sum() == 665


@pytest.mark.slow
def test_chexpert_real_train_csv_reproduces_table9_total(tmp_path):
    from medvlm_audit.suites.grounding.datasets.chexpert import build_chexpert

    root = tmp_path / "CheXpert-v1.0-small"
    root.mkdir()
    with gzip.open(DATA / "chexpert_train.csv.gz", "rb") as src, open(root / "train.csv", "wb") as dst:
        shutil.copyfileobj(src, dst)
    res = build_chexpert(root, tmp_path / "o", check_images=False, verbose=False)
    df = res.probe_set.df
    # Supplementary Table 9: 1,380 cases, Pleural Other 50 present / 30 absent, every other stratum full
    assert len(df) == 1380
    assert [(s.stratum, s.obtained) for s in res.shortfalls] == [("chexpert:pleural_other:absent", 30)]
    assert df.image_path.str.startswith("CheXpert-v1.0-small/train/patient").all()


def test_vinbigdata_classes_are_all_known():
    d = pd.read_csv(DATA / "vinbigdata-train.csv.gz", usecols=["class_name"])
    assert set(d.class_name) <= set(VINDR_CLASSES)


def test_vinbigdata_counts_quoted_in_the_docs():
    """docs/datasets.md quotes these availability counts of the real Kaggle train.csv (before the size filter)."""
    a = pd.read_csv(DATA / "vinbigdata-train.csv.gz")
    a["finding"] = a.class_name.map(VINDR_CLASSES)
    boxed = a[a.finding.notna() & (a.finding != "no_finding")]
    assert boxed.groupby("finding").image_id.nunique().to_dict() == {
        "aortic_enlargement": 3067, "cardiomegaly": 2300, "pleural_thickening": 1981, "fibrosis": 1617,
        "lung_opacity": 1322, "pleural_effusion": 1032, "nodule": 826, "infiltration": 613, "calcification": 452,
        "ild": 386, "consolidation": 353, "atelectasis": 186, "pneumothorax": 96}
    marked = set(a.loc[a.class_name != "No finding", "image_id"])
    assert len(set(a.image_id) - marked) == 10606 and a.image_id.nunique() == 15000
    assert (a.class_name == "Other lesion").sum() == 2203
