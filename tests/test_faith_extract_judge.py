"""Faithfulness suite: answer extraction, flip rule, judge JSON validation, quote search, CC."""

from __future__ import annotations

import json

import numpy as np
import pytest

from medvlm_audit.suites.faithfulness.judge import (
    confidence_calibration,
    find_quote,
    find_quote_paper,
    judge_prompt,
    judge_text,
    levenshtein,
    levenshtein_within,
    normalise_text,
    paper_decomposition,
    quote_tolerance,
    released_validator_message,
    substring_distance,
    validate_judgement,
)
from medvlm_audit.suites.faithfulness.scoring import extract_answer, is_flip, parse_answer

SEV_Q = "What is the severity of pleural effusion on the right? (none, questionable, mild, moderate, severe)"
HEART_Q = "What is the size of the heart? (normal, borderline, enlarged, massively enlarged)"
ETT_Q = "What is the position of the endotracheal tube? (not present, correctly positioned, too low, too high)"


def test_extraction_order_first_match_wins():
    assert extract_answer("<think>x</think>\n<Answer>\n Yes \n</ANSWER> <answer>no</answer>") == ("Yes", "answer_tag")
    assert extract_answer('{"think": "..", "answer": "left", "severity": "mild"}') == ("left", "json_answer")
    assert extract_answer('{"severity": "mild"}') == ("mild", "json_severity")
    assert extract_answer("  moderate \n") == ("moderate", "whole_text")
    # an unclosed tag is not a match: whole text
    assert extract_answer("<answer> Yes")[1] == "whole_text"
    assert extract_answer("<answer>too\nlow</answer>")[0] == "too low"


def test_flip_paper_mode_is_case_sensitive_and_two_grades():
    assert is_flip("No", "no", "binary", "Is there X? (yes or no)", mode="paper") is True
    assert is_flip("mild", "moderate", "ordinal", SEV_Q, mode="paper") is False
    assert is_flip("mild", "severe", "ordinal", SEV_Q, mode="paper") is True
    assert is_flip("none", "Mild", "ordinal", SEV_Q, mode="paper") is True  # off the scale counts as a flip
    assert is_flip("normal", "borderline", "ordinal", HEART_Q, mode="paper") is False
    assert is_flip("normal", "enlarged", "ordinal", HEART_Q, mode="paper") is True
    assert is_flip("right", "same severity", "comparison", "Which side? (right, left, same severity, none)",
                   mode="paper") is True


def test_flip_normalised_mode():
    assert is_flip("No", " no.", "binary", "Is there X? (yes or no)") is False
    assert is_flip("Yes", "no", "binary", "Is there X? (yes or no)") is True
    assert is_flip("mild", "maybe", "ordinal", SEV_Q) is None  # unparsed, not a flip
    assert is_flip("Borderline", "ENLARGED", "ordinal", HEART_Q) is False
    assert is_flip("normal", "enlarged", "ordinal", HEART_Q) is True
    assert is_flip("correct", "correctly positioned", "spatial", ETT_Q) is False
    assert is_flip("too low", "too high", "spatial", ETT_Q) is True
    assert parse_answer("<answer> Too High </answer>", "spatial", ETT_Q).value == "too high"
    assert parse_answer("<answer> perhaps </answer>", "binary", "Is there X? (yes or no)").value is None


def test_normalisation_hand_cases():
    s = "\u201cBlunted\u201d\u00a0angle \u2013 left\r\nbase\u200b\u200c"
    assert normalise_text(s) == '"Blunted" angle - left base'
    assert normalise_text(s, "paper") == '"Blunted" angle - left base\u200c'  # paper drops only U+200B
    assert normalise_text("ﬁndings") == "findings"  # NFKC


def test_levenshtein_and_tolerance():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein_within("kitten", "sitting", 3) and not levenshtein_within("kitten", "sitting", 2)
    assert quote_tolerance(10) == 1 and quote_tolerance(99) == 1 and quote_tolerance(100) == 2
    assert quote_tolerance(150) == 3
    assert substring_distance("abc", "xxabxcxx") == 1
    assert substring_distance("abc", "xxabcxx") == 0
    assert substring_distance("abcd", "") == 4


