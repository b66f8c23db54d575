"""Scorers: turn a model's raw text (and first-token log-probabilities) into a :class:`Score`.

One ``Score`` type and one ``strip_reasoning`` (:mod:`.score`); the yes/no parser and P(yes) of paper 000
(:mod:`.yesno`); the multiple-choice option parser of paper 003 (:mod:`.option`).
"""

from medvlm_audit.scorers.option import ParsedOption, parse_option, score_option
from medvlm_audit.scorers.score import STATUSES, Score, strip_reasoning
from medvlm_audit.scorers.yesno import UNPARSED, p_yes, parse_yes_no, score_yes_no

__all__ = ["STATUSES", "UNPARSED", "ParsedOption", "Score", "p_yes", "parse_option", "parse_yes_no", "score_option",
           "score_yes_no", "strip_reasoning"]
