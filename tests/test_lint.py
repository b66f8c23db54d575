"""`ruff check` passes over the source, the tests and the benchmarks with the project's rules
(`[tool.ruff.lint]` in pyproject.toml): a habit CI keeps, not a style preference."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> str:
    try:
        from ruff.__main__ import find_ruff_bin
    except ImportError:
        pytest.skip("ruff is not installed (it is in the 'test' extra)")
    return str(find_ruff_bin())


def test_ruff_check_passes() -> None:
    res = subprocess.run([_ruff(), "check", "--no-cache", "src", "tests", "benchmarks"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_ruff_would_catch_an_unused_import(tmp_path: Path) -> None:
    """The check can fail: the same rules flag a file with an unused import and an undefined name."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f():\n    return undefined_name\n")
    res = subprocess.run([_ruff(), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "F401" in res.stdout and "F821" in res.stdout, res.stdout + res.stderr
