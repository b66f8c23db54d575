"""The stress suite through the real runner and run store: plan from a config, execute, tidy table, report."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as sps

from medvlm_audit import stats
from medvlm_audit.config import validate_config
from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Decoding
from medvlm_audit.runner import execute
from medvlm_audit.store import STORE_FILE, RunStore
from medvlm_audit.suites.stress.analysis import analyse_stress
from medvlm_audit.suites.stress.conditions import DEFAULT_CONDITIONS
from medvlm_audit.suites.stress.embedded import build_phantom_mcq
from medvlm_audit.suites.stress.items import ItemError
from medvlm_audit.suites.stress.plan import plan_stress
from medvlm_audit.suites.stress.reference import reference_mcq_panel
from medvlm_audit.suites.stress.suite import report_stress, tidy_stress

#: the fast lane (`pytest -m "not slow"`) leaves this module out: its fixtures build runs or start processes
pytestmark = pytest.mark.slow


def config(tmp_path: Path, items: str, **kw):
    return validate_config({"suite": "stress", "run_dir": str(tmp_path / "run"), "probe_sets": [items],
                            "models": [{"name": "x", "backend": "reference"}], **kw})


def test_run_store_round_trip_and_report(tmp_path: Path) -> None:
    build_phantom_mcq(tmp_path / "set", n_items=42, size=128, n_substitutions=14, p_gold_first=0.7)
    cfg = config(tmp_path, str(tmp_path / "set"))
    plan = plan_stress(cfg)
    assert {t.condition for t in plan.trials} == set(DEFAULT_CONDITIONS)
    store = RunStore(tmp_path / "run" / STORE_FILE)
    try:
        asyncio.run(execute(store, plan, reference_mcq_panel(), Decoding(max_new_tokens=64), progress=False))
        tidy = tidy_stress(store)
        scored_again = tidy.copy()
        assert len(tidy) == 3 * len(plan.trials)
        assert set(tidy["status"]) <= {"answer", "refusal"}
        page = report_stress(store, tmp_path / "report", B=300)
    finally:
        store.close()
    text = page.read_text()
    assert "Robustness score" in text and text.count("<svg") == 3  # three inline figures
    # the page is made of report Sections (usable as extra_sections of any report), each linked from the nav
    from medvlm_audit.report import Section
    from medvlm_audit.suites.stress.sections import stress_sections

    res = analyse_stress(scored_again, B=50)
    secs = stress_sections(res)
    assert all(isinstance(x, Section) for x in secs)
    for sec in secs:  # the verdicts open the page; every other section is linked from the nav
        assert f'<section id="{sec.anchor}"><h2>' in text
        assert sec.anchor == "verdicts" or f'href="#{sec.anchor}"' in text
    # verdicts first with a colour legend, then how to read the report (R1-R5 explained); conditions in words
    assert text.index('id="verdicts"') < text.index('id="how-to-read"') < text.index('id="stress-tests-t1-t6"')
    assert 'class="legend"' in text and "<b>R3</b>: position robustness" in text
    assert "options reordered (text only)" in text and "original (image + text)" in text
    assert {"robustness-score", "exclusions", "distractor-replacement-t4"} <= {x.anchor for x in secs}
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["robustness"]["text-prior"]["R3"] == 1.0
    assert summary["robustness"]["first-option"]["R3"] < 0.8
    assert (tmp_path / "report" / "stress_changes.parquet").exists()


def test_config_conditions(tmp_path: Path) -> None:
    build_phantom_mcq(tmp_path / "set", n_items=10, size=64, n_substitutions=3)
    plan = plan_stress(config(tmp_path, str(tmp_path / "set" / "items.jsonl"), conditions=["original", "cot"],
                              repeats=2))
    assert {t.condition for t in plan.trials} == {"original", "cot"} and len(plan.trials) == 40
    with pytest.raises(ConfigError, match="unknown stress condition"):
        plan_stress(config(tmp_path, str(tmp_path / "set"), conditions=["original", "swap"]))


@pytest.fixture(scope="module")
def cli_default(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`medvlm-audit run --suite stress` with nothing else: the embedded default, run once for these tests."""
    from typer.testing import CliRunner

    from medvlm_audit.cli import app

    run_dir = tmp_path_factory.mktemp("stress-default") / "r"
    res = CliRunner().invoke(app, ["run", "--suite", "stress", "--run-dir", str(run_dir), "--no-progress"])
    assert res.exit_code == 0, res.output
    return run_dir


