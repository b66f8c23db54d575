"""The CLI's start-up pause of the cyclic garbage collector (``python -m medvlm_audit``): paused while the
command's modules are imported, resumed (with the imported objects frozen) before a command's work starts, so a
long run collects its garbage as before. Each case runs the entry point in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

SPY = """
    import gc, sys
    gc.disable()
    from medvlm_audit import api, cli

    def spy(*a, **k):
        print("collector", gc.isenabled(), gc.get_freeze_count() > 10000)
        raise SystemExit(0)

    api.run = api.export = spy
    sys.argv = ["medvlm-audit", *sys.argv[1:]]
    cli.main(gc_paused=True)
"""


def _main(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(SPY), *args], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_run_resumes_the_collector_before_the_run(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"suite: grounding\nprobe_sets: [{tmp_path}]\nrun_dir: {tmp_path / 'run'}\n"
                   "models: [{name: vlm, backend: openai, model: m, base_urls: ['http://127.0.0.1:9/v1']}]\n")
    assert _main("run", str(cfg), "--no-progress") == "collector True True"


def test_another_command_resumes_it_too(tmp_path: Path) -> None:
    assert _main("export", str(tmp_path)) == "collector True True"


def test_app_called_as_a_library_leaves_the_collector_alone() -> None:
    import gc

    from medvlm_audit import cli

    assert gc.isenabled()
    cli._resume_gc()  # nothing paused here: nothing to resume, nothing frozen
    assert gc.isenabled() and not cli._gc_paused
