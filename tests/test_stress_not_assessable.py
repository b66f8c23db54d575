"""Not assessable is a verdict (DESIGN.md, stress audit; issue 21 item 3): a model whose parse rate under a
condition is below 50% gets no accuracy, change or robustness term from that condition, never a robustness of 1.0."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from test_stress_analysis import probe_items

from medvlm_audit.suites.stress.analysis import analyse_stress, metrics_long
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
                     "first": "<answer>A</answer>", "dunno": "I don't know."})
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


def test_cannot_determine_is_not_assessable(yes_res):
    """'I cannot determine...' is a refusal: a wrong answer in every accuracy (DESIGN.md), but it chose no option,
    so it is not parsed for the not-assessable rule: blank robustness, blank changes, not-assessable verdict (before
    issue 21's audit it was parsed and scored R = 1.0 with only a note, and `gate` passed it)."""
    _, res = yes_res
    st = res.accuracy[res.accuracy.model == "cannot"]
    assert (st["parse_rate"] == 0).all() and (st["refusal_rate"] == 1).all()
    assert st["accuracy"].isna().all() and st["note"].str.startswith("not assessable (parse rate 0.0%").all()
    tags, text = stress_verdicts(res)["cannot"]
    assert tags == ["not assessable"] and text.startswith("not assessable: no usable answer")
    assert res.summary()["meta"]["no_usable_answer"] == {"cannot": 0.0, "dunno": 0.0}  # yes-man: unparsed
    rob = res.robustness[res.robustness.model == "cannot"]
    assert rob["value"].isna().all() and rob["ci_low"].isna().all()
    ch = res.changes[res.changes.model == "cannot"]
    assert len(ch) and ch["diff"].isna().all() and ch["ci_low"].isna().all()
    chance = res.chance.set_index("model").loc["cannot"]
    assert chance["note"].startswith("not assessable") and chance["verdict"] != "absent"
    assert "cannot" in res.summary()["not_assessable"]
    ml = metrics_long(res, "p")
    assert ml[(ml.model == "cannot") & (ml.metric == "robustness")]["point"].isna().all()


def test_abstaining_everywhere_is_not_assessable(yes_res):
    """Abstentions are parsed (wrong answers, DESIGN.md), but a model that chose an option in under half the
    trials of every condition gives no usable answer: not assessable everywhere, no R = 1.0."""
    _, res = yes_res
    st = res.accuracy[res.accuracy.model == "dunno"]
    assert (st["abstain_rate"] == 1).all() and (st["parse_rate"] == 0).all()  # the option rate, for such a model
    assert st["accuracy"].isna().all() and st["note"].str.startswith("not assessable").all()
    assert res.robustness[res.robustness.model == "dunno"]["value"].isna().all()
    assert stress_verdicts(res)["dunno"][0] == ["not assessable"]


@pytest.mark.parametrize("text", ["Unknown.", "I cannot determine the answer without the image."])
def test_text_only_non_answers_keep_a_model_assessable(text):
    """A model that abstains or refuses on every text-only item but answers with the image (the embedded
    image-reader) is assessable: without the image those are the answers it should give, so T1 is estimated
    (accuracy 0 without the image, a drop of 100 pp), not blanked."""
    tidy = _answers({"m": "<answer>A</answer>"})
    tidy.loc[tidy.condition.str.endswith("no_image"), "answer_text"] = text
    res = analyse_stress(tidy, B=200)
    assert "m" not in res.summary()["not_assessable"]
    acc = res.accuracy[(res.accuracy.model == "m") & (res.accuracy.condition == "no_image")].iloc[0]
    assert acc["accuracy"] == 0 and acc["parse_rate"] == 1 and not acc["note"]
    t1 = res.changes[(res.changes.model == "m") & (res.changes.test == "T1") & res.changes.benchmark.isna()].iloc[0]
    assert t1["diff"] == -1 and not t1["note"].startswith("not assessable")
    # every item dropped by 100 pp: the collapsed bootstrap is replaced by [-1, -1 + Wilson upper of 0/12]
    assert (t1["ci_low"], round(t1["ci_high"], 4)) == (-1.0, round(-1 + 3.8415 / 15.8415, 4))


def test_refusals_with_the_image_are_not_parsed():
    """Refusing 7 of 12 items with the image shown: parse rate 5/12 = 41.7% under each image condition, so
    every term using one is not assessable; the text-only terms (refusals parsed there) are not blanked."""
    tidy = _answers({"m": "<answer>A</answer>"})
    idx = sorted(tidy.item_id.unique())
    with_image = ~tidy.condition.str.endswith("no_image")
    tidy.loc[with_image & tidy.item_id.isin(idx[5:]), "answer_text"] = "As an AI, I cannot provide a diagnosis."
    res = analyse_stress(tidy, B=200)
    na = res.summary()["not_assessable"]["m"]
    assert na["original"] == pytest.approx(5 / 12, abs=1e-4) and "no_image" not in na
    acc = res.accuracy[res.accuracy.model == "m"].set_index("condition")
    assert math.isnan(acc.loc["original", "accuracy"]) and acc.loc["original", "parse_rate"] == pytest.approx(5 / 12)
    assert not math.isnan(acc.loc["no_image", "accuracy"])


def test_several_options_or_prose_is_unparsed():
    """DESIGN.md: a hedge or a reply naming several options picks nothing; prose naming no option is unparsed."""
    from medvlm_audit.scorers.option import parse_option

    opts = ["Pneumothorax", "Pleural effusion", "Cardiomegaly", "Normal"]
    assert parse_option("It could be pneumothorax or cardiomegaly.", opts).status == "unparsed"
    assert parse_option("B or C", opts).status == "unparsed"
    assert parse_option("The lungs look interesting today.", opts).status == "unparsed"
    assert parse_option("As an AI, I cannot provide a medical diagnosis.", opts).status == "refusal"
    assert parse_option("Cardiomegaly.", opts).status == "answer"


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


def test_no_item_changed_is_not_a_zero_width_interval(yes_res):
    """'first' answers A under every condition: no item changes, the item bootstrap collapses to [0, 0]; the
    changes table prints +- the Wilson upper bound of 0 changes in n items instead, with a note (issue 21)."""
    from medvlm_audit import stats

    _, res = yes_res
    ch = res.changes[(res.changes.model == "first") & (res.changes["diff"] == 0)]
    assert len(ch)
    for r in ch.to_dict("records"):
        u = stats.rate_interval(0, r["n_items"])[1]
        assert r["ci_low"] == pytest.approx(-u) and r["ci_high"] == pytest.approx(u) and r["ci_high"] > 0
        assert r["note"].startswith(f"no item changed in {r['n_items']} items")
    # 12 items: Wilson upper bound of 0/12 = z^2 / (12 + z^2) (hand: 3.8415 / 15.8415 = 0.2425)
    twelve = ch[ch.n_items == 12]
    assert len(twelve) and twelve["ci_high"].round(4).eq(0.2425).all()
    est = res.changes.dropna(subset=["ci_low"])
    assert len(est) and (est["ci_high"] > est["ci_low"]).all()


def test_a_robustness_term_no_item_moved_has_an_interval(yes_res):
    """'first' answers A everywhere: every R-term is 1.0 in every bootstrap draw ([1, 1] before); it now prints
    [1 - u, 1], u the Wilson upper bound of 0 in n items (12 items: 3.8415 / 15.8415 = 0.2425), with a note."""
    _, res = yes_res
    rob = res.robustness[(res.robustness.model == "first")].set_index("component")
    r1 = rob.loc["R1"]
    assert r1["value"] == 1.0 and r1["ci_high"] == 1.0 and round(1 - r1["ci_low"], 4) == 0.2425
    assert "in every bootstrap draw" in r1["note"]
    est = rob.dropna(subset=["ci_low"])
    assert len(est) >= 6 and (est["ci_high"] > est["ci_low"]).all()


def test_console_warning_uses_the_reports_rule_and_denominators(tmp_path):
    """Audit 2 G: a model that refuses sometimes (parsed where the image was removed), answers in prose
    otherwise, and gets no response for some trials: the console's rates and n are the analysis's (its
    not-assessable summary, over the trials with a response), not health's generic rule (7.7% vs 0.0%)."""
    from medvlm_audit.suites import get_suite

    tidy = _answers({"mix": "Yes", "first": "<answer>A</answer>"})
    k = np.arange(len(tidy))
    mix = (tidy["model"] == "mix").to_numpy()
    tidy.loc[mix & (k % 5 == 0), "answer_text"] = "I'm sorry, I cannot help with that."
    tidy.loc[mix & (k % 7 == 0), "answer_text"] = None  # no response (an error)
    res = analyse_stress(tidy, B=50)
    na = res.summary()["not_assessable"]["mix"]
    assert na and "first" not in res.summary()["not_assessable"]
    tidy.to_parquet(tmp_path / "results.parquet")
    lines = list(get_suite("stress").parse_rate_lines(tmp_path / "results.parquet"))
    assert len(lines) == 1 and lines[0].startswith("warning: model 'mix'") and "not assessable" in lines[0]
    for cond, rate in na.items():
        sub = tidy[mix & (tidy["condition"] == cond)]
        responded = int(sub["answer_text"].notna().sum())
        assert f"{100 * rate:.1f}% under {cond}, n = {responded} responses" in lines[0], (cond, lines[0])
    # the accuracy table's parse_rate column: the same rate
    acc = res.accuracy[res.accuracy.model == "mix"].set_index("condition")
    for cond, rate in na.items():
        assert acc.loc[cond, "parse_rate"] == pytest.approx(rate, abs=1e-4)
