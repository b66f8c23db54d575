"""CheXbert F1 and RadGraph F1 adapters (issue 11): F1 formulas against hand-computed values, and both adapters
end to end on tiny stand-ins built here (a tiny CheXbert checkpoint in the released format; a RadGraph annotation
file; the radgraph package's model built tiny, where that package runs)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from medvlm_audit.errors import AuditError, ConfigError
from medvlm_audit.suites.reports.clinical import CLINICAL_METRICS, load_clinical_metric
from medvlm_audit.suites.reports.clinical.formulas import (
    multilabel_f1,
    multilabel_f1_bootstrap,
    radgraph_rewards,
    set_f1,
)

WORDS = ["no", "pleural", "effusion", "cardiomegaly", "edema", "atelectasis", "consolidation", "normal", "heart", "size", "mild", "acute", "stable", "left", "right", "lung", "a", "b", "1", "2", ".", ","]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]


HAS_HF = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
needs_hf = pytest.mark.skipif(not HAS_HF, reason="needs torch and transformers (the 'hf' extra)")
if HAS_HF:
    import torch
    import transformers


def _register() -> None:
    for name in ("chexbert", "radgraph"):
        if name not in CLINICAL_METRICS:  # main may register them already
            CLINICAL_METRICS.register(name, f"medvlm_audit.suites.reports.clinical.{name}:load")


# ------------------------------------------------------------------------------------------- stats: F1
def test_multilabel_f1_hand_computed():
    t = [[1, 0, 0], [1, 1, 0], [0, 0, 0]]
    p = [[1, 1, 0], [0, 1, 0], [0, 1, 0]]
    # a: TP 1 FN 1 -> 2/3; b: TP 1 FP 2 -> 1/2; c: never positive -> 0 (sklearn's zero_division default)
    assert multilabel_f1(t, p, "micro") == pytest.approx(4 / 7)
    assert multilabel_f1(t, p, "macro") == pytest.approx((2 / 3 + 1 / 2 + 0) / 3)
    assert multilabel_f1(t, p, "macro", zero_division=1.0) == pytest.approx((2 / 3 + 1 / 2 + 1) / 3)
    est = multilabel_f1_bootstrap(t, p, B=500, seed=1)
    assert est["micro"].point == pytest.approx(4 / 7) and est["micro"].n == 3
    assert est["micro"].ci_low <= 4 / 7 <= est["micro"].ci_high
    with pytest.raises(ValueError, match="row 1, column 2"):
        multilabel_f1([[0, 0, 0], [0, 0, 2]], [[0, 0, 0], [0, 0, 0]])


@pytest.mark.slow
def test_multilabel_f1_matches_sklearn_and_bootstrap_draws():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(3)
    t = (rng.random((40, 14)) < 0.3).astype(int)
    p = (rng.random((40, 14)) < 0.3).astype(int)
    t[:, 5] = 0
    p[:, 5] = 0  # an observation positive in neither: counts 0 in the macro mean, as sklearn
    for avg in ("micro", "macro"):
        assert multilabel_f1(t, p, avg) == pytest.approx(
            metrics.f1_score(t, p, average=avg, zero_division=0))
    # the bootstrap draws are the F1 of resampled rows: check one resample by index mode against sklearn
    est = multilabel_f1_bootstrap(t, p, B=2000, seed=0, mode="index")
    idx = np.random.RandomState(0).randint(0, 40, size=(2000, 40))
    draws = [metrics.f1_score(t[i], p[i], average="micro", zero_division=0) for i in idx]
    lo, hi = np.percentile(draws, [2.5, 97.5])
    assert (est["micro"].ci_low, est["micro"].ci_high) == pytest.approx((lo, hi))


# ------------------------------------------------------------------------------------------- stats: RadGraph
def _ent(tokens, label, *rels):
    return {"tokens": tokens, "label": label, "relations": [list(r) for r in rels]}


HYP = {"1": _ent("effusion", "OBS-DP", ("located_at", "3")), "2": _ent("pleural", "ANAT-DP"),
       "3": _ent("lung", "ANAT-DP")}
REF = {"1": _ent("effusion", "OBS-DP", ("located_at", "2")), "2": _ent("pleural", "ANAT-DP"),
       "3": _ent("cardiomegaly", "OBS-DP")}


def test_radgraph_rewards_hand_computed():
    # simple: {effusion, pleural} shared of 3 each -> 2/3; partial: (effusion, has relation), pleural -> 2/3;
    # complete: effusion->lung vs effusion->pleural differ, only pleural shared -> 1/3
    assert radgraph_rewards(HYP, REF) == pytest.approx((2 / 3, 2 / 3, 1 / 3))
    # the hypothesis drops effusion's relation: partial and complete lose it, simple keeps it
    h2 = {"1": _ent("effusion", "OBS-DP"), "2": _ent("pleural", "ANAT-DP")}
    # simple: P 2/2, R 2/3 -> 0.8; partial: only pleural shared: P 1/2, R 1/3 -> 0.4; complete: same -> 0.4
    assert radgraph_rewards(h2, REF) == pytest.approx((0.8, 0.4, 0.4))
    assert radgraph_rewards({}, REF) == (0.0, 0.0, 0.0)
    assert set_f1(set(), set()) == 0.0
    # complete level lower-cases the tokens of related entities only (as the package)
    a = {"1": _ent("Effusion", "OBS-DP", ("located_at", "2")), "2": _ent("Pleural", "ANAT-DP")}
    b = {"1": _ent("effusion", "OBS-DP", ("located_at", "2")), "2": _ent("pleural", "ANAT-DP")}
    assert radgraph_rewards(a, b) == pytest.approx((0.0, 0.0, 0.5))


# ------------------------------------------------------------------------------------------- CheXbert
def _tiny_chexbert(folder: Path, *, seed: int = 0, biases: dict[int, int] | None = None,
                   max_pos: int = 64) -> dict:
    """A tiny CheXbert (hidden 32, 2 layers) saved in the released format into ``folder``: chexbert.pth holding
    {"model_state_dict": {"module.*": ...}} (with the old position_ids buffer), config.json, vocab.txt.
    ``biases`` {head: class}: zero that head's weights and give ``class`` the largest bias (it always wins)."""
    from medvlm_audit.suites.reports.clinical.chexbert import build_labeler

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    cfg = transformers.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=37, max_position_embeddings=max_pos,
                                  initializer_range=1.0)
    cfg.save_pretrained(folder)
    torch.manual_seed(seed)
    model = build_labeler(cfg)
    with torch.no_grad():
        for head, cls in (biases or {}).items():
            lin = model.linear_heads[head]
            lin.weight.zero_()
            lin.bias.zero_()
            lin.bias[cls] = 5.0
    state = {"module." + k: v for k, v in model.state_dict().items()}
    state["module.bert.embeddings.position_ids"] = torch.arange(max_pos)[None]
    torch.save({"epoch": 2, "model_state_dict": state}, folder / "chexbert.pth")
    return state


