"""RadGraph F1 (Delbrouck et al. 2022, "Improving the factual correctness of radiology report generation with
semantic rewards"; the ``radgraph`` PyPI package 0.1.18, ``F1RadGraph``): the entities and relations a RadGraph
model extracts from the hypothesis and from the reference report are compared as sets, per report pair, at
three levels (:func:`medvlm_audit.suites.reports.clinical.formulas.radgraph_items`):

* ``radgraph_f1_e`` (RG_E, the package's ``simple``): entity tokens and label;
* ``radgraph_f1_er`` (RG_ER, ``partial``): entity tokens, label and whether it has a relation (the "RadGraph F1"
  most report-generation papers quote);
* ``radgraph_f1_er_complete`` (RG_ER-bar, ``complete``): each relation as (tokens, label, type, target tokens).

A pair's F1 is :func:`medvlm_audit.suites.reports.clinical.formulas.radgraph_rewards` (0 when either report is empty or has no entity,
as in the package); the corpus value is the mean over pairs with a percentile bootstrap interval over pairs.

Where the annotations come from (an :class:`Annotator`, text -> RadGraph JSON ``{"entities": {id: {"tokens",
"label", "start_ix", "end_ix", "relations": [[type, target_id], ...]}}}``):

* :class:`AnnotationFileAnnotator` (``path`` a ``.json`` / ``.jsonl`` file): RadGraph annotations computed
  elsewhere (a RadGraph server, the package run on another machine): a JSON object ``{key: {"text",
  "entities"}}`` (the package's output and the RadGraph dataset's layout), a JSON list of such records, or JSONL
  with one record per line. A report is matched to its record by its text, compared after lower-casing and
  splitting words from punctuation (the package stores the text re-tokenised, e.g. ``"effusion ."``). Needs no
  optional dependency. This is the path tested end to end here.
* :class:`RadGraphModelAnnotator` (``path`` a folder: the model archive ``radgraph.tar.gz`` or
  ``radgraph-xl.tar.gz`` extracted, i.e. ``config.json``, ``vocabulary/``, ``weights.th``): runs the ``radgraph``
  package's model offline. The package downloads only when its model folder is missing or empty, which never
  happens here (the files are checked first); but the archive's ``config.json`` names its BERT backbone by hub
  id (e.g. a SciBERT or CXR-BERT repository) and the package loads that backbone's config and tokenizer by that
  name, so a local copy of the backbone must be given with ``backbone=FOLDER`` (its ``config.json`` and
  tokenizer files; the backbone's weights come from ``weights.th``) unless the config already names a local
  folder. The config is rewritten into a temporary copy (the model folder is never written to). Honest limit:
  radgraph 0.1.18 vendors an AllenNLP that calls ``tokenizer.encode_plus``, which transformers 5 removed, so this
  annotator needs ``radgraph==0.1.18`` with ``transformers<5`` (checked, with a clear error). It was verified on
  a tiny stand-in model (transformers 4.57.1); its test skips where the package is absent or transformers is 5+.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from medvlm_audit.errors import AuditError, ConfigError
from medvlm_audit.jsonl import iter_jsonl
from medvlm_audit.stats import bootstrap_mean
from medvlm_audit.suites.reports.clinical import ClinicalScore, check_pairs
from medvlm_audit.suites.reports.clinical.formulas import RADGRAPH_LEVELS, radgraph_rewards

#: metric name per reward level
METRICS: dict[str, str] = {"simple": "radgraph_f1_e", "partial": "radgraph_f1_er",
                           "complete": "radgraph_f1_er_complete"}
_LEVEL_TEXT = {
    "simple": "RG_E: entities matched on tokens and label",
    "partial": "RG_ER: entities matched on tokens, label and whether they have a relation",
    "complete": "RG_ER-bar: entities without relations on tokens and label, each relation on (tokens, label, "
                "type, target tokens)",
}
#: model types the radgraph package knows (its model folder must carry one of these names)
MODEL_TYPES = ("radgraph", "radgraph-xl", "modern-radgraph-xl", "echograph")
MODEL_FILES = ("config.json", "vocabulary", "weights.th")


class Annotator(Protocol):
    """Texts -> RadGraph annotations, one per text: ``{"entities": {id: {"tokens", "label", "relations"}}}``;
    ``None`` for a text it has no annotation for. ``source`` names it in a metric's method (no full path)."""

    source: str

    def annotate(self, texts: Sequence[str]) -> list[dict[str, Any] | None]: ...


