"""Robustness score of paper 003: the published test vectors and hand-computed components."""

from __future__ import annotations

import math

import numpy as np
import pytest

from medvlm_audit.suites.stress.robustness import (
    StressAccuracies,
    f1_modality_sensitivity,
    f3_format_perturbation,
    f4_distractor_replacement,
    robustness_score,
    robustness_score_arrays,
)

N_JAMA, N_NEJM = 1314, 947

# Extended Data Tables 2-6 of paper 003 (T2/T3/T4 on the 175 image-required items, T4 at 4R, T5 on 40 items)
GPT5 = StressAccuracies(
    t1={"jama": (86.59, 82.91, N_JAMA), "nejm": (80.89, 67.56, N_NEJM)},
    t2_txt_required=37.71, t2_chance=20.0,
    t3_txt_orig=37.71, t3_txt_reordered=32.00,
    t4_txt_base=37.71, t4_txt_4r=20.00, t4_img_base=66.28, t4_img_4r=90.86, t4_txt_unknown=42.86,
    t5_orig=83.33, t5_substituted=51.67,
)
GEMINI = StressAccuracies(
    t1={"jama": (84.84, 74.93, N_JAMA), "nejm": (79.95, 65.01, N_NEJM)},
    t2_txt_required=37.14, t2_chance=20.0,
    t3_txt_orig=37.14, t3_txt_reordered=33.14,
    t4_txt_base=37.14, t4_txt_4r=17.14, t4_img_base=67.43, t4_img_4r=92.57, t4_txt_unknown=45.71,
    t5_orig=80.83, t5_substituted=47.50,
)


@pytest.mark.parametrize(
    "acc, expected",
    [
        (GPT5, (0.923, 0.779, 0.849, 0.827, 0.683, 0.812)),
        (GEMINI, (0.880, 0.786, 0.892, 0.807, 0.667, 0.806)),
    ],
)
def test_published_robustness_vectors(acc: StressAccuracies, expected: tuple[float, ...]) -> None:
    s = robustness_score(acc)
    got = tuple(round(s.R[f"R{i}"], 3) for i in range(1, 6)) + (round(s.mean, 3),)
    assert got == expected


def test_components_by_hand() -> None:
    # F1 for GPT-5: (3.68 * 1314 + 13.33 * 947) / 2261 / 100
    assert f1_modality_sensitivity(GPT5.t1) == pytest.approx((3.68 * 1314 + 13.33 * 947) / 2261 / 100, abs=1e-12)
    # gains in text-only accuracy do not count as fragility (max(0, .))
    assert f1_modality_sensitivity({"a": (50.0, 60.0, 10)}) == 0.0
    assert f3_format_perturbation(40.0, 30.0) == pytest.approx(0.25)
    assert f3_format_perturbation(0.0, 0.0) == 0.0
    assert f4_distractor_replacement(40, 20, 60, 90, 45) == pytest.approx(0.5 * 0.2 + 0.3 * 0.3 + 0.2 * 0.05)
    assert f4_distractor_replacement(40, 50, 60, 50, 30) == 0.0


def test_missing_component_makes_mean_nan_but_keeps_the_rest() -> None:
    s = robustness_score(StressAccuracies(t1={"x": (80.0, 70.0, 100)}, t3_txt_orig=50, t3_txt_reordered=40))
    assert s.R["R1"] == pytest.approx(0.9) and s.R["R3"] == pytest.approx(0.8)
    assert math.isnan(s.R["R2"]) and math.isnan(s.mean)
    assert s.n_available == 2 and s.mean_available == pytest.approx(0.85)


def test_vectorised_score_matches_scalar() -> None:
    a = GPT5
    arr = robustness_score_arrays(
        np.array([[86.59, 80.89]]), np.array([[82.91, 67.56]]), np.array([N_JAMA, N_NEJM]),
        np.array([a.t2_txt_required]), 20.0, np.array([a.t3_txt_orig]), np.array([a.t3_txt_reordered]),
        np.array([a.t4_txt_base]), np.array([a.t4_txt_4r]), np.array([a.t4_img_base]), np.array([a.t4_img_4r]),
        np.array([a.t4_txt_unknown]), np.array([a.t5_orig]), np.array([a.t5_substituted]),
    )
    s = robustness_score(a)
    for k, v in s.R.items():
        assert arr[k][0] == pytest.approx(v, abs=1e-12)
    assert arr["mean"][0] == pytest.approx(s.mean, abs=1e-12)


def test_released_code_robustness_vector() -> None:
    # the authors' released code's vector R1-R5 = .916 / .734 / .961 / .829 / .690, mean .826 (issue 12 item 18),
    # from accuracies chosen so that each F-term gives it: F1 8.4 pp drop, F2 (41.28 - 20) / 80, F3 1.95 / 50,
    # F4 (0.5 * 20 + 0.3 * 10 + 0.2 * 20.5) / 100, F5 31 pp drop
    acc = StressAccuracies(
        t1={"jama": (58.4, 50.0, 1314), "nejm": (58.4, 50.0, 947)},
        t2_txt_required=41.28, t2_chance=20.0,
        t3_txt_orig=50.0, t3_txt_reordered=48.05,
        t4_txt_base=50.0, t4_txt_4r=30.0, t4_img_base=60.0, t4_img_4r=70.0, t4_txt_unknown=70.5,
        t5_orig=80.0, t5_substituted=49.0,
    )
    s = robustness_score(acc)
    assert tuple(round(s.R[f"R{i}"], 3) for i in range(1, 6)) == (0.916, 0.734, 0.961, 0.829, 0.690)
    assert round(s.mean, 3) == 0.826 and s.mean == pytest.approx((0.916 + 0.734 + 0.961 + 0.829 + 0.690) / 5)
