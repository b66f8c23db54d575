"""Export a study's answers: every answer as CSV/Parquet, the task's own files (e.g. grounding's finding-presence
reads in the tidy run-table shape, ``model = reader:<name>``, so the grounding analysis treats a reader like a
model; faithfulness's CoT ratings as JSONL in cot-eval's field names for ``judge-validate``) and a manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from medvlm_audit.atomic import csv_bytes, parquet_bytes, write_files_atomic
from medvlm_audit.errors import AuditError
from medvlm_audit.readers.study import Study

__all__ = ["ANSWER_COLUMNS", "EXPORT_MANIFEST", "answers_frame", "export_study", "run_suite"]

EXPORT_MANIFEST = "readers_export.json"
#: the answers table of every task; the task's own ``answer_fields`` (e.g. a finding) come after ``model``
ANSWER_COLUMNS = ["reader", "item_id", "task", "probe_set", "case_id", "condition", "model", "scale", "answer",
                  "time_s", "answered_at", "revisions", "position"]


def answers_frame(study: Study) -> pd.DataFrame:
    """One row per reader x item x scale: the current answer, its time on the item and its source fields (the
    engine's item identity and the task's ``answer_fields``)."""
    raw = study.answer_table()
    fields = list(study.reader_task.answer_fields)
    at = ANSWER_COLUMNS.index("scale")
    columns = ANSWER_COLUMNS[:at] + fields + ANSWER_COLUMNS[at:]
    rows = []
    for r in raw.itertuples(index=False):
        src = json.loads(r.source)
        rows.append({"reader": r.reader, "item_id": r.item_id, "task": study.task,
                     "probe_set": src.get("probe_set"), "case_id": src.get("case_id") or src.get("source_item_id")
                     or src.get("item_id"), "condition": src.get("condition"), "model": src.get("model"),
                     **{f: src.get(f) for f in fields}, "scale": r.scale,
                     "answer": r.answer, "time_s": r.elapsed_s,
                     "answered_at": pd.Timestamp(r.answered_at, unit="s", tz="UTC").isoformat(),
                     "revisions": int(r.revisions), "position": int(r.position) + 1})
    return pd.DataFrame(rows, columns=columns)


def run_suite(run_dir: str | Path) -> str:
    """The suite a run directory was made by (from its store)."""
    from medvlm_audit.store import STORE_FILE, RunStore

    if not (Path(run_dir) / STORE_FILE).exists():
        raise AuditError(f"{run_dir}: no run store ({STORE_FILE}) found")
    with RunStore.open_dir(run_dir, readonly=True) as store:
        name = store.meta().get("suite")
    if not name:
        raise AuditError(f"{run_dir}: the run store records no suite")
    return str(name)


def export_study(study_dir: str | Path, out: str | Path) -> dict[str, Path]:
    """Write answers.csv/.parquet, the task's own files (e.g. reads.csv/.parquet, ratings.jsonl) and
    readers_export.json into ``out``, atomically; returns the written paths by name."""
    study = Study(study_dir)
    out = Path(out)
    ans = answers_frame(study)
    payloads: list[tuple[str, bytes]] = [("answers.csv", csv_bytes(ans)), ("answers.parquet", parquet_bytes(ans))]
    if study.reader_task.export is not None:  # the task's own files (reads in the run's shape, ratings, ...)
        payloads += study.reader_task.export(study)
    meta = study.public_meta()
    prog = study.progress()
    run_dir = meta.get("run_dir")
    manifest = {"task": study.task, "task_suite": study.task_suite, "study_dir": str(study.dir.resolve()), "run_dir": run_dir,
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
