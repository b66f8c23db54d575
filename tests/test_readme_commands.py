"""Every `medvlm-audit run` command line in the README and docs/ names what to run: a config file, or --suite
(a run from flags alone without it stops with "key 'suite' is missing"; the README's flags-alone and fake-server
examples did)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _blocks(text: str) -> list[str]:
    """The fenced code blocks of a Markdown text (any language)."""
    blocks, cur = [], None
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if cur is None:
                cur = []
            else:
                blocks.append("\n".join(cur))
                cur = None
        elif cur is not None:
            cur.append(line)
    return blocks


def _run_commands() -> list[tuple[str, str]]:
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in _blocks(doc.read_text(encoding="utf-8")):
            text = re.sub(r"\\\n\s*", " ", block)  # continuation lines joined
            for line in text.splitlines():
                line = line.split(" #", 1)[0].strip().removeprefix("- run:").removeprefix("- ").strip()
                if line.startswith("medvlm-audit run "):
                    out.append((doc.name, line))
    return out


def test_every_documented_run_names_a_config_or_a_suite() -> None:
    commands = _run_commands()
    assert len(commands) >= 10
    bad = []
    for doc, line in commands:
        args = shlex.split(line)[2:]
        has_config = bool(args) and not args[0].startswith("-")
        if not has_config and "--suite" not in args:
            bad.append(f"{doc}: {line}")
    assert not bad, bad