def _reference_classes(state: dict, folder: Path, texts: list[str]) -> np.ndarray:
    """Each head's argmax computed independently: a plain BertModel with the checkpoint's bert.* weights, one
    report at a time (no padding), [CLS] state times each head's weight plus bias."""
    cfg = transformers.BertConfig.from_pretrained(str(folder))
    bert = transformers.BertModel(cfg)
    bert.load_state_dict({k[len("module.bert."):]: v for k, v in state.items()
                          if k.startswith("module.bert.") and not k.endswith("position_ids")})
    bert.eval()
    tok = transformers.BertTokenizer(str(folder / "vocab.txt"))
    out = np.zeros((len(texts), 14), dtype=int)
    with torch.no_grad():
        for i, t in enumerate(texts):
            ids = torch.tensor([tok(t)["input_ids"]])
            cls = bert(input_ids=ids)[0][0, 0]
            for j in range(14):
                w, b = state[f"module.linear_heads.{j}.weight"], state[f"module.linear_heads.{j}.bias"]
                out[i, j] = int(torch.argmax(w @ cls + b))
    return out


HYPS = ["no pleural effusion .", "mild cardiomegaly .", "edema and atelectasis", "normal heart size",
        "stable consolidation , no effusion", "left lung consolidation", "mild edema", ""]
