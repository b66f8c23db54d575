"""`demo --set`: every bad key or value is one line naming the key typed and listing the valid keys (audit2 K)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from medvlm_audit.cli import app
from medvlm_audit.suites import get_suite

ROOT = Path(__file__).resolve().parents[1]

BAD = [
    (["--set", "log=1"], "log", "n_cases"),
    (["--set", "bogus=1"], "bogus", "vision_probe"),
    (["--set", "gemma=2"], "gemma", "true or false"),
    (["--set", "n_cases=10"], "n_cases", ">= 60"),
    (["--suite", "reports", "--set", "n_images=abc"], "n_images", "whole number >= 2"),
    (["--suite", "reports", "--set", "n_images=2.9"], "n_images", "whole number >= 2"),
    (["--suite", "reports", "--set", "n_images=-1"], "n_images", "whole number >= 2"),
    (["--suite", "reports", "--set", "samples=1.5"], "samples", "whole number >= 1"),
    (["--suite", "reports", "--set", "bogus=1"], "bogus", "n_images"),
    (["--suite", "faithfulness", "--set", "n_items=abc"], "n_items", "1..10000"),
    (["--suite", "faithfulness", "--set", "n_items=0"], "n_items", "1..10000"),
    (["--suite", "faithfulness", "--set", "log=1"], "log", "n_items"),
    (["--suite", "stress", "--set", "bogus=1"], "bogus", "none"),
]


@pytest.mark.parametrize(("args", "key", "valid"), BAD)
def test_a_bad_demo_option_is_one_line_naming_the_key(tmp_path: Path, args: list[str], key: str, valid: str) -> None:
    out = tmp_path / "o"
    res = CliRunner().invoke(app, ["demo", "--out", str(out), "--no-progress", *args])
    assert res.exit_code == 2, res.output
    msg = res.output.strip()
    assert len(msg.splitlines()) == 1 and msg.startswith(f"error: demo --set {key}"), msg
    assert valid in msg
    for internal in ("multiple values", "invalid literal", "phantom_images", "phantom_items", "Traceback"):
        assert internal not in msg
    assert not out.exists()  # refused before anything is written


def test_api_demo_options_never_collide_with_its_own_arguments(tmp_path: Path) -> None:
    from medvlm_audit import api
    from medvlm_audit.errors import ConfigError

    with pytest.raises(ConfigError, match="no option 'log'"):
        api.demo("stress", tmp_path / "o", options={"log": 1}, progress=False, log=lambda *_: None)


def test_readme_documents_every_suites_demo_options() -> None:
    readme = (ROOT / "README.md").read_text()
    rows = set(re.findall(r"^\| (\w+) \| `(\w+)` \|", readme, flags=re.M))
    for suite in ("grounding", "faithfulness", "reports", "stress"):
        spec = get_suite(suite).embedded_options
        assert {k for s, k in rows if s == suite} == set(spec), suite
        for key, opt in spec.items():
            row = next(line for line in readme.splitlines() if line.startswith(f"| {suite} | `{key}` |"))
            assert f"({str(opt.default).lower()})" in row, row
    assert "demo --gemma" not in readme  # the hidden deprecated flag is not what the README teaches
