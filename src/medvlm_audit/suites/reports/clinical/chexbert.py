"""CheXbert F1 (Smit et al. 2020 labeler; the F1 used by report-generation papers, e.g. Delbrouck et al. 2022):
label the hypothesis and the reference report with CheXbert, then F1 of the hypothesis labels against the
reference labels over the 14 CheXpert observations and over the 5 common ones.

The model is built here from its published architecture and loaded from a LOCAL copy of the released weights;
nothing is fetched from a model hub (``local_files_only=True``):

* architecture (``stanfordmlgroup/CheXbert``, ``src/models/bert_labeler.py``): a BERT encoder, dropout on the
  final hidden state of [CLS], and 14 linear heads on it: 13 with 4 classes (0 blank, 1 positive, 2 negative,
  3 uncertain) and the last, "No Finding", with 2 (0 blank, 1 positive); the predicted class is each head's
  argmax;
* input as in the ``f1chexbert`` package (0.0.2): whitespace collapsed, WordPiece tokens between [CLS] and [SEP],
  cut to 512 ids (the last one [SEP]); an empty report is [CLS] [SEP];
* binary labels as ``f1chexbert``'s ``rrg`` mode: positive (1) **and uncertain (3)** count as 1, negative (2)
  and blank (0) as 0 (``uncertain="negative"`` maps uncertain to 0 instead);
* F1 as scikit-learn's ``classification_report`` there: micro (pooled TP/FP/FN) and macro (unweighted mean of
  the per-observation F1, an observation positive in neither labelling counting 0) over the 14 observations and
  over Atelectasis, Cardiomegaly, Consolidation, Edema and Pleural Effusion; intervals are percentile bootstraps
  over report pairs (:func:`medvlm_audit.multilabel_f1_bootstrap`).

Local layout: a folder holding ``chexbert.pth`` (the released checkpoint: a dict whose ``model_state_dict`` has
keys prefixed ``module.``), the BERT ``config.json`` of bert-base-uncased and its tokenizer files
(``vocab.txt``), or the checkpoint file itself with ``config=`` and ``tokenizer=`` naming the other two (they
default to the checkpoint's folder). Needs the ``hf`` extra (torch, transformers).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from medvlm_audit.errors import ConfigError
from medvlm_audit.extras import require_extra
from medvlm_audit.suites.reports.clinical import ClinicalScore, check_pairs
from medvlm_audit.suites.reports.clinical.formulas import multilabel_f1_bootstrap

#: the 14 observations in the order of CheXbert's heads (``src/constants.py`` there)
CONDITIONS: tuple[str, ...] = (
    "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema", "Consolidation",
    "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other", "Fracture",
    "Support Devices", "No Finding")
#: the 5 common observations of report-generation papers
COMMON_5: tuple[str, ...] = ("Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Pleural Effusion")
#: class index -> meaning, heads 0-12 (head 13, "No Finding", has classes 0 blank and 1 positive only)
CLASSES: tuple[str, ...] = ("blank", "positive", "negative", "uncertain")
CHECKPOINT_NAME = "chexbert.pth"
#: BERT's longest input (the released model's); a smaller config.max_position_embeddings lowers it
MAX_IDS = 512

_IDX_5 = np.array([CONDITIONS.index(c) for c in COMMON_5])
_POSITION_BUFFERS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")


def _build_labeler(torch: Any, transformers: Any, config: Any) -> Any:
    """The CheXbert architecture (random weights) for a BERT ``config``; state-dict keys ``bert.*``,
    ``linear_heads.{0..13}.{weight,bias}`` (the released checkpoint's, without ``module.``)."""

    class CheXbertLabeler(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = transformers.BertModel(config)
            self.dropout = torch.nn.Dropout(0.1)
            hidden = config.hidden_size
            heads = [torch.nn.Linear(hidden, 4) for _ in range(13)] + [torch.nn.Linear(hidden, 2)]
            self.linear_heads = torch.nn.ModuleList(heads)

        def forward(self, input_ids: Any, attention_mask: Any) -> list[Any]:
            cls = self.bert(input_ids=input_ids, attention_mask=attention_mask)[0][:, 0, :]
            cls = self.dropout(cls)
            return [head(cls) for head in self.linear_heads]

    return CheXbertLabeler()


def build_labeler(config: Any) -> Any:
    """A randomly initialised CheXbert labeler (``torch.nn.Module``) for a ``transformers.BertConfig``: what the
    adapter loads the checkpoint into (tests save a tiny one in the released format)."""
    require_extra("hf", "the CheXbert F1 adapter")
    import torch
    import transformers

    return _build_labeler(torch, transformers, config)


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().replace("\n", " ")).strip()


class CheXbertF1:
    """CheXbert F1 from a loaded labeler (see the module docstring). Build it with :func:`load`."""

    name = "chexbert"

    def __init__(self, model: Any, tokenizer: Any, *, source: str, max_ids: int, device: str = "cpu",
                 batch_size: int = 16, uncertain: Literal["positive", "negative"] = "positive") -> None:
        if uncertain not in ("positive", "negative"):
            raise ConfigError(f"chexbert: uncertain must be 'positive' or 'negative', got {uncertain!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.source = source  # the checkpoint's file name and folder name only (never the full path)
        self.max_ids = int(max_ids)
        self.device = device
        self.batch_size = max(1, int(batch_size))
        self.uncertain = uncertain

    # ------------------------------------------------------------------ labelling
    def encode(self, text: str) -> list[int]:
        """Input ids of one report, as ``f1chexbert`` builds them."""
        tok = self.tokenizer
        tokens = tok.tokenize(_clean(text))
        if not tokens:
            return [tok.cls_token_id, tok.sep_token_id]
        ids = [tok.cls_token_id, *tok.convert_tokens_to_ids(tokens), tok.sep_token_id]
        if len(ids) > self.max_ids:
            ids = ids[: self.max_ids - 1] + [tok.sep_token_id]
        return ids

    def classes(self, texts: Sequence[str]) -> np.ndarray:
        """CheXbert's class per report and observation, shape (len(texts), 14): each head's argmax (heads 0-12:
        0 blank, 1 positive, 2 negative, 3 uncertain; head 13: 0 blank, 1 positive)."""
        import torch

        out = np.zeros((len(texts), len(CONDITIONS)), dtype=np.int64)
        if not texts:
            return out
        encoded = [self.encode(t) for t in texts]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))  # similar lengths share a batch
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        with torch.inference_mode():
            for lo in range(0, len(order), self.batch_size):
                rows = order[lo: lo + self.batch_size]
                width = max(len(encoded[i]) for i in rows)
                ids = torch.full((len(rows), width), pad, dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for r, i in enumerate(rows):
                    ids[r, : len(encoded[i])] = torch.tensor(encoded[i], dtype=torch.long)
                    mask[r, : len(encoded[i])] = 1
                logits = self.model(ids.to(self.device), mask.to(self.device))
                for j, lg in enumerate(logits):
                    out[rows, j] = lg.argmax(dim=1).cpu().numpy()
        return out

    def binary(self, classes: np.ndarray) -> np.ndarray:
        """0/1 labels from :meth:`classes`: positive = class 1, plus class 3 (uncertain) when ``uncertain`` is
        'positive' (``f1chexbert``'s ``rrg`` mode); "No Finding" = its class 1."""
        c = np.asarray(classes)
        pos = (c == 1) | ((c == 3) if self.uncertain == "positive" else False)
        return pos.astype(np.int8)

    def labels(self, texts: Sequence[str]) -> np.ndarray:
        """0/1 labels per report and observation (each distinct text is run through the model once)."""
        uniq = list(dict.fromkeys(texts))
        cls = self.classes(uniq)
        row = {t: i for i, t in enumerate(uniq)}
        return self.binary(cls[[row[t] for t in texts]]) if texts else np.zeros((0, 14), np.int8)

    # ------------------------------------------------------------------ scoring
    def score(self, hypotheses: Sequence[str], references: Sequence[str], *, B: int = 1000,
              seed: int = 0) -> list[ClinicalScore]:
        """Micro and macro CheXbert F1 over the 14 observations and the 5 common ones, with percentile bootstrap
        intervals over report pairs (``hypotheses[i]`` against ``references[i]``)."""
        hyps, refs = check_pairs("chexbert", hypotheses, references)
        both = self.labels(hyps + refs)
        y_pred, y_true = both[: len(hyps)], both[len(hyps):]
        unc = ("positive and uncertain (f1chexbert 'rrg' mode)" if self.uncertain == "positive"
               else "positive only (uncertain counted negative)")
        rows: list[ClinicalScore] = []
        for suffix, cols in (("14", slice(None)), ("5", _IDX_5)):
            est = multilabel_f1_bootstrap(y_true[:, cols], y_pred[:, cols], B=B, seed=seed)
            what = "14 CheXpert observations" if suffix == "14" else "5 observations (" + ", ".join(COMMON_5) + ")"
            for avg in ("micro", "macro"):
                e = est[avg]
                avg_text = ("micro F1 (pooled TP, FP, FN)" if avg == "micro" else
                            "macro F1 (mean of per-observation F1; one positive in neither labelling counts 0)")
                method = (f"CheXbert labels ({self.source}) of hypothesis and reference, label 1 = {unc}; "
                          f"{avg_text} over the {what}; {e.method.replace('over cases', 'over report pairs')}")
                rows.append(ClinicalScore(metric=f"chexbert_f1_{avg}_{suffix}", point=e.point, n=e.n,
                                          method=method, ci_low=e.ci_low, ci_high=e.ci_high,
                                          note="" if e.n else "no report pairs"))
        return rows


# ---------------------------------------------------------------------------------------------- loading
def _resolve(path: Path, config: str | Path | None, tokenizer: str | Path | None) -> tuple[Path, Path, Path]:
    """(checkpoint file, config.json, tokenizer folder), or a ConfigError naming the path and what is missing."""
    if path.is_dir():
        ckpt = path / CHECKPOINT_NAME
        folder = path
    elif path.is_file():
        ckpt, folder = path, path.parent
    else:
        raise ConfigError(f"chexbert: model path {path} does not exist (expected a folder holding "
                          f"{CHECKPOINT_NAME}, config.json and vocab.txt, or the checkpoint file)")
    cfg = Path(config).expanduser() if config is not None else folder / "config.json"
    if cfg.is_dir():
        cfg = cfg / "config.json"
    tok = Path(tokenizer).expanduser() if tokenizer is not None else folder
    if tok.is_file():
        tok = tok.parent
    missing = []
    if not ckpt.is_file():
        missing.append(f"the checkpoint {CHECKPOINT_NAME}")
    if not cfg.is_file():
        missing.append("the BERT config.json" + ("" if config is not None else " (or pass config=)"))
    if not tok.is_dir() or not ((tok / "vocab.txt").is_file() or (tok / "tokenizer.json").is_file()):
        missing.append("the tokenizer files vocab.txt / tokenizer.json" + ("" if tokenizer is not None
                                                                           else " (or pass tokenizer=)"))
    if missing:
        where = path if path.is_dir() else f"{path} (and its folder)"
        raise ConfigError(f"chexbert: {where} lacks " + "; ".join(missing)
                          + f" (need {CHECKPOINT_NAME}, config.json of bert-base-uncased and its vocab.txt)")
    return ckpt, cfg, tok


def _state_dict(torch: Any, ckpt: Path) -> dict[str, Any]:
    try:
        blob = torch.load(str(ckpt), map_location="cpu", weights_only=True)
    except Exception as e:  # unpickling errors differ across torch versions
        raise ConfigError(f"chexbert: cannot read the checkpoint {ckpt}: {type(e).__name__}: {e}") from e
    if isinstance(blob, dict) and "model_state_dict" in blob:
        blob = blob["model_state_dict"]
    if not isinstance(blob, dict) or not blob:
        raise ConfigError(f"chexbert: {ckpt} holds no state dict (expected a dict with 'model_state_dict')")
    return {k.removeprefix("module."): v for k, v in blob.items()}


def load(path: Path, *, config: str | Path | None = None, tokenizer: str | Path | None = None,
         device: str = "cpu", batch_size: int = 16, uncertain: Literal["positive", "negative"] = "positive",
         **params: Any) -> CheXbertF1:
    """The CheXbert F1 adapter from a LOCAL folder (``chexbert.pth``, ``config.json``, ``vocab.txt``) or
    checkpoint file (``config=`` / ``tokenizer=`` name the other files; default: the file's folder).

    ``device``: 'cpu', 'cuda', 'cuda:N' or 'auto'; ``uncertain``: how class 3 counts (see the module docstring).
    """
    if params:
        raise ConfigError(f"chexbert: unknown option(s) {sorted(params)} (known: config, tokenizer, device, "
                          "batch_size, uncertain)")
    require_extra("hf", "the CheXbert F1 adapter")
    import torch
    import transformers

    path = Path(path).expanduser()
    ckpt, cfg_path, tok_dir = _resolve(path, config, tokenizer)
    try:
        cfg = transformers.BertConfig.from_pretrained(str(cfg_path.parent), local_files_only=True)
        tok = transformers.BertTokenizer.from_pretrained(str(tok_dir), local_files_only=True)
    except (OSError, ValueError) as e:
        raise ConfigError(f"chexbert: cannot load the BERT config / tokenizer from {cfg_path.parent} / "
                          f"{tok_dir}: {e}") from e
    model = _build_labeler(torch, transformers, cfg)
    state = _state_dict(torch, ckpt)
    expected = model.state_dict()
    for k in _POSITION_BUFFERS:  # buffers older transformers saved; recomputed here
        if k in state and k not in expected:
            del state[k]
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ConfigError(f"chexbert: {ckpt.name} in {ckpt.parent.name!r} is not a CheXbert checkpoint for "
                          f"{cfg_path.name}: missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                          f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:  # shape mismatch: config.json does not describe this checkpoint
        raise ConfigError(f"chexbert: {ckpt.name} does not fit {cfg_path} (shapes differ): {e}") from e
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device != "cpu" and not device.startswith("cuda"):
        raise ConfigError(f"chexbert: device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {device!r}")
    model.eval().to(device)
    vocab_ids = getattr(cfg, "max_position_embeddings", MAX_IDS) or MAX_IDS
    source = f"{ckpt.name} in {ckpt.parent.name}" if ckpt.parent.name else ckpt.name
    return CheXbertF1(model, tok, source=source, max_ids=min(MAX_IDS, int(vocab_ids)), device=device,
                      batch_size=batch_size, uncertain=uncertain)


__all__ = ["CHECKPOINT_NAME", "CLASSES", "COMMON_5", "CONDITIONS", "CheXbertF1", "build_labeler", "load"]
