"""Stress analysis: accuracy, paired changes, chance tests and robustness from a tidy table."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from medvlm_audit import stats
from medvlm_audit.suites.stress.analysis import (
    Comparison,
    accuracy_table,
    analyse_stress,
    chance_tests,
    paired_changes,
    robustness_inputs,
    robustness_table,
    score_stress,
)
from medvlm_audit.suites.stress.robustness import robustness_score

OPTS = ["Alpha", "Beta", "Gamma", "Delta", "Epsilon"]


def row(item, cond, text, gold="A", rep=0, model="m", required=True, bench="b"):
    return {"model": model, "item_id": item, "condition": cond, "sample_index": rep, "answer_text": text,
            "options": OPTS, "gold": gold, "benchmark": bench, "required": required}


def test_non_answers_count_as_wrong_with_parsed_only_beside() -> None:
    # refusals, abstentions and unparsed answers are wrong answers: the headline is over all items (paper 003's
    # denominators); the parsed-only accuracy is reported beside it (issue 12 item 12)
    t = pd.DataFrame([
        row("i1", "no_image", "<answer>A. Alpha</answer>"),
        row("i2", "no_image", "I cannot answer without the image."),
        row("i3", "no_image", "lorem ipsum"),
        row("i4", "no_image", "B"),
        row("i5", "no_image", "Unknown"),
        row("i6", "no_image", "<answer>None of the above</answer>"),
        row("i7", "no_image", "N/A"),
        row("i8", "no_image", "I don't know."),
        row("i9", "no_image", "Please provide the image so I can answer."),
        # eight wrong answers that chose an option: options are chosen in 10 of 17 trials, so the model gives usable
        # answers and the accuracy is assessable (a model choosing an option in under half the trials of every
        # condition is not; issue 21 item 3)
        *(row(f"w{j}", "no_image", "<answer>B</answer>") for j in range(8)),
    ])
    sc = score_stress(t).set_index("item_id")
    assert list(sc.loc[["i5", "i6", "i7", "i8", "i9"], "status"]) == ["abstain"] * 5
    acc = accuracy_table(t, B=200).iloc[0]
    assert acc["n_trials"] == 17 and acc["n_scored"] == 17
    assert acc["accuracy"] == pytest.approx(1 / 17)  # unparsed and abstentions are wrong, not dropped
    assert acc["accuracy_parsed"] == pytest.approx(1 / 10) and acc["n_parsed"] == 10
    assert acc["refusal_rate"] == pytest.approx(1 / 17) and acc["abstain_rate"] == pytest.approx(5 / 17)
    assert acc["unparsed_rate"] == pytest.approx(1 / 17) and acc["parse_rate"] == pytest.approx(16 / 17)  # the refusal is parsed without the image
    assert acc["se"] == pytest.approx(math.sqrt(1 / 17 * 16 / 17 / 17))
    # 'Unknown' that IS an option (T4's 'Unknown' condition) is an answer, not an abstention
    opts_unk = ["Alpha", "Beta", "Unknown"]
    got = score_stress(pd.DataFrame([{**row("j", "no_image", "Unknown"), "options": opts_unk}])).iloc[0]
    assert got["status"] == "answer" and got["parsed"] == "C" and got["correct"] == 0.0


def test_text_only_abstentions_do_not_inflate_accuracy() -> None:
    # 150 "Unknown" of 175 items with 12 of the other 25 right: 12/175 = 6.9%, not 12/25 = 48% (issue 12)
    rows = [row(f"i{i:03d}", "no_image", "Unknown") for i in range(150)]
    rows += [row(f"k{i:03d}", "no_image", "A" if i < 12 else "B") for i in range(25)]
    # with the image it answers (a model that abstains in every condition is not assessable, issue 21 item 3)
    rows += [row(r["item_id"], "original", "A") for r in list(rows)]
    tab = accuracy_table(pd.DataFrame(rows), B=200)
    acc = tab[tab.condition == "no_image"].iloc[0]
    assert acc["accuracy"] == pytest.approx(12 / 175) and round(100 * acc["accuracy"], 1) == 6.9
    assert acc["accuracy_parsed"] == pytest.approx(12 / 25)


def random_table(n_items=300, reps=3, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    p_item = rng.uniform(0.2, 0.9, n_items)
    for i in range(n_items):
        for r in range(reps):
            for cond, shift in (("original", 0.0), ("no_image", -0.25)):
                right = rng.random() < np.clip(p_item[i] + shift, 0, 1)
                rows.append(row(f"i{i:03d}", cond, "A" if right else "C", rep=r))
    return pd.DataFrame(rows)


def test_accuracy_agrees_with_the_stats_module_cluster_bootstrap() -> None:
    t = score_stress(random_table())
    got = accuracy_table(t, B=10_000).set_index("condition")
    for cond in ("original", "no_image"):
        g = t[t["condition"] == cond]
        ref = stats.proportion(g["correct"].to_numpy().astype(np.int8), B=10_000, seed=0,
                               clusters=g["item_id"].to_numpy())
        assert got.loc[cond, "accuracy"] == pytest.approx(ref.point, abs=1e-12)
        assert got.loc[cond, "se"] == pytest.approx(ref.se, rel=1e-9)
        assert got.loc[cond, "ci_low"] == pytest.approx(ref.ci_low, abs=0.012)
        assert got.loc[cond, "ci_high"] == pytest.approx(ref.ci_high, abs=0.012)


def test_paired_change_agrees_with_the_stats_module() -> None:
    t = score_stress(random_table())
    ch = paired_changes(t, [Comparison("T1", "x", "original", "no_image")], B=10_000).iloc[0]
    a = t[t.condition == "original"].sort_values(["item_id", "sample_index"])
    b = t[t.condition == "no_image"].sort_values(["item_id", "sample_index"])
    ref = stats.paired_difference(b["correct"].to_numpy().astype(np.int8), a["correct"].to_numpy().astype(np.int8),
                                  B=10_000, seed=0, clusters=a["item_id"].to_numpy())
    assert ch["diff"] == pytest.approx(ref.diff, abs=1e-12) and ch["diff"] < -0.15
    assert ch["sd"] == pytest.approx(ref.sd, rel=0.08)
    assert ch["ci_low"] == pytest.approx(ref.ci_low, abs=0.012) and ch["ci_high"] == pytest.approx(ref.ci_high, abs=0.012)
    assert ch["p"] == pytest.approx(1e-4) and ch["n_items"] == 300 and ch["n_pairs"] == 900


def test_pairs_drop_unscorable_trials_and_zero_change_has_p_one() -> None:
    t = pd.DataFrame([row("i1", "original", "A"), row("i1", "no_image", None),  # no response: unscorable
                      row("i2", "original", "A"), row("i2", "no_image", "A"),
                      row("i3", "original", "B"), row("i3", "no_image", "B")])
    ch = paired_changes(t, [Comparison("T1", "x", "original", "no_image")], B=500).iloc[0]
    assert ch["n_pairs"] == 2 and ch["diff"] == 0.0 and ch["p"] == 1.0


def test_chance_test_with_one_repeat_is_the_exact_binomial() -> None:
    rows = [row(f"i{i}", "no_image", "A" if i < 9 else "B") for i in range(20)]
    ct = chance_tests(pd.DataFrame(rows)).iloc[0]
    assert ct["n_items"] == 20 and ct["correct_items"] == 9 and ct["chance"] == pytest.approx(0.2)
    assert ct["p"] == pytest.approx(sps.binomtest(9, 20, 0.2, alternative="greater").pvalue)
    # Poisson-binomial (stats) with equal probabilities is the binomial tail
    assert stats.poisson_binomial_sf(9, np.full(20, 0.2)) == pytest.approx(ct["p"], rel=1e-9)


def test_chance_test_folds_repeats_into_each_items_modal_answer() -> None:
    # 3 repeats per item. Items 0-5: right in repeats 1 and 2 only (the first repeat is wrong): modal right.
    # Items 6-9: right in the first repeat only: modal wrong. Items 10-19: always 'B' (wrong).
    rows = []
    for i in range(20):
        for r in range(3):
            right = (i < 6 and r > 0) or (6 <= i < 10 and r == 0)
            rows.append(row(f"i{i:02d}", "no_image", "A" if right else "B", rep=r))
    ct = chance_tests(pd.DataFrame(rows)).iloc[0]
    # 6 items right of 20 (the first-repeat rule would have said 4); trials: 16 of 60
    assert ct["n_items"] == 20 and ct["correct_items"] == 6 and ct["accuracy_modal_items"] == pytest.approx(0.3)
    assert ct["n_trials"] == 60 and ct["correct_trials"] == 16 and ct["accuracy_trials"] == pytest.approx(16 / 60)
    assert ct["p"] == pytest.approx(sps.binomtest(6, 20, 0.2, alternative="greater").pvalue)
    # a refusal competes as an answer: refused twice, right once -> the modal answer is the refusal (wrong)
    t = pd.DataFrame([row("i0", "no_image", "A"), row("i0", "no_image", "I cannot answer without the image.", rep=1),
                      row("i0", "no_image", "I cannot answer without the image.", rep=2)])
    assert chance_tests(t).iloc[0]["correct_items"] == 0


def test_modal_tie_break_does_not_look_at_the_gold() -> None:
    # every item answered A once and B once (gold A): a tie; the draw picks A for about half the items
    from medvlm_audit.suites.stress.analysis import modal_correct

    answer = np.tile(np.array([[0, 1]], dtype=np.int16), (4000, 1))
    correct = np.tile(np.array([[1.0, 0.0]]), (4000, 1))
    got = modal_correct(answer, correct, np.random.default_rng(0))
    assert got.mean() == pytest.approx(0.5, abs=0.03)
    # the same answers with the gold on B: the picks are the same draws, so the hits are exactly the complement
    got_b = modal_correct(answer, correct[:, ::-1].copy(), np.random.default_rng(0))
    assert np.array_equal(got + got_b, np.ones(4000))
    # no scored repeat: NaN
    assert np.isnan(modal_correct(np.full((1, 2), -2, dtype=np.int16), np.full((1, 2), np.nan),
                                  np.random.default_rng(0))[0])


def score_table():
    """Items 0-9 required, 0-3 with a substitute; each condition's correct set chosen by hand."""
    correct_sets = {
        "original": set(range(10)),            # 100% everywhere (and on the substitution items)
        "no_image": {0, 1, 2, 3, 4, 5, 10, 11},  # required 6/10 = 60%; all 8/12
        "reordered+no_image": {0, 1, 2},       # 30%
        "replaced:4+no_image": {0, 1},         # 20%
        "replaced:4": set(range(10)),          # 100%
        "unknown+no_image": set(range(7)),     # 70%
        "substitution": {0},                   # 1/4 = 25%
    }
    rows = []
    for cond, ok in correct_sets.items():
        items = range(4) if cond == "substitution" else (range(10) if cond not in ("original", "no_image") else range(12))
        for i in items:
            rows.append(row(f"i{i:02d}", cond, "A" if i in ok else "B", required=i < 10,
                            bench="b1" if i % 2 == 0 else "b2"))
    return pd.DataFrame(rows)