REFS = ["mild cardiomegaly .", "mild cardiomegaly .", "edema , atelectasis", "normal heart size .",
        "no pleural effusion", "right lung consolidation", "stable edema .", "no acute"]


@needs_hf
def test_chexbert_labels_equal_the_weights_and_f1_follows(tmp_path):
    from medvlm_audit.suites.reports.clinical.chexbert import COMMON_5, CONDITIONS

    _register()
    state = _tiny_chexbert(tmp_path / "chexbert")
    metric = load_clinical_metric("chexbert", tmp_path / "chexbert")
    texts = HYPS[:-1] + REFS
    want = _reference_classes(state, tmp_path / "chexbert", texts)
    got = metric.classes(texts)
    assert (got == want).all()
    assert len({tuple(r) for r in got}) > 3  # the stand-in's labels depend on the text
    # F1 from the independently computed labels: positive = class 1 or 3 (f1chexbert 'rrg'); No Finding = 1
    metrics = pytest.importorskip("sklearn.metrics")
    cls = metric.classes(HYPS + REFS)
    binary = ((cls == 1) | (cls == 3)).astype(int)
    y_pred, y_true = binary[: len(HYPS)], binary[len(HYPS):]
    i5 = [CONDITIONS.index(c) for c in COMMON_5]
    rows = {r.metric: r for r in metric.score(HYPS, REFS, B=300, seed=0)}
    assert set(rows) == {"chexbert_f1_micro_14", "chexbert_f1_macro_14", "chexbert_f1_micro_5",
                         "chexbert_f1_macro_5"}
    for avg in ("micro", "macro"):
        assert rows[f"chexbert_f1_{avg}_14"].point == pytest.approx(
            metrics.f1_score(y_true, y_pred, average=avg, zero_division=0))
        assert rows[f"chexbert_f1_{avg}_5"].point == pytest.approx(
            metrics.f1_score(y_true[:, i5], y_pred[:, i5], average=avg, zero_division=0))
    r = rows["chexbert_f1_micro_14"]
    assert r.n == len(HYPS) and r.ci_low <= r.point <= r.ci_high
    assert str(tmp_path) not in r.method and "chexbert.pth in chexbert" in r.method
    assert "uncertain" in r.method and "bootstrap over report pairs" in r.method


@needs_hf
def test_chexbert_planted_heads_hand_computed(tmp_path):
    # every head 'negative' (2) except Edema (index 4) 'uncertain' (3) and No Finding (13) 'blank' (0): every
    # report gets the same labels, only Edema positive (uncertain counts positive).
    biases = {j: 2 for j in range(13)} | {4: 3, 13: 0}
    _tiny_chexbert(tmp_path / "m", biases=biases)
    from medvlm_audit.suites.reports.clinical.chexbert import load

    rows = {r.metric: r.point for r in load(tmp_path / "m").score(HYPS, REFS, B=50)}
    # micro: TP = 8 (Edema, every pair), FP = FN = 0 -> 1; macro over 14: Edema 1, 13 observations never
    # positive count 0 -> 1/14; over the 5 common ones (Edema among them) -> 1/5
    assert rows == pytest.approx({"chexbert_f1_micro_14": 1.0, "chexbert_f1_macro_14": 1 / 14,
                                  "chexbert_f1_micro_5": 1.0, "chexbert_f1_macro_5": 1 / 5})
    # uncertain counted negative: no positive anywhere -> F1 0 (zero division), macro 0
    rows = {r.metric: r.point for r in load(tmp_path / "m", uncertain="negative").score(HYPS, REFS, B=50)}
    assert rows["chexbert_f1_micro_14"] == 0.0 and rows["chexbert_f1_macro_5"] == 0.0


