"""Vision-only probe: frozen tiny random DINOv2 features + per-finding logistic regression, feature cache."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
from PIL import Image
from sklearn.linear_model import LogisticRegression

from medvlm_audit.errors import ConfigError, ProbeSetError
from medvlm_audit.models.base import Decoding, ImageData, Message, ModelInput
from medvlm_audit.scorers.yesno import p_yes
from medvlm_audit.suites.grounding.probeset import ProbeSet
from medvlm_audit.suites.grounding.vision_probe import (
    ImageEncoder,
    RoutedVisionProbe,
    VisionProbe,
    _match_display_name,
    answer_from_probability,
    finding_of,
    working_image,
)
from medvlm_audit.testing.tiny_models import build_tiny_vit

NAMES = {"pleural_effusion": "pleural effusion", "pneumothorax": "pneumothorax"}
BLOB = {
    "pleural_effusion": (95, 35),
    "pneumothorax": (30, 95),
}  # (row, col) centre of the finding's bright blob


def write_image(path: Path, rng: np.random.Generator, present: dict[str, int], bg: float = 90) -> None:
    a = rng.normal(bg, 20, (128, 128))
    yy, xx = np.mgrid[:128, :128]
    for f, on in present.items():
        if on:
            cy, cx = BLOB[f]
            a[(yy - cy) ** 2 + (xx - cx) ** 2 < 18**2] = 230
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(path)


def make_probeset(
    root: Path, n: int, seed: int, splits: list[str], n_normal: int = 0, bg: float = 90, flip: bool = False
) -> ProbeSet:
    """n images, each asked about two findings; a bright blob in the finding's region means 'present'
    (``flip``: means 'absent'). ``n_normal`` blob-free images are asked "any acute abnormality?" with label 0
    only, as the dataset builders write their normal studies; ``bg`` is the background grey (a domain)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        labels = {f: int(rng.random() < 0.5) for f in NAMES}
        name = f"s{seed}_img{i:03d}.png"
        write_image(root / name, rng, {f: v != flip for f, v in labels.items()}, bg)
        for f, lab in labels.items():
            rows.append(
                {
                    "case_id": f"s{seed}_{i}_{f}",
                    "kind": "finding_presence",
                    "label": lab,
                    "finding": f,
                    "image_path": name,
                    "split": splits[i % len(splits)],
                }
            )
    for i in range(n_normal):
        name = f"s{seed}_normal{i:03d}.png"
        write_image(root / name, rng, {f: flip for f in NAMES}, bg)
        rows.append({"case_id": f"s{seed}_normal{i}", "kind": "finding_presence", "label": 0,
                     "finding": "no_finding", "image_path": name, "split": splits[i % len(splits)]})
    ps = ProbeSet(pd.DataFrame(rows), root, name=f"blobs{seed}")
    ps.validate()
    return ps


def question(finding: str, style: int = 0) -> ModelInput:
    text = [
        f"Is {NAMES[finding]} present in this chest X-ray? Answer with a single word: Yes or No.",
        f"You are an expert radiologist. Is there {NAMES[finding]}? Reply Yes or No.",
    ][style]
    return text


def ask(text: str, img: ImageData | None) -> ModelInput:
    return ModelInput((Message("user", text),), (img,) if img is not None else (), Decoding())


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe")
    enc = build_tiny_vit(root / "encoder")
    train = make_probeset(root, 36, seed=1, splits=["train", "train", "validate"])
    test = make_probeset(root, 16, seed=2, splits=["test"])
    return root, enc, train, test


@pytest.fixture(scope="module")
def probe(world):
    root, enc, train, _ = world
    return VisionProbe.fit(train, enc, root / "cache", device="cpu")


def test_probe_learns_the_blob_and_answers_yes_no(world, probe):
    _, _, _, test = world
    assert probe.modality == "vision_only"
    rows = list(test.df.itertuples())
    inputs = [ask(question(r.finding), working_image(test.resolve(r.image_path))) for r in rows]
    out = probe.predict(inputs)
    correct = 0
    for r, resp in zip(rows, out):
        assert resp.ok and resp.text in ("Yes", "No")
        probs = {t: math.exp(lp) for t, lp in resp.top_logprobs}
        assert probs["Yes"] + probs["No"] == pytest.approx(1.0)
        assert (resp.text == "Yes") == (probs["Yes"] > 0.5)
        assert p_yes(resp.top_logprobs) == pytest.approx(probs["Yes"])  # the shared scorer reads it
        correct += int((resp.text == "Yes") == bool(r.label))
    assert correct / len(rows) >= 0.85


