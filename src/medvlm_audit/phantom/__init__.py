"""The embedded defaults' synthetic chest-radiograph phantom: rendering and the cohort (the grounding probe-set builder
is the grounding suite's: ``suites/grounding/phantom_probeset.py``)."""

from __future__ import annotations

from medvlm_audit.phantom.anatomy import PHANTOM_FINDINGS, render_study, sample_attributes

__all__ = ["PHANTOM_FINDINGS", "render_study", "sample_attributes"]
