"""Bad input fails early with an error naming the case, file or field, and nothing is half-written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import BrightSpotModel, make_tiny_probeset
from typer.testing import CliRunner

from medvlm_audit import api
from medvlm_audit.cli import app
from medvlm_audit.config import load_config
from medvlm_audit.errors import ConfigError, ProbeSetError
from medvlm_audit.suites.grounding.probeset import ProbeSet


@pytest.mark.parametrize(
    "row_col, value, message",
    [
        ((0, "label"), 2, r"case 'c000': field 'label' = 2 is not binary"),
        ((1, "finding"), "dragon", r"case 'c001': field 'finding' = 'dragon' is not a known finding"),
        ((2, "box_x1"), 900.0, r"case 'c002': box .* lies outside the 64x64 image"),
        ((3, "box_x1"), 8.5, r"case 'c003': box .* is under 1 px"),
        ((3, "box_x1"), 2.0, r"case 'c003': box \[8.0, .*\] is inverted: x1 < x0 \(x0, y0 is the top left corner"),
        ((3, "box_y1"), 2.0, r"case 'c003': box .* is inverted: y1 < y0 \("),
        ((4, "image_path"), "images/missing.png", r"case 'c004': field 'image_path': file .*missing.png does not exist"),
        ((5, "kind"), "essay", r"case 'c005': field 'kind' = 'essay'"),
    ],
)
def test_manifest_errors_name_case_and_field(tiny_probeset, row_col, value, message) -> None:
    df = tiny_probeset.df.copy()
    df[row_col[1]] = df[row_col[1]].astype(object)
    df.loc[row_col[0], row_col[1]] = value
    ps = ProbeSet(df, tiny_probeset.image_root, name="edited")
    with pytest.raises(ProbeSetError, match=message):
        ps.validate()


def test_duplicate_ids_and_empty(tiny_probeset) -> None:
    df = tiny_probeset.df.copy()
    df.loc[3, "case_id"] = "c000"
    with pytest.raises(ProbeSetError, match=r"duplicate case_id\(s\): \['c000'\]"):
        ProbeSet(df, tiny_probeset.image_root).validate()
    with pytest.raises(ProbeSetError, match="is empty"):
        ProbeSet(df.iloc[:0], tiny_probeset.image_root).validate()


def test_missing_required_column() -> None:
    import pandas as pd

    with pytest.raises(ProbeSetError, match=r"lacks required column\(s\) \['label'\]"):
        ProbeSet(pd.DataFrame({"case_id": ["a"], "kind": ["finding_presence"]}), Path("."))


def test_unreadable_and_invalid_configs(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml is unreadable"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("suite: grounding\nprobe_sets: [x]\nmodels:\n  - {name: a, backend: carrier-pigeon}\nrepeats: many\n")
    with pytest.raises(ConfigError, match=r"wrong.yaml: invalid run config:\n.*key 'repeats'"):
        load_config(wrong)
    dup = tmp_path / "dup.yaml"
    dup.write_text("suite: grounding\nprobe_sets: [x]\nmodels:\n  - {name: a, backend: openai}\n  - {name: a, backend: openai}\n")
    with pytest.raises(ConfigError, match=r"repeated: \['a'\]"):
        load_config(dup)


def test_bad_probe_set_fails_before_any_model_and_writes_nothing(tmp_path: Path) -> None:
    ps = make_tiny_probeset(tmp_path / "t")
    df = ps.df.copy()
    df.loc[2, "label"] = 7
    ProbeSet(df, ps.image_root, name="tiny").save(tmp_path / "t" / "probeset")
    m = BrightSpotModel()
    cfg = {"suite": "grounding", "probe_sets": [str(tmp_path / "t" / "probeset")], "run_dir": str(tmp_path / "run"),
           "models": [{"name": "x", "backend": "openai", "model": "m", "base_urls": "http://127.0.0.1:9"}]}
    with pytest.raises(ProbeSetError, match="c002"):
        api.run(cfg, models=[m], progress=False)
    assert m.calls == 0
    assert not (tmp_path / "run").exists()


def test_cli_prints_clear_error_without_traceback(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("suite: grounding\nprobe_sets: [does/not/exist]\nmodels:\n  - {name: a, backend: openai, model: m}\n")
    res = CliRunner().invoke(app, ["run", str(cfg), "--no-progress"])
    assert res.exit_code == 2
    assert "manifest not found" in res.output and "Traceback" not in res.output


def test_box_without_image_size_is_checked_against_the_file_header(tiny_probeset) -> None:
    """Missing image_width/height: the box is checked against the real image size (64 x 64) before any model."""
    df = tiny_probeset.df.copy()
    df["image_width"] = pd.array([None] * len(df), dtype="Int64")
    df["image_height"] = pd.array([None] * len(df), dtype="Int64")
    ProbeSet(df, tiny_probeset.image_root, name="nosize").validate()  # every box fits the 64 x 64 files
    df.loc[4, "box_x1"] = 80.0
    with pytest.raises(ProbeSetError, match=r"case 'c004': box .* lies outside the 64x64 image"):
        ProbeSet(df, tiny_probeset.image_root, name="nosize").validate()
    df.loc[4, "box_x1"] = 30.0
    (tiny_probeset.image_root / "images" / "img006.png").write_bytes(b"not a png")
    with pytest.raises(ProbeSetError, match=r"case 'c006': box .* without image_width/image_height and the size"):
        ProbeSet(df, tiny_probeset.image_root, name="nosize").validate()
