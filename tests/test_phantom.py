"""The phantom probe set: deterministic rendering and build, fixed intervention parameters, cohort correlations."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medvlm_audit import __version__
from medvlm_audit.boxes import irrelevant_box, working_box
from medvlm_audit.findings import MS_CXR_FINDINGS
from medvlm_audit.phantom import PHANTOM_FINDINGS, render_study
from medvlm_audit.phantom.anatomy import MIN_PIXEL, encode_png
from medvlm_audit.phantom.cohort import inject_error, make_cohort
from medvlm_audit.suites.grounding.conditions import Condition
from medvlm_audit.suites.grounding.phantom_probeset import STAMP, _draw, build_phantom
from medvlm_audit.suites.grounding.probeset import ProbeSet

#: the fast lane (`pytest -m "not slow"`) leaves this module out: its fixtures build runs or start processes
pytestmark = pytest.mark.slow

N_CASES, N_TRAIN = 200, 400


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ProbeSet, ProbeSet]:
    out = tmp_path_factory.mktemp("phantom")
    test, train = build_phantom(out, n_cases=N_CASES, n_train=N_TRAIN, seed=42)
    return out, test, train


def _images_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((folder / "images").glob("*.png")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _study_labels(ps: ProbeSet) -> dict[str, dict]:
    """image path -> the study's findings (from any row that uses the image)."""
    return {r.image_path: json.loads(r.study_findings) for r in ps.df.drop_duplicates("image_path").itertuples()}


# ----------------------------------------------------------------------------------------------- rendering


def test_render_is_deterministic_and_well_formed() -> None:
    kw = {"sex": "F", "age": 71, "view": "AP", "seed": 1234}
    a, boxes_a = render_study({"pleural_effusion": True, "cardiomegaly": True}, **kw)
    b, boxes_b = render_study({"pleural_effusion": True, "cardiomegaly": True}, **kw)
    assert a.dtype == np.uint8 and a.shape == (512, 512)
    assert np.array_equal(a, b) and boxes_a == boxes_b
    assert set(boxes_a) == {"pleural_effusion", "cardiomegaly"}
    assert a.min() >= MIN_PIXEL  # pure black only ever comes from a mask
    for x0, y0, x1, y1 in boxes_a.values():
        assert 0 <= x0 < x1 <= 512 and 0 <= y0 < y1 <= 512
    c, _ = render_study({"pleural_effusion": True, "cardiomegaly": True}, sex="F", age=71, view="AP", seed=1235)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("finding", PHANTOM_FINDINGS)
def test_each_finding_is_localized_in_its_box(finding: str) -> None:
    """The finding changes the pixels mostly inside its box (same patient, same seed, finding on vs off)."""
    at = {finding: {"side": "left", "severity": "severe", "zone": "lower", "size_mm": 18, "box_side": "left"}}
    kw = {"sex": "M", "age": 60, "view": "PA", "seed": 7, "size": 256, "attributes": at}
    on, boxes = render_study({finding: True}, **kw)
    off, none = render_study({}, **kw)
    assert none == {} and set(boxes) == {finding}
    diff = np.abs(on.astype(int) - off.astype(int))
    x0, y0, x1, y1 = (round(v) for v in boxes[finding])
    inside = diff[y0:y1, x0:x1].sum()
    assert diff.sum() > 0
    share = inside / diff.sum()
    # edema is bilateral and its box covers one side (as radiologists box one lung): about half inside
    assert share > (0.35 if finding == "edema" else 0.6), (finding, share)


def test_render_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="fracture"):
        render_study({"fracture": True}, sex="M", age=50, view="PA", seed=0)
    with pytest.raises(ValueError, match="view"):
        render_study({}, sex="M", age=50, view="LL", seed=0)
    with pytest.raises(ValueError, match="sex"):
        render_study({}, sex="X", age=50, view="PA", seed=0)


def test_png_encoder_round_trips() -> None:
    px, _ = render_study({"nodule": True}, sex="F", age=40, view="PA", seed=3, size=128)
    back = np.asarray(Image.open(io.BytesIO(encode_png(px))))
    assert np.array_equal(back, px)


def test_render_size_agrees_with_resizing() -> None:
    """A study drawn at 224 looks like the 512 rendering resized to 224 (training and test images agree)."""
    kw = {"sex": "M", "age": 66, "view": "PA", "seed": 99}
    big, _ = render_study({"consolidation": True}, size=512, **kw)
    small, _ = render_study({"consolidation": True}, size=224, **kw)
    resized = np.asarray(Image.fromarray(big).resize((224, 224), Image.BILINEAR)).astype(float)
    assert np.abs(resized - small).mean() < 4.0


# ----------------------------------------------------------------------------------------------- cohort


