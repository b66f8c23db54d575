"""VQA items of the faithfulness suite: schema, JSONL format, the TAIX-Ray VQA parquet loader, validation.

Question types and vocabularies (:mod:`.vocab`): ``binary`` (yes, no); ``ordinal`` (none, questionable,
mild, moderate, severe; heart size: normal, borderline, enlarged, massively enlarged); ``comparative``
(right, left, same severity, none); ``spatial`` (the options the question lists in parentheses, e.g.
"(not present, correctly positioned, too low, too high)").

JSONL, one item per line::

    {"item_id": "taix-000123-pe-left",        # unique within the file
     "question": "Is there a pleural effusion on the left? (yes or no)",
     "type": "binary",                        # binary | ordinal | comparative | spatial ("comparison" accepted)
     "answer": "yes",                         # in the question's vocabulary (case/space-insensitive)
     "image": "images/000123.png",            # relative to the file's folder (or image_root); required
     "meta": {"patient_id": "p1", "age": 71, "sex": "F", "split": "test", "uid": "...",
              "grades": {"PleuralEffusion_Left": 2, ...}}}   # anything else, kept as is

TAIX-Ray VQA layout (:func:`load_taix_parquet`): parquet shards with columns ``UID, Question, Answer,
Type, PatientID, Age, Sex, Split, Image`` (a Hugging Face image struct ``{bytes, path}``) and the finding
grades (``HeartSize, PulmonaryCongestion, PleuralEffusion_Right, ...``). The embedded image bytes are
written once per UID under ``image_dir`` (content-addressed, atomically; the parquet is never modified).

Invalid items raise :class:`ItemError` naming the file, line (or row) and field.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from medvlm_audit.errors import ProbeSetError
from medvlm_audit.suites.faithfulness.scoring import normalise_answer
from medvlm_audit.suites.faithfulness.vocab import normalise_type, vocabulary

#: the TAIX-Ray finding-grade columns
TAIX_GRADES: tuple[str, ...] = (
    "HeartSize", "PulmonaryCongestion", "PleuralEffusion_Right", "PleuralEffusion_Left", "PulmonaryOpacities_Right",
    "PulmonaryOpacities_Left", "Atelectasis_Right", "Atelectasis_Left",
)
TAIX_REQUIRED: tuple[str, ...] = ("UID", "Question", "Answer", "Type", "Image")


class ItemError(ProbeSetError):
    """A VQA item is invalid (the message names the file, line or row, and field)."""


@dataclass(frozen=True, slots=True)
class VQAItem:
    item_id: str
    question: str
    qtype: str  # normalised: binary | ordinal | comparative | spatial
    answer: str  # normalised, in the vocabulary
    image: str
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def vocabulary(self) -> tuple[str, ...]:
        return vocabulary(self.qtype, self.question)

    def to_record(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "question": self.question, "type": self.qtype, "answer": self.answer,
                "image": self.image, "meta": self.meta}


def make_item(rec: dict[str, Any], where: str, base: Path | None = None, check_image: bool = True) -> VQAItem:
    """Validate one record into a :class:`VQAItem` (``where`` names the file and line for errors)."""
    if not isinstance(rec, dict):
        raise ItemError(f"{where}: expected a JSON object")
    iid = rec.get("item_id")
    if not isinstance(iid, str) or not iid.strip():
        raise ItemError(f"{where}: field 'item_id' missing or not a non-empty string")
    where = f"{where} (item {iid})"
    q = rec.get("question")
    if not isinstance(q, str) or not q.strip():
        raise ItemError(f"{where}: field 'question' missing or empty")
    try:
        qtype = normalise_type(rec.get("type", ""))
    except ValueError as exc:
        raise ItemError(f"{where}: field 'type': {exc}") from None
    try:
        vocab = vocabulary(qtype, q)
    except ValueError as exc:
        raise ItemError(f"{where}: field 'question': {exc}") from None
    ans = rec.get("answer")
    if not isinstance(ans, str):
        raise ItemError(f"{where}: field 'answer' missing or not a string")
    a = normalise_answer(ans)
    if a == "correct" and "correctly positioned" in vocab:
        a = "correctly positioned"
    if a not in vocab:
        raise ItemError(f"{where}: field 'answer' = {ans!r} is not in the {qtype} vocabulary {list(vocab)}")
    img = rec.get("image")
    if not isinstance(img, str) or not img.strip():
        raise ItemError(f"{where}: field 'image' missing (every faithfulness item is asked about an image)")
    path = Path(img)
    if not path.is_absolute() and base is not None:
        path = base / path
    if check_image and not path.is_file():
        raise ItemError(f"{where}: field 'image': file {path} does not exist")
    meta = rec.get("meta", {}) or {}
    if not isinstance(meta, dict):
        raise ItemError(f"{where}: field 'meta' must be an object")
    return VQAItem(iid, q.strip(), qtype, a, str(path), dict(meta))


def validate_items(items: Iterable[VQAItem], source: str = "<items>") -> list[VQAItem]:
    out = list(items)
    seen: dict[str, int] = {}
    for i, it in enumerate(out):
        if it.item_id in seen:
            raise ItemError(f"{source}: item {i}: duplicate item_id {it.item_id!r} (first at {seen[it.item_id]})")
        seen[it.item_id] = i
    if not out:
        raise ItemError(f"{source}: no items")
    return out


def load_items(path: str | Path, image_root: str | Path | None = None, check_images: bool = True) -> list[VQAItem]:
    """Read a JSONL item file (images relative to ``image_root`` or the file's folder)."""
    from medvlm_audit.jsonl import iter_jsonl

    p = Path(path)
    base = Path(image_root) if image_root is not None else p.parent
    items = [make_item(rec, f"{p}:{ln}", base, check_images)  # streamed; errors name the file and line
             for ln, rec in iter_jsonl(p, error=ItemError, what="item file")]
    return validate_items(items, str(p))


def save_items(items: Sequence[VQAItem], path: str | Path) -> None:
    """Write items as JSONL atomically. Image paths are stored as :func:`load_items` reads them: relative to
    the file's folder when the image lies under it, else absolute (never relative to the working directory,
    which a later run need not share)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    folder = p.parent.resolve()

    def record(it: VQAItem) -> dict[str, Any]:
        rec = it.to_record()
        img = Path(it.image).resolve()
        try:
            rec["image"] = img.relative_to(folder).as_posix()
        except ValueError:
            rec["image"] = str(img)
        return rec

    data = "".join(json.dumps(record(it), sort_keys=True) + "\n" for it in items)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(data)
    os.replace(tmp, p)


def items_frame(items: Sequence[VQAItem]) -> pd.DataFrame:
    return pd.DataFrame([{"case_id": it.item_id, "question": it.question, "kind": it.qtype, "answer": it.answer,
                          "image": it.image, "meta": json.dumps(it.meta, sort_keys=True, default=str)}
                         for it in items])


# ------------------------------------------------------------------------------------------------ TAIX-Ray


def _image_bytes(v: Any) -> tuple[bytes | None, str]:
    if isinstance(v, dict):
        b = v.get("bytes")
        return (bytes(b) if b is not None else None), str(v.get("path") or "")
    if isinstance(v, (bytes, bytearray)):
        return bytes(v), ""
    return None, ""


def _ext(data: bytes, hint: str) -> str:
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return ".png"
    if data[:3] == b"\xff\xd8\xff":
        return ".jpg"
    return Path(hint).suffix.lower() or ".img"


def load_taix_parquet(paths: str | Path | Sequence[str | Path], image_dir: str | Path, *,
                      split: str | None = None, limit: int | None = None) -> list[VQAItem]:
    """Items from TAIX-Ray VQA parquet shards (a file, a folder of ``*.parquet`` or a list of files).

    ``split`` keeps one split (``train``/``val``/``test``, the ``Split`` column); item ids are
    ``<UID>-<sha1(question)[:8]>``; grades and demographics go to ``meta``.
    """
    if isinstance(paths, (str, Path)):
        p = Path(paths)
        files = sorted(p.glob("*.parquet")) if p.is_dir() else [p]
    else:
        files = [Path(x) for x in paths]
    if not files:
        raise ItemError(f"{paths}: no parquet files")
    out_dir = Path(image_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    items: list[VQAItem] = []
    for f in files:
        try:
            df = pd.read_parquet(f)
        except Exception as exc:  # noqa: BLE001  (pyarrow raises several types for a bad file)
            raise ItemError(f"{f}: cannot read parquet ({exc})") from None
        missing = [c for c in TAIX_REQUIRED if c not in df.columns]
        if missing:
            raise ItemError(f"{f}: missing column(s) {missing} (TAIX-Ray VQA layout: {list(TAIX_REQUIRED)} ...)")
        for row, r in enumerate(df.to_dict("records")):
            where = f"{f} row {row}"
            if split is not None and str(r.get("Split", "")).lower() != split.lower():
                continue
            uid = r["UID"]
            if not isinstance(uid, str) or not uid:
                raise ItemError(f"{where}: column 'UID' is empty")
            if uid not in written:
                data, hint = _image_bytes(r["Image"])
                if not data:
                    raise ItemError(f"{where}: column 'Image' holds no image bytes")
                name = hashlib.sha256(data).hexdigest()[:24] + _ext(data, hint)
                target = out_dir / name
                if not target.exists():
                    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out_dir)
                    with os.fdopen(fd, "wb") as fh:
                        fh.write(data)
                    os.replace(tmp, target)
                written[uid] = str(target)
            q = str(r["Question"])
            grades = {g: int(r[g]) for g in TAIX_GRADES if g in r and pd.notna(r[g])}
            meta = {"uid": uid, "patient_id": r.get("PatientID"), "age": None if pd.isna(r.get("Age")) else int(r["Age"]),
                    "sex": r.get("Sex"), "split": r.get("Split"), "study_date": r.get("StudyDate"),
                    "physician_id": r.get("PhysicianID"), "grades": grades, "source": "taix-ray"}
            rec = {"item_id": f"{uid}-{hashlib.sha1(q.encode()).hexdigest()[:8]}", "question": q,
                   "type": r["Type"], "answer": str(r["Answer"]), "image": written[uid],
                   "meta": {k: v for k, v in meta.items() if v is not None}}
            items.append(make_item(rec, where, None, check_image=True))
            if limit is not None and len(items) >= limit:
                return validate_items(items, str(paths))
    return validate_items(items, str(paths))


def taix_image_bytes_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """A TAIX-Ray-layout frame from plain rows whose ``Image`` is PNG bytes (for tests and fixtures)."""
    out = []
    for r in rows:
        r = dict(r)
        img = r.get("Image")
        if isinstance(img, (bytes, bytearray)):
            r["Image"] = {"bytes": bytes(img), "path": f"{r.get('UID', 'x')}.png"}
        out.append(r)
    return pd.DataFrame(out)


def png_bytes(pixels: Any) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()
