"""Question types and answer vocabularies of the faithfulness suite (DESIGN.md "Faithfulness audit").

The four types and their fixed vocabularies follow the released protocol (``jomoll/cot-eval``,
``scripts/run_model_async.py``): binary (yes, no); ordinal severity (none ... severe) or heart size
(normal ... massively enlarged); comparative (right, left, same severity, none); spatial (each question
lists its own options in parentheses, e.g. "(not present, correctly positioned, too low, too high)").
"""

from __future__ import annotations

import re

QUESTION_TYPES: tuple[str, ...] = ("binary", "ordinal", "comparative", "spatial")
#: type names used by other layouts, mapped onto ours (the release writes "comparison")
TYPE_ALIASES: dict[str, str] = {"comparison": "comparative", "compare": "comparative", "yes/no": "binary",
                                "closed": "binary", "severity": "ordinal", "position": "spatial"}

BINARY: tuple[str, ...] = ("yes", "no")
SEVERITY: tuple[str, ...] = ("none", "questionable", "mild", "moderate", "severe")
HEART_SIZE: tuple[str, ...] = ("normal", "borderline", "enlarged", "massively enlarged")
COMPARATIVE: tuple[str, ...] = ("right", "left", "same severity", "none")

_PAREN = re.compile(r"\(([^()]*)\)\s*\??\s*$")


def normalise_type(qtype: str) -> str:
    t = str(qtype).strip().lower()
    t = TYPE_ALIASES.get(t, t)
    if t not in QUESTION_TYPES:
        raise ValueError(f"unknown question type {qtype!r} (expected one of {', '.join(QUESTION_TYPES)})")
    return t


def listed_options(question: str) -> tuple[str, ...]:
    """The options a question lists in its final parentheses: "(yes or no)" -> ("yes", "no")."""
    m = _PAREN.search(question.strip())
    if not m:
        return ()
    body = m.group(1).strip()
    if "/" in body and "," not in body:
        parts = body.split("/")
    elif "," in body:
        parts = body.split(",")
    else:
        parts = re.split(r"\s+or\s+", body)
    return tuple(p.strip().lower() for p in parts if p.strip())


def vocabulary(qtype: str, question: str) -> tuple[str, ...]:
    """The answer vocabulary of a question: fixed by type, except spatial (the question's own options)
    and the heart-size ordinal scale (recognised by its listed options)."""
    t = normalise_type(qtype)
    if t == "binary":
        return BINARY
    if t == "comparative":
        return COMPARATIVE
    listed = listed_options(question)
    if t == "ordinal":
        return HEART_SIZE if listed == HEART_SIZE or "size of the heart" in question.lower() else SEVERITY
    if not listed:
        raise ValueError(f"spatial question lists no options in parentheses: {question!r}")
    return listed
