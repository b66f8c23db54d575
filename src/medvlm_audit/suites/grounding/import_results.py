"""Import the paper's released result layout into a run store, so existing runs can be re-analysed.

Layout: a manifest CSV (case_id, source, image_path, ..., box_x/y/w/h, irrelevant_box_x/y/w/h at the working
resolution) and a results folder with one sub-folder per model holding original.csv, swap.csv,
target_mask.csv and irrelevant_mask.csv (case_id, source, model_name, condition, prompt_variant, raw_answer,
parsed_answer in {1, 0, -1}, confidence = P(yes), ground_truth). The imported parsed answers and confidences
are kept as given (the store marks them imported); raw answers are kept as text.

ReXErr rows (``source == rexerr``): in the released manifest their ``label`` is ``error_present``, while the
question ("Is this sentence accurate for this X-ray?") has ground truth ``1 - error_present``. Every such row is
imported as a report-error question on ``error_sentence`` (or ``original_sentence`` for a no-error row) with
label ``1 - error_present``, whatever its ``label`` column says. Known defects of the released data are flagged
in the import summary (``import_summary.json`` in the run folder, and the store's meta), never silently kept.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from medvlm_audit.errors import AuditError
from medvlm_audit.findings import normalize_finding
from medvlm_audit.store import STORE_FILE, RunStore
from medvlm_audit.suites.grounding.probeset import ProbeSet

MANIFEST_COLUMNS = (
    "case_id", "source", "image_path", "report_path", "dicom_id", "subject_id", "study_id", "view", "age", "gender",
    "finding", "label", "label_text", "box_x", "box_y", "box_w", "box_h", "original_sentence", "error_sentence",
    "error_type", "error_present", "swap_image_path", "irrelevant_box_x", "irrelevant_box_y", "irrelevant_box_w",
    "irrelevant_box_h",
)
RESULT_COLUMNS = (
    "case_id", "source", "model_name", "condition", "prompt_variant", "raw_answer", "parsed_answer", "confidence",
    "ground_truth",
)
CONDITION_FILES = ("original", "swap", "target_mask", "irrelevant_mask")


class ResultsImportError(AuditError):
    """An imported file is malformed (the message names file, row and column)."""


def _read_csv(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, dtype={"case_id": str}, keep_default_na=True)
    except Exception as e:
        raise ResultsImportError(f"{path}: cannot read CSV ({e})") from e
    missing = [c for c in required if c not in df.columns]
    if missing:
        unknown = [c for c in df.columns if c not in required]
        raise ResultsImportError(f"{path}: row 1 (the header row): missing column(s) {missing}"
                                 + (f"; unexpected column(s) {unknown}" if unknown else ""))
    return df


def _fail_at(path: Path, df: pd.DataFrame, bad: pd.Series, column: str, why: str) -> None:
    """Raise naming the file, the first bad row (1-based, the header is row 1) and the column."""
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ResultsImportError(f"{path}: row {i + 2}, column {column!r}: {str(df[column].iloc[i])!r} {why}")


def _check_confidence(path: Path, r: pd.DataFrame) -> pd.Series:
    """P(yes) as floats: empty / NaN allowed (no confidence), anything else must be a number in [0, 1]."""
    conf = pd.to_numeric(r["confidence"], errors="coerce")
    given = r["confidence"].notna() & (r["confidence"].astype(str).str.strip().str.lower() != "nan")
    _fail_at(path, r, given & conf.isna(), "confidence", "is not a number (P(yes) in [0, 1], or empty)")
    _fail_at(path, r, conf.notna() & ((conf < 0) | (conf > 1)), "confidence", "is outside [0, 1]")
    return conf


def _check_ground_truth(path: Path, r: pd.DataFrame, labels: dict[str, float]) -> None:
    """ground_truth, where given, must be 0/1 and equal the manifest's label of the case."""
    gt = pd.to_numeric(r["ground_truth"], errors="coerce")
    given = r["ground_truth"].notna()
    _fail_at(path, r, given & ~gt.isin([0, 1]), "ground_truth", "is not 0 or 1")
    want = r["case_id"].map(labels)
    mismatch = given & want.notna() & (gt != want)
    if mismatch.any():
        i = int(np.flatnonzero(mismatch.to_numpy())[0])
        raise ResultsImportError(f"{path}: row {i + 2}, column 'ground_truth': {str(r['ground_truth'].iloc[i])!r} "
                                 f"differs from the manifest label {int(want.iloc[i])} of case {r['case_id'].iloc[i]!r}")


