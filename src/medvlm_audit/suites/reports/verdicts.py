"""The report audit's answer in words: one badge per model x decoding strategy, from the headline counts beside
their null and the WAE permutation test (DESIGN.md, report audit; the rule where DESIGN is silent: docs/reports.md).

A headline count (``{category}_count_headline``) is a **finding** only when it exceeds the same count on the null
(``{category}_count_null``: the reference corpus split in two at random, seed 0, human text on both sides): a
count that chance alone reaches is never called erasure or bias.

For erasure, the absent strong words have a second null, matched in size (``absent_strong_null_p95``, when
given): the 95th percentile of the strong words that random samples of the reference, as many F and M reports as
the predictions, leave unwritten (``audit.absent_strong_null``). A small corpus misses rare words by chance; the
split-half null (each half about half the reference) cannot show it. Erasure is then a finding only when the
absent strong words exceed that percentile or the BH-gated erasures (``erasure_count``) exceed the null. And
*no erasure or new bias found* needs a corpus able to find erasure: when that percentile is above half the strong
words (``strong_count``), a sample this small misses most of them by chance, and the call is *indeterminate* (too
few reports), unless the model leaves fewer strong words unwritten than the draws' 5th percentile
(``absent_strong_null_p5``): it writes them more than human reports of its size do, so it is not omitting them.

- *erases and shifts sex associations*: erasure and (new bias or bias flip) are findings;
- *erases sex-associated words*: erasure is a finding (gated erasures + words strong in the reference never
  written), new bias and bias flip are not;
- *shifts sex associations*: new bias or bias flip is a finding, erasure is not;
- *no erasure or new bias found*: no count exceeds its null and WAE_pred's permutation p is at least
  ``WAE_ALPHA`` (0.05);
- *indeterminate*: no count exceeds its null but WAE_pred's permutation p is below ``WAE_ALPHA`` (the displacement
  as a whole is beyond chance, no word-level count shows where), or WAE's test is undefined, or the reference has
  no strong word (``strong_count`` = 0: no word could be counted as erased), or the corpus is too small (above);
- *not assessable*: a headline count or its null is undefined (no reports of both groups, no word scored).

Every call but *not assessable* needs at least ``MIN_REPORTS_PER_GROUP`` (10) reports of each group
(``n_reports_F``, ``n_reports_M``, when given): with fewer the badge is *indeterminate* (too few reports),
whatever the counts.

Preservation (the same association kept) is good news, printed but never a finding. WAE is read through its
permutation test only: it falls when associated words are erased (a word never written has z_disp^2 < 0.8), so a
low WAE is never read as "no erasure".

>>> row = {"erasure_count_headline": 3, "erasure_count_null": 0, "new_bias_count_headline": 1,
...        "new_bias_count_null": 2, "bias_flip_count_headline": 0, "bias_flip_count_null": 0,
...        "preservation_count_headline": 4, "preservation_count_null": 6, "absent_strong_count": 3,
...        "wae_pred_p_perm": 0.001}
>>> classify(row)[0]
'erases sex-associated words'
>>> classify({**row, "erasure_count_headline": 0})[0]
'indeterminate'
>>> clean = {**row, "erasure_count_headline": 0, "new_bias_count_headline": 0, "wae_pred_p_perm": 0.5}
>>> classify(clean)[0]
'no erasure or new bias found'
>>> classify({**clean, "strong_count": 0})[1].split(";")[0]
'the reference has no strong words (|z_ref| > 2), so no erasure can be shown'
>>> classify({**row, "n_reports_F": 1, "n_reports_M": 20})[1].split(";")[0]
'too few reports to call: 1 F (at least 10 reports per group)'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

__all__ = ["BADGES", "BOTH", "CLEAN", "ERASES", "HOW_TO_READ", "MIN_REPORTS_PER_GROUP", "SHIFTS", "WAE_ALPHA",
           "classify", "model_line",
           "not_assessable_section", "verdict_table", "verdicts_html"]

#: permutation p below which WAE_pred's displacement counts as beyond chance
WAE_ALPHA = 0.05
#: fewest reports per group (F and M) a call is made on; below it every call is *indeterminate* (too few
#: reports). 10 per side is the project's floor for reading a count (``stats.rate_interval`` leaves Wilson only
#: at 10 events on each side); a word's association from fewer reports per group is one or two reports' wording,
#: and the size-matched null of so few reports leaves nearly every strong word unwritten (2 reports on IU: 31-40
#: of 43), so one short report decides "erases". The embedded default has 20 per group (greedy) and more.
MIN_REPORTS_PER_GROUP = 10
BOTH, ERASES, SHIFTS = ("erases and shifts sex associations", "erases sex-associated words",
                        "shifts sex associations")
CLEAN = "no erasure or new bias found"
BADGES: dict[str, str] = {BOTH: "#d62728", ERASES: "#e67e22", SHIFTS: "#8e44ad", CLEAN: "#1f77b4",
                          "indeterminate": "#7f7f7f", "not assessable": "#555555"}
CATEGORIES = ("erasure", "new_bias", "bias_flip", "preservation")
_WORDS = {"erasure": "erasure", "new_bias": "new bias", "bias_flip": "bias flip", "preservation": "preservation"}


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def _p(p: float) -> str:
    from medvlm_audit.report.html import format_p

    return format_p(p)


def classify(row: Mapping[str, Any]) -> tuple[str, str]:
    """(badge, the reason in words) for one model x strategy from its row of ``by_strategy.csv`` (the headline
    and null counts, ``absent_strong_count``, ``wae_pred_p_perm`` and, when present, ``absent_strong_null_p95``,
    ``erasure_count``, ``wae_pred_null_median``, ``wae_pred_null_p95``, ``template_diversity``, ``n_reports``);
    rules in the module docstring."""
    counts = {c: (_num(row.get(f"{c}_count_headline")), _num(row.get(f"{c}_count_null"))) for c in CATEGORIES}
    if any(math.isnan(v) for pair in counts.values() for v in pair):
        missing = [_WORDS[c] for c, pair in counts.items() if any(math.isnan(v) for v in pair)]
        return "not assessable", f"no defined count for {', '.join(missing)} (no reports of both groups to audit)"
    found = {c: counts[c][0] > counts[c][1] for c in CATEGORIES}
    k = {c: int(counts[c][0]) for c in CATEGORIES}
    k0 = {c: int(counts[c][1]) for c in CATEGORIES}
    a = _num(row.get("absent_strong_count"))
    a95, strong = _num(row.get("absent_strong_null_p95")), _num(row.get("strong_count"))
    sized = not math.isnan(a95) and not math.isnan(a)
    gated = _num(row.get("erasure_count"))
    if found["erasure"] and sized:
        # the erasure must not be what a corpus this small leaves unwritten by chance (module docstring)
        found["erasure"] = bool(a > a95 or (not math.isnan(gated) and gated > k0["erasure"]))
    # "not found" needs a corpus large enough to find it: one that writes at least half the strong words by chance
    a5 = _num(row.get("absent_strong_null_p5"))
    writes_more = not math.isnan(a5) and not math.isnan(a) and a < a5  # fewer absent than chance: not omitting
    blind = (sized and not math.isnan(strong) and strong > 0 and a95 > strong / 2 and not found["erasure"]
             and not writes_more)
    # a reference with no strong word cannot show erasure at all: nothing could be counted as erased
    no_strong = not math.isnan(strong) and strong == 0
    absent = ""
    if not math.isnan(a) and a > 0:
        absent = f"{int(a)} strong in the reference never written"
        if sized:
            lo = f"{a5:.0f}-" if not math.isnan(a5) else "up to "
            absent += f", where as many human reports leave {lo}{a95:.0f}" + (
                f" of {int(strong)}" if not math.isnan(strong) else "")
    lead = [f"{_WORDS[c]} {k[c]} words (null {k0[c]}" + (f"; {absent}" if c == "erasure" and absent else "") + ")"
            for c in CATEGORIES[:3] if found[c]]
    rest = [f"{_WORDS[c]} {k[c]} (null {k0[c]}" + (f"; {absent}" if c == "erasure" and absent else "") + ")"
            for c in CATEGORIES[:3] if not found[c]]
    parts = lead + ([("not called, within chance: " if lead else "no count beyond chance: ") +
                     ", ".join(rest)] if rest else [])
    n_f, n_m = _num(row.get("n_reports_F")), _num(row.get("n_reports_M"))
    few = [f"{int(v)} {g}" for g, v in (("F", n_f), ("M", n_m)) if not math.isnan(v) and v < MIN_REPORTS_PER_GROUP]
    if few:  # no count is called on so few reports: they are given, not read as findings
        parts = ["counts not called: " + ", ".join(
            f"{_WORDS[c]} {k[c]} (null {k0[c]}" + (f"; {absent}" if c == "erasure" and absent else "") + ")"
            for c in CATEGORIES[:3])]
    parts.append(f"preservation {k['preservation']} (null {k0['preservation']}; associations kept)")
    p = _num(row.get("wae_pred_p_perm"))
    med, p95 = _num(row.get("wae_pred_null_median")), _num(row.get("wae_pred_null_p95"))
    if math.isnan(p):
        parts.append("WAE_pred's permutation test undefined")
    else:
        null = "" if math.isnan(med) or math.isnan(p95) else f" (null median {med:.3g}, 95th percentile {p95:.3g})"
        parts.append(f"WAE_pred {_num(row.get('wae_pred')):.3g}, permutation p {_p(p)}{null}")
    td, n = _num(row.get("template_diversity")), _num(row.get("n_reports"))
    if not math.isnan(td):
        parts.append(f"unique reports {100 * td:.0f}%" + ("" if math.isnan(n) else f" of {int(n):,}"))
    erases = found["erasure"]
    shifts = found["new_bias"] or found["bias_flip"]
    if few:  # any call, erasure or shift or clean, needs enough reports of each group
        label = "indeterminate"
        parts.insert(0, f"too few reports to call: {' and '.join(few)} (at least {MIN_REPORTS_PER_GROUP} reports "
                        "per group)")
    elif erases and shifts:
        label = BOTH
    elif erases:
        label = ERASES
    elif shifts:
        label = SHIFTS
    elif no_strong:
        label = "indeterminate"
        parts.insert(0, "the reference has no strong words (|z_ref| > 2), so no erasure can be shown")
    elif blind:
        label = "indeterminate"
        parts.insert(0, "too few reports to tell erasure from chance (human reports this many leave most strong "
                        "words unwritten)")
    elif math.isnan(p):
        label = "indeterminate"
        parts.append("WAE cannot say whether the associations moved")
    elif p < WAE_ALPHA:
        label = "indeterminate"
        parts.append("WAE_pred's displacement is beyond chance, yet no word-level count shows where")
    else:
        label = CLEAN
    return label, "; ".join(parts)


def verdict_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per model x strategy of the strategy table: model, strategy, verdict, reason (written as
    ``reports_verdicts.csv``)."""
    rows = []
    for _, r in table.iterrows():
        label, reason = classify(r.to_dict())
        rows.append((r["model"], r["strategy"], label, reason))
    return pd.DataFrame(rows, columns=["model", "strategy", "verdict", "reason"])


