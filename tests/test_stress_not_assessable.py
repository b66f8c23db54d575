"""Not assessable is a verdict (DESIGN.md, stress audit; issue 21 item 3): a model whose parse rate under a
condition is below 50% gets no accuracy, change or robustness term from that condition, never a robustness of 1.0."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from test_stress_analysis import probe_items

from medvlm_audit.suites.stress.analysis import ASSESSABLE_PARSE_RATE, analyse_stress, metrics_long
from medvlm_audit.suites.stress.sections import stress_result, stress_verdicts


def _answers(texts: dict[str, str], n5: int = 12) -> pd.DataFrame:
    """Every trial of the full T1-T5 plan on ``n5`` five-option items, answered by each model with one text
    (a function of nothing the model may not see)."""
    from medvlm_audit.suites.stress.conditions import StressOptions, plan_stress

    plan = plan_stress(probe_items(0, n5), StressOptions(check_files=False))
    rows = []
    for model, text in texts.items():
        for t in plan.trials:
            rows.append({"model": model, "item_id": t.case_id, "condition": t.condition, "sample_index": 0,
                         "answer_text": text, **t.payload})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def yes_res():
    tidy = _answers({"yes-man": "Yes", "cannot": "I cannot determine the answer from this.",
                     "first": "<answer>A</answer>"})
    return tidy, analyse_stress(tidy, B=300)


def test_yes_to_every_mcq_item_is_not_assessable(yes_res):
    tidy, res = yes_res
    n_trials = int((tidy.model == "yes-man").sum())
    assert n_trials >= 150  # 12 items x every condition
    rob = res.robustness[res.robustness.model == "yes-man"]
    assert rob["value"].isna().all(), rob[["component", "value"]]  # no R = 1.0, no mean = 1.0
    assert rob.loc[rob.component.str.match(r"^[FR]\d$"), "note"].str.startswith("not assessable (parse rate 0.0%").all()
    acc = res.accuracy[res.accuracy.model == "yes-man"]
    assert acc["accuracy"].isna().all() and acc["note"].str.startswith("not assessable").all()
    ch = res.changes[res.changes.model == "yes-man"]
    assert len(ch) and ch["diff"].isna().all() and ch["p"].isna().all()
    assert res.chance.set_index("model").loc["yes-man", "note"].startswith("not assessable")
    summ = res.summary()
    assert set(summ["not_assessable"]["yes-man"].values()) == {0.0}
    assert all(v is None for v in summ["robustness"]["yes-man"].values())
    tags, text = stress_verdicts(res)["yes-man"]
    assert tags == ["not assessable"] and text.startswith("not assessable (parse rate 0.0% under ")
    # metrics.csv: no numeric point in any robustness row of this model
    ml = metrics_long(res, "p")
    r = ml[(ml.model == "yes-man") & (ml.metric == "robustness")]
    assert len(r) == 12 and r["point"].isna().all()


def test_a_model_that_answers_stays_assessable(yes_res):
    _, res = yes_res
    rob = res.robustness[res.robustness.model == "first"].set_index("component")["value"]
    assert not math.isnan(rob["mean_available"]) and not math.isnan(rob["R3"])
    assert "first" not in res.summary()["not_assessable"]
    assert stress_verdicts(res)["first"][0] != ["not assessable"]


def test_cannot_determine_is_not_a_robust_model(yes_res):
    """'I cannot determine...' is a refusal: parsed (a wrong answer, DESIGN.md), so the numbers stay, but the
    verdict is not 'no shortcut found' and every R row says that R near 1 is no evidence of robustness."""
    _, res = yes_res
    st = res.accuracy[res.accuracy.model == "cannot"]
    assert (st["parse_rate"] >= ASSESSABLE_PARSE_RATE).all() and st["accuracy"].fillna(0).eq(0).all()
    tags, text = stress_verdicts(res)["cannot"]
    assert tags == ["not assessable"] and "no usable answer" in text
    rob = res.robustness[(res.robustness.model == "cannot") & res.robustness.component.str.startswith("R")]
    assert rob["note"].str.startswith("no usable answer").all()
    assert "cannot" in res.summary()["meta"]["no_usable_answer"]
    assert "first" not in res.summary()["meta"]["no_usable_answer"]


def test_threshold_is_half_of_the_answers():
    # 6 of 12 items parsed under every condition: assessable (50%); 5 of 12: not
    for k, expect in ((6, False), (5, True)):
        tidy = _answers({"m": "<answer>A</answer>"})
        idx = sorted(tidy.item_id.unique())
        tidy.loc[tidy.item_id.isin(idx[k:]), "answer_text"] = "Yes"
        res = analyse_stress(tidy, B=200)
        assert ("m" in res.summary()["not_assessable"]) is expect


def test_report_and_summary_say_not_assessable(yes_res, tmp_path):
    from medvlm_audit.report import write_report

    _, res = yes_res
    path = write_report(stress_result(res, "p"), tmp_path / "report", suite="stress", title="t", parquet_tables=True)
    html = (tmp_path / "report" / "report.html").read_text()
    assert "not assessable (parse rate 0.0%" in html
    summ = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summ["verdicts"]["yes-man"].startswith("not assessable")
    assert summ["not_assessable"]["yes-man"]
    met = pd.read_csv(tmp_path / "report" / "metrics.csv")
    r = met[(met.model == "yes-man") & (met.metric == "robustness")]
    assert len(r) and r["point"].isna().all()
    assert path is not None and np.isfinite(met[(met.model == "first") & (met.metric == "robustness")]["point"]).any()


def test_run_warns_when_a_parse_rate_is_below_half(tmp_path):
    """`run` prints a warning per model whose parse rate under a condition is below 50% (health.py reads the
    exported tidy table's Score status column)."""
    from medvlm_audit import api
    from medvlm_audit.cli import _warn_low_parse_rates
    from medvlm_audit.config import validate_config
    from medvlm_audit.health import results_parse_rate_lines
    from medvlm_audit.models.base import LocalModel, Response
    from medvlm_audit.suites.stress.embedded import build_phantom_mcq
    from medvlm_audit.suites.stress.reference import FirstOptionAnswerer

    class YesMan(LocalModel):
        name = "yes-man"
        modality = "text_only"

        def identity(self):
            return {"backend": "test", "model": "yes-man"}

        def predict(self, inputs):
            return [Response("Yes", finish_reason="stop") for _ in inputs]

    build_phantom_mcq(tmp_path / "set", n_items=12, size=64, n_substitutions=4)
    cfg = validate_config({"suite": "stress", "run_dir": str(tmp_path / "run"), "probe_sets": [str(tmp_path / "set")],
                           "models": [{"name": "yes-man", "backend": "reference"},
                                      {"name": "first-option", "backend": "reference"}],
                           "conditions": ["original", "no_image"]})
    res = api.run(cfg, models=[YesMan(), FirstOptionAnswerer()], progress=False)
    lines = results_parse_rate_lines(res.results_parquet)
    assert len(lines) == 1 and lines[0].startswith("warning: model 'yes-man' has a parse rate below 50% (0.0% under ")
    assert "not assessable" in lines[0]
    from medvlm_audit import cli
    printed = []
    orig = cli.console.print
    cli.console.print = lambda s, **kw: printed.append(str(s))
    try:
        _warn_low_parse_rates(res.results_parquet)
    finally:
        cli.console.print = orig
    assert printed == lines


def test_changes_carry_their_bootstrap_support(yes_res):
    _, res = yes_res
    ch = res.changes[res.changes.model == "first"]
    moved = ch[ch["diff"].fillna(0) != 0]
    assert len(moved) and moved["support"].between(0, 1).all()
    assert ch.loc[ch["diff"] == 0, "support"].isna().all()
    _tags, text = stress_verdicts(res)["first"]
    assert "support" in text or not len(moved[moved.test.isin(["T1", "T3"])])


def test_stress_accuracy_rows_name_their_interval(yes_res):
    from medvlm_audit import stats

    _, res = yes_res
    a = res.accuracy[(res.accuracy.model == "first") & (res.accuracy.condition == "original")].iloc[0]
    k, n = round(a["accuracy"] * a["n_scored"]), int(a["n_scored"])
    assert (a["ci_low"], a["ci_high"]) == stats.rate_interval(k, n)  # one trial per item: a plain rate
    assert a["ci_method"] == stats.rate_interval_method(k, n)
    ml = metrics_long(res, "p")
    assert (ml[(ml.metric == "accuracy")]["method"] != "item bootstrap (percentile)").all()
