"""Issue 23: the run path of an HTTP-model grounding run needs no pandas. What it reads and writes without pandas
must equal what the pandas code (kept as the oracle) reads and writes: the probe-set rows, cases and hash, and
the exported results files byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from medvlm_audit.suites.grounding.probeset import MANIFEST, ProbeSet

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


def _run_listing_imports(tmp_path: Path, suite: str, probe_sets: str, timeout: int = 120):
    """``medvlm-audit run`` of an HTTP-model config of ``suite`` against the fake server in its own process under
    ``-X importtime``: (the finished process, the names of every module it imported)."""
    import os
    import subprocess
    import sys

    from medvlm_audit.testing.fake_openai import ThreadedFakeServer

    with ThreadedFakeServer() as srv:
        cfg = tmp_path / "run.yaml"
        cfg.write_text(f"suite: {suite}\nprobe_sets: [{probe_sets}]\nrun_dir: {tmp_path / 'run'}\n"
                       f"models: [{{name: vlm, backend: openai, model: fake-vlm, base_urls: [{srv.base_url}]}}]\n")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                                            os.environ.get("PYTHONPATH", "")])}
        res = subprocess.run([sys.executable, "-X", "importtime", "-m", "medvlm_audit", "run", str(cfg),
                              "--no-progress", "--no-report"], capture_output=True, text=True, env=env,
                             timeout=timeout)
    assert res.returncode == 0, res.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    return res, imported


@pytest.mark.slow
def test_http_grounding_run_imports_no_pandas(tmp_path: Path) -> None:
    """`medvlm-audit run` of an HTTP-model grounding config against the fake server, in its own process: every
    module it imports is listed by ``-X importtime``; pandas (~0.25 CPU-s of each invocation) is not among them,
    and the run still leaves its results files."""
    from conftest import make_tiny_probeset

    make_tiny_probeset(tmp_path / "data", n=6)
    _, imported = _run_listing_imports(tmp_path, "grounding", str(tmp_path / "data" / "probeset"))
    assert "medvlm_audit.api" in imported  # the listing works
    assert "pandas" not in imported, "a run of an HTTP grounding config imported pandas"
    assert (tmp_path / "run" / "results.csv").exists() and (tmp_path / "run" / "results.parquet").exists()
    df = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert len(df) == 6 * 5 and df["status"].eq("answer").all()


@pytest.mark.slow
def test_http_stress_run_imports_no_pandas(tmp_path: Path) -> None:
    """The same for a stress run of the phantom MCQ set: no pandas, its results files and its warning printed."""
    res, imported = _run_listing_imports(tmp_path, "stress", "phantom", timeout=300)
    assert "medvlm_audit.suites.stress.parse_rates" in imported  # the warning was read without pandas
    assert "pandas" not in imported, "a run of an HTTP stress config imported pandas"
    from medvlm_audit.suites.stress.analysis import parse_rate_lines

    want = parse_rate_lines(pd.read_parquet(tmp_path / "run" / "results.parquet"))
    assert want and all(line[:60] in res.stdout + res.stderr for line in want)


def test_run_path_modules_import_no_pandas() -> None:
    """The fast-lane half of the guard above: importing what a grounding run uses loads no pandas."""
    import subprocess
    import sys

    mods = ("medvlm_audit.cli", "medvlm_audit.api", "medvlm_audit.export", "medvlm_audit.columns",
            "medvlm_audit.health", "medvlm_audit.store", "medvlm_audit.runner", "medvlm_audit.suites.grounding.suite",
            "medvlm_audit.suites.grounding.plan", "medvlm_audit.suites.grounding.probeset",
            "medvlm_audit.models.openai_compat", "medvlm_audit.suites.stress.suite", "medvlm_audit.suites.stress.plan",
            "medvlm_audit.suites.stress.conditions", "medvlm_audit.suites.stress.items",
            "medvlm_audit.suites.stress.parse_rates", "medvlm_audit.suites.stress.embedded")
    code = f"import sys\nfor m in {mods!r}: __import__(m)\nprint('pandas' in sys.modules)"
    env_path = str(Path(__file__).parents[1] / "src")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "False"


def _pandas_side(folder: Path) -> ProbeSet:
    """The probe set as the pandas code reads it (the oracle)."""
    prov = json.loads((folder / "probeset.json").read_text()) if (folder / "probeset.json").exists() else {}
    prov.pop("manifest_file", None)
    return ProbeSet(pd.read_parquet(folder / MANIFEST), Path("."), prov, name="x")


def _assert_same_probeset(folder: Path) -> ProbeSet:
    lean = ProbeSet.load(folder, validate=False)
    oracle = _pandas_side(folder)
    assert lean._rows is not None, "the manifest fell back to pandas"
    assert json.dumps(list(lean.case_records()), default=str) == json.dumps(list(oracle.case_records()), default=str)
    assert list(lean.cases()) == list(oracle.cases())
    last = str(oracle.df["case_id"].iloc[-1])
    assert lean.case(last) == oracle.case(last) and lean.rows()[-1] == lean.case_records()[len(lean) - 1]
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
    df.drop(columns=["options"]).set_index("finding").to_parquet(tmp_path / MANIFEST)  # an index stored as a column
    ps = ProbeSet.load(tmp_path, validate=False)
    assert ps._rows is None and "finding" in ps.df.columns


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


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(df=manifests(), how=st.sampled_from(["save", "no index", "default index", "reversed"]))
def test_manifest_rows_equal_pandas(df: pd.DataFrame, how: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Manifests written by ``ProbeSet.save`` or by hand (``to_parquet`` with or without its RangeIndex)."""
    folder = tmp_path_factory.mktemp("m")
    if how == "save":
        ProbeSet(df, folder, {"builder": "t"}, name="x").save(folder / "ps")
        folder = folder / "ps"
    elif how == "no index":
        df.to_parquet(folder / MANIFEST, index=False)
    elif how == "default index":
        df.to_parquet(folder / MANIFEST)
    else:
        df.iloc[::-1].to_parquet(folder / MANIFEST)
    _assert_same_probeset(folder)


