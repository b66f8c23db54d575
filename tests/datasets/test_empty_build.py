"""A build in which no record becomes a case says why, writes exclusions.csv and leaves nothing else."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).parent))
import dsfixtures as F

from medvlm_audit.suites.grounding.datasets.chexpert import build_chexpert
from medvlm_audit.suites.grounding.datasets.common import DatasetError, top_exclusion_reasons
from medvlm_audit.suites.grounding.datasets.folder import build_folder


def test_chexpert_labels_whose_paths_do_not_match_the_image_folder(tmp_path):
    """val_labels.csv says CheXpert-v1.0-small/valid/... while the images were unpacked into val/."""
    base = F.make_chexpert_tree(tmp_path / "c", n_patients=250, images=True)
    shutil.copy(base / "valid.csv", base / "val_labels.csv")
    (base / "valid").rename(base / "val")
    out = tmp_path / "ps"
    with pytest.raises(DatasetError) as e:
        build_chexpert(base, out, labels_csv=base / "val_labels.csv", split="all", verbose=False)
    msg = str(e.value)
    ex = pd.read_csv(out / "exclusions.csv")
    assert sorted(p.name for p in out.iterdir()) == ["exclusions.csv"]  # no manifest, no empty probe-set folder
    n_missing = int((ex.stage == "image_check").sum())
    assert n_missing > 0 and ex[ex.stage == "image_check"].reason.str.contains("does not exist").all()
    assert "the probe set is empty" in msg and f"none of the {len(ex)} excluded records" in msg
    assert f"{n_missing} x image_check: file " in msg and "/valid/patient" in msg  # the top reason, with a path
    assert "do not exist under" in msg and "valid/ in the CSV, val/ on disk" in msg


def _folder(tmp_path: Path, labels: list[str]) -> tuple[Path, Path]:
    d = tmp_path / "imgs"
    d.mkdir(exist_ok=True)
    rows = []
    for i, lab in enumerate(labels):
        Image.fromarray(np.full((40, 40), i, np.uint8)).save(d / f"{i}.png")
        rows.append({"image": f"{i}.png", "finding": "edema", "label": lab, "patient_id": f"P{i}"})
    csv = tmp_path / f"cases{len(labels)}.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    return d, csv


def test_folder_with_no_usable_row(tmp_path):
    d, csv = _folder(tmp_path, ["uncertain"] * 5 + ["1"])  # five uncertain labels, one case without a swap partner
    out = tmp_path / "ps"
    with pytest.raises(DatasetError) as e:
        build_folder(d, csv, out, verbose=False)
    msg = str(e.value)
    assert sorted(p.name for p in out.iterdir()) == ["exclusions.csv"]
    ex = pd.read_csv(out / "exclusions.csv")
    assert ex.stage.tolist() == ["folder:label"] * 5 + ["swap"]
    lines = msg.splitlines()
    assert lines[1] == "  5 x folder:label: uncertain label"
    assert lines[2] == "  1 x swap: no different-patient frontal swap partner with edema=1 (excluded)"


def test_an_empty_build_leaves_a_previous_probe_set_untouched(tmp_path):
    d, good = _folder(tmp_path, ["1", "1", "0", "0"])
    out = tmp_path / "ps"
    first = build_folder(d, good, out, verbose=False)
    before = sorted(p.name for p in out.iterdir())
    _, bad = _folder(tmp_path, ["uncertain"] * 3)
    with pytest.raises(DatasetError, match="is left as it was"):
        build_folder(d, bad, out, verbose=False)
    assert sorted(p.name for p in out.iterdir()) == before
    assert pd.read_parquet(out / "manifest.parquet").case_id.tolist() == first.probe_set.df.case_id.tolist()
    side = tmp_path / "ps.exclusions.csv"
    assert pd.read_csv(side).reason.tolist() == ["uncertain label"] * 3


def test_an_error_before_sampling_leaves_no_folder(tmp_path):
    base = F.make_chexpert_tree(tmp_path / "c", n_patients=60, images=False)
    with pytest.raises(DatasetError, match="no image in split 'nope'"):
        build_chexpert(base, tmp_path / "ps", split="nope", check_images=False, verbose=False)
    assert not (tmp_path / "ps").exists()


def test_top_exclusion_reasons_groups_paths_and_numbers():
    ex = pd.DataFrame({"record_id": list("abcde"), "source": "s",
                       "stage": ["image_check", "image_check", "image_check", "box", "box"],
                       "reason": ["file /d/1.jpg does not exist", "file /d/2.jpg does not exist",
                                  "image /d/3.jpg fails to decode", "box 1.5x2 px", "box 3x4 px"]})
    assert top_exclusion_reasons(ex) == [(2, "image_check", "file /d/1.jpg does not exist"),
                                         (2, "box", "box 1.5x2 px"),
                                         (1, "image_check", "image /d/3.jpg fails to decode")]
