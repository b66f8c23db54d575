"""Scorers: turn a model's raw text (and first-token log-probabilities) into an answer and a confidence."""

from medvlm_audit.scoring.yesno import UNPARSED, parse_yes_no, p_yes

__all__ = ["UNPARSED", "parse_yes_no", "p_yes"]
