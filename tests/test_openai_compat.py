"""OpenAIChatModel against the fault-injecting fake server on 127.0.0.1, and the image encoder."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import numpy as np
import pytest

from medvlm_audit.errors import ConfigError, ImageError
from medvlm_audit.models.base import Decoding, ImageData, Message, ModelInput, Response, TextOnly
from medvlm_audit.models.encoding import data_url, decode_data_url, encode_image
from medvlm_audit.models.openai_compat import OpenAIChatModel, parse_retry_after, scrub
from medvlm_audit.testing import (
    FakeOpenAIServer,
    FakeServerProcess,
    FaultRule,
    ThreadedFakeServer,
    parse_fault_markers,
    yes_no_answer,
)

T = TypeVar("T")
KEY = "sk-test-0123456789abcdefSECRET"
FAST: dict[str, Any] = {"backoff_base_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 5.0}


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


def img(seed: int = 0, shape: tuple[int, ...] = (32, 40)) -> ImageData:
    return ImageData.from_array(np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8))


def q(text: str, *images: ImageData, **dec: Any) -> ModelInput:
    return ModelInput((Message("user", text),), tuple(images), Decoding(**dec))


def expected(model: OpenAIChatModel, inp: ModelInput) -> tuple[str, list[tuple[str, float]]]:
    """What the fake server answers for this input, computed from the exact body the model sends."""
    return yes_no_answer(model.build_body(inp))


# -- encoding ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(31, 17), (16, 16, 3), (5, 9, 4), (1, 1)])
@pytest.mark.parametrize("level", [0, 1, 6])
def test_png_data_url_round_trips_exact_pixels(shape: tuple[int, ...], level: int) -> None:
    px = np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)
    url = data_url(px, "png", png_level=level)
    assert url.startswith("data:image/png;base64,")
    back = decode_data_url(url)
    assert back.shape == px.shape and back.dtype == np.uint8
    assert np.array_equal(back, px)


def test_jpeg_keeps_grayscale_single_channel_and_is_close() -> None:
    y, x = np.mgrid[:64, :64]
    px = (100 + 50 * np.sin(x / 9.0) * np.cos(y / 7.0)).astype(np.uint8)
    url = data_url(px, "jpeg")
    assert url.startswith("data:image/jpeg;base64,")
    back = decode_data_url(url)
    assert back.shape == (64, 64)
    assert np.abs(back.astype(int) - px).mean() < 3


def test_encoding_rejects_bad_input_by_name() -> None:
    with pytest.raises(ImageError, match="uint8"):
        encode_image(np.zeros((4, 4), dtype=np.float32))
    with pytest.raises(ImageError, match="shape"):
        encode_image(np.zeros((4, 4, 2), dtype=np.uint8))
    with pytest.raises(ImageError, match="format"):
        encode_image(np.zeros((4, 4), dtype=np.uint8), "gif")


# -- request contents ----------------------------------------------------------------------------------


def test_images_arrive_before_text_as_decodable_data_urls_with_same_pixels() -> None:
    gray, rgb = img(1, (24, 30)), img(2, (20, 22, 3))
    inp = ModelInput((Message("system", "You are a radiologist."), Message("user", "Effusion?")), (gray, rgb))

    async def go() -> tuple[list[Response], list[dict[str, Any]]]:
        async with FakeOpenAIServer(record_bodies=True) as srv:
            m = OpenAIChatModel("m", "vlm-1", srv.base_url, **FAST)
            try:
                out = await m.generate([inp, q("text only question")])
            finally:
                await m.aclose()
            return out, srv.stats.bodies

    responses, bodies = run(go())
    assert all(r.ok for r in responses)
    by_text = {json.dumps(b["messages"][-1]["content"])[:40]: b for b in bodies}
    assert len(by_text) == 2
    body = next(b for b in bodies if len(b["messages"]) == 2)
    assert body["model"] == "vlm-1"
    assert body["messages"][0] == {"role": "system", "content": "You are a radiologist."}
    parts = body["messages"][1]["content"]
    assert [p["type"] for p in parts] == ["image_url", "image_url", "text"]
    assert parts[2]["text"] == "Effusion?"
    assert np.array_equal(decode_data_url(parts[0]["image_url"]["url"]), gray.pixels)
    assert np.array_equal(decode_data_url(parts[1]["image_url"]["url"]), rgb.pixels)
    text_only = next(b for b in bodies if len(b["messages"]) == 1)
    assert text_only["messages"] == [{"role": "user", "content": "text only question"}]


def test_decoding_parameters_map_to_body_fields() -> None:
    m = OpenAIChatModel("m", "vlm", "http://127.0.0.1:9/v1/", extra_body={"chat_template_kwargs": {"x": 1}})
    b = m.build_body(ModelInput((Message("user", "hi"),), (), Decoding(
        max_new_tokens=7, temperature=0.7, top_p=0.9, seed=5, logprobs=True, top_logprobs=4), sample_index=2))
    assert b["max_tokens"] == 7 and b["temperature"] == 0.7 and b["top_p"] == 0.9
    assert b["seed"] == 7  # seed + sample_index: repeated samples differ but are reproducible
    assert b["logprobs"] is True and b["top_logprobs"] == 4
    assert "top_k" not in b and "use_beam_search" not in b and "best_of" not in b
    assert b["chat_template_kwargs"] == {"x": 1}
    with pytest.raises(ConfigError, match="top_k=40 cannot be sent to server: auto.*set server:"):
        m.build_body(q("hi", top_k=40, logprobs=False))  # an unidentified engine: an extension is refused
    v = OpenAIChatModel("m", "vlm", "http://127.0.0.1:9/v1/", server="vllm")
    b2 = v.request_body(q("hi", top_k=40, logprobs=False))
    assert b2["top_k"] == 40 and b2["use_beam_search"] is False and b2["n"] == 1 and "best_of" not in b2
    assert "logprobs" not in b2 and "seed" not in b2
    b2 = v.request_body(q("hi", num_beams=3, logprobs=False))
    assert b2["n"] == 3 and b2["use_beam_search"] is True and b2["top_k"] == -1 and "best_of" not in b2
    m2 = OpenAIChatModel("m", "o-model", "http://127.0.0.1:9/v1", max_tokens_field="max_completion_tokens")
    b3 = m2.build_body(q("hi"))
    assert b3["max_completion_tokens"] == 16 and "max_tokens" not in b3
    # the serialised payload is the same body (images spliced in after serialisation)
    inp = q("look", img(3))
    assert json.loads(m.encode_payload(inp)) == m.build_body(inp)


def test_text_only_wrapper_sends_no_image() -> None:
    async def go() -> list[dict[str, Any]]:
        async with FakeOpenAIServer(record_bodies=True) as srv:
            inner = OpenAIChatModel("m", "vlm", srv.base_url, **FAST)
            m = TextOnly(inner)
            try:
                r = await m.generate([q("Effusion?", img(4))])
            finally:
                await m.aclose()
            assert r[0].ok
            return srv.stats.bodies

    (body,) = run(go())
    assert body["messages"] == [{"role": "user", "content": "Effusion?"}]


# -- responses -----------------------------------------------------------------------------------------


def test_answer_logprobs_usage_and_latency_are_parsed() -> None:
    inputs = [q(f"Is there a nodule? #{i}", img(i), top_logprobs=5) for i in range(6)]

    async def go() -> tuple[OpenAIChatModel, list[Response]]:
        async with FakeOpenAIServer(delay_ms=5) as srv:
            m = OpenAIChatModel("m", "vlm", srv.base_url, **FAST)
            try:
                return m, await m.generate(inputs)
            finally:
                await m.aclose()

    m, responses = run(go())
    answers = set()
    for inp, r in zip(inputs, responses):  # order preserved, each answer computed from its own request
        text, alts = expected(m, inp)
        assert r.ok and r.text == text and r.finish_reason == "stop"
        assert r.top_logprobs is not None and len(r.top_logprobs) == 5
        assert [t for t, _ in r.top_logprobs] == [t for t, _ in alts[:5]]
        assert np.allclose([lp for _, lp in r.top_logprobs], [lp for _, lp in alts[:5]])
        assert r.prompt_tokens == len(inp.messages[0].content.split()) + 256 and r.completion_tokens == 1
        assert r.latency_s is not None and 0.004 < r.latency_s < 2
        answers.add(r.text)
    assert answers == {"Yes", "No"}  # the answers really depend on the request


def test_missing_logprobs_is_a_normal_response() -> None:
    async def go() -> tuple[Response, int]:
        async with FakeOpenAIServer() as srv:
            m = OpenAIChatModel("m", "vlm", srv.base_url, **FAST)
            try:
                (r,) = await m.generate([q("Edema? [[fault:nologprobs]]")])
            finally:
                await m.aclose()
            return r, srv.stats.requests["Edema? [[fault:nologprobs]]"]

    r, n = run(go())
    assert r.ok and r.text in ("Yes", "No") and r.top_logprobs is None and n == 1


# -- faults --------------------------------------------------------------------------------------------

TRANSIENT = ["429", "500", "502", "503", "504", "drop", "disconnect", "malformed", "empty", "hang"]


@pytest.mark.slow
def test_every_transient_fault_is_retried_and_answered_once() -> None:
    prompts = {k: f"Pneumothorax? [[fault:{k}:2]]" for k in TRANSIENT}
    prompts["mixed"] = "Mixed? [[fault:429:1]][[fault:drop:1]][[fault:malformed:1]]"

    async def go() -> tuple[OpenAIChatModel, list[Response], Any]:
        async with FakeOpenAIServer() as srv:
            m = OpenAIChatModel("m", "vlm", srv.base_url, max_retries=4, backoff_base_s=0.01,
                                backoff_max_s=0.05, timeout_s=0.3)
            try:
                return m, await m.generate([q(p, img(1)) for p in prompts.values()]), srv.stats
            finally:
                await m.aclose()

    m, responses, stats = run(go())
    for (kind, p), r in zip(prompts.items(), responses):
        assert r.ok, (kind, r.error)
        assert r.text == expected(m, q(p, img(1)))[0]
        want = 4 if kind == "mixed" else 3
        assert stats.requests[p] == want, kind  # failed exactly as scheduled, then answered
        assert stats.answers[p] == 1, kind  # never answered twice
    assert stats.faults[prompts["mixed"]] == ["429", "drop", "malformed"]


def test_retry_after_is_honoured() -> None:
    p = "Cardiomegaly? [[fault:429:1:0.3]]"

    async def go() -> tuple[Response, float, int]:
        async with FakeOpenAIServer() as srv:
            m = OpenAIChatModel("m", "vlm", srv.base_url, **FAST)
            try:
                t0 = time.perf_counter()
                (r,) = await m.generate([q(p)])
                return r, time.perf_counter() - t0, srv.stats.requests[p]
            finally:
                await m.aclose()

    r, elapsed, n = run(go())
    assert r.ok and n == 2
    assert elapsed >= 0.3  # backoff alone would be <= 0.01 s


def test_parse_retry_after_seconds_and_http_date() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 7, usegmt=True)
    assert parse_retry_after(date, now=now) == pytest.approx(7.0)
    assert parse_retry_after(email.utils.formatdate(now - 50, usegmt=True), now=now) == 0.0
    assert parse_retry_after("0.25") == 0.25
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None and parse_retry_after("") is None


@pytest.mark.parametrize("status", ["400", "401", "403", "404", "422"])
def test_permanent_errors_are_recorded_not_retried(status: str) -> None:
    p = f"Atelectasis? [[fault:{status}]]"

    async def go() -> tuple[Response, int]:
        async with FakeOpenAIServer() as srv:
            m = OpenAIChatModel("m", "vlm", srv.base_url, **FAST)
            try:
                (r,) = await m.generate([q(p)])
            finally:
                await m.aclose()
            return r, srv.stats.requests[p]

    r, n = run(go())
    assert n == 1
    assert r.error is not None and r.text is None
    assert (r.error.kind, r.error.attempts, r.error.transient) == ("http_4xx", 1, False)
    assert status in r.error.message and "injected fault" in r.error.message


@pytest.mark.slow
def test_exhausted_retries_return_error_with_kind_and_attempts() -> None:
    cases = {
        "Opacity? [[fault:503]]": "http_5xx",
        "Opacity? [[fault:429]]": "http_429",
        "Opacity? [[fault:empty]]": "empty",
        "Opacity? [[fault:malformed]]": "malformed",
        "Opacity? [[fault:drop]]": "connection",
        "Opacity? [[fault:hang]]": "timeout",
    }

    async def go() -> tuple[list[Response], Any]:
        async with FakeOpenAIServer() as srv:
            m = OpenAIChatModel("m", "vlm", srv.base_url, max_retries=2, backoff_base_s=0.01,
                                backoff_max_s=0.02, timeout_s=0.2)
            try:
                return await m.generate([q(p) for p in cases]), srv.stats
            finally:
                await m.aclose()

    responses, stats = run(go())
    for (p, kind), r in zip(cases.items(), responses):
        assert r.error is not None and r.text is None, p
        assert (r.error.kind, r.error.attempts, r.error.transient) == (kind, 3, True), p
        assert stats.requests[p] == 3 and stats.answers[p] == 0


def test_no_duplicates_under_random_faults() -> None:
    rates = {"429": 0.1, "500": 0.1, "drop": 0.1, "malformed": 0.05, "empty": 0.05, "disconnect": 0.05}
    inputs = [q(f"Finding {i}?", img(i % 7)) for i in range(150)]

    async def go() -> tuple[list[Response], Any]:
        async with FakeOpenAIServer(fault_rates=rates, max_faults_per_key=2, seed=3) as srv:
            m = OpenAIChatModel("m", "vlm", srv.base_url, max_concurrency=16, max_retries=2, **{
                k: v for k, v in FAST.items()})
            try:
                return await m.generate(inputs), srv.stats
            finally:
                await m.aclose()

    responses, stats = run(go())
    assert all(r.ok for r in responses)
    n_faults = sum(len(v) for v in stats.faults.values())
    assert 30 < n_faults < 200  # the faults really happened
    for inp in inputs:
        key = inp.messages[0].content
        assert stats.answers[key] == 1
        assert stats.requests[key] == 1 + len(stats.faults.get(key, []))
    assert stats.total == len(inputs) + n_faults


def test_timeout_then_success() -> None:
    p = "Consolidation? [[fault:hang:1]]"

    async def go() -> tuple[Response, float]:
        async with FakeOpenAIServer() as srv:
            m = OpenAIChatModel("m", "vlm", srv.base_url, timeout_s=0.25, backoff_base_s=0.01)
            try:
                t0 = time.perf_counter()
                (r,) = await m.generate([q(p)])
                return r, time.perf_counter() - t0
            finally:
                await m.aclose()

    r, elapsed = run(go())
    assert r.ok and 0.25 <= elapsed < 2.0


def test_unreachable_endpoint_is_a_connection_error() -> None:
    async def go() -> Response:
        m = OpenAIChatModel("m", "vlm", "http://127.0.0.1:9/v1", max_retries=1, backoff_base_s=0.01, timeout_s=1)
        try:
            (r,) = await m.generate([q("x")])
        finally:
            await m.aclose()
        return r

    r = run(go())
    assert r.error is not None and r.error.kind == "connection" and r.error.attempts == 2


# -- concurrency and endpoints -------------------------------------------------------------------------


def test_concurrency_is_bounded() -> None:
    async def go() -> int:
        async with FakeOpenAIServer(delay_ms=30) as srv:
            m = OpenAIChatModel("m", "vlm", srv.base_url, max_concurrency=4, **FAST)
            try:
                # two generate calls at once share the same bound
                a, b = await asyncio.gather(m.generate([q(f"a{i}") for i in range(12)]),
                                            m.generate([q(f"b{i}") for i in range(12)]))
            finally:
                await m.aclose()
            assert all(r.ok for r in a + b) and [r.text for r in a] != []
            return srv.stats.max_inflight

    assert run(go()) == 4


def test_load_spreads_over_three_base_urls() -> None:
    async def go() -> list[int]:
        servers = [FakeOpenAIServer(delay_ms=10) for _ in range(3)]
        for s in servers:
            await s.start()
        try:
            m = OpenAIChatModel("m", "vlm", [s.base_url for s in servers], max_concurrency=9, **FAST)
            try:
                out = await m.generate([q(f"Spread {i}?") for i in range(90)])
            finally:
                await m.aclose()
            assert all(r.ok for r in out)
            return [s.stats.total for s in servers]
        finally:
            for s in servers:
                await s.stop()

    counts = run(go())
    assert sum(counts) == 90
    assert all(20 <= c <= 40 for c in counts), counts


def test_least_outstanding_favours_the_faster_replica() -> None:
    async def go() -> list[int]:
        servers = [FakeOpenAIServer(delay_ms=120), FakeOpenAIServer(delay_ms=5), FakeOpenAIServer(delay_ms=5)]
        for s in servers:
            await s.start()
        try:
            m = OpenAIChatModel("m", "vlm", [s.base_url for s in servers], max_concurrency=6, **FAST)
            try:
                out = await m.generate([q(f"Speed {i}?") for i in range(120)])
            finally:
                await m.aclose()
            assert all(r.ok for r in out)
            return [s.stats.total for s in servers]
        finally:
            for s in servers:
                await s.stop()

    slow, fast1, fast2 = run(go())
    assert slow + fast1 + fast2 == 120
    assert slow * 3 < min(fast1, fast2)  # round robin would give each 40


@pytest.mark.slow
def test_rate_limited_replica_is_avoided_while_it_cools_down() -> None:
    async def go() -> tuple[list[Response], Any, Any]:
        limited = FakeOpenAIServer(rules=[FaultRule("", "429", times=1, param=0.5)])
        healthy = FakeOpenAIServer(delay_ms=5)
        await limited.start()
        await healthy.start()
        try:
            m = OpenAIChatModel("m", "vlm", [limited.base_url, healthy.base_url], max_concurrency=2, **FAST)
            try:
                out = await m.generate([q(f"Cool {i}?") for i in range(10)])
            finally:
                await m.aclose()
            return out, limited.stats, healthy.stats
        finally:
            await limited.stop()
            await healthy.stop()

    out, lim, ok = run(go())
    assert all(r.ok for r in out)
    # one 429, then nothing is sent there until Retry-After has passed; its retry is answered
    assert lim.total == 2 and sum(len(v) for v in lim.faults.values()) == 1
    assert ok.total == 9


def test_azure_style_path_query_header_and_no_model_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZ_KEY", KEY)

    async def go() -> tuple[Response, Any]:
        async with FakeOpenAIServer(record_bodies=True) as srv:
            m = OpenAIChatModel("az", "gpt-4o-deploy", srv.root_url, api_key_env="AZ_KEY", api_style="azure",
                                azure_api_version="2024-10-21", **FAST)
            try:
                (r,) = await m.generate([q("Azure?", img(5))])
            finally:
                await m.aclose()
            return r, srv.stats

    r, stats = run(go())
    assert r.ok
    assert dict(stats.paths) == {"/openai/deployments/gpt-4o-deploy/chat/completions": 1}
    assert dict(stats.api_versions) == {"2024-10-21": 1}
    assert dict(stats.api_key) == {KEY: 1} and not stats.authorization
    assert "model" not in stats.bodies[0]


# -- credentials ---------------------------------------------------------------------------------------


def test_api_key_is_sent_but_never_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)
    prompts = ["Key? [[fault:echo_auth]]", "Key ok?", "Key 500? [[fault:500]]"]

    async def go() -> tuple[OpenAIChatModel, list[Response], Any]:
        async with FakeOpenAIServer() as srv:
            m = OpenAIChatModel("m", "vlm", srv.base_url, api_key_env="FAKE_OPENAI_KEY", max_retries=1, **FAST)
            try:
                return m, await m.generate([q(p) for p in prompts]), srv.stats
            finally:
                await m.aclose()

    m, responses, stats = run(go())
    assert stats.authorization[f"Bearer {KEY}"] == stats.total == 4
    echo, ok, err = responses
    assert echo.error is not None and echo.error.kind == "http_4xx" and "Incorrect API key" in echo.error.message
    assert ok.ok and err.error is not None
    everything = " ".join([repr(m), json.dumps(m.identity()), repr(responses), str(vars(m))])
    assert KEY not in everything and KEY[:12] not in everything
    assert m.identity() == {"backend": "openai", "model": "vlm", "revision": None, "api_style": "openai"}
    assert scrub(f"x Bearer {KEY} y {KEY}", [KEY]).count("[REDACTED]") == 2
    with_userinfo = OpenAIChatModel("m", "vlm", "http://user:pw-SECRET@127.0.0.1:9/v1?key=q-SECRET")
    assert "SECRET" not in repr(with_userinfo) and "SECRET" not in json.dumps(with_userinfo.identity())


def test_missing_key_variable_is_a_config_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    m = OpenAIChatModel("m", "vlm", "http://127.0.0.1:9/v1", api_key_env="NO_SUCH_KEY_VAR")
    with pytest.raises(ConfigError, match="NO_SUCH_KEY_VAR"):
        run(m.generate([q("x")]))
    with pytest.raises(ConfigError, match="NO_SUCH_KEY_VAR"):
        m.check_credentials()
    monkeypatch.setenv("NO_SUCH_KEY_VAR", "")
    with pytest.raises(ConfigError, match="not set or empty"):
        m.check_credentials()


def test_identity_ignores_urls_but_not_what_changes_answers() -> None:
    a = OpenAIChatModel("a", "vlm", ["http://h1/v1", "http://h2/v1"], revision="r1")
    b = OpenAIChatModel("b", "vlm", "http://h3/v1", revision="r1", max_concurrency=3)
    assert a.identity() == b.identity()
    assert OpenAIChatModel("c", "vlm", "http://h/v1", image_format="jpeg").identity() != b.identity()
    assert OpenAIChatModel("c", "vlm", "http://h/v1", extra_body={"top_k": 1}).identity() != b.identity()
    assert b.batch_size == 1 and b.max_concurrency == 3
    assert run(b.generate([])) == []
    with pytest.raises(ConfigError, match="api_style"):
        OpenAIChatModel("d", "vlm", "http://h/v1", api_style="anthropic")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="base_urls"):
        OpenAIChatModel("d", "vlm", [])


# -- the fake server itself -----------------------------------------------------------------------------


def test_fault_markers_apply_in_order() -> None:
    rules = parse_fault_markers("x [[fault:429:1:0.5]][[fault:drop:2]] [[fault:400]]")
    assert [(r.kind, r.times, r.param) for r in rules] == [("429", 1, 0.5), ("drop", 2, None), ("400", None, None)]
    with pytest.raises(ValueError, match="unknown fault kind"):
        FaultRule("x", "explode")


def test_threaded_server_rules_and_process_server() -> None:
    with ThreadedFakeServer(rules=[FaultRule("marker-A", "503", times=1)]) as srv:
        m = OpenAIChatModel("m", "vlm", srv.base_url, **FAST)

        async def go() -> list[Response]:
            try:
                return await m.generate([q("has marker-A"), q("plain")])
            finally:
                await m.aclose()

        out = run(go())
        assert all(r.ok for r in out)
        assert srv.stats.requests["has marker-A"] == 2 and srv.stats.faults["has marker-A"] == ["503"]
    with FakeServerProcess(0, ["--fault-rate", "500=0.5", "--max-faults-per-key", "1"]) as proc:
        m2 = OpenAIChatModel("m", "vlm", proc.base_url, **FAST)

        async def go2() -> list[Response]:
            try:
                return await m2.generate([q(f"p{i}") for i in range(20)])
            finally:
                await m2.aclose()

        assert all(r.ok for r in run(go2()))
        stats = proc.stats()
        assert sum(stats["answers"].values()) == 20 and set(stats["answers"].values()) == {1}
        assert stats["total"] == 20 + sum(len(v) for v in stats["faults"].values()) > 20


@pytest.mark.slow
def test_fake_server_speaks_the_official_sdk_protocol() -> None:
    """The official ``openai`` SDK (when installed) parses the fake server's answers, errors and Azure path."""
    openai = pytest.importorskip("openai")
    with ThreadedFakeServer() as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="sk-sdk-test", max_retries=0)
        messages = [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(img(9).pixels)}},
            {"type": "text", "text": "Effusion?"}]}]
        r = client.chat.completions.create(model="fake-vlm", messages=messages, logprobs=True, top_logprobs=3)
        text, alts = yes_no_answer({"messages": messages})
        assert r.choices[0].message.content == text
        assert [t.token for t in r.choices[0].logprobs.content[0].top_logprobs] == [t for t, _ in alts[:3]]
        with pytest.raises(openai.RateLimitError) as exc:
            client.chat.completions.create(model="fake-vlm", messages=[{"role": "user", "content": "[[fault:429:1:0.1]]"}])
        assert exc.value.response.headers["retry-after"] == "0.1"
        az = openai.AzureOpenAI(azure_endpoint=srv.root_url, api_key="az-sdk-key", api_version="2024-10-21",
                                max_retries=0)
        assert az.chat.completions.create(model="dep1", messages=[{"role": "user", "content": "hi"}]).choices
        assert srv.stats.paths["/openai/deployments/dep1/chat/completions"] == 1
        assert dict(srv.stats.api_key) == {"az-sdk-key": 1}


def test_effective_decoding_with_the_same_echo_is_one_shared_dict() -> None:
    """Answers whose decoding and server echo are alike share one effective-decoding dict (the store serialises it
    once per object); a different echo, even 1 against 1.0, gets its own."""
    m = OpenAIChatModel("m", "vlm", "http://127.0.0.1:9/v1/")
    eff = {"max_tokens": 8, "temperature": 0.0}
    a = m._with_echo(eff, {"model": "vlm", "temperature": 1})
    assert a == {**eff, "echo": {"model": "vlm", "temperature": 1}}
    assert m._with_echo(eff, {"model": "vlm", "temperature": 1}) is a
    b = m._with_echo(eff, {"model": "vlm", "temperature": 1.0})
    assert b is not a and isinstance(b["echo"]["temperature"], float)
    assert m._with_echo(dict(eff), {"model": "vlm", "temperature": 1}) is not a  # another decoding object
    c = m._with_echo(eff, {"model": "vlm", "stop": ["x"]})  # not hashable: a fresh dict, same content
    assert c == {**eff, "echo": {"model": "vlm", "stop": ["x"]}}
