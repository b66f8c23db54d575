"""build_chexpert on a generated CheXpert-v1.0-small tree (train.csv/valid.csv, 1.0/0.0/-1.0/blank labels)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

#: the fast lane (`pytest -m "not slow"`) leaves this module out: its fixtures build runs or start processes
pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).parent))
import dsfixtures as F

from medvlm_audit.suites.grounding.datasets.chexpert import build_chexpert, chexpert_patient_split
from medvlm_audit.suites.grounding.datasets.common import DatasetError


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return F.make_chexpert_tree(tmp_path_factory.mktemp("chx"), n_patients=1500)


@pytest.fixture(scope="module")
def built(tree, tmp_path_factory):
    return build_chexpert(tree, tmp_path_factory.mktemp("o") / "chx", check_images=True, verbose=False)


def test_counts_and_pleural_other_shortfall(built):
    df = built.probe_set.df
    per = df.groupby(["finding", "label"]).size()
    assert per["no_finding"].to_dict() == {0: 100}
    full = [f for f in per.index.get_level_values(0).unique() if f not in ("no_finding", "pleural_other")]
    assert all(per[f].to_dict() == {0: 50, 1: 50} for f in full)
    # explicit 0.0 negatives are rare for Pleural Other: a reported shortfall, as in Supplementary Table 9
    sf = {s.stratum: s for s in built.shortfalls}
    assert "chexpert:pleural_other:absent" in sf
    s = sf["chexpert:pleural_other:absent"]
    assert s.obtained == per["pleural_other"].get(0, 0) == s.available < 50
    assert len(df) == 1400 - (50 - s.obtained)


def test_protocol(built, tree):
    df = built.probe_set.df
    assert (df.split == "test").all() and df.view.isin(["PA", "AP"]).all()
    assert (df.swap_patient_id != df.patient_id).all() and df.swap_image_path.str.startswith("CheXpert-v1.0-small/").all()
    assert df.sex.isin(["M", "F"]).all() and df.image_width.eq(64).all()
    assert not df.duplicated(["stratum", "patient_id"]).any()
    labels = pd.concat([pd.read_csv(tree / "train.csv"), pd.read_csv(tree / "valid.csv")]).set_index("Path")
    col = {"atelectasis": "Atelectasis", "no_finding": "No Finding", "pleural_other": "Pleural Other"}
    for r in df[df.finding.isin(col)].itertuples():
        want = 1.0 if r.finding_state == 1 else 0.0
        assert labels.loc[r.image_path, col[r.finding]] == want
        assert labels.loc[r.swap_image_path, col[r.finding]] == want
    ex = built.exclusions
    assert ex.reason.str.contains("not frontal").any() and ex.reason.str.contains("missing sex").any()
    assert ex.reason.str.contains(r"uncertain \(-1.0\)").any()


def test_patient_split_is_deterministic_and_patient_level():
    pats = pd.Series([f"patient{i:05d}" for i in range(100) for _ in range(3)])
    a, b = chexpert_patient_split(pats), chexpert_patient_split(pats)
    assert (a == b).all() and (a == "test").sum() == 60
    assert pd.DataFrame({"p": pats, "s": a}).groupby("p").s.nunique().eq(1).all()


def test_bad_label_and_missing_column(tree, tmp_path):
    df = pd.read_csv(tree / "train.csv")
    bad = tmp_path / "labels.csv"
    df.assign(Edema=df.Edema.where(df.index != 7, "yes")).to_csv(bad, index=False)
    with pytest.raises(DatasetError, match=r"'Edema' row 9 has value 'yes'"):
        build_chexpert(tree, tmp_path / "o", labels_csv=bad, check_images=False, verbose=False)
    df.drop(columns=["AP/PA"]).to_csv(bad, index=False)
    with pytest.raises(DatasetError, match=r"lacks required column\(s\) \['AP/PA'\]"):
        build_chexpert(tree, tmp_path / "o", labels_csv=bad, check_images=False, verbose=False)


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return F.make_chexpert_official_test(tmp_path_factory.mktemp("chx_test"))


@pytest.mark.parametrize("keyed_by", ["image", "patient"])
def test_official_test_labels_with_a_demographics_join(official, tmp_path, keyed_by):
    root, labels, (by_image, by_patient) = official
    demo = by_image if keyed_by == "image" else by_patient
    res = build_chexpert(root, tmp_path / "o", labels_csv=labels, demographics_csv=demo, per_finding=5, n_normal=5,
                         verbose=False)
    df = res.probe_set.df
    src = pd.read_csv(labels).set_index("Path")
    assert len(df) > 0 and (df.split == "test").all()  # Paths under test/ are the official test split
    assert df.image_path.str.startswith("test/patient").all() and df.image_path.str.endswith("_frontal.jpg").all()
    assert df.view.eq("FRONTAL").all()  # frontal from the file name, PA/AP unknown: kept
    assert df.sex.isin(["M", "F"]).all() and df.age.notna().all()
    for r in df[df.finding == "cardiomegaly"].itertuples():
        assert src.loc[r.image_path, "Cardiomegaly"] == r.label
    ex = res.exclusions
    assert ex.reason.str.contains("view LATERAL is not frontal").any()
    last = max(src.index).split("/")[1]  # the fixture's last patient has no demographics row
    gone = ex[ex.record_id.str.contains(last)]
    assert len(gone) and gone.reason.str.contains("no row for this image or patient in the demographics CSV").any()
    assert res.probe_set.provenance["parameters"]["view_source"]["frontal_lateral"].startswith("file name")
    assert res.probe_set.provenance["inputs"]["demographics"]["path"] == str(demo)


def test_official_test_labels_need_demographics(official, tmp_path):
    root, labels, (by_image, _) = official
    with pytest.raises(DatasetError, match=r"lack \['Sex', 'Age'\].*demographics CSV"):
        build_chexpert(root, tmp_path / "o", labels_csv=labels, verbose=False)
    bad = tmp_path / "demo.csv"
    pd.read_csv(by_image).rename(columns={"path_to_image": "file"}).to_csv(bad, index=False)
    with pytest.raises(DatasetError, match="neither an image path column"):
        build_chexpert(root, tmp_path / "o", labels_csv=labels, demographics_csv=bad, verbose=False)
    d = pd.read_csv(by_image)
    pd.concat([d, d.head(1)]).to_csv(bad, index=False)
    with pytest.raises(DatasetError, match="duplicate"):
        build_chexpert(root, tmp_path / "o", labels_csv=labels, demographics_csv=bad, verbose=False)


def test_a_path_in_both_train_and_valid_is_an_error(tmp_path):
    root = F.make_chexpert_tree(tmp_path, n_patients=60, images=False)
    train = pd.read_csv(root / "train.csv")
    valid = pd.read_csv(root / "valid.csv")
    pd.concat([valid, train.head(1)]).to_csv(root / "valid.csv", index=False)
    with pytest.raises(DatasetError, match=r"listed more than once \(in .*train.csv.*valid.csv"):
        build_chexpert(root, tmp_path / "o", check_images=False, verbose=False)
