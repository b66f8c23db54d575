"""Loaders for local copies of VQA-RAD, SLAKE, PMC-VQA and OmniMedVQA in their released layouts.

* VQA-RAD (OSF release): ``VQA_RAD Dataset Public.json`` (list of {qid, image_name, question, answer,
  answer_type CLOSED/OPEN, question_type, image_organ, phrase_type, ...}) beside ``VQA_RAD Image Folder/``.
  Test split = ``phrase_type`` starting with ``test``.
* SLAKE (Slake1.0): ``train.json`` / ``validate.json`` / ``test.json`` (list of {qid, img_name
  "xmlab0/source.jpg", question, answer, q_lang, answer_type, content_type, modality, location, ...}) and
  ``imgs/``. English questions only (``q_lang == "en"``).
* PMC-VQA: ``train.csv`` / ``test.csv`` (also ``*_2.csv``, ``test_clean.csv``) with ``Figure_path``,
  ``Question``, ``Answer``, ``Choice A``-``Choice D`` (values like ``" A:CT scan"``) and ``Answer_label``
  (or a letter in ``Answer``), images under ``images/`` (or ``figures/``).
* OmniMedVQA: ``QA_information/Open-access/*.json`` and ``QA_information/Restricted-access/*.json`` (lists of
  {question_id, dataset, question_type, modality_type, question, gt_answer, image_path "Images/...",
  option_A-option_D}), image paths relative to the dataset root.

VQA-RAD and SLAKE are open-ended: yes/no items become two-option items (Yes, No); other items get
``n_options - 1`` distractors drawn (seeded from the item id) from the answers of other items of the same
question type (then of the whole benchmark), recorded as ``meta["options_source"] = "constructed"``.
Rows that fail validation are excluded with their reason (``on_error="raise"`` to stop instead).
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from medvlm_audit.suites.stress.items import (
    Exclusion,
    ItemError,
    ItemSet,
    OnError,
    norm_option,
    validate_records,
)

_YES_NO = {"yes", "no"}


def _need(path: Path, what: str) -> Path:
    if not path.exists():
        raise ItemError(f"{what}: {path} does not exist")
    return path


def _read_json_list(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ItemError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, list):
        raise ItemError(f"{path}: expected a JSON list of records")
    return data


def _h(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "big")


def _constructed_records(
    rows: list[dict[str, Any]], *, prefix: str, n_options: int, seed: int, group_key: str,
    source: str, benchmark: str, pool_rows: list[dict[str, Any]] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """Open-ended (question, answer) rows -> MCQ records: yes/no pairs, or seeded distractors by group.

    Distractor pools come from ``pool_rows`` (default ``rows``): the answers of the whole release.
    """
    by_group: dict[str, list[str]] = {}
    everything: dict[str, str] = {}
    for r in rows if pool_rows is None else pool_rows:
        a = str(r["answer"]).strip()
        k = norm_option(a)
        if not k or k in _YES_NO:
            continue
        by_group.setdefault(str(r.get(group_key, "")), []).append(a)
        everything.setdefault(k, a)
    pools = {g: sorted({norm_option(a): a for a in v}.values(), key=norm_option) for g, v in by_group.items()}
    all_pool = [everything[k] for k in sorted(everything)]
    out = []
    for r in rows:
        a = str(r["answer"]).strip()
        iid = f"{prefix}-{r['id']}"
        rec: dict[str, Any] = {"item_id": iid, "question": r["question"], "images": r["images"],
                               "benchmark": benchmark, "meta": dict(r.get("meta", {}))}
        if norm_option(a) in _YES_NO:
            rec["options"] = ["Yes", "No"]
            rec["answer_text"] = a
            rec["meta"]["options_source"] = "yes/no"
        else:
            chosen = [a]
            keys = {norm_option(a)}
            for pool in (pools.get(str(r.get(group_key, "")), []), all_pool):
                j = 0
                while len(chosen) < n_options and j < 8 * len(pool):
                    c = pool[_h(seed, iid, "distractor", j) % len(pool)] if pool else None
                    j += 1
                    if c is not None and norm_option(c) not in keys and norm_option(c) not in _YES_NO:
                        keys.add(norm_option(c))
                        chosen.append(c)
            gold_pos = _h(seed, iid, "gold-position") % len(chosen)
            opts = chosen[1:]
            opts.insert(gold_pos, a)
            rec["options"] = opts
            rec["answer_index"] = gold_pos
            rec["meta"]["options_source"] = "constructed"
        out.append((f"{source} ({iid})", rec))
    return out


def load_vqa_rad(root: str | Path, *, split: str = "test", n_options: int = 4, seed: int = 42,
                 on_error: OnError = "exclude") -> ItemSet:
    """VQA-RAD from the OSF release folder (``split``: test, train or all)."""
    root = Path(root)
    jf = _need(root / "VQA_RAD Dataset Public.json", "VQA-RAD annotation file")
    img_dir = root / "VQA_RAD Image Folder"
    if split not in ("test", "train", "all"):
        raise ItemError(f"VQA-RAD split must be test, train or all, got {split!r}")
    rows, pool = [], []
    for r in _read_json_list(jf):
        phrase = str(r.get("phrase_type", ""))
        is_test = phrase.startswith("test")
        pool.append({"answer": r.get("answer"), "question_type": r.get("question_type")})
        if (split == "test" and not is_test) or (split == "train" and is_test):
            continue
        rows.append({"id": r.get("qid"), "question": r.get("question"), "answer": r.get("answer"),
                     "images": [str(img_dir / str(r.get("image_name")))], "question_type": r.get("question_type"),
                     "meta": {"answer_type": r.get("answer_type"), "organ": r.get("image_organ"),
                              "question_type": r.get("question_type"), "phrase_type": phrase}})
    recs = _constructed_records(rows, prefix="vqarad", n_options=n_options, seed=seed, group_key="question_type",
                                source=str(jf), benchmark="vqa-rad", pool_rows=pool)
    return validate_records(recs, on_error=on_error, source=str(jf))


def load_slake(root: str | Path, *, split: str = "test", n_options: int = 4, seed: int = 42,
               on_error: OnError = "exclude", language: str = "en") -> ItemSet:
    """SLAKE (Slake1.0 folder: {train,validate,test}.json + imgs/); English questions by default."""
    root = Path(root)
    files = {"train": "train.json", "validate": "validate.json", "test": "test.json"}
    chosen = list(files.values()) if split == "all" else [files.get(split, "")]
    if "" in chosen:
        raise ItemError(f"SLAKE split must be one of {[*files, 'all']}, got {split!r}")
    rows, pool = [], []
    for name in files.values():
        jf = root / name
        if name not in chosen and not jf.exists():
            continue
        _need(jf, "SLAKE annotation file")
        for r in _read_json_list(jf):
            if language and r.get("q_lang", "en") != language:
                continue
            pool.append({"answer": r.get("answer"), "content_type": r.get("content_type")})
            if name not in chosen:
                continue
            rows.append({"id": r.get("qid"), "question": r.get("question"), "answer": r.get("answer"),
                         "images": [str(root / "imgs" / str(r.get("img_name")))],
                         "content_type": r.get("content_type"),
                         "meta": {"answer_type": r.get("answer_type"), "modality": r.get("modality"),
                                  "location": r.get("location"), "content_type": r.get("content_type"),
                                  "split": name.removesuffix(".json")}})
    recs = _constructed_records(rows, prefix="slake", n_options=n_options, seed=seed, group_key="content_type",
                                source=str(root), benchmark="slake", pool_rows=pool)
    return validate_records(recs, on_error=on_error, source=str(root))


_CHOICE_PREFIX = re.compile(r"^\s*\(?([A-Da-d])\s*[:.)]\s*")


def _strip_choice(v: Any, letter: str) -> str:
    s = "" if v is None else str(v).strip()
    m = _CHOICE_PREFIX.match(s)
    return s[m.end():].strip() if m and m.group(1).upper() == letter else s


def load_pmc_vqa(root: str | Path, *, split: str = "test", on_error: OnError = "exclude",
                 csv_name: str | None = None) -> ItemSet:
    """PMC-VQA (``{split}.csv`` with Choice A-D; ``csv_name`` picks e.g. ``test_2.csv``)."""
    root = Path(root)
    cf = _need(root / (csv_name or f"{split}.csv"), "PMC-VQA csv")
    img_dirs = [root / "images", root / "figures", root]
    recs = []
    with cf.open(encoding="utf-8", newline="") as f:
        for n, r in enumerate(csv.DictReader(f), 2):
            letters = [L for L in "ABCD" if f"Choice {L}" in r and str(r[f"Choice {L}"] or "").strip()]
            opts = [_strip_choice(r[f"Choice {L}"], L) for L in letters]
            fig = str(r.get("Figure_path") or "").strip()
            img = next((str(d / fig) for d in img_dirs if (d / fig).exists()), str(img_dirs[0] / fig))
            rec: dict[str, Any] = {"item_id": f"pmcvqa-{cf.stem}-{r.get('index') or n}", "question": r.get("Question"),
                                   "options": opts, "images": [img], "benchmark": "pmc-vqa",
                                   "meta": {"figure_path": fig, "row": n}}
            label = str(r.get("Answer_label") or "").strip().strip("().:").upper()
            ans = str(r.get("Answer") or "").strip()
            if len(label) == 1 and label in letters:
                rec["answer"] = label
            elif len(ans.strip("().:")) == 1 and ans.strip("().:").upper() in letters:
                rec["answer"] = ans.strip("().:").upper()
            elif ans:
                m = _CHOICE_PREFIX.match(ans)
                rec["answer_text"] = ans[m.end():].strip() if m else ans
            recs.append((f"{cf} row {n}", rec))
    return validate_records(recs, on_error=on_error, source=str(cf))


def load_omnimedvqa(root: str | Path, *, access: Iterable[str] = ("Open-access",), on_error: OnError = "exclude",
                    datasets: Iterable[str] | None = None) -> ItemSet:
    """OmniMedVQA (``QA_information/<access>/*.json`` + ``Images/``); ``datasets`` filters by file stem."""
    root = Path(root)
    qa = _need(root / "QA_information", "OmniMedVQA QA_information folder")
    want = None if datasets is None else set(datasets)
    recs = []
    for acc in access:
        folder = _need(qa / acc, "OmniMedVQA access folder")
        for jf in sorted(folder.glob("*.json")):
            if want is not None and jf.stem not in want:
                continue
            for n, r in enumerate(_read_json_list(jf)):
                letters = [L for L in "ABCDEF" if str(r.get(f"option_{L}") or "").strip()]
                rec = {"item_id": f"omni-{r.get('question_id', f'{jf.stem}-{n}')}", "question": r.get("question"),
                       "options": [str(r[f"option_{L}"]).strip() for L in letters],
                       "answer_text": r.get("gt_answer"), "images": [str(root / str(r.get("image_path")))],
                       "benchmark": "omnimedvqa",
                       "meta": {"dataset": r.get("dataset", jf.stem), "question_type": r.get("question_type"),
                                "modality_type": r.get("modality_type", r.get("modality")), "access": acc}}
                recs.append((f"{jf} record {n}", rec))
    return validate_records(recs, on_error=on_error, source=str(qa))


LOADERS: dict[str, Callable[..., ItemSet]] = {
    "vqa-rad": load_vqa_rad,
    "slake": load_slake,
    "pmc-vqa": load_pmc_vqa,
    "omnimedvqa": load_omnimedvqa,
}


def load_benchmark(name: str, root: str | Path, **kwargs: Any) -> ItemSet:
    """Load a benchmark by name (``vqa-rad``, ``slake``, ``pmc-vqa``, ``omnimedvqa``) from a local copy."""
    key = name.lower().replace("_", "-")
    if key not in LOADERS:
        raise ItemError(f"unknown benchmark {name!r}; known: {sorted(LOADERS)}")
    return LOADERS[key](root, **kwargs)


def merge_item_sets(sets: Iterable[ItemSet]) -> ItemSet:
    """Concatenate item sets (ids must stay unique: the benchmark prefixes make them so)."""
    items, excl, seen = [], [], set()
    for s in sets:
        excl.extend(s.exclusions)
        for it in s.items:
            if it.item_id in seen:
                excl.append(Exclusion(it.item_id, "duplicate item_id across item sets", "load", None, s.source))
                continue
            seen.add(it.item_id)
            items.append(it)
    return ItemSet(items, excl, ";".join(filter(None, (s.source for s in sets))) or None)
