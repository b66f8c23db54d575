"""Engine and command-line trust defects a user audit met (notes2/audit.md 1, 2, 7, 8, 17): a run with judges
whose model errors, a rerun of a failing run, a bad reports reference corpus, a stress item with a missing image,
and SIGTERM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.slow  # two CLI subprocesses
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


def _png(path: Path) -> str:
    import numpy as np
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((32, 32), 90, dtype=np.uint8)).save(path)
    return path.name


def test_reports_bad_reference_corpus_fails_before_anything_is_written(tmp_path: Path) -> None:
    """Defect 7: a reference row without ``text`` was found by the report, after the model was asked."""
    from medvlm_audit.errors import ConfigError

    rows = [{"id": f"im{i}", "image": f"rimg/{_png(tmp_path / 'rimg' / f'{i}.png')}", "group": "MF"[i % 2]}
            for i in range(4)]
    (tmp_path / "images.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ref = [{"id": f"im{i}", "text": "The lungs are clear.", "group": "MF"[i % 2]} for i in range(4)]
    del ref[2]["text"]
    (tmp_path / "ref.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ref))
    with ThreadedFakeServer() as srv:
        cfg = {"suite": "reports", "run_dir": str(tmp_path / "run"), "probe_sets": [str(tmp_path / "images.jsonl")],
               "reference": str(tmp_path / "ref.jsonl"), "strategies": ["greedy"],
               "models": [_openai("m", srv.base_url)]}
        with pytest.raises(ConfigError, match=r"option 'reference': .*ref\.jsonl, row 3: missing field 'text'"):
            api.run(cfg, progress=False)
        assert sum(srv.stats.answers.values()) == 0  # the model was not asked
    assert not (tmp_path / "run").exists()  # nothing written


def test_stress_missing_image_fails_before_the_store_naming_item_field_and_path(tmp_path: Path) -> None:
    """Defect 8: a missing image file was excluded and the item asked without it; now one line, nothing written."""
    from medvlm_audit.errors import AuditError

    _png(tmp_path / "img" / "0.png")
    items = [{"item_id": "ok", "question": "Q?", "options": ["a", "b"], "answer": "A", "images": ["img/0.png"]},
             {"item_id": "typo", "question": "Q?", "options": ["a", "b"], "answer": "B", "images": ["img/nope.png"]}]
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    cfg = {"suite": "stress", "run_dir": str(tmp_path / "run"), "probe_sets": [str(tmp_path / "items.jsonl")],
           "models": [{"name": "x", "backend": "stress_reference", "kind": "first_option"}],
           "conditions": ["original", "no_image"]}
    with pytest.raises(AuditError) as e:
        api.run(cfg, progress=False)
    msg = str(e.value)
    assert "\n" not in msg and "items.jsonl: item 'typo': field 'images'" in msg and "img/nope.png does not exist" in msg
    assert not (tmp_path / "run").exists()
    # on_missing: exclude keeps the earlier behaviour (the conditions showing the image are skipped and listed)
    res = api.run({**cfg, "on_missing": "exclude"}, progress=False)
    assert res.summary.skipped == {"original: image file " + str(tmp_path / "img" / "nope.png") + " does not exist": 1}


@pytest.mark.slow  # CLI subprocesses
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_stops_a_run_as_ctrl_c_does(tmp_path: Path) -> None:
    """Defect 17: SIGTERM killed the run silently and left its lock held by a dead PID. Now: the "interrupted"
    line, exit 143, answers kept, the lock released; the same command resumes."""
    import signal
    import sqlite3
    import time

    import yaml

    with ThreadedFakeServer(delay_ms=200) as srv:
        spec = _grounding(tmp_path / "run", srv.base_url, tmp_path)
        spec["models"][0]["max_concurrency"] = 1
        spec["conditions"] = ["original", "no_image"]
        cfg = tmp_path / "g.yaml"
        cfg.write_text(yaml.safe_dump(spec))
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        cmd = [sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress", "--no-report"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 60
        while srv.stats.total < 3 and time.monotonic() < deadline:  # endpoint check + some answers in
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)  # `kill PID`
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, out + err
        assert "Traceback" not in out + err, err
        lines = [ln for ln in (out + err).splitlines() if ln.strip()]
        db = sqlite3.connect(tmp_path / "run" / "run.sqlite")
        kept = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        db.close()
        assert lines == [f"interrupted: {kept} answers kept; run the same command to resume"]
        assert 0 < kept < 12
        assert (tmp_path / "run" / "run.lock").read_text() == ""  # released (no PID left in it)
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_empty_completion_is_asked_again_at_most_twice_without_backoff() -> None:
    """Defect 15: a model answering "" (200, finish_reason stop) was asked 7 times per input with exponential
    backoff (32 s for 38 inputs). Now at most EMPTY_RETRIES more times, at once; then the error kind ``empty``."""
    import asyncio
    import time

    from medvlm_audit.models.base import Decoding, Message, ModelInput
    from medvlm_audit.models.openai_compat import EMPTY_RETRIES, OpenAIChatModel

    inputs = [ModelInput((Message("user", f"Finding {i}?"),), (), Decoding()) for i in range(8)]
    with ThreadedFakeServer(answer_fn=lambda body: "") as srv:
        m = OpenAIChatModel("empty", "fake-vlm", srv.base_url)  # default max_retries 6, backoff 0.5 s doubling

        async def go():
            try:
                return await m.generate(inputs)
            finally:
                await m.aclose()

        t0 = time.perf_counter()
        responses = asyncio.run(go())
        elapsed = time.perf_counter() - t0
        total = srv.stats.total
    assert all(r.error is not None and r.error.kind == "empty" for r in responses)
    assert {r.error.attempts for r in responses} == {1 + EMPTY_RETRIES} and EMPTY_RETRIES == 2
    assert total == len(inputs) * (1 + EMPTY_RETRIES)
    assert elapsed < 6.0  # no backoff between the attempts (was > 10 s with 6 backed-off retries)
