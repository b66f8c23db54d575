"""MCQ items of the stress suite: schema, JSONL/CSV format, validation and the exclusion log.

One item per line (JSONL) or row (CSV)::

    {"item_id": "nejm-0001",                # unique within the file
     "question": "A 64-year-old man ... What is the most likely diagnosis?",
     "options": ["Pneumothorax", "Pleural effusion", "..."],   # >= 2, distinct (case/space-insensitive)
     "answer": "B",                         # gold as a letter; or "answer_index": 1 (0-based);
                                            # or "answer_text": "Pleural effusion"
     "images": ["img/0001.png"],            # paths relative to the file's folder (or image_root); may be []
     "needs_image": true,                   # optional: clinicians judge the image necessary (T2-T4 subset)
     "substitute_image": "img/0001_sub.png",# optional (T5): an image that supports a distractor ...
     "substitute_answer": "C",              # ... and the option it supports (letter, never the gold)
     "benchmark": "nejm",                   # source benchmark (T1 weights, T4 distractor pools)
     "meta": {"split": "test"}}             # anything else, kept as is

CSV: the same column names; ``options`` as a JSON list or ``option_A``, ``option_B``, ... columns;
``images`` as a JSON list or ``;``-separated paths; ``meta`` as a JSON object.
Invalid items raise :class:`ItemError` naming the file, row and item, or, with ``on_error="exclude"``,
are left out with their reason in the exclusion log.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from medvlm_audit.atomic import write_bytes_atomic
from medvlm_audit.errors import ProbeSetError
from medvlm_audit.scorers.option import LETTERS, norm_option

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

OnError = Literal["raise", "exclude"]


class ItemError(ProbeSetError):
    """An MCQ item is invalid (the message names the file, row and item)."""


@dataclass(frozen=True, slots=True)
class MCQItem:
    """One multiple-choice item. ``answer`` and ``substitute_answer`` are 0-based option indices."""

    item_id: str
    question: str
    options: tuple[str, ...]
    answer: int
    images: tuple[str, ...] = ()
    needs_image: bool | None = None
    substitute_image: str | None = None
    substitute_answer: int | None = None
    benchmark: str = "custom"
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def gold_letter(self) -> str:
        return LETTERS[self.answer]

    @property
    def gold_text(self) -> str:
        return self.options[self.answer]

    @property
    def k(self) -> int:
        return len(self.options)

    def to_record(self) -> dict[str, Any]:
        """The JSONL record of this item (letters for answers)."""
        rec: dict[str, Any] = {
            "item_id": self.item_id,
            "question": self.question,
            "options": list(self.options),
            "answer": self.gold_letter,
            "images": list(self.images),
            "benchmark": self.benchmark,
        }
        if self.needs_image is not None:
            rec["needs_image"] = bool(self.needs_image)
        if self.substitute_image is not None:
            rec["substitute_image"] = self.substitute_image
            rec["substitute_answer"] = LETTERS[self.substitute_answer] if self.substitute_answer is not None else None
        if self.meta:
            rec["meta"] = self.meta
        return rec


@dataclass(frozen=True, slots=True)
class Exclusion:
    """An item (or an item under one condition) left out of a run, with the reason."""

    item_id: str
    reason: str
    stage: str = "load"  # load | plan
    condition: str | None = None
    source: str | None = None


def exclusions_frame(exclusions: Iterable[Exclusion]) -> pd.DataFrame:
    """The exclusion log as a table (item_id, stage, condition, source, reason)."""
    import pandas as pd

    rows = [
        {"item_id": e.item_id, "stage": e.stage, "condition": e.condition, "source": e.source, "reason": e.reason}
        for e in exclusions
    ]
    return pd.DataFrame(rows, columns=["item_id", "stage", "condition", "source", "reason"])


def _missing(v: Any) -> bool:
    if v is None or type(v).__name__ == "NAType":  # pandas.NA, recognised without importing pandas
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    return isinstance(v, str) and v.strip() == ""


def _letter_index(value: Any, k: int, what: str, where: str) -> int:
    """Parse a gold/substitute reference given as a letter; raise naming the item when out of range."""
    s = str(value).strip().strip("().").upper()
    if len(s) == 1 and s in LETTERS:
        i = LETTERS.index(s)
        if i < k:
            return i
        raise ItemError(f"{where}: {what} {value!r} is outside the {k} options (A-{LETTERS[k - 1]})")
    raise ItemError(f"{where}: {what} {value!r} is not an option letter")


def _resolve_answer(rec: dict[str, Any], options: tuple[str, ...], prefix: str, where: str) -> int | None:
    """Gold (prefix='answer') or substitute (prefix='substitute_answer') index from letter/index/text fields."""
    k = len(options)
    letter, idx, text = rec.get(prefix), rec.get(f"{prefix}_index"), rec.get(f"{prefix}_text")
    out: int | None = None
    if not _missing(letter):
        if isinstance(letter, bool):
            raise ItemError(f"{where}: {prefix} {letter!r} is not an option letter")
        if isinstance(letter, int | float):
            raise ItemError(f"{where}: {prefix} {letter!r} is a number; use a letter or {prefix}_index")
        out = _letter_index(letter, k, prefix, where)
    if not _missing(idx):
        try:
            i = int(idx)
        except (TypeError, ValueError):
            raise ItemError(f"{where}: {prefix}_index {idx!r} is not an integer") from None
        if not 0 <= i < k:
            raise ItemError(f"{where}: {prefix}_index {i} is outside the {k} options (0-{k - 1})")
        if out is not None and out != i:
            raise ItemError(f"{where}: {prefix} {letter!r} and {prefix}_index {i} disagree")
        out = i
    if not _missing(text):
        keys = [norm_option(o) for o in options]
        t = norm_option(text)
        if t not in keys:
            raise ItemError(f"{where}: {prefix}_text {text!r} is not one of the options {list(options)}")
        i = keys.index(t)
        if out is not None and out != i:
            raise ItemError(f"{where}: {prefix} and {prefix}_text {text!r} disagree")
        out = i
    return out


def _as_list(v: Any, what: str, where: str) -> list[Any]:
    if _missing(v):
        return []
    if isinstance(v, list | tuple):
        return list(v)
    if isinstance(v, str):
        s = v.strip()
        if s.startswith("["):
            try:
                out = json.loads(s)
            except json.JSONDecodeError as e:
                raise ItemError(f"{where}: {what} is not a valid JSON list ({e})") from None
            if not isinstance(out, list):
                raise ItemError(f"{where}: {what} must be a list")
            return out
        return [p.strip() for p in s.split(";") if p.strip()]
    if hasattr(v, "tolist"):
        return list(v.tolist())
    raise ItemError(f"{where}: {what} must be a list, got {type(v).__name__}")


def _as_bool(v: Any, what: str, where: str) -> bool | None:
    if _missing(v):
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float) and v in (0, 1):
        return bool(v)
    s = str(v).strip().lower()
    if s in ("true", "yes", "1", "y"):
        return True
    if s in ("false", "no", "0", "n"):
        return False
    raise ItemError(f"{where}: {what} {v!r} is not a boolean")


def _resolve_path(p: str, root: Path | None) -> str:
    pp = Path(os.path.expanduser(str(p)))
    if not pp.is_absolute() and root is not None:
        pp = root / pp
    return str(pp)


def item_from_record(
    rec: dict[str, Any], *, where: str = "item", image_root: str | Path | None = None, benchmark: str | None = None
) -> MCQItem:
    """Build and validate one item from a JSONL/CSV record; :class:`ItemError` names ``where`` and the item."""
    item_id = rec.get("item_id")
    if _missing(item_id):
        raise ItemError(f"{where}: missing item_id")
    item_id = str(item_id)
    where = f"{where} (item {item_id!r})"
    question = rec.get("question")
    if _missing(question):
        raise ItemError(f"{where}: missing question")
    if "options" in rec and not _missing(rec.get("options")):
        options = _as_list(rec["options"], "options", where)
    else:
        options = []
        for L in LETTERS:
            col = f"option_{L}"
            if col not in rec or _missing(rec[col]):
                break
            options.append(rec[col])
    options_t = tuple(str(o).strip() for o in options)
    if len(options_t) < 2:
        raise ItemError(f"{where}: has {len(options_t)} option(s); an MCQ item needs at least two")
    if len(options_t) > len(LETTERS):
        raise ItemError(f"{where}: has {len(options_t)} options; at most {len(LETTERS)} are supported")
    if any(o == "" for o in options_t):
        raise ItemError(f"{where}: option {LETTERS[options_t.index('')]} is empty")
    keys = [norm_option(o) for o in options_t]
    if len(set(keys)) != len(keys):
        dup = sorted({o for o, kk in zip(options_t, keys, strict=True) if keys.count(kk) > 1})
        raise ItemError(f"{where}: duplicate options {dup}")
    answer = _resolve_answer(rec, options_t, "answer", where)
    if answer is None:
        raise ItemError(f"{where}: no gold answer (answer / answer_index / answer_text)")
    root = Path(image_root) if image_root is not None else None
    images = tuple(_resolve_path(str(p), root) for p in _as_list(rec.get("images"), "images", where))
    if not images and not _missing(rec.get("image")):
        images = (_resolve_path(str(rec["image"]), root),)
    sub_img = rec.get("substitute_image")
    sub_img = None if _missing(sub_img) else _resolve_path(str(sub_img), root)
    sub_ans = _resolve_answer(rec, options_t, "substitute_answer", where)
    if sub_img is not None and sub_ans is None:
        raise ItemError(f"{where}: substitute_image given without substitute_answer (the option it supports)")
    if sub_ans is not None and sub_img is None:
        raise ItemError(f"{where}: substitute_answer given without substitute_image")
    if sub_ans is not None and sub_ans == answer:
        raise ItemError(
            f"{where}: substitute_answer {LETTERS[sub_ans]} is the gold; a substitution must support a distractor"
        )
    meta = rec.get("meta")
    if _missing(meta):
        meta = {}
    elif isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError as e:
            raise ItemError(f"{where}: meta is not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise ItemError(f"{where}: meta must be an object")
    bench = rec.get("benchmark")
    bench = benchmark if _missing(bench) else str(bench)
    return MCQItem(
        item_id=item_id,
        question=str(question).strip(),
        options=options_t,
        answer=answer,
        images=images,
        needs_image=_as_bool(rec.get("needs_image"), "needs_image", where),
        substitute_image=sub_img,
        substitute_answer=sub_ans,
        benchmark=bench or "custom",
        meta=dict(meta),
    )


@dataclass
class ItemSet:
    """Validated items plus the exclusion log of what was left out and why."""

    items: list[MCQItem]
    exclusions: list[Exclusion] = field(default_factory=list)
    source: str | None = None

    def __len__(self) -> int:
        return len(self.items)

    def frame(self) -> pd.DataFrame:
        """One row per item (options as tuples, gold as letter) for the run store and the reports."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    def rows(self) -> list[dict[str, Any]]:
        """:meth:`frame`'s rows as dicts (what the frame is built from)."""
        return [
            {
                "item_id": it.item_id,
                "benchmark": it.benchmark,
                "question": it.question,
                "options": it.options,
                "n_options": it.k,
                "gold": it.gold_letter,
                "images": it.images,
                "needs_image": it.needs_image,
                "substitute_image": it.substitute_image,
                "substitute_answer": None if it.substitute_answer is None else LETTERS[it.substitute_answer],
            }
            for it in self.items
        ]


