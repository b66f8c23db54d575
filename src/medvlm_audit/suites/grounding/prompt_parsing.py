"""Read a yes/no question back from its prompt text: the queried finding, or the report sentence under review.

Simple models (the reference panel) see only the prompt, so they recover what is asked from the words:
``finding_from_prompt`` finds a finding's display name in the question; for report-error prompts
``extract_sentence`` returns the quoted sentence and ``parse_sentence`` its finding, polarity and side.
Works for the paper's default, terse and radiologist phrasings (Supplementary Note 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from medvlm_audit.findings import DISPLAY_NAMES

#: display name (lower case) -> finding id, longest names first so "lung nodule" wins over shorter names
_NAMES: list[tuple[str, str]] = sorted(
    [(name.lower(), fid) for fid, name in DISPLAY_NAMES.items()]
    + [(fid.replace("_", " "), fid) for fid in DISPLAY_NAMES],
    key=lambda t: -len(t[0]),
)
_NAME_RES = [(re.compile(r"(?<![a-z])" + re.escape(n) + r"(?![a-z])"), fid) for n, fid in _NAMES]

#: words that name a finding inside a report sentence (checked in order: "pneumonia" before "opacity")
_SENTENCE_KEYS: tuple[tuple[str, str], ...] = (
    ("pneumothorax", "pneumothorax"),
    ("effusion", "pleural_effusion"),
    ("pneumonia", "pneumonia"),
    ("consolidation", "consolidation"),
    ("edema", "edema"),
    ("oedema", "edema"),
    ("atelectasis", "atelectasis"),
    ("nodule", "nodule"),
    ("cardiomegaly", "cardiomegaly"),
    ("heart", "cardiomegaly"),
    ("cardiac", "cardiomegaly"),
    ("opacity", "lung_opacity"),
    ("opacities", "lung_opacity"),
)
_QUOTED = re.compile(r"[“\"]([^”\"]+)[”\"]")
_NEGATION = re.compile(
    r"^(?:no|there is no|there are no|without|negative for)\b|\bno evidence of\b|\bnot enlarged\b|\bis normal\b|"
    r"\bnormal (?:heart|cardiac) size\b"
)


@dataclass(frozen=True, slots=True)
class ParsedPrompt:
    """What a yes/no prompt asks: a finding's presence, or whether a report sentence is accurate."""

    kind: Literal["finding_presence", "report_error", "unknown"]
    finding: str | None = None
    sentence: str | None = None
    asserted: bool | None = None  # report sentence claims the finding is present
    side: str | None = None  # "left" / "right" named in the report sentence


def extract_sentence(text: str) -> str | None:
    """The first quoted span (curly or straight quotes), e.g. the ReXErr candidate sentence; None if absent."""
    m = _QUOTED.search(text)
    return m.group(1).strip() if m else None


def finding_from_prompt(text: str) -> str | None:
    """Finding id whose display name appears in the question (quoted sentences ignored); None if none does."""
    question = _QUOTED.sub(" ", text).lower()
    best: tuple[int, int, str] | None = None  # (position, -length, id): earliest, then longest match
    for rx, fid in _NAME_RES:
        m = rx.search(question)
        if m and (best is None or (m.start(), -(m.end() - m.start())) < best[:2]):
            best = (m.start(), -(m.end() - m.start()), fid)
    return best[2] if best else None


def finding_from_sentence(sentence: str) -> str | None:
    """Finding a report sentence talks about, from its key words; None for sentences about no finding."""
    s = sentence.lower()
    words = set(re.findall(r"[a-z]+", s))
    for key, fid in _SENTENCE_KEYS:
        if key in words:
            return fid
    return None


def sentence_asserts(sentence: str) -> bool:
    """True when the sentence claims something is present, False for negations ("No pleural effusion.")."""
    return _NEGATION.search(sentence.strip().lower()) is None


def sentence_side(sentence: str) -> str | None:
    """'left' or 'right' when the sentence names exactly one side, else None."""
    words = set(re.findall(r"[a-z]+", sentence.lower()))
    sides = [s for s in ("left", "right") if s in words]
    return sides[0] if len(sides) == 1 else None


@lru_cache(maxsize=8192)
def parse_prompt(text: str) -> ParsedPrompt:
    """Classify a prompt as a finding-presence question or a report-sentence check and pull out its parts."""
    sentence = extract_sentence(text)
    if sentence is not None:
        return ParsedPrompt("report_error", finding_from_sentence(sentence), sentence, sentence_asserts(sentence),
                            sentence_side(sentence))
    finding = finding_from_prompt(text)
    if finding is not None:
        return ParsedPrompt("finding_presence", finding)
    return ParsedPrompt("unknown")
