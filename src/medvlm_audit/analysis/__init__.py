"""Analyses of audit runs: the grounding analysis (categories, metrics with uncertainty, comparisons)."""

from __future__ import annotations

from medvlm_audit.analysis.grounding import GroundingAnalysis, analyse_grounding

__all__ = ["GroundingAnalysis", "analyse_grounding"]