def test_cli_run_suite_stress_embedded_default(cli_default: Path) -> None:
    """The default runs the phantom MCQ set with the reference panel and reports it."""
    import sqlite3

    df = pd.read_parquet(cli_default / "results.parquet")
    assert {"first-option", "text-prior", "image-reader"} == set(df["model"])
    assert df["item_id"].nunique() == 120
    assert not {"has_box", "ibox_overlaps", "imported_parsed", "imported_confidence"} & set(df.columns)  # no grounding column
    assert (cli_default / "report" / "report.html").exists()
    # chain-of-thought trials were asked with the longer decoding budget recorded in their request
    db = sqlite3.connect(cli_default / "run.sqlite")
    budgets = {json.loads(x)["decoding"]["max_new_tokens"] for (x,) in db.execute("SELECT input FROM requests")}
    assert budgets == {64, 1024}


def test_default_position_biased_model_loses_accuracy_under_reordering(cli_default: Path) -> None:
    """Done when (1): the always-A answerer drops under T3, significant after BH over its family."""
    ch = pd.read_csv(cli_default / "report" / "stress_changes.csv").set_index(["model", "comparison"])
    for comp in ("options reordered, text-only", "options reordered, image+text"):
        r = ch.loc[("first-option", comp)]
        assert r["n_items"] >= 60 and r["acc_base"] > 0.55
        assert r["diff"] < -0.3 and r["ci_high"] < -0.2 and r["q"] < 0.01
        # models that never look at the order are unmoved
        assert ch.loc[("text-prior", comp), "diff"] == 0 and ch.loc[("image-reader", comp), "diff"] == 0
    rob = pd.read_csv(cli_default / "report" / "stress_robustness.csv").set_index(["model", "component"])
    assert rob.loc[("first-option", "R3"), "ci_high"] < 0.6 and rob.loc[("text-prior", "R3"), "value"] == 1.0


def test_default_image_reader_tracks_visual_substitution(cli_default: Path) -> None:
    """Done when (2): with the substitute image the reader answers the option that image supports."""
    acc = pd.read_csv(cli_default / "report" / "stress_accuracy.csv").set_index(["model", "condition"])
    sub = acc.loc[("image-reader", "substitution")]
    assert sub["n_items"] == 40 and sub["accuracy"] > 0.75 and sub["ci_low"] > 0.6
    # far above chance (exact binomial on the 40 substitution items) ...
    assert stats.binomial_test(round(sub["accuracy"] * 40), 40, sub["chance"], alternative="greater") < 1e-9
    # ... and above the blind models, which keep answering the original diagnosis
    for blind in ("text-prior", "first-option"):
        assert acc.loc[(blind, "substitution"), "ci_high"] < sub["ci_low"]
    ch = pd.read_csv(cli_default / "report" / "stress_changes.csv").set_index(["model", "comparison"])
    assert ch.loc[("image-reader", "visual substitution"), "q"] > 0.05  # its accuracy follows the image
    assert ch.loc[("text-prior", "visual substitution"), "diff"] < -0.5
    assert ch.loc[("text-prior", "visual substitution"), "q"] < 0.01
    rob = pd.read_csv(cli_default / "report" / "stress_robustness.csv").set_index(["model", "component"])
    assert rob.loc[("image-reader", "R5"), "ci_low"] > 0.7 and rob.loc[("text-prior", "R5"), "ci_high"] < 0.5


def test_default_text_prior_model_stays_above_chance_without_the_image(cli_default: Path) -> None:
    """Done when (3): text-only accuracy on the image-required items above 1/k, exact binomial on items."""
    ct = pd.read_csv(cli_default / "report" / "stress_chance.csv").set_index("model")
    r = ct.loc["text-prior"]
    assert r["n_items"] >= 60 and r["chance"] == pytest.approx(0.2) and r["accuracy_modal_items"] > 0.4
    exact = sps.binomtest(int(r["correct_items"]), int(r["n_items"]), 0.2, alternative="greater").pvalue
    assert r["p"] == pytest.approx(exact, rel=1e-9) and r["p"] < 1e-6 and r["q"] < 1e-4
    assert ct.loc["image-reader", "p"] == 1.0  # it declines without the image: refusals, never above chance
    html = (cli_default / "report" / "report.html").read_text()
    assert "Accuracy against chance without the image (T2)" in html and "Exclusions" in html
    # both accuracies, each labelled, in the section's text and its table (issue 12, item 16)
    assert "<b>Modal accuracy (items)</b>, the one tested" in html and "<b>Trial accuracy</b>" in html
    assert "modal accuracy (items; tested)" in html and "trial accuracy" in html
    assert r["accuracy_trials"] == pytest.approx(r["correct_trials"] / r["n_trials"])
    assert (cli_default / "report" / "exclusions.csv").read_text().startswith("item_id,condition,reason")


