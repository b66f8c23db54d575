"""Engine and command-line trust defects a user audit met (notes2/audit.md 1, 2, 7, 8, 17): a run with judges
whose model errors, a rerun of a failing run, a bad reports reference corpus, a stress item with a missing image,
and SIGTERM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from medvlm_audit import api
from medvlm_audit.health import failing_models
from medvlm_audit.testing.fake_openai import ThreadedFakeServer, yes_no_answer

SRC = Path(__file__).resolve().parents[1] / "src"
REFERENCE = [{"name": "cue-admitter", "backend": "faithfulness-reference", "behaviour": "cue-admitter"}]
JUDGE = [{"name": "reference-judge", "backend": "faithfulness-reference", "behaviour": "reference-judge"}]


def _empty_when(flag: dict) -> object:
    """Answers "" (an empty completion) while ``flag["empty"]``, else Yes/No by the prompt."""
    def answer(body: dict) -> str:
        return "" if flag["empty"] else yes_no_answer(body)[0]
    return answer


def _openai(name: str, url: str) -> dict:
    return {"name": name, "backend": "openai", "model": "fake-vlm", "base_urls": [url], "max_retries": 0}


def test_faithfulness_run_with_judges_and_an_erroring_model_reports_errors(tmp_path: Path) -> None:
    """Defect 1: two stages and a model whose answers error crashed in api._merge (error kinds are dicts)."""
    flag = {"empty": True}
    with ThreadedFakeServer(answer_fn=_empty_when(flag)) as srv:
        cfg = {"suite": "faithfulness", "run_dir": str(tmp_path / "run"), "probe_sets": ["phantom"],
               "models": [*REFERENCE, _openai("empty", srv.base_url)], "judges": JUDGE, "phantom_items": 4,
               "conditions": ["baseline", "tb_rad:misleading"], "judge_axes": ["ca"]}
        res = api.run(cfg, progress=False)
    per = res.summary.as_dict()["per_model"]
    assert per["empty"]["errors"] == per["empty"]["asked"] > 0
    assert per["empty"]["error_kinds"]["empty"]["n"] == per["empty"]["errors"]
    assert set(failing_models(res.summary.as_dict())) == {"empty"}
    assert res.results_parquet.is_file()


def _grounding(run_dir: Path, url: str, tmp_path: Path) -> dict:
    from conftest import make_tiny_probeset

    make_tiny_probeset(tmp_path / "data", n=6)
    return {"suite": "grounding", "run_dir": str(run_dir), "probe_sets": [str(tmp_path / "data" / "probeset")],
            "models": [_openai("flaky", url)], "conditions": ["original"], "resolutions": [224]}


def test_rerun_of_a_failing_run_still_fails_and_retry_errors_that_fixes_it_passes(tmp_path: Path) -> None:
    """Defect 2: the rerun asked nothing, so it was judged on nothing and exited 0 while the store held only
    errors. It is judged on the store's totals for the run's plan."""
    flag = {"empty": True}
    with ThreadedFakeServer(answer_fn=_empty_when(flag)) as srv:
        cfg = _grounding(tmp_path / "run", srv.base_url, tmp_path)
        first = api.run(cfg, progress=False).summary.as_dict()
        assert "flaky" in failing_models(first)
        again = api.run(cfg, progress=False).summary.as_dict()
        assert again["per_model"]["flaky"]["asked"] == 0  # nothing asked now ...
        why = failing_models(again)  # ... and still failing, naming the model
        assert set(why) == {"flaky"} and "all 6 inputs" in why["flaky"]
        flag["empty"] = False
        fixed = api.run(cfg, progress=False, retry_errors=True).summary.as_dict()
    assert fixed["per_model"]["flaky"]["asked"] == 6
    assert failing_models(fixed) == {}


def test_cli_rerun_exits_1_and_names_the_model(tmp_path: Path) -> None:
    """Defect 2 through the command line (docs/gate.md's CI recipe relies on the exit status)."""
    import yaml

    flag = {"empty": True}
    with ThreadedFakeServer(answer_fn=_empty_when(flag)) as srv:
        cfg = tmp_path / "g.yaml"
        cfg.write_text(yaml.safe_dump(_grounding(tmp_path / "run", srv.base_url, tmp_path)))
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        cmd = [sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress"]
        outs = [subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120) for _ in range(2)]
    for p in outs:
        assert p.returncode == 1, p.stderr[-2000:]
        assert "model 'flaky' failed" in p.stdout + p.stderr
