"""RaTEScore and GREEN adapters (issue 11): formulas against hand-computed values, the GREEN parser on
hand-written judge outputs, and both adapters end to end on tiny stand-in models saved to tmp folders."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from medvlm_audit.errors import ConfigError
from medvlm_audit.suites.reports.clinical import CLINICAL_METRICS, load_clinical_metric
from medvlm_audit.suites.reports.clinical.formulas import (
    RATESCORE_TYPES,
    green_scores,
    ratescore,
    ratescore_match,
    ratescore_penalty,
)
from medvlm_audit.suites.reports.clinical.green import (
    GREEN_CHAT_TEMPLATE,
    GreenJudgement,
    GreenParseError,
    green_prompt,
    parse_green,
)
from medvlm_audit.suites.reports.clinical.ratescore import affinity_matrices, bio_spans, released_affinity

# --------------------------------------------------------------------------------------------- formulas


def test_ratescore_formula_hand_computed() -> None:
    # types 0 = ABNORMALITY, 1 = NON-ABNORMALITY; W = [[.5, .2], [.4, .1]]; negation penalty .8 across types.
    # reference (1,0), (0,1) of type 0; hypothesis (3,4) of type 1: cosines .6 and .8.
    # ref -> hyp: (.6*.2*.8 + .8*.2*.8) / (.2 + .2) = .56; hyp -> ref: best (0,1): .8*.4*.8 / .4 = .64
    # RaTEScore = 2 * .56 * .64 / 1.2 = .597333...
    W = np.array([[0.5, 0.2], [0.4, 0.1]])
    P = ratescore_penalty(["ABNORMALITY", "NON-ABNORMALITY"], 0.8)
    assert P.tolist() == [[1.0, 0.8], [0.8, 1.0]]
    got = ratescore([[3, 4]], [1], [[1, 0], [0, 1]], [0, 0], W, P)
    assert got == pytest.approx(2 * 0.56 * 0.64 / 1.2, abs=1e-12)
    assert ratescore_match([[1, 0], [0, 1]], [0, 0], [[3, 4]], [1], W, P) == pytest.approx(0.56)
    # same entities and types on both sides: every entity matches itself, similarity 1 -> 1
    E = np.array([[1.0, 2.0], [-3.0, 0.5], [0.2, 0.2]])
    assert ratescore(E, [0, 1, 0], E, [0, 1, 0], W, P) == pytest.approx(1.0)
    # empty side: the released 0.5; zero weights on the matched type pairs: 0
    assert ratescore(np.zeros((0, 2)), [], E, [0, 1, 0], W, P) == 0.5
    assert ratescore([[1, 0]], [0], [[1, 0]], [0], np.zeros((2, 2)), P) == 0.0
    with pytest.raises(ValueError, match="types\\[0\\] = 5"):
        ratescore([[1, 0]], [5], [[1, 0]], [0], W, P)


def test_green_formula_hand_computed() -> None:
    # 3 matched, 1 significant error -> 3/4; nothing matched -> 0 (released rule, even with no error);
    # 2 matched, errors spread over (b) and (d): 2 / (2 + 3)
    got = green_scores([3, 0, 0, 2], [[1, 0, 0, 0, 0, 0], [0] * 6, [2, 0, 0, 0, 0, 0], [0, 1, 0, 2, 0, 0]])
    assert got.tolist() == [0.75, 0.0, 0.0, 0.4]
    with pytest.raises(ValueError, match="significant\\[0\\]"):
        green_scores([1], [-1])


# --------------------------------------------------------------------------------------------- GREEN parser

WELL_FORMED = """[Explanation]:
The candidate misses the effusion and places the opacity on the wrong side.

[Clinically Significant Errors]:
(a) False report of a finding in the candidate: 0.
(b) Missing a finding present in the reference: 1. Left pleural effusion
(c) Misidentification of a finding's anatomic location/position: 1. Opacity on the right instead of left
(d) Misassessment of the severity of a finding: 0.
(e) Mentioning a comparison that isn't in the reference: 0.
(f) Omitting a comparison detailing a change from a prior study: 0.

[Clinically Insignificant Errors]:
(a) False report of a finding in the candidate: 0.
(b) Missing a finding present in the reference: 0.
(c) Misidentification of a finding's anatomic location/position: 0.
(d) Misassessment of the severity of a finding: 1. Mild vs small
(e) Mentioning a comparison that isn't in the reference: 0.
(f) Omitting a comparison detailing a change from a prior study: 0.