@needs_hf
def test_chexbert_truncates_to_the_model_length(tmp_path):
    from medvlm_audit.suites.reports.clinical.chexbert import load

    _tiny_chexbert(tmp_path / "m", max_pos=16)
    metric = load(tmp_path / "m")
    ids = metric.encode(" ".join(["edema"] * 40))
    assert len(ids) == 16 and ids[0] == metric.tokenizer.cls_token_id and ids[-1] == metric.tokenizer.sep_token_id
    assert metric.encode("   \n ") == [metric.tokenizer.cls_token_id, metric.tokenizer.sep_token_id]
    assert metric.classes([" ".join(["edema"] * 40)]).shape == (1, 14)  # runs at the cut length


@needs_hf
def test_chexbert_checkpoint_file_with_params_and_bad_paths(tmp_path):
    from medvlm_audit.suites.reports.clinical.chexbert import load

    _tiny_chexbert(tmp_path / "m")
    ck = tmp_path / "elsewhere" / "my.pth"
    ck.parent.mkdir()
    (tmp_path / "m" / "chexbert.pth").rename(ck)
    metric = load(ck, config=tmp_path / "m" / "config.json", tokenizer=tmp_path / "m")
    assert metric.score(["edema"], ["edema"], B=20)[0].n == 1
    with pytest.raises(ConfigError, match=r"lacks the BERT config.json \(or pass config=\).*vocab.txt"):
        load(ck)
    with pytest.raises(ConfigError, match="lacks the checkpoint chexbert.pth"):
        load(tmp_path / "m")
    with pytest.raises(ConfigError, match="does not exist"):
        load(tmp_path / "nope")
    # a checkpoint that does not match the config
    bad = tmp_path / "bad"
    _tiny_chexbert(bad)
    blob = torch.load(bad / "chexbert.pth", weights_only=True)
    del blob["model_state_dict"]["module.linear_heads.13.bias"]
    torch.save(blob, bad / "chexbert.pth")
    with pytest.raises(ConfigError, match=r"missing \['linear_heads.13.bias'\]"):
        load(bad)
    with pytest.raises(ConfigError, match="unknown option"):
        load(tmp_path / "m", cache_dir="x")
    with pytest.raises(AuditError, match="2 hypotheses but 1 references"):
        metric.score(["a", "b"], ["a"])


# ------------------------------------------------------------------------------------------- RadGraph (file)
def _annotation_file(path: Path, records: dict[str, dict]) -> Path:
    """RadGraph package output layout: {key: {"text" (re-tokenised), "entities", ...}}."""
    data = {str(i): {"text": text, "entities": ents, "data_source": None, "data_split": "inference"}
            for i, (text, ents) in enumerate(records.items())}
    path.write_text(json.dumps(data))
    return path


def test_radgraph_from_annotation_file_hand_computed(tmp_path):
    _register()
    f = _annotation_file(tmp_path / "ann.json", {
        "pleural effusion in the lung .": HYP,                       # hypothesis 0
        "pleural effusion , cardiomegaly .": REF,                    # reference 0
        "no acute process": {},                                      # hypothesis 1: no entity -> 0
        "heart size normal": {"1": _ent("heart", "ANAT-DP"), "2": _ent("normal", "OBS-DA", ("located_at", "1"))},
    })
    metric = load_clinical_metric("radgraph", f)
    hyps = ["Pleural effusion in the lung.", "No acute process", "heart size normal", ""]
    refs = ["Pleural effusion, cardiomegaly.", "Heart  size normal", "heart size normal", "heart size normal"]
    vals, ok = metric.rewards(hyps, refs)
    assert ok.all()
    np.testing.assert_allclose(vals, [[2 / 3, 2 / 3, 1 / 3], [0, 0, 0], [1, 1, 1], [0, 0, 0]])
    rows = {r.metric: r for r in metric.score(hyps, refs, B=400, seed=0)}
    assert set(rows) == {"radgraph_f1_e", "radgraph_f1_er", "radgraph_f1_er_complete"}
    assert rows["radgraph_f1_e"].point == pytest.approx((2 / 3 + 0 + 1 + 0) / 4)
    assert rows["radgraph_f1_er_complete"].point == pytest.approx((1 / 3 + 1) / 4)
    r = rows["radgraph_f1_er"]
    assert r.n == 4 and r.ci_low <= r.point <= r.ci_high and "annotation file ann.json" in r.method
    assert str(tmp_path) not in r.method and "bootstrap" in r.method
    # JSONL, one record per line, same answers
    jl = tmp_path / "ann.jsonl"
    jl.write_text("\n".join(json.dumps(v) for v in json.loads(f.read_text()).values()))
    from medvlm_audit.suites.reports.clinical.radgraph import load

    assert load(jl).rewards(hyps, refs)[0].tolist() == vals.tolist()


