"""Benchmark loaders on generated fixtures in each benchmark's released layout."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from medvlm_audit.suites.stress.items import ItemError
from medvlm_audit.suites.stress.loaders import (
    load_benchmark,
    load_omnimedvqa,
    load_pmc_vqa,
    load_slake,
    load_vqa_rad,
)


def test_vqa_rad(tmp_path: Path) -> None:
    recs = [
        {"qid": 1, "image_name": "synpic1.jpg", "question": "Is there a pneumothorax?", "answer": "yes",
         "answer_type": "CLOSED", "question_type": "PRES", "image_organ": "CHEST", "phrase_type": "test_freeform"},
        {"qid": 2, "image_name": "synpic1.jpg", "question": "What organ is shown?", "answer": "Lung",
         "answer_type": "OPEN", "question_type": "ORGAN", "image_organ": "CHEST", "phrase_type": "test_para"},
        {"qid": 3, "image_name": "synpic2.jpg", "question": "What organ?", "answer": "liver", "answer_type": "OPEN",
         "question_type": "ORGAN", "image_organ": "ABD", "phrase_type": "freeform"},
        {"qid": 4, "image_name": "synpic3.jpg", "question": "Which organ?", "answer": "brain", "answer_type": "OPEN",
         "question_type": "ORGAN", "image_organ": "HEAD", "phrase_type": "para"},
        {"qid": 5, "image_name": "synpic3.jpg", "question": "How many lesions?", "answer": 2, "answer_type": "OPEN",
         "question_type": "COUNT", "image_organ": "HEAD", "phrase_type": "test_freeform"},
    ]
    (tmp_path / "VQA_RAD Dataset Public.json").write_text(json.dumps(recs))
    (tmp_path / "VQA_RAD Image Folder").mkdir()
    s = load_vqa_rad(tmp_path)
    by = {it.item_id: it for it in s.items}
    assert set(by) == {"vqarad-1", "vqarad-2", "vqarad-5"}
    assert by["vqarad-1"].options == ("Yes", "No") and by["vqarad-1"].answer == 0
    q2 = by["vqarad-2"]
    assert q2.gold_text == "Lung" and len(q2.options) == 4 and {"liver", "brain"} <= set(q2.options)
    assert q2.images[0].endswith("VQA_RAD Image Folder/synpic1.jpg") and q2.meta["options_source"] == "constructed"
    assert by["vqarad-5"].gold_text == "2"
    again = load_vqa_rad(tmp_path)
    assert again.items == s.items  # seeded construction
    assert len(load_vqa_rad(tmp_path, split="all").items) == 5


def test_slake(tmp_path: Path) -> None:
    root = tmp_path / "Slake1.0"
    (root / "imgs" / "xmlab0").mkdir(parents=True)
    rec = lambda qid, q, a, lang="en", ct="Organ": {
        "img_id": 0, "img_name": "xmlab0/source.jpg", "question": q, "answer": a, "q_lang": lang,
        "location": "Abdomen", "modality": "CT", "answer_type": "OPEN", "base_type": "vqa", "content_type": ct,
        "triple": ["vhead", "_", "_"], "qid": qid}
    (root / "test.json").write_text(json.dumps([
        rec(1, "Which organ is abnormal?", "Liver"), rec(2, "Is this normal?", "No", ct="Abnormality"),
        rec(3, "哪个器官?", "肝脏", lang="zh"), rec(4, "What organ is on the left?", "Spleen"),
        rec(5, "Largest organ?", "Kidney"),
    ]))
    (root / "train.json").write_text("[]")
    (root / "validate.json").write_text("[]")
    s = load_slake(root)
    by = {it.item_id: it for it in s.items}
    assert set(by) == {"slake-1", "slake-2", "slake-4", "slake-5"}
    assert by["slake-2"].options == ("Yes", "No") and by["slake-2"].gold_text == "No"
    assert set(by["slake-1"].options) == {"Liver", "Spleen", "Kidney"}  # pool exhausted: 3 options
    assert by["slake-1"].images == (str(root / "imgs" / "xmlab0" / "source.jpg"),)


def test_pmc_vqa(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "PMC1_F1.jpg").write_bytes(b"x")
    cols = ["Figure_path", "Question", "Answer", "Choice A", "Choice B", "Choice C", "Choice D", "Answer_label"]
    rows = [
        ["PMC1_F1.jpg", "What imaging modality?", "CT scan", " A:MRI ", " B:CT scan ", " C:X-ray", " D:Ultrasound", "B"],
        ["PMC2_F1.jpg", "Which side?", "Left", "A:Left", "B:Right", "C:Both", "D:Neither", ""],
        ["PMC3_F1.jpg", "Dup?", "x", "A:same", "B:same", "C:other", "D:more", "A"],
    ]
    with (tmp_path / "test.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows(rows)
    s = load_pmc_vqa(tmp_path)
    assert [it.options for it in s.items] == [("MRI", "CT scan", "X-ray", "Ultrasound"), ("Left", "Right", "Both", "Neither")]
    assert [it.gold_letter for it in s.items] == ["B", "A"]
    assert s.items[0].images == (str(tmp_path / "images" / "PMC1_F1.jpg"),)
    assert len(s.exclusions) == 1 and "duplicate options" in s.exclusions[0].reason and "row 4" in s.exclusions[0].reason
    with pytest.raises(ItemError, match="duplicate options"):
        load_pmc_vqa(tmp_path, on_error="raise")


def test_pmc_vqa_v2_letter_answers(tmp_path: Path) -> None:
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "PMC9_F2.jpg").write_bytes(b"x")
    with (tmp_path / "test_2.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "Figure_path", "Caption", "Question", "Choice A", "Choice B", "Choice C", "Choice D",
                    "Answer", "split"])
        w.writerow(["17", "PMC9_F2.jpg", "cap", "Which stain?", "A:H&E", "B:PAS", "C:Gram", "D:Giemsa", "C", "test"])
    it = load_pmc_vqa(tmp_path, csv_name="test_2.csv").items[0]
    assert it.item_id == "pmcvqa-test_2-17" and it.gold_text == "Gram"
    assert it.images == (str(tmp_path / "figures" / "PMC9_F2.jpg"),)


def test_omnimedvqa(tmp_path: Path) -> None:
    qa = tmp_path / "QA_information" / "Open-access"
    qa.mkdir(parents=True)
    (tmp_path / "QA_information" / "Restricted-access").mkdir()
    (qa / "ACRIMA.json").write_text(json.dumps([
        {"dataset": "ACRIMA", "question_id": "ACRIMA_0001", "question_type": "Disease Diagnosis",
         "question": "What is the diagnosis?", "gt_answer": "Glaucoma", "image_path": "Images/ACRIMA/Im001.png",
         "option_A": "Normal", "option_B": "Glaucoma", "modality_type": "Fundus Photography"},
        {"dataset": "ACRIMA", "question_id": "ACRIMA_0002", "question_type": "Modality Recognition",
         "question": "Which modality?", "gt_answer": "CT", "image_path": "Images/ACRIMA/Im002.png",
         "option_A": "Fundus", "option_B": "OCT", "option_C": "MR", "option_D": "X-ray",
         "modality_type": "Fundus Photography"},
    ]))
    s = load_benchmark("omnimedvqa", tmp_path)
    assert len(s.items) == 1 and s.items[0].gold_letter == "B"
    assert s.items[0].images == (str(tmp_path / "Images" / "ACRIMA" / "Im001.png"),)
    assert s.items[0].meta["question_type"] == "Disease Diagnosis"
    assert "'CT' is not one of the options" in s.exclusions[0].reason
    assert load_omnimedvqa(tmp_path, datasets=["Other"]).items == []


def test_missing_layout_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ItemError, match="VQA_RAD Dataset Public.json does not exist"):
        load_vqa_rad(tmp_path)
    with pytest.raises(ItemError, match="unknown benchmark"):
        load_benchmark("nejm", tmp_path)
