"""Suites: which conditions apply to which cases, how answers are scored, which analyses run."""

from medvlm_audit.suites.base import Plan, PlanSource, Skip, Trial

__all__ = ["Plan", "PlanSource", "Skip", "Trial"]