def normalise_text(text: str) -> str:
    """The key a report is matched on: lower-cased words and single punctuation marks, space-separated (so the
    raw text and RadGraph's re-tokenised text agree).

    >>> normalise_text("Small  left effusion.") == normalise_text("small left effusion .")
    True
    """
    return " ".join(re.findall(r"\w+|[^\w\s]", text.lower()))


def check_entities(entities: Any, where: str) -> dict[str, Any]:
    """``entities`` if it is a RadGraph entity dict (tokens and label strings, relations to entities of the same
    report), else an AuditError naming ``where``."""
    if not isinstance(entities, dict):
        raise AuditError(f"{where}: 'entities' must be an object {{id: entity}}, got {type(entities).__name__}")
    for key, ent in entities.items():
        if not isinstance(ent, dict) or not isinstance(ent.get("tokens"), str) or not isinstance(
                ent.get("label"), str):
            raise AuditError(f"{where}: entity {key!r} needs string 'tokens' and 'label'")
        rels = ent.get("relations", [])
        if not isinstance(rels, list) or any(not isinstance(r, (list, tuple)) or len(r) != 2 for r in rels):
            raise AuditError(f"{where}: entity {key!r} 'relations' must be a list of [type, target_id]")
        for r in rels:
            if str(r[1]) not in entities:
                raise AuditError(f"{where}: entity {key!r} has a {r[0]!r} relation to entity {r[1]!r}, which is "
                                 "not in this report's entities")
    return {str(k): {**v, "relations": [[r[0], str(r[1])] for r in v.get("relations", [])]}
            for k, v in entities.items()}


