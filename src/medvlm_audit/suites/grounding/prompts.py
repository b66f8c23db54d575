"""Prompt templates of the grounding audit, verbatim from paper 000 (Methods; Supplementary Note 1)."""

from __future__ import annotations

from medvlm_audit.findings import display_name
from medvlm_audit.suites.grounding.case import Case

PROMPT_VARIANTS: tuple[str, ...] = ("default", "terse", "radiologist")

FINDING_TEMPLATES: dict[str, str] = {
    "default": "Is {display} present in this chest X-ray? Answer with a single word: Yes or No.",
    "terse": "Is {display} present? Yes or No.",
    "radiologist": (
        "You are a radiologist reviewing a chest X-ray. Is {display} present? "
        "Answer with a single word: Yes or No."
    ),
}

SENTENCE_TEMPLATES: dict[str, str] = {
    "default": (
        "Does the following sentence accurately describe the findings visible in this chest X-ray?\n"
        "Sentence: \u201c{sentence}\u201d\n"
        "Answer with a single word: Yes or No."
    ),
    "terse": "Is this sentence accurate for this X-ray? \u201c{sentence}\u201d Yes or No.",
    "radiologist": (
        "You are a radiologist. Does the following sentence accurately describe findings in this chest X-ray?\n"
        "Sentence: \u201c{sentence}\u201d\n"
        "Answer with a single word: Yes or No."
    ),
}


def grounding_prompt(case: Case, variant: str = "default") -> str:
    """The yes/no question asked for a finding-presence or report-error case."""
    if variant not in PROMPT_VARIANTS:
        raise ValueError(f"unknown prompt variant {variant!r}; known: {PROMPT_VARIANTS}")
    if case.kind == "report_error":
        if not case.sentence:
            raise ValueError(f"case {case.case_id!r}: report_error case has no sentence")
        return SENTENCE_TEMPLATES[variant].format(sentence=case.sentence)
    if case.finding is None:
        raise ValueError(f"case {case.case_id!r}: finding_presence case has no finding")
    return FINDING_TEMPLATES[variant].format(display=display_name(case.finding))
