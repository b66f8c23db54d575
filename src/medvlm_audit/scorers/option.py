"""Option parser: which option a free-text MCQ answer chose, or that it refused, or that it cannot be read.

Order: drop ``<think>…</think>`` and ``<thinking>…</thinking>`` (the released CoT prompt's tags); the last ``<answer>…</answer>`` tag: a letter and/or the option text, or a
1-based option number (``<answer>2</answer>`` is the second option; a number that is itself an option's text
is read as that text; a letter or number that contradicts the text is ``unparsed``, not guessed). Without a
tag: a lone letter (``B``, ``(B)``, ``B.``), a letter the reply says it picks (``Answer: B``, ``the answer
is (C)``, ``Option b`` in any case, ``I would choose B because…``, ``I'd go with (d)``; a lower-case letter
only after "option"/"choice" or in brackets, where it cannot be the article "a"; a hedge such as ``B or C``
picks nothing), a leading letter with a reason (``B because…``); else exactly one option text quoted in the
reply. A reply that repeats the whole option list picks nothing (``unparsed``) unless it also says which one
(``Answer: B``). A reply that picks nothing and declines (``cannot determine without the image``) is a ``refusal``;
an abstention that names no option ("Unknown", "None of the above", "N/A", "I don't know", "please provide
the image") is ``abstain``; anything else is ``unparsed``. Refusals, abstentions and unparsed answers are their
own classes, never coerced into an option (the stress analysis counts all three as wrong answers).
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from medvlm_audit.scorers.score import STATUSES, Score, strip_reasoning  # noqa: F401  (STATUSES re-exported)

#: option letters, in order
LETTERS: str = string.ascii_uppercase


def norm_option(text: str) -> str:
    """Comparison key of an option text: case-folded, whitespace collapsed, trailing punctuation dropped."""
    return " ".join(str(text).casefold().split()).rstrip(" .;:")


Status = Literal["answer", "refusal", "abstain", "unparsed", "no_response"]

#: a reply (or answer-tag body) that is only an abstention, when no option says it: an answer, and a wrong one
#: (paper 003's denominators are all items; DESIGN.md "Stress audit")
_ABSTAIN = re.compile(
    r"^(?:the\s+answer\s+is\s*:?\s*)?(?:unknown|none|none of the above|none of these|n/?a|not applicable|"
    r"i\s+(?:do\s*n[o']?t|dont)\s+know|unsure|not sure|uncertain|undetermined|cannot be determined)$"
    r"|\bplease\s+(?:provide|upload|share|attach|send)\s+(?:the|an|a)\s+(?:image|picture|x-?ray|scan)",
    re.IGNORECASE,
)


def _abstains(text: str) -> bool:
    t = " ".join(text.split()).strip(" .!,;:\"'()[]*")
    return bool(_ABSTAIN.search(t))

_THINKING = re.compile(r"<thinking>.*?(?:</thinking>|$)", re.DOTALL | re.IGNORECASE)  # the released CoT tags
_TAG = re.compile(r"<answer>\s*(.*?)\s*(?:</answer>|$)", re.DOTALL | re.IGNORECASE)
_LEAD_LETTER = re.compile(r"^\s*(?:option\s+)?[\(\[]?([A-Za-z])[\)\]]?(?:\s*[.:)\-]\s*|\s+|$)(.*)$", re.DOTALL)
_LONE = re.compile(r"^\s*[\(\[]?([A-Z])[\)\]]?\s*[.!]?\s*$")
_SAYS = re.compile(
    r"(?:answer|option|choice)\s*(?:is|would be|:)?\s*[:\-]?\s*[\(\[]?\b([A-Z])\b[\)\]]?(?=$|[\s.,;:!)])", re.IGNORECASE
)
#: a letter the reply picks: group 1 the keyword or verb, 2 the opening bracket, 3 the letter, 4 the closing one
_PICKS = re.compile(
    r"\b(answer\s*(?:is|would be)?\s*[:\-]?|options?\s*(?:is\s*)?[:#\-]?|choice\s*(?:is\s*)?[:\-]?|"
    r"(?:choose|chose|pick|picked|select|selected|go with|going with|opt for)\s+(?:option\s+)?)"
    r"\s*([\(\[]?)([A-Za-z])([\)\]]?)(?=$|[\s.,;:!?)\]])",
    re.IGNORECASE,
)
#: right after a picked letter: another letter offered as an alternative (a hedge, not a pick)
_HEDGE = re.compile(r"\s*(?:,|or|and|/)\s*(?:option\s+)?[\(\[]?[A-Za-z][\)\]]?(?=$|[\s.,;:!?)])", re.IGNORECASE)
_BECAUSE = re.compile(r"^\s*[\(\[]?([A-Z])[\)\]]?\s*[,:\-]?\s+(?:because|since|as)\b")
_NUMBER = re.compile(r"^\s*[\(\[]?(\d{1,3})[\)\]]?(?:\s*[.:)\-]\s*|\s+|$)(.*)$", re.DOTALL)
_REFUSAL = re.compile(
    r"\b(cannot|can ?not|can't|unable to|not able to|impossible to|won't|will not)\b.{0,60}"
    r"\b(determine|answer|tell|assess|identify|select|choose|provide|diagnos\w*|evaluate|interpret|see|view)"
    r"|\bno image\b|\bwithout (?:the |an |any )?image\b|\bimage (?:is )?(?:not|missing|unavailable)"
    r"|\binsufficient (?:information|data)\b|\bnot enough information\b|\bi'?m sorry\b|\bi apologi[sz]e\b",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class ParsedOption:
    """The parse of one answer: ``index`` (0-based) when status is ``answer``; ``via`` says which rule."""

    status: str
    index: int | None = None
    via: str = ""

    @property
    def letter(self) -> str | None:
        return None if self.index is None else LETTERS[self.index]


def _match_text(text: str, keys: Sequence[str]) -> int | None:
    """Index of the option whose normalised text equals ``text``; None when none or ambiguous."""
    t = norm_option(text)
    if not t:
        return None
    hits = [i for i, k in enumerate(keys) if k == t]
    return hits[0] if len(hits) == 1 else None


def _contained(text: str, keys: Sequence[str]) -> int | None:
    """The single option whose text occurs as a phrase in ``text`` (longest wins if one contains another)."""
    t = " " + " ".join(text.casefold().split()) + " "
    t = re.sub(r"[^\w\s'/-]", " ", t)
    t = " " + " ".join(t.split()) + " "
    hits = []
    for i, k in enumerate(keys):
        kk = " ".join(re.sub(r"[^\w\s'/-]", " ", k).split())
        if kk and f" {kk} " in t:
            hits.append(i)
    if not hits:
        return None
    if len(hits) == 1:
        return hits[0]
    # drop hits that are substrings of another hit ("effusion" inside "pleural effusion")
    kept = [i for i in hits if not any(j != i and keys[i] in keys[j] for j in hits)]
    return kept[0] if len(kept) == 1 else None


def _echoes_options(text: str, keys: Sequence[str]) -> bool:
    """The reply repeats the whole option list (every option's text, two or more options): not a choice."""
    if len(keys) < 2:
        return False
    t = " " + " ".join(re.sub(r"[^\w\s'/-]", " ", text.casefold()).split()) + " "
    return all(kk and f" {kk} " in t for kk in (" ".join(re.sub(r"[^\w\s'/-]", " ", k).split()) for k in keys))


def _picked_letters(text: str, k: int) -> list[str]:
    """Letters (upper case, within the first k) the text says it picks, in order; hedged picks left out."""
    out = []
    for m in _PICKS.finditer(text):
        word, opening, letter, closing = m.group(1).casefold(), m.group(2), m.group(3), m.group(4)
        after = text[m.end():m.end() + 1]
        lower_ok = (bool(opening and closing) or word.startswith(("option", "choice")) or "option" in word
                    or after in ("", ".", ",", ";", ":", "!", "?"))  # 'I pick b.' but not 'I pick a pneumothorax'
        if letter.islower() and not lower_ok:
            continue
        if _HEDGE.match(text, m.end()):
            continue
        if letter.upper() in LETTERS[:k]:
            out.append(letter.upper())
    return out


def _parse_number(body: str, keys: Sequence[str], k: int) -> ParsedOption | None:
    """A 1-based option number inside the answer tag, optionally followed by the option text."""
    m = _NUMBER.match(body)
    if m is None:
        return None
    idx = int(m.group(1)) - 1
    if not 0 <= idx < k:
        return ParsedOption("unparsed", None, "tag_index_out_of_range")
    rest = norm_option(m.group(2))
    if not rest or rest == keys[idx] or keys[idx].startswith(rest) or rest.startswith(keys[idx]):
        return ParsedOption("answer", idx, "tag_index")
    other = _match_text(m.group(2), keys)
    if other is not None:
        return ParsedOption("unparsed", None, "index_text_conflict")
    return ParsedOption("answer", idx, "tag_index") if re.match(r"^\s*[\(\[]?\d+[\)\].:]", body) else None


def _parse_body(body: str, keys: Sequence[str], k: int, tagged: bool) -> ParsedOption | None:
    m = _LEAD_LETTER.match(body)
    if m and m.group(1).upper() in LETTERS[:k] and (m.group(1).isupper() or tagged):
        idx = LETTERS.index(m.group(1).upper())
        rest = m.group(2).strip()
        rest_norm = norm_option(rest)
        if not rest_norm or rest_norm == keys[idx]:
            return ParsedOption("answer", idx, "tag_letter" if tagged else "letter")
        other = _match_text(rest, keys)
        if other is not None and other != idx:
            return ParsedOption("unparsed", None, "letter_text_conflict")
        if keys[idx].startswith(rest_norm) or rest_norm.startswith(keys[idx]):
            return ParsedOption("answer", idx, "tag_letter" if tagged else "letter")
        if tagged and len(body.strip()) <= 3:
            return ParsedOption("answer", idx, "tag_letter")
        # a letter followed by text matching no option: trust the letter only if the body starts "X." / "(X)"
        if tagged and re.match(r"^\s*[\(\[]?[A-Z][\)\].:]", body):
            return ParsedOption("answer", idx, "tag_letter")
    exact = _match_text(body, keys)
    if exact is not None:
        return ParsedOption("answer", exact, "tag_text" if tagged else "text")
    return None


@lru_cache(maxsize=65536)
def _keys(options: tuple[str, ...]) -> list[str]:
    return [norm_option(o) for o in options]


_FAST = re.compile(r"\s*<answer>\s*([A-Z])(?:\.\s*(.*?))?\s*</answer>\s*", re.DOTALL)


def parse_option(text: str | None, options: Sequence[str]) -> ParsedOption:
    """Parse one reply against the options shown; see the module docstring for the rules."""
    if text is None:
        return ParsedOption("no_response", None, "none")
    fast = _FAST.fullmatch(text)
    if fast is not None:  # the requested format, nothing else: "<answer>B. text</answer>" or "<answer>B</answer>"
        i = LETTERS.find(fast.group(1))
        if i < len(options) and (not fast.group(2) or fast.group(2) == options[i]):
            return ParsedOption("answer", i, "tag_letter")
    k = len(options)
    keys = _keys(tuple(options))
    s = strip_reasoning(_THINKING.sub(" ", str(text)), artifacts=False).strip()
    if not s:
        return ParsedOption("unparsed", None, "empty")
    tags = _TAG.findall(s)
    if tags:
        body = tags[-1].strip()
        fast = _FAST.fullmatch(f"<answer>{body}</answer>")
        if fast is not None:  # the requested format inside the last tag, after reasoning: "B. text" or "B"
            i = LETTERS.find(fast.group(1))
            if i < len(options) and (not fast.group(2) or fast.group(2) == options[i]):
                return ParsedOption("answer", i, "tag_letter")
        if _echoes_options(body, keys):  # "<answer>A. x B. y C. z</answer>" chose nothing
            return ParsedOption("unparsed", None, "echoes_options")
        exact = _match_text(body, keys)
        if exact is not None:  # the option's own text (also when that text is a number)
            return ParsedOption("answer", exact, "tag_text")
        got = _parse_number(body, keys, k) or _parse_body(body, keys, k, tagged=True)
        if got is not None:
            return got
        inside = _contained(body, keys)
        if inside is not None:
            return ParsedOption("answer", inside, "tag_contains")
        if _abstains(body):
            return ParsedOption("abstain", None, "tag_abstain")
        if _REFUSAL.search(body) or _REFUSAL.search(s):
            return ParsedOption("refusal", None, "tag_refusal")
        return ParsedOption("unparsed", None, "tag_unreadable")
    lone = _LONE.match(s)
    if lone and lone.group(1) in LETTERS[:k]:
        return ParsedOption("answer", LETTERS.index(lone.group(1)), "lone_letter")
    lines = [ln.strip() for ln in s.splitlines() if ln.strip()]
    last = lines[-1] if lines else s
    if _echoes_options(s, keys):
        # the whole option list repeated: only an explicit, unique pick ("Answer: B") is a choice; the last
        # echoed line is not
        said = [x for x in _SAYS.findall(s) if x in LETTERS[:k]]
        if said and len(set(said)) == 1:
            return ParsedOption("answer", LETTERS.index(said[-1]), "says_letter")
        return ParsedOption("unparsed", None, "echoes_options")
    for cand, whole in ((last, False), (s, True)):
        said = [x for x in _SAYS.findall(cand) if x in LETTERS[:k]]
        if said and (not whole or len(set(said)) == 1):
            return ParsedOption("answer", LETTERS.index(said[-1]), "says_letter")
        picked = _picked_letters(cand, k) if not _REFUSAL.search(s) else []  # 'cannot choose B without the image'
        if picked and len(set(picked)) == 1:
            return ParsedOption("answer", LETTERS.index(picked[-1]), "picks_letter")
    because = _BECAUSE.match(s)
    if because and because.group(1) in LETTERS[:k] and not _REFUSAL.search(s):
        return ParsedOption("answer", LETTERS.index(because.group(1)), "letter_because")
    got = _parse_body(last, keys, k, tagged=False)
    if got is not None and got.status == "answer":
        return got
    inside = _contained(s, keys)
    if inside is not None and not _REFUSAL.search(s):
        return ParsedOption("answer", inside, "contains")
    if _abstains(s) or _abstains(last):
        return ParsedOption("abstain", None, "abstain")
    if _REFUSAL.search(s):
        return ParsedOption("refusal", None, "refusal")
    if inside is not None:
        return ParsedOption("answer", inside, "contains")
    return ParsedOption("unparsed", None, "unreadable")


def score_option(text: str | None, options: Sequence[str]) -> Score:
    """The option answer as a :class:`~medvlm_audit.scorers.score.Score` (value: the 0-based option index)."""
    p = parse_option(text, options)
    return Score(p.status, p.index, None, p.via)  # type: ignore[arg-type]
