"""Image render workers scale with the cores a run may use (2 to 8) when the config names none, and the run's
recorded config says the number used."""

from __future__ import annotations

import os

import pytest

from medvlm_audit.config import RunConfig, default_render_workers


@pytest.mark.parametrize(("cores", "workers"), [(1, 2), (2, 2), (3, 2), (4, 3), (9, 8), (16, 8), (128, 8)])
def test_default_render_workers(cores: int, workers: int) -> None:
    assert default_render_workers(cores) == workers


def test_this_process_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(6)), raising=False)
    assert default_render_workers() == 5


def test_config_records_the_number_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    base = dict(suite="grounding", probe_sets=["phantom"], models=[{"name": "m", "backend": "openai",
                                                                     "model": "x", "base_url": "http://h/v1"}])
    cfg = RunConfig.model_validate(base)
    assert cfg.workers == 8 and cfg.recorded()["workers"] == 8
    assert RunConfig.model_validate({**base, "workers": 3}).recorded()["workers"] == 3
