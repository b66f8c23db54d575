"""Relative paths in a config file (audit2 O): probe_sets resolve against the config's folder, run_dir and the
other paths against the current folder (README "Relative paths in a config file"); an error about such a path
shows the absolute path it resolved to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from medvlm_audit.cli import app
from medvlm_audit.config import load_config


def _write(folder: Path, reference: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "ref.jsonl").write_text("".join(json.dumps({"id": f"r{i}", "text": "no acute disease", "group": g})
                                              + "\n" for i, g in enumerate("FMFM")))
    cfg = folder / "c.yaml"
    cfg.write_text(f"suite: reports\nrun_dir: run_x\nprobe_sets: [images.jsonl]\nreference: {reference}\n"
                   "strategies: [greedy]\nmodels:\n  - {name: m, backend: report_reference}\n")
    return cfg


def test_probe_sets_resolve_against_the_config_folder_run_dir_against_cwd(tmp_path: Path, monkeypatch) -> None:
    cfg = _write(tmp_path / "cfgs", "ref.jsonl")
    monkeypatch.chdir(tmp_path)
    loaded = load_config(Path("cfgs/c.yaml"))
    assert loaded.probe_sets == [str(Path("cfgs") / "images.jsonl")]
    assert Path(loaded.run_dir) == Path("run_x")  # against the current folder, as recorded for a resume
    assert cfg.exists()


def test_a_missing_relative_option_path_shows_the_path_it_resolved_to(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("sacrebleu")
    _write(tmp_path / "cfgs", "ref.jsonl")  # the reference sits beside the config, not in the current folder
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["run", "cfgs/c.yaml", "--dry-run"])
    assert res.exit_code == 2, res.output
    assert f"ref.jsonl (resolved against the current folder: {tmp_path / 'ref.jsonl'}) does not exist" in \
        " ".join(res.output.split())
    assert not (tmp_path / "run_x").exists()


def test_a_missing_relative_kb_shows_the_path_it_resolved_to(tmp_path: Path, monkeypatch) -> None:
    from medvlm_audit.errors import AuditError
    from medvlm_audit.suites.faithfulness.kb import KnowledgeBase

    monkeypatch.chdir(tmp_path)
    with pytest.raises(AuditError, match="resolved against the current folder") as e:
        KnowledgeBase.from_json("kb.json")
    assert str(tmp_path / "kb.json") in str(e.value)
