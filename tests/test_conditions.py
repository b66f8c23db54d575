"""Condition geometry and pure image transforms: boxes at working resolution, the irrelevant corner box."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from medvlm_audit.boxes import irrelevant_box, rescale_box, working_box
from medvlm_audit.images import ImageRecipe
from medvlm_audit.suites.grounding.conditions import Condition


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
    r = ImageRecipe.standard(str(src), 224, (0, 0, 10, 10))
    a, b = r.render(), r.render()
    assert a.shape == (224, 224) and (a == b).all()
    assert (a[:10, :10] == 0).all() and (a[10:, 10:] == 128).all()
    assert src.read_bytes() == before
    # the same recipe from (name, params) pairs, a record round trip; every op and parameter is in the key
    same = ImageRecipe(str(src), (("resize", {"size": 224}), ("fill_box", {"value": 0, "box": [0, 0, 10, 10]})))
    assert same == r and hash(same) == hash(r) and ImageRecipe.from_record(r.to_record()) == r
    assert ImageRecipe.from_record({"path": str(src), "resolution": 224, "fill": [0, 0, 10, 10], "mode": "L"}) == r
    keys = {r.cache_key(), ImageRecipe.standard(str(src), 224).cache_key(),
            ImageRecipe.standard(str(src), 224, (0, 0, 10, 11)).cache_key(),
            ImageRecipe(str(src), (("fill_box", {"box": [0, 0, 10, 10]}), ("resize", {"size": 224}))).cache_key()}
    assert len(keys) == 4


def test_image_ops_registry_new_op_and_errors(tmp_path: Path) -> None:
    from PIL import Image

    from medvlm_audit.errors import ConfigError, ImageError
    from medvlm_audit.images import IMAGE_OPS, register_image_op

    src = tmp_path / "b.png"
    Image.fromarray(np.arange(64, dtype=np.uint8).reshape(8, 8)).save(src)
    register_image_op("test_invert", lambda px, scale=1: (255 - px) // scale, replace=True)
    try:
        r = ImageRecipe(str(src), (("test_invert", {"scale": 1}),))
        assert (r.render() == 255 - np.arange(64, dtype=np.uint8).reshape(8, 8)).all()
        assert r.cache_key() != ImageRecipe(str(src), (("test_invert", {"scale": 2}),)).cache_key()
        with pytest.raises(ConfigError, match="unknown image operation 'test_invrt'.*did you mean test_invert"):
            ImageRecipe(str(src), (("test_invrt", {}),)).render()
        with pytest.raises(ImageError, match="operation test_invert"):
            ImageRecipe(str(src), (("test_invert", {"nope": 1}),)).render()
    finally:
        IMAGE_OPS.unregister("test_invert")


@pytest.mark.parametrize("res", [224, 512])
def test_tiny_probe_set_mask_boxes_have_equal_size(tiny_probeset, res) -> None:
    """Irrelevant and target boxes have the same size at every resolution (no second rounding at 512)."""
    n = 0
    for case in tiny_probeset.cases():
        tb = Condition("target_mask", res).recipe(case, tiny_probeset.resolve).fill
        ib = Condition("irrelevant_mask", res).recipe(case, tiny_probeset.resolve).fill
        assert (ib[2] - ib[0], ib[3] - ib[1]) == (tb[2] - tb[0], tb[3] - tb[1]), (case.case_id, tb, ib)
        assert tb == working_box(case.target_box, 64, 64, res)
        assert ib[0] in (0, res - (ib[2] - ib[0])) and ib[1] in (0, res - (ib[3] - ib[1]))
        n += 1
    assert n == len(tiny_probeset)


def test_boxes_at_512_from_the_source_box() -> None:
    """A box whose 224 rounding would put the 512 sides 1 px apart: both 512 boxes keep one size."""
    from medvlm_audit.suites.grounding.case import Case
    from medvlm_audit.suites.grounding.conditions import boxes_at

    src = (10.3, 10.0, 221.0, 230.7)  # source pixels of a 1000 x 900 image
    tb224 = working_box(src, 1000, 900, 224)
    ib224, _ = irrelevant_box(tb224)
    case = Case("c", "finding_presence", 1, "nodule", image="x.png", target_box=src, tbox=tb224, ibox=ib224,
                image_size=(1000, 900))
    tb, ib = boxes_at(case, 512)
    assert tb == working_box(src, 1000, 900, 512)
    assert (ib[2] - ib[0], ib[3] - ib[1]) == (tb[2] - tb[0], tb[3] - tb[1])
    assert ib == irrelevant_box(tb, 512)[0]
    # the old rule (both 224 boxes rescaled separately) gives different sizes here
    old_t, old_i = rescale_box(tb224, 224, 512), rescale_box(ib224, 224, 512)
    assert (old_t[2] - old_t[0], old_t[3] - old_t[1]) != (old_i[2] - old_i[0], old_i[3] - old_i[1])
    # without a source box (a manifest with working boxes only) the 224 box is rescaled; sizes still agree
    bare = Case("c", "finding_presence", 1, "nodule", image="x.png", tbox=tb224, ibox=ib224)
    tb, ib = boxes_at(bare, 512)
    assert tb == rescale_box(tb224, 224, 512) and (ib[2] - ib[0], ib[3] - ib[1]) == (tb[2] - tb[0], tb[3] - tb[1])
    assert boxes_at(case, 224) == (tb224, ib224)