def _box(df: pd.DataFrame, prefix: str) -> pd.DataFrame:
    x, y, w, h = (pd.to_numeric(df[f"{prefix}_{c}"], errors="coerce") for c in ("x", "y", "w", "h"))
    return pd.DataFrame({"x0": x.round(), "y0": y.round(), "x1": (x + w).round(), "y1": (y + h).round()})


def _snake_error_type(v: object) -> object:
    """'False Prediction' -> 'false_prediction' (the release mixes Title Case with the snake_case its code reads)."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return v
    return "_".join(str(v).strip().lower().replace("-", " ").split())


def release_defects(m: pd.DataFrame, res: pd.DataFrame | None = None,
                    vision_only: tuple[str, ...] = ()) -> list[str]:
    """Plain-language flags for the known defects of the released data found in this manifest / these results."""
    out: list[str] = []
    src = m["source"].astype(str).str.strip().str.lower()
    rex = src == "rexerr"
    finding = m["finding"].astype(str).str.strip().str.lower()
    normal = ~rex & finding.isin(["no finding", "no_finding", "normal", "support devices normal"])
    if normal.any():
        lab = pd.to_numeric(m.loc[normal, "label"], errors="coerce")
        out.append(f"normals' polarity: {int(normal.sum())} 'No Finding' row(s) (label 1: {int((lab == 1).sum())}, "
                   f"label 0: {int((lab == 0).sum())}); the release asks whether 'no finding' is present, so a "
                   f"normal study's label polarity is inverted relative to every other finding: check before use")
    swap = rex & m["swap_image_path"].notna() & (m["swap_image_path"].astype(str).str.strip() != "")
    if swap.any():
        out.append(f"ReXErr swap polarity: {int(swap.sum())} ReXErr row(s) have a swap image; a report sentence's "
                   f"truth on another patient's image is not its original label, so UAR and swapped accuracy on "
                   f"ReXErr rows do not measure a same-label swap")
    et = m["error_type"].dropna().astype(str)
    title = et[et.str.contains(r"[A-Z ]", regex=True)]
    if len(title):
        out.append(f"Title-Case error types: {len(title)} row(s) (e.g. {sorted(set(title))[:3]}) were written in Title "
                   f"Case where the released code's sets are snake_case (so its image-dependent / text-only "
                   f"classes miss them); imported as snake_case")
    if res is not None and len(res):
        rex_ids = set(m.loc[rex, "case_id"].astype(str))
        vo = res[res["case_id"].astype(str).isin(rex_ids)
                 & (res["model"].isin(vision_only) | res["model"].astype(str).str.lower().str.contains("rad-dino"))]
        for model, g in vo.groupby("model"):
            out.append(f"RAD-DINO's ReXErr rows: vision-only model {model!r} has {g['case_id'].nunique()} ReXErr "
                       f"case(s); a vision-only probe cannot read the sentence, so its report-error answers are "
                       f"not answers to the question")
    return out


def manifest_to_probeset(path: Path, image_root: Path | None = None) -> ProbeSet:
    """The released manifest as a ProbeSet (boxes are at the 224 working resolution)."""
    m = _read_csv(path, MANIFEST_COLUMNS)
    dup = m["case_id"][m["case_id"].duplicated()].unique()
    if len(dup):
        raise ResultsImportError(f"{path}: duplicate case_id(s) {list(dup[:5])}")
    is_err = m["source"].astype(str).str.strip().str.lower() == "rexerr"
    err_present = pd.to_numeric(m["error_present"], errors="coerce")
    bad = is_err & ~err_present.isin([0, 1])
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ResultsImportError(f"{path}: row {i + 2}, column 'error_present': {str(m['error_present'].iloc[i])!r} is "
                                 f"not 0/1 (a ReXErr row's ground truth is 1 - error_present)")
    has_err_sentence = m["error_sentence"].notna() & (m["error_sentence"].astype(str).str.strip() != "")
    has_orig_sentence = m["original_sentence"].notna() & (m["original_sentence"].astype(str).str.strip() != "")
    no_sentence = is_err & ~((err_present == 1) & has_err_sentence) & ~((err_present == 0) & (has_orig_sentence
                                                                                              | has_err_sentence))
    if no_sentence.any():
        i = int(np.flatnonzero(no_sentence.to_numpy())[0])
        col = "error_sentence" if err_present.iloc[i] == 1 else "original_sentence"
        raise ResultsImportError(f"{path}: row {i + 2}, column {col!r}: empty for a ReXErr row (the sentence the "
                                 f"question asks about)")
    # a no-error row asks about the original sentence (the release may repeat it in error_sentence)
    sentence = np.where(err_present == 1, m["error_sentence"],
                        np.where(has_orig_sentence, m["original_sentence"], m["error_sentence"]))
    findings = []
    for i, (f, err) in enumerate(zip(m["finding"], is_err)):
        if pd.isna(f) or str(f).strip() == "" or err:
            if not err:
                raise ResultsImportError(f"{path}: row {i + 2}, column 'finding': empty for a finding-presence case")
            findings.append(None)
            continue
        try:
            findings.append(normalize_finding(str(f)))
        except KeyError as e:
            raise ResultsImportError(f"{path}: row {i + 2}, column 'finding': {e.args[0]}") from None
    label = pd.to_numeric(m["label"], errors="coerce")
    bad = ~is_err & label.notna() & ~label.isin([0, 1])
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ResultsImportError(f"{path}: row {i + 2}, column 'label': {str(m['label'].iloc[i])!r} is not 0/1")
    label = label.where(~is_err, 1 - err_present)
    tb, ib = _box(m, "box"), _box(m, "irrelevant_box")
    sex = m["gender"].astype(str).str.upper().str[0].where(m["gender"].notna())
    df = pd.DataFrame(
        {
            "case_id": m["case_id"].astype(str),
            "kind": np.where(is_err, "report_error", "finding_presence"),
            "label": label.astype("Int64"),
            "finding": findings,
            "sentence": pd.Series(sentence, index=m.index).where(is_err),
            "image_path": m["image_path"],
            "swap_image_path": m["swap_image_path"],
            **{f"tbox_{c}": tb[c] for c in ("x0", "y0", "x1", "y1")},
            **{f"ibox_{c}": ib[c] for c in ("x0", "y0", "x1", "y1")},
            "patient_id": m["subject_id"].astype(str).where(m["subject_id"].notna()),
            "study_id": m["study_id"].astype(str).where(m["study_id"].notna()),
            "age": pd.to_numeric(m["age"], errors="coerce"),
            "sex": sex,
            "view": m["view"],
            "source": m["source"],
            "split": "test",
            "dicom_id": m["dicom_id"],
            "error_type": m["error_type"].map(_snake_error_type),
            "label_text": m["label_text"],
        }
    )
    from medvlm_audit.boxes import boxes_overlap

    df["ibox_overlaps"] = [
        bool(not np.isnan(a).any() and not np.isnan(b).any() and boxes_overlap(tuple(a), tuple(b)))
        for a, b in zip(tb.to_numpy(float), ib.to_numpy(float))
    ]
    return ProbeSet(df, image_root or path.parent, {"builder": "import-results", "manifest": str(path)}, name=path.stem)


def import_results(
    manifest: str | Path,
    results_dir: str | Path,
    run_dir: str | Path,
    *,
    text_only: tuple[str, ...] = (),
    vision_only: tuple[str, ...] = (),
    log: Callable[[str], None] | None = None,
) -> Path:
    """Validate everything first, then write a new run store (atomically: built in a temp folder, renamed).

    The import summary (counts and the release's known data defects found) is written to
    ``import_summary.json`` and the store's meta; ``log`` receives one line per defect."""
    manifest, results_dir, run_dir = Path(manifest), Path(results_dir), Path(run_dir)
    if (run_dir / STORE_FILE).exists():
        raise AuditError(f"{run_dir} already holds a run store; import into a new folder")
    ps = manifest_to_probeset(manifest)
    ps.validate(check_files=False)
    known = set(ps.df["case_id"])
    labels = dict(zip(ps.df["case_id"], pd.to_numeric(ps.df["label"], errors="coerce").astype(float)))
    model_dirs = sorted(p for p in results_dir.iterdir() if p.is_dir()) if results_dir.is_dir() else []
    if not model_dirs:
        raise ResultsImportError(f"{results_dir}: no model folders found")
    frames = []
    for mdir in model_dirs:
        files = [mdir / f"{c}.csv" for c in CONDITION_FILES if (mdir / f"{c}.csv").exists()]
        if not files:
            raise ResultsImportError(f"{mdir}: none of {[c + '.csv' for c in CONDITION_FILES]} found")
        for f in files:
            r = _read_csv(f, RESULT_COLUMNS)
            unknown = ~r["case_id"].isin(known)
            if unknown.any():
                i = int(np.flatnonzero(unknown.to_numpy())[0])
                raise ResultsImportError(f"{f}: row {i + 2}, column 'case_id': unknown case id {r['case_id'].iloc[i]!r}")
            parsed = pd.to_numeric(r["parsed_answer"], errors="coerce")
            _fail_at(f, r, ~parsed.isin([1, 0, -1]), "parsed_answer", "is not one of 1, 0, -1")
            conf = _check_confidence(f, r)
            _check_ground_truth(f, r, labels)
            conds = set(r["condition"].dropna().astype(str))
            if conds - {f.stem}:
                raise ResultsImportError(f"{f}: column 'condition' holds {sorted(conds - {f.stem})}, expected {f.stem!r}")
            r = r.assign(model=mdir.name, parsed=parsed.astype(int), confidence=conf, file=str(f))
            frames.append(r)
    res = pd.concat(frames, ignore_index=True)
    res["prompt_variant"] = res["prompt_variant"].fillna("default").astype(str)
    res["condition_name"] = np.where(
        res["prompt_variant"] == "default", res["condition"].astype(str),
        res["condition"].astype(str) + "|prompt=" + res["prompt_variant"],
    )
    dup = res.duplicated(["model", "case_id", "condition_name"])
    if dup.any():
        row = res[dup].iloc[0]
        raise ResultsImportError(f"{row['file']}: case {row['case_id']!r} appears twice for model {row['model']!r}")

    defects = release_defects(_read_csv(manifest, MANIFEST_COLUMNS), res, vision_only)
    summary = {"manifest": str(manifest), "results_dir": str(results_dir), "n_cases": int(len(ps.df)),
               "n_rexerr": int((ps.df["source"].astype(str).str.lower() == "rexerr").sum()),
               "models": sorted(res["model"].unique().tolist()), "release_defects": defects}
    if log is not None:
        for d in defects:
            log(f"release defect: {d}")

    tmp = run_dir.with_name(f".{run_dir.name}.importing")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        store = RunStore(tmp / STORE_FILE)
        store.set_meta(run_id=run_dir.name, suite="grounding", imported_from=str(results_dir), started_at=time.time(),
                       seeds={"construction": None, "resampling": 0}, import_summary=summary)
        (tmp / "import_summary.json").write_text(json.dumps(summary, indent=2))
        store.add_probe_set(ps.name, str(manifest), ps.content_hash, ps.df, ps.provenance)
        trials, responses, imported = [], [], []
        for model, g in res.groupby("model", sort=True):
            modality = "text_only" if model in text_only else "vision_only" if model in vision_only else "multimodal"
            store.add_model(str(model), modality, {"imported": str(model)})
            for row in g.itertuples(index=False):
                key = hashlib.sha256(json.dumps([model, row.case_id, row.condition_name]).encode()).hexdigest()
                trials.append((model, ps.name, row.case_id, row.condition_name, 0, key, None, None))
                text = None if pd.isna(row.raw_answer) else str(row.raw_answer)
                responses.append((key, text))
                conf = None if pd.isna(row.confidence) else float(row.confidence)
                imported.append((key, int(row.parsed), conf))
        store.add_trials(trials)
        now = time.time()
        with store.transaction():
            store.db.executemany(
                "INSERT OR REPLACE INTO responses(key, text, attempts, created_at) VALUES(?, ?, 1, ?)",
                [(k, t, now) for k, t in responses],
            )
        store.add_imported(imported)
        store.close()
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(run_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return run_dir
