"""A store that cannot be written stops the run at once with one clear error: every committed answer is kept,
nothing fetched is dropped without being counted, and a rerun completes the store (issue 14, item 1)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import make_tiny_probeset

from medvlm_audit.errors import StoreError, StoreLockedError
from medvlm_audit.models.base import Model, ModelInput, Response
from medvlm_audit.runner import execute
from medvlm_audit.store import RunStore
from medvlm_audit.suites.grounding import GroundingOptions, plan_grounding
from medvlm_audit.testing.fake_openai import ThreadedFakeServer


class SlowBright(Model):
    """Answers from the pixels, two inputs per call, a few ms per call; ``hook(n_calls)`` runs before each."""

    name = "slow-bright"
    modality = "multimodal"
    batch_size = 2
    max_concurrency = 1

    def __init__(self, hook=None) -> None:
        self.calls = 0
        self.answered = 0
        self.hook = hook

    async def generate(self, inputs: Sequence[ModelInput]) -> list[Response]:
        self.calls += 1
        if self.hook is not None:
            self.hook(self.calls)
        await asyncio.sleep(0.005)
        out = []
        for inp in inputs:
            px = inp.images[0].pixels if inp.images else None
            yes = px is not None and float(np.quantile(px, 0.98)) > 200
            out.append(Response("Yes" if yes else "No", (("Yes", -0.1 if yes else -3.0), ("No", -3.0 if yes else -0.1))))
        self.answered += len(inputs)
        return out


def _run(store, plan, model):
    return asyncio.run(execute(store, plan, [model], progress=False))


def _wait_committed(path: Path, n: int, timeout_s: float = 10.0) -> None:
    """Wait until ``n`` answers are committed (as another process sees the store): the runner's writer thread
    commits each answer as it arrives, beside the event loop, so a hook on the loop waits for it to catch up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        db = sqlite3.connect(path)
        try:
            if db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] >= n:
                return
        except sqlite3.OperationalError:  # the table is not there yet
            pass
        finally:
            db.close()
        time.sleep(0.005)
    raise AssertionError(f"fewer than {n} answers committed after {timeout_s} s")


def _unsaved(msg: str) -> int:
    m = re.search(r"(\d+) answers? received just before the failure could not be saved", msg)
    return int(m.group(1)) if m else 0


@pytest.mark.slow
def test_a_store_locked_longer_than_the_wait_stops_the_run_and_a_rerun_completes(tmp_path: Path) -> None:
    plan = plan_grounding([make_tiny_probeset(tmp_path / "data", n=12)], GroundingOptions())
    path = tmp_path / "run" / "run.sqlite"
    holder: list[sqlite3.Connection] = []

    def lock_at_call_4(n: int) -> None:  # another process takes the write lock mid-run and keeps it
        if n == 4:
            _wait_committed(path, 6)  # the three calls before (two inputs each) are in the store
            other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            other.execute("BEGIN IMMEDIATE")
            holder.append(other)

    store = RunStore(path, lock_wait_s=0.3)
    model = SlowBright(lock_at_call_4)
    t0 = time.perf_counter()
    with pytest.raises(StoreLockedError) as err:
        _run(store, plan, model)
    msg = str(err.value)
    assert time.perf_counter() - t0 < 10
    assert "database is locked" in msg and str(path) in msg and "run the same command again to resume" in msg
    assert "\n" not in msg
    kept = store.db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    assert kept == 6  # the calls answered (two inputs each) and committed before the lock
    assert f"({kept} in the store)" in msg
    # the run stopped: answers received while waiting for the lock are counted, not silently dropped
    assert model.answered == kept + _unsaved(msg)
    assert model.calls <= 4 + int(0.3 / 0.005) + 2
    holder[0].rollback()
    holder[0].close()
    store.close()
    # resume: exactly the missing answers are asked, the store is complete
    store = RunStore(path)
    again = SlowBright()
    _run(store, plan, again)
    n_keys = store.db.execute("SELECT COUNT(DISTINCT key) FROM trials").fetchone()[0]
    assert store.db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == n_keys
    assert again.answered == n_keys - kept
    store.close()