def test_probability_is_sigmoid_of_l2_logistic_head_on_train_standardised_features(world, probe):
    """Recompute by hand: encoder CLS features, train-split mean/std, sklearn LR(C=1) on train+validate."""
    _, enc_path, train, test = world
    enc = ImageEncoder(enc_path, device="cpu")
    df = train.df
    imgs = [working_image(train.resolve(p)) for p in df["image_path"]]
    X = enc.encode([im.pixels for im in imgs]).astype(np.float64)
    is_train = (df["split"] == "train").to_numpy()
    mean, std = X[is_train].mean(0), X[is_train].std(0)
    assert np.allclose(probe.mean, mean, atol=1e-6) and np.allclose(probe.scale, std, atol=1e-6)
    Z = (X - mean) / std
    r = test.df.iloc[0]
    img = working_image(test.resolve(r["image_path"]))
    z = (enc.encode([img.pixels]).astype(np.float64) - mean) / std
    for f in NAMES:
        sel = (df["finding"] == f).to_numpy()
        lr = LogisticRegression(C=1.0, max_iter=2000).fit(Z[sel], df["label"][sel].astype(int))
        head = probe.heads[f]
        assert head.n_train == sel.sum()  # training + validation cases
        assert np.allclose(head.coef, lr.coef_[0], atol=1e-3)
        hand = 1.0 / (1.0 + np.exp(-(z[0] @ lr.coef_[0] + lr.intercept_[0])))
        got = probe.predict([ask(question(f), img)])[0]
        assert math.exp(dict(got.top_logprobs)["Yes"]) == pytest.approx(hand, abs=1e-4)


def test_feature_cache_means_a_second_run_encodes_nothing(world, tmp_path):
    _root, enc, train, _test = world
    cache = tmp_path / "features"
    first = VisionProbe.fit(train, enc, cache, device="cpu")
    n_images = train.df["image_path"].nunique()
    assert first.encoder.n_images == n_images and first.encoder.n_forward >= 1
    second = VisionProbe.fit(train, enc, cache, device="cpu")
    assert second.encoder.n_forward == 0 and second.encoder.n_images == 0
    assert np.array_equal(first.heads["pneumothorax"].coef, second.heads["pneumothorax"].coef)
    # inference: training images are cache hits; a new (masked) image is encoded once, then cached
    img = working_image(train.resolve(train.df["image_path"].iloc[0]))
    second.predict([ask(question("pneumothorax"), img)])
    assert second.encoder.n_forward == 0
    masked = img.pixels.copy()
    masked[10:60, 70:120] = 0
    m = ImageData.from_array(masked)
    a = second.predict([ask(question("pneumothorax"), m), ask(question("pleural_effusion"), m)])
    assert second.encoder.n_forward == 1 and second.encoder.n_images == 1  # one distinct image, one pass
    b = second.predict([ask(question("pneumothorax"), m)])
    assert second.encoder.n_forward == 1 and a[0].top_logprobs == b[0].top_logprobs
    files = list(cache.rglob("*.npy"))
    assert len(files) == n_images + 1 and not list(cache.rglob(".tmp.*"))
    # another encoder has another identity, so it does not reuse these features
    other = build_tiny_vit(tmp_path / "other", seed=1)
    third = VisionProbe.fit(train, other, cache, device="cpu")
    assert third.encoder.n_images == n_images


def test_only_the_finding_name_is_read_from_the_prompt(world, probe):
    _, _, _, test = world
    img = working_image(test.resolve(test.df["image_path"].iloc[3]))
    a, b = probe.predict([ask(question("pneumothorax", 0), img), ask(question("pneumothorax", 1), img)])
    assert a.top_logprobs == b.top_logprobs
    c = probe.predict([ask(question("pleural_effusion"), img)])[0]
    assert c.top_logprobs != a.top_logprobs
    bad = probe.predict(
        [
            ask("Is the heart visible?", img),
            ask(question("pneumothorax"), None),
            ask("Is there cardiomegaly?", img),
        ]
    )
    assert "names no known finding" in bad[0].error.message
    assert "needs an image" in bad[1].error.message
    assert "no probe head for finding 'cardiomegaly'" in bad[2].error.message


def test_finding_matching_prefers_longest_display_name():
    assert _match_display_name("Is pulmonary edema present?") == "edema"
    assert _match_display_name("Is there any acute abnormality in this image?") == "no_finding"
    assert _match_display_name("Is there a RIB FRACTURE?") == "fracture"
    assert _match_display_name("Is there an enlarged cardiomediastinum?") == "enlarged_cardiomediastinum"
    assert _match_display_name("Is there a lung lesion?") == "lung_lesion"
    assert _match_display_name("Is the abnormality pleural?") is None
    assert finding_of("Is pleural effusion present?") == "pleural_effusion"


