"""Import of the paper's released result layout: values kept as given, errors name file, row and column."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from medvlm_audit.cli import app
from medvlm_audit.export import tidy
from medvlm_audit.import_results import MANIFEST_COLUMNS, ResultsImportError, import_results
from medvlm_audit.store import RunStore


def _manifest(tmp: Path) -> Path:
    rows = []
    for i in range(4):
        r = {c: None for c in MANIFEST_COLUMNS}
        r.update(case_id=f"ms{i}", source="ms_cxr", image_path=f"files/p{i}.jpg", subject_id=100 + i, study_id=200 + i,
                 view="AP" if i % 2 else "PA", age=60 + i, gender="F" if i % 2 else "M", finding="Pleural Effusion",
                 label=1, box_x=10, box_y=20, box_w=30, box_h=40, swap_image_path=f"files/q{i}.jpg",
                 irrelevant_box_x=194, irrelevant_box_y=184, irrelevant_box_w=30, irrelevant_box_h=40)
        rows.append(r)
    r = {c: None for c in MANIFEST_COLUMNS}
    r.update(case_id="rx0", source="rexerr", image_path="files/r.jpg", subject_id=300, study_id=301, view="PA", age=70,
             gender="M", error_sentence="There is a large left effusion.", error_present=1, error_type="false_prediction",
             swap_image_path="files/s.jpg")
    rows.append(r)
    p = tmp / "manifest.csv"
    pd.DataFrame(rows, columns=MANIFEST_COLUMNS).to_csv(p, index=False)
    return p


def _results(tmp: Path, model: str, parsed: dict[str, list[int]]) -> Path:
    d = tmp / "results" / model
    d.mkdir(parents=True, exist_ok=True)
    for cond, values in parsed.items():
        ids = ["ms0", "ms1", "ms2", "ms3", "rx0"][: len(values)]
        pd.DataFrame({
            "case_id": ids, "source": "x", "model_name": model, "condition": cond, "prompt_variant": "default",
            "raw_answer": ["Yes" if v == 1 else "No" if v == 0 else "maybe" for v in values],
            "parsed_answer": values, "confidence": [0.9 if v == 1 else 0.2 for v in values],
            "ground_truth": 1,
        }).to_csv(d / f"{cond}.csv", index=False)
    return tmp / "results"


def test_import_then_tidy_keeps_values(tmp_path: Path) -> None:
    man = _manifest(tmp_path)
    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0], "swap": [1, 0, 0, 1, 0],
                                     "target_mask": [0, 1, -1, 1], "irrelevant_mask": [1, 1, 0, 1]})
    _results(tmp_path, "textlm", {c: [1, 1, 1, 1, 1] for c in ("original", "swap")})
    run = import_results(man, res, tmp_path / "run", text_only=("textlm",))
    with RunStore.open_dir(run) as st:
        df = tidy(st)
    g = df[(df.model == "gpt") & (df.condition == "target_mask")].set_index("case_id")
    assert g.loc["ms2", "parsed"] == -1 and g.loc["ms0", "parsed"] == 0
    o = df[(df.model == "gpt") & (df.condition == "original")].set_index("case_id")
    assert o.loc["ms2", "correct"] == 0.0 and o.loc["ms0", "confidence"] == pytest.approx(0.9)
    assert o.loc["rx0", "label"] == 0  # error_present=1 -> the sentence is not accurate -> No
    assert bool(o.loc["ms0", "has_box"]) and not bool(o.loc["rx0", "has_box"])
    assert set(df[df.model == "textlm"].modality) == {"text_only"}
    assert o.loc["ms1", "sex"] == "F" and o.loc["ms1", "view"] == "AP"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.replace({"case_id": {"ms1": "zz9"}}), r"original.csv: row 3, column 'case_id': unknown case id 'zz9'"),
        (lambda d: d.rename(columns={"parsed_answer": "parsed"}), r"original.csv: missing column\(s\) \['parsed_answer'\]"),
        (lambda d: d.assign(parsed_answer=[1, 2, 0, 1, 0]), r"original.csv: row 3, column 'parsed_answer': '2' is not one of"),
    ],
)
def test_import_errors_name_file_row_column(tmp_path: Path, mutate, message) -> None:
    man = _manifest(tmp_path)
    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0]})
    f = res / "gpt" / "original.csv"
    mutate(pd.read_csv(f, dtype={"case_id": str})).to_csv(f, index=False)
    with pytest.raises(ResultsImportError, match=message):
        import_results(man, res, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_cli_import_results(tmp_path: Path) -> None:
    man = _manifest(tmp_path)
    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0], "swap": [1, 1, 0, 1, 0]})
    out = CliRunner().invoke(app, ["import-results", str(man), str(res), "--out", str(tmp_path / "run"), "--no-report"])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "run" / "results.parquet").exists()
