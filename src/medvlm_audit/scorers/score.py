"""The one Score type every scorer returns, and the one ``strip_reasoning`` every parser reads answers through.

A :class:`Score` is what a response becomes: a ``status`` (``answer``, ``refusal``, ``abstain``, ``unparsed``,
``no_response``; DESIGN.md "Scorer"), the ``value`` (yes/no as 1/0, an option index, a free-text answer, a
judge's 1-5), a ``confidence`` (e.g. first-token P(yes); ``None`` when undefined) and the ``rule`` that matched.

>>> strip_reasoning("<think>It could be yes</think> No.<|im_end|>").strip()
'No.'
>>> Score("answer", 1, 0.8, "final line").ok
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["answer", "refusal", "abstain", "unparsed", "no_response"]
STATUSES: tuple[str, ...] = ("answer", "refusal", "abstain", "unparsed", "no_response")


@dataclass(frozen=True, slots=True)
class Score:
    status: Status
    value: Any = None
    confidence: float | None = None
    rule: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown score status {self.status!r}; known: {STATUSES}")

    @property
    def ok(self) -> bool:
        """An answer was read (the value enters the metric)."""
        return self.status == "answer"


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_OPEN_THINK = re.compile(r"^.*</think>", re.DOTALL | re.IGNORECASE)  # a trace whose opening tag was cut off
_UNCLOSED_THINK = re.compile(r"<think>.*$", re.DOTALL | re.IGNORECASE)  # a trace cut off before </think>
_ARTIFACTS = re.compile(
    r"<\|[^|>]*\|>|</?s>|<pad>|<unk>|<eos>|<bos>|<end_of_turn>|<start_of_turn>|\[/?INST\]|<image>|\u2581|\u0120|\u010a"
)


def strip_reasoning(text: str, *, artifacts: bool = True) -> str:
    """Remove ``<think>...</think>`` reasoning traces (and, with ``artifacts``, tokenizer artifacts).

    Everything after an unclosed ``<think>`` is reasoning (the trace was cut off before ``</think>``), so a
    truncated trace leaves nothing to parse rather than the trace's own answer words; a ``</think>`` whose
    opening tag was cut off drops everything before it."""
    t = _THINK.sub(" ", text)
    if "</think>" in t.lower():
        t = _OPEN_THINK.sub(" ", t)
    t = _UNCLOSED_THINK.sub(" ", t)
    if artifacts:
        t = _ARTIFACTS.sub(" ", t)
    return t
