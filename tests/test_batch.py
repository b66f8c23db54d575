"""Batch inference: batch: true runs, export -> offline runner -> ingest, crash safety, errors and expiry."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import make_tiny_probeset

from medvlm_audit import api
from medvlm_audit.batch import offline
from medvlm_audit.batch.lines import BatchError, chunks, parse_output_line, read_output, request_line
from medvlm_audit.models.base import Decoding, ImageData, Message, ModelInput
from medvlm_audit.models.openai_compat import OpenAIChatModel
from medvlm_audit.testing.fake_batches import BatchFaults
from medvlm_audit.testing.fake_openai import ThreadedFakeServer, completion_body, prompt_key
from medvlm_audit.testing.run_batch import run_batch

SECRET = "sk-batch-test-7d1e-DO-NOT-LEAK"
RESPONSE_COLS = "key, text, top_logprobs, finish_reason, prompt_tokens, completion_tokens, error_kind"


def _cfg(tmp: Path, base_url: str, run_dir: str, batch: bool, **kw) -> dict:
    common = {"backend": "openai", "model": "fake-vlm", "base_urls": [base_url], "api_key_env": "MEDVLM_BATCH_KEY",
              "timeout_s": 5, "backoff_base_s": 0.01}
    if batch:
        common.update(batch=True, batch_poll_s=0.02, **kw)
    return {"suite": "grounding", "probe_sets": [str(tmp / "data" / "probeset")], "run_dir": str(tmp / run_dir),
            "models": [{"name": "vlm", **common}, {"name": "vlm-text", **common, "text_only": True}]}


def _rows(run_dir: Path, sql: str) -> list[tuple]:
    db = sqlite3.connect(run_dir / "run.sqlite")
    try:
        return sorted(db.execute(sql).fetchall(), key=repr)
    finally:
        db.close()


def _responses(run_dir: Path) -> list[tuple]:
    return _rows(run_dir, f"SELECT {RESPONSE_COLS} FROM responses")


def _trials(run_dir: Path) -> list[tuple]:
    return _rows(run_dir, "SELECT * FROM trials")


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    make_tiny_probeset(tmp_path / "data", n=8)
    monkeypatch.setenv("MEDVLM_BATCH_KEY", SECRET)
    return tmp_path


@pytest.fixture
def online(data: Path) -> Path:
    """The reference: the same run asked online."""
    with ThreadedFakeServer(api_key=SECRET) as srv:
        api.run(_cfg(data, srv.base_url, "online", False), progress=False)
    return data / "online"


def test_request_line_body_is_the_online_body(data: Path) -> None:
    """The body of a batch line is byte for byte what the online client sends (decoding contract included: on a
    vLLM server every sampling field is pinned, so a batch run on vLLM's run_batch runs the same decoding)."""
    m = OpenAIChatModel("m", "fake-vlm", "http://127.0.0.1:9/v1", server="vllm")
    img = ImageData.from_array(__import__("numpy").full((8, 8), 7, dtype="uint8"))
    inp = ModelInput((Message("system", "s"), Message("user", "Is there a nodule?")), (img,),
                     Decoding(max_new_tokens=5, seed=3, top_k=2), sample_index=2)
    line = json.loads(request_line(m, "k" * 64, inp))
    assert line["custom_id"] == "k" * 64 and line["method"] == "POST" and line["url"] == "/v1/chat/completions"
    assert line["body"] == json.loads(m.encode_payload(inp)) == m.request_body(inp)
    assert line["body"]["seed"] == 5 and line["body"]["top_k"] == 2 and line["body"]["repetition_penalty"] == 1.0
    assert line["body"]["min_p"] == 0 and line["body"]["presence_penalty"] == 0


def test_output_lines_parse_like_online_answers() -> None:
    body = {"messages": [{"role": "user", "content": "Is there an effusion?"}], "logprobs": True, "top_logprobs": 3}
    done = completion_body(body, prompt_key(body))
    cid, r = parse_output_line({"custom_id": "a", "response": {"status_code": 200, "body": done}, "error": None}, "f")
    assert cid == "a" and r.error is None and r.text == done["choices"][0]["message"]["content"]
    assert r.top_logprobs is not None and len(r.top_logprobs) == 3
    _, e = parse_output_line({"custom_id": "b", "response": {"status_code": 400, "body": {"error": {"message": "x"}}},
                              "error": None}, "f")
    assert e.error is not None and e.error.kind == "http_4xx"
    _, x = parse_output_line({"custom_id": "c", "response": None,
                              "error": {"code": "batch_expired", "message": "window"}}, "f")
    assert x.error is not None and x.error.kind == "batch_expired"
    _, v = parse_output_line({"custom_id": "d", "response": {"status_code": 500, "request_id": "r", "body": None},
                              "error": "engine died"}, "f")  # vLLM's shape of a failed line
    assert v.error is not None and v.error.kind == "http_5xx"
    with pytest.raises(BatchError, match="line 2"):
        list(read_output(b'{"custom_id": "a", "response": {"status_code": 200, "body": {}}}\nnot json\n', "out"))


def test_chunks_respect_line_and_byte_limits() -> None:
    lines = [(str(i), b"x" * 10 + b"\n") for i in range(25)]
    assert [len(c) for c in chunks(lines, max_lines=10)] == [10, 10, 5]
    assert [len(c) for c in chunks(lines, max_bytes=55)] == [5, 5, 5, 5, 5]
    with pytest.raises(BatchError, match="more than a batch file may hold"):
        list(chunks([("k", b"y" * 100)], max_bytes=50))


def test_export_files_split_like_chunks(tmp_path: Path) -> None:
    lines = [(str(i), f"{i:02d}".encode() * 5 + b"\n") for i in range(23)]
    for kw in ({"max_lines": 10}, {"max_bytes": 55}, {}):
        out = tmp_path / f"r{len(kw)}{next(iter(kw), 'x')}.jsonl"
        paths, n = offline.write_parts(iter(lines), out, **kw)
        parts = list(chunks(lines, **kw))
        assert n == 23 and len(paths) == len(parts)
        assert [p.read_bytes() for p in paths] == [b"".join(ln for _, ln in c) for c in parts]
        assert paths[0] == out if len(parts) == 1 else paths[0].name.endswith("-001.jsonl")
    assert not list(tmp_path.glob(".*tmp"))


def test_batch_run_equals_online_run(data: Path, online: Path) -> None:
    """Same store keys, same parsed answers, same metrics, one batch per model, no chat request."""
    with ThreadedFakeServer(api_key=SECRET, batch=BatchFaults(delay_s=0.2)) as srv:
        res = api.run(_cfg(data, srv.base_url, "batched", True), progress=False)
        assert srv.stats.paths.get("/v1/chat/completions", 0) == 0  # nothing asked online
        assert srv.server.batches.stats.created == 1  # vlm-text's only input is vlm's no-image input: asked once
    assert _responses(data / "batched") == _responses(online)
    assert _trials(data / "batched") == _trials(online)
    assert res.summary.per_model["vlm"]["asked"] == len(_responses(online))
    m_online = api.tidy(online).drop(columns=["run_id", "latency_s"], errors="ignore")
    m_batch = api.tidy(data / "batched").drop(columns=["run_id", "latency_s"], errors="ignore")
    assert m_online.equals(m_batch)
    a = api.report(online, B=50)
    b = api.report(data / "batched", B=50)
    import pandas as pd

    assert pd.read_csv(a.parent / "metrics.csv").equals(pd.read_csv(b.parent / "metrics.csv"))
    # the API key never reaches the store, its exports or the request files
    for p in (data / "batched").rglob("*"):
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), p


