"""When a strategy's reports can be audited at all (the reports suite's not-assessable rule, docs/reports.md).

CAD, WAE and the diversity measures read the words a model writes; a model that writes "Yes", a refusal or
gibberish for every image has no words to displace, so its counts and WAE say nothing about decoding (and a word
it never writes is not "stable"). Each report gets a ``status`` (the tidy table's column, as the other suites'
Score status): ``answer`` (an assessable report), ``empty``, ``refused`` (a first-person refusal: "As an AI, I
cannot ..."), ``too_short`` (fewer than :data:`MIN_CONTENT_WORDS` words once stop words are removed),
``no_vocabulary`` (no word of the reference corpus's vocabulary: set in the tidy table where the run's recorded
``reference`` can be read, and always by the analysis),
``no_response`` (the request ended in an error). A model x strategy whose share of assessable reports (among
those with a response) is below :data:`ASSESSABLE_SHARE` is ``not assessable``: no CAD category, WAE, diversity
or verdict is given for it, and ``run`` warns as for the other suites' parse rate below 50%.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from medvlm_audit.health import ASSESSABLE_PARSE_RATE
from medvlm_audit.suites.reports.terms import report_tokens

__all__ = ["ASSESSABLE_SHARE", "MIN_CONTENT_WORDS", "REPORT_STATUSES", "assessability", "reference_vocabulary",
           "report_status", "with_vocabulary"]

#: the share of assessable reports below which a model x strategy is not assessable (the other suites' 50%)
ASSESSABLE_SHARE = ASSESSABLE_PARSE_RATE
#: a report with fewer content words (stop words removed) is too short to carry findings ("Yes", "Normal.")
MIN_CONTENT_WORDS = 2
#: the statuses in the order the reasons are listed
REPORT_STATUSES = ("answer", "empty", "refused", "too_short", "no_vocabulary", "no_response")
_WORDS = {"empty": "empty", "refused": "refusals", "too_short": "too short", "no_vocabulary": "no reference word"}

_REFUSAL = re.compile(
    r"\bas an ai\b|\bas a language model\b|\bi (?:cannot|can ?not|can't|am unable|am not able|won't|must decline)\b"
    r"|\bi'm (?:unable|not able|sorry)\b|\bi am sorry\b|\bi apologi[sz]e\b"
    r"|\bunable to (?:provide|assist|help|interpret|diagnose|analy[sz]e)\b")


def report_status(text: Any) -> str:
    """The status of one report from its text alone (``no_vocabulary`` needs the reference: :func:`with_vocabulary`).

    >>> [report_status(t) for t in (None, "  ", "Yes", "As an AI, I cannot provide a medical diagnosis.",
    ...                              "No acute cardiopulmonary abnormality.", "Pneumothorax cannot be excluded.")]
    ['no_response', 'empty', 'too_short', 'refused', 'answer', 'answer']
    """
    if not isinstance(text, str):
        return "no_response"
    if not text.strip():
        return "empty"
    if _REFUSAL.search(text[:400].lower().replace("\u2019", "'")):
        return "refused"
    if len(report_tokens(text)) < MIN_CONTENT_WORDS:
        return "too_short"
    return "answer"


def with_vocabulary(statuses: Iterable[str], texts: Iterable[Any], vocabulary: set[str]) -> list[str]:
    """``no_vocabulary`` for each ``answer`` report none of whose words is in the reference ``vocabulary``.

    >>> with_vocabulary(["answer", "answer", "empty"], ["blorp quux 42", "clear lungs", ""], {"lungs"})
    ['no_vocabulary', 'answer', 'empty']
    """
    return [("no_vocabulary" if s == "answer" and not (set(report_tokens(str(t))) & vocabulary) else s)
            for s, t in zip(statuses, texts)]


def reference_vocabulary(spec: Any) -> set[str] | None:
    """The words of a reference corpus (``"iu"`` or a JSONL path, the suite's ``reference`` option), for the
    tidy table's ``no_vocabulary`` status at run time; None where it cannot be read (the preflight and the
    analysis report why). Cached per spec and file modification time.

    >>> reference_vocabulary("/no/such/file.jsonl") is None
    True
    """
    import os

    if not isinstance(spec, str) or not spec:
        return None
    try:
        stamp = os.stat(spec).st_mtime_ns if spec != "iu" else 0
    except OSError:
        return None
    return _vocabulary(spec, stamp)


@lru_cache(maxsize=4)
def _vocabulary(spec: str, stamp: int) -> set[str] | None:
    from medvlm_audit.errors import AuditError
    from medvlm_audit.suites.reports.corpus import iu_reference_corpus, read_corpus

    try:
        corpus = iu_reference_corpus() if spec == "iu" else read_corpus(spec)
    except (AuditError, OSError, ValueError):
        return None
    return {w for t in corpus.texts for w in report_tokens(t)}


def assessability(statuses: Iterable[str]) -> tuple[int, int, str]:
    """(assessable reports, reports with a response, reason): the reason is "" when the share is at least
    :data:`ASSESSABLE_SHARE`, else "not assessable (...)" with the counts of each kind of degenerate report.

    >>> assessability(["answer", "answer", "too_short"])
    (2, 3, '')
    >>> assessability(["too_short"] * 10 + ["answer"] * 2 + ["no_response"])
    (2, 12, 'not assessable (2 of 12 reports assessable, 16.7% < 50%: too short 10)')
    >>> assessability(["no_response"])[2]
    'not assessable (no report: every request ended in an error)'
    """
    s = list(statuses)
    answered = [x for x in s if x != "no_response"]
    k, n = sum(x == "answer" for x in answered), len(answered)
    if n == 0:
        return 0, 0, "not assessable (no report: every request ended in an error)"
    if k / n >= ASSESSABLE_SHARE:
        return k, n, ""
    why = ", ".join(f"{_WORDS[c]} {answered.count(c)}" for c in REPORT_STATUSES if c in _WORDS and c in answered)
    return k, n, (f"not assessable ({k} of {n} reports assessable, {100 * k / n:.1f}% < "
                  f"{100 * ASSESSABLE_SHARE:g}%: {why})")