# ---------------------------------------------------------------------------------------------- annotators
class AnnotationFileAnnotator:
    """RadGraph annotations read from a JSON / JSONL file (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.source = f"annotation file {path.name}"
        self.by_text: dict[str, dict[str, Any]] = {}
        for where, rec in self._records(path):
            if not isinstance(rec, dict) or "text" not in rec or "entities" not in rec:
                raise AuditError(f"{where}: a RadGraph annotation needs 'text' and 'entities'")
            if not isinstance(rec["text"], str):
                raise AuditError(f"{where}: 'text' must be a string")
            ann = {"entities": check_entities(rec["entities"], where)}
            key = normalise_text(rec["text"])
            old = self.by_text.get(key)
            if old is not None and old != ann:
                raise AuditError(f"{where}: the text {rec['text'][:60]!r} is annotated twice, differently")
            self.by_text[key] = ann

    @staticmethod
    def _records(path: Path) -> list[tuple[str, Any]]:
        if path.suffix.lower() == ".jsonl":
            if not path.is_file():
                raise ConfigError(f"radgraph: cannot read the annotation file {path}: not a file")
            return [(f"{path}:{i}", rec) for i, rec in iter_jsonl(path, what="RadGraph annotation file")]
        try:
            raw = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise AuditError(f"{path}: not UTF-8 text ({e})") from e
        except OSError as e:
            raise ConfigError(f"radgraph: cannot read the annotation file {path}: {e}") from e
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as e:
            raise AuditError(f"{path.name}: not JSON ({e.msg}, line {e.lineno})") from e
        if isinstance(data, dict):
            return [(f"{path.name}, key {k!r}", v) for k, v in data.items()]
        if isinstance(data, list):
            return [(f"{path.name}, item {i}", v) for i, v in enumerate(data)]
        raise AuditError(f"{path.name}: expected a JSON object {{key: annotation}} or a list of annotations")

    def annotate(self, texts: Sequence[str]) -> list[dict[str, Any] | None]:
        return [self.by_text.get(normalise_text(t)) for t in texts]


class RadGraphModelAnnotator:
    """The ``radgraph`` package's model run offline from an extracted model folder (see the module docstring)."""

    def __init__(self, model_dir: Path, *, model_type: str | None = None, backbone: str | Path | None = None,
                 device: str = "cpu") -> None:
        import importlib.metadata
        import importlib.util

        if importlib.util.find_spec("radgraph") is None:
            raise ConfigError("radgraph: a model folder needs the 'radgraph' package (pip install "
                              "'medvlm-audit[radgraph]', i.e. radgraph==0.1.18 with transformers<5); or pass a "
                              "JSON/JSONL file of precomputed RadGraph annotations instead")
        tf_version = importlib.metadata.version("transformers")
        if int(tf_version.split(".")[0]) >= 5:
            raise ConfigError(f"radgraph: the radgraph package 0.1.18 does not run with transformers {tf_version} "
                              "(its vendored AllenNLP calls tokenizer.encode_plus, removed in transformers 5): "
                              "use transformers<5, or pass a JSON/JSONL file of precomputed RadGraph annotations")
        missing = [f for f in MODEL_FILES if not (model_dir / f).exists()]
        if missing:
            raise ConfigError(f"radgraph: the model folder {model_dir} lacks {', '.join(missing)} (expected the "
                              "extracted radgraph.tar.gz / radgraph-xl.tar.gz: config.json, vocabulary/, "
                              "weights.th)")
        model_type = model_type or model_dir.name
        if model_type not in MODEL_TYPES:
            raise ConfigError(f"radgraph: model_type {model_type!r} is not one of {MODEL_TYPES} (pass "
                              "model_type=, or name the folder after it)")
        try:
            config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
            slots = [config["dataset_reader"]["token_indexers"]["bert"],
                     config["model"]["embedder"]["token_embedders"]["bert"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"radgraph: {model_dir.name}/config.json is not a RadGraph (DyGIE) config: "
                              f"{type(e).__name__}: {e}") from e
        if backbone is not None:
            bb = Path(backbone).expanduser()
            if not (bb / "config.json").is_file():
                raise ConfigError(f"radgraph: backbone folder {bb} lacks config.json (it needs the backbone's "
                                  "config.json and tokenizer files)")
            for slot in slots:
                slot["model_name"] = str(bb.resolve())
        for slot in slots:
            name = str(slot.get("model_name", ""))
            if not Path(name).is_dir():
                raise ConfigError(f"radgraph: {model_dir.name}/config.json names the backbone {name!r}, which is "
                                  "not a local folder, and nothing may be fetched from a model hub: pass "
                                  "backbone=FOLDER (that backbone's config.json and tokenizer files)")
        if device == "cpu":
            cuda = -1
        elif device.startswith("cuda"):
            cuda = int(device.split(":", 1)[1]) if ":" in device else 0
        else:
            raise ConfigError(f"radgraph: device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
        from radgraph import RadGraph

        tmp = Path(tempfile.mkdtemp(prefix="medvlm-radgraph-"))
        try:  # a private copy: the package writes a lock file into vocabulary/ and reads config.json by name
            work = tmp / model_type
            work.mkdir()
            (work / "config.json").write_text(json.dumps(config), encoding="utf-8")
            shutil.copytree(model_dir / "vocabulary", work / "vocabulary")
            (work / "weights.th").symlink_to((model_dir / "weights.th").resolve())
            with contextlib.redirect_stdout(io.StringIO()):
                self.model = RadGraph(model_type=model_type, model_cache_dir=str(tmp), cuda=cuda)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.source = f"radgraph package model {model_type} from folder {model_dir.name}"

    def annotate(self, texts: Sequence[str]) -> list[dict[str, Any] | None]:
        if not texts:
            return []
        with contextlib.redirect_stdout(io.StringIO()):
            out = self.model(list(texts))
        return [({"entities": out[str(i)]["entities"]} if str(i) in out else None) for i in range(len(texts))]


# ---------------------------------------------------------------------------------------------- metric
class RadGraphF1:
    """RadGraph F1 at the three reward levels from an :class:`Annotator`. Build it with :func:`load`."""

    name = "radgraph"

    def __init__(self, annotator: Annotator, *, missing: Literal["error", "skip"] = "error") -> None:
        if missing not in ("error", "skip"):
            raise ConfigError(f"radgraph: missing must be 'error' or 'skip', got {missing!r}")
        self.annotator = annotator
        self.missing = missing

    def rewards(self, hypotheses: Sequence[str], references: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Per-pair (simple, partial, complete) F1, shape (n, 3), and a mask of the pairs scored (False where an
        annotation is missing and ``missing='skip'``). An empty report scores 0, as in the package."""
        hyps, refs = check_pairs("radgraph", hypotheses, references)
        uniq = list(dict.fromkeys(t for t in hyps + refs if t))
        ann = dict(zip(uniq, self.annotator.annotate(uniq), strict=True))
        out = np.zeros((len(hyps), 3))
        ok = np.ones(len(hyps), dtype=bool)
        for i, (h, r) in enumerate(zip(hyps, refs, strict=True)):
            if not h or not r:
                continue  # the package scores a pair with an empty report 0
            ah, ar = ann[h], ann[r]
            if ah is None or ar is None:
                if self.missing == "error":
                    text = h if ah is None else r
                    raise AuditError(f"radgraph: no annotation in {self.annotator.source} for the "
                                     f"{'hypothesis' if ah is None else 'reference'} of pair {i}: {text[:60]!r}")
                ok[i] = False
                continue
            out[i] = radgraph_rewards(ah["entities"], ar["entities"])
        return out, ok

    def score(self, hypotheses: Sequence[str], references: Sequence[str], *, B: int = 1000,
              seed: int = 0) -> list[ClinicalScore]:
        """Mean RadGraph F1 over report pairs at the three levels, percentile bootstrap intervals over pairs."""
        values, ok = self.rewards(hypotheses, references)
        left = int((~ok).sum())
        note = (f"{left} of {len(ok)} pairs without an annotation in {self.annotator.source} (left out)"
                if left else "")
        rows = []
        for j, level in enumerate(RADGRAPH_LEVELS):
            est = bootstrap_mean(values[ok, j], B=B, seed=seed)
            method = (f"RadGraph annotations ({self.annotator.source}); per-pair F1 of the {_LEVEL_TEXT[level]} "
                      f"(radgraph 0.1.18 reward level '{level}'; 0 when a report is empty or has no entity), "
                      f"mean over report pairs; {est.method.replace('cases', 'report pairs')}")
            rows.append(ClinicalScore(metric=METRICS[level], point=est.point, n=est.n, method=method,
                                      ci_low=est.ci_low, ci_high=est.ci_high,
                                      note=note or ("" if est.n else "no report pairs")))
        return rows


def load(path: Path, *, model_type: str | None = None, backbone: str | Path | None = None, device: str = "cpu",
         missing: Literal["error", "skip"] = "error", **params: Any) -> RadGraphF1:
    """The RadGraph F1 adapter from a LOCAL path: a ``.json`` / ``.jsonl`` file of precomputed RadGraph
    annotations, or an extracted RadGraph model folder run with the ``radgraph`` package (``model_type``,
    ``backbone``, ``device`` apply to it). ``missing``: what a report without an annotation does ('error', or
    'skip' the pair and say so in the note)."""
    if params:
        raise ConfigError(f"radgraph: unknown option(s) {sorted(params)} (known: model_type, backbone, device, "
                          "missing)")
    path = Path(path).expanduser()
    annotator: Annotator
    if path.is_file():
        if path.suffix.lower() not in (".json", ".jsonl"):
            raise ConfigError(f"radgraph: {path} is neither a .json / .jsonl annotation file nor a model folder")
        annotator = AnnotationFileAnnotator(path)
    elif path.is_dir():
        annotator = RadGraphModelAnnotator(path, model_type=model_type, backbone=backbone, device=device)
    else:
        raise ConfigError(f"radgraph: {path} does not exist (expected a RadGraph annotation .json / .jsonl file "
                          "or an extracted RadGraph model folder)")
    return RadGraphF1(annotator, missing=missing)


__all__ = ["METRICS", "AnnotationFileAnnotator", "Annotator", "RadGraphF1", "RadGraphModelAnnotator",
           "check_entities", "load", "normalise_text"]
