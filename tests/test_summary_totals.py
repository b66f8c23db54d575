"""Missing log-probabilities are counted and re-askable (issue 14, item 7); the end-of-run summary shows the
store's totals, not only this invocation (item 10)."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from conftest import make_tiny_probeset

from medvlm_audit.models.base import Decoding, ErrorInfo, LocalModel, ModelInput, Response
from medvlm_audit.runner import execute
from medvlm_audit.store import RunStore
from medvlm_audit.suites.grounding import GroundingOptions, plan_grounding
from medvlm_audit.testing.fake_openai import ThreadedFakeServer


class Flaky(LocalModel):
    """First call per input: every 3rd input answers without log-probabilities, every 5th is a 500 error;
    later calls answer fully. ``never_logprobs`` models a backend that never returns them."""

    modality = "multimodal"

    def __init__(self, name: str, never_logprobs: bool = False) -> None:
        self.name = name
        self.never = never_logprobs
        self.seen: dict[str, int] = {}
        self.asked: set[str] = set()
        self.calls = 0

    def predict(self, inputs: Sequence[ModelInput]) -> list[Response]:
        out = []
        for inp in inputs:
            self.calls += 1
            sig = repr(inp.describe())
            i = self.seen.setdefault(sig, len(self.seen))
            first = sig not in self.asked
            self.asked.add(sig)
            if first and i % 5 == 4:
                out.append(Response(None, error=ErrorInfo("http_5xx", "HTTP 500", 3)))
            elif self.never or (first and i % 3 == 2):
                out.append(Response("Yes"))
            else:
                out.append(Response("Yes", (("Yes", -0.1), ("No", -2.4))))
        return out


def _run(store, plan, models, **kw):
    return asyncio.run(execute(store, plan, models, progress=False, **kw))


def test_missing_logprobs_are_counted_and_retried_and_store_totals_reported(tmp_path: Path) -> None:
    plan = plan_grounding([make_tiny_probeset(tmp_path / "data", n=12)], GroundingOptions(conditions=("original",)))
    store = RunStore(tmp_path / "run.sqlite")
    a, b = Flaky("a"), Flaky("never", never_logprobs=True)
    first = _run(store, plan, [a, b]).as_dict()
    n = 12
    n_err, n_nolp = sum(i % 5 == 4 for i in range(n)), sum(i % 3 == 2 and i % 5 != 4 for i in range(n))
    assert first["per_model"]["a"]["errors"] == n_err
    assert first["per_model"]["a"]["missing_logprobs"] == n_nolp
    tot = first["store"]["a"]
    assert tot["answered"] == n and tot["errors"] == {"http_5xx": n_err} and tot["not_asked"] == 0
    assert tot["logprobs_requested"] == n - n_err and tot["logprobs_missing"] == n_nolp
    assert tot["confidence_coverage"] == round((n - n_err - n_nolp) / (n - n_err), 4)
    assert first["store"]["never"]["confidence_coverage"] == 0.0
    # a plain resume asks nothing, and its summary still shows what the store lacks
    again = _run(store, plan, [Flaky("a"), Flaky("never", True)]).as_dict()
    assert again["per_model"]["a"]["asked"] == 0 and again["store"]["a"]["errors"] == {"http_5xx": n_err}
    assert again["store"]["a"]["logprobs_missing"] == n_nolp
    # --retry-errors: errors and missing log-probabilities of a model that returns them; not the 'never' model
    retried = _run(store, plan, [a, b], retry_errors=True).as_dict()
    assert retried["per_model"]["a"]["asked"] == n_err + n_nolp
    assert retried["per_model"]["never"]["asked"] == n_err  # its errors only
    assert retried["store"]["a"]["confidence_coverage"] == 1.0 and retried["store"]["a"]["errors"] == {}
    # --retry-missing-logprobs asks them again whatever the model
    b_calls = b.calls
    _run(store, plan, [a, b], retry_missing_logprobs=True)
    assert b.calls - b_calls == n
    store.close()


@pytest.mark.slow
def test_cli_summary_shows_store_totals_and_retry_recovers_missing_logprobs(tmp_path: Path) -> None:
    make_tiny_probeset(tmp_path / "data", n=12)
    run_dir = tmp_path / "run"
    env = {**os.environ, "COLUMNS": "250"}
    with ThreadedFakeServer(fault_rates={"nologprobs": 0.4}, max_faults_per_key=1, seed=1) as srv:
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(yaml.safe_dump({
            "suite": "grounding", "probe_sets": [str(tmp_path / "data" / "probeset")], "run_dir": str(run_dir),
            "models": [{"name": "vlm", "backend": "openai", "model": "fake-vlm", "base_urls": [srv.base_url]}]}))
        cmd = [sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress", "--no-report"]
        first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
        assert first.returncode == 0, first.stdout + first.stderr
        db = sqlite3.connect(run_dir / "run.sqlite")
        missing = db.execute("SELECT COUNT(*) FROM responses WHERE top_logprobs IS NULL").fetchone()[0]
        total = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        db.close()
        assert missing > 0
        text = " ".join((first.stdout + first.stderr).split())
        assert "coverage" in text
        assert f"{100 * (total - missing) / total:.1f}% ({missing} missing)" in text
        retry = subprocess.run(cmd + ["--retry-errors"], capture_output=True, text=True, env=env, timeout=120)
        assert retry.returncode == 0, retry.stdout + retry.stderr
        assert "100.0% (0 missing)" in " ".join((retry.stdout + retry.stderr).split())
    db = sqlite3.connect(run_dir / "run.sqlite")
    assert db.execute("SELECT COUNT(*) FROM responses WHERE top_logprobs IS NULL").fetchone()[0] == 0
    db.close()


def _as_old_store(path: Path) -> None:
    """Rewrite a store's requests table as a version before issue 23's ``logprobs`` column wrote it."""
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE old_requests(key TEXT PRIMARY KEY, model TEXT NOT NULL, input TEXT NOT NULL);
        INSERT INTO old_requests SELECT key, model, input FROM requests;
        DROP TABLE requests;
        ALTER TABLE old_requests RENAME TO requests;
    """)
    db.close()


