"""Hugging Face transformers backend: local image-text-to-text models and text-only causal LMs.

Loads from a LOCAL folder only (``local_files_only=True``; no hub access), optionally a GGUF file in
it. torch and transformers are imported inside the constructor, so importing this module never needs
them; constructing an :class:`HFModel` without them raises :class:`MissingDependencyError`.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Literal

import numpy as np

from medvlm_audit.errors import AuditError, ConfigError
from medvlm_audit.models.base import Decoding, ErrorInfo, LocalModel, Modality, ModelInput, Response

Kind = Literal["auto", "image_text_to_text", "causal_lm"]
DType = Literal["auto", "bfloat16", "float16", "float32"]
Device = Literal["auto", "cpu", "cuda"]

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5")


class MissingDependencyError(AuditError, ImportError):
    """An optional dependency (torch / transformers) is not installed."""


def import_torch_transformers() -> tuple[Any, Any]:
    """Import torch and transformers, or raise a clear 'install medvlm-audit[hf]' error."""
    try:
        import torch
        import transformers
    except ImportError as e:
        raise MissingDependencyError(
            f"the Hugging Face backend needs torch and transformers ({e}): install medvlm-audit[hf]"
        ) from e
    return torch, transformers


#: the torchvision release built for each torch release (CPU wheels: https://download.pytorch.org/whl/cpu)
TORCHVISION_FOR_TORCH = {"2.9": "0.24", "2.10": "0.25", "2.11": "0.26", "2.12": "0.27", "2.13": "0.28", "2.14": "0.29"}


def load_processor(transformers: Any, path: Path, torch: Any, **kw: Any) -> Any:
    """``AutoProcessor`` from a local folder; a processor that needs torchvision (Qwen2-VL-style: its video
    processor) fails with one line naming the torchvision build that matches the installed torch, not a raw
    ImportError. LLaVA- and Idefics-style processors load without it (transformers falls back to PIL)."""
    try:
        return transformers.AutoProcessor.from_pretrained(str(path), **kw)
    except (ImportError, AttributeError) as e:
        if "torchvision" not in str(e).lower() and "VIDEO_PROCESSOR" not in str(e):
            raise
        version = str(getattr(torch, "__version__", "?"))
        base = ".".join(version.split("+")[0].split(".")[:2])
        tv = TORCHVISION_FOR_TORCH.get(base)
        pin = f"torchvision=={tv}.*" if tv else "the torchvision release built for your torch"
        cpu = " --index-url https://download.pytorch.org/whl/cpu" if "+cpu" in version else ""
        raise MissingDependencyError(
            f"{path}: this model's processor needs torchvision (Qwen2-VL-style processors load a video processor "
            f"that requires it), which is not installed or does not match torch {version}: "
            f"pip install '{pin}'{cpu} (PyPI's default torchvision wheels are CUDA builds and fail to import "
            "beside a CPU torch)") from None


def resolve_device(device: str, torch: Any) -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'cpu'."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ConfigError(f"device {device!r} is not one of 'auto', 'cpu', 'cuda'")
    return device


def resolve_dtype(dtype: str, device: str, torch: Any) -> Any:
    """'auto' -> bfloat16 on a GPU that supports it (else float16), float32 on CPU."""
    table = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if dtype == "auto":
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if dtype not in table:
        raise ConfigError(f"dtype {dtype!r} is not one of 'auto', 'bfloat16', 'float16', 'float32'")
    return table[dtype]


def token_text(tokenizer: Any, token_id: int) -> str:
    """Decoded text of one token, keeping a word-initial space: '▁Yes'/'ĠYes' -> ' Yes', 'yes' -> 'yes'."""
    text = tokenizer.decode([int(token_id)], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    raw = tokenizer.convert_ids_to_tokens(int(token_id))
    if isinstance(raw, str) and raw[:1] in ("▁", "Ġ") and not text.startswith(" "):
        text = " " + text
    return text


def to_pil(pixels: np.ndarray) -> Any:
    """uint8 HxW (grayscale) or HxWx3/4 array -> RGB PIL image."""
    from PIL import Image

    arr = np.asarray(pixels)
    if arr.dtype != np.uint8:
        raise ValueError(f"image pixels must be uint8, got {arr.dtype}")
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim == 2:
        return Image.fromarray(arr, mode="L").convert("RGB")
    if arr.ndim == 3 and arr.shape[2] in (3, 4):
        return Image.fromarray(arr).convert("RGB")
    raise ValueError(f"image pixels must be HxW or HxWx3, got shape {arr.shape}")


def fingerprint(path: Path, config_json: str, weight_files: Sequence[Path], extra: str = "") -> str:
    """sha256 of the config, each weight file's name/size/mtime and ``extra`` (the chat template in use)."""
    h = hashlib.sha256()
    h.update(config_json.encode())
    for f in sorted(weight_files):
        st = f.stat()
        h.update(f"{f.relative_to(path)}|{st.st_size}|{st.st_mtime_ns}".encode())
    h.update(extra.encode())
    return h.hexdigest()[:16]


