"""Vision probe training data (issue 12, item 10): rows with an empty split are not training data, and
training and audited images must be disjoint by image hash and by patient (refused, or reported on request)."""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_vision_probe import make_probeset

from medvlm_audit.errors import ProbeSetError
from medvlm_audit.suites.grounding.probeset import ProbeSet
from medvlm_audit.suites.grounding.vision_probe import (
    ImageEncoder,
    VisionProbe,
    gather_training,
    standardiser,
)
from medvlm_audit.testing.tiny_models import build_tiny_vit


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("disjoint")
    enc_path = build_tiny_vit(root / "encoder")
    train = make_probeset(root, 24, seed=41, splits=["train", "train", "validate"])
    test = make_probeset(root, 8, seed=42, splits=["test"])
    enc = ImageEncoder(enc_path, device="cpu")
    return root, enc, train, test


def with_patients(ps: ProbeSet, prefix: str, name: str) -> ProbeSet:
    df = ps.df.copy()
    df["patient_id"] = [f"{prefix}{p}" for p in df["image_path"].str.extract(r"img(\d+)")[0]]
    return ProbeSet(df, ps.image_root, name=name)


def test_rows_with_an_empty_split_are_not_training_data(world):
    _root, enc, train, _ = world
    df = train.df.copy()
    first = df["image_path"].isin(sorted(df["image_path"].unique())[:6])
    df.loc[first, "split"] = None  # six images (12 rows) with no split
    df.loc[first & (df["finding"] == "pneumothorax"), "split"] = ""
    ps = ProbeSet(df, train.image_root, name="some-unsplit")
    data = gather_training([ps], enc, None)
    assert data.n_empty_split == 12 and len(data.rows) == len(df) - 12
    assert not data.rows["case_id"].isin(df.loc[first, "case_id"]).any()
    probe = VisionProbe.fit(ps, encoder=enc, device="cpu")
    assert probe.training["rows_empty_split"] == 12 and probe.training["cases"] == len(df) - 12
    # the scaler is fitted on the 'train' images only
    is_train = data.img_split == "train"
    mean, _ = standardiser(data.X[is_train].astype(np.float64))
    assert np.allclose(probe.mean, mean)
    # every row empty: nothing to fit on, and the error says why
    blank = ProbeSet(df.assign(split=""), train.image_root, name="unsplit")
    with pytest.raises(ProbeSetError, match="empty 'split'"):
        VisionProbe.fit(blank, encoder=enc, device="cpu")
    # splits=None still uses every row
    assert len(gather_training([blank], enc, None, splits=None).rows) == len(df)


def test_overlap_with_the_audited_images_or_patients_is_refused_or_reported(world, tmp_path):
    root, enc, train, test = world
    tr = with_patients(train, "P", "train-p")
    audited = with_patients(test, "Q", "test-q")  # disjoint patients and images
    probe = VisionProbe.fit(tr, encoder=enc, device="cpu", audited=[audited])
    assert probe.training["overlap"]["n_cases_same_image"] == 0
    assert probe.training["overlap"]["n_cases_same_patient"] == 0
    # a copy of a training image under another name in the audited set: the same pixels
    src = tr.df["image_path"].iloc[0]
    shutil.copy(root / src, root / "copied.png")
    leak = audited.df.copy()
    leak.loc[leak.index[:2], "image_path"] = "copied.png"  # both findings of one audited image
    leaky = ProbeSet(leak, audited.image_root, name="leaky")
    with pytest.raises(ProbeSetError, match=r"2 audited case\(s\) show a training image.*0 belong"):
        VisionProbe.fit(tr, encoder=enc, device="cpu", audited=[leaky])
    # a shared patient (different images)
    pat = audited.df.copy()
    pat.loc[pat.index[-1], "patient_id"] = tr.df["patient_id"].iloc[5]
    shared = ProbeSet(pat, audited.image_root, name="shared-patient")
    with pytest.raises(ProbeSetError, match=r"0 audited case\(s\) show a training image.*1 belong"):
        VisionProbe.fit(tr, encoder=enc, device="cpu", audited=[shared])
    # report instead of refusing: fitted, with a warning and the counts recorded
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        p = VisionProbe.fit(tr, encoder=enc, device="cpu", audited=[leaky, shared], on_overlap="report")
    assert any("overlap the audited" in str(x.message) for x in w)
    ov = p.training["overlap"]
    assert ov["n_cases_same_image"] == 2 and ov["n_cases_same_patient"] == 1
    assert ov["examples_same_image"] == [f"leaky:{c}" for c in leak["case_id"].iloc[:2]]


def test_the_grounding_suite_tells_a_vision_probe_its_audited_probe_sets(tmp_path):
    from medvlm_audit.config import validate_config
    from medvlm_audit.suites.base import StageContext
    from medvlm_audit.suites.grounding.suite import GroundingRunOptions, answer_models

    cfg = validate_config({"suite": "grounding", "run_dir": str(tmp_path / "r"), "probe_sets": [str(tmp_path / "a")],
                           "models": [{"name": "vp", "backend": "vision_probe", "train": "x", "encoder_path": "e"},
                                      {"name": "vp2", "backend": "vision_probe", "train": "x", "encoder_path": "e",
                                       "audited": ["elsewhere"], "on_overlap": "report"},
                                      {"name": "ref", "backend": "reference", "kind": "always_yes"}]})
    specs = {s.name: s for s in answer_models(StageContext(cfg, GroundingRunOptions(), tmp_path / "r"))}
    assert specs["vp"].params()["audited"] == [str(tmp_path / "a")]
    assert specs["vp2"].params()["audited"] == ["elsewhere"]  # given explicitly: kept
    assert "audited" not in specs["ref"].params()
    assert specs["vp"].decoding is None and specs["vp"].backend == "vision_probe"
