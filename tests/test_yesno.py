"""The paper's yes/no parser (DESIGN.md order, whole-word fallback) and renormalised first-token P(yes)."""

from __future__ import annotations

import math

import pytest

from medvlm_audit.scorers.yesno import p_yes, parse_yes_no


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Yes", 1),
        ("No.", 0),
        ("  yes\n", 1),
        ("**No**", 0),
        ("<think>The heart is big, so yes? no wait</think>\nNo", 0),
        ("<think>long reasoning... the answer is no</think> Yes", 1),
        ("<think>Is there effusion? no, I do not see", -1),  # trace cut off before </think>: all reasoning
        ("<think>Is there effusion?\nno", -1),  # the final line of an unclosed trace is still reasoning
        ("<think>a</think>\nYes <THINK>wait, no", 1),  # closed trace removed; the unclosed tail is reasoning
        ("the lungs</think>\nNo", 0),  # a trace whose opening tag was cut off
        ("Looking at the image carefully.\nFinal answer: present", -1),  # final line starts "final"; no yes/no word in 60 chars
        ("The effusion is\nabsent", 0),  # final line token
        ("Correct, there is an effusion.", 1),  # first whitespace token
        ("Negative for pneumothorax.", 0),
        ("I think the answer is yes because...", 1),  # first 60 characters, whole word
        ("I cannot determine any abnormality from this image.", -1),  # no substring 'no' match on cannot/abnormality
        ("Hmm, yes and no.", -1),  # ambiguous: both within 60 chars
        ("", -1),
        (None, -1),
        (float("nan"), -1),  # a missing answer as pandas stores it
        ("<|im_start|>assistant\nYes<|im_end|>", 1),
        ("\u2581Yes", 1),
        ("Not present.", 0),
        ("Maybe", -1),
        # the whole final line must equal a token; else the first token of the answer (DESIGN.md "Parser")
        ("Yes.\nNo other abnormality is seen.", 1),
        ("No.\nYes, the heart is normal in size.", 0),
    ],
)
def test_parse_yes_no(text, expected) -> None:
    assert parse_yes_no(text) == expected


def test_sixty_character_window() -> None:
    pad = "The image shows several structures worth describing here, okay"  # 60 chars, no yes/no
    assert len(pad) >= 60
    assert parse_yes_no(pad + " yes, in the end") == -1


def test_p_yes_renormalises_over_variants() -> None:
    # P(Yes)=0.5, P(" yes")=0.1, P("No")=0.2, other token 0.2 -> 0.6 / 0.8 = 0.75
    tl = [("Yes", math.log(0.5)), (" yes", math.log(0.1)), ("No", math.log(0.2)), ("The", math.log(0.2))]
    assert p_yes(tl) == pytest.approx(0.75)


def test_p_yes_counts_exactly_the_papers_token_sets() -> None:
    # "y" / "n" / "yeah" / "Yes." are not in {Yes, yes, YES, _Yes, _yes, _YES} and its No set
    tl = [("Yes", math.log(0.3)), ("y", math.log(0.3)), ("No", math.log(0.1)), ("n", math.log(0.2)),
          ("yeah", math.log(0.05)), ("Yes.", math.log(0.05))]
    assert p_yes(tl) == pytest.approx(0.3 / 0.4)
    assert math.isnan(p_yes([("y", -0.1), ("n", -2.0)]))
    # the six spellings of each set, a leading space also as the tokenizer's word-start marker
    yes = [(t, math.log(0.1)) for t in ("Yes", "yes", "YES", " Yes", " yes", " YES")]
    no = [(t, math.log(0.05)) for t in ("No", "no", "NO", " No", "\u2581no", "\u0120NO")]
    assert p_yes(yes + no) == pytest.approx(0.6 / 0.9)


def test_p_yes_undefined_not_zero() -> None:
    assert math.isnan(p_yes(None))
    assert math.isnan(p_yes([]))
    assert math.isnan(p_yes([("The", -0.1), ("A", -2.0)]))
    assert p_yes([("No", -0.01)]) == 0.0


def test_parse_yes_no_each_equals_one_by_one() -> None:
    from medvlm_audit.scorers.yesno import parse_yes_no_each

    texts = ["Yes", "no", "Yes.", None, float("nan"), "", "<think>no</think>Yes", "Maybe", "No, not present", "Yes"]
    assert parse_yes_no_each(texts) == [parse_yes_no(t) for t in texts]  # type: ignore[arg-type]
    assert parse_yes_no_each([]) == []