@pytest.mark.slow
def test_a_lock_shorter_than_the_wait_loses_nothing(tmp_path: Path) -> None:
    plan = plan_grounding([make_tiny_probeset(tmp_path / "data", n=8)], GroundingOptions())
    path = tmp_path / "run.sqlite"

    def lock_briefly(n: int) -> None:
        if n == 3:
            other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            other.execute("BEGIN IMMEDIATE")
            threading.Timer(0.4, lambda: (other.rollback(), other.close())).start()

    store = RunStore(path, lock_wait_s=5)
    model = SlowBright(lock_briefly)
    summary = _run(store, plan, model)
    n_keys = store.db.execute("SELECT COUNT(DISTINCT key) FROM trials").fetchone()[0]
    assert store.db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == n_keys == model.answered
    assert summary.per_model["slow-bright"]["asked"] == n_keys
    store.close()


def test_a_full_database_stops_the_run_naming_the_cause_not_a_rollback_error(tmp_path: Path) -> None:
    """SQLITE_FULL (simulated with max_page_count): SQLite has already rolled back; the error says so."""
    plan = plan_grounding([make_tiny_probeset(tmp_path / "data", n=12)], GroundingOptions())
    path = tmp_path / "run.sqlite"
    store = RunStore(path)

    def fill_at_call_3(n: int) -> None:
        if n == 3:
            _wait_committed(path, 4)  # the two calls before (two inputs each) are in the store
            pages = store.db.execute("PRAGMA page_count").fetchone()[0]
            store.db.execute(f"PRAGMA max_page_count = {pages}")

    model = SlowBright(fill_at_call_3)
    with pytest.raises(StoreError) as err:
        _run(store, plan, model)
    msg = str(err.value)
    assert "database or disk is full" in msg and "no transaction is active" not in msg
    assert "run the same command again to resume" in msg
    kept = store.db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    assert kept >= 4
    assert model.answered == kept + _unsaved(msg)
    store.close()
    store = RunStore(path)  # space freed: the resume completes the store (and writes the plan's rows again)
    again = SlowBright()
    _run(store, plan, again)
    n_keys = store.db.execute("SELECT COUNT(DISTINCT key) FROM trials").fetchone()[0]
    assert model.answered < n_keys  # the first run stopped at once, not after asking everything
    assert store.db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == n_keys
    assert again.answered == n_keys - kept
    store.close()


def test_transaction_keeps_the_original_error_when_sqlite_already_rolled_back(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run.sqlite")
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StoreError, match="database or disk is full"):
        with store.transaction():
            store.db.executemany("INSERT INTO meta VALUES(?, ?)", [(f"k{i}", "x" * 2000) for i in range(50)])
    assert not store.db.in_transaction
    store.close()


# ---- through the command line --------------------------------------------------------------------------------

def _config(tmp: Path, base_url: str, run_dir: Path, **extra) -> Path:
    cfg = {"suite": "grounding", "probe_sets": [str(tmp / "data" / "probeset")], "run_dir": str(run_dir), **extra,
           "models": [{"name": "vlm", "backend": "openai", "model": "fake-vlm", "base_urls": [base_url],
                       "max_concurrency": 2, "timeout_s": 5}]}
    p = tmp / "cfg.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _count(run_dir: Path, sql: str = "SELECT COUNT(*) FROM responses") -> int:
    db = sqlite3.connect(run_dir / "run.sqlite")
    try:
        return db.execute(sql).fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        db.close()


def _error_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("error:")]