def test_cohort_correlations() -> None:
    studies = make_cohort(1500, np.random.default_rng(5), split="x")
    ap = np.array([s.view == "AP" for s in studies])
    eff = np.array([s.findings["pleural_effusion"] for s in studies])
    edema = np.array([s.findings["edema"] for s in studies])
    card = np.array([s.findings["cardiomegaly"] for s in studies])
    old = np.array([s.age > 70 for s in studies])
    assert eff[ap].mean() > eff[~ap].mean() + 0.1
    assert edema[ap].mean() > edema[~ap].mean() + 0.05
    assert card[old].mean() > card[~old].mean() + 0.1
    per_patient = {}
    for s in studies:
        per_patient.setdefault(s.patient_id, []).append(s)
    assert max(len(v) for v in per_patient.values()) > 1  # several studies per patient


def test_error_injection() -> None:
    rng = np.random.default_rng(0)
    assert inject_error("Small left pleural effusion.", "pleural_effusion", True, {}, "wrong_laterality", rng) == \
        "Small right pleural effusion."
    neg = inject_error("Small left pleural effusion.", "pleural_effusion", True, {}, "false_negation", rng)
    assert neg is not None and "no" in neg.lower().split()
    sev = inject_error("Small left pleural effusion.", "pleural_effusion", True, {}, "changed_severity", rng)
    assert sev in ("Moderate left pleural effusion.", "Large left pleural effusion.")
    assert inject_error("No pneumothorax.", "pneumothorax", False, {}, "wrong_laterality", rng) is None
    rep = inject_error("No pneumothorax.", "pneumothorax", False, {}, "repetition", rng)
    assert rep is not None and len(rep.split()) == 3


# ----------------------------------------------------------------------------------------------- the build


def test_build_composition(built: tuple[Path, ProbeSet, ProbeSet]) -> None:
    _, test, train = built
    df = test.df
    assert len(df) == N_CASES and len(train.df) == N_TRAIN
    assert set(df["split"]) == {"test"} and set(train.df["split"]) == {"train"}
    assert set(df["source"]) == {"phantom-mscxr", "phantom-mimic", "phantom-rexerr"}
    boxed = df[df["source"] == "phantom-mscxr"]
    # the eight MS-CXR findings plus nodule get radiologist-style boxes (masking cases)
    assert set(boxed["finding"]) == {*MS_CXR_FINDINGS, "nodule"} and (boxed["label"] == 1).all()
    assert boxed.groupby("finding").size().nunique() == 1  # as many boxed cases per finding
    assert boxed["tbox_x0"].notna().all()
    glob = df[df["source"] == "phantom-mimic"]
    assert glob["box_x0"].isna().all()
    for _, g in glob.groupby("finding"):  # balanced present / absent
        assert g["label"].sum() * 2 == len(g)
    rep = df[df["kind"] == "report_error"]
    assert set(rep["error_group"]) <= {"control", "image", "text"} and {"control", "image", "text"} <= set(rep["error_group"])
    assert ((rep["error_group"] == "control") == (rep["label"] == 1)).all()
    for r in rep.itertuples():
        # controls quote their study's report verbatim; injected errors do not
        assert (r.sentence in r.report) == (r.label == 1) or r.error_type == "repetition"
    for col in ("patient_id", "study_id", "age", "sex", "view"):
        assert df[col].notna().all()
    assert (df["image_width"] == 512).all() and (train.df["image_width"] == 224).all()
    test.validate()
    train.validate()


def test_swap_partners(built: tuple[Path, ProbeSet, ProbeSet]) -> None:
    _, test, _ = built
    labels = _study_labels(test)
    df = test.df
    assert df["swap_image_path"].notna().all()
    assert (df["swap_patient_id"] != df["patient_id"]).all()
    for r in df[df["kind"] == "finding_presence"].itertuples():
        partner = labels[r.swap_image_path]
        assert (partner[r.finding] is not None) == bool(r.label), r.case_id
        assert test.resolve(r.swap_image_path).exists()


def test_boxes_and_irrelevant_boxes(built: tuple[Path, ProbeSet, ProbeSet]) -> None:
    _, test, _ = built
    boxed = test.df[test.df["source"] == "phantom-mscxr"]
    for r in boxed.itertuples():
        box = (r.box_x0, r.box_y0, r.box_x1, r.box_y1)
        assert 0 <= r.box_x0 < r.box_x1 <= 512 and 0 <= r.box_y0 < r.box_y1 <= 512
        tb = (r.tbox_x0, r.tbox_y0, r.tbox_x1, r.tbox_y1)
        assert tb == working_box(box, 512, 512, 224)
        assert tb[2] - tb[0] > 50 and tb[3] - tb[1] > 50  # the paper keeps boxes over 50 x 50 at 224
        ib = (r.ibox_x0, r.ibox_y0, r.ibox_x1, r.ibox_y1)
        assert (ib[2] - ib[0], ib[3] - ib[1]) == (tb[2] - tb[0], tb[3] - tb[1])
        assert ib[0] in (0, 224 - (ib[2] - ib[0])) and ib[1] in (0, 224 - (ib[3] - ib[1]))  # flush in a corner
        cx, cy = (tb[0] + tb[2]) / 2, (tb[1] + tb[3]) / 2
        corner = (0 if ib[0] == 0 else 224, 0 if ib[1] == 0 else 224)
        far = max((c[0] - cx) ** 2 + (c[1] - cy) ** 2 for c in [(0, 0), (224, 0), (0, 224), (224, 224)])
        assert (corner[0] - cx) ** 2 + (corner[1] - cy) ** 2 == far
        assert (ib, bool(r.ibox_overlaps)) == irrelevant_box(tb)
        # the box is the one recorded for the study's finding
        sf = json.loads(r.study_findings)
        assert tuple(sf[r.finding]["box"]) == box


