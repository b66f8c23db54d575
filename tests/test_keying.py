"""The runner's keys and stored request descriptions, built from skeletons with the message texts spliced in,
are byte-identical to serialising the whole input (``input_key`` and ``json.dumps(describe())``), whatever the
texts hold."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from conftest import BrightSpotModel

from medvlm_audit import runner
from medvlm_audit.images import ImageRecipe
from medvlm_audit.models.base import Decoding, ImageData, Message, ModelInput, TextOnly, input_key
from medvlm_audit.models.openai_compat import OpenAIChatModel
from medvlm_audit.plan import Trial

AWKWARD = [
    "plain",
    "",
    'quotes " and \\ backslashes \\" and a tab\t and\nnewlines\r\n',
    "non-ASCII: é ü — ≥ 0.5, 日本語, an emoji \U0001f600 and a lone surrogate-free \u2028 separator",
    f'looks like a slot: "{runner._TEXT_SLOT}0" and {runner._SLOT}0 and {runner._TEXT_SLOT}7',
    "x" * 5000,
]


def _trials(with_images: bool) -> list[Trial]:
    out = []
    imgs = (ImageRecipe("a.png"), ImageRecipe("b.png")) if with_images else ()
    for i, text in enumerate(AWKWARD):
        for j, system in enumerate(("You are a judge.", AWKWARD[(i + 2) % len(AWKWARD)])):
            msgs = (Message("system", system), Message("user", text), Message("assistant", AWKWARD[i - 1]),
                    Message("user", f"again {i}"))
            dec = (("max_new_tokens", 512),) if j else ()
            out.append(Trial("ps", f"c{i}", f"cond{j}", msgs[: 2 + 2 * j], imgs[: 1 + j] if imgs else (), j, None,
                             dec))
    return out


@pytest.mark.parametrize("with_images", [False, True])
def test_spliced_keys_and_descriptions_equal_whole_serialisation(with_images: bool) -> None:
    hashes = {ImageRecipe("a.png"): "a" * 64, ImageRecipe("b.png"): "b" * 64}
    dec = Decoding(seed=5)
    models = [OpenAIChatModel("m", "served", "http://127.0.0.1:9/v1"), BrightSpotModel(),
              TextOnly(BrightSpotModel(), name="t")]
    for model in models:
        work = runner.ModelWork(model, dec, set())
        trials = _trials(with_images)
        rows, requests, _ = work.admit(trials, hashes)
        described = {k: v for k, _, v, _ in requests}
        # the log-probabilities flag stored beside each description says what the description says
        assert all(lp == int(json.loads(v)["decoding"]["logprobs"] is True) for _, _, v, lp in requests)
        assert len(rows) == len(trials)
        for t, row in zip(trials, rows):
            d = Decoding(seed=5 + t.sample_index, **dict(t.decoding))
            inp = model.prepare(ModelInput(t.messages, tuple(ImageData(np.zeros((0, 0), np.uint8), hashes[r])
                                                             for r in t.images), d, t.sample_index))
            assert row[5] == input_key(model.identity(), inp)
            assert described[row[5]] == json.dumps(inp.describe(), sort_keys=True)  # the same bytes stored
        # a second admit of the same trials (templates cached) keys them the same
        again, _, _ = runner.ModelWork(model, dec, set()).admit(trials, hashes)
        assert [r[5] for r in again] == [r[5] for r in rows]


def test_skeleton_parts_refuse_a_lost_slot() -> None:
    with pytest.raises(AssertionError):
        runner._skeleton_parts('{"a":"x"}', 1, 0)
    parts = runner._skeleton_parts(f'["{runner._TEXT_SLOT}0",["{runner._SLOT}0"]]', 1, 1)
    assert runner._fill_texts(parts, ['"hi"']) == ('["hi",["', '"]]')


def test_key_is_sha256_of_the_documented_payload() -> None:
    model = OpenAIChatModel("m", "served", "http://127.0.0.1:9/v1")
    t = Trial("ps", "c", "k", (Message("user", AWKWARD[3]),))
    rows, _, _ = runner.ModelWork(model, Decoding(), set()).admit([t], {})
    payload = json.dumps({"model": model.identity(), "input": ModelInput(t.messages).describe()}, sort_keys=True,
                         separators=(",", ":"))
    assert rows[0][5] == hashlib.sha256(payload.encode()).hexdigest()


@pytest.mark.parametrize("n_images", [0, 1, 2])
def test_http_body_with_spliced_texts_is_the_serialised_request_body(n_images: int) -> None:
    """The request bytes (texts and image URLs spliced into a cached skeleton) are exactly
    ``json.dumps(request_body(inp), separators=(",", ":"))``, for every awkward text, first use or cached."""
    rng = np.random.default_rng(0)
    ims = tuple(ImageData.from_array(rng.integers(0, 256, (8, 9), dtype=np.uint8)) for _ in range(n_images))
    model = OpenAIChatModel("m", "served", "http://127.0.0.1:9/v1", extra_body={"x": AWKWARD[4]})
    for rnd in range(2):
        for i, text in enumerate(AWKWARD):
            for msgs in ((Message("user", text),),
                         (Message("system", AWKWARD[i - 1]), Message("user", text), Message("assistant", "a"),
                          Message("user", AWKWARD[i - 2]))):
                inp = ModelInput(msgs, ims, Decoding(max_new_tokens=7 + rnd))
                want = json.dumps(model.request_body(inp), separators=(",", ":")).encode()
                assert model.encode_payload(inp) == want


def test_an_input_subclass_with_its_own_description_is_serialised_whole() -> None:
    """A model whose prepared input describes itself otherwise (here: the text's length beside it) keys by that
    description, not by the base class's skeleton."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Described(ModelInput):
        def describe(self):  # type: ignore[override]
            d = super().describe()
            d["lengths"] = [len(m.content) for m in self.messages]
            return d

    class Preparing(BrightSpotModel):
        def prepare(self, inp):
            return Described(inp.messages, inp.images, inp.decoding, inp.sample_index)

    model = Preparing()
    trials = [Trial("ps", "c", f"k{i}", (Message("user", text),)) for i, text in enumerate(AWKWARD)]
    rows, requests, _ = runner.ModelWork(model, Decoding(), set()).admit(trials, {})
    described = {k: v for k, _, v, _ in requests}
    # the flag is read from the subclass's own description (Decoding() asks for log-probabilities)
    assert all(lp == int(json.loads(v)["decoding"]["logprobs"] is True) == 1 for _, _, v, lp in requests)
    for t, row in zip(trials, rows):
        inp = Described(t.messages, (), Decoding(), 0)
        assert row[5] == input_key(model.identity(), inp)
        assert json.loads(described[row[5]])["lengths"] == [len(t.messages[0].content)]
