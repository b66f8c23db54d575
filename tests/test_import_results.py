"""Import of the paper's released result layout: values kept as given, errors name file, row and column."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from medvlm_audit.api import tidy_store as tidy
from medvlm_audit.cli import app
from medvlm_audit.store import RunStore
from medvlm_audit.suites.grounding.import_results import MANIFEST_COLUMNS, ResultsImportError, import_results


def _manifest(tmp: Path, rexerr_clean: bool = False) -> Path:
    rows = []
    for i in range(4):
        r = {c: None for c in MANIFEST_COLUMNS}
        r.update(case_id=f"ms{i}", source="ms_cxr", image_path=f"files/p{i}.jpg", subject_id=100 + i, study_id=200 + i,
                 view="AP" if i % 2 else "PA", age=60 + i, gender="F" if i % 2 else "M", finding="Pleural Effusion",
                 label=1, box_x=10, box_y=20, box_w=30, box_h=40, swap_image_path=f"files/q{i}.jpg",
                 irrelevant_box_x=194, irrelevant_box_y=184, irrelevant_box_w=30, irrelevant_box_h=40)
        rows.append(r)
    # ReXErr rows as the release fills them: label = error_present (the ground truth is 1 - error_present)
    r = {c: None for c in MANIFEST_COLUMNS}
    r.update(case_id="rx0", source="rexerr", image_path="files/r.jpg", subject_id=300, study_id=301, view="PA", age=70,
             gender="M", original_sentence="There is no effusion.", error_sentence="There is a large left effusion.",
             error_present=1, label=1, error_type="false_prediction", swap_image_path="files/s.jpg")
    rows.append(r)
    if rexerr_clean:  # a no-error control: empty error_sentence, label 0, Title-Case error type
        r = {c: None for c in MANIFEST_COLUMNS}
        r.update(case_id="rx1", source="rexerr", image_path="files/r1.jpg", subject_id=310, study_id=311, view="PA",
                 age=71, gender="F", original_sentence="The heart size is normal.", error_sentence="", error_present=0,
                 label=0, error_type="Not Applicable", finding="Cardiomegaly")
        rows.append(r)
    p = tmp / "manifest.csv"
    pd.DataFrame(rows, columns=MANIFEST_COLUMNS).to_csv(p, index=False)
    return p


TRUTH = {"ms0": 1, "ms1": 1, "ms2": 1, "ms3": 1, "rx0": 0, "rx1": 1}  # ground truth (rexerr: 1 - error_present)


def _results(tmp: Path, model: str, parsed: dict[str, list[int]],
             ids_all: tuple[str, ...] = ("ms0", "ms1", "ms2", "ms3", "rx0")) -> Path:
    d = tmp / "results" / model
    d.mkdir(parents=True, exist_ok=True)
    for cond, values in parsed.items():
        ids = list(ids_all)[: len(values)]
        pd.DataFrame({
            "case_id": ids, "source": "x", "model_name": model, "condition": cond, "prompt_variant": "default",
            "raw_answer": ["Yes" if v == 1 else "No" if v == 0 else "maybe" for v in values],
            "parsed_answer": values, "confidence": [0.9 if v == 1 else 0.2 for v in values],
            "ground_truth": [TRUTH[i] for i in ids],
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
        (lambda d: d.rename(columns={"parsed_answer": "parsed"}),
         r"original.csv: row 1 \(the header row\): missing column\(s\) \['parsed_answer'\]; unexpected column\(s\) \['parsed'\]"),
        (lambda d: d.assign(parsed_answer=[1, 2, 0, 1, 0]), r"original.csv: row 3, column 'parsed_answer': '2' is not one of"),
        (lambda d: d.assign(confidence=[0.9, 1.5, 0.2, 0.9, 0.2]), r"original.csv: row 3, column 'confidence': '1.5' is outside \[0, 1\]"),
        (lambda d: d.assign(confidence=["0.9", "0.8", "high", "0.9", ""]),
         r"original.csv: row 4, column 'confidence': 'high' is not a number"),
        (lambda d: d.assign(ground_truth=[1, 1, 1, 1, 1]),
         r"original.csv: row 6, column 'ground_truth': '1' differs from the manifest label 0 of case 'rx0'"),
        # the released layout: ReXErr's ground truth is 1 - error_present (the manifest label is error_present)
        (lambda d: d.assign(ground_truth=[1, 1, 2, 1, 0]), r"original.csv: row 4, column 'ground_truth': '2' is not 0 or 1"),
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


def test_empty_confidence_is_allowed(tmp_path: Path) -> None:
    man = _manifest(tmp_path)
    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0]})
    f = res / "gpt" / "original.csv"
    pd.read_csv(f, dtype={"case_id": str}).assign(confidence=[0.9, None, None, 0.7, 0.1]).to_csv(f, index=False)
    with RunStore.open_dir(import_results(man, res, tmp_path / "run")) as st:
        o = tidy(st).set_index("case_id")
    assert pd.isna(o.loc["ms1", "confidence"]) and o.loc["ms3", "confidence"] == pytest.approx(0.7)


def test_manifest_with_a_wrong_column_names_the_header_row(tmp_path: Path) -> None:
    man = _manifest(tmp_path)
    pd.read_csv(man).rename(columns={"label": "labels"}).to_csv(man, index=False)
    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0]})
    with pytest.raises(ResultsImportError, match=r"manifest.csv: row 1 \(the header row\): missing column\(s\) \['label'\]"):
        import_results(man, res, tmp_path / "run")


@pytest.mark.slow
def test_cli_import_then_report_end_to_end(tmp_path: Path) -> None:
    man = _manifest(tmp_path)
    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0], "swap": [1, 1, 0, 1, 0],
                                     "target_mask": [0, 1, 1, 1], "irrelevant_mask": [1, 1, 1, 1]})
    _results(tmp_path, "textlm", {"original": [1, 1, 1, 1, 1]})
    out = CliRunner().invoke(app, ["import-results", str(man), str(res), "--out", str(tmp_path / "run"),
                                   "--text-only", "textlm"])
    assert out.exit_code == 0, out.output
    rep = tmp_path / "run" / "report"
    assert (rep / "report.html").exists()
    m = pd.read_csv(rep / "metrics.csv").set_index(["model", "metric", "subset"])
    assert m.loc[("gpt", "accuracy", "all"), "point"] == pytest.approx(80.0)  # all but ms2 correct: 4 of 5
    assert m.loc[("gpt", "accuracy", "all"), "n"] == 5
    # correct boxed cases ms0, ms1, ms3; only ms0 flips under the target mask
    assert m.loc[("gpt", "cgr", "all"), "point"] == pytest.approx(100 / 3) and m.loc[("gpt", "cgr", "all"), "n"] == 3
    assert m.loc[("textlm", "uar", "all"), "point"] == pytest.approx(100.0)


def test_cli_import_failure_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    man = _manifest(tmp_path)
    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0]})
    f = res / "gpt" / "original.csv"
    pd.read_csv(f, dtype={"case_id": str}).assign(confidence=[0.9, 7, 0.2, 0.9, 0.2]).to_csv(f, index=False)
    out = CliRunner().invoke(app, ["import-results", str(man), str(res), "--out", str(tmp_path / "run")])
    assert out.exit_code == 2 and isinstance(out.exception, SystemExit)
    assert "row 3, column 'confidence'" in " ".join(out.output.split())


def test_cli_report_failure_after_import_is_a_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from medvlm_audit import api
    from medvlm_audit.errors import AuditError

    def broken(*_a, **_k):
        raise AuditError("analysis failed: column 'parsed' is broken")

    monkeypatch.setattr(api, "report", broken)
    man = _manifest(tmp_path)
    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0]})
    out = CliRunner().invoke(app, ["import-results", str(man), str(res), "--out", str(tmp_path / "run")])
    assert out.exit_code == 2 and isinstance(out.exception, SystemExit), out.output
    assert "analysis failed" in out.output


@pytest.mark.slow
def test_cli_report_options_change_the_analysis(tmp_path: Path) -> None:
    man = _manifest(tmp_path)
    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0], "swap": [1, 1, 0, 1, 0],
                                     "target_mask": [0, 1, 1, 1], "irrelevant_mask": [1, 0, 0, 1]})
    run = tmp_path / "run"
    assert CliRunner().invoke(app, ["import-results", str(man), str(res), "--out", str(run), "--no-report"]).exit_code == 0
    runner = CliRunner()
    default = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "a"), "--B", "300"])
    chosen = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "b"), "--B", "300", "--mode", "index",
                                 "--is-denominator", "all-parsed", "--cluster-by-patient"])
    assert default.exit_code == 0 and chosen.exit_code == 0, default.output + chosen.output
    a = pd.read_csv(tmp_path / "a" / "metrics.csv").set_index(["model", "metric", "subset"])
    b = pd.read_csv(tmp_path / "b" / "metrics.csv").set_index(["model", "metric", "subset"])
    # IS: correct-on-original boxed cases (ms0, ms1, ms3) vs all parsed boxed cases (ms2 too)
    assert (a.loc[("gpt", "is", "all"), "n"], b.loc[("gpt", "is", "all"), "n"]) == (3, 4)
    assert "default denominator" in a.loc[("gpt", "is", "all"), "method"]
    assert "all parsed boxed cases (Eq. 8)" in b.loc[("gpt", "is", "all"), "method"]
    assert "B=300" in a.loc[("gpt", "uar", "all"), "method"] and "exact-counts" in a.loc[("gpt", "uar", "all"), "method"]
    assert "index" in b.loc[("gpt", "uar", "all"), "method"] and "cluster" in b.loc[("gpt", "uar", "all"), "method"]
    sa, sb = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("a", "b"))
    assert (sa["is_denominator_option"], sb["is_denominator_option"]) == ("correct", "all")
    assert sb["resampling"] == {**sb["resampling"], "mode": "index", "B": 300, "cluster_by_patient": True}
    assert "Eq. 8" in (tmp_path / "b" / "report.html").read_text()  # the report labels the denominator
    bad = runner.invoke(app, ["report", str(run), "--mode", "bogus"])
    assert bad.exit_code != 0


def test_cli_import_results(tmp_path: Path) -> None:
    man = _manifest(tmp_path)
    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0], "swap": [1, 1, 0, 1, 0]})
    out = CliRunner().invoke(app, ["import-results", str(man), str(res), "--out", str(tmp_path / "run"), "--no-report"])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "run" / "results.parquet").exists()


def test_rexerr_rows_in_the_released_layout(tmp_path: Path) -> None:
    # label = error_present in the manifest; ground truth 1 - error_present in the results (issue 12 item 1):
    # this import used to abort ("differs from the manifest label"), and rx1 (empty error_sentence) became a
    # finding-presence question about cardiomegaly with label 0
    man = _manifest(tmp_path, rexerr_clean=True)
    ids = ("ms0", "ms1", "ms2", "ms3", "rx0", "rx1")
    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0, 1], "swap": [1, 1, 0, 1, 1, 1]}, ids)
    _results(tmp_path, "RAD-DINO", {"original": [1, 1, 1, 1, 1, 1]}, ids)
    logged: list[str] = []
    run = import_results(man, res, tmp_path / "run", vision_only=("RAD-DINO",), log=logged.append)
    with RunStore.open_dir(run) as st:
        df = tidy(st)
        cases = {r["case_id"]: r for r in st.frame("SELECT row FROM cases")["row"].map(json.loads)}
        meta = st.meta()
    o = df[(df.model == "gpt") & (df.condition == "original")].set_index("case_id")
    assert o.loc["rx0", "label"] == 0 and o.loc["rx1", "label"] == 1
    assert (o.loc["rx0", "kind"], o.loc["rx1", "kind"]) == ("report_error", "report_error")
    assert o.loc["rx1", "correct"] == 1.0
    assert cases["rx1"]["sentence"] == "The heart size is normal." and cases["rx1"]["finding"] is None
    assert cases["rx0"]["sentence"] == "There is a large left effusion."
    assert cases["rx1"]["error_type"] == "not_applicable"
    summary = json.loads((run / "import_summary.json").read_text())
    assert summary == meta["import_summary"] and summary["n_rexerr"] == 2
    text = " ".join(summary["release_defects"])
    assert "ReXErr swap polarity" in text and "Title-Case error types" in text and "RAD-DINO's ReXErr rows" in text
    assert len(logged) == len(summary["release_defects"])


def test_rexerr_row_without_its_sentence_names_the_row(tmp_path: Path) -> None:
    man = _manifest(tmp_path)
    m = pd.read_csv(man, dtype={"case_id": str})
    m.loc[m.case_id == "rx0", "error_sentence"] = None
    m.to_csv(man, index=False)
    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0]})
    with pytest.raises(ResultsImportError, match=r"row 6, column 'error_sentence': empty for a ReXErr row"):
        import_results(man, res, tmp_path / "run")
