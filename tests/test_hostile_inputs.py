"""Issue 22: bad inputs get one named line before anything is written, and a failed start leaves nothing behind
(the same command works once the cause is fixed). Each test here is a row of docs/hostile-inputs.md."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from medvlm_audit import api
from medvlm_audit.config import ModelSpec, validate_config
from medvlm_audit.errors import ConfigError
from medvlm_audit.models.registry import check_model_spec

BASE = {"suite": "grounding", "probe_sets": ["x"], "models": [{"name": "a", "backend": "openai"}]}


@pytest.mark.parametrize(("over", "needle"), [
    ({"workers": 1e20}, "workers"), ({"workers": 0}, "workers"), ({"workers": 10_000}, "workers"),
    ({"repeats": 10**9}, "repeats"), ({"store_lock_wait_s": math.inf}, "store_lock_wait_s"),
    ({"store_lock_wait_s": math.nan}, "store_lock_wait_s"), ({"decoding": {"temperature": math.nan}}, "temperature"),
    ({"decoding": {"temperature": math.inf}}, "temperature"), ({"decoding": {"top_p": 0}}, "top_p"),
    ({"decoding": {"max_new_tokens": 0}}, "max_new_tokens"), ({"decoding": {"num_beams": 10**6}}, "num_beams"),
])
def test_run_config_values_out_of_range_are_one_named_line(over: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as e:
        validate_config({**BASE, **over})
    assert "Traceback" not in str(e.value)


@pytest.mark.parametrize(("params", "needle"), [
    ({"timeout_s": math.inf}, "'timeout_s' = inf: must be a finite number"),
    ({"timeout_s": math.nan}, "'timeout_s' = nan: must be a finite number"),
    ({"timeout_s": 0}, "a timeout must be > 0"), ({"timeout_s": -1}, "a timeout must be > 0"),
    ({"timeout_s": 1e12}, "a timeout must be > 0 and at most"),
    ({"max_concurrency": 1e20}, "'max_concurrency' = 1e+20: must be a whole number in [1, 4096]"),
    ({"max_concurrency": 0}, "'max_concurrency' = 0"), ({"max_retries": -1}, "'max_retries' = -1"),
    ({"backoff_base_s": math.inf}, "'backoff_base_s' = inf"),
    ({"max_concurency": 4}, "unknown key 'max_concurency' (did you mean max_concurrency?)"),
    ({"timout_s": 4}, "unknown key 'timout_s' (did you mean timeout_s?)"),
])
def test_model_keys_and_values_are_checked_with_did_you_mean(params: dict, needle: str) -> None:
    spec = ModelSpec(name="m", backend="openai", model="x", base_urls="http://127.0.0.1:9/v1", **params)
    with pytest.raises(ConfigError) as e:
        check_model_spec(spec)
    assert needle in str(e.value)
    assert str(e.value).startswith("model 'm' (backend openai)")


def _faith_cfg(run_dir: Path, **over) -> dict:
    cfg = {"suite": "faithfulness", "run_dir": str(run_dir), "probe_sets": ["phantom"], "phantom_items": 6,
           "models": [{"name": "cue-admitter", "backend": "faithfulness-reference", "behaviour": "cue-admitter"}],
           "judges": [{"name": "reference-judge", "backend": "faithfulness-reference",
                       "behaviour": "reference-judge"}],
           "conditions": ["baseline", "tb_rad:aligned"]}
    cfg.update(over)
    return cfg


def test_a_bad_knowledge_base_is_refused_before_the_run_folder_exists(tmp_path: Path) -> None:
    kb = tmp_path / "kb.json"
    kb.write_text("{not json")
    run_dir = tmp_path / "runs" / "faith"
    with pytest.raises(ConfigError, match=r"option 'kb'.*kb.json: not JSON"):
        api.run(_faith_cfg(run_dir, kb=str(kb)), progress=False)
    assert not (tmp_path / "runs").exists()  # nothing written, not even the phantom items


def test_a_misspelt_judge_key_is_refused_before_anything_is_asked_or_written(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    judges = [{"name": "api-judge", "backend": "openai", "model": "j", "base_urls": "http://127.0.0.1:9/v1",
               "max_concurency": 2}]
    with pytest.raises(ConfigError, match=r"model 'api-judge'.*did you mean max_concurrency"):
        api.run(_faith_cfg(run_dir, judges=judges), progress=False)
    assert not run_dir.exists()


def test_a_failed_start_leaves_an_existing_run_folder_as_it_was(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("mine")
    bad = [{"name": "m", "backend": "openai", "model": "x", "base_urls": "http://127.0.0.1:9/v1", "timeout_s": 0}]
    with pytest.raises(ConfigError, match="timeout"):
        api.run(_faith_cfg(run_dir, models=bad), progress=False)
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]


def test_the_same_command_works_once_the_cause_is_fixed(tmp_path: Path) -> None:
    kb = tmp_path / "kb.json"
    kb.write_text("[]")
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError):
        api.run(_faith_cfg(run_dir, kb=str(kb)), progress=False)
    from medvlm_audit.suites.faithfulness.kb import phantom_kb

    kb.write_text(json.dumps(phantom_kb().to_dict()))
    res = api.run(_faith_cfg(run_dir, kb=str(kb)), progress=False)
    assert res.run_dir == run_dir and (run_dir / "run.sqlite").exists()


def test_reports_preflight_lists_every_missing_piece_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from medvlm_audit import extras

    monkeypatch.setattr(extras, "_absent", lambda m: m in ("sacrebleu", "rouge_score"))
    monkeypatch.setattr(extras, "torchxrayvision_data_dir", lambda: None)
    cfg = {"suite": "reports", "run_dir": str(tmp_path / "run"), "probe_sets": ["phantom"],
           "models": [{"name": "ngram-reporter", "backend": "report_reference"}], "phantom_images": 12,
           "clinical_metrics": [{"name": "chexbert", "path": str(tmp_path / "no-such-chexbert.pth")}]}
    with pytest.raises(ConfigError) as e:
        api.run(cfg, progress=False)
    msg = str(e.value)
    # the missing installs are one problem with one command; the wrong path is the second, listed at once
    assert "2 problems" in msg and "'reports' extra" in msg and "sacrebleu, rouge_score" in msg
    assert "torchxrayvision" in msg and "install with: pip install 'medvlm-audit[reports]'" in msg
    assert "no-such-chexbert.pth does not exist" in msg
    assert not (tmp_path / "run").exists()


# -------------------------------------------------------------------------------- corpora and item files


def _corpus(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_an_overlong_corpus_line_is_refused_naming_file_and_row(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from medvlm_audit.suites.reports.corpus import CorpusError, read_corpus

    monkeypatch.setenv("MEDVLM_MAX_LINE_BYTES", "1000")
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"id": 1, "text": "a", "group": "F"}) + "\n"
                 + json.dumps({"id": 2, "text": "x " * 5000, "group": "M"}) + "\n")
    with pytest.raises(CorpusError, match=r"c.jsonl, row 2: longer than 1,000 bytes.*MEDVLM_MAX_LINE_BYTES"):
        read_corpus(p)


def test_the_default_line_limit_refuses_a_100_mb_line_without_reading_it_whole(tmp_path: Path) -> None:
    import tracemalloc

    from medvlm_audit.jsonl import DEFAULT_MAX_LINE_BYTES
    from medvlm_audit.suites.reports.corpus import CorpusError, read_corpus

    p = tmp_path / "big.jsonl"
    with p.open("wb") as f:
        f.write(b'{"id": 1, "text": "a", "group": "F"}\n{"id": 2, "group": "M", "text": "')
        chunk = b"word " * 200_000
        for _ in range(100):  # 100 MB on one line
            f.write(chunk)
        f.write(b'"}\n')
    tracemalloc.start()
    try:
        with pytest.raises(CorpusError, match="row 2: longer than"):
            read_corpus(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * DEFAULT_MAX_LINE_BYTES  # at most one line's limit in memory, never the 100 MB


def test_duplicate_prediction_ids_are_refused_or_kept_with_the_flag(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from medvlm_audit.cli import app

    rows = [{"id": i, "text": f"heart lungs clear {'breast' if i % 2 else 'prostate'}", "group": "FM"[i % 2]}
            for i in range(12)]
    ref = _corpus(tmp_path / "ref.jsonl", rows)
    pred = _corpus(tmp_path / "pred.jsonl", [*rows, {"id": 3, "text": "again", "group": "F"}])
    out = tmp_path / "out"
    args = ["corpus-audit", "--reference", str(ref), "--predictions", str(pred), "--out", str(out),
            "--bootstrap", "10", "--permutations", "10", "--semantic", "off", "--bertscore", "off"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert "predictions" in r.output and "row 13: id '3' repeats row 4" in r.output and "Traceback" not in r.output
    assert not out.exists()
    r = CliRunner().invoke(app, [*args, "--allow-duplicate-ids"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_non_utf8_stress_item_file_names_file_and_line(tmp_path: Path, suffix: str) -> None:
    from medvlm_audit.suites.stress.items import ItemError, load_items

    p = tmp_path / f"items{suffix}"
    if suffix == ".jsonl":
        p.write_bytes(b'{"item_id": "a"}\n{"item_id": "caf\xe9"}\n')
        needle = r"items.jsonl:2: not UTF-8"
    else:
        p.write_bytes(b"item_id,question\na,b\nc,caf\xe9\n")
        needle = r"items.csv, line \d+: not UTF-8"
    with pytest.raises(ItemError, match=needle):
        load_items(p)


def test_a_non_utf8_faithfulness_item_file_names_file_and_line(tmp_path: Path) -> None:
    from medvlm_audit.suites.faithfulness.items import ItemError, load_items

    p = tmp_path / "items.jsonl"
    p.write_bytes(b'\n\n{"id": "caf\xe9"}\n')
    with pytest.raises(ItemError, match=r"items.jsonl:3: not UTF-8"):
        load_items(p)


def test_every_problem_before_the_run_is_listed_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second-stage hf judge without the hf extra, a misspelt subject key and a bad KB: one error listing all
    three, before anything is written (was: one at a time, the judge's only after the first stage ran)."""
    from medvlm_audit import extras

    monkeypatch.setattr(extras, "_absent", lambda m: m == "torch")
    kb = tmp_path / "kb.json"
    kb.write_text("{")
    subjects = [{"name": "api", "backend": "openai", "model": "x", "base_urls": "http://127.0.0.1:9/v1",
                 "timeout": 3}]
    judges = [{"name": "hf-judge", "backend": "hf", "model_id": "tiny"}]
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError) as e:
        api.run(_faith_cfg(run_dir, models=subjects, judges=judges, kb=str(kb)), progress=False)
    msg = str(e.value)
    assert msg.startswith("3 problems before the run:")
    assert "unknown key 'timeout' (did you mean timeout_s?)" in msg
    assert "model 'hf-judge' (backend hf) needs the optional 'hf' extra" in msg
    assert "option 'kb'" in msg
    assert not run_dir.exists()


