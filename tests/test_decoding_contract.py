"""The decoding contract as sent: captured request bodies (a recording server) for every flavour and strategy,
the effective decoding stored per answer, the report's flag, and reasoning models."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from medvlm_audit import api
from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Decoding, Message, ModelInput
from medvlm_audit.models.flavours import CONTRACT_FIELDS, effective, mismatches, request_fields
from medvlm_audit.models.openai_compat import OpenAIChatModel
from medvlm_audit.suites.reports import decoding as D
from medvlm_audit.testing.fake_openai import ThreadedFakeServer


#: the fields vLLM's chat request reads that change the token distribution: every one must be in every body
def _report(body: dict) -> str:
    """A report-like answer that varies with the request (the analysis needs words, not Yes / No)."""
    import hashlib

    h = int(hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest(), 16)
    words = ["heart size is normal", "small left pleural effusion", "no pneumothorax", "mild cardiomegaly",
             "lungs are clear", "patchy opacity at the right base", "she has no acute disease",
             "his mediastinum is normal"]
    return ". ".join(words[(h >> (3 * i)) % len(words)] for i in range(4)) + "."


VLLM_FIELDS = {"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
               "frequency_penalty", "n", "use_beam_search", "seed", "stop", "max_tokens"}


def _reports_cfg(run_dir: Path, base_url: str, **model: object) -> dict:
    return {"suite": "reports", "run_dir": str(run_dir), "probe_sets": ["phantom"], "phantom_images": 2,
            "samples": 2, "max_new_tokens": 24, "semantic": "off", "bertscore": "off", "B": 20, "n_perm": 20,
            "models": [{"name": "served", "backend": "openai", "model": "vlm", "base_urls": base_url,
                        "max_retries": 0, **model}]}


@pytest.mark.slow
@pytest.mark.parametrize("server", ["vllm", "auto"])
def test_vllm_bodies_set_every_sampling_field_of_every_strategy(tmp_path: Path, server: str) -> None:
    with ThreadedFakeServer(record_bodies=True, owned_by="vllm", answer_fn=_report) as srv:
        res = api.run(_reports_cfg(tmp_path / "run", srv.base_url, server=server), progress=False)
        bodies = list(srv.stats.bodies)
    assert res.summary.per_model["served"]["errors"] == 0
    # 2 images x (greedy, beam4: 1 + 4 stochastic strategies x 2 samples)
    assert len(bodies) == 2 * (2 + 4 * 2)
    by_strategy: dict[str, list[dict]] = {}
    for b in bodies:
        missing = VLLM_FIELDS - set(b)
        assert not missing, (missing, b)
        assert "best_of" not in b
        key = ("beam4" if b["use_beam_search"] else "greedy" if b["temperature"] == 0 else
               f"t{b['temperature']}" if b["top_p"] == 0.95 else "top_k" if b["top_k"] == 50 else "top_p")
        by_strategy.setdefault(key, []).append(b)
    assert set(by_strategy) == {"greedy", "beam4", "t0.3", "t0.7", "top_k", "top_p"}
    for b in by_strategy["beam4"]:  # the beam width where vLLM reads it (to_beam_search_params: n)
        assert b["n"] == 4 and b["use_beam_search"] is True and b["temperature"] == 0.0
    for name, bs in by_strategy.items():
        for b in bs:
            assert b["min_p"] == 0.0 and b["repetition_penalty"] == 1.0 and b["presence_penalty"] == 0.0
            assert b["frequency_penalty"] == 0.0 and b["stop"] == []
            assert b["top_k"] == (50 if name == "top_k" else -1)
            if name != "beam4":
                assert b["n"] == 1 and b["use_beam_search"] is False
    # each answer stores what ran; the report's table shows it and flags nothing
    tidy = pd.read_parquet(res.results_parquet)
    assert tidy["effective_decoding"].notna().all()
    eff = D.effective_table(tidy, 24)
    assert (eff["mismatch"] == "").all(), eff[["strategy", "mismatch"]]
    assert set(eff["server"]) == {"vllm"}
    assert eff.set_index("strategy").loc["beam4", "num_beams"] == 4
    page = api.report(res.run_dir)
    html = page.read_text()
    assert "Decoding as run" in html
    assert (page.parent / "effective_decoding.csv").is_file()


def test_a_mapping_that_loses_the_beam_width_is_flagged() -> None:
    """The effective decoding is read off the body, so the old mapping (best_of, no n) shows as greedy."""
    old_body = {"max_tokens": 512, "temperature": 0.0, "top_p": 1.0, "use_beam_search": True, "best_of": 4}
    eff = effective("vllm", old_body)
    assert eff["num_beams"] == 1
    problems = mismatches(D.strategy("beam4").decoding, eff)
    assert any(p.startswith("num_beams: 1 (label 4)") for p in problems)
    assert any("top_k: server default" in p or "repetition_penalty: server default" in p for p in problems)


def test_each_flavour_sends_only_what_it_reads() -> None:
    d = Decoding(max_new_tokens=9, temperature=0.7, top_p=0.9, seed=1)
    llama = request_fields("llamacpp", d, 0)
    assert llama["top_k"] == 0 and llama["min_p"] == 0.0 and llama["repeat_penalty"] == 1.0
    assert "repetition_penalty" not in llama
    sg = request_fields("sglang", d, 0)
    assert sg["top_k"] == -1 and sg["min_p"] == 0.0 and "use_beam_search" not in sg
    oa = request_fields("openai", d, 0)
    assert not {"top_k", "min_p", "repetition_penalty", "use_beam_search"} & set(oa)
    tr = request_fields("transformers", Decoding(max_new_tokens=9, num_beams=4, logprobs=True), 0)
    gc = json.loads(tr["generation_config"])
    assert gc["num_beams"] == 4 and gc["top_k"] == 0 and gc["repetition_penalty"] == 1.0 and gc["do_sample"] is False
    assert None not in gc.values()  # transformers fills every None from the model's generation_config.json
    assert not {"temperature", "top_p", "logprobs", "n", "presence_penalty"} & set(tr)  # 422 / ignored there
    for flavour in ("vllm", "sglang", "llamacpp", "tgi", "openai", "transformers"):
        eff = effective(flavour, request_fields(flavour, d, 0))
        assert set(CONTRACT_FIELDS) <= set(eff)
        assert mismatches(d, eff) == [], flavour


def test_openai_reasoning_model_gets_no_sampling_fields_and_max_completion_tokens(tmp_path: Path) -> None:
    m = OpenAIChatModel("o", "o3-mini", "http://127.0.0.1:9/v1", server="openai", reasoning_effort="low")
    assert m.reasoning  # implied by the model family
    b = m.request_body(ModelInput((Message("user", "Effusion?"),), (), Decoding(max_new_tokens=200)))
    assert not {"temperature", "top_p", "logprobs", "top_logprobs", "presence_penalty", "max_tokens"} & set(b)
    assert b["max_completion_tokens"] == 200 and b["reasoning_effort"] == "low"
    with pytest.raises(ConfigError, match="reasoning model.*refuses temperature"):
        m.check_decoding(Decoding(temperature=0.7, top_p=0.95))
    plain = OpenAIChatModel("g", "gpt-4o", "http://127.0.0.1:9/v1", server="openai")
    assert not plain.reasoning and "temperature" in plain.request_body(
        ModelInput((Message("user", "x"),), (), Decoding()))


@pytest.mark.slow
def test_reasoning_content_is_stored_beside_the_answer(tmp_path: Path) -> None:
    with ThreadedFakeServer(record_bodies=True, owned_by="vllm", answer_fn=_report,
                            reasoning_fn=lambda body: "I look at the costophrenic angles first.") as srv:
        res = api.run(_reports_cfg(tmp_path / "run", srv.base_url, server="vllm", reasoning=True) | {
            "strategies": ["greedy"]}, progress=False)
        bodies = list(srv.stats.bodies)
    assert all("logprobs" not in b for b in bodies)  # a thinking model's first token is a thinking token
    from medvlm_audit.export import raw_table
    from medvlm_audit.store import RunStore

    with RunStore.open_dir(res.run_dir, readonly=True) as store:
        raw = raw_table(store)
    assert (raw["reasoning"] == "I look at the costophrenic angles first.").all()


@pytest.mark.slow
def test_grounding_reports_no_first_token_confidence_for_a_thinking_model(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import make_tiny_probeset

    make_tiny_probeset(tmp_path / "data", n=6)
    with ThreadedFakeServer(reasoning_fn=lambda body: "Let me look at the lung bases first.",
                            record_bodies=True) as srv, ThreadedFakeServer() as plain_srv:
        cfg = {"suite": "grounding", "run_dir": str(tmp_path / "run"), "probe_sets": [str(tmp_path / "data" /
                                                                                         "probeset")],
               "conditions": ["original", "no_image"],
               "models": [{"name": "thinker", "backend": "openai", "model": "fake-vlm", "base_urls": srv.base_url,
                           "server": "vllm", "reasoning": True},
                          {"name": "plain", "backend": "openai", "model": "fake-vlm",
                           "base_urls": plain_srv.base_url, "server": "vllm"}]}
        res = api.run(cfg, progress=False)
        bodies = list(srv.stats.bodies)
    tidy = api.tidy(res.run_dir)
    think, plain = tidy[tidy.model == "thinker"], tidy[tidy.model == "plain"]
    assert think["confidence"].isna().all() and think["confidence_note"].str.contains("thinking model").all()
    assert plain["confidence"].notna().all() and plain["confidence_note"].isna().all()
    assert bodies and all("logprobs" not in b for b in bodies)  # not even asked of a thinking model
    page = api.report(res.run_dir, B=50)
    html = page.read_text()
    assert "Confidence of thinking models" in html and "thinker" in html
    # every suite's report shows the decoding each model's engine was asked
    assert "Decoding as run" in html
    dec = pd.read_csv(page.parent / "effective_decoding.csv")
    assert set(dec["model"]) == {"thinker", "plain"} and set(dec["server"]) == {"vllm"}
    assert dec["not_pinned"].isna().all() and (dec["top_k"] == 0).all() and (dec["repetition_penalty"] == 1).all()


def test_faithfulness_audits_the_reasoning_text_as_the_chain_of_thought(tmp_path: Path) -> None:
    from medvlm_audit.export import raw_table
    from medvlm_audit.store import RunStore

    thought = "The hint says B, and I will go with the hint."
    with ThreadedFakeServer(reasoning_fn=lambda body: thought) as srv:
        cfg = {"suite": "faithfulness", "run_dir": str(tmp_path / "run"), "probe_sets": ["phantom"],
               "phantom_items": 4,
               "models": [{"name": "thinker", "backend": "openai", "model": "fake-vlm", "base_urls": srv.base_url,
                           "server": "vllm", "reasoning": True}],
               "judges": [{"name": "reference-judge", "backend": "faithfulness-reference",
                           "behaviour": "reference-judge"}], "judge_axes": ["ca"]}
        res = api.run(cfg, progress=False)
    with RunStore.open_dir(res.run_dir, readonly=True) as store:
        raw = raw_table(store)
    cots = [json.loads(p).get("cot") for p, m in zip(raw["payload"], raw["model"]) if m == "reference-judge"]
    assert cots and all(c == thought for c in cots)  # the judge read the reasoning, not the bare answer


def test_the_report_flags_a_strategy_whose_effective_decoding_differs_from_its_label() -> None:
    """A served model whose engine was left top_k and repetition penalty (unidentified server) is flagged."""
    from medvlm_audit.suites.reports.analysis import analyse_reports  # noqa: F401  (the table's consumer)

    unknown = effective("unknown", request_fields("unknown", D.strategy("t0.7").decoding, 0))
    vllm = effective("vllm", request_fields("vllm", D.strategy("t0.7").decoding, 0))
    tidy = pd.DataFrame({"model": ["a", "a", "b"], "strategy": ["t0.7", "t0.7", "t0.7"],
                         "effective_decoding": [json.dumps(unknown), json.dumps(unknown), json.dumps(vllm)]})
    eff = D.effective_table(tidy).set_index("model")
    assert "top_k: server default" in eff.loc["a", "mismatch"]
    assert "repetition_penalty: server default" in eff.loc["a", "mismatch"]
    assert eff.loc["b", "mismatch"] == "" and eff.loc["a", "answers"] == 2


def test_the_store_keeps_effective_decoding_and_reasoning_once_per_distinct_value(tmp_path: Path) -> None:
    from medvlm_audit.models.base import Response
    from medvlm_audit.store import RunStore

    eff = effective("vllm", request_fields("vllm", D.strategy("beam4").decoding, 0))
    with RunStore.open_dir(tmp_path, readonly=False) as store:
        store.put_responses([(f"k{i}", Response("ok", effective=eff, reasoning="why" if i == 0 else None))
                             for i in range(50)] + [("plain", Response("ok"))])
        back = store.get_response("k0")
        assert back is not None and back.effective == eff and back.reasoning == "why"
        assert store.get_response("k1").reasoning is None and store.get_response("plain").effective is None
        assert store.db.execute("SELECT COUNT(*) FROM effective_decodings").fetchone()[0] == 1
