"""RaTEScore (Zhao et al., EMNLP 2024), the clinical metric paper 002 reports per decoding strategy, from LOCAL
model folders.

Method (the paper and the released ``RaTEScore`` 0.6.0 package, re-implemented here):

1. each report is split into sentences; a medical NER model (token classification, BIO labels over the types
   ABNORMALITY, NON-ABNORMALITY, DISEASE, NON-DISEASE, ANATOMY) tags each sentence; an entity is a B- token
   and the I- tokens after it (its type is the B- token's; an I- with no open entity is dropped, as released);
2. every entity's text is embedded by a synonym-aware encoder (the [CLS] hidden state, as released;
   ``pooling="mean"`` for an encoder trained with mean pooling); entity texts are cut at 30 tokens;
3. per pair, :func:`medvlm_audit.suites.reports.clinical.formulas.ratescore`: each entity is matched to its most similar entity on the
   other side, similarities weighted by a type-pair affinity matrix, a negated-against-positive finding match
   penalised, both directions combined by their harmonic mean; a report with no entity gives 0.5.

Folders: ``path`` holds ``ner/`` (e.g. a local copy of Angelakeke/RaTE-NER-Deberta) and ``embedding/`` (e.g.
FremyCompany/BioLORD-2023-C); ``ner=`` / ``embedding=`` name other folders (relative to ``path`` or absolute).
The affinity matrix: ``affinity="long"`` (the released default) or ``"short"`` read at run time from the
installed ``RaTEScore`` package's source (it is not imported: its import needs medspacy), or a JSON file in the
released format ``{"abnormality_anatomy": w, ..., "neg_weight": x}``.

Differences from the released code, all deliberate: sentences are split by a regular expression (end mark +
space, or a blank line) instead of medspacy's PyRuSH; entity text is the source span (fast tokenizers) rather
than the detokenised word pieces; a report without sentences scores 0.5 under the empty rule (the released
code then misaligns the pairs); ties in similarity take the first entity.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from medvlm_audit import stats
from medvlm_audit.errors import ConfigError
from medvlm_audit.suites.reports.clinical import ClinicalScore, check_pairs
from medvlm_audit.suites.reports.clinical.folders import model_folder, torch_device, transformers_modules
from medvlm_audit.suites.reports.clinical.formulas import RATESCORE_TYPES, ratescore, ratescore_penalty

METRIC = "RaTEScore"
RELEASED_MATRICES = {"long": "DEFAULT_MATRIX_LONG", "short": "DEFAULT_MATRIX_SHORT"}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


# ------------------------------------------------------------------------------------------ affinity matrix


def released_affinity(which: str, source: Path | None = None) -> dict[str, float]:
    """The released affinity matrix ``which`` ("long" or "short") read from ``RaTEScore/scorer.py`` of the
    installed package (or the file ``source``), by parsing the source, never importing it."""
    name = RELEASED_MATRICES.get(which.lower())
    if name is None:
        raise ConfigError(f"{METRIC}: affinity must be 'long', 'short' or a JSON file, got {which!r}")
    if source is None:
        spec = importlib.util.find_spec("RaTEScore")
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"{METRIC}: the {which!r} affinity matrix ships in the RaTEScore package, which is "
                              f"not installed (pip install 'RaTEScore==0.6.0'; it is read, never imported), or "
                              f"give affinity=<JSON file>")
        source = Path(next(iter(spec.submodule_search_locations))) / "scorer.py"
    try:
        tree = ast.parse(Path(source).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError) as e:
        raise ConfigError(f"{METRIC}: cannot read the affinity matrices from {source}: {e}") from e
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError as e:
                raise ConfigError(f"{METRIC}: {name} in {source} is not a literal mapping") from e
            if isinstance(value, dict):
                return {str(k): float(v) for k, v in value.items()}
    raise ConfigError(f"{METRIC}: {source} has no {name} (is it RaTEScore 0.6.0?)")


def affinity_matrices(mapping: Mapping[str, float], where: str) -> tuple[tuple[str, ...], np.ndarray, float]:
    """(types, W, neg_weight) from the released format: keys ``"<type>_<type>"`` (lower case) and
    ``"neg_weight"``; every ordered pair of the types named must be present."""
    weights: dict[tuple[str, str], float] = {}
    neg = None
    for k, v in mapping.items():
        key = str(k).strip().lower()
        try:
            val = float(v)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{METRIC}: affinity {where}: {k!r} = {v!r} is not a number") from e
        if not math.isfinite(val) or val < 0:
            raise ConfigError(f"{METRIC}: affinity {where}: {k!r} = {v!r} must be a finite weight >= 0")
        if key == "neg_weight":
            neg = val
            continue
        parts = key.split("_")
        if len(parts) != 2 or not all(parts):
            raise ConfigError(f"{METRIC}: affinity {where}: key {k!r} is not '<type>_<type>' or 'neg_weight'")
        weights[(parts[0].upper(), parts[1].upper())] = val
    if neg is None:
        raise ConfigError(f"{METRIC}: affinity {where} has no 'neg_weight'")
    named = {t for pair in weights for t in pair}
    types = tuple(t for t in RATESCORE_TYPES if t in named) + tuple(sorted(named - set(RATESCORE_TYPES)))
    W = np.zeros((len(types), len(types)))
    for i, a in enumerate(types):
        for j, b in enumerate(types):
            if (a, b) not in weights:
                raise ConfigError(f"{METRIC}: affinity {where} lacks {a.lower()}_{b.lower()}")
            W[i, j] = weights[(a, b)]
    return types, W, neg


def load_affinity(affinity: str | Path, base: Path) -> tuple[str, Mapping[str, float]]:
    """(label for the method text, mapping) of ``affinity``: "long" / "short" or a JSON file (relative to
    ``base`` or absolute)."""
    if isinstance(affinity, str) and affinity.lower() in RELEASED_MATRICES:
        return f"released '{affinity.lower()}'", released_affinity(affinity)
    p = Path(affinity).expanduser()
    if not p.is_absolute():
        p = base / p
    if not p.is_file():
        raise ConfigError(f"{METRIC}: affinity file {p} does not exist (or use 'long' / 'short')")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{METRIC}: affinity file {p} is not readable JSON: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{METRIC}: affinity file {p} must hold one JSON object")
    return p.name, data


# ------------------------------------------------------------------------------------------ entities


def split_sentences(text: str) -> list[str]:
    """Sentences of a report: split after . ! ? followed by white space, or at a blank line; pieces shorter than
    3 characters or without a word are dropped (as released)."""
    out = []
    for s in _SENTENCE_END.split(text or ""):
        s = s.strip()
        if len(s) >= 3 and re.search(r"\w", s):
            out.append(s)
    return out


def bio_spans(labels: Sequence[str]) -> list[tuple[int, int, str]]:
    """(first, last, type) of the entities in one sentence's token labels: B-X opens an entity of type X
    (closing any open one), I-* extends the open entity, anything else closes it; an I- with no open entity is
    dropped.

    >>> bio_spans(["O", "B-ANATOMY", "I-ANATOMY", "B-ABNORMALITY", "O", "I-DISEASE", "B-DISEASE"])
    [(1, 2, 'ANATOMY'), (3, 3, 'ABNORMALITY'), (6, 6, 'DISEASE')]
    """
    spans: list[tuple[int, int, str]] = []
    start, kind = -1, ""
    for i, lab in enumerate(labels):
        if lab.startswith("B-"):
            if start >= 0:
                spans.append((start, i - 1, kind))
            start, kind = i, lab[2:]
        elif lab.startswith("I-") and start >= 0:
            continue
        else:
            if start >= 0:
                spans.append((start, i - 1, kind))
            start = -1
    if start >= 0:
        spans.append((start, len(labels) - 1, kind))
    return spans


class RaTEScoreMetric:
    """RaTEScore from a loaded NER model, entity encoder and affinity matrix (see the module docstring)."""

    name = "ratescore"

    def __init__(self, ner_dir: Path, embedding_dir: Path, types: tuple[str, ...], weights: np.ndarray,
                 neg_weight: float, *, affinity_label: str, device: str, batch_size: int = 32,
                 pooling: str = "cls", empty: float = 0.5) -> None:
        torch, tf = transformers_modules(METRIC)
        self._torch = torch
        self.ner_dir, self.embedding_dir = ner_dir, embedding_dir
        self.types, self.weights, self.neg_weight = types, weights, float(neg_weight)
        self.penalty = ratescore_penalty(types, neg_weight)
        self.affinity_label = affinity_label
        self.device, self.batch_size, self.pooling, self.empty = device, int(batch_size), pooling, float(empty)
        try:
            self.ner_tokenizer = tf.AutoTokenizer.from_pretrained(str(ner_dir), local_files_only=True)
            self.ner_model = tf.AutoModelForTokenClassification.from_pretrained(
                str(ner_dir), local_files_only=True).eval().to(device)
            self.emb_tokenizer = tf.AutoTokenizer.from_pretrained(str(embedding_dir), local_files_only=True)
            self.emb_model = tf.AutoModel.from_pretrained(str(embedding_dir), local_files_only=True).eval().to(device)
        except (OSError, ValueError) as e:
            raise ConfigError(f"{METRIC}: cannot load the models from {ner_dir} / {embedding_dir}: {e}") from e
        id2label = {int(k): str(v) for k, v in (self.ner_model.config.id2label or {}).items()}
        self.id2label = id2label
        unknown = sorted({lab[2:] for lab in id2label.values() if lab[:2] in ("B-", "I-")} - set(types))
        if unknown:
            raise ConfigError(f"{METRIC}: the NER model {ner_dir} tags {', '.join(unknown)}, which the affinity "
                              f"matrix ({affinity_label}) does not weigh (its types: {', '.join(types)})")
        if not any(lab.startswith("B-") for lab in id2label.values()):
            raise ConfigError(f"{METRIC}: the NER model {ner_dir} has no B-<TYPE> label in config.id2label "
                              f"({sorted(id2label.values())[:6]}...): not a BIO entity tagger")
        self._type_index = {t: i for i, t in enumerate(types)}

    # -- models --------------------------------------------------------------------------------------
    def entities(self, texts: Sequence[str]) -> list[list[tuple[str, str]]]:
        """(entity text, type) per report, in reading order."""
        torch, tok = self._torch, self.ner_tokenizer
        sents: list[tuple[int, str]] = [(r, s) for r, t in enumerate(texts) for s in split_sentences(t)]
        out: list[list[tuple[str, str]]] = [[] for _ in texts]
        for lo in range(0, len(sents), self.batch_size):
            chunk = sents[lo:lo + self.batch_size]
            enc = tok([s for _, s in chunk], max_length=512, truncation=True, padding=True, return_tensors="pt",
                      return_special_tokens_mask=True, return_offsets_mapping=bool(tok.is_fast))
            offsets = enc.pop("offset_mapping", None)
            special = enc.pop("special_tokens_mask")
            with torch.inference_mode():
                logits = self.ner_model(**{k: v.to(self.device) for k, v in enc.items()}).logits
            pred = logits.argmax(-1).cpu().numpy()
            for b, (r, sent) in enumerate(chunk):
                keep = np.flatnonzero((enc["attention_mask"][b].numpy() == 1) & (special[b].numpy() == 0))
                labels = [self.id2label.get(int(pred[b, k]), "O") for k in keep]
                for first, last, kind in bio_spans(labels):
                    if offsets is not None:
                        text = sent[int(offsets[b, keep[first], 0]):int(offsets[b, keep[last], 1])]
                    else:
                        ids = enc["input_ids"][b, keep[first]:keep[last] + 1].tolist()
                        text = tok.convert_tokens_to_string(tok.convert_ids_to_tokens(ids))
                    if text.strip():
                        out[r].append((text.strip(), kind))
        return out

    def embed(self, strings: Sequence[str]) -> np.ndarray:
        """Entity embeddings (n, d): the encoder's [CLS] state (or the masked mean), texts cut at 30 tokens."""
        torch = self._torch
        rows = []
        for lo in range(0, len(strings), self.batch_size):
            enc = self.emb_tokenizer(list(strings[lo:lo + self.batch_size]), truncation=True, padding=True,
                                     max_length=30, return_tensors="pt")
            enc = {k: v.to(self.device) for k, v in enc.items()}
            with torch.inference_mode():
                h = self.emb_model(**enc).last_hidden_state
            if self.pooling == "mean":
                m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
                v = (h * m).sum(1) / m.sum(1).clamp(min=1)
            else:
                v = h[:, 0, :]
            rows.append(v.float().cpu().numpy().astype(np.float64))
        if not rows:
            return np.zeros((0, 0))
        return np.concatenate(rows, axis=0)

    # -- scoring -------------------------------------------------------------------------------------
    def pair_scores(self, hypotheses: Sequence[str], references: Sequence[str]) -> tuple[np.ndarray, int]:
        """RaTEScore per pair and how many pairs fell under the empty rule (a report without an entity)."""
        ents_h, ents_r = self.entities(hypotheses), self.entities(references)
        uniq = sorted({s for ents in (*ents_h, *ents_r) for s, _ in ents})
        E = self.embed(uniq)
        row = {s: i for i, s in enumerate(uniq)}
        d = E.shape[1] if E.ndim == 2 else 0

        def side(ents: list[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray]:
            if not ents:
                return np.zeros((0, d)), np.zeros(0, dtype=np.int64)
            return E[[row[s] for s, _ in ents]], np.array([self._type_index[t] for _, t in ents])

        scores = np.empty(len(hypotheses))
        empty = 0
        for i, (eh, er) in enumerate(zip(ents_h, ents_r)):
            if not eh or not er:
                empty += 1
            scores[i] = ratescore(*side(eh), *side(er), self.weights, self.penalty, empty=self.empty)
        return scores, empty

    def score(self, hypotheses: Sequence[str], references: Sequence[str], *, B: int = 1000,
              seed: int = 0) -> list[ClinicalScore]:
        hyps, refs = check_pairs(METRIC, hypotheses, references)
        values, empty = self.pair_scores(hyps, refs)
        est = stats.bootstrap_mean(values, B=B, seed=seed)
        how = (f"RaTEScore (Zhao et al. 2024): NER {self.ner_dir.name}, entity encoder {self.embedding_dir.name} "
               f"({self.pooling} pooling), affinity {self.affinity_label}; per pair the harmonic mean of the two "
               f"weighted entity-matching directions, mean over pairs; {est.method}")
        note = ""
        if empty:
            note = f"{empty} of {len(hyps)} pairs had a report without an entity and score {self.empty:g} (released rule)"
        if not hyps:
            note = "no pairs to score"
        return [ClinicalScore("ratescore", est.point, est.n, how, est.ci_low, est.ci_high, "fraction", note)]


def load(path: Path, *, ner: str | Path = "ner", embedding: str | Path = "embedding",
         affinity: str | Path = "long", device: str | None = None, batch_size: int = 32, pooling: str = "cls",
         empty: float = 0.5) -> RaTEScoreMetric:
    """RaTEScore from the local folder ``path`` (see the module docstring for the layout and parameters)."""
    base = Path(path).expanduser()
    if not base.is_dir():
        raise ConfigError(f"{METRIC}: {base} is not a folder (it should hold the NER and embedding model folders)")
    if pooling not in ("cls", "mean"):
        raise ConfigError(f"{METRIC}: pooling must be 'cls' (released) or 'mean', got {pooling!r}")
    if int(batch_size) < 1:
        raise ConfigError(f"{METRIC}: batch_size must be >= 1, got {batch_size}")
    ner_dir = model_folder(_under(base, ner), "NER model", METRIC)
    emb_dir = model_folder(_under(base, embedding), "entity embedding model", METRIC)
    label, mapping = load_affinity(affinity, base)
    types, W, neg = affinity_matrices(mapping, label)
    return RaTEScoreMetric(ner_dir, emb_dir, types, W, neg, affinity_label=label, device=torch_device(device),
                           batch_size=batch_size, pooling=pooling, empty=empty)


def _under(base: Path, p: str | Path) -> Path:
    q = Path(p).expanduser()
    return q if q.is_absolute() else base / q