def test_robustness_from_data_matches_hand_computation() -> None:
    t = score_table()
    acc = robustness_inputs(t)["m"]
    # T1 per benchmark on all 12 items: original 10/12 overall; b1 = items 0,2,..,10 -> original 5/6, no_image 4/6
    assert acc.t1["b1"] == pytest.approx((500 / 6, 400 / 6, 6))
    assert acc.t1["b2"] == pytest.approx((500 / 6, 400 / 6, 6))
    assert acc.t2_txt_required == pytest.approx(60.0) and acc.t2_chance == pytest.approx(20.0)
    assert acc.t3_txt_reordered == pytest.approx(30.0) and acc.t4_txt_4r == pytest.approx(20.0)
    assert acc.t4_img_base == pytest.approx(100.0) and acc.t4_img_4r == pytest.approx(100.0)
    assert acc.t4_txt_unknown == pytest.approx(70.0)
    assert acc.t5_orig == pytest.approx(100.0) and acc.t5_substituted == pytest.approx(25.0)
    s = robustness_score(acc)
    assert s.R["R1"] == pytest.approx(1 - (100 / 6) / 100)
    assert s.R["R2"] == pytest.approx(1 - 40 / 80)
    assert s.R["R3"] == pytest.approx(1 - 30 / 60)
    assert s.R["R4"] == pytest.approx(1 - (0.5 * 40 + 0 + 0.2 * 10) / 100)
    assert s.R["R5"] == pytest.approx(0.25)
    tab = robustness_table(t, B=300).set_index("component")
    assert tab.loc["mean", "value"] == pytest.approx(s.mean)
    assert tab.loc["R5", "ci_low"] <= 0.25 <= tab.loc["R5", "ci_high"]


