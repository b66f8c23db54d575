"""The stress verdict: what each test (T1-T3) says, read from intervals, and how firm the call is.

Each test reads the 95% interval the report prints beside its number (never a point alone) and BH's q over the
model's family (DESIGN.md, stress audit; issue 21 item 2):

- **T1, reads the image** (accuracy change when the image is removed, paired on the same items): *found* when the
  interval lies entirely below 0 and q < ``VERDICT_Q``; *absent* when it lies entirely above ``-NO_EFFECT``
  (the image adds less than 10 pp);
- **T2, text shortcut** (text-only accuracy on the image-required items against chance 1/k): *found* when the
  interval lies entirely above chance and q < ``VERDICT_Q``; *absent* when it lies entirely below chance +
  ``NO_EFFECT``;
- **T3, position bias** (accuracy change when the options are reordered): *found* when the interval excludes 0
  and q < ``VERDICT_Q``; *absent* when it lies within +-``NO_EFFECT``;
- otherwise the test is *indeterminate*, with the reason ("-5.0 pp [-18.0, +7.0] on 20 items neither excludes 0
  nor lies within +-10 pp"); *not assessable* when the model's parse rate under one of its conditions is below
  50%.

The verdict (its tags): the shortcuts found (text shortcut, position bias); else ``not assessable`` when a
shortcut test (or T1) is, or the model gave no usable answer; else ``no shortcut found`` when T2 and T3 are both
*absent* (one of them may not have run; not both); else ``indeterminate``. ``reads the image`` leads the tags when T1 found it.

Bootstrap support (beside every test's status and the verdict): the share of the analysis' item-bootstrap draws
(the shared draws of ``analysis.analyse_stress``: items resampled with their repeats, ``default_rng(seed)``, seed 0)
that give the same status / the same tags, each draw's interval being the printed interval moved with the draw's
estimate (its widths below and above the point kept) and q held at its observed value (BH is not redrawn).

>>> import numpy as np
>>> status_for("T3", np.array([-0.05, -0.30]), 0.13, 0.12, 0.01, 0.0).tolist()
['indeterminate', 'found']
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["ABSENT", "FOUND", "INDETERMINATE", "NO_EFFECT", "NOT_RUN", "TESTS", "VERDICT_COLUMNS", "VERDICT_Q",
           "Evidence", "evidence_text", "status_for", "verdict_table", "verdict_tags"]

#: q below which a change or a chance test can count as a finding (BH within the model's family)
VERDICT_Q = 0.05
#: the margin (a fraction: 10 percentage points) inside which a whole interval rules an effect out
NO_EFFECT = 0.10
FOUND, ABSENT, INDETERMINATE, NOT_RUN = "found", "absent", "indeterminate", "not run"
NA = "not assessable"
#: test -> the tag it gives when found
TESTS: dict[str, str] = {"T1": "reads the image", "T2": "text shortcut", "T3": "position bias"}
VERDICT_COLUMNS = ["model", "verdict", "support", "reason",
                   *(f"{t}_{c}" for t in TESTS for c in ("status", "support", "reason"))]


@dataclass(frozen=True)
class Evidence:
    """One test's numbers for one model (fractions): a change (T1, T3; ``ref`` 0) or an accuracy (T2; ``ref`` the
    chance rate), its printed 95% interval, n items, BH q, the bootstrap draws of the point (None without them),
    ``note`` (non-empty: not assessable, and why) and ``text`` (the numbers in words)."""

    test: str
    point: float
    ci_low: float
    ci_high: float
    n: int
    q: float
    ref: float = 0.0
    draws: np.ndarray | None = None
    note: str = ""
    text: str = ""


def status_for(test: str, point: np.ndarray | float, below: float, above: float, q: float, ref: float,
                margin: float = NO_EFFECT) -> np.ndarray:
    """The status of ``test`` for one or many points, each with the interval [point - below, point + above]
    (the printed interval's widths), q and the reference (0 or chance): an array of FOUND / ABSENT /
    INDETERMINATE (rules in the module docstring; a nan point is INDETERMINATE)."""
    pt = np.atleast_1d(np.asarray(point, dtype=float))
    lo, hi = pt - below, pt + above
    sig = bool(q < VERDICT_Q) if not math.isnan(q) else False
    with np.errstate(invalid="ignore"):
        if test == "T1":
            found, absent = (hi < ref) & sig, lo > ref - margin
        elif test == "T2":
            found, absent = (lo > ref) & sig, hi < ref + margin
        elif test == "T3":
            found, absent = ((hi < ref) | (lo > ref)) & sig, (lo > ref - margin) & (hi < ref + margin)
        else:
            raise ValueError(f"unknown stress test {test!r}; known: {sorted(TESTS)}")
    out = np.select([found, absent], [FOUND, ABSENT], default=INDETERMINATE).astype(object)
    out[np.isnan(pt)] = INDETERMINATE
    return out


def verdict_tags(status: Mapping[str, np.ndarray], n: int, model_na: bool = False) -> np.ndarray:
    """The verdict's tags joined by ', ' for each of ``n`` draws from the tests' statuses (each an array of n, or
    NA / NOT_RUN repeated)."""
    def get(t: str) -> np.ndarray:
        return np.broadcast_to(np.asarray(status.get(t, NOT_RUN), dtype=object), (n,))

    s1, s2, s3 = get("T1"), get("T2"), get("T3")
    reads = s1 == FOUND
    text, pos = s2 == FOUND, s3 == FOUND
    na = model_na | (s1 == NA) | (s2 == NA) | (s3 == NA)
    # ruled out by at least one test that ran (a run without T2 and T3 finds nothing and rules nothing out)
    clear = np.isin(s2, (ABSENT, NOT_RUN)) & np.isin(s3, (ABSENT, NOT_RUN)) & ((s2 == ABSENT) | (s3 == ABSENT))
    lead = np.where(reads, "reads the image, ", "")
    shortcuts = np.where(text & pos, "text shortcut, position bias", np.where(text, "text shortcut", "position bias"))
    rest = np.where(text | pos, shortcuts,
                    np.where(na, NA, np.where(clear, "no shortcut found", INDETERMINATE)))
    return np.char.add(lead.astype(str), rest.astype(str)).astype(object)


def evidence_text(test: str, point: float, lo: float, hi: float, n: int, q: float, ref: float = 0.0) -> str:
    """A test's numbers in words: 'removing the image changes accuracy by -94.2 pp [-98.3, -90.0] (n = 120),
    q < 0.001'."""
    from medvlm_audit.report.html import format_p

    def ci(unit: str, sign: str) -> str:
        if math.isnan(point):
            return f"not estimable (n = {n})"
        iv = "" if math.isnan(lo) else f" [{100 * lo:{sign}.1f}, {100 * hi:{sign}.1f}]"
        return f"{100 * point:{sign}.1f}{unit}{iv} (n = {n})"

    if test == "T1":
        return f"removing the image changes accuracy by {ci(' pp', '+')}, q {format_p(q)}"
    if test == "T2":
        return (f"without the image it is right on {ci('%', '')} of image-required items against "
                f"{100 * ref:.1f}% by chance, q {format_p(q)}")
    return f"reordering the options changes accuracy by {ci(' pp', '+')}, q {format_p(q)}"


def _pp(x: float, change: bool) -> str:
    return f"{100 * x:+.1f} pp" if change else f"{100 * x:.1f}%"


def _rule_words(e: Evidence) -> tuple[str, str]:
    """(what finds, what rules out) the test, in words."""
    m = f"{100 * NO_EFFECT:g} pp"
    if e.test == "T1":
        return f"lies below 0 with q < {VERDICT_Q:g}", f"lies above -{m}"
    if e.test == "T2":
        return (f"lies above chance ({100 * e.ref:.1f}%) with q < {VERDICT_Q:g}",
                f"lies below chance + {m} ({100 * (e.ref + NO_EFFECT):.1f}%)")
    return f"excludes 0 with q < {VERDICT_Q:g}", f"lies within ± {m}"


def _reason(e: Evidence, status: str, support: float) -> str:
    sup = "" if math.isnan(support) else f", support {100 * support:.0f}%"
    if status == NA:
        return e.text
    if status == INDETERMINATE:
        found, absent = _rule_words(e)
        change = e.test != "T2"
        ci = (f"{_pp(e.point, change)} [{_pp(e.ci_low, change)}, {_pp(e.ci_high, change)}]"
              if not math.isnan(e.point) else "no estimate")
        why = (f"the interval {ci} on {e.n} items neither {found} nor {absent}" if not math.isnan(e.point) else
               "no estimate")
        if not math.isnan(e.point) and (e.test == "T3" and (e.ci_high < e.ref or e.ci_low > e.ref)
                                        or e.test == "T1" and e.ci_high < e.ref or e.test == "T2" and e.ci_low > e.ref):
            why = f"the interval excludes the threshold but q {e.q:.3f} is not below {VERDICT_Q:g}"
        return f"{e.text} ({TESTS[e.test]}: indeterminate, {why}{sup})"
    words = TESTS[e.test] if status == FOUND else f"no {TESTS[e.test]}" if e.test != "T1" else \
        f"the image adds less than {100 * NO_EFFECT:g} pp"
    return f"{e.text} ({words}{sup})"


def verdict_table(evidence: Mapping[str, Mapping[str, Evidence]], model_na: Mapping[str, str] | None = None,
                  B: int | None = None) -> pd.DataFrame:
    """One row per model (:data:`VERDICT_COLUMNS`): the verdict (tags joined by ', '), its bootstrap support, the
    reason in words, and each test's status, support and reason. ``model_na``: model -> why it is not
    assessable as a whole (no usable answer, parse rate), '' / absent otherwise."""
    model_na = dict(model_na or {})
    rows = []
    for model, tests in evidence.items():
        na_text = model_na.get(model, "")
        status: dict[str, object] = {}
        draws: dict[str, np.ndarray] = {}
        row: dict[str, object] = {"model": model}
        nb = B or max([len(e.draws) for e in tests.values() if e.draws is not None] or [0])
        for t in TESTS:
            e = tests.get(t)
            if e is None:
                status[t] = NOT_RUN
                row.update({f"{t}_status": NOT_RUN, f"{t}_support": math.nan, f"{t}_reason": ""})
                continue
            if e.note:
                status[t] = NA
                row.update({f"{t}_status": NA, f"{t}_support": math.nan, f"{t}_reason": e.text})
                if nb:
                    draws[t] = np.full(nb, NA, dtype=object)
                continue
            below, above = e.point - e.ci_low, e.ci_high - e.point
            st = str(status_for(t, e.point, below, above, e.q, e.ref)[0])
            sup = math.nan
            if e.draws is not None and len(e.draws) and not math.isnan(e.point):
                draws[t] = status_for(t, e.draws, below, above, e.q, e.ref)
                sup = float(np.mean(draws[t] == st))
            status[t] = st
            row.update({f"{t}_status": st, f"{t}_support": sup, f"{t}_reason": _reason(e, st, sup)})
        tags = str(verdict_tags(status, 1, bool(na_text))[0])
        support = math.nan
        if not na_text and nb and all(t in draws or status[t] in (NOT_RUN, NA) for t in TESTS):
            drawn = {t: draws.get(t, np.full(nb, status[t], dtype=object)) for t in TESTS}
            support = float(np.mean(verdict_tags(drawn, nb) == tags))
        parts = [str(row[f"{t}_reason"]) for t in TESTS if row[f"{t}_reason"]]
        if na_text:
            parts.insert(0, na_text)
        elif status["T2"] == NOT_RUN and status["T3"] == NOT_RUN:
            parts.append("indeterminate: no shortcut test ran (T2 needs no_image trials on image-required items, "
                         "T3 reordered trials)")
        row.update({"verdict": tags, "support": support, "reason": "; ".join(parts) or "no test could be computed"})
        rows.append(row)
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)
