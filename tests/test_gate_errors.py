"""Gate errors a user meets (fast: toy report folders, no demo run): every error about a rule from a rules
file names the file and the rule / line, and a column found in several tables is never picked silently."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from medvlm_audit.cli import app
from medvlm_audit.gate import GateError, evaluate, load_rules, parse_rule

_COLS = ["suite", "probe_set", "model", "metric", "subset", "point", "se", "ci_low", "ci_high", "n", "unit",
         "method", "note"]


def _report(tmp_path: Path, tables: dict[str, pd.DataFrame]) -> Path:
    """A run folder of suite 'toy': a percent metric 'cgr' in the long schema and the given extra tables."""
    rep = tmp_path / "run" / "report"
    rep.mkdir(parents=True)
    rows = [("toy", "p", m, "cgr", "all", v, 1.0, v - 2, v + 2, 40, "%", "", "") for m, v in (("m1", 30.0),
                                                                                              ("m2", 10.0))]
    pd.DataFrame(rows, columns=_COLS).to_csv(rep / "metrics.csv", index=False)
    for name, df in tables.items():
        df.to_csv(rep / f"{name}.csv", index=False)
    return rep.parent


# ------------------------------------------------------------------------------ errors name the file and rule

@pytest.mark.parametrize(("name", "text", "where"), [
    ("r.yaml", "rules:\n  - toy:cgr >= 0.2\n  - toy:cgr >= 20\n", "rule 2"),
    ("r.yml", "- rule: toy:cgr >= 0.2\n- rule: toy:cgr >= 20\n  name: twenty\n", "rule 2"),
    ("r.toml", 'rules = ["toy:cgr >= 0.2", "toy:cgr >= 20"]\n', "rule 2"),
    ("r.txt", "# gate\ntoy:cgr >= 0.2\n\ntoy:cgr >= 20  # percent?\n", "line 4"),
])
def test_an_error_found_against_the_run_names_the_rules_file_and_rule(tmp_path: Path, name: str, text: str,
                                                                      where: str) -> None:
    run = _report(tmp_path, {})
    f = tmp_path / name
    f.write_text(text)
    rules = load_rules(f)  # the rules read fine: the unit is known only against the run
    with pytest.raises(GateError) as e:
        evaluate([run], rules)
    assert str(e.value).startswith(f"{f}, {where}: bad rule 'toy:cgr >= 20': cgr is in percent")
    r = CliRunner().invoke(app, ["gate", str(run), "--rules", str(f)])
    assert r.exit_code == 2 and f"{f.name}, {where}: bad rule" in " ".join(r.output.split()), r.output


@pytest.mark.parametrize(("rule", "words"), [
    ("toy:bogus >= 1", "unknown metric 'bogus'"),
    ("grounding:cgr >= 0.2", "no run of suite 'grounding'"),
    ("toy:cgr >= 0.2 where model = m3", "no model 'm3'"),
])
def test_unknown_metric_suite_or_model_in_a_rules_file_names_file_and_rule(tmp_path: Path, rule: str,
                                                                           words: str) -> None:
    run = _report(tmp_path, {})
    f = tmp_path / "gate.yaml"
    f.write_text(f"rules:\n  - toy:cgr >= 0.2\n  - rule: {rule}\n    name: second\n")
    with pytest.raises(GateError) as e:
        evaluate([run], load_rules(f))
    assert str(e.value).startswith(f"{f}, rule 2: rule {rule!r}: ") and words in str(e.value)


def test_a_rule_from_the_command_line_has_no_file_to_name(tmp_path: Path) -> None:
    run = _report(tmp_path, {})
    with pytest.raises(GateError) as e:
        evaluate([run], [parse_rule("toy:cgr >= 20")])
    assert str(e.value).startswith("bad rule 'toy:cgr >= 20'")


# ------------------------------------------------------------------------------ a column in several tables

def _two_verdict_tables(tmp_path: Path) -> Path:
    chance = pd.DataFrame({"model": ["m1", "m2"], "subset": ["required"] * 2, "verdict": ["absent", "absent"],
                           "support": ["weak", "weak"]})
    verdicts = pd.DataFrame({"model": ["m1", "m2"], "verdict": ["robust", "not assessable"],
                             "support": ["strong", ""]})
    return _report(tmp_path, {"toy_chance": chance, "toy_verdicts": verdicts})


def test_a_column_in_several_tables_is_read_from_the_verdicts_table(tmp_path: Path) -> None:
    run = _two_verdict_tables(tmp_path)  # toy_chance.csv comes first alphabetically; it must not be read
    res = evaluate([run], [parse_rule("toy:verdict == robust")])
    assert [(c.model, c.subset, c.value, c.status) for c in res.checks] == [
        ("m1", "toy_verdicts.csv", "robust", "pass"), ("m2", "toy_verdicts.csv", None, "undefined")]


def test_where_table_picks_the_other_table(tmp_path: Path) -> None:
    run = _two_verdict_tables(tmp_path)
    res = evaluate([run], [parse_rule("toy:verdict == absent where table = toy_chance and model = m1")])
    assert [(c.model, c.subset, c.value, c.status) for c in res.checks] == [("m1", "required", "absent", "pass")]
    with pytest.raises(GateError, match=r"no table 'toy_chanse' .*did you mean toy_chance"):
        evaluate([run], [parse_rule("toy:verdict == absent where table = toy_chanse")])
    with pytest.raises(GateError, match=r"cgr is a metric of the metrics table"):
        evaluate([run], [parse_rule("toy:cgr >= 0.1 where table = toy_chance")])


def test_a_column_in_several_tables_without_a_verdicts_table_is_an_error_naming_them(tmp_path: Path) -> None:
    a = pd.DataFrame({"model": ["m1"], "word": ["breast"], "category": ["stable"]})
    run = _report(tmp_path, {"cad_greedy": a, "cad_t0_7": a.assign(category="erasure")})
    with pytest.raises(GateError) as e:
        evaluate([run], [parse_rule("toy:category == stable")])
    msg = str(e.value)
    assert "'category' is a column of 2 tables" in msg and "cad_greedy.csv, cad_t0_7.csv" in msg
    assert "where table = cad_greedy" in msg
    res = evaluate([run], [parse_rule("toy:category == stable where table = cad_t0_7.csv")])
    assert [(c.value, c.status) for c in res.checks] == [("erasure", "fail")]


def _with_run_models(run: Path, models: list[str]) -> Path:
    """Write the run's model list where reports keep it (summary.json, ``report.run_info.models``)."""
    import json

    (run / "report" / "summary.json").write_text(json.dumps({"report": {"run_info": {"models": models}}}))
    return run