def test_runner_payload_form_gives_the_same_analysis() -> None:
    t = score_table()
    pay = pd.DataFrame({
        "model": t["model"], "case_id": t["item_id"], "condition": t["condition"],
        "sample_index": t["sample_index"], "answer_text": t["answer_text"],
        "payload": [json.dumps({"options": OPTS, "gold": g, "benchmark": b, "required": bool(r),
                                "n_options": 5}) for g, b, r in zip(t["gold"], t["benchmark"], t["required"])],
    })
    a = analyse_stress(t, B=200)
    b = analyse_stress(pay, B=200)
    pd.testing.assert_frame_equal(a.robustness, b.robustness)
    pd.testing.assert_frame_equal(a.changes, b.changes)


def test_duplicate_rows_are_an_error() -> None:
    t = pd.DataFrame([row("i1", "original", "A"), row("i1", "original", "B")])
    with pytest.raises(ValueError, match="more than one row.*'i1'"):
        analyse_stress(t, B=100)


def test_family_q_values_and_item_view() -> None:
    t = score_table()
    res = analyse_stress(t, B=500)
    assert res.changes["q"].notna().all() and (res.changes["q"] >= res.changes["p"] - 1e-12).all()
    assert "q" in res.chance.columns
    it = res.items.set_index("item_id")
    assert bool(it.loc["i00", "text_solvable"]) and not bool(it.loc["i09", "text_solvable"])
    curve = res.curve[(res.curve.modality == "text-only")].set_index("level")["accuracy"]
    assert curve["Base"] == pytest.approx(0.6) and curve["4R"] == pytest.approx(0.2)


