"""MCQ prompts of the stress suite: the default prompt asking for an ``<answer>`` tag, and the CoT variant.

Paper 003 (Appendix E) asks for the final answer inside an ``<answer>`` tag carrying the option index
(letter) and/or its content; the prompt text itself was lost in the paper's text conversion, so the
wording here is the project's, keeping that contract: options listed one per line as ``A. text``, the
answer as ``<answer>B. text</answer>``. The image-free conditions use the same prompt (only the image
is removed), exactly as in the paper.
"""

from __future__ import annotations

from collections.abc import Sequence

from medvlm_audit.suites.stress.items import LETTERS

PROMPT_VARIANTS: tuple[str, ...] = ("default", "cot")

DEFAULT_INSTRUCTION = (
    "Choose the single best option. Reply with the letter and the text of your choice inside an "
    "<answer> tag, for example <answer>B. option text</answer>, and nothing else."
)
COT_INSTRUCTION = (
    "Think step by step: describe the relevant findings, reason about each option, and then give the "
    "single best option as its letter and text inside an <answer> tag, for example "
    "<answer>B. option text</answer>, at the end of your reply."
)


def format_options(options: Sequence[str]) -> str:
    """Options one per line as ``A. text`` (the layout :func:`options_from_prompt` reads back)."""
    return "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))


def mcq_prompt(question: str, options: Sequence[str], variant: str = "default") -> str:
    """The user message of one MCQ trial."""
    if variant not in PROMPT_VARIANTS:
        raise ValueError(f"unknown stress prompt variant {variant!r}; known: {PROMPT_VARIANTS}")
    instr = DEFAULT_INSTRUCTION if variant == "default" else COT_INSTRUCTION
    return f"{question.strip()}\n\nOptions:\n{format_options(options)}\n\n{instr}"


def options_from_prompt(prompt: str) -> tuple[str, list[str]]:
    """Read (question, options) back from a prompt built by :func:`mcq_prompt` (what simple models see)."""
    head, sep, rest = prompt.partition("\n\nOptions:\n")
    if not sep:
        return prompt, []
    opts: list[str] = []
    for line in rest.split("\n"):
        if len(line) >= 3 and line[1:3] == ". " and line[0] == LETTERS[len(opts)]:
            opts.append(line[3:])
        elif opts:
            break
    return head, opts