def test_a_model_of_the_run_without_rows_fails_as_not_assessable_never_skipped(tmp_path: Path) -> None:
    run = _with_run_models(_report(tmp_path, {}), ["m1", "m2", "m3"])  # m3: no cgr row (e.g. every answer unparsed)
    res = evaluate([run], [parse_rule("cgr >= 20%")])
    assert [(c.model, c.subset, c.status) for c in res.checks] == [("m1", "all", "pass"), ("m2", "all", "fail"),
                                                                  ("m3", "all", "undefined")]
    res = evaluate([run], [parse_rule("cgr >= 20% or undefined where model in [m1, m3]")])
    assert [(c.model, c.passed) for c in res.checks] == [("m1", True), ("m3", True)]
    r = CliRunner().invoke(app, ["gate", str(run), "--rule", "cgr >= 20% where model = m3"])
    assert r.exit_code == 1, r.output
    assert "m3" in r.output and "FAIL (not assessable)" in r.output
    r = CliRunner().invoke(app, ["gate", str(run), "--rule", "cgr >= 20% where model = m9"])
    assert r.exit_code == 2 and "no model 'm9'" in r.output, r.output


def test_a_judge_metric_is_not_asked_of_the_run_models(tmp_path: Path) -> None:
    run = _with_run_models(_report(tmp_path, {}), ["m1", "m2"])
    rep = run / "report"
    df = pd.read_csv(rep / "metrics.csv")
    judge = df.iloc[[0]].assign(model="judge", metric="judge_valid_rate", point=90.0)
    pd.concat([df, judge]).to_csv(rep / "metrics.csv", index=False)
    res = evaluate([run], [parse_rule("judge_valid_rate >= 80%")])
    assert [(c.model, c.status) for c in res.checks] == [("judge", "pass")]


def test_verdict_rows_per_strategy_name_it_and_filter_on_it(tmp_path: Path) -> None:
    verdicts = pd.DataFrame({"model": ["m1", "m1", "m2"], "strategy": ["greedy", "t0.7", "greedy"],
                             "verdict": ["clean", "erases", "clean"]})
    run = _with_run_models(_report(tmp_path, {"toy_verdicts": verdicts}), ["m1", "m2"])
    res = evaluate([run], [parse_rule("verdict == clean")])
    assert [(c.model, c.subset, c.status) for c in res.checks] == [
        ("m1", "greedy", "pass"), ("m1", "t0.7", "fail"), ("m2", "greedy", "pass")]
    for rule in ("verdict == clean where subset = t0.7", "verdict == clean where strategy = t0.7"):
        res = evaluate([run], [parse_rule(rule)])  # m2 has no t0.7 row: not assessable, not skipped
        assert [(c.model, c.subset, c.status) for c in res.checks] == [("m1", "t0.7", "fail"),
                                                                      ("m2", "t0.7", "undefined")], rule