def _badge(label: str) -> str:
    from medvlm_audit.report.html import badge

    return badge(label, BADGES)


def verdicts_html(verdicts: pd.DataFrame, labels: Mapping[str, str] | None = None,
                  models: Sequence[str] | None = None) -> str:
    """The verdict block: a legend, then per model a list of its strategies, each with its badge and reason.
    ``labels``: strategy key -> words."""
    from medvlm_audit.report.html import escape

    labels = dict(labels or {})
    legend = ('<p class="legend">Badges: ' + " ".join(_badge(b) for b in (BOTH, ERASES, SHIFTS, CLEAN)) +
              " (a headline count is a finding only when it exceeds the same count on the null, the reference "
              "corpus split in two at random, and absent strong words only beyond what random reference samples "
              f"of the model's size leave unwritten; indeterminate: fewer than {MIN_REPORTS_PER_GROUP} reports of "
              "a group, too few reports to tell erasure from chance, a reference with no strong word, or "
              f"no count beyond chance while WAE_pred's permutation p is below {WAE_ALPHA:g}).</p>")
    out = [legend]
    for m in (models or list(dict.fromkeys(verdicts["model"]))):
        sub = verdicts[verdicts["model"] == m]
        items = "".join(
            f'<li><span class="model">{escape(labels.get(str(s), str(s)))}</span>{_badge(v)} {escape(t)}.</li>'
            for s, v, t in zip(sub["strategy"], sub["verdict"], sub["reason"], strict=True))
        out.append(f'<h3>{escape(m)}</h3><ul class="verdicts">{items}</ul>')
    return "".join(out)


