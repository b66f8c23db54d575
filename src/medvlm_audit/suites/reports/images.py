"""Image sets of report-generation runs: JSONL ``{id, image, group}`` (image path relative to the file, group
the patient's sex F/M). The embedded default's ``phantom`` set is built by :mod:`.embedded`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from medvlm_audit.errors import ProbeSetError
from medvlm_audit.suites.reports.corpus import normalise_group

MANIFEST = "images.jsonl"


@dataclass(frozen=True)
class ImageSet:
    name: str
    path: str  # the manifest
    rows: pd.DataFrame  # case_id, image_path (absolute), sex, + optional metadata
    content_hash: str
    provenance: dict[str, Any]


def load_image_set(spec: str | Path, name: str | None = None) -> ImageSet:
    """A JSONL manifest (or a folder holding ``images.jsonl``): each row ``{id, image, group}``; errors name the
    file, the row and the field; every image must exist."""
    p = Path(spec)
    if p.is_dir():
        p = p / MANIFEST
    if not p.is_file():
        raise ProbeSetError(f"{p}: image set not found (a JSONL of {{id, image, group}} or a folder with {MANIFEST})")
    try:
        raw = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProbeSetError(f"{p}: not UTF-8 (byte {e.start})") from e
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ProbeSetError(f"{p}, row {n}: not valid JSON ({e.msg})") from e
        if not isinstance(obj, dict):
            raise ProbeSetError(f"{p}, row {n}: expected an object with id, image and group")
        for field in ("id", "image", "group"):
            if obj.get(field) in (None, ""):
                raise ProbeSetError(f"{p}, row {n}: missing field {field!r} (rows need id, image and group F/M)")
        g = normalise_group(obj["group"])
        if g is None:
            raise ProbeSetError(f"{p}, row {n}: field 'group' must be F or M, got {obj['group']!r}")
        cid = str(obj["id"])
        if cid in seen:
            raise ProbeSetError(f"{p}, row {n}: id {cid!r} repeats")
        seen.add(cid)
        img = Path(str(obj["image"]))
        img = img if img.is_absolute() else (p.parent / img)
        if not img.is_file():
            raise ProbeSetError(f"{p}, row {n}: image {img} does not exist")
        extra = {k: (json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v)
                 for k, v in obj.items() if k not in ("id", "image", "group")}
        rows.append({"case_id": cid, "image_path": str(img.resolve()), "sex": g, **extra})
    if not rows:
        raise ProbeSetError(f"{p}: the image set is empty")
    df = pd.DataFrame(rows)
    if df["sex"].nunique() < 2:
        raise ProbeSetError(f"{p}: every image is group {df['sex'].iloc[0]}; the audit needs F and M patients")
    h = hashlib.sha256(raw.encode()).hexdigest()
    return ImageSet(name or p.parent.name, str(p), df, h, {"source": str(p), "n": len(df)})