# ---- the end-of-run export: the same bytes as the pandas code -------------------------------------------------

COL_VALUES = {
    "str": st.one_of(st.none(), TEXT, st.sampled_from(["", "a,b", 'say "yes"', "line\nbreak", "cr\r", "é ü 漢"])),
    "object": st.one_of(st.none(), TEXT),
    "Int64": st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)),
    "int64": st.integers(-2**63, 2**63 - 1),
    "int8": st.integers(-128, 127),
    "float64": st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True),
                         st.sampled_from([1e-300, 5e-324, 1e16, 123456789012345680.0, -0.0, 0.1, 40.0])),
    "bool": st.booleans(),
}


@st.composite
def column_tables(draw: st.DrawFn):
    from medvlm_audit.columns import Columns

    n = draw(st.integers(1, 8))
    cols = Columns()
    for i, dtype in enumerate(draw(st.lists(st.sampled_from(sorted(COL_VALUES)), min_size=1, max_size=8))):
        cols.add(f"c{i}" if i % 3 else f"col, {i}\"", [draw(COL_VALUES[dtype]) for _ in range(n)], dtype)
    return cols


@settings(max_examples=60, deadline=None)
@given(cols=column_tables())
def test_columns_write_pandas_bytes(cols) -> None:
    """The CSV and Parquet written from plain columns are the bytes pandas writes for the same table."""
    from medvlm_audit import atomic, columns

    df = cols.to_frame()
    assert columns.csv_bytes(cols) == atomic.csv_bytes(df)
    assert columns.parquet_bytes(cols) == atomic.parquet_bytes(df)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), TEXT),
                       min_size=1, max_size=6))
def test_infer_dtype_is_pandas_inference(values: list) -> None:
    """What :func:`infer_dtype` names is what pandas gives a column of these values (records and SQL rows)."""
    from medvlm_audit.columns import infer_dtype

    got = infer_dtype(values)
    if got is None:
        return
    want = str(pd.DataFrame([{"a": v} for v in values])["a"].dtype)
    assert {"object": "object", "str": "str", "float64": "float64", "int64": "int64", "bool": "bool"}[got] == want


