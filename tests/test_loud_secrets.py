"""Every credential the client sent (Bearer, api-key, Basic as base64 and as raw user:password, each query value of
the base URL), however short, is scrubbed from stored and printed errors when a server echoes the request back."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import make_tiny_probeset

from medvlm_audit.testing.fake_openai import FaultRule, ThreadedFakeServer

BEARER, AZURE, USER, PASSWORD, Q1, Q2 = "kY3", "az5Q", "usr", "pw7x", "zq9", "t8k"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = (BEARER, AZURE, PASSWORD, f"{USER}:{PASSWORD}", BASIC, Q1, Q2)


def _config(tmp: Path, base_url: str) -> Path:
    make_tiny_probeset(tmp / "data", n=3)
    scheme, rest = base_url.split("://", 1)
    root = base_url.removesuffix("/v1")
    cfg = {
        "suite": "grounding", "probe_sets": [str(tmp / "data" / "probeset")], "run_dir": str(tmp / "run"), "conditions": ["original"],
        "models": [
            {"name": "bearer", "backend": "openai", "model": "m", "base_urls": [base_url],
             "api_key_env": "MEDVLM_T_BEARER"},
            {"name": "azure", "backend": "openai", "model": "dep", "api_style": "azure", "base_urls": [root],
             "api_key_env": "MEDVLM_T_AZURE"},
            {"name": "in-url", "backend": "openai", "model": "m2",
             "base_urls": [f"{scheme}://{USER}:{PASSWORD}@{rest}?key={Q1}&tenant={Q2}"]},
        ],
    }
    p = tmp / "run.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _run(cfg: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEDVLM_T_BEARER": BEARER, "MEDVLM_T_AZURE": AZURE}
    return subprocess.run([sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress"], env=env,
                          capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.slow
def test_echoed_credentials_reach_no_store_export_report_or_output(tmp_path: Path) -> None:
    with ThreadedFakeServer(rules=[FaultRule("", "echo_request", times=None)]) as srv:
        out = _run(_config(tmp_path, srv.base_url))
        sent = list(srv.stats.authorization) + list(srv.stats.api_key)
    assert out.returncode == 1, out.stdout + out.stderr  # every answer is an error: the run fails loudly
    assert f"Bearer {BEARER}" in sent and AZURE in sent and f"Basic {BASIC}" in sent  # really sent
    import sqlite3

    db = sqlite3.connect(tmp_path / "run" / "run.sqlite")
    messages = [m for (m,) in db.execute("SELECT error_message FROM responses")]
    db.close()  # listed after: closing the last connection removes SQLite's -wal / -shm files
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert {"run.sqlite", "results.csv", "results.parquet", "report.html"} <= {p.name for p in files}
    assert len(messages) == 9 and all("basic=" in m and "[REDACTED]" in m for m in messages), messages[:2]
    for s in SECRETS:
        assert s not in out.stdout + out.stderr, s
        for p in files:
            assert s.encode() not in p.read_bytes(), (p.name, s)


@pytest.mark.slow
def test_credentials_echoed_by_a_refusing_server_are_not_printed(tmp_path: Path) -> None:
    with ThreadedFakeServer(api_key="another-key") as srv:
        out = _run(_config(tmp_path, srv.base_url))
    text = out.stdout + out.stderr
    assert out.returncode == 2 and "HTTP 401" in text and "Incorrect API key provided" in text, text
    for s in SECRETS:
        assert s not in text, s
