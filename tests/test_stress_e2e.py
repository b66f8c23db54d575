"""End to end without the runner: phantom MCQ set -> plan -> reference answerers -> analysis.

The designed shortcuts must show up: the position-biased answerer loses accuracy under reordering, the
image reader tracks visual substitution, the text-prior answerer stays above chance without the image.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from medvlm_audit.suites.stress.analysis import analyse_stress
from medvlm_audit.suites.stress.conditions import StressOptions, plan_stress
from medvlm_audit.suites.stress.embedded import build_phantom_mcq
from medvlm_audit.suites.stress.items import load_items
from medvlm_audit.suites.stress.reference import ask_plan, reference_mcq_panel

#: the fast lane (`pytest -m "not slow"`) leaves this module out: its fixtures build runs or start processes
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("phantom_mcq")
    items = build_phantom_mcq(out, n_items=84, size=128, n_substitutions=28, p_gold_first=0.7)
    plan = plan_stress(items, StressOptions())
    tidy = ask_plan(reference_mcq_panel(), plan)
    return out, items, plan, analyse_stress(tidy, B=2000)


def test_phantom_set_is_valid_deterministic_and_on_disk(run, tmp_path: Path) -> None:
    out, items, plan, _ = run
    assert len(items) == 84 and not plan.skipped
    assert load_items(out / "items.jsonl").items == items.items
    again = build_phantom_mcq(tmp_path, n_items=84, size=128, n_substitutions=28, p_gold_first=0.7)
    assert [(a.question, a.options, a.answer, a.substitute_answer) for a in again.items] == \
        [(a.question, a.options, a.answer, a.substitute_answer) for a in items.items]
    assert (out / "images" / "phantom-mcq-0000.png").read_bytes() == \
        (tmp_path / "images" / "phantom-mcq-0000.png").read_bytes()
    assert sum(it.substitute_image is not None for it in items.items) == 28
    assert 0 < sum(bool(it.needs_image) for it in items.items) < 84


def test_position_biased_model_loses_accuracy_under_reordering(run) -> None:
    res = run[3]
    ch = res.changes.set_index(["model", "comparison"])
    r = ch.loc[("first-option", "options reordered, text-only")]
    assert r["acc_base"] > 0.35 and r["diff"] < -0.15 and r["ci_high"] < 0 and r["q"] < 0.05
    # the text-prior and image-reader answers do not depend on the order shown
    assert ch.loc[("text-prior", "options reordered, text-only"), "diff"] == 0
    assert ch.loc[("image-reader", "options reordered, image+text"), "diff"] == 0
    rob = res.robustness.set_index(["model", "component"])["value"]
    assert rob[("first-option", "R3")] < 0.75 and rob[("text-prior", "R3")] == 1.0


def test_image_reader_tracks_visual_substitution(run) -> None:
    res = run[3]
    acc = res.accuracy.set_index(["model", "condition"])["accuracy"]
    assert acc[("image-reader", "original")] > 0.75
    assert acc[("image-reader", "substitution")] > 0.75  # it answers the distractor the new image shows
    assert acc[("text-prior", "substitution")] < 0.35  # blind models keep the old answer
    rob = res.robustness.set_index(["model", "component"])["value"]
    assert rob[("image-reader", "R5")] > 0.8 and rob[("text-prior", "R5")] < 0.6
    assert acc[("image-reader", "substitution")] - acc[("text-prior", "substitution")] > 0.4
    # without the image the reader declines: refusals, reported as their own class
    rr = res.accuracy.set_index(["model", "condition"])
    assert rr.loc[("image-reader", "no_image"), "refusal_rate"] == 1.0
    assert rr.loc[("image-reader", "no_image"), "accuracy"] == 0.0


def test_text_prior_stays_above_chance_without_the_image(run) -> None:
    res = run[3]
    ct = res.chance.set_index("model")
    assert ct.loc["text-prior", "accuracy_modal_items"] > 0.35 and ct.loc["text-prior", "p"] < 1e-3
    assert ct.loc["text-prior", "q"] < 0.01
    assert ct.loc["image-reader", "p"] == 1.0
    items = res.items
    solvable = items[(items.model == "text-prior") & items.text_solvable]
    assert len(solvable) > 30 and np.all(solvable["acc:no_image"] >= 0.5)