def _bytes_both_ways(run_dir: Path, lean_tidy, pandas_tidy) -> tuple[tuple[bytes, bytes] | None, tuple[bytes, bytes]]:
    """(CSV, Parquet) bytes of a run's export from the pandas-free table (None: the suite fell back to pandas)
    and from the pandas tidy table (the oracle)."""
    from medvlm_audit import atomic, columns
    from medvlm_audit.store import RunStore

    with RunStore.open_dir(run_dir, readonly=True) as store:
        lean = lean_tidy(store)
        df = pandas_tidy(store)
    want = (atomic.csv_bytes(df), atomic.parquet_bytes(df))
    return (None if lean is None else (columns.csv_bytes(lean), columns.parquet_bytes(lean))), want


def _export_bytes_both_ways(run_dir: Path) -> tuple[tuple[bytes, bytes] | None, tuple[bytes, bytes]]:
    from medvlm_audit.suites.grounding.suite import tidy_grounding, tidy_grounding_columns

    return _bytes_both_ways(run_dir, tidy_grounding_columns, tidy_grounding)


@pytest.fixture(scope="module")
def grounding_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 60-case grounding embedded default (reference panel, two resolutions and three phrasings)."""
    from medvlm_audit import api
    from medvlm_audit.suites import get_suite

    out = tmp_path_factory.mktemp("lean-grounding")
    cfg = get_suite("grounding").embedded_config(out, n_cases=60, n_train=60, log=lambda *a: None)
    return Path(api.run(cfg, progress=False).run_dir)


@pytest.mark.slow
def test_grounding_run_exports_pandas_bytes(grounding_run: Path) -> None:
    lean, want = _export_bytes_both_ways(grounding_run)
    assert lean is not None, "the grounding export fell back to pandas on its own embedded default"
    assert lean == want
    assert (grounding_run / "results.csv").read_bytes() == want[0]
    assert (grounding_run / "results.parquet").read_bytes() == want[1]


ODD_TEXT = st.one_of(TEXT, st.sampled_from(["", "Yes", "No.", "yes, it is", 'He said "no"', "a\nb", "  ", "ü"]))
CASE_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), TEXT,
                        st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([1e-300, 1e300, 40.0]))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_edited_grounding_stores_export_pandas_bytes(grounding_run: Path, tmp_path_factory, data) -> None:
    """Answers, errors, missing answers, imported answers, reasoning and case fields of any value: wherever the
    pandas-free table is built it is the pandas table's bytes (and it is built for answer edits)."""
    import shutil
    import sqlite3

    work = tmp_path_factory.mktemp("edit")
    shutil.copy(grounding_run / "run.sqlite", work / "run.sqlite")
    db = sqlite3.connect(work / "run.sqlite")
    keys = [k for (k,) in db.execute("SELECT key FROM responses ORDER BY key")]
    pick = st.lists(st.sampled_from(keys), max_size=12, unique=True)
    for k in data.draw(pick, "texts"):
        db.execute("UPDATE responses SET text = ?, top_logprobs = NULL WHERE key = ?",
                   (data.draw(st.one_of(st.none(), ODD_TEXT)), k))
    for k in data.draw(pick, "errors"):
        db.execute("UPDATE responses SET text = NULL, error_kind = ?, error_message = ? WHERE key = ?",
                   (data.draw(st.sampled_from(["http_500", "timeout"])), data.draw(st.one_of(st.none(), ODD_TEXT)), k))
    if data.draw(st.booleans(), "latency all null"):
        db.execute("UPDATE responses SET latency_s = NULL")
    for k in data.draw(pick, "deleted"):
        db.execute("DELETE FROM responses WHERE key = ?", (k,))
    for k in data.draw(pick, "imported"):
        db.execute("INSERT OR REPLACE INTO imported VALUES(?, ?, ?)",
                   (k, data.draw(st.sampled_from([-1, 0, 1])), data.draw(st.one_of(st.none(), st.floats(0, 1)))))
    for k in data.draw(pick, "reasoning"):
        db.execute("INSERT OR REPLACE INTO answer_details(key, effective, reasoning) VALUES(?, NULL, ?)",
                   (k, data.draw(ODD_TEXT)))
    field = data.draw(st.sampled_from(["age", "patient_id", "sex", "label", "ibox_overlaps", "tbox_x0", "view",
                                       "source", "finding"]), "case field")
    mode = data.draw(st.sampled_from(["all", "some"]), "how many")
    rows = db.execute("SELECT rowid, row FROM cases").fetchall()
    for i, (rowid, row) in enumerate(rows):
        if mode == "some" and i % 3:
            continue
        r = json.loads(row)
        r[field] = data.draw(CASE_VALUES) if mode == "some" else data.draw(st.sampled_from([None, 1, 2.5, "x"]))
        db.execute("UPDATE cases SET row = ? WHERE rowid = ?", (json.dumps(r), rowid))
    db.commit()
    db.close()
    try:
        lean, want = _export_bytes_both_ways(work)
    except (ValueError, TypeError):  # the pandas code refuses these case fields: the lean one must not write
        from medvlm_audit.store import RunStore
        from medvlm_audit.suites.grounding.suite import tidy_grounding_columns

        with RunStore.open_dir(work, readonly=True) as store:
            assert tidy_grounding_columns(store) is None
        return
    event(f"pandas-free table built: {lean is not None}")
    if lean is not None:
        assert lean[0] == want[0]
        assert lean[1] == want[1]
    else:
        assert field not in ("view", "source", "finding", "sex") or mode == "some"  # text fields are mirrored


