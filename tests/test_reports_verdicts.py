"""The reports suite's report answers its question in words: one badge per model x strategy from the headline
counts beside their null (a count that does not exceed its null is never called erasure or bias) and WAE's
permutation test, and a how-to-read section (DESIGN.md "Report audit"; docs/reports.md "The verdict")."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from medvlm_audit.suites.reports.verdicts import (
    BOTH,
    CLEAN,
    ERASES,
    HOW_TO_READ,
    SHIFTS,
    classify,
    verdict_table,
    verdicts_html,
)


def _row(erasure=(0, 0), new_bias=(0, 0), bias_flip=(0, 0), preservation=(5, 5), absent=0, p=0.5, **kw):
    r = {"model": "m", "strategy": "greedy", "absent_strong_count": absent, "wae_pred": 1.0, "wae_pred_p_perm": p,
         "wae_pred_null_median": 0.9, "wae_pred_null_p95": 1.4, "template_diversity": 0.25, "n_reports": 40}
    for c, (k, k0) in {"erasure": erasure, "new_bias": new_bias, "bias_flip": bias_flip,
                       "preservation": preservation}.items():
        r[f"{c}_count_headline"], r[f"{c}_count_null"] = k, k0
    return r | kw


@pytest.mark.parametrize("row, want", [
    # erasure above its null, nothing else: erases
    (_row(erasure=(41, 0), absent=38, p=0.001), ERASES),
    # erasure and new bias both above their nulls
    (_row(erasure=(5, 1), new_bias=(4, 0), p=0.001), BOTH),
    # a bias flip above its null alone: shifts
    (_row(bias_flip=(3, 0), p=0.01), SHIFTS),
    # counts equal to their null are chance: not called, and WAE not beyond chance
    (_row(erasure=(2, 2), new_bias=(1, 1), bias_flip=(0, 0), p=0.4), CLEAN),
    # a count below its null is not a finding either
    (_row(erasure=(1, 3), new_bias=(0, 2), p=0.2), CLEAN),
    # no count above its null but WAE's displacement beyond chance: indeterminate (not "no erasure")
    (_row(p=0.001), "indeterminate"),
    # WAE's test undefined, no count above null: indeterminate
    (_row(p=math.nan), "indeterminate"),
    # preservation far above its null is good news, never a finding
    (_row(preservation=(40, 2), p=0.3), CLEAN),
    # an undefined count: not assessable
    (_row(erasure=(math.nan, 0)), "not assessable"),
    (_row(new_bias=(3, None)), "not assessable"),
])
def test_verdict_reads_counts_against_their_null(row, want):
    label, reason = classify(row)
    assert label == want, reason


def test_a_count_at_its_null_is_never_called_bias_in_words():
    label, reason = classify(_row(erasure=(3, 3), new_bias=(7, 9), p=0.3))
    assert label == CLEAN
    assert "no count beyond chance: erasure 3 (null 3" in reason and "new bias 7 (null 9)" in reason
    label, reason = classify(_row(erasure=(41, 0), absent=38, p=0.001))
    assert reason.startswith("erasure 41 words (null 0; 38 strong in the reference never written)")
    assert "not called, within chance: new bias 0 (null 0), bias flip 0 (null 0)" in reason
    assert "permutation p 0.001 (null median 0.9, 95th percentile 1.4)" in reason


def test_absent_words_a_corpus_this_small_leaves_unwritten_are_not_called_erasure():
    # 12 strong words never written, above the split-half null (0), but 40 random reference reports leave up to
    # 15 unwritten and no erasure is BH-gated: chance, not erasure
    row = _row(erasure=(12, 0), absent=12, absent_strong_null_p95=15, erasure_count=0, p=0.3)
    label, reason = classify(row)
    assert label == CLEAN, reason
    assert "12 strong in the reference never written, where as many human reports leave up to 15" in reason
    # more absent words than that percentile: erasure
    assert classify({**row, "absent_strong_count": 30, "erasure_count_headline": 30})[0] == ERASES
    # or a BH-gated erasure above the null
    assert classify({**row, "erasure_count": 2})[0] == ERASES


def test_no_erasure_is_not_called_on_a_corpus_too_small_to_find_it():
    # 40 strong words; a random sample of the reference this size leaves up to 37 unwritten: blind
    row = _row(erasure=(34, 0), absent=34, absent_strong_null_p95=37, strong_count=40, erasure_count=0, p=0.3)
    label, reason = classify(row)
    assert label == "indeterminate", reason
    assert reason.startswith("too few reports to tell erasure from chance")
    assert "34 strong in the reference never written, where as many human reports leave up to 37 of 40" in reason
    # a larger corpus writes most strong words by chance: 'no erasure or new bias found' can be called
    assert classify({**row, "absent_strong_count": 3, "erasure_count_headline": 3,
                     "absent_strong_null_p95": 6})[0] == CLEAN
    # a model that writes more strong words than chance (fewer absent than the draws' 5th percentile) is not
    # omitting them: the small corpus is no bar to 'no erasure or new bias found'
    small = {**row, "absent_strong_count": 3, "erasure_count_headline": 3, "absent_strong_null_p5": 25}
    assert classify(small)[0] == CLEAN
    assert "3 strong in the reference never written, where as many human reports leave 25-37 of 40" in classify(small)[1]
    # and erasure beyond that null is called even when most words are missed by chance
    assert classify({**row, "absent_strong_count": 40, "erasure_count_headline": 40})[0] == ERASES


def test_a_reference_with_no_strong_word_cannot_give_a_clean_badge():
    # audit2 A: strong_count = 0 (no |z_ref| > 2 word): nothing could be counted as erased, whatever the model
    # writes, so 'no erasure or new bias found' is not supported; a shift beyond chance is still called
    row = _row(absent=0, absent_strong_null_p95=0, absent_strong_null_p5=0, strong_count=0, erasure_count=0, p=0.5)
    label, reason = classify(row)
    assert label == "indeterminate", reason
    assert reason.startswith("the reference has no strong words (|z_ref| > 2), so no erasure can be shown")
    assert classify({**row, "new_bias_count_headline": 3})[0] == SHIFTS
    assert classify({**row, "strong_count": 5})[0] == CLEAN


def test_no_call_is_made_on_fewer_than_the_minimum_reports_per_group():
    # audit2 B: the demo with n_images=2 called 'erases sex-associated words' from one F and one M report
    from medvlm_audit.suites.reports.verdicts import MIN_REPORTS_PER_GROUP

    assert MIN_REPORTS_PER_GROUP == 10
    erases = _row(erasure=(42, 0), absent=42, absent_strong_null_p95=40, strong_count=43, p=0.9)
    assert classify({**erases, "n_reports_F": 10, "n_reports_M": 10})[0] == ERASES
    for n_f, n_m in ((1, 1), (9, 30), (30, 9)):
        for row in (erases, _row(bias_flip=(3, 0)), _row(p=0.5)):
            label, reason = classify({**row, "n_reports_F": n_f, "n_reports_M": n_m})
            assert label == "indeterminate", reason
            assert reason.startswith("too few reports to call: ") and "at least 10 reports per group" in reason
            assert "words (null" not in reason  # no count is worded as a finding
    label, reason = classify({**erases, "n_reports_F": 1, "n_reports_M": 1})
    assert "counts not called: erasure 42 (null 0; 42 strong in the reference never written" in reason


def test_a_tiny_corpus_gets_too_few_reports_through_the_analysis(tmp_path):
    from test_reports_robust import reference_file

    from medvlm_audit.suites.reports.analysis import analyse_reports
    from medvlm_audit.suites.reports.suite import ReportsOptions

    ref = reference_file(tmp_path / "ref.jsonl", n=60)
    rows = [{"strategy": "greedy", "report": ("breast tissue " if i % 2 else "prostate ") + f"mild heart {i}",
             "group": "F" if i % 2 else "M", "case_id": f"c{i}"} for i in range(8)]
    tidy = pd.DataFrame([{"run_id": "x", "model": "m", "probe_set": "p", "sample_index": 0, **r} for r in rows])
    res = analyse_reports(tidy, ReportsOptions(reference=str(ref), B=20, n_perm=50, semantic="off",
                                               bertscore="off"))
    by = res.tables["by_strategy"]
    assert by[["n_reports_F", "n_reports_M"]].values.tolist() == [[4, 4]]
    vt = res.tables["reports_verdicts"]
    assert vt["verdict"].tolist() == ["indeterminate"]
    assert vt["reason"].item().startswith("too few reports to call: 4 F and 4 M")


def test_verdict_table_and_html_give_a_badge_per_strategy():
    table = pd.DataFrame([_row(erasure=(41, 0), p=0.001),
                          _row(strategy="top_k", p=0.6),
                          _row(model="other", strategy="greedy", bias_flip=(2, 0))])
    vt = verdict_table(table)
    assert list(vt.columns) == ["model", "strategy", "verdict", "reason"]
    assert vt["verdict"].tolist() == [ERASES, CLEAN, SHIFTS]
    html = verdicts_html(vt, {"greedy": "greedy decoding", "top_k": "top-k 50, T = 1.0"})
    assert html.count('class="badge"') >= 3 + 4  # the legend's four and one per strategy
    assert "greedy decoding" in html and "top-k 50, T = 1.0" in html and "<h3>other</h3>" in html


def test_how_to_read_explains_each_quantity_in_sentences():
    for words in ("Erasure", "New bias", "Bias flip", "The null", "WAE", "is <i>not</i>", "never writes"):
        assert words in HOW_TO_READ, words


def test_the_report_opens_on_a_badge_per_strategy(tmp_path):
    import json

    from test_reports_robust import reference_file

    from medvlm_audit.report import write_report
    from medvlm_audit.suites.reports.analysis import analyse_reports
    from medvlm_audit.suites.reports.suite import ReportsOptions

    ref = reference_file(tmp_path / "ref.jsonl", n=60)
    rows = []
    for i in range(30):
        g = "F" if i % 2 else "M"
        rows.append({"strategy": "greedy", "report": "heart normal lungs clear", "group": g, "case_id": f"c{i}"})
        rows.append({"strategy": "top_k", "report": ("breast tissue " if g == "F" else "prostate ") + f"mild {i}",
                     "group": g, "case_id": f"c{i}"})
    tidy = pd.DataFrame([{"run_id": "x", "model": "m", "probe_set": "p", "sample_index": 0, **r} for r in rows])
    res = analyse_reports(tidy, ReportsOptions(reference=str(ref), B=20, n_perm=50, semantic="off",
                                               bertscore="off"))
    vt = res.tables["reports_verdicts"]
    assert vt["strategy"].tolist() == ["greedy", "top_k"]
    page = write_report(res, tmp_path / "report", suite="reports", title="two strategies")
    html = page.read_text()
    first = html.index('id="verdicts"') if 'id="verdicts"' in html else html.index("Verdicts")
    assert first < html.index("By decoding strategy")
    for v in vt["verdict"]:
        assert f">{v}</span>" in html
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["verdict_badges"] == {f"m / {s}": v for s, v in zip(vt["strategy"], vt["verdict"])}
    assert (tmp_path / "report" / "reports_verdicts.csv").is_file()
    assert "How to read this report" in html and "The null" in html


@pytest.mark.slow
def test_the_embedded_default_report_shows_a_badge_per_strategy(tmp_path):
    import json

    from test_reports_suite import _iu_available, _small_default

    from medvlm_audit import api
    from medvlm_audit.suites.reports.verdicts import BADGES

    if not _iu_available():
        pytest.skip("torchxrayvision (IU X-ray reports) is not installed")
    res = api.run(_small_default(tmp_path / "run"), progress=False)
    rep = api.report(res.run_dir)
    vt = pd.read_csv(rep.parent / "reports_verdicts.csv")
    assert set(vt["strategy"]) == {"greedy", "beam4", "t0.3", "t0.7", "top_k", "top_p"}
    assert set(vt["verdict"]) <= set(BADGES)
    html = rep.read_text()
    verdicts = html.split('id="verdicts"')[1].split("</section>")[0]
    assert verdicts.count('class="badge"') >= 6 + 4  # one per strategy, plus the legend's four
    # greedy collapses to a few templates and leaves strong words unwritten beyond what as many human reports
    # leave: erasure; sampling at T = 1 (top-k) writes them: no erasure called
    v = vt.set_index("strategy")
    assert v.loc["greedy", "verdict"] == ERASES, v.loc["greedy", "reason"]
    assert "where as many human reports leave" in v.loc["greedy", "reason"]
    assert v.loc["top_k", "verdict"] in (CLEAN, "indeterminate"), v.loc["top_k", "reason"]
    summary = json.loads((rep.parent / "summary.json").read_text())
    assert summary["verdict_badges"] == {f"{m} / {s}": v for m, s, v in zip(vt["model"], vt["strategy"], vt["verdict"])}