def test_answer_from_probability():
    r = answer_from_probability(0.7)
    assert r.text == "Yes" and r.top_logprobs[0] == ("Yes", pytest.approx(math.log(0.7)))
    assert dict(r.top_logprobs)["No"] == pytest.approx(math.log(0.3))
    assert answer_from_probability(0.5).text == "No"  # threshold 0.5: Yes only above it
    assert all(math.isfinite(lp) for _, lp in answer_from_probability(1.0).top_logprobs)


def test_single_class_and_bad_input_errors(world, tmp_path):
    _root, enc, train, _ = world
    one_class = ProbeSet(train.df[train.df["label"] == 1], train.image_root, name="pos-only")
    with pytest.raises(ProbeSetError, match="pneumothorax.*both classes"):
        VisionProbe.fit(one_class, enc, None, findings=["pneumothorax"], device="cpu")
    mixed = pd.concat(
        [
            train.df,
            train.df[train.df["finding"] == "pneumothorax"].assign(
                case_id=lambda d: d["case_id"] + "_c", finding="cardiomegaly", label=1
            ),
        ]
    )
    p = VisionProbe.fit(ProbeSet(mixed, train.image_root), enc, None, device="cpu")
    assert set(p.heads) == {"pleural_effusion", "pneumothorax"} and "cardiomegaly" in p.skipped
    broken = train.df.copy()
    broken.loc[0, "image_path"] = "missing.png"
    with pytest.raises(ProbeSetError, match=r"case 's1_0_pleural_effusion'.*missing.png"):
        VisionProbe.fit(ProbeSet(broken, train.image_root), enc, None, device="cpu")
    with pytest.raises(ConfigError, match="nowhere"):
        VisionProbe.fit(train, tmp_path / "nowhere", None)


def test_save_and_load_round_trip(world, probe, tmp_path):
    _, _enc, _, test = world
    path = probe.save(tmp_path / "probe.npz")
    again = VisionProbe.load(path, cache_dir=None, device="cpu")
    img = working_image(test.resolve(test.df["image_path"].iloc[0]))
    a = again.predict([ask(question("pneumothorax"), img)])[0].top_logprobs
    b = probe.predict([ask(question("pneumothorax"), img)])[0].top_logprobs
    assert [t for t, _ in a] == [t for t, _ in b]
    assert np.allclose([lp for _, lp in a], [lp for _, lp in b], atol=1e-9)
    assert again.identity() == probe.identity()
    other = build_tiny_vit(tmp_path / "other", seed=3)
    with pytest.raises(ConfigError, match="differs"):
        VisionProbe.load(path, encoder_path=other, device="cpu")


def question_any() -> str:
    return "Is any acute abnormality present in this chest X-ray? Answer with a single word: Yes or No."


def test_normal_studies_get_an_any_abnormality_head(world, tmp_path):
    """Builders write normals as no_finding label 0 only: the head is fitted on abnormal (any finding present)
    against normal images, so normal studies are answered, not errored."""
    root, enc, _, _ = world
    train = make_probeset(root, 36, seed=5, splits=["train", "validate"], n_normal=24)
    test = make_probeset(root, 12, seed=6, splits=["test"], n_normal=12)
    probe = VisionProbe.fit(train, enc, None, device="cpu")
    assert "no_finding" in probe.heads and "no_finding" not in probe.skipped
    head = probe.heads["no_finding"]
    df = train.df
    abnormal = set(df.loc[(df.finding != "no_finding") & (df.label == 1), "image_path"])
    assert head.n_pos == len(abnormal) and head.n_train == len(abnormal) + 24
    normals = test.df[test.df.finding == "no_finding"]
    imgs = [working_image(test.resolve(p)) for p in normals.image_path]
    out = probe.predict([ask(question_any(), im) for im in imgs])
    assert all(r.ok for r in out)
    assert sum(r.text == "No" for r in out) >= 10  # blob-free images read as normal
    # abnormal test images (a blob somewhere) read as abnormal
    ab = test.df[(test.df.finding != "no_finding") & (test.df.label == 1)].drop_duplicates("image_path")
    out = probe.predict([ask(question_any(), working_image(test.resolve(p))) for p in ab.image_path])
    assert sum(r.text == "Yes" for r in out) >= 0.8 * len(out)


def test_fit_on_several_probe_sets_equals_fit_on_their_union(world):
    root, enc, train, _ = world
    other = make_probeset(root, 20, seed=7, splits=["train", "validate"])
    both = VisionProbe.fit([train, other], enc, None, device="cpu")
    union = ProbeSet(pd.concat([train.df, other.df], ignore_index=True), root, name="union")
    one = VisionProbe.fit(union, enc, None, device="cpu")
    assert both.training["probe_sets"] == ["blobs1", "blobs7"]
    for f in NAMES:
        assert both.heads[f].n_train == one.heads[f].n_train == (train.df.finding == f).sum() + 20
        assert np.allclose(both.heads[f].coef, one.heads[f].coef)


