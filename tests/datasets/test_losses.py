"""Cases lost after sampling (no swap partner whose image passes the check) are counted in their stratum, in
shortfalls.csv and in the printed summary, on layout-exact trees where only part of the image files exist."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import dsfixtures as F

from medvlm_audit.suites.grounding.datasets.chexpert import build_chexpert
from medvlm_audit.suites.grounding.datasets.common import ExclusionLog, Shortfall, reconcile_strata
from medvlm_audit.suites.grounding.datasets.mimic import build_mimic

#: a metadata tree whose swap pool (every split) is much larger than its test split, as in MIMIC
TREE = {"n_subjects": 1200, "n_studies": 3000, "n_images": 5000, "test_every": 20, "n_rexerr": 300,
        "ms_eligible": dict.fromkeys(F.MS_CATS, 3), "ms_ineligible_per_cat": 1, "size": (64, 80), "gz": True}


def _write_only(root: Path, paths) -> None:
    """Write the JPEG files of ``paths`` (relative to root) and no other: a partial copy of the images."""
    for i, p in enumerate(sorted(set(paths))):
        F._write_jpeg(root / p, 64, 80, i)


def assert_counts_agree(res, printed: str) -> None:
    """The manifest, the per-stratum counts, shortfalls.csv, the provenance and the printed summary agree."""
    df = res.probe_set.df
    prov = res.probe_set.provenance
    got = df["stratum"].value_counts()
    strata = prov["strata"]
    for k, info in strata.items():
        assert info["obtained"] == got.get(k, 0), k
    assert sum(i["obtained"] for i in strata.values()) == len(df) == res.counts["total"]
    saved = pd.read_csv(res.out_dir / "shortfalls.csv")
    assert [tuple(r) for r in saved[["stratum", "requested", "obtained"]].itertuples(index=False)] == [
        (s.stratum, s.requested, s.obtained) for s in res.shortfalls]
    assert [s["obtained"] for s in prov["shortfalls"]] == [s.obtained for s in res.shortfalls]
    for s in res.shortfalls:
        assert s.obtained == got.get(s.stratum, 0) < s.requested
        assert f"{s.stratum}: {s.obtained}/{s.requested}" in printed
    for k, info in strata.items():  # every stratum below its target is a shortfall
        if info["obtained"] < info.get("target", info["requested"]):
            assert k in {s.stratum for s in res.shortfalls}, k
    lost = sum(sum(i.get("lost_after_sampling", {}).values()) for i in strata.values())
    assert lost == sum(res.lost.values()) == sum(prov["lost_after_sampling"].values())
    if lost:
        assert f"lost after sampling: {lost} case(s)" in printed and "shortfalls: none" not in printed


@pytest.mark.slow
def test_mimic_swap_losses_are_counted(tmp_path, capsys):
    tree = F.make_mimic_tree(tmp_path / "t", images=False, **TREE)
    full = build_mimic(out_dir=tmp_path / "o1", check_images=False, verbose=False, **tree)
    cases = full.probe_set.df
    # only the sampled cases' own images are on disk: sampling is unchanged, most swap partners are missing
    _write_only(tree["mimic_root"], cases.image_path)
    res = build_mimic(out_dir=tmp_path / "o2", check_images=True, verbose=True, **tree)
    printed = capsys.readouterr().out
    df = res.probe_set.df
    ex = res.exclusions
    lost = ex[ex.stage == "swap"]
    assert len(lost) > 0 and len(df) == len(cases) - len(lost)
    assert lost.reason.str.contains("whose image passes the check").all()
    assert set(lost.record_id) == set(cases.case_id) - set(df.case_id)
    assert res.lost == {"swap": len(lost)}
    # each lost case is subtracted from its own stratum and named in that stratum's shortfall
    by = cases.set_index("case_id").loc[list(lost.record_id), "stratum"].value_counts()
    strata = res.probe_set.provenance["strata"]
    short = {s.stratum: s for s in res.shortfalls}
    for k, n in by.items():
        assert strata[k]["lost_after_sampling"] == {"swap": n}
        assert f"{n} sampled case(s) lost at the swap step" in short[k].reason
    # an MS-CXR finding below its cap is not a shortfall, but one that lost eligible cases is
    ms_lost = [k for k in by.index if k.startswith("ms_cxr:")]
    assert ms_lost and all(short[k].requested == strata[k]["target"] == 3 for k in ms_lost)
    assert_counts_agree(res, printed)


@pytest.mark.slow
def test_chexpert_swap_losses_are_counted(tmp_path, capsys):
    root = F.make_chexpert_tree(tmp_path / "c", n_patients=2000, images=False, rare_negative="")
    full = build_chexpert(root, tmp_path / "o1", per_finding=6, n_normal=6, check_images=False, verbose=False)
    cases = full.probe_set.df
    assert full.shortfalls == []  # every stratum full before images go missing
    _write_only(root.parent, cases.image_path)  # a partial copy: the sampled images only
    res = build_chexpert(root, tmp_path / "o2", per_finding=6, n_normal=6, check_images=True, verbose=True)
    printed = capsys.readouterr().out
    lost = res.exclusions[res.exclusions.stage == "swap"]
    assert len(lost) > 0 and len(res.probe_set.df) == len(cases) - len(lost)
    assert res.shortfalls and all("lost at the swap step" in s.reason for s in res.shortfalls)
    assert sum(s.requested - s.obtained for s in res.shortfalls) == len(lost)
    assert_counts_agree(res, printed)


def test_reconcile_strata_hand_counted():
    manifest = pd.DataFrame({"case_id": ["a1", "a2", "b1"], "stratum": ["A", "A", "B"]})
    sampled = pd.DataFrame({"case_id": ["a1", "a2", "a3", "b1", "b2"], "stratum": ["A", "A", "A", "B", "B"]})
    log = ExclusionLog()
    log.add("a3", "src", "swap", "no partner")
    strata = {"A": {"requested": 3, "obtained": 3, "available": 9},
              "B": {"requested": 4, "obtained": 2, "available": 2}}
    prior = [Shortfall("B", 4, 2, 2, "too few eligible records")]
    out, sf, lost = reconcile_strata(manifest, strata, prior, sampled, log.frame())
    assert out["A"]["obtained"] == 2 and out["A"]["lost_after_sampling"] == {"swap": 1}
    assert out["B"]["obtained"] == 1 and out["B"]["lost_after_sampling"] == {"after sampling": 1}
    assert [(s.stratum, s.requested, s.obtained, s.available) for s in sf] == [("A", 3, 2, 9), ("B", 4, 1, 2)]
    assert sf[0].reason == "1 sampled case(s) lost at the swap step (e.g. no partner)"
    assert sf[1].reason == "too few eligible records; 1 sampled case(s) lost after sampling (e.g. not in the final manifest)"
    assert lost == {"swap": 1, "after sampling": 1}
    assert strata["A"]["obtained"] == 3  # the input is not modified


def test_no_loss_keeps_strata_as_sampled():
    manifest = pd.DataFrame({"case_id": ["a1"], "stratum": ["A"]})
    out, sf, lost = reconcile_strata(manifest, {"A": {"requested": 1, "obtained": 1, "available": 1}}, [],
                                     manifest, ExclusionLog().frame())
    assert out == {"A": {"requested": 1, "obtained": 1, "available": 1}} and sf == [] and lost == {}


def test_nih_and_vindr_counts_agree(tmp_path, capsys):
    """The same bookkeeping on the open builders (boxed strata have a cap, so their target is min(cap, available))."""
    from medvlm_audit.suites.grounding.datasets.nih import build_nih
    from medvlm_audit.suites.grounding.datasets.vindr import build_vindr

    nih = F.make_nih_tree(tmp_path / "nih", n_images=300, n_boxes=30, images=False)
    res = build_nih(nih, tmp_path / "o1", per_finding=5, n_normal=5, check_images=False, verbose=True,
                    metadata_from="root")
    assert_counts_agree(res, capsys.readouterr().out)
    vindr = F.make_vindr_tree(tmp_path / "vindr", n_images=80)
    res = build_vindr(vindr, tmp_path / "o2", n_absent=10, n_normal=10, verbose=True)
    assert_counts_agree(res, capsys.readouterr().out)
    assert any(k.startswith("vindr_box:") for k in res.probe_set.provenance["strata"])