def validate_records(
    records: Iterable[tuple[str, dict[str, Any]]],
    *,
    on_error: OnError = "raise",
    image_root: str | Path | None = None,
    benchmark: str | None = None,
    source: str | None = None,
) -> ItemSet:
    """Validate (where, record) pairs into an :class:`ItemSet`; duplicate ids are an error too."""
    if on_error not in ("raise", "exclude"):
        raise ValueError(f"on_error must be 'raise' or 'exclude', got {on_error!r}")
    items: list[MCQItem] = []
    excl: list[Exclusion] = []
    seen: set[str] = set()
    for where, rec in records:
        try:
            it = item_from_record(rec, where=where, image_root=image_root, benchmark=benchmark)
            if it.item_id in seen:
                raise ItemError(f"{where} (item {it.item_id!r}): duplicate item_id")
        except ItemError as e:
            if on_error == "raise":
                raise
            iid = rec.get("item_id") if isinstance(rec, dict) else None
            excl.append(Exclusion(str(iid) if not _missing(iid) else where, str(e), "load", None, source))
            continue
        seen.add(it.item_id)
        items.append(it)
    return ItemSet(items, excl, source)


def validate_items(items: Sequence[MCQItem], *, on_error: OnError = "raise") -> ItemSet:
    """Re-validate in-memory items (e.g. built by a loader) through the same checks as files."""
    return validate_records(
        ((f"item {i}", it.to_record() | {"images": list(it.images)}) for i, it in enumerate(items)),
        on_error=on_error,
    )