def test_a_start_refused_by_another_runs_lock_removes_nothing(tmp_path: Path) -> None:
    from medvlm_audit.errors import RunLockedError
    from medvlm_audit.store import RunLock

    run_dir = tmp_path / "run"
    held = RunLock(run_dir).acquire()  # another process's run (here: this one) created the folder and holds it
    try:
        with pytest.raises(RunLockedError):
            api.run(_faith_cfg(run_dir), progress=False)
        assert (run_dir / "run.lock").exists() and (run_dir / "phantom_vqa" / "items.jsonl").exists()
    finally:
        held.release()


@pytest.mark.parametrize(("model_line", "needle"), [
    ("{name: a, backend: openai, model: m, base_urls: 'http://127.0.0.1:9/v1', max_concurency: 4}",
     "unknown key 'max_concurency' (did you mean max_concurrency?)"),
    ("{name: a, backend: openai, model: m, base_urls: 'http://127.0.0.1:9/v1', timeout_s: .inf}",
     "key 'timeout_s' = inf: must be a finite number"),
])
def test_cli_run_with_a_bad_model_entry_is_one_named_line_and_writes_nothing(tmp_path: Path, model_line: str,
                                                                            needle: str) -> None:
    from typer.testing import CliRunner

    from medvlm_audit.cli import app

    run_dir = tmp_path / "runs" / "x"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"suite: faithfulness\nprobe_sets: [phantom]\nphantom_items: 6\nrun_dir: {run_dir}\n"
                   f"models:\n  - {model_line}\n")
    res = CliRunner().invoke(app, ["run", str(cfg), "--no-progress"])
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output
    assert not (tmp_path / "runs").exists()
