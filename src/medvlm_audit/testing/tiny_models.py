"""Tiny, randomly initialised Hugging Face models built from configs and saved to a folder.

They load offline in a fraction of a second and exercise the real transformers code paths
(processor, chat template, image tokens, generation), so the HF backend and the vision probe can
be tested without a model hub. Weights are random but deterministic (``torch.manual_seed``).
"""

from __future__ import annotations

from pathlib import Path

#: words the tiny tokenizer knows (a chest-radiograph question vocabulary, with Yes/No in all cases)
_CORPUS_WORDS = (
    "Yes No yes no YES NO Is Are there is are the a an this in of on present absent any acute "
    "abnormality chest X-ray radiograph image Answer answer with single word or : . , ? ! "
    "pleural effusion cardiomegaly pneumothorax consolidation pneumonia edema pulmonary atelectasis "
    "lung opacity nodule mass rib fracture support device enlarged cardiomediastinum lesion "
    "sentence report correct incorrect true false you an expert radiologist look carefully at "
    "question terse reply only one Question Based on finding left right upper lower"
)

#: chat template of the tiny models: images go where the message content lists them
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}<|system|>{% elif m['role'] == 'user' %}<|user|>{% else %}<|assistant|>{% endif %}"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<image>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}</s>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<image>", "<|system|>", "<|user|>", "<|assistant|>"]


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("the tiny test models need torch and transformers: install medvlm-audit[hf]") from e


def build_tiny_tokenizer(vocab_size: int = 200):  # -> PreTrainedTokenizerFast
    """A Llama-style (Metaspace, ``▁Yes``) BPE tokenizer trained on a small radiology vocabulary."""
    _require_torch()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    words = _CORPUS_WORDS.split()
    # every word alone, capitalised and after a space, so "Yes", "▁Yes", "yes", "▁yes" become whole tokens
    corpus = (
        [" ".join(words)] * 4 + [w for w in words] + [f"Answer: {w}" for w in ("Yes", "No", "yes", "no")] * 20
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        additional_special_tokens=["<image>", "<|system|>", "<|user|>", "<|assistant|>"],
    )
    fast.padding_side = "left"
    return fast


def _llama_config(vocab_size: int, tokenizer, seed_layers: int = 2):  # -> LlamaConfig
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=seed_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )


def _sharpen(model, std: float = 0.5) -> None:
    """Re-draw weights with a larger spread so tiny random models have peaked, image-sensitive outputs."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and "norm" not in name:
                p.normal_(0.0, std / max(1.0, p.shape[-1] ** 0.5) * 4)


def build_tiny_llava(folder: str | Path, seed: int = 0) -> Path:
    """Save a tiny random LLaVA (CLIP vision tower + Llama) with processor and chat template to ``folder``."""
    _require_torch()
    import torch
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        GenerationConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tokenizer = build_tiny_tokenizer()
    vocab = len(tokenizer)
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
        projection_dim=32,
        num_channels=3,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=_llama_config(vocab, tokenizer),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        projector_hidden_act="gelu",
    )
    model = LlavaForConditionalGeneration(config).eval()
    _sharpen(model)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": 32},
        crop_size={"height": 32, "width": 32},
        do_center_crop=True,
        do_convert_rgb=True,
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=8,
        vision_feature_select_strategy="default",
        chat_template=CHAT_TEMPLATE,
        image_token="<image>",
        num_additional_image_tokens=1,
    )
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def build_tiny_causal_lm(folder: str | Path, seed: int = 0, chat_template: bool = True) -> Path:
    """Save a tiny random text-only Llama with its tokenizer (and a chat template unless disabled)."""
    _require_torch()
    import torch
    from transformers import GenerationConfig, LlamaForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tokenizer = build_tiny_tokenizer()
    if chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    model = LlamaForCausalLM(_llama_config(len(tokenizer), tokenizer)).eval()
    _sharpen(model)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_vit(
    folder: str | Path,
    seed: int = 0,
    image_size: int = 32,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 2,
    patch_size: int = 8,
) -> Path:
    """Save a small random DINOv2 image encoder and its image processor (RAD-DINO's architecture, in small).

    The defaults are tiny (tests); the benchmark uses a larger one at 224 px to time real-ish encoding.
    """
    _require_torch()
    import torch
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = Dinov2Config(
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        mlp_ratio=2,
        patch_size=patch_size,
        image_size=image_size,
        num_channels=3,
    )
    model = Dinov2Model(config).eval()
    image_processor = BitImageProcessor(
        do_resize=True,
        size={"shortest_edge": image_size},
        resample=3,
        do_center_crop=True,
        crop_size={"height": image_size, "width": image_size},
        do_rescale=True,
        do_normalize=True,
        image_mean=[0.5307, 0.5307, 0.5307],
        image_std=[0.2583, 0.2583, 0.2583],
        do_convert_rgb=True,
    )
    model.save_pretrained(folder)
    image_processor.save_pretrained(folder)
    return folder
