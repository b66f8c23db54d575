"""Grounding categories from intervals, with bootstrap support and reasons (DESIGN.md "Categories"; issue 21
item 2): unstable only when IS's interval lies below 70, uses image only when CGR's interval excludes 0 and IS's
lies above 70 (IS >= 90), ignores image on >= 100 cases, otherwise indeterminate with the reason."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from medvlm_audit import stats
from medvlm_audit.suites.grounding.analysis import analyse_grounding
from medvlm_audit.suites.grounding.categories import Rate, categorize, categorize_counts
from medvlm_audit.suites.grounding.synthetic import (
    SyntheticDesign,
    always_yes,
    ignores_image,
    make_tidy,
    tidy_from_answers,
    unstable,
    uses_image,
)


def _answers_with(n_cgr: tuple[int, int], n_is: tuple[int, int], n_uar: tuple[int, int] | None = None):
    """Answers on n correct boxed cases (label 1, original 1) with k flips under the target mask and k_is
    unchanged under the irrelevant mask; swap unchanged unless given."""
    k_c, n = n_cgr
    k_i, n_i = n_is
    assert n_i == n
    tm = [0] * k_c + [1] * (n - k_c)
    im = [1] * k_i + [0] * (n - k_i)
    sw = [1] * n if n_uar is None else [1] * n_uar[0] + [0] * (n - n_uar[0])
    return tidy_from_answers({"m": {"original": [1] * n, "target_mask": tm, "irrelevant_mask": im, "swap": sw}},
                             [1] * n, [True] * n)


def _cat(tidy):
    return analyse_grounding(tidy, B=1000).categories.set_index("model").loc["m"]


def test_the_issue_pilot_example_is_indeterminate_with_the_reason():
    # IS 3/7 = 42.9% [15.8, 75.0]: does not exclude 70 -> not unstable (was "unstable" on 7 cases)
    cat = _cat(_answers_with((4, 7), (3, 7)))
    assert cat.category == "indeterminate"
    assert "IS 42.9% [15.8, 75.0] on 7 cases: too few to call unstable" in cat.reason
    assert 0.0 <= cat.support <= 1.0


def test_cgr_5_of_5_with_is_5_of_5_is_not_uses_image():
    # IS 5/5 has the interval [56.6, 100]: it does not lie above 70 (was "uses image")
    cat = _cat(_answers_with((5, 5), (5, 5)))
    assert cat.category == "indeterminate"
    assert "IS 100.0% [56.6, 100.0] on 5 cases: its interval does not lie above 70, too few to call uses image" \
        in cat.reason


def test_unstable_when_the_interval_lies_below_70():
    cat = _cat(_answers_with((20, 60), (20, 60)))  # IS 33.3%, interval well below 70
    assert cat.category == "unstable" and cat.is_high < 70 and cat.support > 0.95


def test_support_says_how_close_the_call_was():
    # IS exactly 90/100 with CGR 30/100: uses image, but about half the draws fall below IS 90
    cat90 = _cat(_answers_with((30, 100), (90, 100)))
    cat89 = _cat(_answers_with((30, 100), (89, 100)))
    assert cat90.category == "uses_image" and cat89.category == "indeterminate"
    assert 0.3 < cat90.support < 0.8 and 0.3 < cat89.support < 0.8
    far = _cat(_answers_with((30, 100), (99, 100)))
    assert far.category == "uses_image" and far.support > 0.9


def test_forty_case_pilot_gives_no_category_its_intervals_do_not_support():
    models = [uses_image("reader", cgr=0.30, swap_flip=0.20, irrelevant_flip=0.02, accuracy=0.75),
              uses_image("probe", cgr=0.08, swap_flip=0.15, irrelevant_flip=0.0, accuracy=0.7),
              unstable("wobbly", cgr=0.4, irrelevant_flip=0.45), unstable("shaky", cgr=0.5, irrelevant_flip=0.8),
              always_yes("yes-man"), ignores_image("prior", accuracy=0.7, modality="multimodal")]
    tidy = make_tidy(models, SyntheticDesign(n_cases=40, n_boxed=20, probe_set="pilot"))
    res = analyse_grounding(tidy, B=1000)
    cats = res.categories
    assert "support" in cats.columns and cats.support.between(0, 1).all()
    for _, r in cats.iterrows():
        if r.category == "unstable":
            assert r.is_high < 70, r
        elif r.category == "uses_image":
            assert r.cgr_low > 0 and r.is_low > 70 and r.is_ >= 90, r
        elif r.category == "ignores_image":
            pytest.fail("ignores image on fewer than 100 cases")
        else:
            assert r.category == "indeterminate" and r.reason
    assert (cats.category == "indeterminate").any()
    # the printed intervals are stats.rate_interval's
    m = res.metrics
    row = m[(m.model == "wobbly") & (m.metric == "is") & (m.subset == "all")].iloc[0]
    lo, hi = stats.rate_interval(int(row.k), int(row.n))
    assert (row.ci_low, row.ci_high) == pytest.approx((100 * lo, 100 * hi))


@pytest.mark.slow
def test_vectorised_rule_agrees_with_the_scalar_rule():
    rng = np.random.default_rng(3)
    agree = checked = 0
    for _ in range(400):
        n_c, n_u, n_i = (int(x) for x in rng.integers(1, 160, size=3))
        k_c = int(rng.binomial(n_c, rng.choice([0.0, 0.05, 0.3])))
        k_u = int(rng.binomial(n_u, rng.choice([1.0, 0.9])))
        k_i = int(rng.binomial(n_i, rng.choice([1.0, 0.95, 0.9, 0.7, 0.5])))
        cgr, uar, is_ = Rate.from_counts(k_c, n_c), Rate.from_counts(k_u, n_u), Rate.from_counts(k_i, n_i)
        lim_lo, lim_hi = (100 * x for x in stats.rate_intervals_limit([k_i, k_c], [n_i, n_c]))
        same_side = ((is_.ci_high < 70) == (lim_hi[0] < 70) and (is_.ci_low > 70) == (lim_lo[0] > 70)
                     and (cgr.ci_low > 0) == (lim_lo[1] > 0))
        if not same_side:
            continue
        checked += 1
        vec = categorize_counts(([k_c], [n_c]), ([k_u], [n_u]), ([k_i], [n_i]), min_n=20)[0]
        agree += vec == categorize(cgr, uar, is_, min_n=20)[0]
    assert checked > 350 and agree == checked


@pytest.mark.slow
def test_categories_csv_has_support(tmp_path):
    from medvlm_audit.report import write_report
    from medvlm_audit.suites.grounding.suite import grounding_result

    res = analyse_grounding(_answers_with((4, 7), (3, 7)), B=500)
    write_report(grounding_result(res), tmp_path / "r", suite="grounding", title="t")
    cats = pd.read_csv(tmp_path / "r" / "categories.csv")
    assert {"category", "support", "reason"} <= set(cats.columns)
    html = (tmp_path / "r" / "report.html").read_text()
    assert "too few to call unstable" in html


@pytest.mark.slow
def test_paper_sized_run_prints_no_zero_width_rate_interval():
    """Issue 21: on a paper-sized run (9 models x 2,575 cases, boxed subset, per-finding and subgroup cells) no
    printed rate interval has zero width (CGR 0/33 printed [0, 0] before)."""
    from medvlm_audit.suites.grounding.synthetic import paper_sized_run

    res = analyse_grounding(paper_sized_run(), B=300)
    m = res.metrics
    rates = m[(m.unit == "%") & (m.n > 0) & m.ci_low.notna() & (m.metric != "gsp")]
    assert len(rates) > 500
    zero = rates[rates.ci_high <= rates.ci_low]
    assert zero.empty, zero[["model", "metric", "subset", "k", "n", "ci_low", "ci_high"]].head()
    assert ((rates.k == 0) | (rates.k == rates.n)).any()  # the degenerate counts are there, and covered


def test_a_mostly_unparsed_model_is_not_assessable_everywhere():
    """Parse rate below 50%: every metric and comparison using the condition is 'not assessable' (no point), and
    the category says so (DESIGN.md; issue 21 item 3)."""
    models = [uses_image("reader", cgr=0.3, swap_flip=0.2, irrelevant_flip=0.02, accuracy=0.75),
              uses_image("mumbler", parse_rate=0.3), ignores_image("prior", accuracy=0.7)]
    res = analyse_grounding(make_tidy(models, SyntheticDesign(n_cases=300, n_boxed=150, probe_set="s")), B=300)
    m = res.metrics
    mm = m[(m.model == "mumbler") & m.metric.isin(["accuracy", "cgr", "uar", "is", "gsp", "auroc"]) & (m.n > 0)]
    assert len(mm) and mm.point.isna().all() and mm.note.str.startswith("not assessable (parse rate").all()
    assert m[(m.model == "mumbler") & (m.metric == "parse_rate") & (m.subset == "all")].point.iloc[0] < 50
    cat = res.categories.set_index("model").loc["mumbler"]
    assert cat.category == "not_assessable" and pd.isna(cat.support)
    c = res.comparisons
    cm = c[((c.model_a == "mumbler") | (c.model_b == "mumbler")) & c.metric.isin(["accuracy", "uar", "cgr"])]
    assert len(cm) and cm["diff"].isna().all() and cm.note.str.contains("mumbler: not assessable").all()
    # the others are untouched
    assert res.categories.set_index("model").loc["reader", "category"] == "uses_image"


def test_support_counts_equal_integer_products() -> None:
    """The support bootstrap's (k*, n*) from one float product equal the integer products they replaced."""
    from types import SimpleNamespace

    from medvlm_audit.suites.grounding.analysis import _support_counts
    from medvlm_audit.suites.grounding.categories import support_weights

    rng = np.random.default_rng(3)
    n = 700
    vec = {k: SimpleNamespace(elig=rng.random(n) < 0.6, val=(rng.random(n) < 0.4).astype(np.int8))
           for k in ("cgr", "uar", "is")}
    w = support_weights(n, 200, 0)
    got = _support_counts(vec)(w)
    for k, v in vec.items():
        assert np.array_equal(got[k][0], w @ (v.elig & v.val.astype(bool)).astype(np.int64))
        assert np.array_equal(got[k][1], w @ v.elig.astype(np.int64))
        assert got[k][0].dtype == np.int64
