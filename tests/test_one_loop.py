"""One event loop per ``api.run`` (``aio.one_loop``): the endpoint check, the server identification and the
execution of an HTTP-model run all go on the same loop, where each used to start (and close) its own."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from conftest import make_tiny_probeset

from medvlm_audit import api
from medvlm_audit.aio import one_loop, run_sync
from medvlm_audit.testing.fake_openai import ThreadedFakeServer


def _count_loops(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    made: list[int] = []
    real = asyncio.events.new_event_loop
    main = threading.get_ident()

    def counting() -> asyncio.AbstractEventLoop:
        if threading.get_ident() == main:  # not the fake server's own loop
            made.append(1)
        return real()

    monkeypatch.setattr(asyncio.events, "new_event_loop", counting)
    return made


def test_an_http_model_run_starts_one_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_tiny_probeset(tmp_path / "data", n=4)
    with ThreadedFakeServer(delay_ms=1) as srv:
        made = _count_loops(monkeypatch)
        res = api.run({"suite": "grounding", "probe_sets": [str(tmp_path / "data" / "probeset")],
                       "run_dir": str(tmp_path / "run"), "conditions": ["original", "no_image"],
                       "models": [{"name": "vlm", "backend": "openai", "model": "fake-vlm",
                                   "base_urls": [srv.base_url]}]}, progress=False)
        assert srv.stats.total > 0
    assert res.summary.n_trials > 0
    assert len(made) == 1  # endpoint check + server identification + execution: three loops before


def test_one_loop_closes_its_loop_and_is_a_no_op_nested() -> None:
    async def loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    with one_loop():
        first = run_sync(loop())
        with one_loop():
            assert run_sync(loop()) is first
    assert first.is_closed()
    assert run_sync(loop()) is not first  # outside the block: a loop per call, as asyncio.run
