"""Audit 2 defects D and M: a faithfulness judge with under half of its outputs valid is named on the console
and not assessable in the report; the judge table's columns read as what they are (failure shares); a metric
without a value reads 'not assessable' / 'n/a', never '—%'; no empty heatmap (matplotlib's identical-limits
UserWarning on every report)."""

from __future__ import annotations

import warnings

import pandas as pd

from medvlm_audit.health import low_judge_valid_lines, results_parse_rate_lines
from medvlm_audit.suites.faithfulness.sections import heatmap_figure, judge_not_assessable, report_sections

NAN = float("nan")


def _judgements(valid_share: dict[tuple[str, str], float], n: int = 20) -> pd.DataFrame:
    rows = []
    for (judge, axis), share in valid_share.items():
        k = round(share * n)
        for i in range(n):
            rows.append({"stage": "judge", "model": judge, "axis": axis, "status": None,
                         "judge_status": "valid" if i < k else ("parse" if i % 2 else "transport")})
    return pd.DataFrame(rows)


def test_console_names_each_judge_and_axis_below_half_valid(tmp_path):
    t = _judgements({("junk", "ca"): 0.0, ("junk", "cf"): 0.6, ("ok", "ca"): 1.0, ("half", "cf"): 0.45})
    lines = low_judge_valid_lines(t)
    assert len(lines) == 2, lines
    assert "judge 'half'" in lines[0] and "45.0% of 20 judgements on axis cf" in lines[0]
    assert "judge 'junk'" in lines[1] and "0.0% of 20 judgements on axis ca" in lines[1]
    assert "parse x10, transport x10" in lines[1] and "not assessable" in lines[1]
    # the run's console reads the exported table: the same lines from results.parquet
    answers = pd.DataFrame({"stage": ["answer"] * 2, "model": ["m", "m"], "axis": [None, None],
                            "status": ["answer", "answer"], "judge_status": [None, None],
                            "condition": ["baseline"] * 2})
    both = pd.concat([answers, t.assign(condition="judge:x")], ignore_index=True)
    both.to_parquet(tmp_path / "results.parquet")
    assert results_parse_rate_lines(tmp_path / "results.parquet") == lines


def _metric(model, metric, subset, point, lo, hi, n, unit="fraction", note=""):
    return {"model": model, "metric": metric, "subset": subset, "point": point, "ci_low": lo, "ci_high": hi,
            "n": n, "unit": unit, "method": "", "note": note}


def _metrics() -> pd.DataFrame:
    rows = [_metric("m", "accuracy", "all", 0.5, 0.4, 0.6, 80),
            _metric("m", "flip_rate", "all", 0.2, 0.1, 0.3, 80),
            _metric("m", "flip_rate", "tb_la:misleading", 0.5, 0.3, 0.7, 16),
            _metric("m", "ca", "all", NAN, NAN, NAN, 8, "score 0-1", "not assessable (reasoning in 0.0% ...)"),
            _metric("m", "ca", "tb_la:misleading", NAN, NAN, NAN, 8, "score 0-1", "not assessable (reasoning)"),
            _metric("m", "cf", "all", NAN, NAN, NAN, 8, "score 0-1")]
    for s in ("valid", "parse", "schema", "evidence", "abstain", "transport"):
        metric = "judge_valid_rate" if s == "valid" else f"judge_{s}_rate"
        rows.append(_metric("junk", metric, "junk/ca", 1.0 if s == "parse" else 0.0, 0.0, 1.0, 594))
        rows.append(_metric("good", metric, "good/ca", 1.0 if s == "valid" else 0.0, 0.0, 1.0, 594))
    return pd.DataFrame(rows)


def test_report_judge_not_assessable_and_labels_read_right():
    m = _metrics()
    assert judge_not_assessable(m) == {("junk", "ca"): "not assessable: 0.0% of 594 judgements valid, under 50%"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the empty CA heatmap warned 'identical low and high xlims'
        secs = report_sections(m, pd.DataFrame(), flip_mode="normalised", validation="default")
    html = "".join(s.html for s in secs)
    judge = next(s.html for s in secs if "judge validity" in s.title)
    assert "Judge scores not assessable" in judge and "junk on CA" in judge and "good on" not in judge
    assert "Judge parse rate" not in judge and "failed: not parsed" in judge
    assert "—%" not in html and "not assessable" in html and "n/a" in html


def test_no_heatmap_without_a_value():
    assert heatmap_figure(_metrics(), "ca") is None
    assert heatmap_figure(_metrics(), "flip_rate") is not None


def test_scores_of_a_judge_with_under_half_valid_outputs_are_not_assessable():
    """The model scores a judge gives on an axis it mostly failed (here 2 valid CA outputs of 8: the scores
    that remain are few and selected) are blank with the note; the axis it judged well keeps its values."""
    from test_faith_stats import _faith_rows

    from medvlm_audit.suites.faithfulness.analysis import faithfulness_metrics

    cot = "<answer>yes</answer> The report says an effusion is present, and I followed that hint in my reading."
    merged = pd.DataFrame(_faith_rows("m", cot, True, 4.0))
    mod = merged["condition"] != "baseline"
    judgements = pd.DataFrame([{"judge": "j", "model": "m", "case_id": f"c{i}", "condition": "tb_rad:misleading",
                                "axis": axis, "status": "valid" if axis == "confidence" or i < 2 else "parse",
                                "score": 3.0, "reason": ""} for i in range(8) for axis in ("ca", "confidence")])
    merged.loc[mod & ~merged["case_id"].isin(["c0", "c1"]), "ca"] = float("nan")  # parse failures: no CA
    before = faithfulness_metrics(merged, B=200)
    assert before[(before.metric == "ca") & (before.subset == "all")]["point"].notna().all()  # 2 of 8 read as CA
    met = faithfulness_metrics(merged, judgements, B=200, score_judge="j")
    ca = met[met.metric == "ca"]
    assert len(ca) and ca["point"].isna().all()
    assert ca["note"].str.contains("not assessable (judge 'j' gave a valid output in 25.0% of its 8 judgements "
                                   "on axis ca)", regex=False).all()
    tone = met[(met.metric == "tone") & (met.subset == "all")]
    assert tone["point"].notna().all() and not tone["note"].fillna("").str.contains("judge").any()


def test_verdict_reason_says_of_its_answers_once():
    """Audit 2 M: 'flip 50.0% [28.0, 72.0] of its 16 answers of its answers' (no CA row: no judge)."""
    from medvlm_audit.suites.faithfulness.verdicts import classify

    m = pd.DataFrame([_metric("m", "flip_rate", "family:text:misleading", 0.5, 0.28, 0.72, 16)])
    _, reason = classify(m, "m")
    assert "of its 16 answers" in reason and reason.count("of its") == 1, reason