def sampling_seed(decoding: Decoding, sample_index: int) -> int:
    """Deterministic per-input seed from the decoding seed (0 if unset) and the sample index."""
    base = 0 if decoding.seed is None else int(decoding.seed)
    digest = hashlib.sha256(f"{base}:{sample_index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


class HFModel(LocalModel):
    """A local transformers model behind the Model interface (greedy or sampled, batched, first-token top-k).

    ``kind`` 'auto' picks an image-text-to-text model when the config has a ``vision_config`` and a causal
    LM otherwise (always a causal LM for ``gguf_file``). ``chat_template`` (a Jinja string) overrides the
    model's; without either, construction fails. ``model_id``/``revision`` replace the path-derived model name
    and the config+weights fingerprint in :meth:`identity` (use them for packaged weights). ``latency_s`` is the batch's wall time divided by its size.
    """

    def __init__(
        self,
        path: str | Path | None,
        name: str | None = None,
        *,
        kind: Kind = "auto",
        gguf_file: str | None = None,
        dtype: DType = "auto",
        device: Device | str = "auto",
        batch_size: int = 8,
        chat_template: str | None = None,
        revision: str | None = None,
        model_id: str | None = None,
        model_class: str | None = None,
        trust_remote_code: bool = False,
    ) -> None:
        if path is None or not Path(path).exists():
            raise ConfigError(f"HF model path {path!s} does not exist (models load from a local folder only)")
        self.path = Path(path)
        if not self.path.is_dir():
            raise ConfigError(f"HF model path {self.path} is not a folder")
        if gguf_file is not None and not (self.path / gguf_file).is_file():
            raise ConfigError(f"GGUF file {self.path / gguf_file} does not exist")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        torch, transformers = import_torch_transformers()
        self._torch = torch
        self.name = name or self.path.name
        self.gguf_file = gguf_file
        self.revision = revision
        self.model_id = model_id
        self.batch_size = batch_size
        self.max_concurrency = 1
        self.device = resolve_device(str(device), torch)
        self.torch_dtype = resolve_dtype(dtype, self.device, torch)
        self.dtype_name = str(self.torch_dtype).removeprefix("torch.")
        common: dict[str, Any] = {"local_files_only": True, "trust_remote_code": trust_remote_code}
        if gguf_file is not None:
            common["gguf_file"] = gguf_file

        if kind == "auto":  # a GGUF file holds a language model (and parsing its config is slow)
            config = None if gguf_file else transformers.AutoConfig.from_pretrained(str(self.path), **common)
            kind = "causal_lm" if getattr(config, "vision_config", None) is None else "image_text_to_text"
        if kind not in ("image_text_to_text", "causal_lm"):
            raise ConfigError(f"kind {kind!r} is not one of 'auto', 'image_text_to_text', 'causal_lm'")
        self.kind = kind

        if kind == "image_text_to_text":
            self.processor = load_processor(transformers, self.path, torch, **common)
            self.tokenizer = self.processor.tokenizer
            template_owner = self.processor
        else:
            self.processor = None
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(self.path), **common)
            template_owner = self.tokenizer
        self.chat_template = chat_template
        model_template = getattr(template_owner, "chat_template", None)
        if chat_template is None and not model_template:
            raise ConfigError(
                f"{self.path}: the model has no chat template and none was configured; "
                "pass chat_template='<jinja template>' (see medvlm_audit.models.gemma for a plain-text one)"
            )
        self._template_text = chat_template or (
            model_template if isinstance(model_template, str) else json.dumps(model_template, sort_keys=True)
        )
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

        if model_class is not None:
            cls = getattr(transformers, model_class)
        elif kind == "image_text_to_text":
            cls = transformers.AutoModelForImageTextToText
        else:
            cls = transformers.AutoModelForCausalLM
        self.model = (
            cls.from_pretrained(str(self.path), dtype=self.torch_dtype, **common).to(self.device).eval()
        )
        self.config = self.model.config
        has_vision = getattr(self.config, "vision_config", None) is not None or hasattr(
            self.model, "vision_tower"
        )
        self.modality: Modality = "multimodal" if has_vision else "text_only"
        self._accepts_logits_to_keep = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        gen = getattr(self.model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None) if gen is not None else None
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids: list[int] = [
            int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None
        ]
        self._bos_id = getattr(gen, "bos_token_id", None) if gen is not None else None
        # the decoding comes from the Decoding alone: the folder's generation_config.json (e.g. Qwen's top_k 1,
        # repetition_penalty 1.05) is kept for the record but never merged into generate (transformers fills
        # every field left None from model.generation_config); only the special token ids are taken from it
        self.folder_generation_config = gen.to_diff_dict() if gen is not None else {}
        neutral = {"do_sample": False, "top_k": 50, "top_p": 1.0, "temperature": 1.0, "min_p": None,
                   "repetition_penalty": 1.0, "typical_p": 1.0, "num_beams": 1, "no_repeat_ngram_size": 0}
        self._folder_sampling = {k: v for k, v in self.folder_generation_config.items()
                                 if k in neutral and v is not None and v != neutral[k]}
        if gen is not None:
            from transformers import GenerationConfig

            self.model.generation_config = GenerationConfig(
                eos_token_id=self.eos_ids or None, bos_token_id=self._bos_id,
                pad_token_id=self.tokenizer.pad_token_id)

        weights = (
            [self.path / gguf_file]
            if gguf_file
            else [f for f in self.path.rglob("*") if f.is_file() and f.suffix in WEIGHT_SUFFIXES]
        )
        config_json = self.config.to_json_string(use_diff=False)
        self._fingerprint = revision or fingerprint(self.path, config_json, weights, self._template_text)

    # -- identity --------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """Backend, model name_or_path, config+weights fingerprint (or revision) and dtype; not the device."""
        ident: dict[str, Any] = {
            "backend": "hf",
            "model": self.model_id or str(getattr(self.config, "_name_or_path", "") or self.path),
            "fingerprint": self._fingerprint,
            "chat_template": hashlib.sha256(self._template_text.encode()).hexdigest()[:16],
            "dtype": self.dtype_name,
        }
        if self._folder_sampling:  # earlier versions merged these folder defaults into generate: not the same answers
            ident["generation"] = "decoding-only"
        if self.gguf_file and self.revision is None:  # a revision already pins the weights
            ident["gguf_file"] = self.gguf_file
        return ident

    # -- prompt building ---------------------------------------------------------------------------
    def _conversation(self, inp: ModelInput) -> list[dict[str, Any]]:
        n_images = len(inp.images) if self.modality == "multimodal" else 0
        conv: list[dict[str, Any]] = []
        placed = False
        for m in inp.messages:
            if self.kind == "image_text_to_text":
                content: Any = [{"type": "text", "text": m.content}]
                if m.role == "user" and not placed:
                    content = [{"type": "image"} for _ in range(n_images)] + content
                    placed = True
            else:
                content = m.content
            conv.append({"role": m.role, "content": content})
        if n_images and not placed:
            raise ValueError("an input with images needs a user message to carry them")
        return conv

    def render(self, inp: ModelInput) -> str:
        """The exact prompt text (chat template applied, generation prompt added)."""
        owner = self.processor if self.processor is not None else self.tokenizer
        kw: dict[str, Any] = {"add_generation_prompt": True, "tokenize": False}
        if self.chat_template is not None:
            kw["chat_template"] = self.chat_template
        return owner.apply_chat_template(self._conversation(inp), **kw)

    def encode(self, inputs: Sequence[ModelInput]) -> Any:
        """Tokenise a batch (left padding) with its images, on the model's device."""
        texts = [self.render(i) for i in inputs]
        if self.processor is not None:
            images = [to_pil(im.pixels) for i in inputs for im in i.images]
            enc = self.processor(text=texts, images=images or None, padding=True, return_tensors="pt")
        else:
            # the template already carries any BOS it wants
            enc = self.tokenizer(texts, padding=True, return_tensors="pt", add_special_tokens=False)
        enc = enc.to(self.device)
        if "pixel_values" in enc:
            enc["pixel_values"] = enc["pixel_values"].to(self.torch_dtype)
        return enc

    # -- inference ---------------------------------------------------------------------------------
    def predict(self, inputs: Sequence[ModelInput]) -> list[Response]:
        """Answer a batch: greedy/beam inputs batched together, sampled inputs one by one with their own seed."""
        out: list[Response | None] = [None] * len(inputs)
        groups: dict[tuple[Any, ...], list[int]] = {}
        for idx, inp in enumerate(inputs):
            d = inp.decoding
            if d.temperature > 0:
                groups[("sample", idx)] = [idx]
            else:
                groups.setdefault(("greedy", d.max_new_tokens, d.num_beams, d.top_logprobs, d.repetition_penalty),
                                  []).append(idx)
        for idxs in groups.values():
            for start in range(0, len(idxs), self.batch_size):
                chunk = idxs[start : start + self.batch_size]
                try:
                    res = self._run([inputs[i] for i in chunk])
                except Exception as e:  # noqa: BLE001 - one failing batch must not kill the run: record it per input
                    err = ErrorInfo(kind="model", message=f"{type(e).__name__}: {e}")
                    res = [Response(text=None, error=err) for _ in chunk]
                for i, r in zip(chunk, res):
                    out[i] = r
        return [r for r in out if r is not None]

    def check_decoding(self, d: Decoding) -> None:
        """Raise ConfigError before a run for a decoding ``generate`` cannot do. Every field of the contract maps
        to it (num_beams, do_sample = temperature > 0, temperature, top_p, top_k, min_p, repetition_penalty;
        the seed and sample index seed the RNG of each sampled input) except the OpenAI-style presence and
        frequency penalties and stop strings, which transformers has no field for."""
        if d.num_beams < 1 or d.temperature < 0 or not 0 < d.top_p <= 1 or (d.top_k is not None and d.top_k < 0):
            raise ConfigError(f"model {self.name!r}: invalid decoding {d.as_dict()}")
        if d.temperature > 0 and d.num_beams > 1:
            raise ConfigError(f"model {self.name!r}: beam sampling (num_beams > 1 with temperature > 0) is not a "
                              "decoding the audit defines")
        if d.presence_penalty or d.frequency_penalty or d.stop:
            raise ConfigError(f"model {self.name!r}: presence/frequency penalties and stop strings are not "
                              "transformers generate fields (backend hf); use repetition_penalty")

    def _generation_config(self, d: Decoding) -> Any:
        """The GenerationConfig of one decoding, built from the Decoding alone (every sampling field set, none left
        to the model folder's generation_config.json; see :func:`medvlm_audit.models.flavours.generation_config_fields`)."""
        from transformers import GenerationConfig

        from medvlm_audit.models.flavours import generation_config_fields

        kw = generation_config_fields(d)
        kw.update(eos_token_id=self.eos_ids, pad_token_id=self.tokenizer.pad_token_id, bos_token_id=self._bos_id,
                  return_dict_in_generate=True, output_logits=True)
        return GenerationConfig(**kw)

    def effective(self, d: Decoding) -> dict[str, Any]:
        """What ``generate`` runs for ``d``, in the contract's names (read off the GenerationConfig built for it)."""
        from medvlm_audit.models.flavours import CONTRACT_FIELDS

        if d.max_new_tokens == 1 and d.temperature == 0 and d.num_beams == 1 and d.repetition_penalty == 1.0:
            g: dict[str, Any] = {"do_sample": False, "num_beams": 1, "repetition_penalty": 1.0, "max_new_tokens": 1}
        else:
            g = self._generation_config(d).to_dict()
        sample = bool(g.get("do_sample"))
        out: dict[str, Any] = dict.fromkeys(CONTRACT_FIELDS)
        out.update(max_new_tokens=g.get("max_new_tokens"), temperature=float(g["temperature"]) if sample else 0.0,
                   top_p=g.get("top_p") if sample else 1.0, top_k=g.get("top_k") if sample else 0,
                   min_p=(g.get("min_p") or 0.0) if sample else 0.0, repetition_penalty=g.get("repetition_penalty"),
                   presence_penalty=0.0, frequency_penalty=0.0, num_beams=g.get("num_beams"), seed=d.seed, stop=[],
                   server="transformers (in process)")
        return out

    def _run(self, batch: Sequence[ModelInput]) -> list[Response]:
        torch = self._torch
        d = batch[0].decoding
        t0 = time.perf_counter()
        enc = self.encode(batch)
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        with torch.inference_mode():
            if d.max_new_tokens == 1 and d.temperature == 0 and d.num_beams == 1 and d.repetition_penalty == 1.0:
                # one token, greedy: a single forward pass, keeping only the last position's logits
                kw = {"logits_to_keep": 1} if self._accepts_logits_to_keep else {}
                first = self.model(**enc, **kw).logits[:, -1, :].float()
                new = first.argmax(dim=-1, keepdim=True)
            else:
                rng = self._seeded(batch) if d.temperature > 0 else nullcontext()
                with rng:
                    gen = self.model.generate(**enc, generation_config=self._generation_config(d))
                new = gen.sequences[:, enc["input_ids"].shape[1] :]
                first = gen.logits[0].float()
                if d.num_beams > 1:
                    first = first.view(len(batch), d.num_beams, -1)[:, 0, :]
        logprobs = torch.log_softmax(first, dim=-1)
        latency = (time.perf_counter() - t0) / len(batch)
        responses = []
        for row, inp in enumerate(batch):
            ids = new[row].tolist()
            stop = next((k for k, t in enumerate(ids) if t in self.eos_ids), None)
            n_tokens = len(ids) if stop is None else stop + 1
            text_ids = ids if stop is None else ids[:stop]
            text = self.tokenizer.decode(text_ids, skip_special_tokens=True)
            top = None
            if inp.decoding.logprobs and inp.decoding.top_logprobs > 0:
                k = min(inp.decoding.top_logprobs, logprobs.shape[-1])
                vals, tids = torch.topk(logprobs[row], k)
                top = tuple(
                    (token_text(self.tokenizer, t), float(v)) for t, v in zip(tids.tolist(), vals.tolist())
                )
            responses.append(
                Response(
                    effective=self.effective(inp.decoding),
                    text=text,
                    top_logprobs=top,
                    finish_reason="stop" if stop is not None else "length",
                    prompt_tokens=int(prompt_lens[row]),
                    completion_tokens=n_tokens,
                    latency_s=latency,
                )
            )
        return responses

    @contextmanager
    def _seeded(self, batch: Sequence[ModelInput]) -> Iterator[None]:
        """Fork the RNG and seed it from the (single) input's decoding seed and sample index."""
        torch = self._torch
        assert len(batch) == 1, "sampled inputs run one at a time so their results do not depend on the batch"
        devices = [torch.device(self.device)] if self.device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(sampling_seed(batch[0].decoding, batch[0].sample_index))
            yield

    def first_token_logits(self, inputs: Sequence[ModelInput]) -> Any:
        """Full-vocabulary next-token logits for a batch (float32, on CPU): for checks and scoring."""
        with self._torch.inference_mode():
            enc = self.encode(inputs)
            return self.model(**enc).logits[:, -1, :].float().cpu()