def test_export_offline_runner_ingest_equals_online_and_ingest_twice_is_a_noop(data: Path, online: Path) -> None:
    cfg_path = data / "offline.yaml"
    cfg_path.write_text(yaml.safe_dump(_cfg(data, "http://127.0.0.1:9/v1", "offline", False)))
    paths, n = offline.export(cfg_path, "vlm", data / "req.jsonl", max_lines=10)
    assert n == len(_responses(online)) and [p.name for p in paths] == ["req-001.jsonl", "req-002.jsonl", "req-003.jsonl"]
    assert not (data / "offline" / "run.sqlite").exists()  # export writes nothing to the store
    outs = []
    for i, p in enumerate(paths):
        outs.append(data / f"out{i}.jsonl")
        run_batch(p, outs[-1])
    res = offline.ingest(cfg_path, outs)
    assert res.committed["vlm"] == n
    assert _responses(data / "offline") == _responses(online)
    assert _trials(data / "offline") == _trials(online)
    before = _rows(data / "offline", "SELECT * FROM responses")
    again = offline.ingest(data / "offline", outs)  # the run directory's recorded config
    assert again.committed == {"vlm": 0, "vlm-text": 0} and again.already == n
    assert _rows(data / "offline", "SELECT * FROM responses") == before  # not even created_at changed
    # a second export has nothing left to ask
    assert offline.export(data / "offline", "vlm", data / "again.jsonl")[1] == 0