def test_per_source_heads_are_routed_by_the_pixels(world, tmp_path):
    """Two sources whose labels mean opposite things: one probe cannot fit both, per-source heads can."""
    root, enc, _, _ = world
    a_train = make_probeset(root, 40, seed=11, splits=["train", "validate"], bg=60)
    b_train = make_probeset(root, 40, seed=12, splits=["train", "validate"], bg=170, flip=True)
    a_test = make_probeset(root, 12, seed=13, splits=["test"], bg=60)
    b_test = make_probeset(root, 12, seed=14, splits=["test"], bg=170, flip=True)
    routed = RoutedVisionProbe.fit({"a": a_train, "b": [b_train]}, enc, tmp_path / "cache", device="cpu")
    assert routed.modality == "vision_only" and routed.sources == ["a", "b"]
    assert routed.training["router_cv_accuracy"] == 1.0
    for k, test in enumerate((a_test, b_test)):
        imgs = [working_image(test.resolve(p)) for p in test.df.image_path]
        X = routed.encoder.encode([im.pixels for im in imgs])
        assert (routed.route(X) == k).all()
        out = routed.predict([ask(question(r.finding), im) for r, im in zip(test.df.itertuples(), imgs)])
        acc = np.mean([(o.text == "Yes") == bool(r.label) for o, r in zip(out, test.df.itertuples())])
        assert acc >= 0.85
    assert routed.identity()["sources"].keys() == {"a", "b"}
    with pytest.raises(ConfigError, match="at least two sources"):
        RoutedVisionProbe.fit({"a": a_train}, enc, None, device="cpu")


def test_second_fit_neither_decodes_nor_encodes(world, tmp_path, monkeypatch):
    from medvlm_audit.suites.grounding import vision_probe as vp

    _, enc, _, _ = world
    train = make_probeset(tmp_path, 12, seed=31, splits=["train"])  # its own files: one is rewritten below
    VisionProbe.fit(train, enc, tmp_path / "c", device="cpu")
    calls = []
    real = vp.working_image
    monkeypatch.setattr(vp, "working_image", lambda p, *a: calls.append(p) or real(p, *a))
    again = VisionProbe.fit(train, enc, tmp_path / "c", device="cpu")
    assert calls == [] and again.encoder.n_images == 0
    # a changed file is decoded (and, its pixels being new, encoded) again
    first = train.resolve(train.df.image_path.iloc[0])
    write_image(first, np.random.default_rng(99), {"pneumothorax": 1})
    third = VisionProbe.fit(train, enc, tmp_path / "c", device="cpu")
    assert len(calls) == 1 and third.encoder.n_images == 1


def test_registry_builds_single_multi_and_per_source_probes(world, tmp_path):
    from medvlm_audit.config import ModelSpec
    from medvlm_audit.models.registry import load_model

    root, enc, train, _ = world
    a = train.save(tmp_path / "a")
    b = make_probeset(root, 20, seed=21, splits=["train"], bg=170).save(tmp_path / "b")
    base = {"backend": "vision_probe", "encoder_path": str(enc), "cache_dir": str(tmp_path / "f"), "device": "cpu"}
    m1 = load_model(ModelSpec(name="rad", train=str(a), **base))
    m2 = load_model(ModelSpec(name="rad2", train=[str(a), str(b)], **base))
    m3 = load_model(ModelSpec(name="rad3", train={"mimic": [str(a)], "chexpert": str(b)}, **base))
    assert isinstance(m1, VisionProbe) and m1.name == "rad"
    assert isinstance(m2, VisionProbe) and len(m2.training["probe_sets"]) == 2
    assert isinstance(m3, RoutedVisionProbe) and m3.sources == ["mimic", "chexpert"] and m3.name == "rad3"
    with pytest.raises(ConfigError, match="needs 'train'"):
        load_model(ModelSpec(name="x", backend="vision_probe", encoder_path=str(enc)))


def test_sentence_questions_are_not_applicable(probe, world):
    _, _, _, test = world
    img = working_image(test.resolve(test.df["image_path"].iloc[0]))
    from medvlm_audit.suites.grounding.prompts import SENTENCE_TEMPLATES

    out = probe.predict([ask(t.format(sentence="Small right pleural effusion."), img)
                         for t in SENTENCE_TEMPLATES.values()])
    assert all(r.error.kind == "not_applicable" for r in out)
    assert probe.predict([ask(question("pneumothorax"), None)])[0].error.kind == "not_applicable"