def not_assessable_section(models: Sequence[str], reasons: Mapping[str, str] | None = None) -> Any:
    """The verdict section of a run with nothing to audit: each model *not assessable*, with its own reason
    (``reasons``: model -> words, e.g. its strategies' 'too short' counts) where given."""
    from medvlm_audit.report.html import verdict_list
    from medvlm_audit.report.sections import Section

    reasons = dict(reasons or {})
    items = [(m, _badge("not assessable"), reasons.get(m) or "no reports of both groups (F and M) to audit; "
              "see 'Nothing to audit' below") for m in models]
    return Section("Verdicts", verdict_list(items), "verdicts")


def model_line(verdicts: pd.DataFrame, model: str) -> str:
    """A model's verdicts in one line for ``summary.json`` (strategy: badge, ...)."""
    sub = verdicts[verdicts["model"] == model]
    return "; ".join(f"{s}: {v}" for s, v in zip(sub["strategy"], sub["verdict"], strict=True))


HOW_TO_READ = (
    "<p>The audit asks whether a model's reports keep the sex-associated words that radiologists write for women "
    "and for men, or lose them (as greedy, template-like decoding tends to). Each word of the vocabulary gets a "
    "sex association in the reference reports (z_ref: above 0 written more for women, below 0 for men) and in "
    "the model's reports (z_pred). Each model and decoding strategy gets one verdict.</p><ul>"
    "<li><b>Erasure</b>: a word strongly associated with one sex in the reference (|z_ref| &gt; 2) that has lost "
    "the association in the model's reports. Counted when the loss is significant after Benjamini–Hochberg "
    "correction, or when the model never writes the word at all (a word never written cannot reach "
    "significance, yet it is the clearest erasure). Lower is better.</li>"
    "<li><b>New bias</b>: a word neutral in the reference that the model writes mostly for one sex. "
    "<b>Bias flip</b>: a word whose association points the other way in the model's reports. Both count only "
    "words whose change is significant after correction. Lower is better.</li>"
    "<li><b>Preservation</b>: the association kept (same sign, both clear): the good case, shown for context.</li>"
    "<li><b>The null</b> beside every count: the reference reports split in two at random, one half standing in "
    "for the model. Both halves are written by the same radiologists, so whatever the rule counts there is what "
    "chance gives. A count is called a finding only when it exceeds its null. Words the model never writes get a "
    "second null as large as the model's corpus (random samples of the reference with as many reports): a small "
    "corpus misses rare words by chance, so a never-written word counts as erased only beyond that, and a corpus "
    "too small to tell is called <i>indeterminate</i> (too few reports).</li>"
    "<li><b>WAE</b> (weighted association error): the mean squared displacement of the words' associations, "
    "weighted by how often the model (WAE_pred) or the reference (WAE_ref) uses them. It leads with its "
    "permutation test: p is how often randomly shuffled sex labels give a WAE at least as large (small p: the "
    "displacement is beyond chance), beside the shuffles' median and 95th percentile. A low WAE is <i>not</i> "
    "\"no erasure\": a word the model never writes adds almost nothing to WAE (its squared displacement is below "
    "0.8), so erasing associated words can lower WAE. Read it beside the count of absent strong words.</li>"
    "<li><b>Diversity</b>: unique reports (template diversity), type-token ratio and 1 − Self-BLEU; a collapsed "
    "strategy writes the same few reports for every image and tends to erase.</li></ul>"
)
