"""A table as plain column lists, written as the same ``results.csv`` / ``results.parquet`` bytes pandas writes.

A run's end-of-run export goes through here where its suite builds its tidy table without pandas
(``Suite.tidy_columns``), so the run path of an HTTP-model run never imports pandas (issue 23: ~0.25 CPU-s of
every invocation). Each column carries the pandas dtype the pandas code would have given it (:data:`DTYPES`);
:func:`csv_bytes` and :func:`parquet_bytes` then write what ``DataFrame.to_csv(index=False, lineterminator="\\n")``
and ``DataFrame.to_parquet(index=False)`` write for that table, byte for byte (tests/test_lean_run_path.py checks
it against pandas on every embedded default and on Hypothesis-generated values). :func:`infer_dtype` is pandas'
inference for a column built from Python values (``pd.DataFrame(records)``, ``pd.read_sql_query``), for the value
mixes it mirrors; None for any other mix, so that the caller falls back to pandas.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the pandas dtypes a column may carry: "str" (pandas' default string dtype, NaN where missing), "object" (None
#: or str values), "Int64" (nullable integers), "int64", "int8", "float64", "bool"
DTYPES = ("str", "object", "Int64", "int64", "int8", "float64", "bool")


@dataclass
class Columns:
    """Column name -> values (Python scalars; None where missing), each with its pandas dtype."""

    data: dict[str, list[Any]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(next(iter(self.data.values()))) if self.data else 0

    def add(self, name: str, values: list[Any], dtype: str) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"column {name!r}: dtype {dtype!r} is not one of {DTYPES}")
        self.data[name] = values
        self.dtypes[name] = dtype

    def select(self, names: Sequence[str]) -> Columns:
        return Columns({n: self.data[n] for n in names}, {n: self.dtypes[n] for n in names})

    def to_frame(self) -> Any:
        """The pandas table these columns stand for (tests, callers that want one)."""
        import numpy as np
        import pandas as pd

        out = {}
        for name, vals in self.data.items():
            dt = self.dtypes[name]
            if dt == "Int64":
                out[name] = pd.array(vals, dtype="Int64")
            elif dt == "float64":
                out[name] = np.array([np.nan if v is None else v for v in vals], dtype=float)
            elif dt in ("int64", "int8", "bool"):
                out[name] = np.array(vals, dtype=dt)
            elif dt == "str":
                out[name] = pd.array(vals, dtype="str")
            else:  # an explicit object dtype: pandas would infer its text dtype from an object array of text
                out[name] = pd.Series(vals, dtype=object)
        return pd.DataFrame(out, columns=list(self.data))


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def infer_dtype(values: Sequence[Any]) -> str | None:
    """The dtype pandas gives a column built from these Python values, or None where this does not mirror it.

    >>> infer_dtype(["a", None]), infer_dtype([None, None]), infer_dtype([1, None]), infer_dtype([1, 2])
    ('str', 'object', 'float64', 'int64')
    >>> infer_dtype([True, False]), infer_dtype([True, None]) is None, infer_dtype(["a", 1]) is None
    ('bool', True, True)
    """
    if not values:
        return None
    types = set(map(type, values))  # exact types: a subclass (a numpy scalar) is not mirrored
    real = types - {type(None)}
    if not real <= {bool, int, float, str}:
        return None
    if int in real and not all(-(2**63) <= v < 2**63 for v in values if type(v) is int):
        return None
    if not real:
        return "object"
    if real == {str}:
        return "str"
    if real == {bool}:
        return None if len(types) > 1 else "bool"
    if real <= {int, float}:
        return "int64" if types == {int} else "float64"
    return None


def _csv_cells(vals: Sequence[Any], dtype: str) -> list[str]:
    """One column's CSV cells as ``to_csv`` writes them: missing values empty, a float64 as its shortest repr (what
    numpy's ``astype(str)`` gives), anything else as ``str``."""
    if dtype == "float64":
        return ["" if v is None or v != v else repr(float(v)) for v in vals]
    if dtype in ("str", "object"):
        return [v if type(v) is str else "" if _missing(v) else str(v) for v in vals]
    if dtype == "Int64":
        return ["" if v is None else str(v) for v in vals]
    return [str(v) for v in vals]  # int64, int8, bool: never missing


