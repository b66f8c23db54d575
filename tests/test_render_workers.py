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


def test_pools_are_sized_by_the_cores_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    # audit D1: under taskset (or a container's CPU set) os.cpu_count() still counts every core, so `report`
    # forked its prepared process and figure workers onto one allowed core
    from medvlm_audit.cpus import usable_cpus
    from medvlm_audit.report import parallel
    from medvlm_audit.stats import kernels

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert usable_cpus() == 1 and default_render_workers() == 2
    assert parallel._workers(None, 10) == 1 and kernels._workers(None, 20) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert parallel._workers(None, 10) == parallel.MAX_WORKERS and kernels._workers(None, 20) == kernels._MAX_WORKERS
