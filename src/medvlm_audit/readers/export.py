"""Export a study's answers: every answer as CSV/Parquet, finding-presence reads in the tidy run-table shape
(``model = reader:<name>``, so the grounding analysis treats a reader like a model), and CoT ratings as JSONL
in the cot-eval reader-study field names for ``judge-validate``."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.atomic import csv_bytes, parquet_bytes, write_files_atomic
from medvlm_audit.readers.study import Study

__all__ = ["ANSWER_COLUMNS", "COT_SCORE_FIELDS", "EXPORT_MANIFEST", "answers_frame", "export_study", "reads_tidy"]

EXPORT_MANIFEST = "readers_export.json"
ANSWER_COLUMNS = ["reader", "item_id", "task", "probe_set", "case_id", "condition", "model", "finding", "benchmark",
                  "scale", "answer", "time_s", "answered_at", "revisions", "position"]
#: CoT-rating scale -> cot-eval reader-study field (reader_study_r{1..4}.jsonl)
COT_SCORE_FIELDS = {"completeness": "completeness_score", "plausibility": "plausibility_score",
                    "acknowledgment": "bias_acknowledgment_score", "helpfulness": "helpfulness_score",
                    "confidence": "confidence_score"}


def answers_frame(study: Study) -> pd.DataFrame:
    """One row per reader x item x scale: the current answer, its time on the item and its source fields."""
    raw = study.answer_table()
    rows = []
    for r in raw.itertuples(index=False):
        src = json.loads(r.source)
        rows.append({"reader": r.reader, "item_id": r.item_id, "task": study.task,
                     "probe_set": src.get("probe_set"), "case_id": src.get("case_id") or src.get("source_item_id")
                     or src.get("item_id"), "condition": src.get("condition"), "model": src.get("model"),
                     "finding": src.get("finding"), "benchmark": src.get("benchmark"), "scale": r.scale,
                     "answer": r.answer, "time_s": r.elapsed_s,
                     "answered_at": pd.Timestamp(r.answered_at, unit="s", tz="UTC").isoformat(),
                     "revisions": int(r.revisions), "position": int(r.position) + 1})
    return pd.DataFrame(rows, columns=ANSWER_COLUMNS)


def reads_tidy(study: Study) -> pd.DataFrame:
    """Finding-presence reads in the tidy run-table shape (docs/tidy-schema.md), one row per reader x case x
    condition; ``model = reader:<name>``, ``modality = reader``."""
    if study.task != "finding-presence":
        return pd.DataFrame()
    raw = study.answer_table()
    raw = raw[raw["scale"] == "answer"]
    run_id = f"study-{hashlib.sha256(str(study.dir.resolve()).encode()).hexdigest()[:8]}"
    rows = []
    for r in raw.itertuples(index=False):
        s = json.loads(r.source)
        parsed = 1 if r.answer == "yes" else 0
        label = s.get("label")
        rows.append({
            "run_id": run_id, "probe_set": s["probe_set"], "model": f"reader:{r.reader}", "modality": "reader",
            "case_id": s["case_id"], "kind": s.get("kind") or "finding_presence", "finding": s.get("finding"),
            "label": label, "source": s.get("source"), "patient_id": s.get("patient_id"),
            "study_id": s.get("study_id"), "age": _num(s.get("age")), "sex": s.get("sex"), "view": s.get("view"),
            "split": s.get("split"), "has_box": bool(s.get("has_box")), "ibox_overlaps": bool(s.get("ibox_overlaps")),
            "condition": s["condition"], "resolution": int(s.get("resolution") or 224), "prompt_variant": "default",
            "sample_index": 0,
            "key": hashlib.sha256(f"{r.reader}\x00{r.item_id}".encode()).hexdigest(),
            "image_sha256": s.get("image_sha256"), "answer_text": "Yes" if parsed else "No", "parsed": parsed,
            "confidence": np.nan, "correct": float(parsed == int(label)) if label is not None else np.nan,
            "latency_s": _num(r.elapsed_s), "error_kind": None, "error_message": None})
    df = pd.DataFrame(rows)
    if len(df):
        df["label"] = df["label"].astype("Int64")
        df["parsed"] = df["parsed"].astype("int8")
    return df


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def ratings_records(study: Study) -> list[dict[str, Any]]:
    """CoT ratings, one record per reader x item, with the cot-eval score names and the item's own fields."""
    if study.task != "cot-rating":
        return []
    raw = study.answer_table()
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in raw.itertuples(index=False):
        key = (r.reader, r.item_id)
        if key not in out:
            src = json.loads(r.source)
            rec = {k: v for k, v in src.items() if k not in ("images",)}
            rec.update(rater=r.reader, study_item_id=r.item_id, item_id=src.get("source_item_id"))
            out[key] = rec
        out[key][COT_SCORE_FIELDS.get(r.scale, f"{r.scale}_score")] = int(r.answer)
    return list(out.values())


def export_study(study_dir: str | Path, out: str | Path) -> dict[str, Path]:
    """Write answers.csv/.parquet, reads.csv/.parquet (finding-presence), ratings.jsonl (cot-rating) and
    readers_export.json into ``out``, atomically; returns the written paths by name."""
    study = Study(study_dir)
    out = Path(out)
    ans = answers_frame(study)
    payloads: list[tuple[str, bytes]] = [("answers.csv", csv_bytes(ans)), ("answers.parquet", parquet_bytes(ans))]
    reads = reads_tidy(study)
    if len(reads):
        payloads += [("reads.csv", csv_bytes(reads)), ("reads.parquet", parquet_bytes(reads))]
    ratings = ratings_records(study)
    if ratings:
        payloads.append(("ratings.jsonl", "".join(json.dumps(r, default=str) + "\n" for r in ratings).encode()))
    meta = study.public_meta()
    prog = study.progress()
    from medvlm_audit.readers.support import run_suite

    run_dir = meta.get("run_dir")
    manifest = {"task": study.task, "study_dir": str(study.dir.resolve()), "run_dir": run_dir,
                "suite": run_suite(run_dir) if run_dir and Path(run_dir).exists() else None,
                "scales": [s.name for s in study.spec.scales], "ordinal": [s.ordinal for s in study.spec.scales],
                "n_items": meta.get("n_items"), "seed": meta.get("seed"),
                "axes": meta.get("axes"),
                "readers": {r.reader: {"complete": int(r.complete), "assigned": int(r.assigned)}
                            for r in prog.itertuples(index=False)},
                "files": [name for name, _ in payloads]}
    payloads.append((EXPORT_MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode()))
    write_files_atomic(out, payloads)
    return {name: out / name for name, _ in payloads}
