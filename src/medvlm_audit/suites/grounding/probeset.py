"""ProbeSet: a validated, deterministic collection of cases plus fixed intervention parameters.

On disk a probe set is a folder with ``manifest.parquet`` (one row per case) and ``probeset.json``
(provenance: builder, parameters, seed, package version, content hash). Image paths point at the
user's files (relative to ``image_root`` or absolute); source images are never copied or edited.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit import __version__
from medvlm_audit.atomic import mkdtemp_shared
from medvlm_audit.errors import ProbeSetError
from medvlm_audit.findings import DISPLAY_NAMES
from medvlm_audit.suites.grounding.case import KINDS, Case

MANIFEST = "manifest.parquet"
PROVENANCE = "probeset.json"

#: required manifest columns and their meaning
REQUIRED_COLUMNS: dict[str, str] = {
    "case_id": "unique id of the case",
    "kind": "finding_presence | report_error | mcq | ...",
    "label": "ground truth: 1 = Yes, 0 = No (binary kinds)",
}
#: optional columns with their fill value
OPTIONAL_COLUMNS: dict[str, Any] = {
    "finding": None,
    "sentence": None,  # candidate report sentence (report_error)
    "image_path": None,
    "image_width": pd.NA,
    "image_height": pd.NA,
    "box_x0": np.nan,
    "box_y0": np.nan,
    "box_x1": np.nan,
    "box_y1": np.nan,
    "tbox_x0": pd.NA,
    "tbox_y0": pd.NA,
    "tbox_x1": pd.NA,
    "tbox_y1": pd.NA,
    "ibox_x0": pd.NA,
    "ibox_y0": pd.NA,
    "ibox_x1": pd.NA,
    "ibox_y1": pd.NA,
    "ibox_overlaps": False,
    "swap_image_path": None,
    "swap_patient_id": None,
    "patient_id": None,
    "study_id": None,
    "age": np.nan,
    "sex": None,
    "view": None,
    "source": None,
    "split": None,
    "report": None,
}
INT_COLUMNS = [f"{p}_{c}" for p in ("tbox", "ibox") for c in ("x0", "y0", "x1", "y1")] + ["image_width", "image_height"]
META_COLUMNS = ("patient_id", "study_id", "age", "sex", "view", "source", "split")
BINARY_KINDS = {"finding_presence", "report_error"}


def _none(v: Any) -> Any:
    if v is None or v is pd.NA:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


@dataclass
class ProbeSet:
    """A manifest DataFrame, the folder image paths are relative to, and provenance."""

    df: pd.DataFrame
    image_root: Path
    provenance: dict[str, Any] = field(default_factory=dict)
    name: str = "probeset"

    def __post_init__(self) -> None:
        self.df = normalize_manifest(self.df)

    def __len__(self) -> int:
        return len(self.df)

    @property
    def content_hash(self) -> str:
        return manifest_hash(self.df)

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
        cols = list(self.df.columns)
        for row in self.df.itertuples(index=False, name=None):
            yield row_to_case(dict(zip(cols, row)))

    def case(self, case_id: str) -> Case:
        rows = self.df[self.df["case_id"] == case_id]
        if rows.empty:
            raise KeyError(f"case {case_id!r} not in probe set {self.name!r}")
        return row_to_case(rows.iloc[0].to_dict())

    def validate(self, check_files: bool = True) -> None:
        validate_manifest(self.df, self.image_root if check_files else None, name=self.name)

    def save(self, folder: str | Path) -> Path:
        """Write manifest + provenance atomically (a temp folder renamed into place)."""
        folder = Path(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(mkdtemp_shared(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            self.df.to_parquet(tmp / MANIFEST, index=False)
            prov = dict(self.provenance)
            prov.setdefault("package_version", __version__)  # provenance only: not part of the content hash
            prov.update(name=self.name, n_cases=len(self.df), content_hash=self.content_hash)
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
        try:
            df = pd.read_parquet(man)
        except Exception as e:  # pragma: no cover - depends on the corruption
            raise ProbeSetError(f"{man}: cannot read manifest ({e})") from e
        prov: dict[str, Any] = {}
        if prov_path.exists():
            try:
                prov = json.loads(prov_path.read_text())
            except json.JSONDecodeError as e:
                raise ProbeSetError(f"{prov_path}: invalid JSON ({e})") from e
        root = Path(prov.get("image_root", "."))
        root = root if root.is_absolute() else (folder / root)
        ps = cls(df, root.resolve(), prov, name=str(prov.get("name", folder.name)))
        if validate:
            ps.validate()
        return ps


@functools.lru_cache(maxsize=64)
def _real(root: Path) -> Path:
    return root.resolve()


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
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ProbeSetError(f"manifest lacks required column(s) {missing}")
    df = df.copy()
    for col, fill in OPTIONAL_COLUMNS.items():
        if col not in df.columns:
            df[col] = fill
    for col in INT_COLUMNS:
        df[col] = pd.array(pd.to_numeric(df[col], errors="coerce"), dtype="Int64")
    for col in ("box_x0", "box_y0", "box_x1", "box_y1", "age"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    df["case_id"] = df["case_id"].astype(str)
    df["ibox_overlaps"] = df["ibox_overlaps"].fillna(False).astype(bool)
    return df.reset_index(drop=True)


def manifest_hash(df: pd.DataFrame) -> str:
    """Content hash of the manifest (row order and every value), independent of the parquet encoding."""
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
    meta.update({k: _none(v) for k, v in r.items() if k not in known and not isinstance(v, (list, np.ndarray))})
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
    problems: list[str] = []
    if len(df) == 0:
        raise ProbeSetError(f"probe set {name!r} is empty")
    dup = df["case_id"][df["case_id"].duplicated()].unique()
    if len(dup):
        problems.append(f"duplicate case_id(s): {list(dup[:5])}")
    for row in df.itertuples(index=False):
        r = row._asdict()
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
