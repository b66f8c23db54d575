"""One Score type and one strip_reasoning serve the yes/no and option parsers."""

import pytest

from medvlm_audit.scorers import Score, score_option, score_yes_no, strip_reasoning


def test_strip_reasoning_handles_closed_unclosed_and_headless_traces() -> None:
    assert strip_reasoning("<think>maybe yes</think>No").strip() == "No"
    assert strip_reasoning("Yes <think>but then no").strip() == "Yes"  # a trace cut off before </think>
    assert strip_reasoning("so it is yes</think> No").strip() == "No"  # its opening tag cut off
    assert strip_reasoning("Yes<|im_end|>").strip() == "Yes"
    assert strip_reasoning("Yes<|im_end|>", artifacts=False) == "Yes<|im_end|>"


def test_scorers_return_the_one_score_type() -> None:
    s = score_yes_no("<think>hmm</think>\nYes.", (("Yes", -0.1), ("No", -2.4)))
    assert s == Score("answer", 1, pytest.approx(0.9089, abs=1e-4), "yes/no parser")
    assert score_yes_no("I'm not sure what this shows.").status == "unparsed"
    assert score_yes_no(None) == Score("no_response")
    opt = score_option("<think>A or B?</think><answer>B</answer>", ["cat", "dog", "cow"])
    assert opt.status == "answer" and opt.value == 1 and opt.rule
    assert score_option("Unknown", ["cat", "dog"]).status == "abstain"
    with pytest.raises(ValueError, match="unknown score status"):
        Score("maybe")
