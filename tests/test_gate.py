"""`medvlm-audit gate`: rules on the long metrics schema, on points and interval bounds, exit 0/1/2, JUnit XML.

The run-level tests use the grounding demo's reference models, whose categories are designed: `local-evidence`
uses the image, `finding-prior` (text only) cannot."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
from grounding_demo_run import small_grounding_demo
from typer.testing import CliRunner

from medvlm_audit.cli import app
from medvlm_audit.gate import GateError, evaluate, junit_xml, load_rules, parse_rule, table_text

#: the fast lane (`pytest -m "not slow"`) leaves this module out: its fixtures build runs or start processes
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return small_grounding_demo(tmp_path_factory)


def _gate(*args: str):
    return CliRunner().invoke(app, ["gate", *args])


# ----------------------------------------------------------------------------------------------- rule grammar

def test_rule_grammar_reads_suite_field_bounds_lists_and_conditions() -> None:
    r = parse_rule("grounding:cgr.ci_low >= 0.20 where finding in [pneumothorax, pleural_effusion] and model = m1")
    assert (r.suite, r.metric, r.field, r.op, r.values) == ("grounding", "cgr", "ci_low", ">=", ("0.20",))
    assert [(c.key, c.op, c.values) for c in r.where] == [("finding", "in", ("pneumothorax", "pleural_effusion")),
                                                           ("model", "=", ("m1",))]
    r = parse_rule("category == uses_image")
    assert (r.suite, r.metric, r.field, r.op, r.values, r.where) == (None, "category", "point", "==", ("uses_image",), ())
    r = parse_rule("faithfulness:sham_fpr.ci_high <= 0.1 or undefined")
    assert r.allow_undefined and r.field == "ci_high"
    assert parse_rule("x.point != 3 or not assessable where subset = 'greedy'").where[0].values == ("greedy",)
    assert parse_rule("category not in [unstable, indeterminate]").op == "not in"


@pytest.mark.parametrize("bad, words", [
    ("", "empty"),
    ("cgr is 3", "not a comparison"),
    ("cgr >> 3", "expected a value"),
    ("cgr.lower >= 3", "unknown field 'lower'"),
    ("cgr >= ", "value is missing"),
    ("cgr", "comparison is missing"),
    ("cgr >= [1, 2]", "takes one value"),
    ("cgr >= 1 when model = a", "unexpected 'when'"),
    ("cgr >= 1 where model", "comparison is missing"),
    ("cgr >= 1 where model ~ a", "not a comparison"),
    ("cgr >= 1 where finding in [a, b", "not closed"),
    ("cgr >= 1 where model = a or model = b", "joined by 'and'"),
])
def test_a_bad_rule_is_named(bad: str, words: str) -> None:
    with pytest.raises(GateError, match="bad rule") as e:
        parse_rule(bad)
    assert words in str(e.value)


def test_rules_files_in_yaml_toml_and_text(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text("rules:\n  - accuracy >= 50%\n  - rule: auroc >= 0.5\n    name: ranks\n"
                                     "    allow_undefined: true\n")
    rules = load_rules(tmp_path / "r.yaml")
    assert [r.metric for r in rules] == ["accuracy", "auroc"] and rules[1].allow_undefined and rules[1].label == "ranks"
    (tmp_path / "r.toml").write_text('rules = ["accuracy >= 0.5", "category == uses_image"]\n')
    assert [r.metric for r in load_rules(tmp_path / "r.toml")] == ["accuracy", "category"]
    (tmp_path / "r.txt").write_text("# the deployment gate\naccuracy >= 0.5  # headline\n\ncgr.ci_low > 0\n")
    assert [r.metric for r in load_rules(tmp_path / "r.txt")] == ["accuracy", "cgr"]
    (tmp_path / "bad.txt").write_text("accuracy >= 0.5\ncgr >> 1\n")
    with pytest.raises(GateError, match=r"bad\.txt, line 2: bad rule 'cgr >> 1'"):
        load_rules(tmp_path / "bad.txt")
    (tmp_path / "bad.yaml").write_text("rules:\n  - accuracy >= 0.5\n  - rule: x > 1\n    severity: high\n")
    with pytest.raises(GateError, match=r"bad\.yaml, rule 2: unknown key\(s\) \['severity'\]"):
        load_rules(tmp_path / "bad.yaml")


# ----------------------------------------------------------------------------------------------- on a demo run

def test_category_rule_passes_for_the_model_that_uses_the_image_and_fails_for_the_text_only_prior(run: Path) -> None:
    cats = pd.read_csv(run / "report" / "categories.csv").set_index("model")["category"]
    assert cats["local-evidence"] == "uses_image" and cats["finding-prior"] != "uses_image"  # as designed
    ok = _gate(str(run), "--rule", "grounding:category == uses_image where model = local-evidence")
    assert ok.exit_code == 0, ok.output
    assert "pass" in ok.output and "FAIL" not in ok.output
    bad = _gate(str(run), "--rule", "grounding:category == uses_image where model = finding-prior")
    assert bad.exit_code == 1, bad.output
    assert "FAIL" in bad.output and "finding-prior" in bad.output and "1 fail" in bad.output


def test_interval_bounds_are_compared_per_subset_in_the_metrics_unit(run: Path) -> None:
    m = pd.read_csv(run / "report" / "metrics.csv")
    row = m[(m.model == "local-evidence") & (m.metric == "cgr") & (m.subset == "all")].iloc[0]
    low = row.ci_low / 100  # percent in the table, a proportion in the rule
    res = evaluate([run], [parse_rule(f"grounding:cgr.ci_low >= {low - 0.01:.4f} where model = local-evidence"),
                           parse_rule(f"grounding:cgr.ci_low >= {low + 0.01:.4f} where model = local-evidence"),
                           parse_rule(f"grounding:cgr.ci_low >= {row.ci_low + 1:.3f}% where model = local-evidence")])
    assert [c.status for c in res.checks] == ["pass", "fail", "fail"]
    assert all(c.value == pytest.approx(row.ci_low) for c in res.checks)
    # one check per finding of the list, each from its own row
    res = evaluate([run], [parse_rule("cgr.point >= 0 where finding in [pneumothorax, pleural_effusion] "
                                      "and model = local-evidence")])
    assert sorted(c.subset for c in res.checks) == ["finding=pleural_effusion", "finding=pneumothorax"]
    for c in res.checks:
        want = m[(m.model == "local-evidence") & (m.metric == "cgr") & (m.subset == c.subset)].point.iloc[0]
        assert c.value == pytest.approx(want)
    # without a model condition every model is checked
    res = evaluate([run], [parse_rule("accuracy >= 0")])
    assert sorted(c.model for c in res.checks) == sorted(set(m.model))


def test_undefined_metric_fails_unless_the_rule_allows_it(run: Path) -> None:
    m = pd.read_csv(run / "report" / "metrics.csv")
    assert m[(m.model == "always-yes") & (m.metric == "auroc")].point.isna().all()  # degenerate confidences
    res = evaluate([run], [parse_rule("auroc >= 0.5 where model = always-yes"),
                           parse_rule("auroc >= 0.5 or undefined where model = always-yes")])
    assert [c.status for c in res.checks] == ["undefined", "undefined"]
    assert [c.passed for c in res.checks] == [False, True]
    out = table_text(res)
    assert "FAIL (not assessable)" in out and "pass (undefined, allowed)" in out
    assert _gate(str(run), "--rule", "auroc >= 0.5 where model = always-yes").exit_code == 1
    assert _gate(str(run), "--rule", "auroc >= 0.5 or undefined where model = always-yes").exit_code == 0


def test_junit_xml_is_valid_with_one_testcase_per_check_and_failures_marked(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "gate.xml"
    r = _gate(str(run), "--rule", "grounding:category == uses_image where model in [local-evidence, finding-prior]",
              "--rule", "accuracy >= 0", "--junit", str(out))
    assert r.exit_code == 1, r.output
    root = ET.parse(out).getroot()
    cases = root.findall(".//testcase")
    n_models = pd.read_csv(run / "report" / "metrics.csv").model.nunique()
    assert root.tag == "testsuites" and len(cases) == 2 + n_models == int(root.get("tests"))
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == 1 == int(root.get("failures")) and "finding-prior" in failed[0].get("name")
    assert junit_xml(evaluate([run], [parse_rule("accuracy >= 0")])).count("<failure") == 0


@pytest.mark.parametrize("rule, words", [
    ("grounding:cgrr >= 0.2", "unknown metric 'cgrr'"),
    ("stress:accuracy >= 0.2", "no run of suite 'stress'"),
    ("cgr >= 0.2 where finding = pneumothorx", "did you mean finding=pneumothorax"),
    ("cgr >= 0.2 where model = local-evidense", "did you mean local-evidence"),
    ("cgr >= 20", "cgr is in percent: write 20% or 0.2"),
    ("auroc >= 50%", "not in percent"),
    ("category.ci_low >= 1", "no ci_low"),
    ("category >= uses_image", "holds words"),
    ("cgr >= 0.1 where model = local-evidence and model != local-evidence", "no row matches"),
])
def test_exit_2_names_what_is_wrong(run: Path, rule: str, words: str) -> None:
    r = _gate(str(run), "--rule", rule)
    assert r.exit_code == 2, r.output
    assert words in r.output and "Traceback" not in r.output


def test_exit_2_on_a_run_without_report_and_on_no_rule(tmp_path: Path, run: Path) -> None:
    (tmp_path / "empty").mkdir()
    r = _gate(str(tmp_path / "empty"), "--rule", "accuracy >= 0")
    assert r.exit_code == 2 and "no report" in r.output and "medvlm-audit report" in r.output
    r = _gate(str(run))
    assert r.exit_code == 2 and "no rule given" in r.output


def test_rules_file_from_the_command_line(run: Path, tmp_path: Path) -> None:
    f = tmp_path / "gate.yaml"
    f.write_text("rules:\n  - rule: grounding:category == uses_image where model = local-evidence\n"
                 "    name: local-evidence reads the image\n")
    r = _gate(str(run), "--rules", str(f))
    assert r.exit_code == 0, r.output
    assert "#1: local-evidence reads the image" in r.output


def _toy_report(tmp_path: Path) -> Path:
    """A report folder of any suite: the long schema and one extra table with a model column."""
    rep = tmp_path / "toyrun" / "report"
    rep.mkdir(parents=True)
    rows = [("toy", "p", "m1", "robustness", s, v, 0.0, v - 0.1, v + 0.05, 40, "score", "", "")
            for s, v in (("R1", 0.9), ("mean", 0.85))]
    rows += [("toy", "p", "m2", "robustness", "mean", float("nan"), float("nan"), float("nan"), float("nan"), 0,
              "score", "", "not assessable: 80% unparsed")]
    cols = ["suite", "probe_set", "model", "metric", "subset", "point", "se", "ci_low", "ci_high", "n", "unit",
            "method", "note"]
    pd.DataFrame(rows, columns=cols).to_csv(rep / "metrics.csv", index=False)
    pd.DataFrame({"model": ["m1", "m2"], "verdict": ["robust", None]}).to_csv(rep / "verdicts.csv", index=False)
    return rep.parent


def test_any_suite_subsets_and_undefined_table_values(tmp_path: Path) -> None:
    run = _toy_report(tmp_path)
    with pytest.raises(GateError, match="no subset 'all' but 2 subsets"):
        evaluate([run], [parse_rule("robustness >= 0.8")])
    res = evaluate([run], [parse_rule("toy:robustness.ci_low >= 0.7 where subset = mean"),
                           parse_rule("verdict == robust"), parse_rule("verdict == robust or undefined")])
    got = [(c.model, c.status, c.passed) for c in res.checks]
    assert got == [("m1", "pass", True), ("m2", "undefined", False),  # ci_low 0.75; m2 not assessable
                   ("m1", "pass", True), ("m2", "undefined", False), ("m1", "pass", True), ("m2", "undefined", True)]
    assert res.exit_code == 1
    assert "verdicts.csv" in table_text(res)
