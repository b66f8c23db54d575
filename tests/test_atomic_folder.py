"""Whole-folder report writes (issue 14, item 5): a kill leaves the old folder or the new one, never a mix and no
temp file inside it; the next write removes what killed writes left behind."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from medvlm_audit.atomic import write_folder_atomic


def _siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}."))


def test_folder_write_replaces_its_files_and_keeps_other_files(tmp_path: Path) -> None:
    out = tmp_path / "report"
    write_folder_atomic(out, [("a.csv", b"1"), ("report.html", b"<p>1</p>")])
    (out / "notes.txt").write_text("mine")  # a file the user put there
    write_folder_atomic(out, [("a.csv", b"2"), ("report.html", b"<p>2</p>")])
    assert sorted(p.name for p in out.iterdir()) == sorted(["a.csv", "report.html", "notes.txt"])
    assert (out / "a.csv").read_bytes() == b"2" and (out / "notes.txt").read_text() == "mine"
    assert _siblings(out) == []


def test_stale_temps_of_killed_writes_are_cleaned_and_a_half_swapped_folder_restored(tmp_path: Path) -> None:
    out = tmp_path / "report"
    write_folder_atomic(out, [("a.csv", b"1")])
    (out / ".summary.json.abc123.tmp").write_bytes(b"half")  # left by a killed per-file write
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # a PID that has exited
    (tmp_path / f".report.{pid}-zz.tmp").mkdir()
    (tmp_path / f".report.{pid}-zz.tmp" / "a.csv").write_bytes(b"half")
    (out / "notes.txt").write_text("mine")
    os.rename(out, tmp_path / f".report.{pid}-yy.old")  # killed between the two renames of a swap
    write_folder_atomic(out, [("b.csv", b"2")])
    # the old folder was put back before the write: its file of other origin is kept, its temp file is gone
    assert sorted(p.name for p in out.iterdir()) == sorted(["a.csv", "b.csv", "notes.txt"])
    assert _siblings(out) == []


_WRITER = textwrap.dedent("""
    import sys
    from medvlm_audit.atomic import write_folder_atomic
    out, start = sys.argv[1], int(sys.argv[2])
    names = ["metrics.parquet", "metrics.csv", "comparisons.csv", "summary.json", "report.html"]
    v = start
    while True:
        tag = f"version {v}\\n".encode()
        write_folder_atomic(out, [(n, tag + bytes(300_000 * (i + 1))) for i, n in enumerate(names)])
        print(v, flush=True)
        v += 1
""")


@pytest.mark.slow
def test_a_kill_during_a_report_write_never_leaves_a_mixed_folder(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    out = tmp_path / "report"
    names = {"metrics.parquet", "metrics.csv", "comparisons.csv", "summary.json", "report.html"}
    rng = random.Random(5)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    write_folder_atomic(out, [(n, b"version -1\n") for n in names])
    killed_mid_write = 0
    for k in range(12):
        proc = subprocess.Popen([sys.executable, str(script), str(out), str(1000 * k)], env=env,
                                stdout=subprocess.PIPE, text=True)
        proc.stdout.readline()  # at least one write done, so the kill lands among writes
        time.sleep(rng.uniform(0.0, 0.05))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        files = {p.name for p in out.iterdir()}
        assert files == names, files  # never a temp file or a missing file inside
        versions = {(out / n).read_bytes().split(b"\n", 1)[0] for n in names}
        assert len(versions) == 1, versions  # all files from one write
        killed_mid_write += bool(_siblings(out))
    assert killed_mid_write >= 1  # some kills really landed inside a write (their temp folders were left)
    write_folder_atomic(out, [(n, b"final\n") for n in names])
    assert _siblings(out) == []  # the next write cleaned them
