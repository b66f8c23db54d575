"""Option parser: <answer> tag, fallbacks, refusals and unparsed answers as their own classes."""

from __future__ import annotations

import pytest

from medvlm_audit.scorers.option import parse_option

OPTS = ["Pneumothorax", "Pleural effusion", "Cardiomegaly", "Unknown", "Effusion"]


@pytest.mark.parametrize(
    "text, status, letter",
    [
        ("<answer>B. Pleural effusion</answer>", "answer", "B"),
        # the whole option list echoed is no choice (it used to parse as the last option)
        ("A. Pneumothorax\nB. Pleural effusion\nC. Cardiomegaly\nD. Unknown\nE. Effusion", "unparsed", None),
        ("<answer>A. Pneumothorax B. Pleural effusion C. Cardiomegaly D. Unknown E. Effusion</answer>", "unparsed",
         None),
        ("A. Pneumothorax\nB. Pleural effusion\nC. Cardiomegaly\nD. Unknown\nE. Effusion\nAnswer: C", "answer", "C"),
        ("<answer>B</answer>", "answer", "B"),
        ("<answer>(c)</answer>", "answer", "C"),
        ("<answer>Cardiomegaly</answer>", "answer", "C"),
        ("reasoning ... <answer>A</answer> and later <answer>C. Cardiomegaly</answer>", "answer", "C"),
        ("<think>It is A</think><answer>E. Effusion</answer>", "answer", "E"),
        ("<answer>Unknown</answer>", "answer", "D"),  # choosing the 'Unknown' option is an answer
        ("B", "answer", "B"),
        ("(C).", "answer", "C"),
        ("Answer: D", "answer", "D"),
        ("After weighing the options, the answer is C.", "answer", "C"),
        ("The most likely diagnosis is pleural effusion.", "answer", "B"),  # longest option wins over 'Effusion'
        ("<answer>C. Pleural effusion</answer>", "unparsed", None),  # letter and text disagree: not guessed
        ("I cannot determine the diagnosis without the image.", "refusal", None),
        ("<answer>I am unable to answer without an image</answer>", "refusal", None),
        ("I'm sorry, but I can't help with that.", "refusal", None),
        ("Something about lungs.", "unparsed", None),
        ("the answer is a pneumothorax", "answer", "A"),  # lowercase article is not a letter
        ("", "unparsed", None),
        (None, "no_response", None),
    ],
)
def test_parse(text, status, letter) -> None:
    p = parse_option(text, OPTS)
    assert (p.status, p.letter) == (status, letter)


@pytest.mark.parametrize(
    "text, status, letter, via",
    [
        # a 1-based option number in the answer tag
        ("<answer>2</answer>", "answer", "B", "tag_index"),
        ("<answer>(3)</answer>", "answer", "C", "tag_index"),
        ("<answer>2. Pleural effusion</answer>", "answer", "B", "tag_index"),
        ("<answer>2. Cardiomegaly</answer>", "unparsed", None, "index_text_conflict"),  # number vs text: not guessed
        ("<answer>0</answer>", "unparsed", None, "tag_index_out_of_range"),
        ("<answer>6</answer>", "unparsed", None, "tag_index_out_of_range"),
        # 'Option B' in any case
        ("option b", "answer", "B", "picks_letter"),
        ("Option B", "answer", "B", "says_letter"),
        ("OPTION c.", "answer", "C", "picks_letter"),
        ("My choice: e", "answer", "E", "picks_letter"),
        ("Answer: (c)", "answer", "C", "picks_letter"),
        # clear prose
        ("I would choose B because the costophrenic angle is blunted.", "answer", "B", "picks_letter"),
        ("I'd go with D.", "answer", "D", "picks_letter"),
        ("Looking at the film I pick (e)", "answer", "E", "picks_letter"),
        ("I pick b.", "answer", "B", "picks_letter"),
        ("The answer is (C)", "answer", "C", "says_letter"),
        ("B because the lung edge is visible", "answer", "B", "letter_because"),
        # not picks: hedges, the article 'a', a refusal that names a letter
        ("I would choose B or C", "unparsed", None, "unreadable"),
        ("I would choose between B and C", "unparsed", None, "unreadable"),
        ("Options B and C are both possible", "unparsed", None, "unreadable"),
        ("I would choose a pleural effusion", "answer", "B", "contains"),  # by the option text, not the article
        ("I cannot choose B without the image.", "refusal", None, "refusal"),
    ],
)
def test_parse_numbers_any_case_option_and_prose(text, status, letter, via) -> None:
    p = parse_option(text, OPTS)
    assert (p.status, p.letter, p.via) == (status, letter, via)


def test_a_number_that_is_an_option_text_is_read_as_that_text() -> None:
    opts = ["1", "2", "3"]
    assert (parse_option("<answer>2</answer>", opts).letter, parse_option("<answer>2</answer>", opts).via) == \
        ("B", "tag_text")
    assert parse_option("<answer>4</answer>", opts).status == "unparsed"


def test_letter_outside_the_options_is_not_an_answer() -> None:
    assert parse_option("F", OPTS[:3]).status == "unparsed"
    assert parse_option("<answer>F</answer>", OPTS[:3]).status == "unparsed"


from hypothesis import given, settings
from hypothesis import strategies as st

from medvlm_audit.suites.stress.items import LETTERS, norm_option

_opt = st.text(alphabet=st.characters(categories=("L", "N", "Zs"), max_codepoint=0x24F), min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(st.lists(_opt, min_size=2, max_size=6, unique_by=norm_option).filter(
    lambda xs: all(norm_option(x) for x in xs)), st.data())
def test_the_requested_answer_format_always_parses_back(options, data) -> None:
    i = data.draw(st.integers(0, len(options) - 1))
    for text in (f"<answer>{LETTERS[i]}. {options[i]}</answer>", f"<answer>{LETTERS[i]}</answer>",
                 f"Reasoning first.\n<answer>{LETTERS[i]}. {options[i]}</answer>"):
        p = parse_option(text, options)
        assert (p.status, p.index) == ("answer", i), text


def test_the_requested_format_after_reasoning_is_not_an_echo_of_the_options() -> None:
    # found by Hypothesis: option A's text is the letter of option B, so "B. 0" held both options' texts and
    # was taken for the model listing the options ("echoes_options") although it is the requested format
    assert parse_option("Reasoning first.\n<answer>B. 0</answer>", ["B", "0"]).index == 1
    assert parse_option("Reasoning first.\n<answer>B</answer>", ["B", "0"]).index == 1
    # a tag that lists the options still chose nothing
    assert parse_option("Thinking.\n<answer>A. yes B. no</answer>", ["yes", "no"]).status == "unparsed"
