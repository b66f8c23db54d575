"""The embedded default's synthetic chest-radiograph phantom: rendering, cohort, probe-set builder."""

from __future__ import annotations

from typing import Any

from medvlm_audit.phantom.anatomy import PHANTOM_FINDINGS, render_study, sample_attributes

__all__ = ["PHANTOM_FINDINGS", "build_phantom", "render_study", "sample_attributes"]


def __getattr__(name: str) -> Any:
    # lazy: render workers import this package and should not pay for pandas
    if name == "build_phantom":
        from medvlm_audit.phantom.build import build_phantom

        return build_phantom
    raise AttributeError(name)
