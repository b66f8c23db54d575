"""Issue 21 (defect 6): a model writing "Yes", a refusal or gibberish for every image is not assessable in the
reports suite (assess.py): no CAD category, WAE, diversity or verdict for it, the reason in the verdict,
summary.json and the metric notes, and ``run`` warns as for the other suites' parse rate below 50%."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
from test_reports_robust import WORDS, reference_file

from medvlm_audit.health import low_parse_rate_lines
from medvlm_audit.suites.reports.assess import assessability, report_status

DEGENERATE = {"alwaysyes": "Yes", "refuse": "As an AI, I cannot provide a medical diagnosis.",
              "garbage": "blorp ##@@ 42 quux", "empty": ""}


def _tidy(n: int = 30) -> pd.DataFrame:
    rnd = random.Random(1)
    rows = []
    for model in ["good", *DEGENERATE]:
        for strategy in ("greedy", "t0.7"):
            for i in range(n):
                text = (" ".join(rnd.choice(WORDS) for _ in range(8)) if model == "good" else DEGENERATE[model])
                rows.append({"run_id": "x", "model": model, "probe_set": "p", "case_id": f"c{i}",
                             "strategy": strategy, "sample_index": 0, "group": "F" if i % 2 else "M",
                             "report": text, "status": report_status(text)})
    # half of "half"'s reports are refusals: still assessable (50% is the floor)
    for i in range(n):
        text = DEGENERATE["refuse"] if i % 2 else " ".join(rnd.choice(WORDS) for _ in range(8))
        rows.append({"run_id": "x", "model": "half", "probe_set": "p", "case_id": f"c{i}", "strategy": "greedy",
                     "sample_index": 0, "group": "F" if i % 2 else "M", "report": text,
                     "status": report_status(text)})
    return pd.DataFrame(rows)


def test_degenerate_models_are_not_assessable(tmp_path: Path) -> None:
    from medvlm_audit.report import write_report
    from medvlm_audit.suites.reports.analysis import analyse_reports
    from medvlm_audit.suites.reports.suite import ReportsOptions

    ref = reference_file(tmp_path / "ref.jsonl")
    res = analyse_reports(_tidy(), ReportsOptions(reference=str(ref), B=20, n_perm=20, semantic="off",
                                                  bertscore="off"))
    m = res.metrics
    na = res.summary["not_assessable"]
    assert set(na) == {f"{d} / {s}" for d in DEGENERATE for s in ("greedy", "t0.7")}
    assert "too short 30" in na["alwaysyes / greedy"] and "refusals 30" in na["refuse / t0.7"]
    assert "no reference word 30" in na["garbage / greedy"] and "empty 30" in na["empty / greedy"]
    for model in DEGENERATE:
        v = res.verdicts[model]
        assert v.count("not assessable") == 2 and "WAE" not in v and "erased" not in v, v
        rows = m[(m.model == model) & (m.metric != "assessable_share")]
        assert rows["point"].isna().all() and rows["note"].str.startswith("not assessable").all()
        assert {"wae_pred", "erasure_count_headline", "template_diversity"} <= set(rows.metric)
        share = m[(m.model == model) & (m.metric == "assessable_share")]
        assert (share["point"] == 0).all() and (share["ci_high"] > 0).all()  # Wilson: never [0, 0]
    # no CAD category is given for a degenerate model (cad_greedy.csv labelled a never-written word `stable`)
    assert set(res.tables["cad"]["model"]) == {"good", "half"}
    assert "not assessable" not in res.verdicts["good"]
    vt = res.tables["reports_verdicts"]
    good_v = vt[vt.model == "good"]
    assert len(good_v) == 2 and (good_v["verdict"] != "not assessable").all()
    assert good_v["reason"].str.contains("WAE_pred").all()
    bad_v = vt[vt.model.isin(DEGENERATE)]
    assert (bad_v["verdict"] == "not assessable").all()
    assert bad_v["reason"].str.startswith("not assessable").all() and not bad_v["reason"].str.contains("no defined").any()
    good = m[(m.model == "good") & (m.metric == "assessable_share")]
    assert (good["point"] == 1).all()
    half = m[(m.model == "half") & (m.metric == "assessable_share")]
    assert half["point"].item() == 0.5 and half["note"].item() == "" and "half / greedy" not in na
    page = write_report(res, tmp_path / "report", suite="reports", title="degenerate")
    html = page.read_text()
    assert "Not assessable" in html and "refusals 30" in html


def test_run_warns_for_degenerate_reports() -> None:
    lines = low_parse_rate_lines(_tidy())
    assert len(lines) == 3  # alwaysyes, empty, refuse (gibberish needs the reference: the report flags it)
    assert all("not assessable there" in x and "under greedy" in x for x in lines)
    assert not any("'good'" in x or "'half'" in x for x in lines)


def test_report_status_rules() -> None:
    assert [report_status(t) for t in ("Yes.", "No", "Normal.", "I'm sorry, I can't help with that.",
                                       "I\u2019m unable to interpret this image.", "Heart size normal.",
                                       "Pneumothorax cannot be excluded.", "Unable to assess the lung bases.")] == [
        "too_short", "too_short", "too_short", "refused", "refused", "answer", "answer", "answer"]
    assert assessability(["answer"] * 5 + ["empty"] * 5)[2] == ""
    assert assessability(["answer"] * 4 + ["empty"] * 5 + ["refused"])[2] == (
        "not assessable (4 of 10 reports assessable, 40.0% < 50%: empty 5, refusals 1)")


def test_a_report_written_again_leaves_no_stale_cad_labels(tmp_path: Path) -> None:
    # the pilot's report folder kept cad_greedy.csv (a never-written word `stable`) from an earlier report
    from medvlm_audit.report import write_report
    from medvlm_audit.suites.reports.analysis import analyse_reports
    from medvlm_audit.suites.reports.suite import ReportsOptions

    ref = reference_file(tmp_path / "ref.jsonl")
    opts = ReportsOptions(reference=str(ref), B=20, n_perm=20, semantic="off", bertscore="off")
    tidy = _tidy()
    write_report(analyse_reports(tidy[tidy.model == "good"], opts), tmp_path / "report", suite="reports", title="a")
    assert len(pd.read_csv(tmp_path / "report" / "cad_greedy.csv"))
    res = analyse_reports(tidy[tidy.model == "alwaysyes"], opts)
    assert "not assessable" in res.verdicts["alwaysyes"]
    write_report(res, tmp_path / "report", suite="reports", title="b")
    for name in ("cad", "cad_greedy", "cad_t0_7", "wae", "diversity"):
        # no rows, but the header (audit2 J: a 1-byte file made pd.read_csv raise EmptyDataError)
        t = pd.read_csv(tmp_path / "report" / f"{name}.csv")
        assert len(t) == 0 and {"model", "strategy"} <= set(t.columns), name
    by = pd.read_csv(tmp_path / "report" / "by_strategy.csv")
    assert by["strategy"].tolist() == ["greedy", "t0.7"] and by["erasure_count_headline"].isna().all()


def test_a_run_with_nothing_to_audit_gives_each_model_its_own_reason(tmp_path: Path) -> None:
    # audit2 J: every verdict read the generic "no model x strategy has reports of both groups (F and M)"
    import json

    from medvlm_audit.report import write_report
    from medvlm_audit.suites.reports.analysis import analyse_reports
    from medvlm_audit.suites.reports.suite import ReportsOptions

    ref = reference_file(tmp_path / "ref.jsonl")
    tidy = _tidy()
    res = analyse_reports(tidy[tidy.model.isin(DEGENERATE)], ReportsOptions(
        reference=str(ref), B=20, n_perm=20, semantic="off", bertscore="off"))
    page = write_report(res, tmp_path / "report", suite="reports", title="nothing")
    html = page.read_text()
    verdicts = html[html.index('id="verdicts"'):html.index("Nothing to audit")]
    for words in ("too short 30", "refusals 30", "no reference word 30", "empty 30"):
        assert words in verdicts, words
    assert "no model x strategy has reports of both groups" not in html
    vt = pd.read_csv(tmp_path / "report" / "reports_verdicts.csv")
    assert len(vt) == 2 * len(DEGENERATE) and (vt["verdict"] == "not assessable").all()
    assert vt.set_index(["model", "strategy"]).loc[("refuse", "t0.7"), "reason"].endswith("refusals 30)")
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert set(summary["verdict_badges"].values()) == {"not assessable"}


def test_empty_tables_have_the_columns_of_a_real_audit(tmp_path: Path) -> None:
    # the headers written when nothing is audited are the columns a real audit writes
    from medvlm_audit.suites.reports.analysis import (
        CAD_COLUMNS,
        DIVERSITY_COLUMNS,
        WAE_COLUMNS,
        analyse_reports,
    )
    from medvlm_audit.suites.reports.suite import ReportsOptions

    ref = reference_file(tmp_path / "ref.jsonl")
    tidy = _tidy()
    res = analyse_reports(tidy[tidy.model == "good"], ReportsOptions(
        reference=str(ref), B=20, n_perm=20, semantic="off", bertscore="off"))
    assert tuple(res.tables["cad"].columns) == CAD_COLUMNS == tuple(res.tables["cad_greedy"].columns)
    assert tuple(res.tables["wae"].columns) == WAE_COLUMNS
    assert tuple(res.tables["diversity"].columns) == DIVERSITY_COLUMNS


def test_run_time_status_flags_gibberish_against_the_recorded_reference(tmp_path: Path) -> None:
    # the tidy table reads the run's recorded `reference` so `run` warns for gibberish too (the pilot's `garbage`)
    import os

    from medvlm_audit.suites.reports.assess import reference_vocabulary, with_vocabulary

    ref = reference_file(tmp_path / "ref.jsonl")
    vocab = reference_vocabulary(str(ref))
    assert vocab is not None and "heart" in vocab and "blorp" not in vocab
    t = _tidy()
    t["status"] = with_vocabulary(t["status"], t["report"], vocab)
    lines = low_parse_rate_lines(t)
    assert len(lines) == 4 and any("'garbage'" in x for x in lines)
    assert reference_vocabulary(str(tmp_path / "missing.jsonl")) is None and reference_vocabulary(None) is None
    ref.write_text('{"id": "a", "text": "blorp quux", "group": "F"}\n{"id": "b", "text": "zing", "group": "M"}\n')
    os.utime(ref, ns=(1, 10**18))  # a new modification time: read again, not the cached words
    assert reference_vocabulary(str(ref)) == {"blorp", "quux", "zing"}