def _read_records(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The file's records, streamed line by line (a per-line size limit, see :mod:`medvlm_audit.jsonl`); every
    error names the file and the line."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        from medvlm_audit.jsonl import iter_jsonl

        return [(f"{path}:{n}", rec) for n, rec in iter_jsonl(path, error=ItemError, what="item file")]
    if suffix == ".csv":
        from medvlm_audit.jsonl import max_line_bytes

        out: list[tuple[str, dict[str, Any]]] = []
        limit = max_line_bytes()
        csv.field_size_limit(max(limit, 131072))
        try:
            f = path.open(encoding="utf-8", newline="")
        except OSError as e:
            raise ItemError(f"{path}: cannot read the item file ({e.strerror or e})") from None
        with f:
            reader = csv.DictReader(f)
            n = 1
            try:
                for n, r in enumerate(reader, 2):
                    out.append((f"{path} row {n}", dict(r)))
            except UnicodeDecodeError as e:
                raise ItemError(f"{path}, line {reader.line_num + 1}: not UTF-8 (byte {e.start} of its chunk); "
                                "the item file must be UTF-8") from None
            except csv.Error as e:
                raise ItemError(f"{path}, line {reader.line_num}: {e}") from None
        return out
    raise ItemError(f"{path}: unknown item file type {suffix!r} (use .jsonl or .csv)")


def load_items(
    path: str | Path,
    *,
    on_error: OnError = "raise",
    image_root: str | Path | None = None,
    benchmark: str | None = None,
) -> ItemSet:
    """Read and validate an MCQ item file (.jsonl or .csv); relative image paths resolve against its folder."""
    p = Path(path)
    if not p.exists():
        raise ItemError(f"item file {p} does not exist")
    root = Path(image_root) if image_root is not None else p.parent
    return validate_records(_read_records(p), on_error=on_error, image_root=root, benchmark=benchmark, source=str(p))


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, text)


