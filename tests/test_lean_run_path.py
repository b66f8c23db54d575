"""Issue 23: the run path of an HTTP-model grounding run needs no pandas. What it reads and writes without pandas
must equal what the pandas code (kept as the oracle) reads and writes: the probe-set rows, cases and hash, and
the exported results files byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from medvlm_audit.suites.grounding.probeset import MANIFEST, ProbeSet

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


def _pandas_side(folder: Path) -> ProbeSet:
    """The probe set as the pandas code reads it (the oracle)."""
    prov = json.loads((folder / "probeset.json").read_text()) if (folder / "probeset.json").exists() else {}
    prov.pop("manifest_file", None)
    return ProbeSet(pd.read_parquet(folder / MANIFEST), Path("."), prov, name="x")


def _assert_same_probeset(folder: Path) -> ProbeSet:
    lean = ProbeSet.load(folder, validate=False)
    oracle = _pandas_side(folder)
    assert lean._rows is not None, "the manifest fell back to pandas"
    assert json.dumps(lean.case_records(), default=str) == json.dumps(oracle.case_records(), default=str)
    assert list(lean.cases()) == list(oracle.cases())
    assert lean.boxed_case_ids() == [str(c) for c in oracle.df.loc[oracle.df["tbox_x0"].notna(), "case_id"]]
    assert lean.content_hash == oracle.content_hash
    assert len(lean) == len(oracle)
    pd.testing.assert_frame_equal(lean.df, oracle.df)  # the lazy table is the pandas one
    return lean


def test_tiny_probeset_rows_equal_pandas(tiny_probeset: ProbeSet, tmp_path: Path) -> None:
    folder = Path(tiny_probeset.image_root) / "probeset"
    lean = _assert_same_probeset(folder)
    assert lean._hash is not None  # taken from probeset.json: the file is unchanged since it was saved
    lean.validate()


def test_changed_manifest_is_hashed_again(tiny_probeset: ProbeSet, tmp_path: Path) -> None:
    """An edited manifest (its SHA-256 no longer the recorded one) gets its hash computed, not the stale one."""
    folder = Path(tiny_probeset.image_root) / "probeset"
    df = pd.read_parquet(folder / MANIFEST)
    df.loc[0, "finding"] = "effusion"
    out = tmp_path / "edited"
    out.mkdir()
    df.to_parquet(out / MANIFEST, index=False)
    (out / "probeset.json").write_text((folder / "probeset.json").read_text())
    lean = ProbeSet.load(out, validate=False)
    assert lean._hash is None
    assert lean.content_hash == _pandas_side(out).content_hash != tiny_probeset.content_hash


def test_list_column_falls_back_to_pandas(tiny_probeset: ProbeSet, tmp_path: Path) -> None:
    folder = Path(tiny_probeset.image_root) / "probeset"
    df = pd.read_parquet(folder / MANIFEST)
    df["options"] = [["a", "b"]] * len(df)
    df.to_parquet(tmp_path / MANIFEST, index=False)
    ps = ProbeSet.load(tmp_path, validate=False)
    assert ps._rows is None and ps._df is not None


@st.composite
def manifests(draw: st.DrawFn) -> pd.DataFrame:
    n = draw(st.integers(1, 6))
    df = pd.DataFrame({"case_id": [f"c{i}{draw(TEXT)}" for i in range(n)],
                       "kind": draw(st.sampled_from(["finding_presence", "report_error"]))})
    label_null = draw(st.booleans())
    df["label"] = [None if label_null and i == 0 else i % 2 for i in range(n)]
    if draw(st.booleans()):
        df["finding"] = [draw(st.one_of(st.none(), st.sampled_from(["nodule", "effusion"]))) for _ in range(n)]
    for col in draw(st.lists(st.sampled_from(["tbox_x0", "tbox_y0", "image_width", "ibox_x1"]), unique=True)):
        vals = [draw(st.one_of(st.none(), st.integers(0, 224))) for _ in range(n)]
        df[col] = pd.array(vals, dtype="Int64") if draw(st.booleans()) else pd.array(vals, dtype="Int64").astype(
            "Int64")
    for col in draw(st.lists(st.sampled_from(["box_x0", "age"]), unique=True)):
        df[col] = [draw(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True),
                                  st.integers(0, 300))) for _ in range(n)]
        df[col] = pd.to_numeric(df[col])
    if draw(st.booleans()):
        df["ibox_overlaps"] = [draw(st.one_of(st.none(), st.booleans())) for _ in range(n)]
    extra = draw(st.sampled_from(["none", "text", "ints", "ints_null", "floats", "bools", "all_null", "nullable"]))
    if extra == "text":
        df["note"] = [draw(st.one_of(st.none(), TEXT)) for _ in range(n)]
    elif extra == "ints":
        df["score"] = [draw(st.integers(-2**40, 2**40)) for _ in range(n)]
    elif extra == "ints_null":
        df["score"] = [None, *[draw(st.integers(-5, 5)) for _ in range(n - 1)]]
    elif extra == "floats":
        df["score"] = [draw(st.floats(allow_nan=True, width=64)) for _ in range(n)]
    elif extra == "bools":
        df["flag"] = [draw(st.one_of(st.none(), st.booleans())) for _ in range(n)]
    elif extra == "all_null":
        df["nothing"] = [None] * n
    elif extra == "nullable":
        df["score"] = pd.array([None, *range(n - 1)], dtype="Int64")
    return df


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(df=manifests(), via_save=st.booleans())
def test_manifest_rows_equal_pandas(df: pd.DataFrame, via_save: bool, tmp_path_factory: pytest.TempPathFactory
                                    ) -> None:
    folder = tmp_path_factory.mktemp("m")
    if via_save:
        ProbeSet(df, folder, {"builder": "t"}, name="x").save(folder / "ps")
        folder = folder / "ps"
    else:
        df.to_parquet(folder / MANIFEST, index=False)
    _assert_same_probeset(folder)
