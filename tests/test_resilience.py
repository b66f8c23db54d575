"""A run survives SIGKILL at random moments and rate limits; credentials never reach the store, exports or logs."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import make_tiny_probeset

from medvlm_audit.testing.fake_openai import ThreadedFakeServer

SECRET = "sk-test-4f7c2a9e-DO-NOT-LEAK"


def _config(tmp: Path, probeset: Path, base_url: str, run_dir: Path, **model_kw) -> Path:
    cfg = {
        "suite": "grounding", "probe_sets": [str(probeset)],
        "run_dir": str(run_dir),
        "models": [
            {"name": "vlm", "backend": "openai", "model": "fake-vlm", "base_urls": [base_url],
             "api_key_env": "MEDVLM_TEST_KEY", "max_concurrency": 4, "timeout_s": 5, "backoff_base_s": 0.05,
             **model_kw},
            {"name": "vlm-text", "backend": "openai", "model": "fake-vlm", "base_urls": [base_url],
             "api_key_env": "MEDVLM_TEST_KEY", "text_only": True, "max_concurrency": 2},
        ],
    }
    p = tmp / f"{run_dir.name}.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _cli(cfg: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress", "--no-report"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _answers(run_dir: Path) -> dict[str, tuple]:
    db = sqlite3.connect(run_dir / "run.sqlite")
    rows = db.execute("SELECT key, text, error_kind FROM responses").fetchall()
    trials = db.execute("SELECT model, case_id, condition, key FROM trials ORDER BY 1, 2, 3").fetchall()
    db.close()
    return {"responses": sorted(rows), "trials": trials}


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_equals_uninterrupted_run(tmp_path: Path) -> None:
    make_tiny_probeset(tmp_path / "data", n=40)
    env = {**os.environ, "MEDVLM_TEST_KEY": SECRET}
    rng = random.Random(7)
    with ThreadedFakeServer(delay_ms=20) as fast:  # answers depend on the request only, not on the delay
        ref_cfg = _config(tmp_path, tmp_path / "data" / "probeset", fast.base_url, tmp_path / "ref")
        out = subprocess.run([sys.executable, "-m", "medvlm_audit", "run", str(ref_cfg), "--no-progress", "--no-report"],
                             env=env, capture_output=True, text=True, timeout=300, check=False)
        assert out.returncode == 0, out.stdout + out.stderr
        reference = _answers(tmp_path / "ref")
        assert len(reference["responses"]) > 100
    # 400 ms per answer at concurrency 4: asking takes ~12 s, so kills 1-2.5 s after each start land mid-answering
    with ThreadedFakeServer(delay_ms=400) as srv:
        cfg = _config(tmp_path, tmp_path / "data" / "probeset", srv.base_url, tmp_path / "killed")
        kills = 0
        progress = []
        for attempt in range(60):
            proc = _cli(cfg, env)
            if kills < 12:
                time.sleep(rng.uniform(1.0, 2.5))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    kills += 1
                    if (tmp_path / "killed" / "run.sqlite").exists():
                        progress.append(len(_answers(tmp_path / "killed")["responses"]))
                    continue
            out_text, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0, out_text
            if kills >= 10:
                break
        assert kills >= 10
        final = _answers(tmp_path / "killed")
        assert final == reference
        assert progress == sorted(progress)  # answers only accumulate across kills
        total = len(reference["responses"])
        mid = [n for n in progress if 0 < n < total]
        assert len(mid) >= 5, f"too few kills landed while answers were being written: {progress} of {total}"


URL_PASSWORD, URL_QUERY_SECRET = "SuperSecretPw123", "QuerySecret999"


@pytest.mark.slow
def test_api_key_never_in_store_exports_or_logs(tmp_path: Path) -> None:
    """Neither the API key nor credentials carried in a base URL (user:password@, ?api-key=) reach the run store,
    the exports, the report or the logs."""
    make_tiny_probeset(tmp_path / "data", n=6)
    env = {**os.environ, "MEDVLM_TEST_KEY": SECRET}
    with ThreadedFakeServer(record_bodies=True) as srv:
        cfg = _config(tmp_path, tmp_path / "data" / "probeset", srv.base_url, tmp_path / "run")
        data = yaml.safe_load(cfg.read_text())
        scheme, rest = srv.base_url.split("://", 1)
        url = f"{scheme}://user:{URL_PASSWORD}@{rest}?api-key={URL_QUERY_SECRET}"
        data["models"].append({"name": "vlm-url", "backend": "openai", "model": "fake-vlm-url", "base_urls": [url],
                               "max_concurrency": 2, "timeout_s": 5})
        cfg.write_text(yaml.safe_dump(data))
        out = subprocess.run([sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress"],
                             env=env, capture_output=True, text=True, timeout=300, check=False)
        assert out.returncode == 0, out.stdout + out.stderr
        seen = list(srv.stats.authorization)
    assert any(SECRET in h for h in seen), "the key must actually be sent to the server"
    assert any(h.startswith("Basic ") for h in seen), "the URL's user:password must actually be used"
    secrets = (SECRET, URL_PASSWORD, URL_QUERY_SECRET)
    for s in secrets:
        assert s not in out.stdout + out.stderr
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert any(p.name == "results.parquet" for p in files) and any(p.name == "report.html" for p in files)
    for p in files:
        for s in secrets:
            assert s.encode() not in p.read_bytes(), (p, s)
    # the recorded config keeps the (redacted) base URL: host and path, no user info, no query
    db = sqlite3.connect(tmp_path / "run" / "run.sqlite")
    import json

    recorded = json.loads(db.execute("SELECT v FROM meta WHERE k = 'config'").fetchone()[0])
    db.close()
    assert recorded["models"][2]["base_urls"] == [srv.base_url]
    assert recorded["models"][0]["base_urls"] == [srv.base_url]  # a URL without credentials is kept as is



@pytest.mark.slow
def test_missing_api_key_variable_fails_before_any_request(tmp_path: Path) -> None:
    make_tiny_probeset(tmp_path / "data", n=4)
    env = {k: v for k, v in os.environ.items() if k != "MEDVLM_TEST_KEY"}
    with ThreadedFakeServer() as srv:
        cfg = _config(tmp_path, tmp_path / "data" / "probeset", srv.base_url, tmp_path / "run")
        out = subprocess.run([sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress"],
                             env=env, capture_output=True, text=True, timeout=300, check=False)
        assert srv.stats.total == 0
    assert out.returncode == 2
    assert not (tmp_path / "run").exists()  # nothing written
    assert "MEDVLM_TEST_KEY" in out.stdout + out.stderr and "Traceback" not in out.stdout + out.stderr


@pytest.mark.slow
def test_runner_completes_through_transient_faults_without_duplicates(tmp_path: Path) -> None:
    """429 (Retry-After), 500/503, dropped connections, malformed JSON, empty content and missing logprobs:
    every input ends with one stored answer, none duplicated, none lost."""
    from medvlm_audit.suites.grounding.probeset import ProbeSet

    ps = make_tiny_probeset(tmp_path / "data", n=40)
    df = ps.df.assign(kind="report_error", sentence=[f"There is a small opacity in zone {i}." for i in range(40)])
    ProbeSet(df, ps.image_root, name="tiny").save(tmp_path / "data" / "probeset")  # one prompt text per case
    env = {**os.environ, "MEDVLM_TEST_KEY": SECRET}
    rates = {"429": 0.08, "500": 0.05, "503": 0.05, "drop": 0.05, "malformed": 0.05, "empty": 0.05, "nologprobs": 0.1}
    with ThreadedFakeServer(fault_rates=rates, retry_after_s=0.05, max_faults_per_key=2, seed=3) as srv:
        cfg = _config(tmp_path, tmp_path / "data" / "probeset", srv.base_url, tmp_path / "run")
        out = subprocess.run([sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress", "--no-report"],
                             env=env, capture_output=True, text=True, timeout=300, check=False)
        assert out.returncode == 0, out.stdout + out.stderr
        faults = sum(len(v) for v in srv.stats.faults.values())
        answered_by_server = dict(srv.stats.answers)
    assert faults > 5  # the schedule really injected faults
    db = sqlite3.connect(tmp_path / "run" / "run.sqlite")
    n_keys = db.execute("SELECT COUNT(DISTINCT key) FROM trials").fetchone()[0]
    n_resp, n_err = db.execute("SELECT COUNT(*), COUNT(error_kind) FROM responses").fetchone()
    assert n_resp == n_keys and n_err == 0
    # 'nologprobs' is not an error: the answer is kept, its confidence is undefined
    assert db.execute("SELECT COUNT(*) FROM responses WHERE top_logprobs IS NULL").fetchone()[0] > 0
    # the server sent exactly one successful answer per distinct input: retries only repeat failed attempts
    assert sum(answered_by_server.values()) == n_keys
