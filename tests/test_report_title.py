"""The report's title names the models under audit; a later stage's models (faithfulness judges) are named by
their stage, never listed as models under audit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from medvlm_audit.api import report_title


def test_title_lists_later_stage_models_by_their_role(tmp_path: Path) -> None:
    run = tmp_path / "f" / "run"
    assert report_title("T", run, ["a", "b"], {"judge": ["j"]}) == "T: f/run — a, b (judge: j)"
    assert report_title("T", run, [f"m{i}" for i in range(6)], {"judge": ["j1", "j2"]}) == \
        "T: f/run — m0, m1, m2, m3 and 2 more (judges: j1, j2)"
    assert report_title("T", run, ["a"], {"judge": []}) == "T: f/run — a"
    assert report_title("T", run, ["a"]) == "T: f/run — a"


@pytest.mark.slow
def test_faithfulness_report_title_names_the_judge_as_a_judge(tmp_path_factory) -> None:
    from grounding_demo_run import small_faithfulness_demo

    from medvlm_audit import api

    run = small_faithfulness_demo(tmp_path_factory)
    out = tmp_path_factory.mktemp("faith-report-title")  # the shared demo run stays as other tests read it
    api.report(run, out=out)
    title = re.search(r"<title>([^<]*)</title>", (out / "report.html").read_text()).group(1)
    models, judges = title.split(" — ", 1)[1].rsplit(" (judge: ", 1)
    assert judges == "reference-judge)"
    assert "reference-judge" not in models and models.count(",") >= 1  # the reasoners under audit