def save_items(items: Sequence[MCQItem], path: str | Path, *, relative_to: str | Path | None = None) -> Path:
    """Write items as .jsonl or .csv (atomically: temp file + rename); image paths relative to ``relative_to``."""
    p = Path(path)
    root = Path(relative_to) if relative_to is not None else p.parent

    def rel(s: str) -> str:
        try:
            return os.path.relpath(s, root)
        except ValueError:
            return s

    recs = []
    for it in items:
        r = it.to_record()
        r["images"] = [rel(x) for x in it.images]
        if it.substitute_image is not None:
            r["substitute_image"] = rel(it.substitute_image)
        recs.append(r)
    if p.suffix.lower() in (".jsonl", ".ndjson"):
        text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in recs)
    elif p.suffix.lower() == ".csv":
        cols = ["item_id", "benchmark", "question", "options", "answer", "images", "needs_image",
                "substitute_image", "substitute_answer", "meta"]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        for r in recs:
            w.writerow(
                {
                    **{c: r.get(c, "") for c in cols},
                    "options": json.dumps(r["options"], ensure_ascii=False),
                    "images": json.dumps(r["images"], ensure_ascii=False),
                    "meta": json.dumps(r.get("meta", {}), ensure_ascii=False, sort_keys=True),
                    "needs_image": "" if r.get("needs_image") is None else str(r["needs_image"]).lower(),
                }
            )
        text = buf.getvalue()
    else:
        raise ItemError(f"{p}: unknown item file type {p.suffix!r} (use .jsonl or .csv)")
    _atomic_write(p, text)
    return p