def probe_items(n4: int, n5: int):
    """n4 four-option and n5 five-option items (gold first), one benchmark, no images needed."""
    from medvlm_audit.suites.stress.items import ItemSet, MCQItem

    vocab = [f"Finding {i}" for i in range(60)]
    items = []
    for i in range(n4 + n5):
        k = 4 if i < n4 else 5
        opts = tuple(vocab[(i * 5 + j) % 60] for j in range(k))
        items.append(MCQItem(f"q{i:02d}", f"Question {i}?", opts, 0, ("/nonexistent.png",), needs_image=True))
    return ItemSet(items)


T4_CONDITIONS = ("original", "no_image", *(f"replaced:{k}" for k in range(1, 5)),
                 *(f"replaced:{k}+no_image" for k in range(1, 5)), "unknown", "unknown+no_image")


def never_changing_answers(n4: int, n5: int, conditions=T4_CONDITIONS) -> pd.DataFrame:
    """A model right on every four-option item and wrong on every five-option item, whatever the condition."""
    from medvlm_audit.suites.stress.conditions import StressOptions, plan_stress
    from medvlm_audit.suites.stress.items import LETTERS

    plan = plan_stress(probe_items(n4, n5), StressOptions(conditions=conditions, check_files=False))
    rows = []
    for t in plan.trials:
        p = t.payload
        gold = LETTERS.index(p["gold"])
        pick = gold if p["n_options"] == 4 else (gold + 1) % p["n_options"]
        rows.append({"model": "steady", "item_id": t.case_id, "condition": t.condition, "sample_index": 0,
                     "answer_text": f"<answer>{LETTERS[pick]}</answer>", **p})
    return pd.DataFrame(rows), plan


