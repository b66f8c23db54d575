"""BERTScore of paired reports on the packaged local MiniLM (bert-score library), the pairing by reference id,
and the corpus-audit options of the paired metrics."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from medvlm_audit.errors import ConfigError
from medvlm_audit.suites.reports import bertscore as bs
from medvlm_audit.suites.reports.audit import corpus_audit, paired_reports, surface_frame
from medvlm_audit.suites.reports.corpus import make_corpus

pytestmark = pytest.mark.skipif(bs.unavailable_reason() is not None, reason=str(bs.unavailable_reason()))


def _greedy_by_hand(hyp: str, ref: str) -> tuple[float, float, float]:
    """BERTScore's definition (Zhang et al. 2020, eq. 1-3, no idf) from the encoder's last hidden layer, as the
    authors' library computes it: each word token is averaged, [CLS] and [SEP] get weight 0 but stay candidates
    of the greedy match on the other side."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    path, layer, _ = bs.resolve_backbone()
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()

    def emb(text: str) -> np.ndarray:
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            h = model(**enc, output_hidden_states=True).hidden_states[layer][0].numpy()
        return h / np.linalg.norm(h, axis=1, keepdims=True)

    x, y = emb(ref), emb(hyp)
    S = x @ y.T  # reference tokens x hypothesis tokens
    R = S[1:-1].max(axis=1).mean()
    P = S[:, 1:-1].max(axis=0).mean()
    return float(P), float(R), float(2 * P * R / (P + R))


def test_bertscore_equals_the_greedy_matching_definition():
    hyp, ref = "The heart is enlarged. No effusion.", "Cardiomegaly without pleural effusion."
    P, R, F = bs.bertscore([hyp, ref], [ref, ref])
    p, r, f = _greedy_by_hand(hyp, ref)
    assert (P[0], R[0], F[0]) == pytest.approx((p, r, f), abs=2e-4)
    assert (P[1], R[1], F[1]) == pytest.approx((1.0, 1.0, 1.0), abs=1e-5)  # identical reports match fully
    assert 0 < F[0] < 0.99


def test_bertscore_memoises_pairs(monkeypatch):
    hyp, ref = ["Lungs are clear."], ["No acute cardiopulmonary process."]
    first = bs.bertscore(hyp, ref)

    def boom(*a, **k):
        raise AssertionError("the memoised pair was scored again")

    monkeypatch.setattr(bs, "_scorer", boom)
    assert np.allclose(np.column_stack(bs.bertscore(hyp, ref)), np.column_stack(first))


def test_bertscore_backbone_errors_name_the_folder(tmp_path):
    with pytest.raises(ConfigError, match=f"{tmp_path.name}.*no config.json"):
        bs.bertscore(["a"], ["b"], model=tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    with pytest.raises(ConfigError, match="layer 5 is outside 1..2"):
        bs.resolve_backbone(tmp_path, 5)


def _corpora():
    refs = [{"id": f"r{i}", "text": t, "group": "F" if i % 2 else "M"} for i, t in enumerate([
        "Heart size is enlarged. Small left pleural effusion.", "Lungs are clear. No pneumothorax.",
        "Right lower lobe consolidation concerning for pneumonia.", "Normal heart size. No acute disease."])]
    # two samples per image, paired through reference_ids (prediction ids carry the sample)
    preds = [{"id": f"c{i}#{k}", "text": t, "group": r["group"]} for i, r in enumerate(refs) for k, t in
             enumerate([r["text"], "No acute cardiopulmonary abnormality."])]
    return make_corpus(refs, "ref"), make_corpus(preds, "pred"), [f"r{i}" for i in range(4) for _ in range(2)]


def test_surface_frame_pairs_by_reference_id_with_cluster_intervals():
    ref, pred, rid = _corpora()
    assert surface_frame(ref, pred) is None  # prediction ids do not name reference reports
    h, r, k = paired_reports(ref, pred, rid)
    assert len(h) == 8 and k[:2] == ["r0", "r0"] and r[0] == ref.texts[0]
    surf = surface_frame(ref, pred, reference_ids=rid, bertscore=True, B=200).set_index("metric")
    assert list(surf.index) == ["bleu", "rouge1", "rougeL", "bertscore_precision", "bertscore_recall",
                                "bertscore_f1"]
    assert (surf["n_pairs"] == 8).all() and (surf["n_references"] == 4).all()
    assert "cluster bootstrap (4 clusters" in surf.loc["bertscore_f1", "method"]
    assert "all-MiniLM-L6-v2" in surf.loc["bertscore_f1", "method"]
    # half the predictions copy their reference: the mean F1 lies between the copies' 1.0 and the generic report's
    _, _, F = bs.bertscore([p for p in pred.texts], [ref.texts[int(x[1])] for x in rid])
    assert surf.loc["bertscore_f1", "value"] == pytest.approx(F.mean())
    assert F[0::2] == pytest.approx(1.0, abs=1e-5) and (F[1::2] < 0.95).all()
    lo, hi = surf.loc["bertscore_f1", ["ci_low", "ci_high"]]
    assert lo <= surf.loc["bertscore_f1", "value"] <= hi and lo < hi


def test_corpus_audit_writes_bertscore_rows_and_can_skip_them(tmp_path):
    ref, pred, rid = _corpora()
    res = corpus_audit(ref, pred, tmp_path / "a", B=50, n_perm=50, semantic=False, reference_ids=rid)
    s = pd.read_csv(tmp_path / "a" / "surface.csv")
    assert "bertscore_f1" in set(s["metric"]) and res.clinical is None
    res = corpus_audit(ref, pred, None, B=50, n_perm=50, semantic=False, reference_ids=rid, bertscore=False)
    assert "bertscore_f1" not in set(res.surface["metric"])


def test_corpus_audit_cli_clinical_spec_errors(tmp_path):
    import typer
    from typer.testing import CliRunner

    from medvlm_audit.suites.reports.commands import corpus_audit_cmd

    ref, pred, _ = _corpora()
    from medvlm_audit.suites.reports.corpus import write_corpus

    write_corpus(ref, tmp_path / "ref.jsonl")
    write_corpus(pred, tmp_path / "pred.jsonl")
    app = typer.Typer()
    app.command()(corpus_audit_cmd)
    base = ["--reference", str(tmp_path / "ref.jsonl"), "--predictions", str(tmp_path / "pred.jsonl"),
            "--out", str(tmp_path / "o"), "--bootstrap", "20", "--permutations", "20", "--semantic", "off"]
    r = CliRunner().invoke(app, [*base, "--clinical", "chexbert"])
    assert r.exit_code != 0 and "NAME=PATH" in r.output
    r = CliRunner().invoke(app, [*base, "--clinical", f"chexbrt={tmp_path}"])
    assert r.exit_code == 2 and "did you mean chexbert" in r.output
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_loading_the_backbones_draws_no_progress_bar() -> None:
    """A report's log is its own: transformers' "Loading weights" bars are not drawn while the suite loads its
    scorer backbones (a fresh process, so the model is really loaded), and the setting is restored after."""
    import subprocess
    import sys

    code = ("from medvlm_audit.suites.reports import bertscore as bs, embeddings as em\n"
            "from transformers.utils import logging as tl\n"
            "bs.bertscore(['no acute findings'], ['no acute disease'])\n"
            "em.embed(['heart size normal'])\n"
            "print('bars restored', tl.is_progress_bar_enabled())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert "Loading weights" not in out.stdout + out.stderr, out.stderr[-500:]
    assert "bars restored True" in out.stdout
