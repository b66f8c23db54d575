"""A small grounding demo run (60 phantom cases), built once per test session and shared by the gate and view
tests: call :func:`small_grounding_demo` from a module-scoped fixture with ``tmp_path_factory``."""

from __future__ import annotations

from pathlib import Path

_BUILT: dict[str, Path] = {}


def small_grounding_demo(tmp_path_factory) -> Path:
    """The run folder of a 60-case grounding demo with its report (built on first use, then reused)."""
    if "run" not in _BUILT:
        from medvlm_audit import api

        out = tmp_path_factory.mktemp("grounding-demo-small")
        res = api.demo("grounding", out, n_cases=60, n_train=600, progress=False, log=lambda *_: None)
        _BUILT["run"] = Path(res.run_dir)
    return _BUILT["run"]
