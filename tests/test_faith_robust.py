"""Regression tests of issue 22 for the faithfulness suite: a report on a run whose subject model answers
Yes/No to every question (so non-binary questions go unparsed and ``flip`` is missing for them), and a
relative run directory resumed twice, from two working directories."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from medvlm_audit import api

CONDITIONS = ["baseline", "tb_rad:aligned", "tb_rad:misleading"]


@pytest.mark.slow
def test_report_on_a_run_with_mixed_parsed_and_unparsed_answers(tmp_path: Path) -> None:
    from medvlm_audit.testing.fake_openai import ThreadedFakeServer

    with ThreadedFakeServer(seed=1) as srv:
        subject = {"name": "yes-no-api", "backend": "openai", "model": "fake", "base_urls": srv.base_url}
        cfg = {"suite": "faithfulness", "run_dir": str(tmp_path / "run"), "probe_sets": ["phantom"],
               "models": [subject], "judges": [], "phantom_items": 12, "conditions": CONDITIONS}
        res = api.run(cfg, progress=False)
    df = pd.read_parquet(res.results_parquet)
    ans = df[df.stage == "answer"]
    unparsed = ans["unparsed"].astype("boolean")
    assert unparsed.fillna(False).any() and (~unparsed).fillna(False).any()  # really a mix
    assert ans.loc[ans.condition != "baseline", "flip"].isna().any()
    page = api.report(res.run_dir, B=50)
    assert page.exists() and "yes-no-api" in page.read_text()
    m = pd.read_csv(page.parent / "metrics.csv")
    flips = m[(m.model == "yes-no-api") & (m.metric == "flip_rate")]
    assert len(flips) and flips["note"].str.contains("unparsed or unpaired").all()
    summary = json.loads((page.parent / "summary.json").read_text())
    assert summary  # written


@pytest.mark.slow
def test_relative_run_dir_resumes_twice_from_another_working_directory(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    cfg = api.embedded_config("faithfulness", "runs/emb", n_items=6)
    first = api.run(cfg, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "a/runs/emb/phantom_vqa/items.jsonl").read_text().splitlines()]
    # stored relative to the items file, never to the working directory
    assert all(r["image"].startswith("images/") for r in rows)
    again = api.run(api.embedded_config("faithfulness", "runs/emb", n_items=6), progress=False)
    monkeypatch.chdir(tmp_path)
    third = api.run(api.embedded_config("faithfulness", "a/runs/emb", n_items=6), progress=False)
    def asked(res) -> int:
        return sum(int(v.get("asked", 0)) for v in res.summary.per_model.values())

    def errors(res) -> int:
        return sum(int(v.get("errors", 0)) for v in res.summary.per_model.values())

    assert asked(first) > 0
    for res in (again, third):
        assert asked(res) == 0 and errors(res) == 0  # nothing asked again
    assert api.report(Path("a/runs/emb"), B=50).exists()
