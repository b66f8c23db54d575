"""A killed run leaves no process behind (render workers die with their parent), and Ctrl-C ends a run with one
line, exit status 130, no traceback, and a store that the same command resumes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import yaml
from conftest import make_tiny_probeset
from PIL import Image

from medvlm_audit.testing.fake_openai import ThreadedFakeServer

#: the fast lane (`pytest -m "not slow"`) leaves this module out: its fixtures build runs or start processes
pytestmark = pytest.mark.slow


def _big_probeset(root: Path, n: int) -> Path:
    """The tiny probe set with its images replaced by large, well-compressed PNGs: decoding and resizing them
    keeps the render workers busy for a few seconds."""
    make_tiny_probeset(root, n=n)
    y, x = np.mgrid[0:4000, 0:4000].astype(np.uint16)
    base = x // 5 + y // 5
    for i, f in enumerate(sorted((root / "images").glob("*.png"))):
        Image.fromarray(((base + 13 * i) % 256).astype(np.uint8)).save(f, compress_level=1)
    return root / "probeset"


@pytest.fixture(scope="module")
def big_probeset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _big_probeset(tmp_path_factory.mktemp("big") / "data", n=40)


def _config(tmp: Path, probeset: Path, base_url: str, **extra) -> Path:
    cfg = {"suite": "grounding", "probe_sets": [str(probeset)], "run_dir": str(tmp / "run"), "conditions": ["original"],
           "render_in": "processes", "workers": 2,
           "models": [{"name": "vlm", "backend": "openai", "model": "fake-vlm", "base_urls": [base_url],
                       "max_concurrency": 2}], **extra}
    p = tmp / "run.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _wait_for_workers(proc: subprocess.Popen, timeout_s: float = 60) -> list[psutil.Process]:
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        kids = parent.children(recursive=True)
        if kids:
            return kids
        time.sleep(0.01)
    raise AssertionError("the run never started a render worker")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigkill_of_a_run_leaves_no_render_worker(tmp_path: Path, big_probeset: Path) -> None:
    probeset = big_probeset
    with ThreadedFakeServer() as srv:
        cfg = _config(tmp_path, probeset, srv.base_url)
        proc = subprocess.Popen([sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress", "--no-report"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            workers = _wait_for_workers(proc)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            deadline = time.monotonic() + 10
            while _alive(workers) and time.monotonic() < deadline:
                time.sleep(0.05)
            survivors = _alive(workers)
        finally:
            for p in _alive(workers if "workers" in locals() else []):
                p.kill()
    assert not survivors, f"render workers outlived their killed parent: {[p.pid for p in survivors]}"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_prints_one_line_exits_130_and_the_same_command_resumes(tmp_path: Path, big_probeset: Path) -> None:
    probeset = big_probeset
    with ThreadedFakeServer(delay_ms=100) as srv:
        cfg = _config(tmp_path, probeset, srv.base_url)
        cmd = [sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress", "--no-report"]
        # its own process group, as a shell runs a foreground job: Ctrl-C signals the run and its workers
        # Ctrl-C in a terminal reaches a foreground job whose SIGINT is not ignored; a test runner started as a
        # background job of a script ignores SIGINT, and a child would inherit that: reset it there
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        workers = _wait_for_workers(proc)
        deadline = time.monotonic() + 60
        while srv.stats.total < 3 and time.monotonic() < deadline:  # some answers in, render workers still busy
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        deadline = time.monotonic() + 10
        while _alive(workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(workers)
        assert proc.returncode == 130, out + err
        assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err, err
        lines = [ln for ln in (out + err).splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("interrupted: "), lines
        db = sqlite3.connect(tmp_path / "run" / "run.sqlite")
        kept = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        db.close()
        assert lines[0] == f"interrupted: {kept} answers kept; run the same command to resume"
        assert 0 < kept < 40
        before = srv.stats.total
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert srv.stats.total - before == 40 - kept  # only what was missing is asked


def test_demo_refuses_an_existing_demo_before_writing_anything(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from medvlm_audit.cli import app

    out = tmp_path / "demo"
    (out / "run").mkdir(parents=True)
    (out / "demo.yaml").write_text("suite: grounding\n")
    (out / "run" / "run.sqlite").write_bytes(b"precious")
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    res = CliRunner().invoke(app, ["demo", "--out", str(out), "--n-cases", "20", "--no-progress"])
    text = " ".join(res.output.split())
    assert res.exit_code == 2, text
    assert "already holds a demo" in text and "nothing was overwritten" in text and "demo.yaml" in text
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before  # nothing new, nothing touched
    assert (out / "run" / "run.sqlite").read_bytes() == b"precious"
