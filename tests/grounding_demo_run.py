"""Small demo runs (grounding: 60 phantom cases; faithfulness: 12 items; reports: 8 images; stress: its default),
built once per test session and shared by the gate and view tests: call them from a module-scoped fixture with
``tmp_path_factory``."""

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


def small_faithfulness_demo(tmp_path_factory) -> Path:
    """The run folder of a 12-item faithfulness demo (three reference reasoners and the reference judge) with its
    report (built on first use, then reused)."""
    if "faith" not in _BUILT:
        from medvlm_audit import api

        out = tmp_path_factory.mktemp("faithfulness-demo-small")
        res = api.demo("faithfulness", out, n_items=12, progress=False, log=lambda *_: None)
        _BUILT["faith"] = Path(res.run_dir)
    return _BUILT["faith"]


def small_reports_demo(tmp_path_factory) -> Path:
    """The run folder of an 8-image reports demo (one sample per stochastic strategy) with its report."""
    if "reports" not in _BUILT:
        from medvlm_audit import api

        out = tmp_path_factory.mktemp("reports-demo-small")
        res = api.demo("reports", out, n_images=8, samples=1, progress=False, log=lambda *_: None)
        _BUILT["reports"] = Path(res.run_dir)
    return _BUILT["reports"]


def small_stress_demo(tmp_path_factory) -> Path:
    """The run folder of the stress suite's embedded default (phantom multiple-choice items) with its report."""
    if "stress" not in _BUILT:
        from medvlm_audit import api

        out = tmp_path_factory.mktemp("stress-demo")
        res = api.demo("stress", out, progress=False, log=lambda *_: None)
        _BUILT["stress"] = Path(res.run_dir)
    return _BUILT["stress"]