[Matched Findings]:
3. Cardiomegaly; Opacity; Atelectasis
"""

NO_ERRORS = """[Explanation]:
Both reports are normal.

[Clinically Significant Errors]:
No clinically significant errors.

[Clinically Insignificant Errors]:
No clinically insignificant errors.

[Matched Findings]:
1. No acute cardiopulmonary process
"""


def test_parse_green_well_formed_and_variants() -> None:
    assert parse_green(WELL_FORMED) == GreenJudgement((0, 1, 1, 0, 0, 0), (0, 0, 0, 1, 0, 0), 3)
    assert parse_green(NO_ERRORS) == GreenJudgement((0,) * 6, (0,) * 6, 1)
    # numbered (1)-(6) lines (the released fallback), a decoded chat prefix, no blank lines between sections
    numbered = ("<|user|>\nprompt text</s>\n<|assistant|>\n[Clinically Significant Errors]:\n"
                "(1) False report: 2.\n(2) Missing: 0.\n[Matched Findings]:\n0. None</s>")
    assert parse_green(numbered) == GreenJudgement((2, 0, 0, 0, 0, 0), None, 0)
    # "None" instead of a count reads as 0; a missing insignificant section is not needed for the score
    no_count = ("[Clinically Significant Errors]:\n(a) False report of a finding in the candidate: None.\n"
                "(b) Missing a finding present in the reference: 2. Edema; Effusion\n\n[Matched Findings]:\n4. A")
    assert parse_green(no_count) == GreenJudgement((0, 2, 0, 0, 0, 0), None, 4)


@pytest.mark.parametrize(("text", "reason"), [
    ("", "empty output"),
    ("The reports agree well overall; I would rate it 8/10.", "no [Clinically Significant Errors] section"),
    # the released parser scores this 0 (a missing section counts as zero matched findings)
    ("[Clinically Significant Errors]:\n(a) False report of a finding in the candidate: 1. X\n",
     "no [Matched Findings] section"),
    ("[Clinically Significant Errors]:\n(a) False report: one error. X\n\n[Matched Findings]:\n2. A; B",
     "significant errors line without a count"),
    ("[Clinically Significant Errors]:\nthe candidate is fine\n\n[Matched Findings]:\n2. A; B",
     "significant errors without (a)-(f) lines"),
    ("[Clinically Significant Errors]:\n(a) False report: 0.\n\n[Matched Findings]:\nTwo. A; B",
     "matched findings without a count"),
    (":��:��:> [Clinically", "no [Clinically Significant Errors] section"),
])
def test_parse_green_malformed_is_rejected(text: str, reason: str) -> None:
    with pytest.raises(GreenParseError) as e:
        parse_green(text)
    assert e.value.reason == reason


def test_green_prompt_is_the_released_prompt() -> None:
    # sha256 of the released make_prompt("Heart size normal.", "No effusion.") at Stanford-AIMI/GREEN
    # d72c1951 (green_score/utils.py), computed from that source; and of its chat template string
    p = green_prompt("Heart size normal.", "No effusion.")
    assert hashlib.sha256(p.encode()).hexdigest() == "d9500150a4ff68b516acf72ec53480519a333e2ba39ebae3147bedba17f7f3cb"
    assert hashlib.sha256(GREEN_CHAT_TEMPLATE.encode()).hexdigest() == (
        "24d54a1f30c3309be8c2d2be5eebb23be08522dc0b4f264e7ee58f9b9e8a56a3")
    assert p.index("2. Reference Report:\n    Heart size normal.") < p.index("3. Candidate Report:\n    No effusion.")
    long = green_prompt(" ".join(["word"] * 400), "x")
    assert long.count("word") == 300


# --------------------------------------------------------------------------------------------- GREEN adapter


def _tiny_causal_lm(folder: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator([green_prompt("Heart size normal.", "No effusion.")] * 2, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    tok.save_pretrained(folder)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048,
                      bos_token_id=0, eos_token_id=1, pad_token_id=1)
    import torch

    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def green_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return _tiny_causal_lm(tmp_path_factory.mktemp("judge") / "tiny-green-judge")


def test_green_local_judge_end_to_end_reports_garbage_honestly(green_folder: Path) -> None:
    CLINICAL_METRICS.register("green", "medvlm_audit.suites.reports.clinical.green:load")
    metric = load_clinical_metric("green", green_folder, max_new_tokens=6, device="cpu")
    refs = ["Heart size normal. No effusion.", "Small left pleural effusion.", "Cardiomegaly."]
    hyps = ["Heart size normal.", "No effusion.", "Enlarged heart."]
    rows = {r.metric: r for r in metric.score(hyps, refs, B=200, seed=1)}
    assert [len(o or "") > 0 for o in metric.last_outputs] == [True] * 3  # the judge really generated
    g = rows["green"]
    assert math.isnan(g.point) and g.n == 0 and math.isnan(g.ci_low)
    assert g.note.startswith("3 of 3 judge outputs unparsable (left out)")
    assert "tiny-green-judge" in g.method and str(green_folder.parent) not in g.method
    assert "d72c1951" in g.method and rows["green_significant_errors"].unit == "errors per report"
    # the judge's input is the released prompt inside the released chat template
    rendered = metric.judge.render("PROMPT")
    assert rendered.startswith("<|user|>\nPROMPT</s>") and rendered.rstrip().endswith("<|assistant|>")


def test_green_score_path_with_canned_judge(green_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from medvlm_audit.suites.reports.clinical import green

    metric = green.load(green_folder, max_new_tokens=4, device="cpu")
    seen: list[str] = []

    def canned(prompts: list[str]) -> list[str | None]:
        seen.extend(prompts)
        return [WELL_FORMED, NO_ERRORS.replace("1. No acute", "0. No acute"), "garbage", None]

    monkeypatch.setattr(metric, "generate", canned)
    rows = {r.metric: r for r in metric.score(["c0", "c1", "c2", "c3"], ["r0", "r1", "r2", "r3"], B=500, seed=0)}
    # parsed: 3 matched / (3 + 2 significant) = .6 and 0 matched -> 0; two outputs left out
    g = rows["green"]
    assert g.point == pytest.approx((0.6 + 0.0) / 2) and g.n == 2
    assert 0.0 <= g.ci_low <= g.point <= g.ci_high <= 0.6
    assert g.note == ("2 of 4 judge outputs unparsable (left out): "
                      "no [Clinically Significant Errors] section 1; judge call failed 1")
    assert rows["green_significant_errors"].point == pytest.approx(1.0)
    assert "3. Candidate Report:\n    c2" in seen[2] and "2. Reference Report:\n    r2" in seen[2]
    (empty, _) = metric.score([], [], B=50)
    assert math.isnan(empty.point) and empty.n == 0 and empty.note == "no pairs to score"


def test_green_server_judge_through_openai_compatible_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("aiohttp")
    from medvlm_audit.suites.reports.clinical import green
    from medvlm_audit.testing.fake_openai import ThreadedFakeServer

    def answer(body: dict) -> str:
        text = body["messages"][-1]["content"]
        text = text if isinstance(text, str) else " ".join(p.get("text", "") for p in text)
        return WELL_FORMED if "Candidate Report:\n    good" in text else "I cannot tell."

    monkeypatch.setenv("GREEN_TEST_KEY", "sk-test-123456")
    with ThreadedFakeServer(answer_fn=answer, api_key="sk-test-123456") as srv:
        metric = green.load(Path("StanfordAIMI/GREEN-RadLlama2-7b"), base_url=srv.base_url, api_key_env="GREEN_TEST_KEY")
        rows = {r.metric: r for r in metric.score(["good", "bad"], ["ref", "ref"], B=100)}
    assert rows["green"].point == pytest.approx(0.6) and rows["green"].n == 1
    assert rows["green"].note.startswith("1 of 2 judge outputs unparsable")
    assert "judge GREEN-RadLlama2-7b at" in rows["green"].method and "sk-test" not in repr(vars(metric.judge.client))


def test_green_missing_folder_names_path(tmp_path: Path) -> None:
    from medvlm_audit.suites.reports.clinical import green

    with pytest.raises(ConfigError, match="does not exist"):
        green.load(tmp_path / "nowhere")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"half lacks the weights .*; a tokenizer"):
        green.load(tmp_path / "half")


# --------------------------------------------------------------------------------------------- RaTEScore

NER_LABELS = ["O"] + [f"{p}-{t}" for t in RATESCORE_TYPES for p in ("B", "I")]
NER_WORDS = {"effusion": "B-ABNORMALITY", "opacity": "B-ABNORMALITY", "pneumonia": "B-DISEASE",
             "cardiomegaly": "B-DISEASE", "clear": "B-NON-ABNORMALITY", "unremarkable": "B-NON-DISEASE",
             "left": "B-ANATOMY", "right": "B-ANATOMY", "lung": "I-ANATOMY", "heart": "B-ANATOMY"}
OTHER_WORDS = ["small", "large", "there", "is", "no", "the", "a", "and", "mild", "with"]


def _designed_ner(folder: Path) -> None:
    """A one-layer BERT whose tag depends on the token alone: attention and feed-forward outputs are zero, so
    the hidden state is the layer norm of a one-hot word embedding, and the classifier reads the word's slot."""
    import torch
    from transformers import BertConfig, BertForTokenClassification, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", *NER_WORDS, *OTHER_WORDS]
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    H = 64
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=H, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=16, id2label=dict(enumerate(NER_LABELS)),
                     label2id={lab: i for i, lab in enumerate(NER_LABELS)})
    model = BertForTokenClassification(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for ln in (model.bert.embeddings.LayerNorm, model.bert.encoder.layer[0].attention.output.LayerNorm,
                   model.bert.encoder.layer[0].output.LayerNorm):
            ln.weight.fill_(1.0)
        emb = model.bert.embeddings.word_embeddings.weight
        for i in range(len(vocab)):
            emb[i, i] = 10.0
        model.classifier.bias[0] = 0.5  # "O" wins for every word not named below
        for word, label in NER_WORDS.items():
            model.classifier.weight[NER_LABELS.index(label), vocab.index(word)] = 1.0
    model.save_pretrained(folder)


def _tiny_encoder(folder: Path) -> None:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *NER_WORDS, *OTHER_WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(folder)


AFFINITY = {f"{a.lower()}_{b.lower()}": round(0.1 + 0.03 * i + 0.01 * j, 2)
            for i, a in enumerate(RATESCORE_TYPES) for j, b in enumerate(RATESCORE_TYPES)}
AFFINITY["neg_weight"] = 0.5


@pytest.fixture(scope="module")
def ratescore_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("rate") / "ratescore"
    _designed_ner(root / "ner")
    _tiny_encoder(root / "tiny-biolord")
    (root / "affinity.json").write_text(json.dumps(AFFINITY))
    return root


def test_ratescore_end_to_end_on_tiny_models(ratescore_folder: Path) -> None:
    CLINICAL_METRICS.register("ratescore", "medvlm_audit.suites.reports.clinical.ratescore:load")
    metric = load_clinical_metric("ratescore", ratescore_folder, embedding="tiny-biolord",
                                  affinity="affinity.json", device="cpu")
    ref = "Small left lung effusion. Heart unremarkable."
    assert metric.entities([ref, "There is no pneumonia.", ""]) == [
        [("left lung", "ANATOMY"), ("effusion", "ABNORMALITY"), ("Heart", "ANATOMY"),
         ("unremarkable", "NON-DISEASE")], [("pneumonia", "DISEASE")], []]
    hyps = [ref, "Right lung clear.", "There is no."]
    refs = [ref, "Right lung opacity.", ref]
    rows = metric.score(hyps, refs, B=300, seed=0)
    (r,) = rows
    values, empty = metric.pair_scores(hyps, refs)
    assert values[0] == pytest.approx(1.0)  # identical reports
    assert values[2] == 0.5 and empty == 1  # no entity in the hypothesis: the released 0.5
    # pair 1 by hand from the encoder's vectors: entities right lung / ANATOMY, clear / NON-ABNORMALITY against
    # right lung / ANATOMY, opacity / ABNORMALITY (negated vs positive finding -> penalty .5)
    E = metric.embed(["Right lung", "clear", "opacity"])
    types = list(RATESCORE_TYPES)
    W = np.array([[AFFINITY[f"{a.lower()}_{b.lower()}"] for b in types] for a in types])
    cos = (E / np.linalg.norm(E, axis=1, keepdims=True)) @ (E / np.linalg.norm(E, axis=1, keepdims=True)).T
    an, na, ab = types.index("ANATOMY"), types.index("NON-ABNORMALITY"), types.index("ABNORMALITY")

    def side(pairs: list[tuple[float, int, int]]) -> float:  # (similarity, from type, to type)
        num = sum(s * W[a, b] * (0.5 if {a, b} == {na, ab} else 1.0) for s, a, b in pairs)
        return num / sum(W[a, b] for _, a, b in pairs)

    j_clear = int(np.argmax([cos[1, 0], cos[1, 2]]))  # best match of "clear" among right lung / opacity
    j_opac = int(np.argmax([cos[2, 0], cos[2, 1]]))
    hyp_side = side([(1.0, an, an), (max(cos[1, 0], cos[1, 2]), na, [an, ab][j_clear])])
    ref_side = side([(1.0, an, an), (max(cos[2, 0], cos[2, 1]), ab, [an, na][j_opac])])
    assert values[1] == pytest.approx(2 * hyp_side * ref_side / (hyp_side + ref_side), abs=1e-9)
    assert r.metric == "ratescore" and r.n == 3 and r.point == pytest.approx(values.mean())
    assert r.ci_low <= r.point <= r.ci_high
    assert "ner" in r.method and "tiny-biolord" in r.method and str(ratescore_folder.parent) not in r.method
    assert r.note == "1 of 3 pairs had a report without an entity and score 0.5 (released rule)"


def test_ratescore_folder_errors(tmp_path: Path, ratescore_folder: Path) -> None:
    from medvlm_audit.suites.reports.clinical import ratescore

    with pytest.raises(ConfigError, match="entity embedding model folder .*embedding does not exist"):
        ratescore.load(ratescore_folder, affinity="affinity.json")
    with pytest.raises(ConfigError, match="affinity file .*missing.json does not exist"):
        ratescore.load(ratescore_folder, embedding="tiny-biolord", affinity="missing.json")
    bad = {k: v for k, v in AFFINITY.items() if k != "anatomy_disease"}
    with pytest.raises(ConfigError, match="lacks anatomy_disease"):
        affinity_matrices(bad, "bad.json")
    # an NER label the matrix does not weigh
    small = {k: v for k, v in AFFINITY.items() if "anatomy" not in k}
    (tmp_path / "small.json").write_text(json.dumps(small))
    with pytest.raises(ConfigError, match="tags ANATOMY"):
        ratescore.load(ratescore_folder, embedding="tiny-biolord", affinity=str(tmp_path / "small.json"))


def test_released_affinity_is_read_not_imported(tmp_path: Path) -> None:
    src = tmp_path / "scorer.py"
    src.write_text("import medspacy_that_is_not_installed\nDEFAULT_MATRIX_LONG = {'anatomy_anatomy': 0.25, "
                   "'neg_weight': 0.75}\nDEFAULT_MATRIX_SHORT = {'anatomy_anatomy': 0.5, 'neg_weight': 0.1}\n")
    assert released_affinity("long", src) == {"anatomy_anatomy": 0.25, "neg_weight": 0.75}
    types, W, neg = affinity_matrices(released_affinity("short", src), "short")
    assert types == ("ANATOMY",) and W.tolist() == [[0.5]] and neg == 0.1
    try:
        installed = released_affinity("long")
    except ConfigError as e:
        assert "RaTEScore package, which is not installed" in str(e)
    else:  # the RaTEScore 0.6.0 package: 5 x 5 type pairs and the negation weight
        types, W, neg = affinity_matrices(installed, "long")
        assert types == RATESCORE_TYPES and W.shape == (5, 5) and 0 < neg < 1


def test_bio_spans_rules() -> None:
    assert bio_spans(["B-ANATOMY", "I-ANATOMY", "I-DISEASE", "O", "I-ANATOMY", "B-DISEASE"]) == [
        (0, 2, "ANATOMY"), (5, 5, "DISEASE")]
    assert bio_spans([]) == []


def test_docstring_worked_examples() -> None:
    import doctest

    from medvlm_audit.suites.reports.clinical import formulas, green
    from medvlm_audit.suites.reports.clinical import ratescore as ratescore_mod

    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for module, obj in ((formulas, ratescore_penalty), (formulas, ratescore_match), (formulas, ratescore),
                        (formulas, green_scores), (green, green.parse_green), (ratescore_mod, ratescore_mod.bio_spans)):
        for t in doctest.DocTestFinder().find(obj, globs=dict(vars(module))):
            runner.run(t)
    assert runner.tries >= 10 and runner.failures == 0