@pytest.mark.slow
def test_cli_run_exits_non_zero_while_another_process_holds_the_lock_then_resumes(tmp_path: Path) -> None:
    make_tiny_probeset(tmp_path / "data", n=12)
    run_dir = tmp_path / "run"
    with ThreadedFakeServer(delay_ms=40) as srv:
        cfg = _config(tmp_path, srv.base_url, run_dir, store_lock_wait_s=0.5)
        cmd = [sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress", "--no-report"]
        env = {**os.environ, "COLUMNS": "400"}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        deadline = time.monotonic() + 60
        while (run_dir / "run.sqlite").exists() is False or _count(run_dir) < 4:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        other = sqlite3.connect(run_dir / "run.sqlite", isolation_level=None, timeout=30)
        other.execute("BEGIN IMMEDIATE")  # held until the run has given up
        kept = other.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        out, _ = proc.communicate(timeout=60)
        other.rollback()
        other.close()
        assert proc.returncode == 2, out
        assert "Traceback" not in out
        lines = _error_lines(out)
        assert len(lines) == 1 and "database is locked" in lines[0] and "resume" in lines[0], out
        assert _count(run_dir) == kept
        out2 = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
        assert out2.returncode == 0, out2.stdout + out2.stderr
    n_keys = _count(run_dir, "SELECT COUNT(DISTINCT key) FROM trials")
    assert _count(run_dir) == n_keys and _count(run_dir, "SELECT COUNT(error_kind) FROM responses") == 0


_TMPFS_SCRIPT = textwrap.dedent("""
    import os, sqlite3, subprocess, sys, time
    mnt, cfg, fill = sys.argv[1], sys.argv[2], sys.argv[3]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt], check=True)
    cmd = [sys.executable, "-m", "medvlm_audit", "run", cfg, "--no-progress", "--no-report"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "400"})
    db = os.path.join(mnt, "run", "run.sqlite")
    def count(sql="SELECT COUNT(*) FROM responses"):
        try:
            c = sqlite3.connect("file:" + db + "?mode=ro", uri=True)
            try:
                return c.execute(sql).fetchone()[0]
            finally:
                c.close()
        except sqlite3.Error:
            return 0
    t0 = time.monotonic()
    while count() < 4:
        if proc.poll() is not None or time.monotonic() - t0 > 60:
            print("RUN-ENDED-EARLY", proc.poll(), proc.stdout.read()); sys.exit(1)
        time.sleep(0.02)
    with open(fill, "wb") as fh:  # fill the filesystem
        try:
            while True:
                fh.write(b"\\0" * 65536); fh.flush()
        except OSError:
            pass
    out, _ = proc.communicate(timeout=120)
    print("RC1", proc.returncode)
    print("OUT1", out.replace("\\n", " | "))
    print("KEPT", count())
    os.unlink(fill)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    print("RC2", r.returncode, (r.stdout + r.stderr).replace("\\n", " | "))
    print("FINAL", count(), count("SELECT COUNT(DISTINCT key) FROM trials"),
          count("SELECT COUNT(error_kind) FROM responses"))
""")


@pytest.mark.slow
def test_cli_run_on_a_full_filesystem_exits_non_zero_and_a_resume_completes(tmp_path: Path) -> None:
    """A real ENOSPC: the run directory on a 4 MB tmpfs (in a private mount namespace) that fills mid-run."""
    if shutil.which("unshare") is None or sys.platform != "linux":
        pytest.skip("needs unshare (Linux) to mount a private tmpfs")
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("unprivileged mount namespaces are not available here")
    make_tiny_probeset(tmp_path / "data", n=12)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = tmp_path / "fill.py"
    script.write_text(_TMPFS_SCRIPT)
    with ThreadedFakeServer(delay_ms=40) as srv:
        cfg = _config(tmp_path, srv.base_url, mnt / "run")
        res = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", sys.executable, str(script),
                              str(mnt), str(cfg), str(mnt / "fill")], capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    fields = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in res.stdout.splitlines() if " " in ln}
    assert fields["RC1"] == "2", out
    first = fields["OUT1"]
    assert "Traceback" not in first
    errors = [p for p in first.split(" | ") if p.startswith("error:")]
    assert len(errors) == 1 and "full" in errors[0] and "resume" in errors[0], first
    assert int(fields["KEPT"]) >= 4
    assert fields["RC2"].startswith("0"), out
    n_resp, n_keys, n_err = (int(x) for x in fields["FINAL"].split())
    assert n_resp == n_keys and n_err == 0


def test_a_lone_surrogate_in_an_answer_is_stored_as_a_replacement_character(tmp_path: Path) -> None:
    # audit D4: a server's JSON with "\ud800" decodes to an unpaired surrogate, which SQLite's UTF-8 binding
    # refused: the run stopped with a traceback, and every resume asked again and crashed again
    import json as _json

    from medvlm_audit.models.base import ErrorInfo, Response
    from medvlm_audit.store import RunStore

    lone = _json.loads(r'"yes \ud800 lone"')
    store = RunStore(tmp_path / "run.sqlite")
    store.put_responses([("k1", Response(text=lone, reasoning=lone)),
                         ("k2", Response(text=None, error=ErrorInfo("http_4xx", "bad " + lone, 1, False))),
                         ("k3", Response(text="plain é 😀"))])
    rows = dict(store.db.execute("SELECT key, text FROM responses").fetchall())
    assert rows == {"k1": "yes \ufffd lone", "k2": None, "k3": "plain é 😀"}
    assert store.db.execute("SELECT error_message FROM responses WHERE key='k2'").fetchone()[0] == "bad yes \ufffd lone"
    assert store.db.execute("SELECT reasoning FROM answer_details WHERE key='k1'").fetchone()[0] == "yes \ufffd lone"
    store.close()