def test_radgraph_missing_and_bad_annotations(tmp_path):
    from medvlm_audit.suites.reports.clinical.radgraph import load

    f = _annotation_file(tmp_path / "a.json", {"effusion": {"1": _ent("effusion", "OBS-DP")}})
    with pytest.raises(AuditError, match="no annotation in annotation file a.json for the reference of pair 0"):
        load(f).score(["effusion"], ["cardiomegaly"], B=10)
    rows = load(f, missing="skip").score(["effusion", "effusion"], ["cardiomegaly", "effusion"], B=10)
    assert rows[0].n == 1 and rows[0].point == 1.0 and "1 of 2 pairs without an annotation" in rows[0].note
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"7": {"text": "x y", "entities": {"1": _ent("x", "OBS-DP", ("modify", "9"))}}}))
    with pytest.raises(AuditError, match=r"bad.json, key '7': entity '1' has a 'modify' relation to entity '9'"):
        load(bad)
    bad.write_text(json.dumps([{"text": "x"}]))
    with pytest.raises(AuditError, match="bad.json, item 0: a RadGraph annotation needs 'text' and 'entities'"):
        load(bad)
    (tmp_path / "l.jsonl").write_text('{"text": "a", "entities": {}}\n{oops\n')
    with pytest.raises(AuditError, match=r"l.jsonl:2: not valid JSON"):  # the one JSONL reader: FILE:LINE: why
        load(tmp_path / "l.jsonl")
    (tmp_path / "l.jsonl").write_text('{"text": "a", "entities": {}}\n\n["text"]\n')
    with pytest.raises(AuditError, match=r"l.jsonl:3: expected a JSON object, got list"):
        load(tmp_path / "l.jsonl")
    (tmp_path / "l.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(AuditError, match=r"l.jsonl:1: a RadGraph annotation needs 'text' and 'entities'"):
        load(tmp_path / "l.jsonl")
    with pytest.raises(ConfigError, match="does not exist"):
        load(tmp_path / "none.json")
    (tmp_path / "model").mkdir()
    with pytest.raises(ConfigError, match="radgraph"):  # a folder: the package, transformers<5 or files needed
        load(tmp_path / "model")


# ------------------------------------------------------------------------------------------- RadGraph (package)
def _radgraph_runs() -> str:
    if importlib.util.find_spec("radgraph") is None:
        return "the radgraph package is not installed (optional 'radgraph' extra)"
    major = int(importlib.metadata.version("transformers").split(".")[0])
    if major >= 5:
        return "radgraph 0.1.18 needs transformers<5 (its AllenNLP calls encode_plus)"
    return ""


@pytest.mark.skipif(bool(_radgraph_runs()), reason=_radgraph_runs() or "runs")
def test_radgraph_package_model_tiny_stand_in(tmp_path):
    """The radgraph package's DyGIE model built tiny from a config (random weights), saved as an extracted
    model folder whose config names the backbone by hub id, loaded offline with backbone= a local folder."""
    from dotmap import DotMap
    from radgraph.allennlp.data import Vocabulary
    from radgraph.allennlp.modules import text_field_embedders, token_embedders
    from radgraph.dygie.models import dygie

    from medvlm_audit.suites.reports.clinical.radgraph import load

    bb = tmp_path / "backbone"
    bb.mkdir()
    (bb / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    transformers.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=37, max_position_embeddings=64).save_pretrained(bb)
    (bb / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    md = tmp_path / "radgraph"
    md.mkdir()
    bert = {"type": "pretrained_transformer_mismatched", "model_name": "some-org/some-hub-bert", "max_length": 64}
    config = {"dataset_reader": {"type": "dygie", "max_span_width": 3, "token_indexers": {"bert": bert}},
              "model": {"type": "dygie", "embedder": {"token_embedders": {"bert": bert}}, "feature_size": 8,
                        "max_span_width": 3, "target_task": "relation",
                        "feedforward_params": {"num_layers": 1, "hidden_dims": 16, "dropout": 0.0},
                        "loss_weights": {"ner": 1.0, "relation": 1.0, "coref": 0.0, "events": 0.0},
                        "modules": {"ner": {}, "relation": {"spans_per_word": 0.5},
                                    "coref": {"spans_per_word": 0.3, "max_antecedents": 5, "coref_prop": 0},
                                    "events": {"trigger_spans_per_word": 0.3, "argument_spans_per_word": 0.8,
                                               "loss_weights": {"trigger": 1.0, "arguments": 1.0}}},
                        "initializer": {}, "module_initializer": {}}}
    (md / "config.json").write_text(json.dumps(config))
    vocab = Vocabulary(non_padded_namespaces=["*labels"])
    for lab in ("", "ANAT-DP", "OBS-DP", "OBS-DA", "OBS-U"):
        vocab.add_token_to_namespace(lab, "radgraph__ner_labels")
    for lab in ("located_at", "modify", "suggestive_of"):
        vocab.add_token_to_namespace(lab, "radgraph__relation_labels")
    vocab.save_to_files(str(md / "vocabulary"))
    (md / "vocabulary" / ".lock").unlink(missing_ok=True)
    emb = text_field_embedders.BasicTextFieldEmbedder({"bert": token_embedders.PretrainedTransformerMismatchedEmbedder(
        model_name=str(bb), max_length=64)})
    kwargs = DotMap(config["model"])
    for key in ("type", "embedder", "initializer", "module_initializer"):
        del kwargs[key]
    torch.manual_seed(0)
    torch.save(dygie.DyGIE(vocab=vocab, embedder=emb, **kwargs).state_dict(), md / "weights.th")
    before = sorted(p.name for p in md.rglob("*"))

    with pytest.raises(ConfigError, match="names the backbone 'some-org/some-hub-bert'.*backbone=FOLDER"):
        load(md)
    metric = load(md, backbone=bb)
    texts = ["mild cardiomegaly . no pleural effusion", "left lung consolidation"]
    ann = metric.annotator.annotate(texts)
    assert all(a is not None and a["entities"] for a in ann)  # the random model tags some spans
    vals, _ = metric.rewards(texts, texts[::-1])
    want = [radgraph_rewards(ann[0]["entities"], ann[1]["entities"]),
            radgraph_rewards(ann[1]["entities"], ann[0]["entities"])]
    np.testing.assert_allclose(vals, want)
    np.testing.assert_allclose(metric.rewards(texts, texts)[0], np.ones((2, 3)))
    rows = metric.score(texts, texts[::-1], B=50)
    assert rows[1].metric == "radgraph_f1_er" and not math.isnan(rows[1].point)
    assert "radgraph package model radgraph from folder radgraph" in rows[1].method
    assert sorted(p.name for p in md.rglob("*")) == before  # the model folder is not written to


def test_every_adapter_refuses_unpaired_or_non_text_input(tmp_path):
    from medvlm_audit.errors import AuditError
    from medvlm_audit.suites.reports.clinical import check_pairs
    from medvlm_audit.suites.reports.clinical.radgraph import load

    assert check_pairs("x", ("a", "b"), ["c", "d"]) == (["a", "b"], ["c", "d"])
    with pytest.raises(AuditError, match=r"green: 2 hypotheses but 1 references"):
        check_pairs("green", ["a", "b"], ["c"])
    with pytest.raises(AuditError, match=r"chexbert: reference 1 is NoneType, not text"):
        check_pairs("chexbert", ["a", "b"], ["c", None])
    metric = load(_annotation_file(tmp_path / "ann.json", {"no acute process": {}}))
    with pytest.raises(AuditError, match="radgraph: 1 hypotheses but 2 references"):
        metric.score(["no acute process"], ["no acute process", "no acute process"])