def test_f4_pairs_each_term_on_the_items_that_have_both_conditions() -> None:
    # 20 four-option items (right) + 20 five-option items (wrong); only the five-option items can show 4R.
    # Unpaired: text base 50% on all 40, text 4R 0% on the 20 five-option items -> F4 = 0.5 * 50 / 100 = 0.25.
    # Paired: base and 4R both 0% on the same 20 items -> F4 = 0 (the answers never change).
    t, plan = never_changing_answers(20, 20)
    assert sum(s.condition == "replaced:4+no_image" for s in plan.skipped) == 20
    rob = robustness_table(t, B=200).set_index("component")
    assert rob.loc["F4", "value"] == 0.0 and rob.loc["R4", "value"] == 1.0
    assert rob.loc["F4", "n_items"] == 20
    note = rob.loc["F4", "note"]
    assert "text base vs 4R on the same 20 items" in note and "'Unknown' on the same 40 items" in note
    acc = robustness_inputs(t)["steady"]
    assert acc.t4_txt_base == 0.0 and acc.t4_txt_4r == 0.0 and acc.t4_txt_base_unknown == pytest.approx(50.0)
    # mean_available is reported next to the mean (substitution did not run: R5 and the mean are not estimable)
    assert math.isnan(rob.loc["mean", "value"]) and "R5" in rob.loc["mean", "note"]
    # (reordering did not run either: mean_available averages R1, R2 and R4)
    assert rob.loc["mean_available", "value"] == pytest.approx(rob.loc[["R1", "R2", "R4"], "value"].mean())
    assert rob.loc["mean_available", "note"] == "mean of the 3 estimable components (R1, R2, R4)"
    assert "not estimable: substitution did not run" in rob.loc["F5", "note"]


def test_f4_falls_back_to_the_highest_replaced_level_and_says_so() -> None:
    # four-option items only: 3 distractors, so 4R is impossible; F4 uses 3R on the same items (F4 = 0)
    t, _ = never_changing_answers(30, 0)
    rob = robustness_table(t, B=200).set_index("component")
    assert rob.loc["F4", "value"] == 0.0 and rob.loc["F4", "n_items"] == 30
    assert "3R used: 4R not estimable (items have at most 3 distractors)" in rob.loc["F4", "note"]
    assert "text base vs 3R on the same 30 items" in rob.loc["F4", "note"]
    # and with no replacement level at all, R4 is reported as not estimable with the reason, not a silent NaN
    t, _ = never_changing_answers(10, 0, ("original", "no_image", "unknown+no_image"))
    rob = robustness_table(t, B=100).set_index("component")
    assert math.isnan(rob.loc["R4", "value"]) and "not estimable: replaced:1+no_image did not run" in \
        rob.loc["R4", "note"]


def test_distractor_curve_compares_one_item_set() -> None:
    # every level on the 20 five-option items (the four-option ones cannot show 4R): a flat 0% curve
    t, _ = never_changing_answers(20, 20)
    cur = analyse_stress(t, B=200).curve
    txt = cur[cur.modality == "text-only"].set_index("level")
    assert list(txt.index) == ["Base", "UNK", "1R", "2R", "3R", "4R"]
    assert (txt["accuracy"] == 0.0).all() and (txt["n_items"] == 20).all()
    assert "20 required items shown at every level (20 items lacking a level left out)" in txt["note"].iloc[0]
    # only four-option items: 4R is not estimable and the curve stops at 3R on all 30 items
    cur = analyse_stress(never_changing_answers(30, 0)[0], B=100).curve
    txt = cur[cur.modality == "text-only"].set_index("level")
    assert "4R" not in txt.index and (txt["accuracy"] == 1.0).all() and "not estimable: 4R" in txt["note"].iloc[0]


def test_f1_weights_are_the_fixed_benchmark_sizes() -> None:
    # model q has no response on two 'big' items without the image: F1 still weights 'big' by its 4 items, not by
    # the 2 items q scored under both conditions (the released code's fixed benchmark sizes; issue 12 item 15)
    rows = []
    for i in range(4):
        rows += [row(f"b{i}", "original", "A", bench="big", model=mm) for mm in ("m", "q")]
        rows += [row(f"b{i}", "no_image", "B", bench="big", model="m"),
                 row(f"b{i}", "no_image", None if i < 2 else "B", bench="big", model="q")]
    for i in range(2):
        rows += [row(f"s{i}", "original", "A", bench="small", model=mm) for mm in ("m", "q")]
        rows += [row(f"s{i}", "no_image", "A", bench="small", model=mm) for mm in ("m", "q")]
    inputs = robustness_inputs(pd.DataFrame(rows))
    for model in ("m", "q"):
        assert inputs[model].t1["big"][2] == 4 and inputs[model].t1["small"][2] == 2
    # F1 for q: big 100 - 0 over its 2 scored items, small 0 drop: (100 * 4 + 0 * 2) / 6 / 100
    assert robustness_score(inputs["q"]).F["F1"] == pytest.approx(4 / 6)
