"""The 100-case finding- and label-balanced prompt-sensitivity subsample."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from medvlm_audit.suites.grounding.probeset import ProbeSet
from medvlm_audit.suites.grounding.subsample import balanced_allocation, prompt_sensitivity_subsample


def _probe() -> ProbeSet:
    rows = []
    # MIMIC-like: 13 findings x 50/50 + 100 normals (label 0) + all-positive MS-CXR cases on 8 findings
    fins = ["atelectasis", "cardiomegaly", "consolidation", "edema", "enlarged_cardiomediastinum", "fracture",
            "lung_lesion", "lung_opacity", "pleural_effusion", "pleural_other", "pneumonia", "pneumothorax",
            "support_devices"]
    for f in fins:
        for lab in (0, 1):
            rows += [{"case_id": f"{f}-{lab}-{i}", "kind": "finding_presence", "finding": f, "label": lab} for i in range(50)]
    rows += [{"case_id": f"nf-{i}", "kind": "finding_presence", "finding": "no_finding", "label": 0} for i in range(100)]
    rows += [{"case_id": f"ms-{i}", "kind": "finding_presence", "finding": "cardiomegaly", "label": 1} for i in range(100)]
    rows += [{"case_id": f"rx-{i}", "kind": "report_error", "sentence": "s", "label": i % 2} for i in range(50)]
    return ProbeSet(pd.DataFrame(rows), Path("."), name="mimic")


def test_balanced_over_findings_then_labels():
    ps = _probe()
    sub = prompt_sensitivity_subsample(ps)
    df = sub.df
    assert len(df) == 100 and (df.kind == "finding_presence").all()
    per = df.groupby("finding").size()
    assert per.max() - per.min() <= 1 and len(per) == 14  # 100 over 14 findings: 7 or 8 each
    for f, g in df.groupby("finding"):
        c = g.label.value_counts()
        if f == "no_finding":
            assert set(c.index) == {0}
        else:
            assert abs(c.get(0, 0) - c.get(1, 0)) <= 1  # balanced labels, unlike the all-positive released sample
    assert sub.provenance["parent"]["content_hash"] == ps.content_hash
    again = prompt_sensitivity_subsample(ps)
    assert list(again.df.case_id) == list(df.case_id)
    other = prompt_sensitivity_subsample(ps, seed=7)
    assert list(other.df.case_id) != list(df.case_id)


def test_short_strata_pass_their_share_on():
    df = pd.DataFrame({"finding": ["edema"] * 3 + ["cardiomegaly"] * 200, "label": [1, 1, 1] + [0, 1] * 100})
    alloc = balanced_allocation(df, 100)
    assert alloc[("edema", 1)] == 3 and alloc[("cardiomegaly", 0)] + alloc[("cardiomegaly", 1)] == 97
    assert abs(alloc[("cardiomegaly", 0)] - alloc[("cardiomegaly", 1)]) <= 1


def test_prompt_subsample_ids_match_the_probe_set_subsample():
    from medvlm_audit.suites.grounding.subsample import prompt_subsample

    ps = _probe()
    ids = prompt_subsample(ps, n=100, seed=42)
    assert ids == frozenset(prompt_sensitivity_subsample(ps).df.case_id) and len(ids) == 100


def test_cross_dataset_run_draws_the_prompt_subsample_from_the_primary_set(tmp_path):
    """MIMIC + CheXpert in one run: the variants run on 100 cases of the primary (first) set, not 100 of each."""
    import sys

    import pytest

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from conftest import make_tiny_probeset

    from medvlm_audit import api
    from medvlm_audit.config import validate_config
    from medvlm_audit.errors import AuditError

    a = make_tiny_probeset(tmp_path / "a", n=12)
    ProbeSet(a.df, a.image_root, name="mimic").save(tmp_path / "pa")
    b = make_tiny_probeset(tmp_path / "b", n=12, seed=1)
    ProbeSet(b.df.assign(case_id="chx-" + b.df.case_id), b.image_root, name="chexpert").save(tmp_path / "pb")
    cfg = validate_config({
        "suite": "grounding", "probe_sets": [str(tmp_path / "pa"), str(tmp_path / "pb")], "run_dir": str(tmp_path / "run"),
        "models": [{"name": "m", "backend": "openai", "model": "x", "base_urls": "http://x"}],
        "conditions": ["original"], "prompt_variants": ["default", "terse"], "prompt_subsample": 4,
    })

    def terse(plan) -> set[tuple[str, str]]:
        return {(t.probe_set, t.case_id) for t in plan.trials if t.condition == "original|prompt=terse"}

    primary = terse(api.plan_for(cfg))
    assert len(primary) == 4 and {p for p, _ in primary} == {"mimic"}
    def source(v):  # the grounding option prompt_subsample_from
        return cfg.model_copy(update={"options": {**cfg.options, "prompt_subsample_from": v}})

    both = terse(api.plan_for(source("all")))
    assert len(both) == 8 and {p for p, _ in both} == {"mimic", "chexpert"} and primary < both
    assert {p for p, _ in terse(api.plan_for(source(["chexpert"])))} == {"chexpert"}
    with pytest.raises(AuditError, match="not probe sets of this run"):
        api.plan_for(source(["nih"]))