def _pandas_parse_rate_lines(tidy: pd.DataFrame, floor: float = 0.5) -> list[str]:
    """The pandas implementation of ``health.low_parse_rate_lines`` before issue 23 (the oracle)."""
    from medvlm_audit.health import _PARSED, _TEXT_ONLY_PARSED

    t = tidy[tidy["status"].notna() & (tidy["status"] != "no_response")]
    if t.empty:
        return []
    cond = next((c for c in ("condition", "strategy") if c in t.columns), None)
    keys = ["model", cond] if cond else ["model"]
    parsed = t["status"].isin(_PARSED)
    if "condition" in t.columns:
        conds = t["condition"].astype(str)
        text_only = (conds == "no_image") | conds.str.endswith("+no_image")
        parsed = parsed | (text_only & t["status"].isin(_TEXT_ONLY_PARSED))
    g = t.assign(_p=parsed).groupby(keys, sort=True)["_p"].agg(["mean", "size"])
    lines = []
    for model, sub in g.groupby(level=0, sort=True):
        low = sub[sub["mean"] < floor]
        if low.empty:
            continue
        where = ", ".join(f"{100 * r['mean']:.1f}% under {idx[1]}, n = {int(r['size'])}" if len(keys) == 2
                          else f"{100 * r['mean']:.1f}%, n = {int(r['size'])}" for idx, r in low.iterrows())
        lines.append(f"warning: model {model!r} has a parse rate below {100 * floor:g}% ({where}): "
                     f"not assessable there")
    return lines


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(["m", "k", "é"]),
                               st.one_of(st.none(), st.sampled_from(["original", "no_image", "swap+no_image", "a"])),
                               st.one_of(st.none(), st.sampled_from(["answer", "abstain", "refusal", "unparsed",
                                                                     "no_response"]))), min_size=1, max_size=30),
       by=st.sampled_from(["condition", "strategy", None]))
def test_parse_rate_lines_equal_pandas(rows: list, by: str | None) -> None:
    """The run's parse-rate warnings, read without pandas, are the pandas implementation's lines."""
    from medvlm_audit.health import parse_rate_lines_of

    cols = {"model": [r[0] for r in rows], "status": [r[2] for r in rows]}
    if by:
        cols[by] = [r[1] for r in rows]
    assert parse_rate_lines_of(cols) == _pandas_parse_rate_lines(pd.DataFrame(cols))