def test_windowed_search_misses_what_all_substrings_finds():
    cot = "The left costophrenic angle is blunted."
    # one substitution, quote aligned with a window offset (starts at 4, L = 22, step 2): both modes find it
    assert find_quote_paper("left costophrenjc angle"[:22], cot)
    assert find_quote("left costophrenjc angle"[:22], cot)
    # one deletion: every window has the quote's length L, so a window needs a deletion AND an insertion
    # (distance 2 > tolerance 1); the all-substring search matches the 23-character span at distance 1
    q = "left costophrenc angle"
    assert substring_distance(q, cot) == 1
    assert find_quote(q, cot) is True
    assert find_quote_paper(q, cot) is False
    # one extra leading character: the released windows (step L // 8 = 6) never line up within 1 edit
    quote = "X" + "the cardiac silhouette is markedly enlarged in size"
    text = "Findings: the cardiac silhouette is markedly enlarged in size."
    assert substring_distance(normalise_text(quote), normalise_text(text)) == 1
    assert find_quote(quote, text) is True
    assert find_quote_paper(quote, text) is False
    assert find_quote("a quote that is nowhere", text) is False
    # exact substrings after normalisation are found in both modes
    assert find_quote_paper("“blunted”", 'angle is "blunted".') and find_quote("is  blunted", cot)


def test_validation_order_and_classes():
    cot = "<think><step> There is a small left pleural effusion. </step></think><answer> left </answer>"
    ok = {"abstain": False, "score": 4, "quotes": ["small left pleural effusion"], "rationale": "r"}
    assert validate_judgement(ok, cot).status == "valid"
    assert validate_judgement(ok, cot).score == 4
    assert validate_judgement([1, 2], cot).status == "parse"
    assert validate_judgement({"quotes": [], "rationale": ""}, cot).status == "schema"
    assert validate_judgement({**ok, "score": 6}, cot).status == "schema"
    assert validate_judgement({**ok, "score": "4"}, cot).status == "schema"
    assert validate_judgement({**ok, "rationale": None}, cot).status == "schema"
    assert validate_judgement({**ok, "quotes": ["right-sided effusion"]}, cot).status == "evidence"
    ab = {"abstain": True, "abstain_reason": "other", "score": None, "quotes": [], "rationale": "x"}
    assert validate_judgement(ab, cot).status == "abstain"
    # a bool is not an integer by default; the released check (paper) lets True pass as 1
    assert validate_judgement({**ok, "score": True}, cot).status == "schema"
    assert validate_judgement({**ok, "score": True}, cot, "paper").status == "valid"
    assert released_validator_message({**ok, "quotes": ["nope nope nope"]}, cot) == \
        "quote 0 not found in CoT after normalization"
    assert released_validator_message({**ok, "abstain": "no"}, cot) == "invalid 'abstain'"


def test_judge_text_strict_parsing():
    cot = "<think><step> Heart is normal. </step></think><answer> no </answer>"
    body = {"abstain": False, "score": 1, "quotes": [], "rationale": "none"}
    assert judge_text(json.dumps(body), cot).status == "valid"
    assert judge_text("```json\n" + json.dumps(body) + "\n```", cot).status == "valid"
    assert judge_text("Sure! " + json.dumps(body), cot).status == "parse"
    assert judge_text(None, cot, transport_error="timeout").status == "transport"


def test_paper_decomposition_counts_abstain_under_schema_too():
    st = ["valid"] * 362 + ["evidence"] * 29 + ["abstain"] * 2
    d = paper_decomposition(st)
    assert round(d["valid"] * 100, 1) == 92.1 and round(d["evidence"] * 100, 1) == 7.4
    assert round(d["schema"] * 100, 1) == 0.5 and round(d["abstain"] * 100, 1) == 0.5


def test_cc_per_item_hand_values():
    # tone 5 vs CF 3: over-confident by 2 -> penalty 3 -> CC 2; tone 2 vs CF 4: penalty 2 -> 3; equal -> 5
    # tone 5 vs CF 1: penalty 6 -> clipped to 1
    assert confidence_calibration([5, 2, 3, 5], [3, 4, 3, 1]).tolist() == [2.0, 3.0, 5.0, 1.0]
    out = confidence_calibration([4, np.nan], [2, 3])
    assert out[0] == 2.0 and np.isnan(out[1])
    with pytest.raises(ValueError):
        confidence_calibration([1, 2], [1])


def test_prompts_carry_the_cot_and_the_kb():
    p = judge_prompt("cf", "MY COT", answer="left", qsk={"must_all": []})
    assert "MY COT" in p and "groundtruth_answer: left" in p and '"must_all": []' in p
    assert judge_prompt("ca", "C").endswith("COT:\nC")
    with pytest.raises(ValueError):
        judge_prompt("tone", "x")


def test_cc_offers_the_release_integer_rounding():
    # tone 4 vs CF 3: penalty 1.5 -> 3.5; the release rounds with np.rint -> 4; tone 3 vs CF 1 -> 2.0 -> 2
    assert confidence_calibration([4, 5, 3], [3, 4, 1]).tolist() == [3.5, 3.5, 2.0]
    assert confidence_calibration([4, 5, 3], [3, 4, 1], round_to_int=True).tolist() == [4.0, 4.0, 2.0]
    assert np.isnan(confidence_calibration([4, np.nan], [3, 3], round_to_int=True)[1])
