"""Condition geometry and pure image transforms: boxes at working resolution, the irrelevant corner box."""

from __future__ import annotations

import numpy as np
import pytest

from medvlm_audit.boxes import irrelevant_box, rescale_box, working_box
from medvlm_audit.conditions import Condition
from medvlm_audit.images import ImageRecipe


def test_working_box_rescales_and_rounds() -> None:
    # 1024 px source -> 224: factor 0.21875; 100*0.21875 = 21.875 -> 22, 300*0.21875 = 65.625 -> 66
    assert working_box((100, 100, 300, 300), 1024, 1024) == (22, 22, 66, 66)


@pytest.mark.parametrize(
    "tbox, expected",
    [
        ((10, 10, 40, 30), (194, 204, 224, 224)),  # top-left target -> bottom-right corner
        ((180, 190, 220, 220), (0, 0, 40, 30)),  # bottom-right target -> top-left corner
        ((150, 20, 200, 60), (0, 184, 50, 224)),  # top-right target -> bottom-left corner
    ],
)
def test_irrelevant_box_same_size_farthest_corner(tbox, expected) -> None:
    ib, overlaps = irrelevant_box(tbox)
    assert ib == expected
    assert (ib[2] - ib[0], ib[3] - ib[1]) == (tbox[2] - tbox[0], tbox[3] - tbox[1])
    assert overlaps is False


def test_irrelevant_box_overlap_flag_for_huge_boxes() -> None:
    ib, overlaps = irrelevant_box((20, 20, 200, 200))
    assert overlaps is True and ib[2] - ib[0] == 180


def test_rescale_box_to_512_stays_flush() -> None:
    assert rescale_box((194, 204, 224, 224), 224, 512) == (443, 466, 512, 512)


def test_condition_names_roundtrip() -> None:
    for c in (Condition(), Condition("target_mask", 512), Condition("swap", 224, "terse")):
        assert Condition.parse(c.name) == c
    with pytest.raises(ValueError, match="unknown condition"):
        Condition("blur")


def test_recipe_is_pure_and_leaves_source_untouched(tmp_path) -> None:
    from PIL import Image

    src = tmp_path / "a.png"
    arr = np.full((100, 100), 128, np.uint8)
    Image.fromarray(arr).save(src)
    before = src.read_bytes()
    r = ImageRecipe(str(src), 224, (0, 0, 10, 10))
    a, b = r.render(), r.render()
    assert a.shape == (224, 224) and (a == b).all()
    assert (a[:10, :10] == 0).all() and (a[10:, 10:] == 128).all()
    assert src.read_bytes() == before
