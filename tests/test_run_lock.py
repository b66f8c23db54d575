"""One writer per run directory (issue 14, item 2): a second `run` refuses naming the holder's PID; the lock of a
killed run is taken over."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import make_tiny_probeset

from medvlm_audit.errors import RunLockedError
from medvlm_audit.store import RunLock, RunStore
from medvlm_audit.testing.fake_openai import ThreadedFakeServer


def test_run_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    first = RunLock(tmp_path).acquire()
    assert (tmp_path / "run.lock").read_text().strip() == str(os.getpid())
    with pytest.raises(RunLockedError, match=f"PID {os.getpid()}"):
        RunLock(tmp_path).acquire()
    first.release()
    RunLock(tmp_path).acquire().release()
    store = RunStore.open_for_run(tmp_path / "r")  # the store of a run holds the lock until it is closed
    with pytest.raises(RunLockedError):
        RunStore.open_for_run(tmp_path / "r")
    store.close()
    RunStore.open_for_run(tmp_path / "r").close()


def _count(run_dir: Path, sql: str = "SELECT COUNT(*) FROM responses") -> int:
    try:
        db = sqlite3.connect(run_dir / "run.sqlite")
        try:
            return db.execute(sql).fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def test_the_lock_file_is_never_observed_empty_while_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PID is written over the stale content before the file is cut to its length (never truncate-then-
    write, which a reader can observe empty); a stale longer PID's tail is never read as the holder."""
    lock = tmp_path / "run.lock"
    lock.write_text("123456789\n")  # a crashed holder's longer PID
    seen: list[str] = []
    real = os.ftruncate

    def spy(fd: int, length: int) -> None:
        seen.append(lock.read_text())
        real(fd, length)

    monkeypatch.setattr(os, "ftruncate", spy)
    held = RunLock(tmp_path).acquire()
    monkeypatch.setattr(os, "ftruncate", real)
    try:
        assert seen and all(t.split("\n", 1)[0] == str(os.getpid()) for t in seen)
        assert lock.read_text() == f"{os.getpid()}\n"
        assert held.holder() == str(os.getpid())
    finally:
        held.release()


@pytest.mark.slow
def test_a_second_run_on_the_same_directory_refuses_and_a_crashed_holder_is_taken_over(tmp_path: Path) -> None:
    _takeover(tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("MEDVLM_SLOW_LANE"),
                    reason="slow lane only: MEDVLM_SLOW_LANE=1 pytest -m slow (the takeover test 50 times)")
@pytest.mark.timeout(3 * 3600)
def test_crashed_holder_takeover_50_times(tmp_path: Path) -> None:
    for i in range(50):
        _takeover(tmp_path / f"round{i:02d}")


def _takeover(tmp_path: Path) -> None:
    make_tiny_probeset(tmp_path / "data", n=12)
    run_dir = tmp_path / "run"
    env = {**os.environ, "COLUMNS": "400"}
    with ThreadedFakeServer(delay_ms=60, record_bodies=True) as srv:
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(yaml.safe_dump({
            "suite": "grounding", "probe_sets": [str(tmp_path / "data" / "probeset")], "run_dir": str(run_dir),
            "models": [{"name": "vlm", "backend": "openai", "model": "fake-vlm", "base_urls": [srv.base_url],
                        "max_concurrency": 1, "timeout_s": 5}]}))
        cmd = [sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress", "--no-report"]
        first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                 start_new_session=True)
        deadline = time.monotonic() + 60
        while _count(run_dir) < 3:
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.02)
        # from here each answer takes 5 s, so the first run cannot finish (and release its lock) while the second
        # starts under load; the third run gets fast answers again
        srv.server.delay_s = 5.0
        assert (run_dir / "run.lock").read_text().strip() == str(first.pid)
        second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
        out = second.stdout + second.stderr
        assert second.returncode == 2, out
        assert f"PID {first.pid}" in out and "Traceback" not in out
        assert first.poll() is None  # the first run goes on
        bodies = [json.dumps(b, sort_keys=True) for b in list(srv.stats.bodies)]
        assert len(set(bodies)) == len(bodies)  # no input asked twice: the second run asked nothing
        os.killpg(first.pid, signal.SIGKILL)  # a crash: its flock goes with it
        first.wait(timeout=30)
        first.stdout.close()
        assert (run_dir / "run.lock").read_text().strip() == str(first.pid)  # the stale lock file stays
        srv.server.delay_s = 0.0
        third = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
        assert third.returncode == 0, third.stdout + third.stderr
        assert (run_dir / "run.lock").read_text().strip() == ""  # released on exit
    n_keys = _count(run_dir, "SELECT COUNT(DISTINCT key) FROM trials")
    assert _count(run_dir) == n_keys
