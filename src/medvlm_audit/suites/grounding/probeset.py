"""ProbeSet: a validated, deterministic collection of cases plus fixed intervention parameters.

On disk a probe set is a folder with ``manifest.parquet`` (one row per case) and ``probeset.json``
(provenance: builder, parameters, seed, package version, content hash). Image paths point at the
user's files (relative to ``image_root`` or absolute); source images are never copied or edited.

:meth:`ProbeSet.load` reads the manifest with pyarrow (its rows served from the Arrow columns), so planning a run
never imports pandas (issue 23: ~0.25 CPU-s of every invocation); the pandas table (``ProbeSet.df``) is read on
first use. The rows are the values the pandas table holds (Python scalars, None where missing; checked against it in
tests/test_lean_run_path.py); a manifest whose column types the rows cannot mirror exactly (a list, date or
text-typed number column) is read with pandas as before. The content hash is pandas' (it is recorded in every run
store): ``save`` records it beside the manifest file's SHA-256 in ``probeset.json``, and ``load`` takes it from
there while the file is unchanged, else computes it with pandas.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from medvlm_audit import __version__
from medvlm_audit.atomic import mkdtemp_shared
from medvlm_audit.errors import ProbeSetError
from medvlm_audit.findings import DISPLAY_NAMES
from medvlm_audit.suites.grounding.case import KINDS, Case

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

MANIFEST = "manifest.parquet"
PROVENANCE = "probeset.json"

#: required manifest columns and their meaning
REQUIRED_COLUMNS: dict[str, str] = {
    "case_id": "unique id of the case",
    "kind": "finding_presence | report_error | mcq | ...",
    "label": "ground truth: 1 = Yes, 0 = No (binary kinds)",
}
#: the fill of a missing nullable-integer column (pandas.NA; a name, so that importing this module needs no pandas)
INT_NA = "<NA>"
_NAN = float("nan")
#: optional columns with their fill value
OPTIONAL_COLUMNS: dict[str, Any] = {
    "finding": None,
    "sentence": None,  # candidate report sentence (report_error)
    "image_path": None,
    "image_width": INT_NA,
    "image_height": INT_NA,
    "box_x0": _NAN,
    "box_y0": _NAN,
    "box_x1": _NAN,
    "box_y1": _NAN,
    "tbox_x0": INT_NA,
    "tbox_y0": INT_NA,
    "tbox_x1": INT_NA,
    "tbox_y1": INT_NA,
    "ibox_x0": INT_NA,
    "ibox_y0": INT_NA,
    "ibox_x1": INT_NA,
    "ibox_y1": INT_NA,
    "ibox_overlaps": False,
    "swap_image_path": None,
    "swap_patient_id": None,
    "patient_id": None,
    "study_id": None,
    "age": _NAN,
    "sex": None,
    "view": None,
    "source": None,
    "split": None,
    "report": None,
}
INT_COLUMNS = [f"{p}_{c}" for p in ("tbox", "ibox") for c in ("x0", "y0", "x1", "y1")] + ["image_width", "image_height"]
FLOAT_COLUMNS = ("box_x0", "box_y0", "box_x1", "box_y1", "age")
#: provenance key holding the manifest file's SHA-256 and the content hash of what it loads as
MANIFEST_FILE_KEY = "manifest_file"
META_COLUMNS = ("patient_id", "study_id", "age", "sex", "view", "source", "split")
BINARY_KINDS = {"finding_presence", "report_error"}


def _none(v: Any) -> Any:
    if v is None or type(v).__name__ == "NAType":  # pandas.NA, recognised without importing pandas
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


class _ArrowColumn:
    """A manifest column kept as its Arrow array (a few bytes per value) and turned into Python values, normalised
    by ``norm``, only when read: a column of distinct texts or of floats held as Python objects costs ~60 bytes
    per row for the whole run (issue 23: 6.9 MB of a 10,000-case manifest, against ~1 MB as Arrow arrays)."""

    __slots__ = ("arr", "norm")

    def __init__(self, arr: Any, norm: Callable[[list[Any]], list[Any]] | None) -> None:
        self.arr, self.norm = arr, norm

    def values(self, start: int = 0, stop: int | None = None) -> list[Any]:
        arr = self.arr
        if start or stop is not None:
            arr = arr.slice(start, (len(arr) if stop is None else stop) - start)
        vals = arr.to_pylist()
        return vals if self.norm is None else self.norm(vals)


class _Constant:
    """A column of one value (an optional column the manifest lacks)."""

    __slots__ = ("n", "value")

    def __init__(self, value: Any, n: int) -> None:
        self.value, self.n = value, n

    def values(self, start: int = 0, stop: int | None = None) -> list[Any]:
        return [self.value] * ((self.n if stop is None else stop) - start)


def _bools(vals: list[Any]) -> list[Any]:
    return [bool(v) for v in vals]  # fillna(False).astype(bool)


def _float_values(vals: list[Any]) -> list[Any]:
    return [None if v is None or v != v else float(v) for v in vals]


def _nan_none(vals: list[Any]) -> list[Any]:
    return [None if v is None or v != v else v for v in vals]


def _int_as_float(vals: list[Any]) -> list[Any]:
    return [None if v is None else float(v) for v in vals]


class ManifestRows(Sequence[dict[str, Any]]):
    """A manifest's rows kept as its Arrow columns, turned into Python values (pandas' values: normalised per
    column) a block of rows at a time as they are read, each row a dict built when it is read. A 10,000-case
    manifest holds ~3 MB of Arrow arrays for the whole run, against 6.9 MB as Python lists (the strings and floats
    of every row as objects) and ~15 MB as dicts; reading the rows again costs a conversion (~10 ms per 10,000
    rows), done a few times per run (validation, the store's copy, planning)."""

    __slots__ = ("_cols", "_names", "_n")

    #: rows turned into Python values at a time while iterating
    BLOCK = 2048

    def __init__(self, cols: dict[str, _ArrowColumn | _Constant], n: int) -> None:
        self._cols, self._names, self._n = cols, list(cols), n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return {c: v.values(i, i + 1)[0] for c, v in self._cols.items()}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        names = self._names
        for start in range(0, self._n, self.BLOCK):
            stop = min(start + self.BLOCK, self._n)
            block = [v.values(start, stop) for v in self._cols.values()]
            for vals in zip(*block):
                yield dict(zip(names, vals))

    def column(self, name: str) -> list[Any]:
        return self._cols[name].values()


class ProbeSet:
    """A manifest table, the folder image paths are relative to, and provenance.

    Built from a DataFrame (the builders), or by :meth:`load` from plain rows (``df`` then read on first use)."""

    def __init__(self, df: pd.DataFrame, image_root: Path, provenance: dict[str, Any] | None = None,
                 name: str = "probeset") -> None:
        self._df: pd.DataFrame | None = normalize_manifest(df)
        self._rows: ManifestRows | None = None
        self._manifest: Path | None = None
        self._hash: str | None = None
        self.image_root = image_root
        self.provenance: dict[str, Any] = {} if provenance is None else provenance
        self.name = name

    @classmethod
    def _from_rows(cls, rows: ManifestRows, manifest: Path, image_root: Path, provenance: dict[str, Any],
                   name: str, content_hash: str | None) -> ProbeSet:
        ps = cls.__new__(cls)
        ps._df, ps._rows, ps._manifest, ps._hash = None, rows, manifest, content_hash
        ps.image_root, ps.provenance, ps.name = image_root, provenance, name
        return ps

    @property
    def df(self) -> pd.DataFrame:
        """The manifest as a normalised pandas table (read from the manifest file on first use after ``load``). Of
        a loaded set it is for reading: the cases, rows and hash come from the rows read at load, so an edited
        table becomes a probe set as ``ProbeSet(edited, ps.image_root, ps.provenance, name=...)``."""
        if self._df is None:
            import pandas as pd

            assert self._manifest is not None
            self._df = normalize_manifest(pd.read_parquet(self._manifest))
        return self._df

    @df.setter
    def df(self, value: pd.DataFrame) -> None:
        self._df, self._rows, self._manifest, self._hash = normalize_manifest(value), None, None, None

    def __len__(self) -> int:
        return len(self._rows) if self._rows is not None else len(self.df)

    def __repr__(self) -> str:
        return f"ProbeSet(name={self.name!r}, cases={len(self)}, image_root={str(self.image_root)!r})"

    @property
    def content_hash(self) -> str:
        """pandas' hash of the normalised manifest (every value, row order); of a set read by :meth:`load`, the
        one recorded beside the unchanged manifest file, else computed once (a table built in memory may be
        edited in place, so its hash is computed on every call)."""
        if self._rows is None:
            return manifest_hash(self.df)
        if self._hash is None:
            self._hash = manifest_hash(self.df)
        return self._hash

    def rows(self) -> Sequence[dict[str, Any]]:
        """The manifest's rows as plain dicts (column order kept; pandas' values where built from a table)."""
        if self._rows is None:
            cols = list(self.df.columns)
            return [dict(zip(cols, row)) for row in self.df.itertuples(index=False, name=None)]
        return self._rows

    def case_records(self) -> Sequence[dict[str, Any]]:
        """The rows as the run store records them (JSON-ready: Python scalars, None where missing)."""
        if self._rows is not None:
            return self._rows
        df = self.df
        return df.astype(object).where(df.notna(), None).to_dict("records")

    def boxed_case_ids(self) -> list[str]:
        """The ids of the cases with a working target box (``tbox_x0`` given)."""
        if self._rows is not None:
            return [str(c) for c, x in zip(self._rows.column("case_id"), self._rows.column("tbox_x0"))
                    if _none(x) is not None]
        return [str(r["case_id"]) for r in self.rows() if _none(r.get("tbox_x0")) is not None]

    @property
    def allow_outside_root(self) -> bool:
        """Whether the builder was told to accept images outside the image root (``allow_outside_root``)."""
        params = self.provenance.get("parameters")
        return bool(self.provenance.get("allow_outside_root")
                    or (isinstance(params, dict) and params.get("allow_outside_root")))

    def resolve(self, path: str | None) -> Path | None:
        """The image file of a manifest path. One outside the image root (absolute elsewhere, ``..``, a symlink out)
        is refused, so no other file's pixels reach a model server, unless the probe set allows it."""
        if path is None:
            return None
        p = Path(path)
        full = p if p.is_absolute() else self.image_root / p
        if not self.allow_outside_root and (why := outside_root(path, self.image_root)):
            raise ProbeSetError(f"probe set {self.name!r}: image {why}; images outside the image root are refused "
                                "unless the probe set is built with allow_outside_root (--allow-outside-root)")
        return full

    def cases(self) -> Iterator[Case]:
        if self._rows is not None:
            for r in self._rows:
                yield row_to_case(r)
            return
        cols = list(self.df.columns)
        for row in self.df.itertuples(index=False, name=None):
            yield row_to_case(dict(zip(cols, row)))

    def case(self, case_id: str) -> Case:
        if self._rows is not None:
            ids = self._rows.column("case_id")
            if case_id in ids:
                return row_to_case(self._rows[ids.index(case_id)])
            raise KeyError(f"case {case_id!r} not in probe set {self.name!r}")
        rows = self.df[self.df["case_id"] == case_id]
        if rows.empty:
            raise KeyError(f"case {case_id!r} not in probe set {self.name!r}")
        return row_to_case(rows.iloc[0].to_dict())

    def validate(self, check_files: bool = True) -> None:
        root = self.image_root if check_files else None
        if self._rows is not None:
            validate_rows(self._rows, root, name=self.name)
        else:
            validate_manifest(self.df, root, name=self.name)

    def save(self, folder: str | Path) -> Path:
        """Write manifest + provenance atomically (a temp folder renamed into place)."""
        folder = Path(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(mkdtemp_shared(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            import pandas as pd

            self.df.to_parquet(tmp / MANIFEST, index=False)
            prov = {k: v for k, v in self.provenance.items() if k != MANIFEST_FILE_KEY}
            prov.setdefault("package_version", __version__)  # provenance only: not part of the content hash
            prov.update(name=self.name, n_cases=len(self.df), content_hash=self.content_hash)
            # what the file loads as, hashed once here so that `load` needs no pandas while the file is unchanged
            prov[MANIFEST_FILE_KEY] = {
                "sha256": _file_sha256(tmp / MANIFEST),
                "content_hash": manifest_hash(normalize_manifest(pd.read_parquet(tmp / MANIFEST))),
            }
            root = self.image_root.resolve()
            prov["image_root"] = os.path.relpath(root, folder.resolve()) if _same_drive(root, folder) else str(root)
            (tmp / PROVENANCE).write_text(json.dumps(prov, indent=2, default=str))
            if folder.exists():
                old = folder.with_name(f".{folder.name}.old")
                shutil.rmtree(old, ignore_errors=True)
                folder.rename(old)
                tmp.rename(folder)
                shutil.rmtree(old, ignore_errors=True)
            else:
                tmp.rename(folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return folder

    @classmethod
    def load(cls, folder: str | Path, validate: bool = True) -> ProbeSet:
        folder = Path(folder)
        man, prov_path = folder / MANIFEST, folder / PROVENANCE
        if not man.exists():
            raise ProbeSetError(f"{man}: probe-set manifest not found")
        prov: dict[str, Any] = {}
        if prov_path.exists():
            try:
                prov = json.loads(prov_path.read_text())
            except json.JSONDecodeError as e:
                raise ProbeSetError(f"{prov_path}: invalid JSON ({e})") from e
        recorded = prov.pop(MANIFEST_FILE_KEY, None)  # not part of the provenance a run records
        root = Path(prov.get("image_root", "."))
        root = (root if root.is_absolute() else (folder / root)).resolve()
        name = str(prov.get("name", folder.name))
        try:
            raw = man.read_bytes()
            rows = manifest_rows(raw)
        except Exception as e:  # pragma: no cover - depends on the corruption
            raise ProbeSetError(f"{man}: cannot read manifest ({e})") from e
        if rows is not None:
            known = None
            if isinstance(recorded, dict) and recorded.get("sha256") == hashlib.sha256(raw).hexdigest():
                known = recorded.get("content_hash")
            ps = cls._from_rows(rows, man, root, prov, name, known if isinstance(known, str) else None)
        else:  # column types plain rows cannot mirror: the pandas table, as before
            import pandas as pd

            try:
                df = pd.read_parquet(man)
            except Exception as e:  # pragma: no cover - depends on the corruption
                raise ProbeSetError(f"{man}: cannot read manifest ({e})") from e
            ps = cls(df, root, prov, name=name)
        if validate:
            ps.validate()
        return ps


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _arrow_kind(t: Any) -> str | None:
    """The kind of an Arrow column type whose values plain rows hold exactly as pandas does, else None."""
    import pyarrow as pa

    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return None if pa.types.is_uint64(t) else "int"  # uint64 beyond int64 has no nullable-integer mirror
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return "float"
    return None


def manifest_rows(raw: bytes) -> ManifestRows | None:
    """A manifest file's rows, normalised as :func:`normalize_manifest` does, as plain dicts whose values equal
    the pandas table's (``astype(object)`` with missing values None), read with pyarrow; None where a column's
    type has no exact plain mirror (lists, dates, decimals, dictionaries, numbers stored as text...): the caller
    then reads it with pandas. Raises ProbeSetError for a missing required column, as the pandas path does."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.ParquetFile(pa.BufferReader(raw)).read()  # not read_table: its dataset layer imports pandas
    numpy_types: dict[str, str] = {}
    if table.schema.metadata and b"pandas" in table.schema.metadata:
        meta = json.loads(table.schema.metadata[b"pandas"])
        # pandas restores a saved index: a RangeIndex (what `to_parquet` stores by default: no column, the rows'
        # values and order unchanged, and normalize_manifest resets it) is harmless; an index stored as a column
        # (``set_index``) or columns of several levels change the table
        if any(not (isinstance(ix, dict) and ix.get("kind") == "range") for ix in meta.get("index_columns") or ()):
            return None
        if len(meta.get("column_indexes") or ()) > 1:
            return None
        numpy_types = {str(c.get("name")): str(c.get("numpy_type")) for c in meta.get("columns", [])}
    names = table.column_names
    if len(set(names)) != len(names):
        return None
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise ProbeSetError(f"manifest lacks required column(s) {missing}")
    kinds = {c: _arrow_kind(table.schema.field(c).type) for c in names}
    if any(k is None for k in kinds.values()):
        return None
    if kinds["case_id"] != "str" or table.column("case_id").null_count:
        return None
    if any(kinds.get(c, "null") not in ("int", "null") for c in INT_COLUMNS):
        return None
    if any(kinds.get(c, "null") not in ("int", "float", "null") for c in FLOAT_COLUMNS):
        return None
    if kinds.get("ibox_overlaps", "null") not in ("bool", "null"):
        return None
    cols: dict[str, _ArrowColumn | _Constant] = {}
    n = table.num_rows
    for c in names:
        arr = table.column(c).combine_chunks()
        if c in FLOAT_COLUMNS:
            cols[c] = _ArrowColumn(arr, _float_values)
        elif c == "ibox_overlaps":
            cols[c] = _ArrowColumn(arr, _bools)
        elif kinds[c] == "int" and c not in INT_COLUMNS and arr.null_count:
            if numpy_types.get(c, "").lstrip("U").startswith("Int"):  # a nullable-integer column
                cols[c] = _ArrowColumn(arr, None)
            else:
                cols[c] = _ArrowColumn(arr, _int_as_float)  # pandas reads it as float64
        elif kinds[c] == "float":
            cols[c] = _ArrowColumn(arr, _nan_none)
        else:  # texts, ints, booleans, nulls: Arrow's values are pandas' (``astype(object)``, None where missing)
            cols[c] = _ArrowColumn(arr, None)
    for col, fill in OPTIONAL_COLUMNS.items():
        if col not in cols:
            cols[col] = _Constant(False if fill is False else None, n)
    return ManifestRows(cols, n)


@functools.lru_cache(maxsize=4096)
def _real(root: Path) -> Path:
    return root.resolve()


def _real_file(full: Path) -> Path | None:
    """``full.resolve()`` from its folder's real location (resolved once per folder) and one ``lstat`` of the file
    itself, or None when the file is a symlink (then the caller resolves it whole): a probe set's images share a
    few folders, and resolving every path walks every folder above it again (a syscall per folder per image)."""
    try:
        if stat.S_ISLNK(os.lstat(full).st_mode):
            return None
    except OSError:  # missing: resolve() then leaves the name as it is, under the folder's real location
        pass
    return _real(full.parent) / full.name


def outside_root(path: str | Path, image_root: Path) -> str | None:
    """Why an image path leads outside ``image_root`` (an absolute path elsewhere, ``..``, a symlink out of the
    root), judged on the real location with every symlink followed; None when it stays inside.

    >>> outside_root("a/b.png", Path("/data/root")) is None
    True
    >>> outside_root("../secret.png", Path("/data/root"))
    "../secret.png (climbs out with '..') leads to /data/secret.png, outside the image root /data/root"
    """
    root = _real(Path(image_root))
    p = Path(path)
    try:
        real = _real_file(root / p) if p.parts and not p.is_absolute() and ".." not in p.parts else None
        if real is None:
            real = (p if p.is_absolute() else root / p).resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        return f"{path} cannot be resolved ({e})"
    if real == root or root in real.parents:
        return None
    how = ("an absolute path" if p.is_absolute() else "climbs out with '..'" if ".." in p.parts
           else "a symlink out of the root")
    return f"{path} ({how}) leads to {real}, outside the image root {root}"


def _same_drive(a: Path, b: Path) -> bool:
    try:
        os.path.relpath(a, b.resolve())
        return True
    except ValueError:  # pragma: no cover - windows drives
        return False


def normalize_manifest(df: pd.DataFrame) -> pd.DataFrame:
    """Add missing optional columns with their fill values and fix dtypes (no row is dropped)."""
    import pandas as pd

    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ProbeSetError(f"manifest lacks required column(s) {missing}")
    df = df.copy()
    for col, fill in OPTIONAL_COLUMNS.items():
        if col not in df.columns:
            df[col] = pd.NA if fill is INT_NA else fill
    for col in INT_COLUMNS:
        df[col] = pd.array(pd.to_numeric(df[col], errors="coerce"), dtype="Int64")
    for col in FLOAT_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    df["case_id"] = df["case_id"].astype(str)
    df["ibox_overlaps"] = df["ibox_overlaps"].fillna(False).astype(bool)
    return df.reset_index(drop=True)


def manifest_hash(df: pd.DataFrame) -> str:
    """Content hash of the manifest (row order and every value), independent of the parquet encoding."""
    import pandas as pd

    h = hashlib.sha256()
    h.update(json.dumps(list(df.columns)).encode())
    h.update(pd.util.hash_pandas_object(df.astype(str), index=False).values.tobytes())
    return h.hexdigest()


def row_to_case(r: dict[str, Any]) -> Case:
    def box(prefix: str, cast: type) -> Any:
        vals = [_none(r.get(f"{prefix}_{c}")) for c in ("x0", "y0", "x1", "y1")]
        return None if any(v is None for v in vals) else tuple(cast(v) for v in vals)

    label = _none(r.get("label"))
    meta = {k: _none(r.get(k)) for k in META_COLUMNS}
    known = set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS)
    meta.update({k: _none(v) for k, v in r.items()
                 if k not in known and not isinstance(v, list) and type(v).__name__ != "ndarray"})
    opts = r.get("options")
    w, h = _none(r.get("image_width")), _none(r.get("image_height"))
    return Case(
        case_id=str(r["case_id"]),
        kind=str(r["kind"]),
        label=None if label is None else int(label),
        finding=_none(r.get("finding")),
        sentence=_none(r.get("sentence")),
        image=_none(r.get("image_path")),
        target_box=box("box", float),
        tbox=box("tbox", int),
        ibox=box("ibox", int),
        ibox_overlaps=bool(_none(r.get("ibox_overlaps")) or False),
        image_size=None if w is None or h is None else (int(w), int(h)),
        swap_image=_none(r.get("swap_image_path")),
        options=tuple(opts) if opts is not None and not isinstance(opts, float) else (),
        meta=meta,
    )


def _header_size(path: str | None, image_root: Path, w: Any, h: Any) -> tuple[Any, Any, str | None]:
    """Fill a missing image width/height from the image file's header; the reason when it cannot be read."""
    if path is None:
        return w, h, "no image_path to read the size from"
    full = Path(path) if Path(path).is_absolute() else image_root / path
    if not full.exists():
        return w, h, None  # reported as a missing file
    from medvlm_audit.images import read_image_header

    try:
        fw, fh = read_image_header(full)
    except Exception as e:  # noqa: BLE001 - any decoder error is reported with the case
        return w, h, f"the size of {full} cannot be read ({e})"
    return (fw if w is None else w), (fh if h is None else h), None


def validate_manifest(df: pd.DataFrame, image_root: Path | None, name: str = "probeset") -> None:
    """Raise ProbeSetError naming the case and field of the first problems found (up to 10 listed).

    A source box is checked against ``image_width`` x ``image_height``; where those are missing and files are
    checked (``image_root`` given), against the size in the image file's header.
    """
    cols = list(df.columns)
    validate_rows((dict(zip(cols, row)) for row in df.itertuples(index=False, name=None)), image_root, name=name)


def validate_rows(rows: Iterable[dict[str, Any]], image_root: Path | None, name: str = "probeset") -> None:
    """:func:`validate_manifest` on the manifest's rows (dicts of column -> value)."""
    problems: list[str] = []
    rows = rows if isinstance(rows, Sequence) else list(rows)
    if len(rows) == 0:
        raise ProbeSetError(f"probe set {name!r} is empty")
    seen: set[Any] = set()
    dup: list[Any] = []
    for r in rows:
        cid = r["case_id"]
        if cid in seen and cid not in dup:
            dup.append(cid)
        seen.add(cid)
    if len(dup):
        problems.append(f"duplicate case_id(s): {list(dup[:5])}")
    for r in rows:
        cid = r["case_id"]
        kind = r["kind"]
        if kind not in KINDS:
            problems.append(f"case {cid!r}: field 'kind' = {kind!r} is not one of {KINDS}")
        finding = _none(r.get("finding"))
        if finding is not None and finding not in DISPLAY_NAMES:
            problems.append(f"case {cid!r}: field 'finding' = {finding!r} is not a known finding")
        if kind in BINARY_KINDS:
            lab = _none(r.get("label"))
            if lab is None or lab not in (0, 1, True, False) or float(lab) not in (0.0, 1.0):
                problems.append(f"case {cid!r}: field 'label' = {lab!r} is not binary (0/1)")
            if kind == "finding_presence" and finding is None:
                problems.append(f"case {cid!r}: field 'finding' is empty for a finding_presence case")
            if kind == "report_error" and _none(r.get("sentence")) is None:
                problems.append(f"case {cid!r}: field 'sentence' is empty for a report_error case")
        w, h = _none(r.get("image_width")), _none(r.get("image_height"))
        b = [_none(r.get(f"box_{c}")) for c in ("x0", "y0", "x1", "y1")]
        if any(v is not None for v in b):
            if any(v is None for v in b):
                problems.append(f"case {cid!r}: box has missing coordinates {b}")
            else:
                x0, y0, x1, y1 = b
                if x1 < x0 or y1 < y0:
                    swapped = " and ".join(t for t, bad in (("x1 < x0", x1 < x0), ("y1 < y0", y1 < y0)) if bad)
                    problems.append(f"case {cid!r}: box {b} is inverted: {swapped} (x0, y0 is the top left "
                                    f"corner, x1, y1 the bottom right)")
                elif x1 - x0 < 1 or y1 - y0 < 1:
                    problems.append(f"case {cid!r}: box {b} is under 1 px")
                if (w is None or h is None) and image_root is not None:
                    w, h, why = _header_size(_none(r.get("image_path")), image_root, w, h)
                    if why:
                        problems.append(f"case {cid!r}: box {b} given without image_width/image_height and {why}")
                if x0 < 0 or y0 < 0 or (w is not None and x1 > w) or (h is not None and y1 > h):
                    problems.append(f"case {cid!r}: box {b} lies outside the {w}x{h} image")
        tb = [_none(r.get(f"tbox_{c}")) for c in ("x0", "y0", "x1", "y1")]
        if all(v is not None for v in tb):
            if tb[2] - tb[0] < 1 or tb[3] - tb[1] < 1:
                problems.append(f"case {cid!r}: working box {tb} is under 1 px")
            if min(tb) < 0 or max(tb) > 224:
                problems.append(f"case {cid!r}: working box {tb} lies outside the 224x224 image")
        if image_root is not None:
            for col in ("image_path", "swap_image_path"):
                p = _none(r.get(col))
                if p is not None:
                    full = Path(p) if Path(p).is_absolute() else image_root / p
                    if not full.exists():
                        problems.append(f"case {cid!r}: field {col!r}: file {full} does not exist")
        if len(problems) >= 10:
            break
    if problems:
        raise ProbeSetError(f"probe set {name!r} is invalid:\n  " + "\n  ".join(problems))
