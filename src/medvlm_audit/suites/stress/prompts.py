"""MCQ prompts of the stress suite: the authors' released protocol (default) and the project's own wording.

Paper 003 (Appendix E) asks for the final answer inside an ``<answer>`` tag; the prompt text itself is not in
the paper's text conversion, but the authors' released harness (``aiden-ygu/health-ai-readiness-eval``) is
readable in a public copy: ``KAVentures/health-ai-readiness-public-subset-partial-replication``, files
``src/prompts.py`` (``SYSTEM_PROMPTS['default']``, ``build_generic_mcq_query``, ``build_mcq_query_nejm_cot``) and
``src/configs/dataset_config.py`` (JAMA, NEJM and every stress-test set ``ST_*`` use the ``'default'``
system prompt), commit 09d01e40c254688891caaf98d1f8b1168e718cf5. The ``paper`` protocol uses them verbatim:

* system message: :data:`PAPER_SYSTEM_PROMPT` (the same in the image-free conditions: the released runner
  passes it whatever the mode, and only the image is removed);
* user message (``build_generic_mcq_query``): :data:`PAPER_HEADER`, a newline, the question, a newline, each
  option as ``"A. text   "`` (three trailing spaces, all on one line), then a newline and
  :data:`PAPER_INSTRUCTION`;
* the chain-of-thought variant (T6, ``build_mcq_query_nejm_cot``): the same message with
  :data:`PAPER_COT_INSTRUCTION` (``<thinking></thinking>`` then ``<answer></answer>`` tags).

The release's JAMA and NEJM builders differ only in how the options reach the question (JAMA: one
``Options:`` line with irregular spacing; NEJM: inside the item's own text); the generic builder is the one
that takes an item's option list, as this suite's items are. The ``project`` protocol keeps the wording used
before the release was found (no system message, options one per line, an ``<answer>B. text</answer>``
example). :func:`options_from_prompt` reads both layouts back (what the reference answerers see).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from medvlm_audit.models.base import Message
from medvlm_audit.suites.stress.items import LETTERS

PROMPT_VARIANTS: tuple[str, ...] = ("default", "cot")
PROTOCOLS: tuple[str, ...] = ("paper", "project")
DEFAULT_PROTOCOL = "paper"

# -- the authors' released protocol, verbatim (see the module docstring for the source) ---------------------
PAPER_SYSTEM_PROMPT = (
    "You are a helpful medical assistant that answers multiple choice questions about the provided image."
)
PAPER_HEADER = "The following is a multiple choice question with answer options."
PAPER_INSTRUCTION = (
    "Please respond only with the index and the content of the option you believe is correct. "
    "Enclose your answer within <answer></answer> tags."
)
PAPER_COT_INSTRUCTION = (
    "Please think step by step, enclosing the thought process within <thinking></thinking> tags. "
    "Provide answer with the index and content of the option, and place it within <answer></answer> tags."
)
_PAPER_OPTION_SEP = "   "

# -- the project's own wording (protocol "project") ---------------------------------------------------------
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
    """Options one per line as ``A. text`` (the project layout)."""
    return "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))


def _check(variant: str, protocol: str) -> None:
    if variant not in PROMPT_VARIANTS:
        raise ValueError(f"unknown stress prompt variant {variant!r}; known: {PROMPT_VARIANTS}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown stress prompt protocol {protocol!r}; known: {PROTOCOLS}")


def mcq_prompt(question: str, options: Sequence[str], variant: str = "default",
               protocol: str = DEFAULT_PROTOCOL) -> str:
    """The user message of one MCQ trial."""
    _check(variant, protocol)
    if protocol == "paper":
        instr = PAPER_INSTRUCTION if variant == "default" else PAPER_COT_INSTRUCTION
        opts = "".join(f"{LETTERS[i]}. {o}{_PAPER_OPTION_SEP}" for i, o in enumerate(options))
        return f"{PAPER_HEADER}\n{question}\n{opts}\n{instr}"
    instr = DEFAULT_INSTRUCTION if variant == "default" else COT_INSTRUCTION
    return f"{question.strip()}\n\nOptions:\n{format_options(options)}\n\n{instr}"


def mcq_messages(question: str, options: Sequence[str], variant: str = "default",
                 protocol: str = DEFAULT_PROTOCOL) -> tuple[Message, ...]:
    """The messages of one MCQ trial: the released system prompt and the user message (``paper``), or the
    user message alone (``project``)."""
    user = Message("user", mcq_prompt(question, options, variant, protocol))
    return (Message("system", PAPER_SYSTEM_PROMPT), user) if protocol == "paper" else (user,)


def _paper_options(line: str) -> list[str]:
    """``"A. x   B. y   "`` -> [x, y] (each next letter must follow three spaces)."""
    if not line.startswith("A. "):
        return []
    opts: list[str] = []
    rest = line[3:]
    while True:
        nxt = f"{_PAPER_OPTION_SEP}{LETTERS[len(opts) + 1]}. " if len(opts) + 1 < len(LETTERS) else None
        cut = rest.find(nxt) if nxt else -1
        if cut < 0:
            opts.append(rest[: -len(_PAPER_OPTION_SEP)] if rest.endswith(_PAPER_OPTION_SEP) else rest.rstrip())
            return opts
        opts.append(rest[:cut])
        rest = rest[cut + len(nxt):]


_PAPER_TAIL = re.compile(r"\n(?:" + re.escape(PAPER_INSTRUCTION) + "|" + re.escape(PAPER_COT_INSTRUCTION) + r")$")


def options_from_prompt(prompt: str) -> tuple[str, list[str]]:
    """Read (question, options) back from a prompt built by :func:`mcq_prompt` (what simple models see)."""
    if prompt.startswith(PAPER_HEADER + "\n"):
        m = _PAPER_TAIL.search(prompt)
        if m is not None:
            body = prompt[len(PAPER_HEADER) + 1 : m.start()]
            question, sep, line = body.rpartition("\n")
            if sep:
                return question, _paper_options(line)
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
