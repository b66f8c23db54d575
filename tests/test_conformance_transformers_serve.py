"""Conformance against a real third-party server: ``transformers serve`` (extra ``transformers[serving]``) with
config-built tiny models saved locally, started by the test on this CPU machine, offline.

Proves that no default leaks: a copy of the tiny LM given a Qwen-like ``generation_config.json`` (top_k 1,
repetition_penalty 1.05, temperature 0.1, top_p 0.001) answers every strategy exactly as the copy without it
(same seeds), and the stored effective decoding matches each strategy's label. Then each suite's model stage runs
through a served tiny LLaVA (images as data URLs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")  # transformers[serving]
pytest.importorskip("uvicorn")

from medvlm_audit import api
from medvlm_audit.suites.reports import decoding as D
from medvlm_audit.testing.real_servers import TransformersServe
from medvlm_audit.testing.tiny_models import build_tiny_causal_lm, build_tiny_llava

pytestmark = [pytest.mark.slow, pytest.mark.conformance]

QWEN_LIKE = {"do_sample": True, "top_k": 1, "top_p": 0.001, "temperature": 0.1, "repetition_penalty": 1.05}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("conformance")
    plain = build_tiny_causal_lm(root / "tiny-lm")
    qwen = root / "tiny-lm-qwen-like"
    shutil.copytree(plain, qwen)
    gc_path = qwen / "generation_config.json"
    gc = json.loads(gc_path.read_text()) if gc_path.exists() else {}
    gc_path.write_text(json.dumps({**gc, **QWEN_LIKE}))
    llava = build_tiny_llava(root / "tiny-llava")
    procs = {"plain": TransformersServe(plain), "qwen": TransformersServe(qwen), "llava": TransformersServe(llava)}
    try:
        for p in procs.values():
            p.start(root)
        yield procs
    finally:
        for p in procs.values():
            p.stop()


def _model(name: str, srv: TransformersServe, **kw: object) -> dict:
    return {"name": name, "backend": "openai", "model": srv.model, "base_urls": srv.base_url, "timeout_s": 120,
            "max_retries": 1, "max_concurrency": 2, **kw}


def test_no_generation_config_default_leaks_through_transformers_serve(servers, tmp_path: Path) -> None:
    cfg = {"suite": "reports", "run_dir": str(tmp_path / "run"), "probe_sets": ["phantom"], "phantom_images": 2,
           "samples": 2, "max_new_tokens": 12, "semantic": "off", "bertscore": "off", "B": 20, "n_perm": 20,
           # concurrency 1: transformers serve seeds torch's global RNG per request, so two requests in flight
           # share one random stream and a sampled answer depends on the other's timing
           "models": [_model("plain", servers["plain"], text_only=True, max_concurrency=1),  # auto -> identified
                      _model("qwen-like", servers["qwen"], text_only=True, max_concurrency=1)]}
    res = api.run(cfg, progress=False)
    tidy = pd.read_parquet(res.results_parquet)
    assert tidy["error_kind"].isna().all(), tidy["error_message"].dropna().unique()[:3]
    a = tidy[tidy.model == "plain"].set_index(["case_id", "strategy", "sample_index"])["report"].sort_index()
    b = tidy[tidy.model == "qwen-like"].set_index(["case_id", "strategy", "sample_index"])["report"].sort_index()
    assert len(a) == 2 * (2 + 4 * 2)
    assert a.equals(b), pd.concat([a, b], axis=1, keys=["plain", "qwen-like"])[a != b].to_string()
    # the sampled strategies really sample: not all equal to greedy (top_k 1 would make them greedy)
    g = a.xs("greedy", level="strategy").droplevel("sample_index")
    t = a.xs("top_p", level="strategy")
    assert any(t.loc[(c, s)] != g.loc[c] for c, s in t.index)
    eff = D.effective_table(tidy, 12)
    assert set(eff["server"]) == {"transformers"}
    assert (eff["mismatch"] == "").all(), eff[["model", "strategy", "mismatch"]]


def test_every_suite_model_stage_runs_through_transformers_serve(servers, tmp_path: Path) -> None:
    from medvlm_audit.suites.stress.embedded import build_phantom_mcq

    llava = servers["llava"]
    items = build_phantom_mcq(tmp_path / "mcq", n_items=4, size=64).source
    stress = {"suite": "stress", "run_dir": str(tmp_path / "stress"), "probe_sets": [str(items)],
              "conditions": ["original", "no_image", "reordered"], "decoding": {"max_new_tokens": 6},
              "models": [_model("tiny-llava", llava, server="transformers")]}
    res = api.run(stress, progress=False)
    tidy = api.tidy(res.run_dir)
    assert len(tidy) > 0 and tidy["error_kind"].isna().mean() > 0.95
    faith = {"suite": "faithfulness", "run_dir": str(tmp_path / "faith"), "probe_sets": ["phantom"],
             "phantom_items": 2, "decoding": {"max_new_tokens": 12}, "models": [_model("tiny-llava", llava)],
             "judges": [{"name": "reference-judge", "backend": "faithfulness-reference",
                         "behaviour": "reference-judge"}], "judge_axes": ["ca"]}
    res = api.run(faith, progress=False)
    assert res.summary.per_model["tiny-llava"]["errors"] == 0
    assert api.report(res.run_dir).is_file()
    # grounding: images as data URLs; transformers serve returns no log-probabilities, so no confidence
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import make_tiny_probeset

    make_tiny_probeset(tmp_path / "data", n=4)
    grounding = {"suite": "grounding", "run_dir": str(tmp_path / "grounding"),
                 "probe_sets": [str(tmp_path / "data" / "probeset")], "conditions": ["original", "no_image"],
                 "decoding": {"max_new_tokens": 4}, "models": [_model("tiny-llava", llava)]}
    res = api.run(grounding, progress=False)
    tidy = api.tidy(res.run_dir)
    assert len(tidy) == 8 and tidy["error_kind"].isna().all() and tidy["confidence"].isna().all()
    asked = res.summary.per_model["tiny-llava"]
    assert asked["asked"] > 0 and asked["missing_logprobs"] == asked["asked"]  # counted, so the report says it
