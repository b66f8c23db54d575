"""Agreement statistics of the reader study (stats.py block), each against a hand-computed value."""

from __future__ import annotations

import numpy as np
import pytest

from medvlm_audit import stats


def test_percent_agreement_by_hand() -> None:
    assert stats.percent_agreement(["yes", "yes", "no", "no"], ["yes", "no", "no", "no"]) == 0.75
    assert np.isnan(stats.percent_agreement([], []))


def test_cohen_kappa_interval_by_hand() -> None:
    # agreement 4/6; marginals a = (4 ones, 2 zeros), b = (4, 2): chance = (16 + 4)/36; kappa = (24-20)/(36-20) = 0.25
    e = stats.cohen_kappa_interval([1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 1], B=2000)
    assert e.point == pytest.approx(0.25) and e.n == 6
    assert e.ci_low <= 0.25 <= e.ci_high and e.se > 0


def test_quadratic_weighted_kappa_by_hand_with_a_fixed_scale() -> None:
    # ratings on a 1-3 scale: a = 1 2 3 3, b = 1 3 3 2. Weights d^2 over codes 0..2.
    # observed disagreement sum w*obs = (2,3): 1 + (3,2): 1 -> 2 (cells each weight 1) -> 2 / 4 = 0.5 per item
    # expected: row margins a = (1, 1, 2)/4, columns b = (1, 1, 2)/4; sum_ij w_ij a_i b_j =
    # (1*1*1 + 4*1*2 + 1*1*1 + 1*1*2 + 4*2*1 + 1*2*1) / 16 = (1 + 8 + 1 + 2 + 8 + 2)/16 = 22/16
    # kappa_w = 1 - (2/4) / (22/16) = 1 - 8/22 = 7/11
    e = stats.cohen_kappa_interval([1, 2, 3, 3], [1, 3, 3, 2], weights="quadratic", categories=[1, 2, 3], B=500)
    assert e.point == pytest.approx(7 / 11)
    assert e.point == pytest.approx(stats.cohen_kappa([1, 2, 3, 3], [1, 3, 3, 2], weights="quadratic"))


def test_categories_fix_the_scale_and_reject_unknown_ratings() -> None:
    # ratings 1 and 3 only: on the observed labels they are adjacent (distance 1); on the 1-3 scale distance 2
    a, b = [1, 3, 1, 3, 1], [1, 3, 3, 3, 1]
    on_scale = stats.cohen_kappa_interval(a, b, weights="linear", categories=[1, 2, 3], B=200).point
    observed = stats.cohen_kappa_interval(a, b, weights="linear", B=200).point
    assert on_scale == pytest.approx(observed)  # linear kappa is invariant to scaling all distances by 2
    with pytest.raises(ValueError, match="not one of the categories"):
        stats.cohen_kappa_interval([1, 4], [1, 1], categories=[1, 2, 3], B=10)


def test_fleiss_kappa_textbook_example() -> None:
    # Fleiss (1971) / Wikipedia table: P_bar = 0.378, P_e = 0.213, kappa = 0.210
    t = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1], [7, 7, 0, 0, 0],
         [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
    assert stats.fleiss_kappa(t) == pytest.approx(0.20993, abs=1e-5)


def test_fleiss_kappa_interval_by_hand() -> None:
    # P_i = 1, 1, 1, 1/3 -> P_bar = 10/12; p = (8/12, 4/12) -> P_e = 5/9; kappa = (10/12 - 5/9)/(4/9) = 0.625
    e = stats.fleiss_kappa_interval([[3, 0], [0, 3], [3, 0], [2, 1]], B=1000)
    assert e.point == pytest.approx(0.625) and e.n == 4
    assert e.ci_low <= e.point <= e.ci_high


def test_fleiss_with_unequal_raters_and_ratings_to_counts() -> None:
    counts, cats = stats.ratings_to_counts([[1, 1, 2], [2, 2, None], [1, float("nan"), 1]])
    assert cats == [1, 2] and counts.tolist() == [[2, 1], [0, 2], [2, 0]]
    # P_i = (2*1)/(3*2) = 1/3, 1, 1 -> P_bar = 7/9; p = (4/7, 3/7) -> P_e = 25/49
    expected = (7 / 9 - 25 / 49) / (1 - 25 / 49)
    assert stats.fleiss_kappa(counts) == pytest.approx(expected)
    assert np.isnan(stats.fleiss_kappa([[1, 0], [0, 1]]))  # no subject with two ratings


def test_bootstrap_is_seeded() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(1, 4, 120)
    b = np.clip(a + rng.integers(-1, 2, 120), 1, 3)
    e1 = stats.cohen_kappa_interval(a, b, weights="quadratic", B=3000, seed=0)
    e2 = stats.cohen_kappa_interval(a, b, weights="quadratic", B=3000, seed=0)
    assert (e1.ci_low, e1.ci_high) == (e2.ci_low, e2.ci_high)
    assert e1.ci_low < e1.point < e1.ci_high


def test_kappa_is_undefined_on_a_constant_rater_or_one_item() -> None:
    """A constant rater or a single item: kappa 'undefined' (nan, said in method), never [0, 0] (issue 21)."""
    import math

    e = stats.cohen_kappa_interval([1, 1, 1, 1, 1, 1], [1, 0, 1, 1, 0, 1], B=300)
    assert math.isnan(e.point) and math.isnan(e.ci_low) and "undefined" in e.method
    assert math.isnan(stats.cohen_kappa([1, 1, 1, 1], [1, 0, 1, 0]))
    e1 = stats.cohen_kappa_interval([2], [3], B=100)
    assert math.isnan(e1.point) and "undefined" in e1.method
    # draws in which a rater happens to be constant are left out, not counted as kappa 0
    e2 = stats.cohen_kappa_interval([1, 1, 1, 1, 1, 0, 1], [1, 1, 1, 0, 1, 0, 1], B=2000)
    assert e2.point > 0 and "undefined kappa left out" in e2.method
