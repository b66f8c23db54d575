"""The end-of-run table: a column with nothing to say shows n/a (a model that never returns log-probabilities,
e.g. the stress suite's reference models), never "0.0% (660 missing)"; partial coverage keeps its count."""

from __future__ import annotations

from rich.console import Console

from medvlm_audit.runner import summary_table


def _text(store: dict) -> str:
    summary = {"n_trials": 3, "n_skipped": 0, "per_model": {m: {"trials": 1, "distinct_inputs": 1} for m in store},
               "store": store}
    con = Console(width=400, record=True)
    con.print(summary_table(summary))
    return con.export_text()


def test_confidence_coverage_is_na_when_there_is_nothing_to_say() -> None:
    text = _text({"none-asked": {"confidence_coverage": None},
                  "never-returns": {"confidence_coverage": 0.0, "logprobs_missing": 660},
                  "partial": {"confidence_coverage": 0.75, "logprobs_missing": 5}})
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 3}
    assert "n/a" in rows["none-asked"] and "%" not in rows["none-asked"]
    assert "n/a (none returned)" in rows["never-returns"] and "0.0%" not in rows["never-returns"]
    assert "75.0% (5 missing)" in rows["partial"]


def test_report_title_names_the_run_folder_and_its_models(tmp_path) -> None:
    from medvlm_audit.api import report_title

    assert report_title("Grounding audit", tmp_path / "demo-run" / "run", ["a", "b"]) == \
        "Grounding audit: demo-run/run — a, b"
    assert report_title("Stress audit", tmp_path / "my-eval", [f"m{i}" for i in range(6)]) == \
        "Stress audit: my-eval — m0, m1, m2, m3 and 2 more"
    assert report_title("X", tmp_path / "r", []) == "X: r"
