"""Several base URLs: a dead replica is cooled down and skipped, the breaker counts per endpoint, the endpoint
check retries a dropped answer and starts without an unreachable replica while another answers."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp import web

from medvlm_audit.models.base import Decoding, Message, ModelInput
from medvlm_audit.models.openai_compat import OpenAIChatModel
from medvlm_audit.testing.fake_openai import FakeOpenAIServer

FAST = {"backoff_base_s": 0.05, "backoff_max_s": 2.0, "timeout_s": 5.0, "max_retries": 6}


def dead_url() -> str:
    with socket.socket() as s:  # a port nothing listens on (closed again at once)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def inputs(n: int) -> list[ModelInput]:
    return [ModelInput((Message("user", f"question {i}"),), (), Decoding()) for i in range(n)]


def test_a_dead_replica_is_skipped_and_loses_no_answer() -> None:
    async def go() -> tuple[list, dict, str | None]:
        async with FakeOpenAIServer(delay_ms=5) as srv:
            urls = [srv.base_url, dead_url(), srv.base_url.replace("127.0.0.1", "localhost"), srv.base_url + "/"]
            m = OpenAIChatModel("m", "vlm", urls, max_concurrency=8, **FAST)
            try:
                out = await m.generate(inputs(300))
            finally:
                await m.aclose()
            return out, m.endpoint_counts, m.stopped

    out, counts, stopped = asyncio.run(go())
    assert all(r.ok for r in out) and stopped is None
    dead = [n for url, n in counts.items() if url not in ("",)]
    total = sum(counts.values())
    dead_n = min(counts.values())
    assert dead_n <= 0.05 * total, counts  # was: a dead replica wins least-outstanding selection (46%)
    assert len(dead) == 4


def test_the_breaker_stops_a_model_only_when_every_endpoint_is_down() -> None:
    async def go(urls: list[str], n: int) -> tuple[list, str | None]:
        m = OpenAIChatModel("m", "vlm", urls, max_concurrency=4, circuit_breaker=4, **FAST)
        try:
            return await m.generate(inputs(n)), m.stopped
        finally:
            await m.aclose()

    async def three_dead() -> tuple[list, str | None]:
        async with FakeOpenAIServer() as srv:
            return await go([dead_url(), dead_url(), srv.base_url, dead_url()], 120)

    out, stopped = asyncio.run(three_dead())
    assert stopped is None and all(r.ok for r in out)  # was: stopped after 4 of 300 answers
    out, stopped = asyncio.run(go([dead_url(), dead_url()], 30))
    assert stopped is not None and "each of its 2 endpoints" in stopped
    assert {r.error.kind for r in out} <= {"connection", "not_asked"}


class _DropsFirst:
    """A server whose first GET /models drops the connection (as a restarting proxy might)."""

    def __init__(self) -> None:
        self.seen = 0

    async def models(self, request: web.Request) -> web.StreamResponse:
        self.seen += 1
        if self.seen == 1:
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        return web.json_response({"object": "list", "data": [{"id": "vlm", "object": "model"}]})


@pytest.mark.slow
def test_endpoint_check_retries_a_dropped_answer_and_drops_an_unreachable_replica() -> None:
    async def go() -> tuple:
        drops = _DropsFirst()
        app = web.Application()
        app.router.add_get("/v1/models", drops.models)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            url = f"http://127.0.0.1:{port}/v1"
            one = await OpenAIChatModel("m", "vlm", url, **FAST).check_endpoints()
            dead = dead_url()
            m = OpenAIChatModel("m", "vlm", [url, dead], **FAST)
            two = await m.check_endpoints()
            alone = await OpenAIChatModel("m", "vlm", [dead, dead_url()], **FAST).check_endpoints()
            return one, two, alone, drops.seen
        finally:
            await runner.cleanup()

    one, two, alone, seen = asyncio.run(go())
    assert one == ([], []) and seen >= 2  # a dropped answer is asked again, not a failed check
    problems, warnings = two
    assert problems == [] and len(warnings) == 1 and "starts without it" in warnings[0]
    assert len(alone[0]) == 2 and all("cannot connect" in p for p in alone[0])
