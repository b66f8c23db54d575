"""Grounding analysis: hand-computed metrics on a 6-case table, designed categories of synthetic models,
BH families, the IS denominator option, robustness, degenerate and malformed inputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from medvlm_audit import stats
from medvlm_audit.suites.grounding.analysis import analyse_grounding
from medvlm_audit.suites.grounding.categories import Rate, categorize, threshold_sweep
from medvlm_audit.suites.grounding.metrics import AnalysisInputError
from medvlm_audit.suites.grounding.synthetic import (
    SyntheticDesign,
    always_yes,
    ignores_image,
    make_tidy,
    paper_sized_models,
    tidy_from_answers,
    unstable,
    uses_image,
)

B = 2000

# ----------------------------------------------------------------------------------------- a table counted by hand
# cases c0..c5: labels 1,1,1,1,0,0; c0..c3 boxed (maskable).
LABELS = [1, 1, 1, 1, 0, 0]
BOX = [True, True, True, True, False, False]
A = {  # multimodal model A
    "original": [1, 1, 1, 0, 0, 1],  # correct: c0 c1 c2 c4; wrong: c3 c5
    "swap": [1, 1, 0, 0, 0, -1],  # among correct & parsed: c0 c1 c4 unchanged, c2 flipped -> UAR 3/4
    "target_mask": [0, 1, -1, 1, -2, -2],  # correct boxed parsed: c0 flipped, c1 kept (c2 unparsed) -> CGR 1/2
    "irrelevant_mask": [1, 0, 1, 1, -2, -2],  # correct boxed: c0 kept, c1 flipped, c2 kept -> IS 2/3; all: 2/4
}
T = {"original": [1, 1, 1, 1, 1, 0]}  # text-only: only original rows; correct everywhere but c4
P_YES_A = [0.95, 0.85, 0.75, 0.65, 0.25, 0.35]


def _tiny(**kw) -> pd.DataFrame:
    return tidy_from_answers({"A": A, "T": T}, LABELS, BOX, modality={"A": "multimodal", "T": "text_only"},
                             confidence={"A": P_YES_A}, **kw)


def _m(res, model, metric, subset="all"):
    df = res.metrics
    row = df[(df.model == model) & (df.metric == metric) & (df.subset == subset)]
    assert len(row) == 1, (model, metric, subset, len(row))
    return row.iloc[0]


@pytest.fixture(scope="module")
def tiny():
    return analyse_grounding(_tiny(), B=B)


def test_hand_computed_rates(tiny):
    exp = {"accuracy": (4, 6), "sensitivity": (3, 4), "specificity": (1, 2), "parse_rate": (6, 6),
           "cgr": (1, 2), "uar": (3, 4), "is": (2, 3), "is_all_parsed": (2, 4), "image_contingent": (1, 4)}
    for metric, (k, n) in exp.items():
        r = _m(tiny, "A", metric)
        assert r.n == n, metric
        assert r.point == pytest.approx(100 * k / n), metric
        assert r.unit == "%"
    # SE is the analytic binomial SE in points
    r = _m(tiny, "A", "uar")
    assert r.se == pytest.approx(100 * math.sqrt(0.75 * 0.25 / 4))
    # interval comes from stats.proportion on the same vector: Wilson, as n = 4 < 30
    est = stats.proportion(np.array([1, 1, 0, 1]), B=B, seed=0, wilson_below=30)
    assert (r.ci_low, r.ci_high) == pytest.approx((100 * est.ci_low, 100 * est.ci_high))
    assert (r.ci_low, r.ci_high) == pytest.approx(tuple(100 * v for v in stats.wilson_interval(3, 4)))
    assert r.ci_method == "wilson"
    assert _m(tiny, "A", "parse_rate", "condition=target_mask").point == pytest.approx(75.0)
    # GSP = CGR - (100 - IS) = 50 - (100 - 66.67)
    assert _m(tiny, "A", "gsp").point == pytest.approx(50 - (100 - 200 / 3))
    assert _m(tiny, "A", "gsp").unit == "pp"


def test_text_only_answers_reused_under_image_conditions(tiny):
    assert _m(tiny, "T", "accuracy").point == pytest.approx(500 / 6)
    assert (_m(tiny, "T", "uar").point, _m(tiny, "T", "uar").n) == (100.0, 5)
    assert (_m(tiny, "T", "cgr").point, _m(tiny, "T", "cgr").n) == (0.0, 4)
    assert (_m(tiny, "T", "is").point, _m(tiny, "T", "is").n) == (100.0, 4)
    assert any("text-only" in n for n in tiny.summary["notes"])


def test_hand_computed_calibration(tiny):
    assert _m(tiny, "A", "auroc").point == pytest.approx(1.0)
    assert _m(tiny, "A", "brier").point == pytest.approx(0.395 / 6)
    # ECE on the confidence in the given answer: (2*.35 + 2*.25 + .15 + .05) / 6
    assert _m(tiny, "A", "ece").point == pytest.approx(1.4 / 6)
    assert _m(tiny, "A", "confidence_coverage").point == pytest.approx(100.0)
    assert _m(tiny, "A", "conf_grounded_correct").point == pytest.approx(0.95)
    # paper Table 3 over all parsed cases: ungrounded-correct = every correct case that is not grounded-correct:
    # c1 (kept under the mask, 0.85), c2 (mask answer unparsed, 0.75) and c4 (no box, No at P(yes) .25: 0.75)
    r = _m(tiny, "A", "conf_ungrounded_correct")
    assert (r.point, r.n) == (pytest.approx((0.85 + 0.75 + 0.75) / 3), 3)
    # the boxed-only split, kept as a named variant: c1 alone
    r = _m(tiny, "A", "conf_ungrounded_correct_boxed")
    assert (r.point, r.n) == (pytest.approx(0.85), 1) and "boxed-only variant" in r.method
    r = _m(tiny, "A", "conf_incorrect")
    assert (r.point, r.n) == (pytest.approx(0.35), 2)


def test_hand_computed_paired_comparisons(tiny):
    c = tiny.comparisons
    acc = c[(c.family == "baseline:tiny:accuracy:T") & (c.model_a == "A")].iloc[0]
    assert acc.n == 6 and acc["diff"] == pytest.approx(100 * (4 / 6 - 5 / 6))
    # 6 shared cases < 10: no test, the row says why (the bootstrap p is checked by hand on 12 cases below)
    assert math.isnan(acc.p) and math.isnan(acc.ci_low) and "fewer than 10" in acc.note
    # UAR on cases correct for both and swap-parsed for both: c0 c1 c2 -> A 2/3, T 3/3
    uar = c[(c.family == "baseline:tiny:uar:T") & (c.model_a == "A")].iloc[0]
    assert uar.n == 3 and uar["diff"] == pytest.approx(100 * (2 / 3 - 1))
    assert acc.test == "paired-bootstrap"
    pairs = c[c.family == "pairs:tiny:accuracy"]
    assert len(pairs) == 1 and pairs.iloc[0]["diff"] == pytest.approx(acc["diff"])


def test_tiny_categories_and_reasons(tiny):
    cats = tiny.categories.set_index("model")
    # IS 2/3 = 66.7 < 70, but its interval [20.8, 93.9] does not lie below 70 (issue 21)
    assert cats.loc["A", "category"] == "indeterminate"
    assert "IS 66.7% [20.8, 93.9] on 3 cases: too few to call unstable" in cats.loc["A", "reason"]
    assert 0 <= cats.loc["A", "support"] <= 1
    # never changed, but on fewer than 100 cases
    assert cats.loc["T", "category"] == "indeterminate"
    assert "fewer than 100" in cats.loc["T", "reason"]
    assert cats.loc["A", "n_cgr"] == 2 and cats.loc["A", "gsp"] == pytest.approx(50 - (100 - 200 / 3))


def test_is_denominator_option():
    res = analyse_grounding(_tiny(), B=B, is_denominator="all")
    r = _m(res, "A", "is")
    assert (r.point, r.n) == (50.0, 4)
    assert "Eq. 8" in r.method
    assert res.summary["is_denominator_option"] == "all" and "Eq. 8" in res.summary["is_denominator"]
    # the GSP follows the chosen IS
    assert _m(res, "A", "gsp").point == pytest.approx(50 - (100 - 50))
    default = analyse_grounding(_tiny(), B=B)
    assert "default denominator" in _m(default, "A", "is").method
    assert _m(default, "A", "is_all_parsed").point == 50.0
    with pytest.raises(ValueError, match="is_denominator"):
        analyse_grounding(_tiny(), is_denominator="parsed")


def test_index_mode_and_clusters_run():
    res = analyse_grounding(_tiny(), B=500, mode="index", cluster_by_patient=True)
    r = _m(res, "A", "uar")
    # index mode with patient clusters: the cluster bootstrap at every n (index mode never switches to Wilson)
    est = stats.proportion(np.array([1, 1, 0, 1]), B=500, seed=0, mode="index", clusters=np.array(["p0", "p1", "p2", "p4"]))
    assert (r.ci_low, r.ci_high) == pytest.approx((100 * est.ci_low, 100 * est.ci_high))
    assert r.se == pytest.approx(100 * est.se)
    assert "cluster bootstrap" in r.method and "index" in r.method and r.ci_method == "bootstrap-percentile"
    # exact-counts mode with clusters: the cluster bootstrap, Wilson only where fewer than 10 events (said so)
    res2 = analyse_grounding(_tiny(), B=500, cluster_by_patient=True)
    r2 = _m(res2, "A", "uar")
    assert r2.ci_method == "wilson" and "ignores the patient clustering" in r2.note
    # what does not honour the clustering says so on its row
    assert "ignores patient clustering" in _m(res, "A", "auroc").note
    sub = res.comparisons[res.comparisons.family.str.startswith("subgroups:")]
    assert sub.note.str.contains("ignores patient clustering").all()
    mc = res.comparisons[res.comparisons.test == "mcnemar-exact"]
    assert len(mc) and mc.note.str.contains("no test|no patient clustering").all()


# ----------------------------------------------------------------------------------------- designed behaviour


@pytest.fixture(scope="module")
def designed():
    models = [
        uses_image("reader", cgr=0.30, swap_flip=0.20, irrelevant_flip=0.02, accuracy=0.75),
        uses_image("probe", cgr=0.08, swap_flip=0.15, irrelevant_flip=0.0, accuracy=0.7, modality="vision_only"),
        unstable("wobbly", cgr=0.4, irrelevant_flip=0.45),
        always_yes("yes-man"),
        ignores_image("prior", accuracy=0.7),
        ignores_image("prior-mm", accuracy=0.66, modality="multimodal"),
    ]
    design = SyntheticDesign(n_cases=700, n_boxed=350, probe_set="syn", n_res512=60, n_prompt=64)
    tidy = make_tidy(models, design)
    return tidy, analyse_grounding(tidy, B=B)


def test_designed_categories(designed):
    _, res = designed
    cats = dict(zip(res.categories.model, res.categories.category))
    assert cats == {"reader": "uses_image", "probe": "uses_image", "wobbly": "unstable", "yes-man": "ignores_image",
                    "prior": "ignores_image", "prior-mm": "ignores_image"}
    assert "uses the image" in res.verdicts["reader"]
    assert "ignores the image" in res.verdicts["yes-man"]
    assert "unstable" in res.verdicts["wobbly"]


def test_designed_rates_are_recovered_exactly(designed):
    tidy, res = designed
    # count the eligible cases from the table itself, then compare with the designed exact share
    t = tidy[(tidy.model == "reader") & (tidy.resolution == 224) & (tidy.prompt_variant == "default")]
    o = t[t.condition == "original"].set_index("case_id")
    correct_boxed = o[(o.parsed == o.label) & o.has_box].index
    n = len(correct_boxed)
    assert _m(res, "reader", "cgr").n == n
    assert _m(res, "reader", "cgr").point == pytest.approx(100 * round(0.30 * n) / n)
    nc = int((o.parsed == o.label).sum())
    assert _m(res, "reader", "uar").point == pytest.approx(100 * (1 - round(0.20 * nc) / nc))
    assert _m(res, "reader", "accuracy").point == pytest.approx(100 * round(0.75 * 700) / 700)
    assert _m(res, "yes-man", "sensitivity").point == 100.0 and _m(res, "yes-man", "specificity").point == 0.0


def test_per_finding_cgr_uses_rate_interval(designed):
    _, res = designed
    rows = res.metrics[(res.metrics.model == "reader") & (res.metrics.metric == "cgr")
                       & res.metrics.subset.str.startswith("finding=")]
    assert len(rows) == 8
    for _, r in rows.iterrows():
        lo, hi = stats.rate_interval(int(r.k), int(r.n), B=B)
        assert (r.ci_low, r.ci_high) == pytest.approx((100 * lo, 100 * hi))
        assert r.ci_high > r.ci_low
    assert (rows.ci_method == "wilson").any()
    assert rows.n.sum() == _m(res, "reader", "cgr").n


def test_every_rate_uses_rate_interval():
    """Every single-rate row prints stats.rate_interval (issue 21 item 1): Wilson where min(k, n - k) < 10 at any
    n (the old rule kept the percentile bootstrap from n = 30 on, [0, 0] for 0/33), the bootstrap elsewhere."""
    models = [uses_image("reader", cgr=0.3, swap_flip=0.2, irrelevant_flip=0.02, accuracy=0.75),
              ignores_image("prior", accuracy=0.7)]
    tidy = make_tidy(models, SyntheticDesign(n_cases=160, n_boxed=70, probe_set="small", n_res512=30, n_prompt=24))
    res = analyse_grounding(tidy, B=B)
    rates = res.metrics[(res.metrics.unit == "%") & (res.metrics.n > 0) & (res.metrics.metric != "gsp")]
    kinds = {s.split("=")[0] for s in rates.subset}
    assert {"finding", "sex", "age", "res", "prompt"} <= kinds
    few = np.minimum(rates.k, rates.n - rates.k) < 10
    assert (rates[few].ci_method == "wilson").all() and (rates[~few].ci_method == "bootstrap-percentile").all()
    assert (few & (rates.n >= 30)).any()  # Wilson also at n >= 30 where events are few
    for _, r in rates.iterrows():
        k = int(r.k) if r.metric != "image_contingent" else int(r.n) - int(r.k)  # reflected UAR
        lo, hi = stats.rate_interval(k, int(r.n), B=B)
        if r.metric == "image_contingent":
            lo, hi = 1 - hi, 1 - lo
        assert (r.ci_low, r.ci_high) == pytest.approx((100 * lo, 100 * hi)), (r.metric, r.subset)
        assert r.ci_high > r.ci_low, (r.metric, r.subset)
    gsp = res.metrics[res.metrics.metric == "gsp"]
    # GSP: its own bootstrap, or where CGR or IS has few events the Bonferroni-Wilson interval (issue 21, defect 5)
    assert set(gsp.ci_method) <= {"bootstrap-percentile", "wilson-bonferroni", "none"}


def test_brier_ece_and_confidence_regimes_have_bootstrap_intervals(designed):
    tidy, res = designed
    m = res.metrics
    for metric in ("brier", "ece", "conf_grounded_correct", "conf_ungrounded_correct", "conf_incorrect", "auroc"):
        rows = m[(m.metric == metric) & (m.model == "reader")]
        assert len(rows) == 1, metric
        r = rows.iloc[0]
        assert r.ci_method == "bootstrap-percentile", metric
        assert np.isfinite([r.se, r.ci_low, r.ci_high]).all(), metric
        assert r.ci_low <= r.point <= r.ci_high and r.se > 0, metric
    # the bootstrap SD of a mean is close to its analytic SE: Brier = mean of (P(yes) - label)^2 over the cases
    o = tidy[(tidy.model == "reader") & (tidy.condition == "original") & (tidy.resolution == 224)
             & (tidy.prompt_variant == "default") & tidy.confidence.notna() & (tidy.parsed >= 0)]
    sq = (o.confidence - o.label) ** 2
    brier = _m(res, "reader", "brier")
    assert brier.point == pytest.approx(sq.mean()) and brier.n == len(sq)
    assert brier.se == pytest.approx(sq.std(ddof=0) / math.sqrt(len(sq)), rel=0.1)
    # the AUROC comes from the same shared resampling, and equals the model's own stats.auroc_interval
    auroc = _m(res, "reader", "auroc")
    est = stats.auroc_interval(o.confidence.to_numpy(), o.label.to_numpy(), B=B, mode="exact-counts")
    assert (auroc.point, auroc.se, auroc.ci_low, auroc.ci_high) == pytest.approx((est.point, est.se, est.ci_low,
                                                                                  est.ci_high), abs=1e-12)
    inc = _m(res, "reader", "conf_incorrect")
    sd = float(inc.note.split("=")[1])
    assert inc.se == pytest.approx(sd / math.sqrt(inc.n), rel=0.15)
    # a model with every confidence equal: ECE is N/A and carries no interval, Brier still has one
    flat = tidy_from_answers({"flat": {"original": [1, 0, 1, 0, 1, 0]}}, LABELS, BOX, confidence={"flat": [0.5] * 6})
    res2 = analyse_grounding(flat, B=300)
    assert _m(res2, "flat", "ece").ci_method == "none" and np.isfinite(_m(res2, "flat", "brier").ci_low)


def test_results_do_not_depend_on_the_thread_count(designed):
    # workers=3: three resampling threads, and each model's metric rows in one of three forked processes
    tidy, _ = designed
    one = analyse_grounding(tidy, B=600, workers=1)
    three = analyse_grounding(tidy, B=600, workers=3)
    pd.testing.assert_frame_equal(one.metrics, three.metrics)
    pd.testing.assert_frame_equal(one.comparisons, three.comparisons)
    pd.testing.assert_frame_equal(one.categories, three.categories)
    assert one.verdicts == three.verdicts


def test_bh_families(designed):
    _, res = designed
    c = res.comparisons
    fams = set(c.family)
    baselines = ["prior"]  # the only text_only model
    for metric in ("accuracy", "uar"):
        f = f"baseline:syn:{metric}:prior"
        assert f in fams and (c.family == f).sum() == 5
    assert (c.family == "pairs:syn:accuracy").sum() == 15
    for m in ("reader", "probe", "wobbly", "yes-man", "prior", "prior-mm"):
        sub = c[c.family == f"subgroups:syn:{m}"]
        assert list(zip(sub.metric, sub.subset)) == [("cgr", "sex"), ("cgr", "view"), ("cgr", "age"), ("uar", "sex"),
                                                     ("uar", "age")]
    for fam, grp in c.groupby("family"):
        expected = stats.benjamini_hochberg(grp.p.to_numpy(float))
        np.testing.assert_allclose(grp.p_adj.to_numpy(float), expected, equal_nan=True)
    # adjusting within families differs from one global adjustment
    glob = stats.benjamini_hochberg(c.p.to_numpy(float))
    assert not np.allclose(glob, c.p_adj.to_numpy(float), equal_nan=True)
    assert baselines == res.summary["baselines"]


def test_explicit_baselines(designed):
    tidy, _ = designed
    res = analyse_grounding(tidy, B=300, baselines=["prior-mm", "prior"])
    fams = set(res.comparisons.family)
    assert {"baseline:syn:accuracy:prior-mm", "baseline:syn:uar:prior"} <= fams
    with pytest.raises(AnalysisInputError, match="not-a-model"):
        analyse_grounding(tidy, B=300, baselines=["not-a-model"])


def test_subgroup_tests_detect_a_view_effect():
    models = [uses_image("viewy", cgr=0.7, ap_cgr=0.02, swap_flip=0.2, irrelevant_flip=0.0, accuracy=0.8)]
    tidy = make_tidy(models, SyntheticDesign(n_cases=600, n_boxed=400, probe_set="v"))
    res = analyse_grounding(tidy, B=300)
    c = res.comparisons.set_index(["metric", "subset"])
    view = c.loc[("cgr", "view")]
    assert view.test == "permutation-|diff|" and view.p < 0.01 and view["diff"] > 50
    assert c.loc[("cgr", "age")].test == "permutation-anova-F"
    assert "PA" in view.note and "AP" in view.note
    # CGR by view appears as descriptive rates too
    assert _m(res, "viewy", "cgr", "view=PA").point > _m(res, "viewy", "cgr", "view=AP").point + 50


def test_threshold_sweep_of_an_unstable_model():
    # the paper's Mistral-Small: IS = 56 -> uses image at T = 50, unstable for T = 60..90
    # (on enough cases that the IS interval [53, 59] lies below 60: the rule reads intervals, issue 21)
    cgr, uar, is_ = Rate(40.0, 20.0, 60.0, 25, 10), Rate(75.0, 70.0, 80.0, 300, 225), Rate(56.0, 53.0, 59.0, 900, 504)
    assert categorize(cgr, uar, is_)[0] == "unstable"
    # the same IS on 25 cases [36, 76]: too few to call unstable
    cat, reason = categorize(cgr, uar, Rate(56.0, 36.0, 76.0, 25, 14))
    assert cat == "indeterminate" and reason == "IS 56.0% [36.0, 76.0] on 25 cases: too few to call unstable"
    sweep = dict(threshold_sweep(cgr, uar, is_))
    assert sweep[50] == "uses_image" and all(sweep[t] == "unstable" for t in range(60, 95, 5))
    # an image user with IS 80: indeterminate under the main rule (between 70 and 90), with the reason
    cat, reason = categorize(cgr, uar, Rate(80.0, 70.0, 90.0, 200, 160))
    assert cat == "indeterminate" and "between 70 and 90" in reason
    # a CGR interval touching 0 is not enough for uses image
    cat, reason = categorize(Rate(2.0, 0.0, 5.0, 100, 2), uar, Rate(99.0, 97.0, 100.0, 100, 99))
    assert cat == "indeterminate" and "does not exclude 0" in reason


def test_sweep_table_and_stability(designed):
    _, res = designed
    sw = res.threshold_sweep
    assert set(sw.threshold) == set(range(50, 95, 5))
    stable = dict(zip(res.categories.model, res.categories.sweep_stable))
    assert stable["reader"] and stable["yes-man"]
    assert len(sw) == 6 * 9


def test_robustness_resolution_and_prompt(designed):
    _, res = designed
    rb = res.robustness
    resn = rb[(rb.kind == "resolution") & (rb.model != "")]
    assert len(resn) == 6
    # the low-CGR probe may lose "interval excludes 0" on ~40 cases, and the unstable model "IS interval below
    # 70" (then indeterminate: too few cases); every other model keeps its category
    assert not resn[~resn.model.isin(["probe", "wobbly"])].changed.any()
    wob = resn[resn.model == "wobbly"].iloc[0]
    assert not bool(wob.changed) or wob.category == "indeterminate"
    probe = resn[resn.model == "probe"].iloc[0]
    assert bool(probe.changed) == (probe.category != "uses_image")
    cohort = rb[(rb.kind == "resolution") & (rb.model == "")].iloc[0]
    assert cohort.n_models == 6 and -1 <= cohort.rho <= 1
    assert (res.comparisons.test == "spearman-permutation").any()
    pr = rb[rb.kind == "prompt"]
    assert set(pr.variant) == {"prompt=terse", "prompt=radiologist"}
    assert (pr.parse_rate == 100.0).all()
    assert _m(res, "reader", "cgr", "res=512").n > 0
    assert _m(res, "reader", "accuracy", "prompt=default").n == 64


def test_cross_dataset_rank_agreement():
    models = [uses_image(f"u{i}", cgr=0.2, swap_flip=0.05 * (i + 1), accuracy=0.55 + 0.05 * i) for i in range(4)]
    models.append(ignores_image("t", accuracy=0.6))
    t1 = make_tidy(models, SyntheticDesign(n_cases=400, n_boxed=150, probe_set="one"))
    t2 = make_tidy(models, SyntheticDesign(n_cases=300, n_boxed=0, probe_set="two", seed=7))
    res = analyse_grounding(pd.concat([t1, t2], ignore_index=True), B=300)
    cd = res.robustness[res.robustness.kind == "cross_dataset"]
    assert set(cd.metric) == {"accuracy", "uar"} and (cd.n_models == 5).all()
    uar = cd[(cd.metric == "uar") & (cd.variant == "all models")].iloc[0]
    assert uar.rho == pytest.approx(1.0)
    # the box-free probe set cannot estimate CGR / IS: indeterminate with the reason
    two = res.categories[res.categories.probe_set == "two"].set_index("model")
    assert (two.category == "indeterminate").all()
    assert "CGR and IS are not estimable" in two.loc["u0", "reason"] and "UAR below 100" in two.loc["u0", "reason"]
    assert "UAR = 100:" in two.loc["t", "reason"]
    assert res.verdicts["u0"].startswith("one: ")


# ----------------------------------------------------------------------------------------- degenerate input


def _no_nan_text(res) -> None:
    texts = list(res.verdicts.values()) + list(res.categories.reason) + list(res.metrics.note) + \
        list(res.comparisons.note)
    for t in texts:
        words = str(t).lower().replace("[", " ").replace("]", " ").replace(",", " ").split()
        assert "nan" not in words and "nan%" not in words, t
    json.dumps(res.summary, allow_nan=False)


def test_zero_parsed_missing_conditions_constant_confidence():
    answers = {
        "dead": {"original": [-1] * 6, "swap": [-1] * 6},
        "flat": {"original": [1, 0, 1, 0, 1, 0], "swap": [1, 0, 1, 0, 1, 0]},
    }
    tidy = tidy_from_answers(answers, LABELS, BOX, confidence={"flat": [0.5] * 6})
    res = analyse_grounding(tidy, B=300)
    for metric in ("accuracy", "cgr", "uar", "is", "gsp", "auroc", "brier", "ece"):
        r = _m(res, "dead", metric)
        assert r.n == 0 and r.note == "not estimable (n = 0)", metric
    assert _m(res, "dead", "parse_rate").point == 0.0
    assert _m(res, "flat", "auroc").note == "N/A (degenerate confidence)"
    assert _m(res, "flat", "ece").note == "N/A (degenerate confidence)"
    assert _m(res, "flat", "cgr").note == "not estimable (n = 0)"  # no target-mask condition at all
    cats = res.categories.set_index("model")
    # parse rate 0% on the original image: not assessable (issue 21); the other model is indeterminate
    assert cats.loc["dead", "category"] == "not_assessable" and cats.loc["flat", "category"] == "indeterminate"
    assert cats.loc["dead", "reason"] == "not assessable (parse rate 0.0% under original)"
    assert "CGR and IS are not estimable" in cats.loc["flat", "reason"]
    assert res.verdicts["dead"] == "no parsed answer on the original image (6 asked): not assessable"
    assert any("target_mask" in n for n in res.summary["notes"])
    _no_nan_text(res)


def test_one_case_subgroup_and_binary_confidence():
    answers = {"m": {"original": [1, 1, 1, 0, 0, 1], "target_mask": [0, 1, 1, 1, -2, -2],
                     "irrelevant_mask": [1, 1, 1, 0, -2, -2], "swap": [1, 0, 1, 0, 0, 1]}}
    meta = {"sex": ["M", "M", "M", "F", "M", "M"], "view": ["PA", "PA", "PA", "PA", "PA", "PA"],
            "age": [30.0, 30.0, 80.0, 60.0, np.nan, 40.0]}
    tidy = tidy_from_answers(answers, LABELS, BOX, confidence={"m": [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]}, meta=meta)
    res = analyse_grounding(tidy, B=300)
    c = res.comparisons[res.comparisons.family.str.startswith("subgroups:")].set_index(["metric", "subset"])
    # view: only PA -> one group: not estimable, no exception; sex for CGR: F has no correct boxed case
    assert math.isnan(c.loc[("cgr", "view")].p) and "not estimable" in c.loc[("cgr", "view")].note
    assert math.isnan(c.loc[("cgr", "view")].p_adj)
    for metric in ("auroc", "brier", "ece"):  # all confidences exactly 0 or 1: all three N/A, not only ECE
        r = _m(res, "m", metric)
        assert r.note == "N/A (degenerate confidence)" and math.isnan(r.point) and math.isnan(r.ci_low), metric
    _no_nan_text(res)


def test_empty_table_returns_empty_analysis():
    tidy = tidy_from_answers({"a": {"original": [1]}}, [1], [True]).iloc[:0]
    res = analyse_grounding(tidy)
    assert len(res.metrics) == 0 and res.verdicts == {} and len(res.categories) == 0
    json.dumps(res.summary, allow_nan=False)


# ----------------------------------------------------------------------------------------- malformed input


def test_bad_input_names_row_and_column():
    tidy = _tiny()
    bad = tidy.copy()
    bad.loc[3, "parsed"] = 2
    with pytest.raises(AnalysisInputError, match=r"'parsed'.*row 3.*case 'c3'"):
        analyse_grounding(bad)
    with pytest.raises(AnalysisInputError, match="required column"):
        analyse_grounding(tidy.drop(columns=["label"]))
    dup = pd.concat([tidy, tidy.iloc[[0]]], ignore_index=True)
    with pytest.raises(AnalysisInputError, match="duplicate answer for model 'A', case 'c0'"):
        analyse_grounding(dup)
    two_labels = tidy.copy()
    two_labels.loc[(two_labels.model == "T") & (two_labels.case_id == "c1"), "label"] = 0
    with pytest.raises(AnalysisInputError, match="case 'c1'.*two labels"):
        analyse_grounding(two_labels)
    conf = tidy.copy()
    conf.loc[0, "confidence"] = 1.5
    with pytest.raises(AnalysisInputError, match="confidence"):
        analyse_grounding(conf)
    with pytest.raises(ValueError, match="mode"):
        analyse_grounding(tidy, mode="fast")


def test_repeats_are_ignored_with_a_note():
    tidy = _tiny()
    rep = tidy[tidy.model == "A"].copy()
    rep["sample_index"] = 1
    rep["parsed"] = 0
    res = analyse_grounding(pd.concat([tidy, rep], ignore_index=True), B=300)
    assert _m(res, "A", "cgr").point == 50.0
    assert any("sample_index" in n for n in res.summary["notes"])


@pytest.mark.slow
def test_paper_sized_cohort_categories():
    from medvlm_audit.suites.grounding.synthetic import paper_sized_run

    res = analyse_grounding(paper_sized_run(n_cases=1200, n_boxed=500), B=500)
    cats = dict(zip(res.categories.model, res.categories.category))
    expected = {m.name: ("unstable" if m.name.startswith("mistral") else
                         "ignores_image" if m.cgr == 0 and m.swap_flip == 0 else "uses_image")
                for m in paper_sized_models()}
    assert cats == expected


def test_text_only_rows_filled_and_no_image_condition():
    models = [uses_image("reader", cgr=0.3, swap_flip=0.2), ignores_image("prior", accuracy=0.7)]
    design = SyntheticDesign(n_cases=300, n_boxed=150, probe_set="f", text_only_rows="original_only", no_image=True)
    tidy = make_tidy(models, design)
    assert set(tidy[tidy.model == "prior"].condition) == {"original"}
    res = analyse_grounding(tidy, B=300)
    assert (_m(res, "prior", "uar").point, _m(res, "prior", "cgr").point) == (100.0, 0.0)
    # every correct-on-original case gets its (filled) swap answer
    assert _m(res, "prior", "uar").n == _m(res, "prior", "accuracy").k
    ni = _m(res, "reader", "no_image_accuracy")
    t = tidy[(tidy.model == "reader") & (tidy.condition == "no_image")]
    assert ni.n == len(t) and ni.point == pytest.approx(100 * (t.parsed == t.label).mean())


def test_category_reads_the_printed_interval():
    # the rule reads the interval the report prints (stats.rate_interval; DESIGN.md "Categories", issue 21):
    # CGR 1/20 has Wilson [0.9, 23.6], excluding 0; IS 20/20 has Wilson [83.9, 100], above 70
    n = 20
    labels, box = [1] * n, [True] * n
    answers = {"m": {"original": [1] * n, "target_mask": [0] + [1] * (n - 1), "irrelevant_mask": [1] * n,
                     "swap": [1] * n}}
    res = analyse_grounding(tidy_from_answers(answers, labels, box), B=2000)
    r = _m(res, "m", "cgr")
    assert (r.n, r.point) == (20, 5.0) and r.ci_method == "wilson" and r.ci_low > 0
    lo, _hi = stats.rate_interval(1, 20)
    assert r.ci_low == pytest.approx(100 * lo)
    cat = res.categories.set_index("model").loc["m"]
    assert cat.category == "uses_image"
    # no flip at all: CGR 0/20, its interval [0, 16.1] does not exclude 0
    answers["m"]["target_mask"] = [1] * n
    cat = analyse_grounding(tidy_from_answers(answers, labels, box), B=2000).categories.set_index("model").loc["m"]
    assert cat.category == "indeterminate"


def test_gsp_interval_recomputes_cgr_and_is_on_their_own_denominators():
    # 20 correct boxed cases flip under the target mask but have no parsed irrelevant-mask answer; 20 more are
    # parsed under both masks and never change; 20 more keep their answer under the target mask and change it
    # under the irrelevant one. CGR 20/60, IS 20/40 = 50, GSP = 33.3 - 50. A paired bootstrap on the cases parsed
    # under both masks excluded its own point (issue 12 item 6). (With IS 20/20 this design now gets the
    # few-events interval: the next test.)
    n = 60
    answers = {"m": {"original": [1] * n, "target_mask": [0] * 20 + [1] * 40,
                     "irrelevant_mask": [-1] * 20 + [1] * 20 + [0] * 20}}
    res = analyse_grounding(tidy_from_answers(answers, [1] * n, [True] * n), B=2000)
    g = _m(res, "m", "gsp")
    assert g.point == pytest.approx(100 / 3 - 50)
    assert g.ci_method == "bootstrap-percentile"
    assert g.ci_low <= g.point <= g.ci_high and g.ci_high - g.ci_low > 10
    # by hand: the same draws as a ratio bootstrap of (flips / CGR cases, unchanged / IS cases) over the 60 cases
    num = np.stack([[1.0] * 20 + [0.0] * 40, [0.0] * 20 + [1.0] * 20 + [0.0] * 20], axis=1)
    den = np.stack([[1.0] * 60, [0.0] * 20 + [1.0] * 40], axis=1)
    d = stats.case_bootstrap_ratios(num, den, B=2000, seed=0)
    want = stats.percentile_interval(100 * (d[:, 0] - (1 - d[:, 1])))
    assert (g.ci_low, g.ci_high) == pytest.approx(want)


def test_gsp_with_few_events_gets_an_honest_interval_and_no_zero_se():
    # the audit's pilot (issue 21, defects 5 and 12): 6 boxed cases, no flip under either mask: CGR 0/6 printed
    # [0.0, 39.0] while GSP printed "+0.0 ± 0.0 [+0.0, +0.0] (n = 6)" (the case bootstrap is degenerate)
    n = 6
    answers = {"m": {"original": [1] * n, "target_mask": [1] * n, "irrelevant_mask": [1] * n}}
    res = analyse_grounding(tidy_from_answers(answers, [1] * n, [True] * n), B=2000)
    g, cgr, is_ = (_m(res, "m", k) for k in ("gsp", "cgr", "is"))
    assert (cgr.k, cgr.n, is_.k, is_.n) == (0, 6, 6, 6) and g.point == pytest.approx(0.0)
    c_lo, c_hi = stats.wilson_interval(0, 6, 0.025)
    i_lo, i_hi = stats.wilson_interval(6, 6, 0.025)
    assert (g.ci_low, g.ci_high) == pytest.approx((100 * (c_lo - (1 - i_lo)), 100 * (c_hi - (1 - i_hi))))
    assert g.ci_low < 0 < g.ci_high and g.ci_high > cgr.ci_high  # at least as wide as CGR's own interval
    assert g.ci_method == "wilson-bonferroni" and "Bonferroni" in g.note and math.isnan(g.se)
    from medvlm_audit.report.html import format_estimate
    assert format_estimate(g.point, g.se, g.ci_low, g.ci_high, g.n, "pp") == "+0.0 [-45.6, +45.6] (n = 6)"
    assert format_estimate(cgr.point, cgr.se, cgr.ci_low, cgr.ci_high, cgr.n) == "0.0 [0.0, 39.0] (n = 6)"
    # index mode keeps the released code's bootstrap (tests/test_index_mode_released.py)
    idx = _m(analyse_grounding(tidy_from_answers(answers, [1] * n, [True] * n), B=200, mode="index"), "m", "gsp")
    assert idx.ci_method == "bootstrap-percentile" and (idx.ci_low, idx.ci_high) == (0.0, 0.0)


def test_no_paired_test_below_ten_shared_cases_and_mcnemar_beside_accuracy():
    # 3 shared cases used to give p = 0.0001; now no test, and the row says why (issue 12 item 7)
    answers = {"a": {"original": [1, 1, 1]}, "b": {"original": [0, 0, 0]}}
    res = analyse_grounding(tidy_from_answers(answers, [1, 1, 1], [False] * 3), B=500)
    c = res.comparisons
    boot = c[(c.test == "paired-bootstrap") & (c.metric == "accuracy")].iloc[0]
    assert boot.n == 3 and math.isnan(boot.p) and math.isnan(boot.ci_low) and boot["diff"] == pytest.approx(100.0)
    assert "no test: 3 shared case(s), fewer than 10" in boot.note
    mc = c[c.test == "mcnemar-exact"].iloc[0]
    assert math.isnan(mc.p) and mc.family == boot.family + "|mcnemar"
    # 12 shared cases, discordant pairs 7 (only a correct) vs 1 (only b correct): exact McNemar by hand
    a = [1] * 9 + [0] * 3
    b = [1, 1] + [0] * 7 + [1] + [0] * 2
    res = analyse_grounding(tidy_from_answers({"a": {"original": a}, "b": {"original": b}}, [1] * 12, [False] * 12),
                            B=500)
    c = res.comparisons
    mc = c[c.test == "mcnemar-exact"].iloc[0]
    # p = 2 * P(X <= 1), X ~ Bin(8, 1/2) = 2 * 9 / 256
    assert mc.p == pytest.approx(18 / 256) and mc.n == 12 and "7 only a correct, 1 only b correct" in mc.note
    boot = c[c.test == "paired-bootstrap"].iloc[0]
    d = stats.paired_difference(np.array(a), np.array(b), B=500, seed=0)
    assert boot.n == 12 and boot.p == pytest.approx(d.p) and boot.ci_low == pytest.approx(100 * d.ci_low)
    assert boot.p_adj == pytest.approx(boot.p)  # one-test family: BH leaves the p-value alone