def csv_bytes(cols: Columns) -> bytes:
    """``DataFrame.to_csv(index=False, lineterminator="\\n").encode("utf-8")`` of the table."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n", delimiter=",", quoting=csv.QUOTE_MINIMAL, doublequote=True,
                   quotechar='"')
    names = list(cols.data)
    w.writerow(names)
    cells = [_csv_cells(cols.data[n], cols.dtypes[n]) for n in names]
    w.writerows(zip(*cells))
    return buf.getvalue().encode("utf-8")


#: pandas dtype -> (Arrow type name, pandas_type, numpy_type) as pyarrow's pandas metadata records them
_ARROW = {
    "str": ("large_string", "object", "str"),
    "Int64": ("int64", "int64", "Int64"),
    "int64": ("int64", "int64", "int64"),
    "int8": ("int8", "int8", "int8"),
    "float64": ("float64", "float64", "float64"),
    "bool": ("bool_", "bool", "bool"),
}
#: the array module's item code of each fixed-width Arrow type
_CODES = {"int64": "q", "int8": "b", "float64": "d"}


def _bitmap(bits: Sequence[bool]) -> bytes:
    """Arrow's bit-packed bitmap (least significant bit first) of a sequence of booleans."""
    n = len(bits)
    if not n:
        return b""
    return int("".join("1" if b else "0" for b in reversed(bits)), 2).to_bytes((n + 7) // 8, "little")


def _arrow_array(vals: Sequence[Any], type_name: str) -> Any:
    """An Arrow array of Python values (None for null) built from its buffers: ``pyarrow.array`` imports pandas
    to check whether it was handed a pandas object, which is what this module exists to avoid."""
    import array

    import pyarrow as pa

    n = len(vals)
    valid = [v is not None for v in vals]
    nulls = n - sum(valid)
    validity = pa.py_buffer(_bitmap(valid)) if nulls else None
    typ = getattr(pa, type_name)()
    if type_name in ("string", "large_string"):
        encoded = [v.encode("utf-8") if v is not None else b"" for v in vals]
        offsets, acc = [0], 0
        for b in encoded:
            acc += len(b)
            offsets.append(acc)
        off = array.array("q" if type_name == "large_string" else "i", offsets).tobytes()
        buffers = [validity, pa.py_buffer(off), pa.py_buffer(b"".join(encoded))]
    elif type_name == "bool_":
        buffers = [validity, pa.py_buffer(_bitmap([bool(v) for v in vals]))]
    else:
        zero = 0.0 if type_name == "float64" else 0
        data = array.array(_CODES[type_name], [zero if v is None else v for v in vals]).tobytes()
        buffers = [validity, pa.py_buffer(data)]
    return pa.Array.from_buffers(typ, n, buffers, null_count=nulls)


def _pandas_version() -> str:
    """``pandas.__version__`` without importing pandas: the version module a built pandas carries (read as text),
    else the installed distribution's version (a scan of every installed package: ~15 ms)."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("pandas")
    if spec is not None and spec.origin:
        try:
            text = (Path(spec.origin).parent / "_version_meson.py").read_text(encoding="utf-8")
        except OSError:
            text = ""
        m = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", text, re.MULTILINE)
        if m:
            return m.group(1)
    from importlib.metadata import version

    return version("pandas")


def parquet_bytes(cols: Columns) -> bytes:
    """``DataFrame.to_parquet(index=False)`` of the table (pyarrow, snappy), with the pandas metadata pyarrow
    records, so that ``pd.read_parquet`` gives back the same dtypes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays, meta_cols = [], []
    for name, vals in cols.data.items():
        dt = cols.dtypes[name]
        if dt == "object":
            if all(v is None for v in vals):
                arr, pandas_type = pa.nulls(len(vals)), "empty"
            elif all(v is None or isinstance(v, str) for v in vals):
                arr, pandas_type = _arrow_array(vals, "string"), "unicode"
            else:
                raise ValueError(f"column {name!r}: object values other than text and None")
            numpy_type = "object"
        else:
            type_name, pandas_type, numpy_type = _ARROW[dt]
            if dt == "float64":
                vals = [None if v is None or v != v else v for v in vals]  # pandas writes NaN as null
            elif dt == "str":
                vals = [v if type(v) is str else None if _missing(v) else v for v in vals]
            arr = _arrow_array(vals, type_name)
        arrays.append(arr)
        meta_cols.append({"name": name, "field_name": name, "pandas_type": pandas_type, "numpy_type": numpy_type,
                          "metadata": None})
    meta = {"index_columns": [], "column_indexes": [], "columns": meta_cols, "attributes": {},
            "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": _pandas_version()}
    table = pa.Table.from_arrays(arrays, names=list(cols.data)).replace_schema_metadata(
        {b"pandas": json.dumps(meta).encode("utf8")})
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf, compression="snappy")
    return buf.getvalue().to_pybytes()
