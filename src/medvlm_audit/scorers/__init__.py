"""Scorers: turn a model's raw text (and first-token log-probabilities) into an answer and a confidence."""

from medvlm_audit.scorers.yesno import UNPARSED, p_yes, parse_yes_no

__all__ = ["UNPARSED", "p_yes", "parse_yes_no"]