def test_pandas_version_read_without_pandas() -> None:
    """The parquet metadata's ``pandas_version`` is what ``pandas.__version__`` says (read without importing it)."""
    from medvlm_audit.columns import _pandas_version

    assert _pandas_version() == pd.__version__


@pytest.mark.slow
def test_case_rows_with_different_fields(grounding_run: Path, tmp_path: Path) -> None:
    """Probe sets of different builders carry different extra fields: the table is still built without pandas
    and is the pandas bytes; a field it reads that some rows lack (pandas fills NaN) falls back to pandas."""
    import shutil
    import sqlite3

    shutil.copy(grounding_run / "run.sqlite", tmp_path / "run.sqlite")
    db = sqlite3.connect(tmp_path / "run.sqlite")
    rows = db.execute("SELECT rowid, row FROM cases").fetchall()
    for rowid, row in rows[::2]:
        db.execute("UPDATE cases SET row = ? WHERE rowid = ?", (json.dumps({**json.loads(row), "dicom_id": "d"}),
                                                                 rowid))
    db.commit()
    lean, want = _export_bytes_both_ways(tmp_path)
    assert lean is not None and lean == want
    for rowid, row in rows[::3]:
        r = json.loads(row)
        del r["sex"]
        db.execute("UPDATE cases SET row = ? WHERE rowid = ?", (json.dumps(r), rowid))
    db.commit()
    db.close()
    lean, want = _export_bytes_both_ways(tmp_path)
    assert lean is None


# ---- the stress suite ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stress_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stress suite's embedded default (phantom MCQ items, three reference answerers)."""
    from medvlm_audit import api
    from medvlm_audit.suites import get_suite

    out = tmp_path_factory.mktemp("lean-stress")
    return Path(api.run(get_suite("stress").embedded_config(out), progress=False).run_dir)


def _stress_bytes_both_ways(run_dir: Path) -> tuple[tuple[bytes, bytes] | None, tuple[bytes, bytes]]:
    from medvlm_audit.suites.stress.suite import tidy_stress, tidy_stress_columns

    return _bytes_both_ways(run_dir, tidy_stress_columns, tidy_stress)


@pytest.mark.slow
def test_stress_run_exports_pandas_bytes(stress_run: Path) -> None:
    lean, want = _stress_bytes_both_ways(stress_run)
    assert lean is not None, "the stress export fell back to pandas on its own embedded default"
    assert lean == want
    assert (stress_run / "results.csv").read_bytes() == want[0]
    assert (stress_run / "results.parquet").read_bytes() == want[1]


