"""The faithfulness judge stage as a real second stage: it resumes after a kill without re-asking stage 1, and
it runs against the fault-injecting OpenAI-compatible server and against a tiny transformers model."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from medvlm_audit import api
from medvlm_audit.suites.faithfulness.judge import STATUSES

SRC = Path(__file__).resolve().parents[1] / "src"
SUBJECTS = [{"name": "cue-admitter", "backend": "faithfulness-reference", "behaviour": "cue-admitter"}]


def _config(run_dir: Path, judges: list[dict], **over) -> dict:
    cfg = {"suite": "faithfulness", "run_dir": str(run_dir), "probe_sets": ["phantom"], "models": SUBJECTS,
           "judges": judges, "phantom_items": 6, "conditions": ["baseline", "tb_rad:aligned", "tb_rad:misleading"],
           "judge_axes": ["ca", "confidence"]}
    cfg.update(over)
    return cfg


_SLOW_JUDGE = """
import json, sys, time
from medvlm_audit import api
from medvlm_audit.suites import get_suite
get_suite("faithfulness")
from medvlm_audit.suites.faithfulness import reference as R
orig = R.ReferenceJudge.predict
def slow(self, inputs):
    time.sleep(0.3)
    return orig(self, inputs)
R.ReferenceJudge.predict = slow   # same identity, so the rerun's judge reuses what this one stored
R.ReferenceJudge.batch_size = 1
api.run(json.loads(sys.argv[1]), progress=False)
"""


def _judge_answers(db: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return con.execute("SELECT COUNT(DISTINCT r.key) FROM responses r JOIN trials t ON t.key = r.key "
                               "WHERE t.model = 'reference-judge'").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_judge_stage_resumes_after_a_kill_without_reasking_stage_one(tmp_path: Path) -> None:
    judge = [{"name": "reference-judge", "backend": "faithfulness-reference", "behaviour": "reference-judge"}]
    cfg = _config(tmp_path / "run", judge)
    script = tmp_path / "slow.py"
    script.write_text(_SLOW_JUDGE)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen([sys.executable, str(script), json.dumps(cfg)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    db = tmp_path / "run" / "run.sqlite"
    deadline = time.time() + 120
    try:
        while _judge_answers(db) < 3:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "the run ended early"
            assert time.time() < deadline, "the judge stage never started"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    stored = _judge_answers(db)
    res = api.run(cfg, progress=False)
    per = res.summary.per_model
    assert per["cue-admitter"].get("asked", 0) == 0  # stage 1 was complete: nothing asked again
    total = per["reference-judge"]["distinct_inputs"]
    assert 0 < per["reference-judge"]["asked"] == total - stored  # only the judge inputs not stored yet
    df = pd.read_parquet(res.results_parquet)
    assert not {"has_box", "ibox_overlaps", "imported_parsed", "imported_confidence"} & set(df.columns)  # no grounding column
    judged = df[df.stage == "judge"]
    n_modified = int(((df.stage == "answer") & (df.condition != "baseline")).sum())
    assert len(judged) == 2 * n_modified and set(judged["judge_status"]) == {"valid"}


@pytest.mark.slow
def test_judge_stage_against_the_fault_injecting_openai_server(tmp_path: Path) -> None:
    from medvlm_audit.testing.fake_openai import ThreadedFakeServer, judge_answer

    with ThreadedFakeServer(answer_fn=judge_answer, fault_rates={"500": 0.3, "429": 0.1}, seed=3,
                            retry_after_s=0.01) as srv:
        judges = [{"name": "api-judge", "backend": "openai", "model": "fake-judge", "base_urls": srv.base_url,
                   "max_retries": 4}]
        res = api.run(_config(tmp_path / "run", judges), progress=False)
        faults = sum(len(v) for v in srv.stats.faults.values())
    assert faults > 0  # the server did fail some requests; the client retried them
    page = api.report(res.run_dir, B=200)
    df = pd.read_parquet(res.results_parquet)
    j = df[df.stage == "judge"]
    assert len(j) > 0 and j["error_kind"].isna().all()
    prose = j["answer_text"].str.startswith("I would rate")
    assert prose.any() and (~prose).any()
    # garbage is counted as parse, never coerced; the JSON answers quote the CoT verbatim and are valid
    assert (j.loc[prose, "judge_status"] == "parse").all() and (j.loc[~prose, "judge_status"] == "valid").all()
    m = pd.read_csv(page.parent / "metrics.csv")
    for axis in ("ca", "confidence"):
        sub = j[j.axis == axis]
        rate = m[(m.model == "api-judge") & (m.metric == "judge_parse_rate") & (m.subset == f"api-judge/{axis}")]
        assert rate["point"].item() == pytest.approx((sub["judge_status"] == "parse").mean())
        assert m[(m.model == "api-judge") & (m.metric == "judge_transport_rate")
                 & (m.subset == f"api-judge/{axis}")]["point"].item() == 0.0


def test_judge_stage_with_a_tiny_transformers_model(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from medvlm_audit.testing.tiny_models import build_tiny_causal_lm

    path = build_tiny_causal_lm(tmp_path / "tiny_lm")
    judges = [{"name": "tiny-judge", "backend": "hf", "path": str(path), "device": "cpu", "batch_size": 8}]
    cfg = _config(tmp_path / "run", judges, phantom_items=4, conditions=["baseline", "tb_rad:misleading"],
                  judge_axes=["ca"], judge_max_new_tokens=8)
    res = api.run(cfg, progress=False)
    df = pd.read_parquet(res.results_parquet)
    j = df[df.stage == "judge"]
    assert len(j) == 4 and j["error_kind"].isna().all() and j["answer_text"].notna().all()
    assert set(j["judge_status"]) <= set(STATUSES)
    page = api.report(res.run_dir, B=200)
    m = pd.read_csv(page.parent / "metrics.csv")
    rates = m[(m.model == "tiny-judge") & m.metric.str.startswith("judge_") & (m.subset == "tiny-judge/ca")]
    assert len(rates) == len(STATUSES) and rates["point"].sum() == pytest.approx(1.0)
    # a random tiny model writes no valid judge JSON: its outputs are counted as failures, not scored
    assert (j["judge_status"] != "valid").all() and df.loc[df.stage == "answer", "ca"].isna().all()
