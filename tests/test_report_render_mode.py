"""The report's run details say how images were rendered only when the run knows it (issue 23, "Left"): the
config value ``auto`` is a rule, not what was used, so the phrase is left out; a forced mode is named in words."""

from __future__ import annotations

from medvlm_audit.report.html import config_rows


def test_auto_render_mode_is_not_printed_as_if_it_were_a_mode() -> None:
    rows = dict(config_rows({"suite": "grounding", "workers": 3, "render_in": "auto"}))
    assert "Images rendered in" not in rows
    assert not any("auto" == v for v in rows.values())
    assert rows["Image render workers"] == "3"  # the number the run recorded as used


def test_a_forced_render_mode_is_named_in_words() -> None:
    assert dict(config_rows({"render_in": "processes"}))["Images rendered in"] == "worker processes"
    assert dict(config_rows({"render_in": "threads"}))["Images rendered in"] == "worker threads"
