"""Disk full, read-only folder, permission denied in run / build / export / report (issue 14, item 4): one
`error:` line naming the path and the cause, exit status 2, no traceback, nothing half-written."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from conftest import BrightSpotModel, make_tiny_probeset
from typer.testing import CliRunner

from medvlm_audit import api
from medvlm_audit.cli import app
from medvlm_audit.testing.fake_openai import ThreadedFakeServer


def _make_run(tmp: Path) -> Path:
    ps = make_tiny_probeset(tmp / "data", n=6)
    cfg = {"suite": "grounding", "probe_sets": [str(ps.image_root / "probeset")], "run_dir": str(tmp / "run"),
           "conditions": ["original", "no_image"],
           "models": [{"name": "bright-spot", "backend": "openai", "model": "x", "base_urls": "http://127.0.0.1:9/v1"}]}
    api.run(cfg, models=[BrightSpotModel()], progress=False)
    return tmp / "run"


def _one_error(text: str) -> str:
    assert "Traceback" not in text, text
    lines = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, text
    return lines[0]


def test_permission_denied_on_export_is_one_error_line(tmp_path: Path, monkeypatch) -> None:
    run_dir = _make_run(tmp_path)
    out = tmp_path / "out"

    def denied(*a, dir=None, **kw):  # noqa: A002  what a folder without write permission answers
        raise PermissionError(13, "Permission denied", os.path.join(str(dir), ".results.parquet.x1y2.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    res = CliRunner().invoke(app, ["export", str(run_dir), "--out", str(out)])
    assert res.exit_code == 2, res.output
    line = _one_error(" ".join(res.output.split()).replace(" error:", "\nerror:"))
    assert "Permission denied" in line and str(out / "results.parquet") in line
    assert not out.exists() or not any(out.iterdir())


def _unshare_ok() -> bool:
    if shutil.which("unshare") is None or sys.platform != "linux":
        return False
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True).returncode == 0


@pytest.mark.slow
def test_disk_full_and_read_only_folders_in_every_command(tmp_path: Path) -> None:
    """A read-only bind mount (EROFS) and a full 256 kB tmpfs (ENOSPC), in a private mount namespace."""
    if not _unshare_ok():
        pytest.skip("needs unprivileged mount namespaces (unshare) for a read-only mount and a tmpfs")
    run_dir = _make_run(tmp_path)
    ro, full = tmp_path / "ro", tmp_path / "full"
    ro.mkdir()
    full.mkdir()
    py = f"{shlex.quote(sys.executable)} -m medvlm_audit"
    with ThreadedFakeServer() as srv:
        cfgs = {}
        for name, rd in (("ro", ro / "run"), ("full", full / "run")):
            cfgs[name] = tmp_path / f"{name}.yaml"
            cfgs[name].write_text(yaml.safe_dump({
                "suite": "grounding", "probe_sets": [str(tmp_path / "data" / "probeset")], "run_dir": str(rd), "conditions": ["original"],
                "models": [{"name": "vlm", "backend": "openai", "model": "m", "base_urls": [srv.base_url]}]}))
        steps = {
            "export-ro": f"{py} export {run_dir} --out {ro}/out",
            "report-ro": f"{py} report {run_dir} --out {ro}/rep --B 20",
            "run-ro": f"{py} run {cfgs['ro']} --no-progress",
            "build-ro": f"{py} build phantom --out {ro}/ph --n-cases 60 --n-train 60",
            "export-full": f"{py} export {run_dir} --out {full}/out",
            "report-full": f"{py} report {run_dir} --out {full}/rep --B 20",
            "run-full": f"{py} run {cfgs['full']} --no-progress",
            "build-full": f"{py} build phantom --out {full}/ph --n-cases 60 --n-train 60",
        }
        script = [f"mount --bind {ro} {ro}", f"mount -o remount,bind,ro {ro}",
                  f"mount -t tmpfs -o size=256k tmpfs {full}",
                  f"mkdir {full}/out {full}/rep {full}/run {full}/ph",
                  f"dd if=/dev/zero of={full}/fill bs=4k 2>/dev/null; true"]
        for name, cmd in steps.items():
            script.append(f"echo '@@ {name}'; {cmd} 2>&1; echo \"@@rc $?\"")
        script.append(f"echo '@@ files'; find {full} {ro} -name '*.tmp' -o -name 'report.html' -o -name 'results.csv'"
                      " -o -name 'manifest.parquet'")
        res = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "\n".join(script)],
                             capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "300"})
    sections: dict[str, str] = {}
    for chunk in res.stdout.split("@@ ")[1:]:
        name, _, body = chunk.partition("\n")
        sections[name.strip()] = body
    assert set(sections) == {*steps, "files"}, res.stdout + res.stderr
    for name in steps:
        body = sections[name]
        assert "@@rc 2" in body, (name, body)
        line = _one_error(body)
        cause = "Read-only file system" if name.endswith("-ro") else "No space left on device"
        cause_sqlite = "readonly database" if name.endswith("-ro") else "disk is full"
        assert cause in line or cause_sqlite in line, (name, line)
        assert str(ro if name.endswith("-ro") else full) in line, (name, line)  # the path is named
    assert sections["files"].strip() == "", sections["files"]  # no temp file, no half-written output
