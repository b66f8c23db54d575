"""The report's "Resolved run configuration" says the decoding the requests were sent where a suite overrode
the config's shared decoding (faithfulness 2048 new tokens, judges 512; audit2 E)."""

from __future__ import annotations

import html
import re
from pathlib import Path

from medvlm_audit import api
from medvlm_audit.report.html import config_rows


def _config_block(page: Path) -> str:
    text = page.read_text()
    block = text[text.index("Resolved run configuration"):]
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", block)))


def test_config_rows_say_what_was_sent_beside_the_config() -> None:
    cfg = {"decoding": {"max_new_tokens": 16, "temperature": 0.0, "seed": None}}
    rows = dict(config_rows(cfg, None, {"max_new_tokens": [512], "temperature": [0.0, 0.7], "seed": [42, 43]}))
    assert rows["Decoding"] == ("max new tokens 512 as sent (config 16), temperature 0, 0.700 as sent (config 0), "
                                "seed 42, 43 as sent (config not set)")
    assert dict(config_rows(cfg, None, {"max_new_tokens": [16]}))["Decoding"] == "max new tokens 16, temperature 0"


def test_faithfulness_report_shows_the_max_new_tokens_sent(tmp_path: Path) -> None:
    res = api.run(api.embedded_config("faithfulness", tmp_path / "f", n_items=4), progress=False)
    with api._open(res.run_dir) as store:
        sent = api.decoding_sent(store)
    assert sent["max_new_tokens"] == [512, 2048]  # the judges' cap and the reasoners' cap, never the config's 16
    block = _config_block(api.report(res.run_dir, B=50))
    assert "max new tokens 512, 2,048 as sent (config 16)" in block
    assert "Decoding max new tokens 16," not in block
