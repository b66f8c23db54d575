"""The vision-only probe runs as a Model in a grounding run on the phantom (demo option --vision-probe)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from medvlm_audit.suites.grounding.embedded import run_demo


@pytest.mark.slow
def test_demo_with_vision_probe(tmp_path: Path) -> None:
    res = run_demo(tmp_path, n_cases=120, n_train=300, vision_probe=True, progress=False, log=lambda *_: None)
    df = pd.read_parquet(res.results_parquet)
    vp = df[df.model == "vision-probe"]
    assert set(vp.condition) >= {"original", "swap", "target_mask", "irrelevant_mask"}
    fp = vp[(vp.kind == "finding_presence") & (vp.condition != "no_image")]
    assert fp.error_kind.isna().all() and (fp.parsed >= 0).all()
    # without an image a vision-only model cannot answer: recorded as not applicable, never guessed
    no_img = vp[vp.condition == "no_image"]
    assert (no_img.error_kind == "not_applicable").all() and (no_img.parsed == -1).all()
    # report-error sentence questions are not applicable to a finding head (never answered with the head of a
    # finding the sentence happens to name)
    sent = vp[vp.kind == "report_error"]
    assert len(sent) > 0 and (sent.error_kind == "not_applicable").all() and sent.correct.isna().all()
    assert sent.error_message.str.contains("finding-presence questions only").all()
    assert fp.confidence.notna().all()
    # it reads pixels: different images give different P(yes); and it ignores the phrasing
    assert fp[fp.condition == "original"].confidence.nunique() > 5
    # the features were cached by pixel hash: a second run recomputes nothing and asks nothing
    again = run_demo(tmp_path, n_cases=120, n_train=300, vision_probe=True, progress=False, log=lambda *_: None,
                     exist_ok=True)
    assert again.summary.per_model["vision-probe"].get("asked", 0) == 0
