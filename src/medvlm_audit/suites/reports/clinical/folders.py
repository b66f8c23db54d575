"""Local model folders for the clinical-metric adapters: what a transformers folder must hold, checked before
anything loads, so a missing file is one error naming the folder and the file instead of a hub lookup or a
traceback. Nothing here reaches a model hub: every load passes ``local_files_only=True``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medvlm_audit.errors import ConfigError

#: any one of these holds the weights of a transformers model folder
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
#: any one of these holds a tokenizer's vocabulary
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "spm.model", "tokenizer.model", "sentencepiece.bpe.model",
                   "vocab.json")


def model_folder(path: Path, role: str, metric: str) -> Path:
    """``path`` as a checked local transformers folder (config, weights, tokenizer), else a ConfigError saying
    which of them is missing for ``role`` (e.g. "NER model") of ``metric``."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ConfigError(f"{metric}: the {role} folder {p} does not exist (give a local folder saved with "
                          f"save_pretrained; models are never downloaded)")
    if not p.is_dir():
        raise ConfigError(f"{metric}: the {role} path {p} is not a folder")
    missing = []
    if not (p / "config.json").is_file():
        missing.append("config.json")
    if not any((p / f).is_file() for f in WEIGHT_FILES):
        missing.append("the weights (" + " or ".join(WEIGHT_FILES[::2]) + ")")
    if not any((p / f).is_file() for f in TOKENIZER_FILES):
        missing.append("a tokenizer (" + ", ".join(TOKENIZER_FILES[:3]) + " ...)")
    if missing:
        raise ConfigError(f"{metric}: the {role} folder {p} lacks {'; '.join(missing)}")
    return p


def transformers_modules(metric: str) -> tuple[Any, Any]:
    """(torch, transformers), or a ConfigError naming the extra that provides them."""
    try:
        import torch
        import transformers
    except ImportError as e:  # pragma: no cover - the test environment has them
        raise ConfigError(f"{metric} needs torch and transformers (pip install medvlm-audit[hf]): {e}") from e
    return torch, transformers


def torch_device(device: str | None) -> str:
    """``device`` as given, or "cuda" when a GPU is visible, else "cpu"."""
    if device:
        return str(device)
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
