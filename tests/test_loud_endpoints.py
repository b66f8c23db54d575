"""Dead or refusing endpoints fail a run loudly: checked before planning (URL, status, server message), a
circuit breaker stops a model that cannot be reached, an error summary per model, a non-zero exit, and a red
box in the report."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import make_tiny_probeset
from typer.testing import CliRunner

from medvlm_audit.cli import app
from medvlm_audit.health import error_summary_lines, failing_models
from medvlm_audit.report.html import failing_models_html
from medvlm_audit.testing.fake_openai import FaultRule, ThreadedFakeServer


@pytest.fixture
def probeset(tmp_path: Path) -> Path:
    make_tiny_probeset(tmp_path / "data", n=4)
    return tmp_path / "data" / "probeset"


def _config(tmp: Path, probeset: Path, base_url: str, **model_kw) -> Path:
    cfg = {
        "suite": "grounding", "probe_sets": [str(probeset)],
        "run_dir": str(tmp / "run"),
        "conditions": ["original", "no_image"],
        "models": [{"name": "vlm", "backend": "openai", "model": "fake-vlm", "base_urls": [base_url],
                    "max_concurrency": 1, "timeout_s": 5, "backoff_base_s": 0.01, **model_kw}],
    }
    p = tmp / "run.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_cli(cfg: Path, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress"],
                         env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=120, check=False)
    return out, time.monotonic() - t0


@pytest.mark.slow
def test_closed_port_fails_at_once_naming_the_url(tmp_path: Path, probeset: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    out, took = _run_cli(_config(tmp_path, probeset, url))
    text = " ".join((out.stdout + out.stderr).split())
    assert out.returncode != 0, text
    assert took < 60
    assert url in text and "cannot connect" in text and "Traceback" not in text
    assert not (tmp_path / "run" / "run.sqlite").exists()  # nothing planned, nothing stored


@pytest.mark.slow
def test_401_server_fails_at_once_with_status_and_message(tmp_path: Path, probeset: Path) -> None:
    with ThreadedFakeServer(api_key="the-right-key") as srv:
        cfg = _config(tmp_path, probeset, srv.base_url, api_key_env="MEDVLM_LOUD_KEY")
        out, took = _run_cli(cfg, {"MEDVLM_LOUD_KEY": "a-wrong-key"})
        chat = sum(n for p, n in srv.stats.paths.items() if p.endswith("/chat/completions"))
    text = " ".join((out.stdout + out.stderr).split())
    assert out.returncode != 0, text
    assert took < 60
    assert srv.base_url in text and "HTTP 401" in text and "Incorrect API key provided" in text, text
    assert "a-wrong-key" not in text and "Traceback" not in text
    assert chat == 0  # the check needs no chat request


@pytest.mark.slow
def test_circuit_breaker_stops_a_refused_model_and_a_rerun_asks_what_was_not_asked(
        tmp_path: Path, probeset: Path) -> None:
    """/models answers but every chat request gets 401: after 3 in a row the model stops; the rest is not asked,
    not stored, and asked by a rerun; the run exits 1 with an error summary and the report shows a red box."""
    with ThreadedFakeServer(rules=[FaultRule("", "401", times=None)]) as srv:
        cfg = _config(tmp_path, probeset, srv.base_url, circuit_breaker=3)
        res = CliRunner().invoke(app, ["run", str(cfg), "--no-progress"])
        asked = srv.stats.total
    text = " ".join(res.output.split())
    assert res.exit_code == 1, text
    assert asked == 3  # one attempt per input (401 is not retried), three in a row trip the breaker
    assert "failed: no answer" in text and "http_4xx x3" in text and "not_asked x2" in text, text
    assert "circuit_breaker=3" in text and "--retry-errors" in text
    db = sqlite3.connect(tmp_path / "run" / "run.sqlite")
    assert db.execute("SELECT COUNT(*), COUNT(error_kind) FROM responses").fetchone() == (3, 3)
    db.close()
    html = (tmp_path / "run" / "report" / "report.html").read_text()
    box = html.index('class="failed"')
    assert box < html.index('id="verdicts"') and "no answer" in html[box:box + 2000]
    with ThreadedFakeServer() as ok:  # the endpoint is back (another port: base URLs are not identity)
        cfg = _config(tmp_path, probeset, ok.base_url, circuit_breaker=3)
        res = CliRunner().invoke(app, ["run", str(cfg), "--no-progress", "--retry-errors"])
        assert res.exit_code == 0, res.output
        assert ok.stats.total == 5  # 4 images + 1 text-only question
    html = (tmp_path / "run" / "report" / "report.html").read_text()
    assert 'class="failed"' not in html


def test_transient_errors_do_not_trip_the_breaker(tmp_path: Path, probeset: Path) -> None:
    with ThreadedFakeServer(rules=[FaultRule("", "503", times=4)]) as srv:
        cfg = _config(tmp_path, probeset, srv.base_url, circuit_breaker=2)
        res = CliRunner().invoke(app, ["run", str(cfg), "--no-progress", "--no-report"])
        assert srv.stats.total == 5 + 4
    assert res.exit_code == 0, res.output


def test_failing_models_by_error_share_and_red_box() -> None:
    summary = {"max_error_rate": 0.1, "per_model": {
        "ok": {"asked": 100, "errors": 10, "error_kinds": {"timeout": {"n": 10, "sample": "slow"}}},
        "bad": {"asked": 100, "errors": 11, "error_kinds": {"http_5xx": {"n": 11, "sample": "HTTP 500 <b>"}}},
        "resumed": {"asked": 0, "errors": 0},
    }}
    assert failing_models(summary) == {"bad": "11.0% of 100 inputs failed (limit 10.0%)"}
    assert failing_models(summary, 0.05).keys() == {"ok", "bad"}
    assert error_summary_lines(summary)[1].startswith("bad: 11 of 100 inputs failed; http_5xx x11")
    html = failing_models_html(summary)
    assert 'class="failed"' in html and "bad" in html and "HTTP 500 &lt;b&gt;" in html and "ok<" not in html
    assert failing_models_html({"per_model": {"ok": {"asked": 5, "errors": 0}}}) == ""
    assert failing_models_html(None) == ""


def test_max_error_rate_flag_is_the_runs_limit(tmp_path: Path, probeset: Path) -> None:
    # audit defect: `run --max-error-rate` was accepted and ignored (the 5% default always applied)
    with ThreadedFakeServer(fault_rates={"400": 0.4}, seed=3, max_faults_per_key=50) as srv:
        cfg = _config(tmp_path, probeset, srv.base_url)
        strict = CliRunner().invoke(app, ["run", str(cfg), "--no-progress", "--no-report"])
        lenient = CliRunner().invoke(app, ["run", str(cfg), "--no-progress", "--no-report",
                                           "--max-error-rate", "0.9"])
    assert strict.exit_code == 1 and "limit 5.0%" in strict.output, strict.output
    assert lenient.exit_code == 0, lenient.output
    assert "limit" not in lenient.output
