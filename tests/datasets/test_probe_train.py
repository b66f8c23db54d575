"""build_probe_train: the vision probe's training sets (every labelled frontal study of the given splits)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import dsfixtures as F

from medvlm_audit.suites.grounding.datasets.chexpert import build_chexpert
from medvlm_audit.suites.grounding.datasets.common import CHEXPERT_COLUMNS, CHEXPERT_FINDINGS, DatasetError
from medvlm_audit.suites.grounding.datasets.mimic import build_mimic
from medvlm_audit.suites.grounding.datasets.probe_train import build_probe_train
from medvlm_audit.suites.grounding.probeset import ProbeSet

SMALL = {"n_subjects": 60, "n_studies": 150, "n_images": 220, "test_every": 2, "n_rexerr": 200,
         "ms_eligible": dict.fromkeys(F.MS_CATS, 3), "ms_ineligible_per_cat": 2, "size": (96, 112), "gz": True}
COL = {v: k for k, v in CHEXPERT_COLUMNS.items()}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> dict[str, Path]:
    return F.make_mimic_tree(tmp_path_factory.mktemp("mimic"), images=True, **SMALL)


@pytest.fixture(scope="module")
def mimic_train(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("o") / "mimic-train"
    return build_probe_train("mimic", out, mimic_root=tree["mimic_root"], verbose=False)


def _expected_images(tree) -> pd.DataFrame:
    """Independently: frontal train/validate images with a label row, one per study (PA first, then dicom_id)."""
    root = tree["mimic_root"]
    meta = pd.read_csv(root / "mimic-cxr-2.0.0-metadata.csv.gz")
    split = pd.read_csv(root / "mimic-cxr-2.0.0-split.csv.gz")[["dicom_id", "split"]]
    lab = pd.read_csv(root / "mimic-cxr-2.0.0-chexpert.csv.gz")
    m = meta.merge(split, on="dicom_id")
    m = m[m.split.isin(["train", "validate"]) & m.ViewPosition.isin(["PA", "AP"]) & m.study_id.isin(lab.study_id)]
    m = m.assign(o=(m.ViewPosition != "PA").astype(int)).sort_values(["study_id", "o", "dicom_id"])
    m = m.drop_duplicates("study_id")
    return m.merge(lab.drop(columns="subject_id"), on="study_id")


def test_every_labelled_frontal_study_of_train_and_validate(mimic_train, tree):
    df = mimic_train.probe_set.df
    exp = _expected_images(tree)
    assert set(df.dicom_id) == set(exp.dicom_id)  # no 50/50 cap, no MS-CXR/ReXErr needed, no demographics needed
    assert set(df.split) == set(exp.split) <= {"train", "validate"} and df.view.isin(["PA", "AP"]).all()
    assert (df.kind == "finding_presence").all() and df.age.isna().all()
    e = exp.set_index("dicom_id")
    for f in CHEXPERT_FINDINGS:
        sub = df[df.finding == f].set_index("dicom_id")
        v = e[COL[f]]
        assert set(sub.index[sub.label == 1]) == set(v.index[v == 1.0])
        assert set(sub.index[sub.label == 0]) == set(v.index[(v == 0.0) | v.isna()])  # explicit or not mentioned
        assert not set(sub.index) & set(v.index[v == -1.0])  # uncertain never used...
    ex = mimic_train.exclusions
    assert ex.reason.str.contains(r"uncertain \(-1.0\) label for edema").any()  # ...and logged
    nrm = df[df.finding == "no_finding"]
    assert (nrm.label == 0).all() and set(nrm.dicom_id) == set(e.index[e["No Finding"] == 1.0])
    assert mimic_train.probe_set.provenance["counts"]["images"] == len(exp)
    assert ex.reason.str.contains("not frontal").any()


def test_explicit_negatives_and_probe_set_exclusion(tree, tmp_path):
    ps = build_mimic(out_dir=tmp_path / "mimic", check_images=False, verbose=False, **tree)
    res = build_probe_train("mimic", tmp_path / "t", mimic_root=tree["mimic_root"], negatives="explicit",
                            exclude_probe_sets=[tmp_path / "mimic"], check_images=False, verbose=False)
    df = res.probe_set.df
    ms_studies = set(ps.probe_set.df.loc[ps.probe_set.df.source == "ms_cxr", "study_id"])
    assert ms_studies and not ms_studies & set(df.study_id)  # MS-CXR studies (train split) left out
    ex = res.exclusions
    assert ex.reason.str.contains("study has images in probe set 'mimic'").any()
    e = _expected_images(tree).set_index("dicom_id")
    for r in df[df.label == 0].itertuples():
        if r.finding != "no_finding":
            assert e.loc[r.dicom_id, COL[r.finding]] == 0.0  # explicit 0.0 only
    assert res.probe_set.provenance["counts"]["edema:blank_unused"] > 0


def test_chexpert_training_split_is_disjoint_from_the_probe_set(tmp_path):
    root = F.make_chexpert_tree(tmp_path, n_patients=300, images=False)
    train = build_probe_train("chexpert", tmp_path / "t", chexpert_root=root, check_images=False, verbose=False)
    probe = build_chexpert(root, tmp_path / "p", per_finding=5, n_normal=5, check_images=False, verbose=False)
    df = train.probe_set.df
    assert (df.split == "train").all() and not set(df.patient_id) & set(probe.probe_set.df.patient_id)
    assert df.image_path.str.endswith("_frontal.jpg").all()
    assert not df.duplicated(["study_id", "finding"]).any()
    with pytest.raises(DatasetError, match="no image in split"):
        build_probe_train("chexpert", tmp_path / "x", chexpert_root=root, splits=["nope"], check_images=False,
                          verbose=False)
    with pytest.raises(ValueError, match="source="):
        build_probe_train("nih", tmp_path / "x")


@pytest.mark.slow
def test_probe_fitted_on_it_answers_the_normal_studies(mimic_train, tree, tmp_path):
    """End to end on builder output: normals (no_finding, label 0 only) get an answer, not an error."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from medvlm_audit.models.base import Decoding, Message, ModelInput
    from medvlm_audit.suites.grounding.prompts import grounding_prompt
    from medvlm_audit.suites.grounding.vision_probe import VisionProbe, working_image
    from medvlm_audit.testing.tiny_models import build_tiny_vit

    enc = build_tiny_vit(tmp_path / "enc")
    probe = VisionProbe.fit(ProbeSet.load(mimic_train.out_dir), enc, tmp_path / "cache", device="cpu")
    assert "no_finding" in probe.heads
    test = build_mimic(out_dir=tmp_path / "mimic", check_images=False, verbose=False, **tree).probe_set
    normals = [c for c in test.cases() if c.finding == "no_finding"]
    assert normals
    out = probe.predict([ModelInput((Message("user", grounding_prompt(c)),),
                                    (working_image(test.resolve(c.image)),), Decoding()) for c in normals])
    assert all(r.ok and r.text in ("Yes", "No") for r in out)
    assert np.isfinite([dict(r.top_logprobs)["Yes"] for r in out]).all()
