"""The paper's yes/no parser and first-token P(yes) (paper 000, Methods; DESIGN.md "Grounding audit").

Parse order: strip tokenizer artifacts and ``<think>...</think>`` (an unclosed ``<think>`` to the end); the whole
final non-empty line (lower-cased, stripped of punctuation) must equal one of the affirmative/negative tokens;
then the first whitespace token; then the first 60 lower-cased characters for an unambiguous yes or no matched as whole words (so "cannot" and "abnormality" are not read as No).
Returns 1 (Yes), 0 (No) or -1 (unparsed, an explicit class: never coerced).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from medvlm_audit.scorers.score import Score, strip_reasoning

YES, NO, UNPARSED = 1, 0, -1
AFFIRMATIVE = frozenset({"yes", "yeah", "correct", "true", "present", "positive"})
NEGATIVE = frozenset({"no", "not", "absent", "negative", "false", "incorrect"})

_STRIP = " \t\r\n.,;:!?\"'`*_()[]{}<>\u201c\u201d\u2018\u2019-"
_WORD = re.compile(r"[a-z]+")


def clean(text: str) -> str:
    """Remove reasoning traces and tokenizer artifacts (:func:`~medvlm_audit.scorers.score.strip_reasoning`)."""
    return strip_reasoning(text)


def _classify_token(token: str) -> int:
    tok = token.strip(_STRIP).lower()
    if tok in AFFIRMATIVE:
        return YES
    if tok in NEGATIVE:
        return NO
    return UNPARSED


def _classify_line(line: str) -> int:
    """A line is read as a yes/no token only when the **whole** line, lower-cased and stripped of punctuation,
    equals one of the tokens ("No other abnormality is seen." is not a token: DESIGN.md "Parser")."""
    return _classify_token(line)


def parse_yes_no(text: str | None) -> int:
    """1 = Yes, 0 = No, -1 = unparsed (also for a missing answer: None or a NaN from a table)."""
    if not isinstance(text, str) or not text:
        return UNPARSED
    t = clean(text)
    lines = [ln for ln in t.splitlines() if ln.strip(_STRIP)]
    if not lines:
        return UNPARSED
    got = _classify_line(lines[-1])
    if got != UNPARSED:
        return got
    first = t.split()
    if first:
        got = _classify_token(first[0])
        if got != UNPARSED:
            return got
    words = set(_WORD.findall(t.strip().lower()[:60]))
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes != has_no:
        return YES if has_yes else NO
    return UNPARSED


def parse_yes_no_each(texts: Iterable[str | None]) -> list[int]:
    """:func:`parse_yes_no` of every text, each distinct text parsed once (a run's answers repeat a few texts).

    >>> parse_yes_no_each(["Yes", "No.", "Yes", None, "I cannot tell"])
    [1, 0, 1, -1, -1]
    """
    seen: dict[str | None, int] = {}
    out = []
    for t in texts:
        key = t if isinstance(t, str) else None
        got = seen.get(key)
        if got is None:
            got = seen[key] = parse_yes_no(t)
        out.append(got)
    return out


#: the paper's first-token sets (Methods, "Confidence"; DESIGN.md): these strings exactly, nothing else
#: ("y", "n", "yeah", "Yes." and the like do not count).
YES_TOKENS = frozenset({"Yes", "yes", "YES", " Yes", " yes", " YES"})
NO_TOKENS = frozenset({"No", "no", "NO", " No", " no", " NO"})
#: word-start markers of raw tokenizer vocabularies (SentencePiece U+2581, byte-level BPE U+0120): a leading
#: space written the tokenizer's way, so "\u2581Yes" is the token " Yes".
_SPACE_MARKERS = ("\u2581", "\u0120")


def _token_class(token: str) -> int:
    tok = token
    if tok[:1] in _SPACE_MARKERS:
        tok = " " + tok[1:]
    if tok in YES_TOKENS:
        return YES
    if tok in NO_TOKENS:
        return NO
    return UNPARSED


def p_yes(top_logprobs: Iterable[tuple[str, float]] | None) -> float:
    """First-token P(yes) renormalised over exactly the paper's token sets ``YES_TOKENS`` / ``NO_TOKENS``;
    NaN (undefined) when neither appears."""
    if not top_logprobs:
        return math.nan
    py = pn = 0.0
    for token, lp in top_logprobs:
        if lp is None or not math.isfinite(lp):
            continue
        cls = _token_class(token)
        if cls == YES:
            py += math.exp(lp)
        elif cls == NO:
            pn += math.exp(lp)
    total = py + pn
    return py / total if total > 0 else math.nan


_VIA = {YES: "yes", NO: "no"}


def score_yes_no(text: str | None, top_logprobs: Iterable[tuple[str, float]] | None = None) -> Score:
    """The yes/no answer as a :class:`~medvlm_audit.scorers.score.Score`: value 1/0, confidence P(yes) (None when
    undefined), status ``no_response`` without text and ``unparsed`` when no rule reads it."""
    if not isinstance(text, str):
        return Score("no_response")
    v = parse_yes_no(text)
    conf = p_yes(top_logprobs)
    conf_or_none = None if math.isnan(conf) else conf
    if v == UNPARSED:
        return Score("unparsed", None, conf_or_none, "")
    return Score("answer", v, conf_or_none, "yes/no parser")
