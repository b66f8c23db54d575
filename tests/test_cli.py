"""The command line through typer's CliRunner: --version, a run from flags alone, flags over a config file,
a TOML config, export and build phantom."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import make_tiny_probeset
from typer.testing import CliRunner

from medvlm_audit import __version__
from medvlm_audit.cli import app
from medvlm_audit.config import parse_model_flag
from medvlm_audit.errors import ConfigError
from medvlm_audit.testing.fake_openai import ThreadedFakeServer


def _invoke(*args: str):
    res = CliRunner().invoke(app, list(args))
    res.text = " ".join(res.output.split())  # rich wraps long lines
    return res


def _recorded_config(run_dir: Path) -> dict:
    db = sqlite3.connect(run_dir / "run.sqlite")
    try:
        return json.loads(db.execute("SELECT v FROM meta WHERE k = 'config'").fetchone()[0])
    finally:
        db.close()


@pytest.fixture(scope="module")
def server():
    with ThreadedFakeServer() as srv:
        yield srv


@pytest.fixture
def probeset(tmp_path: Path) -> Path:
    make_tiny_probeset(tmp_path / "data", n=6)
    return tmp_path / "data" / "probeset"


def test_version() -> None:
    res = _invoke("--version")
    assert res.exit_code == 0, res.output
    assert res.output.strip() == __version__


def test_run_from_flags_alone(tmp_path: Path, probeset: Path, server) -> None:
    run_dir = tmp_path / "run"
    res = _invoke("run", "--suite", "grounding", "--probe-set", str(probeset),
                  "--model", f"name=vlm,backend=openai,model=fake-vlm,base_urls={server.base_url},max_concurrency=2",
                  "--model", f"name=vlm-text,backend=openai,model=fake-vlm,base_urls={server.base_url},text_only=true",
                  "--conditions", "original,no_image", "--run-dir", str(run_dir), "--no-progress", "--no-report")
    assert res.exit_code == 0, res.output
    cfg = _recorded_config(run_dir)
    assert cfg["probe_sets"] == [str(probeset)]
    assert [m["name"] for m in cfg["models"]] == ["vlm", "vlm-text"]
    assert cfg["models"][0]["max_concurrency"] == 2 and cfg["models"][1]["text_only"] is True
    assert cfg["conditions"] == ["original", "no_image"]
    df = pd.read_parquet(run_dir / "results.parquet")
    assert len(df) == 6 * 2 * 2 and set(df.condition) == {"original", "no_image"}
    assert df.error_kind.isna().all()


def test_flags_override_the_config_file(tmp_path: Path, probeset: Path, server) -> None:
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "suite": "grounding", "probe_sets": ["does/not/exist"],  # replaced by --probe-set
        "run_dir": str(tmp_path / "from-file"),
        "models": [{"name": "file-model", "backend": "openai", "model": "fake-vlm", "base_urls": server.base_url}],
        "conditions": ["original", "swap", "target_mask", "irrelevant_mask", "no_image"],
        "repeats": 1,
    }))
    models = tmp_path / "models.yaml"
    models.write_text(yaml.safe_dump([{"name": "listed", "backend": "openai", "model": "fake-vlm",
                                       "base_urls": [server.base_url]}]))
    run_dir = tmp_path / "from-flag"
    res = _invoke("run", str(cfg_path), "--probe-set", str(probeset), "--models-yaml", str(models),
                  "--conditions", "original", "--conditions", "swap", "--run-dir", str(run_dir),
                  "--no-progress", "--no-report")
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "from-file").exists()
    cfg = _recorded_config(run_dir)
    assert [m["name"] for m in cfg["models"]] == ["listed"]
    assert cfg["conditions"] == ["original", "swap"] and cfg["repeats"] == 1  # unflagged values come from the file
    assert set(pd.read_parquet(run_dir / "results.parquet").condition) == {"original", "swap"}


def test_toml_config_then_export(tmp_path: Path, probeset: Path, server) -> None:
    run_dir = tmp_path / "run"
    toml = tmp_path / "c.toml"
    toml.write_text(
        'suite = "grounding"\n'
        f'probe_sets = ["{probeset.relative_to(tmp_path).as_posix()}"]\n'  # relative to the config file
        f'run_dir = "{run_dir.as_posix()}"\n'
        'conditions = ["original", "target_mask"]\n'
        "[[models]]\n"
        'name = "vlm"\nbackend = "openai"\nmodel = "fake-vlm"\n'
        f'base_urls = ["{server.base_url}"]\n'
        "[decoding]\nmax_new_tokens = 4\n"
    )
    res = _invoke("run", str(toml), "--no-progress", "--no-report")
    assert res.exit_code == 0, res.output
    cfg = _recorded_config(run_dir)
    assert cfg["conditions"] == ["original", "target_mask"] and cfg["decoding"]["max_new_tokens"] == 4
    n = len(pd.read_parquet(run_dir / "results.parquet"))
    assert n == 6 * 2

    out = tmp_path / "exported"
    res = _invoke("export", str(run_dir), "--out", str(out))
    assert res.exit_code == 0, res.output
    assert len(pd.read_parquet(out / "results.parquet")) == n and len(pd.read_csv(out / "results.csv")) == n

    res = _invoke("export", str(tmp_path / "nowhere"))
    assert res.exit_code == 2 and "no run store" in res.text


def test_run_flag_errors_are_clear(tmp_path: Path, probeset: Path) -> None:
    res = _invoke("run", "--suite", "grounding", "--probe-set", str(probeset), "--model", "name=x,model=m", "--no-progress")
    assert res.exit_code == 2 and "names no backend" in res.text and "Traceback" not in res.output
    res = _invoke("run", "--suite", "grounding", "--probe-set", str(probeset), "--no-progress")  # no model at all
    assert res.exit_code == 2 and "key 'models'" in res.text
    res = _invoke("run", "--no-progress")
    assert res.exit_code == 2 and "--probe-set and --model" in res.text


def test_parse_model_flag() -> None:
    m = parse_model_flag("name=a,backend=openai,model=Qwen/Qwen2.5-VL,base_urls=http://h1/v1;http://h2/v1,"
                         "max_concurrency=8,text_only=true,timeout_s=2.5")
    assert m == {"name": "a", "backend": "openai", "model": "Qwen/Qwen2.5-VL", "base_urls": ["http://h1/v1", "http://h2/v1"],
                 "max_concurrency": 8, "text_only": True, "timeout_s": 2.5}
    assert parse_model_flag("backend=openai,model=m")["name"] == "openai"
    with pytest.raises(ConfigError, match="key=value"):
        parse_model_flag("backend=openai,oops")


def test_probe_set_entries_resolve_paths_but_keep_named_sources(tmp_path: Path, monkeypatch) -> None:
    from medvlm_audit.config import flag_overrides, load_config

    monkeypatch.chdir(tmp_path)
    flags = flag_overrides(probe_sets=["phantom", "vqa-rad:/data/VQA_RAD", "sets/mimic", "/abs/set"])
    assert flags["probe_sets"] == ["phantom", "vqa-rad:/data/VQA_RAD", str(tmp_path / "sets/mimic"), "/abs/set"]
    (tmp_path / "cfg").mkdir()
    cfg = tmp_path / "cfg" / "stress.yaml"
    cfg.write_text("suite: stress\nprobe_sets: [phantom, 'slake:/data/Slake', items.jsonl]\n"
                   "models: [{name: a, backend: stress_reference, kind: first_option}]\n")
    # entries of the file are relative to the file; benchmark and phantom sources are not paths
    assert load_config(cfg).probe_sets == ["phantom", "slake:/data/Slake", str(tmp_path / "cfg" / "items.jsonl")]
    # a flag replaces them, relative to the working directory
    assert load_config(cfg, flag_overrides(probe_sets=["x.jsonl"])).probe_sets == [str(tmp_path / "x.jsonl")]


def test_build_phantom(tmp_path: Path) -> None:
    out = tmp_path / "ph"
    res = _invoke("build", "phantom", "--out", str(out), "--n-cases", "60", "--n-train", "60")
    assert res.exit_code == 0, res.output
    assert "60 cases" in res.output
    from medvlm_audit.suites.grounding.probeset import ProbeSet

    assert len(ProbeSet.load(out / "probeset")) == 60 and len(ProbeSet.load(out / "train")) == 60
    res = _invoke("build", "phantom", "--out", str(tmp_path / "x"), "--n-cases", "10")
    assert res.exit_code == 2 and "n_cases must be at least 60" in res.text and "Traceback" not in res.output


@pytest.mark.slow
def test_stdout_carries_only_the_paths_written(tmp_path: Path) -> None:
    """Progress and logs on stderr, the paths of what was written on stdout: `$(medvlm-audit export RUN)` works."""
    out = tmp_path / "stress-demo"
    res = CliRunner().invoke(app, ["demo", "--suite", "stress", "--out", str(out)])
    assert res.exit_code == 0, res.output
    paths = res.stdout.splitlines()
    assert [Path(p).name for p in paths] == ["results.parquet", "results.csv", "report.html"]
    assert all(Path(p).is_file() for p in paths)
    assert "trials" in res.stderr and "writing the report" in res.stderr
    # progress without a terminal: plain lines with whole counts, never a truncated bar
    assert "first-option:" in res.stderr and " answers (100%)" in res.stderr and "…" not in res.stderr
    for args, names in ((["export", str(out)], ["results.parquet", "results.csv"]),
                        (["report", str(out), "--B", "50"], ["report.html"])):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        assert [Path(p).name for p in res.stdout.splitlines()] == names, res.stdout
        assert all(Path(p).is_file() for p in res.stdout.splitlines())
    res = CliRunner().invoke(app, ["build", "phantom", "--out", str(tmp_path / "ph"), "--n-cases", "60",
                                   "--n-train", "60"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == [str(tmp_path / "ph" / "probeset"), str(tmp_path / "ph" / "train")]


def test_skipped_conditions_are_explained_with_counts(tmp_path: Path) -> None:
    from medvlm_audit.runner import skipped_lines

    summary = {"n_skipped": 5, "skipped_by": {"target_mask: no target box": 3, "swap: no swap partner": 2}}
    lines = skipped_lines(summary)
    assert "do not apply to their case" in lines[0] and lines[0].startswith("5 skipped conditions")
    assert "mask" not in lines[0]  # the head line is every suite's; the reasons below it are the suite's own
    assert "  target_mask: no target box: 3" in lines and "  swap: no swap partner: 2" in lines
    assert skipped_lines({"n_skipped": 0}) == []
