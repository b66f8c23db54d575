"""Every option and argument of every command (suite commands and sub-apps included) carries help text."""

from __future__ import annotations

import typer

from medvlm_audit.cli import app


def _walk(cmd, path: str):  # typer's (vendored) click commands and groups
    yield path, cmd
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from _walk(sub, f"{path} {name}")


def test_every_option_of_every_command_has_help() -> None:
    root = typer.main.get_command(app)
    missing = []
    n_params = 0
    for path, cmd in _walk(root, "medvlm-audit"):
        if not hasattr(cmd, "commands") and not (cmd.help or "").strip():
            missing.append(f"{path}: the command itself")
        for p in cmd.params:
            if p.name in ("help",) or getattr(p, "hidden", False):
                continue
            n_params += 1
            if not (getattr(p, "help", None) or "").strip():
                missing.append(f"{path} {'/'.join(p.opts)}")
    assert n_params > 50  # the walk reached the commands
    assert not missing, "options without help:\n" + "\n".join(missing)