STRESS_TEXT = st.one_of(ODD_TEXT, st.sampled_from(["A", "B.", "<answer>B</answer>", "<answer>C. x</answer>",
                                                   "I cannot answer without the image", "Unknown", "A or B"]))


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_edited_stress_stores_export_pandas_bytes(stress_run: Path, tmp_path_factory, data) -> None:
    """Answers of any text, errors, not-asked rows, missing latencies and payload fields of other values: wherever
    the pandas-free stress table is built it is the pandas table's bytes."""
    import shutil
    import sqlite3

    work = tmp_path_factory.mktemp("stress-edit")
    shutil.copy(stress_run / "run.sqlite", work / "run.sqlite")
    db = sqlite3.connect(work / "run.sqlite")
    keys = [k for (k,) in db.execute("SELECT key FROM responses ORDER BY key")]
    pick = st.lists(st.sampled_from(keys), max_size=12, unique=True)
    for k in data.draw(pick, "texts"):
        db.execute("UPDATE responses SET text = ? WHERE key = ?", (data.draw(st.one_of(st.none(), STRESS_TEXT)), k))
    for k in data.draw(pick, "errors"):
        db.execute("UPDATE responses SET text = NULL, error_kind = 'http_500', error_message = ? WHERE key = ?",
                   (data.draw(st.one_of(st.none(), ODD_TEXT)), k))
    if data.draw(st.booleans(), "latency all null"):
        db.execute("UPDATE responses SET latency_s = NULL")
    for k in data.draw(pick, "deleted"):
        db.execute("DELETE FROM responses WHERE key = ?", (k,))
    field = data.draw(st.sampled_from([None, None, "needs_image", "t4_variant", "required", "n_options",
                                       "benchmark"]), "payload field edited")
    trials = db.execute("SELECT rowid, payload FROM trials").fetchall() if field else []
    for i, (rowid, payload) in enumerate(trials):
        if data.draw(st.booleans()):
            p = json.loads(payload)
            p[field] = data.draw(st.sampled_from([None, True, False, 3, "x"]))
            db.execute("UPDATE trials SET payload = ? WHERE rowid = ?", (json.dumps(p), rowid))
        if i > 40:
            break
    db.commit()
    db.close()
    try:
        lean, want = _stress_bytes_both_ways(work)
    except (ValueError, TypeError, KeyError) as e:
        event(f"the pandas code refuses it: {type(e).__name__}")
        from medvlm_audit.store import RunStore
        from medvlm_audit.suites.stress.suite import tidy_stress_columns

        with RunStore.open_dir(work, readonly=True) as store:
            assert tidy_stress_columns(store) is None
        return
    event(f"pandas-free table built: {lean is not None}")
    if lean is not None:
        assert lean[0] == want[0]
        assert lean[1] == want[1]


def test_stress_item_rows_are_the_table_records() -> None:
    """The item rows a stress plan records in the store are the item table's records (the pandas oracle)."""
    from medvlm_audit.suites.stress.items import ItemSet, MCQItem

    items = [MCQItem(item_id=f"i{n}", benchmark="b", question="q?", options=("x", "y"), answer=n % 2,
                     images=("a.png",) if n else (), needs_image=(None, True, False)[n % 3],
                     substitute_image=None if n % 2 else "s.png", substitute_answer=None if n % 2 else 1)
             for n in range(5)]
    for subset in (items, items[1:2], [it for it in items if it.needs_image is not None]):
        its = ItemSet(subset)
        frame = its.frame()
        frame.insert(0, "case_id", frame["item_id"])
        want = frame.astype(object).where(frame.notna(), None).to_dict("records")
        got = [{"case_id": r["item_id"], **r} for r in its.rows()]
        assert json.dumps(got, default=str) == json.dumps(want, default=str)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(["m", "k"]), st.sampled_from(["original", "no_image", "shuffled",
                                                                               "swap+no_image"]),
                               st.sampled_from(["i1", "i2", "i3"]), st.integers(0, 1),
                               st.sampled_from(["answer", "abstain", "refusal", "unparsed", "no_response"])),
                     min_size=1, max_size=40, unique_by=lambda r: r[:4]),
       twice=st.booleans())
def test_stress_parse_rate_lines_equal_the_analysis(rows: list, twice: bool) -> None:
    """The stress run's warnings without pandas are the analysis's lines (the oracle), or none where it raises."""
    from medvlm_audit.suites.stress.analysis import parse_rate_lines
    from medvlm_audit.suites.stress.parse_rates import parse_rate_lines_of

    rows = rows + rows[:1] if twice else rows  # a trial twice: the analysis raises

    cols = {"model": [r[0] for r in rows], "condition": [r[1] for r in rows], "item_id": [r[2] for r in rows],
            "sample_index": [r[3] for r in rows], "status": [r[4] for r in rows], "benchmark": ["b"] * len(rows),
            "required": [True] * len(rows), "n_options": [4] * len(rows),
            "parsed": ["A" if r[4] == "answer" else None for r in rows],
            "correct": [1.0 if r[4] == "answer" else 0.0 for r in rows]}
    try:
        want = parse_rate_lines(pd.DataFrame(cols))
    except ValueError:
        want = None
    event("the analysis raises" if want is None else "no usable answer" if any("no usable" in x for x in want)
          else f"{min(len(want), 2)} warning line(s)")
    assert parse_rate_lines_of(cols) == want