def test_logprobs_flag_is_a_column_and_an_older_store_is_migrated(tmp_path: Path) -> None:
    """The request's log-probabilities flag is stored as a column (the totals need not parse every stored
    description); a store written before the column existed reads the same read-only, gets the column filled
    from the descriptions on its first writable open, and resumes asking nothing."""
    plan = plan_grounding([make_tiny_probeset(tmp_path / "data", n=12)], GroundingOptions(conditions=("original",)))
    path = tmp_path / "run.sqlite"
    store = RunStore(path)
    nolp = Flaky("nolp")
    # one model asks without log-probabilities: the flag must differ between the models' rows
    _run(store, plan, [Flaky("a"), nolp], model_decoding={"nolp": Decoding(logprobs=False)})
    flags = dict(store.db.execute("SELECT model, SUM(logprobs) FROM requests GROUP BY model"))
    assert flags == {"a": 12, "nolp": 0}
    assert flags["a"] == store.db.execute(
        "SELECT SUM(json_extract(input, '$.decoding.logprobs') = 1) FROM requests WHERE model = 'a'").fetchone()[0]
    totals, missing = store.model_totals(), store.missing_logprob_keys()
    assert totals["a"]["logprobs_requested"] > 0 and totals["nolp"]["logprobs_requested"] == 0
    store.close()

    _as_old_store(path)
    with RunStore(path, readonly=True) as old:  # read-only: no column, the descriptions are read
        assert "logprobs" not in old._columns("requests")
        assert old.model_totals() == totals and old.missing_logprob_keys() == missing
    migrated = RunStore(path)
    assert dict(migrated.db.execute("SELECT model, SUM(logprobs) FROM requests GROUP BY model")) == flags
    assert migrated.model_totals() == totals and migrated.missing_logprob_keys() == missing
    again = _run(migrated, plan, [Flaky("a"), Flaky("nolp")], model_decoding={"nolp": Decoding(logprobs=False)})
    assert again.as_dict()["per_model"]["a"]["asked"] == 0 and again.as_dict()["store"] == totals
    migrated.close()


def test_effective_decoding_stored_once_per_distinct_value(tmp_path: Path) -> None:
    """The store serialises an answer's effective decoding once per dict object (a client hands back the same
    one for every answer of a decoding), and a different value gets its own row."""
    store = RunStore(tmp_path / "run.sqlite")
    eff = {"server": "vllm", "max_tokens": 512, "temperature": 0.0}
    store.put_responses([(f"k{i}", Response("Yes", effective=eff)) for i in range(3)])
    store.put_responses([("k3", Response("No", effective=dict(eff, temperature=0.7)))])
    rows = store.db.execute("SELECT d.key, e.decoding FROM answer_details d JOIN effective_decodings e "
                            "ON e.id = d.effective ORDER BY d.key").fetchall()
    assert [json.loads(t)["temperature"] for _, t in rows] == [0.0, 0.0, 0.0, 0.7]
    assert store.db.execute("SELECT COUNT(*) FROM effective_decodings").fetchone()[0] == 2
    assert store.get_response("k1").effective == eff
    store.close()
