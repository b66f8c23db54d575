"""`export` and `report` open the store read-only (issue 14, item 3): an archived run on read-only media, with or
without a WAL file left by a crash, exports and reports to another folder."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import BrightSpotModel, make_tiny_probeset

from medvlm_audit import api
from medvlm_audit.errors import StoreError
from medvlm_audit.store import RunStore

PENDING = "ANSWER-ONLY-IN-THE-WAL"


def _make_run(tmp: Path) -> Path:
    ps = make_tiny_probeset(tmp / "data", n=6)
    cfg = {"suite": "grounding", "probe_sets": [str(ps.image_root / "probeset")], "run_dir": str(tmp / "run"),
           "conditions": ["original", "no_image"],
           "models": [{"name": "bright-spot", "backend": "openai", "model": "x", "base_urls": "http://127.0.0.1:9/v1"}]}
    api.run(cfg, models=[BrightSpotModel()], progress=False)
    return tmp / "run"


def _leave_a_pending_wal(run_dir: Path) -> None:
    """Change one answer and die without a checkpoint: the change lives only in run.sqlite-wal."""
    code = (f"import sqlite3, os; db = sqlite3.connect({str(run_dir / 'run.sqlite')!r}, isolation_level=None); "
            "db.execute('PRAGMA wal_autocheckpoint=0'); "
            f"db.execute(\"UPDATE responses SET text = '{PENDING}' WHERE key = (SELECT MIN(key) FROM responses)\"); "
            "os._exit(0)")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert (run_dir / "run.sqlite-wal").stat().st_size > 0


def _chmod_tree(root: Path, writable: bool) -> None:
    for p in [root, *root.rglob("*")]:
        mode = p.stat().st_mode
        p.chmod(mode | stat.S_IWUSR if writable else mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


@pytest.mark.slow
def test_export_and_report_of_a_read_only_run_dir_to_another_folder(tmp_path: Path) -> None:
    run_dir = _make_run(tmp_path)
    _leave_a_pending_wal(run_dir)
    before = (run_dir / "run.sqlite").read_bytes()
    _chmod_tree(run_dir, writable=False)
    try:
        pq, csv = api.export(run_dir, tmp_path / "out")
        from medvlm_audit.api import report as report_run

        html = report_run(run_dir, tmp_path / "rep", B=20)
    finally:
        _chmod_tree(run_dir, writable=True)
    df = pd.read_csv(csv)
    assert len(df) == 12 and (df["answer_text"] == PENDING).sum() >= 1  # the WAL's committed change is read
    assert html.exists() and (tmp_path / "rep" / "metrics.csv").exists()
    assert (run_dir / "run.sqlite").read_bytes() == before  # nothing written into the store


@pytest.mark.slow
def test_a_read_only_store_refuses_writes(tmp_path: Path) -> None:
    run_dir = _make_run(tmp_path)
    with RunStore.open_dir(run_dir, readonly=True) as store:
        assert store.counts()["responses"] == 7
        with pytest.raises(StoreError, match="read-only"):
            store.set_meta(x=1)


def _unshare_ok() -> bool:
    if shutil.which("unshare") is None or sys.platform != "linux":
        return False
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("pending_wal", [False, True], ids=["clean", "crashed"])
def test_cli_export_and_report_from_read_only_media(tmp_path: Path, pending_wal: bool) -> None:
    """A read-only bind mount (EROFS even for root), in a private mount namespace."""
    if not _unshare_ok():
        pytest.skip("needs unprivileged mount namespaces (unshare) for a read-only mount")
    run_dir = _make_run(tmp_path)
    if pending_wal:
        _leave_a_pending_wal(run_dir)
    else:  # a cleanly closed store: no WAL index, and none can be created on read-only media
        for suffix in ("-wal", "-shm"):
            (run_dir / f"run.sqlite{suffix}").unlink(missing_ok=True)
    out, rep = tmp_path / "out", tmp_path / "rep"
    py = f"{sys.executable} -m medvlm_audit"
    script = (f"mount --bind {run_dir} {run_dir} && mount -o remount,bind,ro {run_dir} && "
              f"{{ touch {run_dir}/probe 2>/dev/null && echo WRITABLE; true; }} && "
              f"{py} export {run_dir} --out {out} && {py} report {run_dir} --out {rep} --B 20")
    res = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "300"})
    text = res.stdout + res.stderr
    assert res.returncode == 0, text
    assert "WRITABLE" not in text and "Traceback" not in text
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 12
    assert ((df["answer_text"] == PENDING).sum() >= 1) == pending_wal
    assert (rep / "report.html").exists()
    db = sqlite3.connect(run_dir / "run.sqlite")
    assert db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 7
    db.close()