def test_exclusion_log_is_written_and_summarised(tmp_path: Path) -> None:
    """Planning skips (from the run store) and unscorable answers land in exclusions.csv and the report."""
    from medvlm_audit.models.base import LocalModel, Response
    from medvlm_audit.suites.stress.reference import FirstOptionAnswerer

    class Mumbler(LocalModel):
        name, modality = "mumbler", "text_only"

        def predict(self, inputs):
            return [Response("hmm, hard to say", finish_reason="stop") for _ in inputs]

    items = build_phantom_mcq(tmp_path / "set", n_items=8, size=64, n_substitutions=2, n_options=4)
    (tmp_path / "set" / "images" / "phantom-mcq-0001.png").unlink()  # a missing image
    with pytest.raises(ItemError, match="item 'phantom-mcq-0001': field 'images': image file .* does not exist"):
        plan_stress(config(tmp_path, str(tmp_path / "set")))  # a run fails on it by default ...
    plan = plan_stress(config(tmp_path, str(tmp_path / "set"), on_missing="exclude"))  # ... or excludes it
    n_required = sum(bool(it.needs_image) for it in items.items)
    store = RunStore(tmp_path / "run" / STORE_FILE)
    try:
        asyncio.run(execute(store, plan, [FirstOptionAnswerer(), Mumbler()], Decoding(max_new_tokens=64),
                            progress=False))
        report_stress(store, tmp_path / "report", B=100)
    finally:
        store.close()
    log = pd.read_csv(tmp_path / "report" / "exclusions.csv")
    assert list(log.columns[:3]) == ["item_id", "condition", "reason"]
    plan_rows = log[log["stage"] == "plan"]
    # four options: 3 distractors, so replaced:4 is skipped on every required item (image and text-only)
    r4 = plan_rows[plan_rows["condition"] == "replaced:4"]
    assert len(r4) == n_required and (r4["reason"] == "has 3 distractor(s); replaced:4 needs 4").all()
    missing = plan_rows[plan_rows["item_id"] == "phantom-mcq-0001"]
    assert "original" in set(missing["condition"]) and missing["reason"].str.contains("does not exist").any()
    assert len(plan_rows) == len(plan.skipped)
    # every answer of the mumbler is unparsed: one scoring row per trial it was asked
    scoring = log[log["stage"] == "scoring"]
    assert set(scoring["model"]) == {"mumbler"} and len(scoring) == len(plan.trials)
    assert (scoring["reason"] == "unparsed answer, counted wrong (unreadable)").all()
    page = (tmp_path / "report" / "report.html").read_text()
    section = page[page.index('<section id="exclusions">'):]
    assert f"{len(log)} exclusion(s)" in section
    assert "image file &lt;file&gt; does not exist" in section  # counted by kind, paths left out
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["exclusions"]["by_stage"] == {"plan": len(plan_rows), "scoring": len(scoring)}


@pytest.mark.parametrize("variant", ["in_place", "replace_then_reorder"])
def test_t4_variant_is_a_run_option_and_the_report_says_which_f4_used(tmp_path: Path, variant: str) -> None:
    build_phantom_mcq(tmp_path / "set", n_items=24, size=64, n_substitutions=4)
    conds = ["original", "no_image", "replaced:4", "replaced:4+no_image", "unknown+no_image"]
    cfg = config(tmp_path, str(tmp_path / "set"), conditions=conds, t4_variant=variant)
    plan = plan_stress(cfg)
    assert {t.payload["t4_variant"] for t in plan.trials if t.condition.startswith("replaced:")} == {variant}
    store = RunStore(tmp_path / "run" / STORE_FILE)
    try:
        asyncio.run(execute(store, plan, reference_mcq_panel(), Decoding(max_new_tokens=64), progress=False))
        page = report_stress(store, tmp_path / "report", B=50)
    finally:
        store.close()
    text = page.read_text()
    assert f"T4 variant used by the replaced:k conditions and F4: <b>{variant}</b>" in text
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["t4_variant"] == variant
    assert all(f"T4 variant: {variant}" in summary["robustness_notes"][f"{m}:F4"]
               for m in ("first-option", "text-prior", "image-reader"))
    with pytest.raises(ConfigError, match="t4_variant"):
        plan_stress(config(tmp_path, str(tmp_path / "set"), conditions=conds, t4_variant="shuffle"))


def test_stress_default_t4_variant_is_replace_then_reorder() -> None:
    from medvlm_audit.suites.stress.suite import StressRunOptions

    assert StressRunOptions().t4_variant == "replace_then_reorder"
