"""Report-audit headlines (DESIGN.md "Report audit"; issue 21 item 4): erasure = BH-gated erasures plus words
strong in the reference that the predictions never write; new bias, flip and preservation BH-gated only; every
count beside the same count on a null (the reference split in two at random); WAE led by its permutation test,
printed only with an interval that contains it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_reports_stats import _planted

from medvlm_audit import stats
from medvlm_audit.suites.reports.audit import _printed_interval, corpus_audit
from medvlm_audit.suites.reports.corpus import CorpusError, make_corpus

FAST = {"B": 200, "n_perm": 200, "semantic": False, "bertscore": False, "self_bleu_max": 50, "surface_max": 50}


def _corpus(texts, female, name):
    return make_corpus(({"id": f"{name}{i}", "text": t, "group": "F" if f else "M"}
                        for i, (t, f) in enumerate(zip(texts, female))), name)


def test_planted_erasures_are_kept_by_the_headline():
    rng = np.random.default_rng(1)
    ref, rf, _ = _planted(200, rng)
    templates = ["heart size normal lungs clear", "heart size normal lungs clear breast"]
    pred = [templates[i % 2] for i in range(200)] * 2
    res = corpus_audit(_corpus(ref, rf, "r"), _corpus(pred, rf, "p"), **FAST)
    head = set(res.cad.loc[res.cad["category_headline"] == "erasure", "word"])
    assert head == {"mastectomy", "breast", "aicd", "prostate"}  # absent strong words + the gated 'breast'
    assert set(res.cad.loc[res.cad["absent_strong"], "word"]) == {"mastectomy", "aicd", "prostate"}
    s = res.summary
    assert s["categories_headline"]["erasure"] == 4 and s["absent_strong"] == 3
    assert s["categories_headline"]["new_bias"] == s["categories_gated"]["new_bias"]
    assert set(s["categories_null"]) >= {"erasure", "new_bias", "bias_flip", "preservation"}
    assert s["headline_rule"] == "headline" and "categories_ungated" in s and "categories_gated" in s


def test_random_halves_of_one_corpus_have_no_headline_bias():
    rng = np.random.default_rng(5)
    ref, rf, _ = _planted(300, rng)
    perm = np.random.default_rng(11).permutation(len(ref))
    a, b = perm[: len(ref) // 2], perm[len(ref) // 2:]
    res = corpus_audit(_corpus([ref[i] for i in a], rf[a], "a"), _corpus([ref[i] for i in b], rf[b], "b"), **FAST)
    h = res.summary["categories_headline"]
    assert (h["erasure"], h["new_bias"], h["bias_flip"]) == (0, 0, 0)


@pytest.mark.slow
def test_iu_halves_headline_is_zero_and_null_is_written():
    from medvlm_audit.suites.reports.corpus import iu_reference_corpus

    try:
        iu = iu_reference_corpus()
    except CorpusError as e:  # torchxrayvision (which ships the reports) not installed
        pytest.skip(f"IU reports unavailable: {e}")
    n = len(iu)
    perm = np.random.default_rng(1).permutation(n)
    pick = lambda idx, name: make_corpus(({"id": iu.ids[i], "text": iu.texts[i],
                                           "group": "F" if iu.female[i] else "M"} for i in sorted(idx)), name)
    res = corpus_audit(pick(perm[: n // 2], "half-a"), pick(perm[n // 2:], "half-b"), **FAST)
    h = res.summary["categories_headline"]
    assert (h["erasure"], h["new_bias"], h["bias_flip"]) == (0, 0, 0), h
    # the ungated rule the headline used before does find 'bias' here (no model involved)
    u = res.summary["categories_ungated"]
    assert u["new_bias"] + u["bias_flip"] > 0
    assert set(res.summary["categories_null"]) >= {"erasure", "new_bias", "bias_flip"}
    w = res.wae.set_index(["weighting", "group"])
    for key in (("pred", "all"), ("ref", "all")):
        r = w.loc[key]
        assert r["p_perm"] > 0.01 and r["null_median"] <= r["null_p95"]
        if math.isfinite(r["ci_low_print"]):
            assert r["ci_low_print"] <= r["value"] <= r["ci_high_print"]


def test_printed_wae_interval_always_contains_its_point():
    assert _printed_interval(1.0, (0.8, 1.4), (0.5, 1.2), clip=True)[:2] == (0.8, 1.4)
    # BC excludes (or undefined), basic contains after clipping at 0
    assert _printed_interval(0.1, (math.nan, math.nan), (-0.3, 0.4), clip=True)[:2] == (0.0, 0.4)
    lo, hi, how = _printed_interval(1.186, (math.nan, math.nan), (-0.6, 1.0), clip=True)
    assert math.isnan(lo) and math.isnan(hi) and how.startswith("none")
    # the draws of an inflated statistic: all above the point -> no BC interval
    assert all(map(math.isnan, stats.bias_corrected_interval(1.0, [1.5, 2.0, 2.5])))
    lo, hi = stats.bias_corrected_interval(2.0, [1.0, 1.5, 2.2, 2.5, 3.0, 3.5])
    assert lo <= 2.0 <= hi


def test_wae_file_prints_only_intervals_that_contain_the_point():
    rng = np.random.default_rng(4)
    ref, rf, _ = _planted(120, rng)
    templates = ["heart size normal lungs clear", "heart size normal lungs clear breast"]
    res = corpus_audit(_corpus(ref, rf, "r"), _corpus([templates[i % 2] for i in range(240)], rf, "p"), **FAST)
    for r in res.wae.to_dict("records"):
        if math.isfinite(r["ci_low_print"]):
            assert r["ci_low_print"] <= r["value"] <= r["ci_high_print"], r
        else:
            assert r["ci_print_method"].startswith("none")
        assert r["null_median"] <= r["null_p95"]


def test_the_size_matched_null_of_absent_words_reads_the_strong_words_columns():
    """absent_strong_null counts the reference's strong words (|z_ref| > 2) in the count matrix's own column order
    (the CAD frame is sorted by |z_disp|, not by vocabulary): recomputed by hand it gives the same numbers, and a
    prediction corpus as large as the reference leaves (almost) none unwritten by chance."""
    from medvlm_audit.suites.reports.audit import absent_strong_null
    from medvlm_audit.suites.reports.terms import report_count_matrices

    rng = np.random.default_rng(1)
    ref, rf, _ = _planted(200, rng)
    pred = ["heart size normal lungs clear"] * 20
    pf = np.array([i % 2 == 0 for i in range(20)])
    res = corpus_audit(_corpus(ref, rf, "r"), _corpus(pred, pf, "p"), **FAST)
    got = res.summary["absent_strong_null_matched"]
    (C_ref, _), vocab = report_count_matrices(_corpus(ref, rf, "r").texts, pred)
    z = res.cad.set_index("word")["z_ref"].reindex(vocab).to_numpy(dtype=float)
    strong = np.abs(z) > 2
    assert got["strong"] == strong.sum() == (np.abs(res.cad["z_ref"]) > 2).sum()
    want = absent_strong_null(C_ref, np.asarray(rf, dtype=bool), strong, int(pf.sum()), int((~pf).sum()), seed=0)
    assert got == want
    # every strong word is written somewhere in the reference: a sample of its own size writes them all
    full = absent_strong_null(C_ref, np.asarray(rf, dtype=bool), strong, int(np.sum(rf)), int(np.sum(~np.asarray(rf))))
    assert full["p95"] == 0
