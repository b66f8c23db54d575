"""The reference panel: each model's designed behaviour, recovered by computing CGR / UAR / IS directly here."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medvlm_audit.findings import DISPLAY_NAMES, MS_CXR_FINDINGS
from medvlm_audit.models.base import Decoding, ImageData, Message, ModelInput
from medvlm_audit.phantom import PHANTOM_FINDINGS
from medvlm_audit.suites.grounding.phantom_probeset import build_phantom
from medvlm_audit.suites.grounding.probeset import ProbeSet
from medvlm_audit.suites.grounding.prompt_parsing import finding_from_prompt, parse_prompt
from medvlm_audit.suites.grounding.reference import (
    REFERENCE_KINDS,
    fit_reference_panel,
    make_reference_model,
    yes_no_response,
)

#: the fast lane (`pytest -m "not slow"`) leaves this module out: its fixtures build runs or start processes
pytestmark = pytest.mark.slow

# the paper's phrasings (Supplementary Note 1), written out here so the parser is tested against the text itself
FINDING_PROMPTS = {
    "default": "Is {d} present in this chest X-ray? Answer with a single word: Yes or No.",
    "terse": "Is {d} present? Yes or No.",
    "radiologist": "You are a radiologist reviewing a chest X-ray. Is {d} present? Answer with a single word: Yes or No.",
}
SENTENCE_PROMPTS = {
    "default": "Does the following sentence accurately describe the findings visible in this chest X-ray?\n"
               "Sentence: \u201c{s}\u201d\nAnswer with a single word: Yes or No.",
    "terse": "Is this sentence accurate for this X-ray? \u201c{s}\u201d Yes or No.",
    "radiologist": "You are a radiologist. Does the following sentence accurately describe findings in this chest "
                   "X-ray?\nSentence: \u201c{s}\u201d\nAnswer with a single word: Yes or No.",
}


# ----------------------------------------------------------------------------------------------- helpers


def prompt_for(case, variant: str = "default") -> str:
    if case.kind == "report_error":
        return SENTENCE_PROMPTS[variant].format(s=case.sentence)
    return FINDING_PROMPTS[variant].format(d=DISPLAY_NAMES[case.finding])


def load(ps: ProbeSet, path: str, res: int = 224) -> np.ndarray:
    with Image.open(ps.resolve(path)) as im:
        im = im.convert("L")
        return np.asarray(im if im.width == res else im.resize((res, res), Image.BILINEAR))


def fill_black(px: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    out = px.copy()
    out[box[1] : box[3], box[0] : box[2]] = 0
    return out


def model_input(px: np.ndarray | None, prompt: str, logprobs: bool = True, top: int = 5) -> ModelInput:
    images = () if px is None else (ImageData.from_array(px),)
    return ModelInput((Message("user", prompt),), images, Decoding(max_new_tokens=10, logprobs=logprobs, top_logprobs=top))


def wilson_low(k: int, n: int, z: float = 1.96) -> float:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half


# ----------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def phantom(tmp_path_factory: pytest.TempPathFactory) -> tuple[ProbeSet, ProbeSet]:
    return build_phantom(tmp_path_factory.mktemp("ph"), n_cases=200, n_train=400, seed=42)


@pytest.fixture(scope="module")
def panel(phantom: tuple[ProbeSet, ProbeSet]) -> dict:
    return {m.kind: m for m in fit_reference_panel(phantom[1])}


@pytest.fixture(scope="module")
def conditions(phantom: tuple[ProbeSet, ProbeSet]) -> list[tuple[object, dict[str, ModelInput]]]:
    """Every test case under original / swap / target_mask / irrelevant_mask / res512 / no_image."""
    test, _ = phantom
    out = []
    for c in test.cases():
        prompt = prompt_for(c)
        orig = load(test, c.image)
        d = {"original": orig, "swap": load(test, c.swap_image), "res512": load(test, c.image, 512), "no_image": None}
        if c.tbox is not None:
            d["target_mask"] = fill_black(orig, c.tbox)
            d["irrelevant_mask"] = fill_black(orig, c.ibox)
        out.append((c, {k: model_input(px, prompt) for k, px in d.items()}))
    return out


@pytest.fixture(scope="module")
def answers(panel: dict, conditions: list) -> dict[str, dict[tuple[str, str], bool]]:
    res: dict[str, dict[tuple[str, str], bool]] = {}
    for kind, m in panel.items():
        keys, inputs = [], []
        for c, d in conditions:
            for cond, inp in d.items():
                keys.append((c.case_id, cond))
                inputs.append(m.prepare(inp))
        resp = m.predict(inputs)
        assert all(r.text in ("Yes", "No") for r in resp)
        res[kind] = {k: r.text == "Yes" for k, r in zip(keys, resp)}
    return res


def metrics(ans: dict[tuple[str, str], bool], conditions: list) -> dict[str, float]:
    cases = [c for c, _ in conditions]
    correct = [c for c in cases if ans[(c.case_id, "original")] == bool(c.label)]
    boxed = [c for c in correct if c.tbox is not None]
    flips = sum(ans[(c.case_id, "target_mask")] != ans[(c.case_id, "original")] for c in boxed)
    stable = sum(ans[(c.case_id, "irrelevant_mask")] == ans[(c.case_id, "original")] for c in boxed)
    same_swap = sum(ans[(c.case_id, "swap")] == ans[(c.case_id, "original")] for c in correct)
    agree512 = sum(ans[(c.case_id, "res512")] == ans[(c.case_id, "original")] for c in cases)
    return {
        "acc": len(correct) / len(cases), "n_box": len(boxed), "flips": flips,
        "CGR": flips / len(boxed), "IS": stable / len(boxed), "UAR": same_swap / len(correct),
        "agree512": agree512 / len(cases),
    }


# ----------------------------------------------------------------------------------------------- designed behaviours


def test_local_evidence_uses_the_image(answers: dict, conditions: list) -> None:
    m = metrics(answers["local_evidence"], conditions)
    assert m["acc"] >= 0.7, m
    assert m["n_box"] >= 30, m
    assert m["CGR"] >= 0.5 and wilson_low(m["flips"], m["n_box"]) > 0, m
    assert m["IS"] >= 0.9, m
    assert m["UAR"] <= 0.95, m
    assert m["agree512"] >= 0.9, m  # reads 224 and 512 inputs alike


def test_finding_prior_ignores_the_image(answers: dict, conditions: list, panel: dict) -> None:
    assert panel["finding_prior"].modality == "text_only"
    ans = answers["finding_prior"]
    for c, d in conditions:
        assert len({ans[(c.case_id, k)] for k in d}) == 1  # same answer whatever the image (or none)
    m = metrics(ans, conditions)
    assert m["CGR"] == 0 and m["IS"] == 1 and m["UAR"] == 1
    assert m["acc"] >= 0.6, m  # informative priors


def test_always_yes(answers: dict, conditions: list) -> None:
    assert all(answers["always_yes"].values())
    m = metrics(answers["always_yes"], conditions)
    assert m["CGR"] == 0 and m["UAR"] == 1


def test_global_probe_uses_the_image_with_low_grounding(answers: dict, conditions: list, panel: dict) -> None:
    assert panel["global_probe"].modality == "vision_only"
    m = metrics(answers["global_probe"], conditions)
    local = metrics(answers["local_evidence"], conditions)
    assert m["flips"] > 0 and wilson_low(m["flips"], m["n_box"]) > 0, m
    assert m["CGR"] <= 0.45 and m["CGR"] < local["CGR"] - 0.2, (m, local)
    assert m["IS"] >= 0.9, m
    assert m["UAR"] < 0.95, m


def test_occlusion_unstable_moves_under_any_occlusion(answers: dict, conditions: list) -> None:
    m = metrics(answers["occlusion_unstable"], conditions)
    assert m["IS"] < 0.7, m
    assert m["UAR"] < 1.0, m


# ----------------------------------------------------------------------------------------------- only the ModelInput


def test_answers_depend_only_on_the_input(panel: dict, conditions: list, phantom: tuple[ProbeSet, ProbeSet]) -> None:
    """Same pixels + prompt -> same answer, whichever case or batch they come from; refits agree."""
    inputs = [inp for _, d in conditions[:60] for inp in d.values()]
    order = list(range(len(inputs)))
    random.Random(0).shuffle(order)
    refit = {m.kind: m for m in fit_reference_panel(phantom[1])}
    for kind, m in panel.items():
        base = [(r.text, r.top_logprobs) for r in m.predict(inputs)]
        shuffled = m.predict([inputs[i] for i in order])
        assert [(r.text, r.top_logprobs) for r in shuffled] == [base[i] for i in order], kind
        one = [m.predict([inp])[0] for inp in inputs[:12]]
        assert [(r.text, r.top_logprobs) for r in one] == base[:12], kind
        # a copy of the pixels (another array, same content) is the same input
        _c0, d0 = conditions[0]
        copy = model_input(np.array(d0["original"].images[0].pixels), d0["original"].messages[0].content)
        assert m.predict([copy])[0].text == m.predict([d0["original"]])[0].text
        assert [r.text for r in refit[kind].predict(inputs)] == [t for t, _ in base], kind
        assert refit[kind].identity() == m.identity()


def test_identity_keys_kind_training_data_and_version(panel: dict, tmp_path: Path) -> None:
    ids = [m.identity() for m in panel.values()]
    assert len({i["kind"] for i in ids}) == len(REFERENCE_KINDS)
    assert all(i["version"] and len(i["train_hash"]) == 64 for i in ids)
    _, other_train = build_phantom(tmp_path / "o", n_cases=60, n_train=120, seed=3)
    other = make_reference_model("always_yes", other_train)
    assert other.identity()["train_hash"] != panel["always_yes"].identity()["train_hash"]


def test_rgb_and_grayscale_inputs_read_alike(panel: dict, conditions: list) -> None:
    gray = [d["original"] for _, d in conditions[:40]]
    rgb = [model_input(np.repeat(i.images[0].pixels[..., None], 3, axis=2), i.messages[0].content) for i in gray]
    for kind, m in panel.items():
        assert [r.text for r in m.predict(gray)] == [r.text for r in m.predict(rgb)], kind


def test_no_image_input_is_answered(panel: dict, conditions: list) -> None:
    inp = conditions[0][1]["no_image"]
    for m in panel.values():
        r = m.predict([inp])[0]
        assert r.ok and r.text in ("Yes", "No")


def test_confidence_is_carried_by_first_token_logprobs(panel: dict, conditions: list) -> None:
    inputs = [d["original"] for _, d in conditions[:50]]
    for kind, m in panel.items():
        for r in m.predict(inputs):
            lp = dict(r.top_logprobs)
            yes = sum(math.exp(v) for t, v in lp.items() if t.strip().lower() == "yes")
            no = sum(math.exp(v) for t, v in lp.items() if t.strip().lower() == "no")
            assert yes > 0 and no > 0, kind
            assert (yes / (yes + no) >= 0.5) == (r.text == "Yes"), kind
            assert r.top_logprobs[0][0].strip() == r.text
    no_lp = model_input(None, "Is pneumothorax present? Yes or No.", logprobs=False)
    assert panel["always_yes"].predict([no_lp])[0].top_logprobs is None


def test_yes_no_response_probability() -> None:
    inp = model_input(None, "Is pneumothorax present? Yes or No.", top=20)
    r = yes_no_response(0.8, inp, 0.0)
    lp = dict(r.top_logprobs)
    yes = sum(math.exp(lp[t]) for t in ("Yes", "yes", " Yes"))
    no = sum(math.exp(lp[t]) for t in ("No", "no", " No"))
    assert r.text == "Yes" and yes / (yes + no) == pytest.approx(0.8)
    assert yes_no_response(0.3, inp, 0.0).text == "No"


def test_local_evidence_checks_report_sentences(panel: dict, conditions: list) -> None:
    """It reads report sentences too: accuracy on report-error cases beats the share of error-free sentences."""
    m = panel["local_evidence"]
    rep = [(c, d["original"]) for c, d in conditions if c.kind == "report_error"]
    got = [r.text == "Yes" for r in m.predict([i for _, i in rep])]
    acc = np.mean([g == bool(c.label) for g, (c, _) in zip(got, rep)])
    base = max(np.mean([c.label for c, _ in rep]), 1 - np.mean([c.label for c, _ in rep]))
    assert acc > base + 0.05, (acc, base)


# ----------------------------------------------------------------------------------------------- prompt parsing


@pytest.mark.parametrize("variant", list(FINDING_PROMPTS))
def test_finding_from_prompt_all_phrasings(variant: str) -> None:
    for fid, name in DISPLAY_NAMES.items():
        text = FINDING_PROMPTS[variant].format(d=name)
        assert finding_from_prompt(text) == fid, (variant, fid)
        assert parse_prompt(text).kind == "finding_presence"
    assert finding_from_prompt("Is the weather nice today? Yes or No.") is None


@pytest.mark.parametrize("variant", list(SENTENCE_PROMPTS))
def test_report_sentence_prompts(variant: str) -> None:
    cases = {
        "Small left pleural effusion.": ("pleural_effusion", True, "left"),
        "No pneumothorax.": ("pneumothorax", False, None),
        "The cardiac silhouette is not enlarged.": ("cardiomegaly", False, None),
        "Patchy opacities in the right lower lung, concerning for pneumonia.": ("pneumonia", True, "right"),
        "There is mild pulmonary edema.": ("edema", True, None),
        "PA view of the chest.": (None, True, None),
    }
    for sentence, (fid, asserted, side) in cases.items():
        pp = parse_prompt(SENTENCE_PROMPTS[variant].format(s=sentence))
        assert pp.kind == "report_error" and pp.sentence == sentence
        assert (pp.finding, pp.asserted, pp.side) == (fid, asserted, side), sentence
    # the display name inside the quoted sentence is not taken for the question's finding
    assert finding_from_prompt(SENTENCE_PROMPTS[variant].format(s="No pleural effusion.")) is None


def test_phantom_findings_have_display_names() -> None:
    assert set(MS_CXR_FINDINGS) <= set(PHANTOM_FINDINGS) <= set(DISPLAY_NAMES)


def test_unknown_kind_is_rejected(phantom: tuple[ProbeSet, ProbeSet]) -> None:
    with pytest.raises(ValueError, match="unknown reference model kind"):
        make_reference_model("oracle", phantom[1])