@pytest.mark.parametrize("res", [224, 512])
def test_mask_boxes_have_equal_size_at_every_resolution(built: tuple[Path, ProbeSet, ProbeSet], res: int) -> None:
    """The irrelevant box has exactly the target box's size, flush in the corner recorded at 224, at 224 and 512."""
    _, test, _ = built
    n = 0
    for case in test.cases():
        if case.tbox is None:
            continue
        tb = Condition("target_mask", res).recipe(case, test.resolve).fill
        ib = Condition("irrelevant_mask", res).recipe(case, test.resolve).fill
        assert (ib[2] - ib[0], ib[3] - ib[1]) == (tb[2] - tb[0], tb[3] - tb[1]), (case.case_id, res, tb, ib)
        # the target box comes from the source-pixel box (not from the rounded 224 box)
        assert tb == working_box(case.target_box, 512, 512, res)
        right, bottom = case.ibox[0] != 0, case.ibox[1] != 0  # the corner recorded at 224
        assert ib[0] == (res - (ib[2] - ib[0]) if right else 0) and ib[1] == (res - (ib[3] - ib[1]) if bottom else 0)
        n += 1
    assert n == int(test.df["tbox_x0"].notna().sum()) > 0


def test_provenance_records_the_package_version(built: tuple[Path, ProbeSet, ProbeSet]) -> None:
    out, test, train = built
    for folder, ps in (("probeset", test), ("train", train)):
        assert json.loads((out / folder / "probeset.json").read_text())["package_version"] == __version__
        assert ps.provenance["package_version"] == __version__
    # provenance is not content: the hash ignores it (so builds stay byte-for-byte comparable across versions)
    assert ProbeSet(test.df, test.image_root, {"package_version": "0.0.0"}).content_hash == test.content_hash


def test_train_and_test_patients_are_disjoint(built: tuple[Path, ProbeSet, ProbeSet]) -> None:
    _, test, train = built
    assert not set(test.df["patient_id"]) & set(train.df["patient_id"])
    assert not set(test.df["image_path"]) & set(train.df["image_path"])


def test_build_is_deterministic(tmp_path: Path) -> None:
    a_test, a_train = build_phantom(tmp_path / "a", n_cases=60, n_train=60, seed=42)
    b_test, b_train = build_phantom(tmp_path / "b", n_cases=60, n_train=60, seed=42)
    assert a_test.content_hash == b_test.content_hash and a_train.content_hash == b_train.content_hash
    assert _images_digest(tmp_path / "a") == _images_digest(tmp_path / "b")
    rows, _ = _draw(60, [7, 1], "test", 512)  # another seed draws other cases
    assert [r["study_id"] for r in rows] != list(a_test.df["study_id"])


def test_rebuild_reuses_a_finished_build(built: tuple[Path, ProbeSet, ProbeSet]) -> None:
    out, test, train = built
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "images").glob("*.png")}
    stamp = (out / STAMP).stat().st_mtime_ns
    t2, tr2 = build_phantom(out, n_cases=N_CASES, n_train=N_TRAIN, seed=42)
    assert t2.content_hash == test.content_hash and tr2.content_hash == train.content_hash
    assert (out / STAMP).stat().st_mtime_ns == stamp
    assert all(p.stat().st_mtime_ns == m for p, m in mtimes.items())
    # each image written once, no temp files left behind
    assert not list((out / "images").glob(".*"))
    assert len(mtimes) == len(set(test.df["image_path"]) | set(train.df["image_path"]))


def test_changed_parameters_or_damage_trigger_a_rebuild(tmp_path: Path) -> None:
    out = tmp_path / "p"
    first, _ = build_phantom(out, n_cases=60, n_train=60, seed=42)
    other, _ = build_phantom(out, n_cases=64, n_train=60, seed=42)
    assert len(other) == 64 and other.content_hash != first.content_hash
    (out / "probeset" / "manifest.parquet").write_bytes(b"garbage")
    again, _ = build_phantom(out, n_cases=64, n_train=60, seed=42)
    assert again.content_hash == other.content_hash


def test_build_rejects_tiny_requests(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="n_cases"):
        build_phantom(tmp_path, n_cases=10)
