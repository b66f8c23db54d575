"""The ``hf`` extra loads LLaVA-, Idefics- and Qwen2-VL-style processors from config-built local folders on a
CPU machine; a processor that needs torchvision when it is absent fails with one line naming the build to
install (not a raw ImportError)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from medvlm_audit.models.hf import MissingDependencyError, load_processor  # noqa: E402
from medvlm_audit.testing.tiny_models import CHAT_TEMPLATE, build_tiny_tokenizer  # noqa: E402


def _has_torchvision() -> bool:
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001  a mismatched build raises RuntimeError, not ImportError
        return False
    return True


def _image() -> object:
    from PIL import Image

    return Image.fromarray(np.zeros((56, 56, 3), np.uint8))


def _tokenizer():
    tok = build_tiny_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": [
        "<image>", "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>",
        "<fake_token_around_image>", "<global-img>", "<end_of_utterance>"]})
    return tok


def test_llava_and_idefics_processors_load_and_encode(tmp_path: Path) -> None:
    import torch

    tok = _tokenizer()
    llava = transformers.LlavaProcessor(image_processor=transformers.CLIPImageProcessor(
        size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}), tokenizer=tok, patch_size=14,
        chat_template=CHAT_TEMPLATE)
    llava.save_pretrained(tmp_path / "llava")
    idefics = transformers.Idefics3Processor(image_processor=transformers.Idefics3ImageProcessor(
        size={"longest_edge": 64}, max_image_size={"longest_edge": 32}), tokenizer=tok, image_seq_len=4,
        chat_template=CHAT_TEMPLATE)
    idefics.save_pretrained(tmp_path / "idefics")
    for name in ("llava", "idefics"):
        p = load_processor(transformers, tmp_path / name, torch, local_files_only=True)
        out = p(text=["<image>Is there an effusion?"], images=[_image()], return_tensors="pt")
        assert out["pixel_values"].ndim >= 4 and out["input_ids"].shape[0] == 1, name


def test_qwen2_vl_processor_loads_or_names_the_torchvision_to_install(tmp_path: Path) -> None:
    import torch

    folder = tmp_path / "qwen2vl"
    _tokenizer().save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor",
        "min_pixels": 3136, "max_pixels": 12544, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2}))
    (folder / "video_preprocessor_config.json").write_text(json.dumps({
        "video_processor_type": "Qwen2VLVideoProcessor", "processor_class": "Qwen2VLProcessor"}))
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_vl"}))
    if _has_torchvision():
        p = load_processor(transformers, folder, torch, local_files_only=True)
        out = p(text=["<|vision_start|><|image_pad|><|vision_end|>hi"], images=[_image()], return_tensors="pt")
        assert "image_grid_thw" in out
    else:
        with pytest.raises(MissingDependencyError, match=r"needs torchvision.*pip install 'torchvision=="):
            load_processor(transformers, folder, torch, local_files_only=True)
