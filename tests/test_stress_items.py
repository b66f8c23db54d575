"""Stress MCQ items: format, validation errors naming the item, exclusion log, round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medvlm_audit.suites.stress.conditions import StressOptions, plan_stress
from medvlm_audit.suites.stress.items import (
    ItemError,
    ItemSet,
    MCQItem,
    load_items,
    save_items,
    validate_records,
)


def rec(**kw):
    base = {"item_id": "q1", "question": "What is shown?", "options": ["Pneumothorax", "Effusion", "Normal"],
            "answer": "B", "images": ["a.png"]}
    base.update(kw)
    return base


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"options": ["Only one"]}, "at least two"),
        ({"answer": "D"}, "outside the 3 options"),
        ({"answer_index": 5, "answer": None}, "outside the 3 options"),
        ({"answer_text": "Cardiomegaly", "answer": None}, "not one of the options"),
        ({"options": ["Effusion", "effusion ", "Normal"]}, "duplicate options"),
        ({"substitute_image": "s.png", "substitute_answer": "E"}, "substitute_answer 'E' is outside"),
        ({"substitute_image": "s.png", "substitute_answer": "B"}, "is the gold"),
        ({"substitute_image": "s.png"}, "without substitute_answer"),
        ({"answer": None}, "no gold answer"),
        ({"needs_image": "maybe"}, "not a boolean"),
    ],
)
def test_bad_items_raise_naming_the_item(kw, message) -> None:
    with pytest.raises(ItemError, match=message) as e:
        validate_records([("file.jsonl:3", rec(**kw))])
    assert "q1" in str(e.value) and "file.jsonl:3" in str(e.value)


def test_exclude_mode_logs_reasons_and_keeps_good_items() -> None:
    s = validate_records(
        [("f:1", rec()), ("f:2", rec(item_id="q2", options=["A"])), ("f:3", rec(item_id="q1")),
         ("f:4", rec(item_id="q3", answer="Z"))],
        on_error="exclude",
    )
    assert [i.item_id for i in s.items] == ["q1"]
    reasons = {e.item_id: e.reason for e in s.exclusions}
    assert set(reasons) == {"q2", "q1", "q3"}
    assert "at least two" in reasons["q2"] and "duplicate item_id" in reasons["q1"]


def test_letters_index_and_text_agree_or_fail() -> None:
    it = validate_records([("x", rec(answer="B", answer_index=1, answer_text="effusion"))]).items[0]
    assert it.answer == 1 and it.gold_letter == "B" and it.gold_text == "Effusion"
    with pytest.raises(ItemError, match="disagree"):
        validate_records([("x", rec(answer="A", answer_index=1))])


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_round_trip(tmp_path: Path, suffix: str) -> None:
    items = [
        MCQItem("a", "Q1?", ("x", "y", "z"), 2, (str(tmp_path / "img" / "a.png"),), True,
                str(tmp_path / "img" / "a_sub.png"), 0, "nejm", {"k": 1}),
        MCQItem("b", "Q2, with \"quotes\"?", ("p", "q"), 0, (), None, None, None, "jama"),
    ]
    path = save_items(items, tmp_path / f"items{suffix}")
    back = load_items(path)
    assert back.items == items
    assert not list(tmp_path.glob(".*tmp"))  # atomic write left nothing behind


def test_csv_with_option_columns(tmp_path: Path) -> None:
    p = tmp_path / "x.csv"
    p.write_text("item_id,question,option_A,option_B,option_C,answer,images\n"
                 "r1,Which?,Alpha,Beta,,B,img/1.png;img/2.png\n")
    it = load_items(p).items[0]
    assert it.options == ("Alpha", "Beta") and it.answer == 1
    assert it.images == (str(tmp_path / "img/1.png"), str(tmp_path / "img/2.png"))


def test_bad_json_line_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps(rec()) + "\n{oops\n")
    with pytest.raises(ItemError, match=r"x\.jsonl:2"):
        load_items(p)


def test_missing_image_is_excluded_per_condition_or_raises(tmp_path: Path) -> None:
    (tmp_path / "ok.png").write_bytes(b"x")
    items = ItemSet([
        MCQItem("has", "Q?", ("a", "b"), 0, (str(tmp_path / "ok.png"),)),
        MCQItem("gone", "Q?", ("a", "b"), 1, (str(tmp_path / "missing.png"),)),
        MCQItem("none", "Q?", ("a", "b"), 1, ()),
    ])
    plan = plan_stress(items, StressOptions(conditions=("original", "no_image")))
    got = {(t.case_id, t.condition) for t in plan.trials}
    assert got == {("has", "original"), ("has", "no_image"), ("gone", "no_image"), ("none", "no_image")}
    reasons = {(s.case_id, s.condition): s.reason for s in plan.skipped}
    assert "missing.png does not exist" in reasons[("gone", "original")]
    assert reasons[("none", "original")] == "has no image"
    with pytest.raises(ItemError, match="'gone'.*does not exist"):
        plan_stress(items, StressOptions(conditions=("original",), on_missing="raise"))
