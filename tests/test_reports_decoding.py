"""Decoding strategies of the report audit and the backends' capability checks (before any request)."""

from __future__ import annotations

import json

import pytest

from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Message, ModelInput
from medvlm_audit.models.openai_compat import OpenAIChatModel
from medvlm_audit.suites.reports import decoding as D


def test_six_strategies_as_in_the_paper():
    s = D.STRATEGIES
    assert list(s) == ["greedy", "beam4", "t0.3", "t0.7", "top_k", "top_p"]
    assert all(x.decoding.max_new_tokens == 512 for x in s.values())
    assert s["greedy"].decoding.temperature == 0 and s["beam4"].decoding.num_beams == 4
    assert (s["t0.3"].decoding.temperature, s["t0.3"].decoding.top_p) == (0.3, 0.95)
    assert (s["t0.7"].decoding.temperature, s["t0.7"].decoding.top_p) == (0.7, 0.95)
    assert (s["top_k"].decoding.temperature, s["top_k"].decoding.top_k) == (1.0, 50)
    assert (s["top_p"].decoding.temperature, s["top_p"].decoding.top_p) == (1.0, 0.9)
    assert [D.samples_for(x, 5) for x in s.values()] == [1, 1, 5, 5, 5, 5]
    with pytest.raises(ConfigError, match="unknown decoding strategy 'nucleus'"):
        D.strategy("nucleus")


def _client(server: str) -> OpenAIChatModel:
    return OpenAIChatModel("m", "served", "http://127.0.0.1:9/v1", server=server)


def test_openai_server_refuses_top_k_and_beams_before_the_run():
    with pytest.raises(ConfigError, match="'top_k'.*top_k=50 cannot be sent to server: openai.*set server:"):
        D.check_model(_client("openai"), ["greedy", "top_k"])
    with pytest.raises(ConfigError, match="'beam4'.*beam search"):
        D.check_model(_client("openai"), ["greedy", "beam4"])
    D.check_model(_client("openai"), ["greedy", "t0.3", "t0.7", "top_p"])
    D.check_model(_client("vllm"), D.DEFAULT_STRATEGIES)
    D.check_model(_client("transformers"), D.DEFAULT_STRATEGIES)
    with pytest.raises(ConfigError, match="'beam4'.*server: sglang"):
        D.check_model(_client("sglang"), D.DEFAULT_STRATEGIES)
    with pytest.raises(ConfigError, match="'t0.3'.*server: ollama.*top_k 40"):
        D.check_model(_client("ollama"), ["greedy", "t0.3"])
    with pytest.raises(ConfigError, match="'top_k'.*server: auto \\(the engine could not be identified\\)"):
        D.check_model(_client("auto"), ["greedy", "top_k"])
    with pytest.raises(ConfigError, match="server must be"):
        _client("triton")


def test_vllm_body_carries_the_strategy():
    m = _client("vllm")
    for name, want in [("beam4", {"use_beam_search": True, "n": 4, "temperature": 0.0, "top_k": -1}),
                       ("top_k", {"top_k": 50, "temperature": 1.0}),
                       ("top_p", {"top_p": 0.9, "temperature": 1.0, "seed": 42 + 3})]:
        inp = ModelInput((Message("user", "Write the report."),), (), D.strategy(name).decoding, sample_index=3)
        body = json.loads(m.encode_payload(inp))
        assert {k: body[k] for k in want} == want
        assert body["max_tokens"] == 512 and "best_of" not in body