def test_ingest_refuses_unknown_and_repeated_ids_before_writing(data: Path) -> None:
    cfg_path = data / "offline.yaml"
    cfg_path.write_text(yaml.safe_dump(_cfg(data, "http://127.0.0.1:9/v1", "offline", False)))
    (path,), _ = offline.export(cfg_path, "vlm", data / "req.jsonl")
    run_batch(path, data / "out.jsonl")
    lines = (data / "out.jsonl").read_text().splitlines()
    bad = [json.loads(x) for x in lines]
    for b in bad[:3]:
        b["custom_id"] = "0" * 64
        break
    bad[1]["custom_id"] = "f" * 64
    (data / "bad.jsonl").write_text("\n".join(json.dumps(b) for b in bad) + "\n")
    with pytest.raises(BatchError, match=r"^2 of 25 custom_ids are not inputs"):
        offline.ingest(cfg_path, [data / "bad.jsonl"])
    with pytest.raises(BatchError, match=r"^25 custom_id\(s\) appear more than once"):
        offline.ingest(cfg_path, [data / "out.jsonl", data / "out.jsonl"])
    assert not (data / "offline" / "run.sqlite").exists()


@pytest.mark.slow
def test_cli_dry_run_counts_missing_inputs(data: Path, online: Path) -> None:
    rows = offline.dry_run(online)
    assert {r["model"]: r["missing"] for r in rows} == {"vlm": 0, "vlm-text": 0}
    cfg_path = data / "fresh.yaml"
    cfg_path.write_text(yaml.safe_dump(_cfg(data, "http://127.0.0.1:9/v1", "fresh", False)))
    out = subprocess.run([sys.executable, "-m", "medvlm_audit", "batch", "export", str(cfg_path), "--dry-run"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"},
                         check=False)
    assert out.returncode == 0, out.stderr
    n = len(_responses(online))
    assert f"vlm: {n} of {n} inputs missing" in out.stderr
    assert "prompt tokens (estimated)" in out.stderr and not (data / "fresh").exists()
    same = subprocess.run([sys.executable, "-m", "medvlm_audit", "run", str(cfg_path), "--dry-run"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert same.returncode == 0 and f"vlm: {n} of {n} inputs missing" in same.stderr, same.stderr
    assert not (data / "fresh").exists()


def test_errored_and_expired_lines_are_stored_as_errors_and_reasked_by_retry_errors(data: Path, online: Path) -> None:
    with ThreadedFakeServer(api_key=SECRET, batch=BatchFaults(expire_after=20, fail_every=7)) as srv:
        cfg = _cfg(data, srv.base_url, "faulty", True)
        api.run(cfg, progress=False)
        kinds = [r[-1] for r in _responses(data / "faulty")]
        assert kinds.count("batch_expired") == 5 and kinds.count("http_4xx") == 2  # lines 7, 14 failed; 21-25 expired
        assert srv.server.batches.stats.created == 1
        api.run(cfg, progress=False)  # errors are answers: not asked again without --retry-errors
        assert srv.server.batches.stats.created == 1
        srv.server.batches.faults = BatchFaults()  # the provider behaves again
        api.run(cfg, progress=False, retry_errors=True)
        assert srv.server.batches.stats.created == 2
        assert srv.server.batches.stats.lines == 25 + 7  # the new batch held exactly the errored inputs
    assert _responses(data / "faulty") == _responses(online)


def test_partial_output_and_failed_batch(data: Path, online: Path) -> None:
    """Lines in neither file are not stored (the next run asks them); a failed batch stores batch_error."""
    with ThreadedFakeServer(api_key=SECRET, batch=BatchFaults(drop_every=5)) as srv:
        cfg = _cfg(data, srv.base_url, "partial", True)
        res = api.run(cfg, progress=False)
        assert len(_responses(data / "partial")) == 20 and res.summary.per_model["vlm"]["not_asked"] == 5
        srv.server.batches.faults = BatchFaults(failed=True)
        api.run(cfg, progress=False)
        assert [r[-1] for r in _responses(data / "partial")].count("batch_error") == 5
        srv.server.batches.faults = BatchFaults()
        api.run(cfg, progress=False, retry_errors=True)
        assert srv.server.batches.stats.created == 3
    assert _responses(data / "partial") == _responses(online)


def test_max_wait_leaves_the_batch_to_the_next_run(data: Path, online: Path) -> None:
    with ThreadedFakeServer(api_key=SECRET, batch=BatchFaults(delay_s=1.0)) as srv:
        cfg = _cfg(data, srv.base_url, "waiting", True, batch_max_wait_s=0.1)
        res = api.run(cfg, progress=False)
        assert res.summary.per_model["vlm"]["not_asked"] == 25 and not _responses(data / "waiting")
        time.sleep(1.0)
        api.run(cfg, progress=False)
        assert srv.server.batches.stats.created == 1  # the second run polled the same batch
    assert _responses(data / "waiting") == _responses(online)


def test_a_provider_failure_stores_no_errors_and_the_next_run_resumes(
        data: Path, online: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The batch API refusing the key (its 401 message echoes the credential) stores nothing and logs no key:
    the inputs are not asked, and the next run asks them."""
    with ThreadedFakeServer(api_key="another-key-entirely", batch=BatchFaults()) as srv:
        cfg = _cfg(data, srv.base_url, "refused", True)
        with monkeypatch.context() as m:
            m.setattr(api, "check_endpoints", lambda models, warn=None: None)  # let the run reach the batch API
            res = api.run(cfg, progress=False)
        err = capsys.readouterr().err
        assert "HTTP 401" in err and "[REDACTED]" in err and SECRET not in err
        assert res.summary.per_model["vlm"]["not_asked"] == 25 and not _responses(data / "refused")
        srv.server.api_key = SECRET
        api.run(cfg, progress=False)
        assert srv.server.batches.stats.created == 1
    assert _responses(data / "refused") == _responses(online)


def _store_batch_ids(run_dir: Path) -> list[str]:
    try:
        return [r[0] for r in _rows(run_dir, "SELECT batch_id FROM batches WHERE batch_id IS NOT NULL")]
    except sqlite3.Error:
        return []


@pytest.mark.slow
def test_sigkill_while_polling_then_rerun_creates_no_second_batch(data: Path, online: Path) -> None:
    env = {**os.environ, "MEDVLM_BATCH_KEY": SECRET}
    with ThreadedFakeServer(api_key=SECRET, batch=BatchFaults(delay_s=6.0)) as srv:
        cfg_path = data / "killed.yaml"
        cfg_path.write_text(yaml.safe_dump(_cfg(data, srv.base_url, "killed", True)))
        cmd = [sys.executable, "-m", "medvlm_audit", "run", str(cfg_path), "--no-progress", "--no-report",
               "--batch-poll-s", "0.1"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while not _store_batch_ids(data / "killed") and time.monotonic() < deadline:
            time.sleep(0.05)
        ids = _store_batch_ids(data / "killed")
        time.sleep(0.5)  # a few polls
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert len(ids) == 1 and srv.server.batches.stats.created == 1
        assert srv.server.batches.stats.polls >= 1 and not _responses(data / "killed")
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"resuming batch {ids[0]}" in out.stderr
        assert srv.server.batches.stats.created == 1  # polled the same batch, submitted none
    assert _responses(data / "killed") == _responses(online)
    assert SECRET not in out.stdout + out.stderr


def test_a_batch_created_just_before_a_kill_is_found_by_its_nonce(data: Path, online: Path) -> None:
    """Killed after the create request reached the provider but before its id was recorded: the next run lists
    the provider's batches, finds it by the submission's nonce and polls it."""
    import asyncio

    from medvlm_audit.batch import records
    from medvlm_audit.batch.client import BatchClient
    from medvlm_audit.store import RunStore

    with ThreadedFakeServer(api_key=SECRET, batch=BatchFaults()) as srv:
        cfg_path = data / "lost.yaml"
        cfg_path.write_text(yaml.safe_dump(_cfg(data, srv.base_url, "lost", False)))
        (path,), _ = offline.export(cfg_path, "vlm", data / "req.jsonl")
        keys = [json.loads(x)["custom_id"] for x in path.read_text().splitlines()]
        cfg = _cfg(data, srv.base_url, "lost", True)
        served = OpenAIChatModel("vlm", "fake-vlm", srv.base_url, api_key_env="MEDVLM_BATCH_KEY")
        client = BatchClient(served)

        async def submit() -> str:
            fid = await client.upload(path.read_bytes(), "x.jsonl")
            store = RunStore.open_dir(data / "lost")
            try:
                records.ensure(store)
                records.add(store, records.BatchRecord("nonce-1", "vlm", keys, fid, None, "uploaded"))
            finally:
                store.close()
            b = await client.create(fid, "24h", {"medvlm_nonce": "nonce-1"})  # its answer is "lost"
            return str(b["id"])

        bid = asyncio.run(submit())
        api.run(cfg, progress=False)
        assert srv.server.batches.stats.created == 1 and srv.server.batches.stats.lists >= 1
        assert _store_batch_ids(data / "lost") == [bid]
    assert _responses(data / "lost") == _responses(online)


def test_azure_batch_uses_the_deployment_routes(data: Path) -> None:
    """api_style azure: /openai/files and /openai/batches with the api-version; lines name the deployment."""
    with ThreadedFakeServer(api_key=SECRET, batch=BatchFaults()) as srv:
        online_cfg = _cfg(data, srv.root_url, "az-online", False)
        batch_cfg = _cfg(data, srv.root_url, "az-batch", True)
        for c in (online_cfg, batch_cfg):
            for m in c["models"]:
                m.update(api_style="azure", model="my-deployment")
        api.run(online_cfg, progress=False)
        api.run(batch_cfg, progress=False)
        assert srv.server.batches.stats.created == 1
        fid = next(iter(srv.server.batches.batches.values()))["input_file_id"]
        line = json.loads(srv.server.batches.contents[fid].splitlines()[0])
        assert line["url"] == "/chat/completions" and line["body"]["model"] == "my-deployment"
        assert srv.stats.api_versions  # the online path sent its api-version too
    assert _responses(data / "az-batch") == _responses(data / "az-online")


def test_a_batch_the_provider_no_longer_knows_is_submitted_again(data: Path, online: Path) -> None:
    with ThreadedFakeServer(api_key=SECRET, batch=BatchFaults(delay_s=30)) as srv:
        cfg = _cfg(data, srv.base_url, "gone", True, batch_max_wait_s=0.05)
        api.run(cfg, progress=False)
        assert srv.server.batches.stats.created == 1
        srv.server.batches.batches.clear()  # the provider forgot it
        srv.server.batches.faults = BatchFaults()
        res = api.run(cfg, progress=False)
        assert res.summary.per_model["vlm"]["not_asked"] == 25 and srv.server.batches.stats.created == 1
        api.run(cfg, progress=False)
        assert srv.server.batches.stats.created == 2
    assert _responses(data / "gone") == _responses(online)


def test_a_recorded_file_the_provider_refuses_is_uploaded_again(data: Path, online: Path) -> None:
    """Killed between upload and create, and the file is gone by the next run (the create answers 400): that
    submission is closed as abandoned and its inputs go out in a new file, in the same run."""
    from medvlm_audit.batch import records
    from medvlm_audit.store import RunStore

    with ThreadedFakeServer(api_key=SECRET, batch=BatchFaults()) as srv:
        cfg_path = data / "stale.yaml"
        cfg_path.write_text(yaml.safe_dump(_cfg(data, srv.base_url, "stale", False)))
        (path,), _ = offline.export(cfg_path, "vlm", data / "req.jsonl")
        keys = [json.loads(x)["custom_id"] for x in path.read_text().splitlines()]
        store = RunStore.open_dir(data / "stale")
        try:
            records.ensure(store)
            records.add(store, records.BatchRecord("nonce-2", "vlm", keys, "file-long-gone", None, "uploaded"))
        finally:
            store.close()
        api.run(_cfg(data, srv.base_url, "stale", True), progress=False)
        assert srv.server.batches.stats.created == 1 and srv.server.batches.stats.uploads == 1
    with RunStore.open_dir(data / "stale", readonly=True) as store:
        assert [(r["status"], r["done"]) for r in records.all_records(store)] == [("abandoned", 1), ("completed", 1)]
    assert _responses(data / "stale") == _responses(online)
