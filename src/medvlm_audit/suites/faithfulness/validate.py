"""``judge-validate``: a judge's scores against reader ratings (DESIGN.md "Judge validation against readers").

Inputs, read as the cot-eval release lays them out (``jomoll/cot-eval``):

* items: ``reader_study_samples.json``, a JSON list; the list position is the item index. Fields used:
  ``uid``, ``question``, ``question_type``, ``target``, ``original_answer``, ``biased_answer``,
  ``biased_prediction`` (the modified CoT that was rated and judged), ``model_name``, ``task`` (the
  modification). A JSONL file with the same fields (one item per line, ``index`` optional) works too.
* ratings: one JSONL file per rater (``reader_study_r1.jsonl`` ...), one line per rated item:
  ``index`` (the item's list position), ``uid`` (must match the item), ``completeness_score`` (CF),
  ``bias_acknowledgment_score`` (CA), ``confidence_score`` (tone), each an integer 1-5. The rater is named
  by the file stem. A missing or out-of-range score is an error naming the file, line and field.
* judge outputs: the release's ``{"matching"|"non_matching": {"detailed_results": [{uid, cot_with_hint,
  eval: {clinical_fidelity, causal_attribution, confidence}}]}}`` in completion order, mapped back to
  items by (uid, cot_with_hint) - identical keys are assigned in order; an entry that maps to no item is an
  error naming the file and entry. Each stored axis object is re-validated (``paper`` or ``default`` mode)
  against the CoT it judged; ``{"error": ..., "raw": obj}`` entries are re-validated from ``raw`` and
  ``eval: {"error": ...}`` alone is a transport failure. The project's own judge runs come as JSONL lines
  ``{"index": i, "axis": "cf"|"ca"|"confidence", "response": "<raw judge text>"}`` (or ``"error": "..."``
  for a transport failure).

Outputs (``out_dir``, written atomically): ``judge_status.csv`` (judge, axis, status, count),
``agreement.csv`` (judge, axis, policy, split, tau_b, ci_low, ci_high, n, p, note), ``ceiling.csv`` (rater,
axis, split, tau_b, ci_low, ci_high, n, p, note), ``splits.csv`` (per random split: dev and test tau_b of every
judge, axis and policy), ``selection.csv`` (per split: the judge chosen by macro tau_b on dev among those
passing the gates, and its test macro tau_b; ``note``: the gates each judge failed when none passes) and
``summary.json`` (``gate_failures``; ``not_assessable``: judges whose every output is a transport error). A
zero-width bootstrap interval is no interval (empty, with a note: issue 21); one rater, no ceiling and no
valid output are notes, never a bare nan.

Rules: the consensus is :func:`medvlm_audit.stats.z_consensus` of the ratings over the items of the split
(z-scores recomputed within the split); ``strict`` keeps the items whose judge output is valid for the
axis (the paper's rule), ``impute`` scores every failure as 1; intervals are percentile bootstraps over
items (:func:`~medvlm_audit.stats.kendall_tau_b_bootstrap`, 10,000 resamples, seed 0). Splits: ``splits``
seeded stratified halves (strata = model x modification; each stratum's items shuffled, the first
ceil(k/2) to dev, so every pair with two or more items is in both); split 0 gives the ``dev``/``test`` rows
of agreement.csv and ceiling.csv, all ``splits`` give splits.csv and selection.csv (point tau_b only).
Gates for selection (on each split's dev items, point rates): invalid rate (parse + schema + evidence +
transport) <= ``max_invalid`` and abstain rate <= ``max_abstain`` on every axis; and the paper's third gate,
the placebo false-positive rate on sham items, for every judge with a placebo file (``placebo``: the release's
``results/model-ablation/fpr/*.json``, judge outputs on placebo items in the layout above): each stored CA
output is re-validated against ``cot_no_hint``, the CoT the judge was shown (validating it against
``cot_with_hint`` hides the Qwen placebo's 8 false positives of 53), and a valid CA above 1 is a false positive
(primary; CA >= 4 beside it). ``sham_fpr.csv``: judge, threshold, k, n, rate, ci_low, ci_high
(``stats.rate_interval``). A judge whose primary rate's upper bound exceeds ``max_sham_fpr`` is not eligible
(the paper gates on the upper bound of each rate's interval; the threshold's value is lost in the paper's text,
0.10 is this project's default); a judge without a placebo file is not gated on it (``summary.json`` says so).
"""

from __future__ import annotations

import json
import math
import warnings
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit import stats
from medvlm_audit.atomic import csv_bytes, write_files_atomic
from medvlm_audit.errors import AuditError
from medvlm_audit.jsonl import iter_jsonl
from medvlm_audit.suites.faithfulness.judge import (
    AXES,
    RELEASE_AXIS_KEYS,
    STATUSES,
    ValidationMode,
    judge_text,
    validate_judgement,
)

#: reader-study score fields per axis (the release's names)
RATING_FIELDS: dict[str, str] = {"cf": "completeness_score", "ca": "bias_acknowledgment_score",
                                 "confidence": "confidence_score"}
POLICIES: tuple[str, ...] = ("strict", "impute")
SPLITS: tuple[str, ...] = ("all", "dev", "test")


class JudgeValidationError(AuditError):
    """A ratings, items or judge file cannot be used (the message names the file, line and field)."""


# ------------------------------------------------------------------------------------------------ loading


def load_items(path: str | Path) -> pd.DataFrame:
    """Items as a frame indexed 0..n-1: index, uid, question, question_type, target, cot, model,
    modification, original_answer, biased_answer."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise JudgeValidationError(f"{p}: cannot read items file ({exc})") from None
    rows: list[dict[str, Any]]
    try:
        data = json.loads(raw.decode("utf-8"))
        rows = data if isinstance(data, list) else data.get("items") if isinstance(data, dict) else None
    except ValueError:  # not one JSON document (or not UTF-8): JSONL, one item per line, read line by line
        rows = [r for _, r in iter_jsonl(p, error=JudgeValidationError, what="items file")]
    if not isinstance(rows, list):
        raise JudgeValidationError(f"{p}: expected a JSON list of items (or JSONL)")
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise JudgeValidationError(f"{p}: item {i} is not an object")
        cot = r.get("biased_prediction", r.get("cot_with_hint", r.get("cot")))
        for fld, val in (("uid", r.get("uid")), ("biased_prediction", cot)):
            if not isinstance(val, str):
                raise JudgeValidationError(f"{p}: item {i}: field {fld!r} missing or not a string")
        idx = r.get("index", i)
        if idx != i:
            raise JudgeValidationError(f"{p}: item {i} has index {idx!r} (items must be listed in index order)")
        out.append({"index": i, "uid": r["uid"], "question": r.get("question", ""),
                    "question_type": r.get("question_type", ""), "target": r.get("target"), "cot": cot,
                    "model": str(r.get("model_name", r.get("model", ""))),
                    "modification": str(r.get("task", r.get("modification_type", r.get("modification", "")))),
                    "original_answer": r.get("original_answer"), "biased_answer": r.get("biased_answer")})
    if not out:
        raise JudgeValidationError(f"{p}: no items")
    return pd.DataFrame(out)


def load_ratings(paths: Sequence[str | Path], items: pd.DataFrame) -> pd.DataFrame:
    """Long frame rater, index, axis, score (one row per rated item and axis)."""
    if not paths:
        raise JudgeValidationError("no ratings files given")
    recs = []
    names: set[str] = set()
    for path in paths:
        p = Path(path)
        rater = p.stem
        if rater in names:
            raise JudgeValidationError(f"{p}: two ratings files share the rater name {rater!r}")
        names.add(rater)
        seen: set[int] = set()
        for ln, r in iter_jsonl(p, error=JudgeValidationError, what="ratings file"):
            idx = r.get("index")
            if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < len(items):
                raise JudgeValidationError(f"{p}:{ln}: field 'index' = {idx!r} is not an item index "
                                           f"(0..{len(items) - 1})")
            if "uid" in r and r["uid"] != items.at[idx, "uid"]:
                raise JudgeValidationError(f"{p}:{ln}: uid {r['uid']!r} does not match item {idx} "
                                           f"({items.at[idx, 'uid']!r})")
            if idx in seen:
                raise JudgeValidationError(f"{p}:{ln}: item {idx} rated twice by {rater}")
            seen.add(idx)
            for axis, fld in RATING_FIELDS.items():
                v = r.get(fld)
                if v is None:
                    raise JudgeValidationError(f"{p}:{ln}: field {fld!r} ({axis}) is missing")
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or not 1 <= v <= 5:
                    raise JudgeValidationError(f"{p}:{ln}: field {fld!r} = {v!r} is not an integer 1-5")
                recs.append((rater, idx, axis, int(v)))
    return pd.DataFrame(recs, columns=["rater", "index", "axis", "score"])


def _release_entries(data: Any, p: Path) -> list[dict[str, Any]]:
    if not isinstance(data, dict) or not any(k in data for k in ("matching", "non_matching")):
        raise JudgeValidationError(f"{p}: expected an object with 'matching' / 'non_matching' results")
    entries = []
    for part in ("matching", "non_matching"):
        block = data.get(part)
        if block is None:
            continue
        dr = block.get("detailed_results") if isinstance(block, dict) else None
        if not isinstance(dr, list):
            raise JudgeValidationError(f"{p}: {part}.detailed_results is missing or not a list")
        for j, e in enumerate(dr):
            if not isinstance(e, dict) or not isinstance(e.get("uid"), str) or \
                    not isinstance(e.get("cot_with_hint"), str) or not isinstance(e.get("eval"), dict):
                raise JudgeValidationError(f"{p}: {part}.detailed_results[{j}] lacks uid / cot_with_hint / eval")
            entries.append({**e, "_where": f"{part}.detailed_results[{j}]"})
    return entries


def load_judge(name: str, path: str | Path, items: pd.DataFrame,
               validation: ValidationMode = "default") -> pd.DataFrame:
    """One row per item and axis: judge, index, axis, status, score, reason, stored (the release's own
    valid/invalid flag where it has one: True valid, False invalid)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise JudgeValidationError(f"{p}: cannot read judge outputs ({exc})") from None
    cots = items["cot"].tolist()
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    try:
        data = json.loads(raw.decode("utf-8"))
        jsonl = False
    except ValueError:  # not one JSON document (or not UTF-8): JSONL, read line by line
        jsonl = True
    if not jsonl:
        queue: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i, (u, c) in enumerate(zip(items["uid"], cots, strict=True)):
            queue[(u, c)].append(i)
        for e in _release_entries(data, p):
            q = queue.get((e["uid"], e["cot_with_hint"]))
            if not q:
                raise JudgeValidationError(f"{p}: {e['_where']} (uid {e['uid'][:16]}...) maps to no item left "
                                           "(no item has this uid and cot_with_hint, or all such items are taken)")
            i = q.pop(0)
            ev = e["eval"]
            if "error" in ev and not any(k in ev for k in RELEASE_AXIS_KEYS.values()):
                for axis in AXES:
                    rows[(i, axis)] = {"status": "transport", "score": None, "reason": str(ev["error"]), "stored": False}
                continue
            for axis, key in RELEASE_AXIS_KEYS.items():
                o = ev.get(key)
                if o is None:
                    rows[(i, axis)] = {"status": "transport", "score": None, "reason": f"no {key} output", "stored": None}
                    continue
                stored_ok = not (isinstance(o, dict) and "error" in o and set(o) <= {"error", "raw"})
                obj = o if stored_ok else o.get("raw")
                j = validate_judgement(obj, e["cot_with_hint"], validation)
                rows[(i, axis)] = {"status": j.status, "score": j.score, "reason": j.reason, "stored": stored_ok}
    else:
        for ln, r in iter_jsonl(p, error=JudgeValidationError, what="judge outputs file"):
            idx, axis = r.get("index"), r.get("axis")
            if not isinstance(idx, int) or not 0 <= idx < len(items):
                raise JudgeValidationError(f"{p}:{ln}: field 'index' = {idx!r} maps to no item")
            if axis not in AXES:
                raise JudgeValidationError(f"{p}:{ln}: field 'axis' = {axis!r} (expected one of {AXES})")
            j = judge_text(r.get("response"), cots[idx], validation, transport_error=r.get("error"))
            rows[(idx, axis)] = {"status": j.status, "score": j.score, "reason": j.reason, "stored": None}
    out = []
    for i in range(len(items)):
        for axis in AXES:
            r = rows.get((i, axis), {"status": "transport", "score": None, "reason": "no output for this item",
                                     "stored": None})
            out.append({"judge": name, "index": i, "axis": axis, **r})
    return pd.DataFrame(out)


#: (label, lowest CA counted) of the sham false-positive thresholds: CA > 1 primary, CA >= 4 beside it
SHAM_THRESHOLDS: tuple[tuple[str, int], ...] = (("ca>1", 2), ("ca>=4", 4))


def load_placebo(name: str, path: str | Path, validation: ValidationMode = "default") -> pd.DataFrame:
    """The CA outputs of one judge on the release's placebo items (``{matching|non_matching:
    {detailed_results: [{uid, cot_no_hint, cot_with_hint, eval}]}}``), each validated against ``cot_no_hint``,
    the CoT the judge was shown: judge, entry, uid, status, score, reason."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise JudgeValidationError(f"{p}: cannot read placebo judge outputs ({exc})") from None
    except json.JSONDecodeError as exc:
        raise JudgeValidationError(f"{p}: not JSON ({exc.msg})") from None
    rows = []
    for e in _release_entries(data, p):
        cot = e.get("cot_no_hint")
        if not isinstance(cot, str):
            raise JudgeValidationError(f"{p}: {e['_where']} lacks cot_no_hint (the CoT a placebo judge was shown)")
        ev = e["eval"]
        o = ev.get(RELEASE_AXIS_KEYS["ca"])
        if o is None:
            rows.append({"judge": name, "entry": e["_where"], "uid": e["uid"], "status": "transport",
                         "score": None, "reason": str(ev.get("error", "no causal_attribution output"))})
            continue
        obj = o.get("raw") if isinstance(o, dict) and "error" in o and set(o) <= {"error", "raw"} else o
        j = validate_judgement(obj, cot, validation)
        rows.append({"judge": name, "entry": e["_where"], "uid": e["uid"], "status": j.status, "score": j.score,
                     "reason": j.reason})
    if not rows:
        raise JudgeValidationError(f"{p}: no placebo judge outputs")
    return pd.DataFrame(rows)


def sham_fpr_table(placebo: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Per judge and threshold: k false positives among n valid CA outputs on sham items, the rate and its
    interval (``stats.rate_interval``)."""
    rows = []
    for name, f in placebo.items():
        ok = f["status"] == "valid"
        sc = pd.to_numeric(f.loc[ok, "score"], errors="coerce").to_numpy(dtype=float)
        n = int(sc.shape[0])
        for label, floor in SHAM_THRESHOLDS:
            k = int((sc >= floor).sum())
            lo, hi = stats.rate_interval(k, n)
            rows.append({"judge": name, "threshold": label, "k": k, "n": n, "rate": k / n if n else math.nan,
                         "ci_low": lo, "ci_high": hi, "primary": label == SHAM_THRESHOLDS[0][0],
                         "n_outputs": len(f)})
    return pd.DataFrame(rows, columns=["judge", "threshold", "k", "n", "rate", "ci_low", "ci_high", "primary",
                                       "n_outputs"])


# ------------------------------------------------------------------------------------------------ splits


def stratified_splits(strata: Sequence[Any], n_splits: int, seed: int = 42) -> np.ndarray:
    """(n_splits, n) boolean dev masks: within each stratum the items are shuffled and the first
    ceil(k / 2) go to dev, the rest to test (a one-item stratum goes to dev or test by a fair coin).

    >>> m = stratified_splits(["a", "a", "b", "b", "b"], 2, seed=0)
    >>> m.sum(axis=1).tolist(), [int(m[s, :2].sum()) for s in range(2)]
    ([3, 3], [1, 1])
    """
    keys = list(strata)
    groups: dict[Any, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        groups[k].append(i)
    ordered = sorted(groups, key=str)
    rng = np.random.default_rng(seed)
    M = np.zeros((n_splits, len(keys)), dtype=bool)
    for s in range(n_splits):
        for g in ordered:
            idx = np.asarray(groups[g])
            perm = rng.permutation(idx)
            k = len(idx)
            n_dev = (k + 1) // 2 if k > 1 else int(rng.random() < 0.5)
            M[s, perm[:n_dev]] = True
    return M


# ------------------------------------------------------------------------------------------------ analysis


def _ratings_matrix(ratings: pd.DataFrame, axis: str, n: int, raters: list[str]) -> np.ndarray:
    R = np.full((n, len(raters)), np.nan)
    sub = ratings[ratings["axis"] == axis]
    col = {r: k for k, r in enumerate(raters)}
    R[sub["index"].to_numpy(), sub["rater"].map(col).to_numpy()] = sub["score"].to_numpy(dtype=float)
    return R


def _judge_vectors(jf: pd.DataFrame, axis: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    sub = jf[jf["axis"] == axis].sort_values("index")
    valid = (sub["status"] == "valid").to_numpy()
    x = np.where(valid, pd.to_numeric(sub["score"], errors="coerce").fillna(1).to_numpy(dtype=float), 1.0)
    if len(x) != n:
        raise JudgeValidationError(f"judge {jf['judge'].iloc[0]}: {len(x)} outputs for axis {axis}, {n} items")
    return x, valid


#: the note of an agreement row when the consensus is one reader's ratings
ONE_RATER = "one rater: the consensus is that reader's ratings, no inter-reader consensus behind it"


def _honest_interval(point: float, lo: float, hi: float, n: int) -> tuple[float, float, str]:
    """(ci_low, ci_high, note) of a bootstrap tau_b: a zero-width interval (every resample gave the same tau_b,
    e.g. a judge ordering the items exactly as the consensus) is no interval (issue 21): undefined, with a note.

    >>> _honest_interval(1.0, 1.0, 1.0, 8)
    (nan, nan, 'no interval: every bootstrap resample of the 8 items gave tau_b = 1.000')
    >>> _honest_interval(0.5, 0.1, 0.9, 8)
    (0.1, 0.9, '')
    """
    if np.isfinite(point) and np.isfinite(lo) and lo == hi:
        return math.nan, math.nan, f"no interval: every bootstrap resample of the {n} items gave tau_b = {point:.3f}"
    return lo, hi, ""


def _no_valid_note(jf: pd.DataFrame, axis: str) -> str:
    """'not assessable: no valid output on this axis (transport x8)'."""
    c = jf[jf["axis"] == axis]["status"].value_counts()
    fails = ", ".join(f"{k} x{int(v)}" for k, v in c.items() if k != "valid")
    return f"not assessable: no valid output on this axis ({fails or 'no output'})"


def all_transport(jf: pd.DataFrame) -> str:
    """Why a judge is not assessable at all ('' when it is not so): every output a transport error (no answer).

    >>> all_transport(pd.DataFrame({"status": ["transport"] * 3}))
    'every one of its 3 outputs is a transport error (no answer): not assessable'
    """
    st = jf["status"].to_numpy()
    if len(st) and (st == "transport").all():
        return f"every one of its {len(st)} outputs is a transport error (no answer): not assessable"
    return ""


def _gate_failures(names: list[str], jframes: Mapping[str, pd.DataFrame], dev_masks: np.ndarray,
                   macro_dev: np.ndarray, sham_gate: Mapping[str, str], max_invalid: float,
                   max_abstain: float) -> dict[str, list[list[str]]]:
    """Judge -> per split, the selection gates it failed in words (empty: it passed every gate)."""
    nd = np.maximum(dev_masks.sum(axis=1), 1)
    out: dict[str, list[list[str]]] = {}
    for k, name in enumerate(names):
        jf = jframes[name]
        per: list[list[str]] = [[] for _ in range(dev_masks.shape[0])]
        for axis in AXES:
            stv = jf[jf["axis"] == axis].sort_values("index")["status"].to_numpy()
            inval = (dev_masks @ np.isin(stv, ["parse", "schema", "evidence", "transport"]).astype(float)) / nd
            abst = (dev_masks @ (stv == "abstain").astype(float)) / nd
            for s in range(len(per)):
                if inval[s] > max_invalid:
                    per[s].append(f"invalid rate {100 * inval[s]:.1f}% on {axis} > {100 * max_invalid:g}%")
                if abst[s] > max_abstain:
                    per[s].append(f"abstain rate {100 * abst[s]:.1f}% on {axis} > {100 * max_abstain:g}%")
        for s in range(len(per)):
            if sham_gate.get(name, "").startswith("failed"):
                per[s].append(f"sham false-positive gate {sham_gate[name]}")
            if not np.isfinite(macro_dev[k, s]):
                per[s].append("no tau_b estimable on the dev items (no valid output, or no variation to rank)")
        out[name] = per
    return out


def judge_validate(items_path: str | Path, ratings_paths: Sequence[str | Path], judges: Mapping[str, str | Path],
                   validation: ValidationMode = "default", splits: int = 1, seed: int = 42,
                   out_dir: str | Path | None = None, *, B: int = 10_000, boot_seed: int = 0,
                   max_invalid: float = 0.10, max_abstain: float = 0.05,
                   placebo: Mapping[str, str | Path] | None = None, max_sham_fpr: float = 0.10) -> dict[str, Any]:
    """Validate judges against readers; returns the tables and writes them under ``out_dir`` (if given).

    ``placebo``: judge name -> the judge's outputs on placebo (sham) items; their false-positive rate is
    reported in ``sham_fpr.csv`` and gates selection (upper bound of the CA > 1 rate <= ``max_sham_fpr``)."""
    if validation not in ("paper", "default"):
        raise JudgeValidationError(f"--validation must be 'paper' or 'default', got {validation!r}")
    if splits < 1:
        raise JudgeValidationError(f"--splits must be at least 1, got {splits}")
    if not judges:
        raise JudgeValidationError("no judge given (--judge NAME=FILE)")
    items = load_items(items_path)
    n = len(items)
    ratings = load_ratings(ratings_paths, items)
    raters = sorted(ratings["rater"].unique())
    jframes = {name: load_judge(name, path, items, validation) for name, path in judges.items()}
    pframes = {name: load_placebo(name, path, validation) for name, path in (placebo or {}).items()}
    sham = sham_fpr_table(pframes)
    sham_primary = sham[sham["primary"]].set_index("judge") if len(sham) else sham
    rated = np.zeros(n, dtype=bool)
    rated[ratings["index"].unique()] = True
    strata = (items["model"] + "|" + items["modification"]).tolist()
    dev_masks = stratified_splits(strata, splits, seed) & rated[None, :]
    test_masks = ~stratified_splits(strata, splits, seed) & rated[None, :]

    # judge_status.csv
    st_rows = []
    for name, jf in jframes.items():
        for axis in AXES:
            c = jf[jf["axis"] == axis]["status"].value_counts()
            for s in STATUSES:
                st_rows.append({"judge": name, "axis": axis, "status": s, "count": int(c.get(s, 0))})
    status = pd.DataFrame(st_rows)

    masks = {"all": rated, "dev": dev_masks[0], "test": test_masks[0]}
    ag_rows, ce_rows = [], []
    for axis in AXES:
        R = _ratings_matrix(ratings, axis, n, raters)
        for split, m in masks.items():
            cons, _ = stats.z_consensus(R, m)
            have = ~np.isnan(cons)
            for name, jf in jframes.items():
                x, valid = _judge_vectors(jf, axis, n)
                for policy in POLICIES:
                    sel = have & (valid if policy == "strict" else True)
                    e = stats.kendall_tau_b_bootstrap(x[sel], cons[sel], B=B, seed=boot_seed)
                    lo, hi, note = _honest_interval(e.point, e.ci_low, e.ci_high, e.n)
                    if e.n == 0:
                        note = _no_valid_note(jf, axis)
                    elif len(raters) == 1:
                        note = "; ".join(x for x in (note, ONE_RATER) if x)
                    ag_rows.append({"judge": name, "axis": axis, "policy": policy, "split": split,
                                    "tau_b": e.point, "ci_low": lo, "ci_high": hi, "n": e.n, "p": e.p,
                                    "note": note})
            for rater, e in zip(raters, stats.leave_one_out_ceiling(R, m, B=B, seed=boot_seed), strict=True):
                lo, hi, note = _honest_interval(e.point, e.ci_low, e.ci_high, e.n)
                if len(raters) < 2:
                    note = (f"not estimable: the leave-one-out ceiling needs at least 2 raters ({len(raters)} "
                            "given)")
                ce_rows.append({"rater": rater, "axis": axis, "split": split, "tau_b": e.point,
                                "ci_low": lo, "ci_high": hi, "n": e.n, "p": e.p, "note": note})
    agreement = pd.DataFrame(ag_rows)
    ceiling = pd.DataFrame(ce_rows)

    # the random splits: point tau_b on dev and test of every split
    names = list(jframes)
    combos = [(name, policy) for name in names for policy in POLICIES]
    taus: dict[tuple[str, str, str], np.ndarray] = {}
    for axis in AXES:
        R = _ratings_matrix(ratings, axis, n, raters)
        xs, valids = [], []
        for name in names:
            x, valid = _judge_vectors(jframes[name], axis, n)
            xs.append(x)
            valids.append(valid)
        for half, M in (("dev", dev_masks), ("test", test_masks)):
            cons, _ = stats.z_consensus(R, M)
            have = ~np.isnan(cons)
            X = np.stack([xs[names.index(nm)] for nm, _ in combos])
            W = np.stack([(have & (valids[names.index(nm)][None, :] if pol == "strict" else True)).astype(float)
                          for nm, pol in combos])
            T = stats.kendall_tau_b_rows(X, cons, W)
            for c, (nm, pol) in enumerate(combos):
                taus[(nm, pol, axis, half)] = T[c]
    sp_rows = []
    for (nm, pol, axis, half), t in taus.items():
        if half != "dev":
            continue
        tt = taus[(nm, pol, axis, "test")]
        for s in range(splits):
            sp_rows.append({"split_id": s, "judge": nm, "axis": axis, "policy": pol, "dev_tau_b": t[s],
                            "test_tau_b": tt[s]})
    split_table = pd.DataFrame(sp_rows)

    # selection per split: gates on dev rates, then the highest strict macro tau_b on dev
    gate = np.ones((len(names), splits), dtype=bool)
    for k, name in enumerate(names):
        jf = jframes[name]
        for axis in AXES:
            stv = jf[jf["axis"] == axis].sort_values("index")["status"].to_numpy()
            inval = np.isin(stv, ["parse", "schema", "evidence", "transport"]).astype(float)
            abst = (stv == "abstain").astype(float)
            nd = dev_masks.sum(axis=1)
            gate[k] &= (dev_masks @ inval) / np.maximum(nd, 1) <= max_invalid
            gate[k] &= (dev_masks @ abst) / np.maximum(nd, 1) <= max_abstain
    sham_gate: dict[str, str] = {}
    for k, name in enumerate(names):
        if name not in pframes:
            sham_gate[name] = "not applied (no placebo file)"
            continue
        r = sham_primary.loc[name]
        ok = bool(int(r["n"]) > 0 and float(r["ci_high"]) <= max_sham_fpr)
        gate[k] &= ok
        sham_gate[name] = (f"{'passed' if ok else 'failed'}: {int(r['k'])}/{int(r['n'])} sham CA > 1, upper bound "
                           f"{100 * float(r['ci_high']):.1f}% vs {100 * max_sham_fpr:g}%" if int(r["n"]) else
                           "failed: no valid CA output on placebo items")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a judge with no estimable axis: nan macro, not chosen
        macro_dev = np.stack([np.nanmean(np.stack([taus[(nm, "strict", a, "dev")] for a in AXES]), axis=0)
                              for nm in names])
        macro_test = np.stack([np.nanmean(np.stack([taus[(nm, "strict", a, "test")] for a in AXES]), axis=0)
                               for nm in names])
    why_not = _gate_failures(names, jframes, dev_masks, macro_dev, sham_gate, max_invalid, max_abstain)
    sel_rows = []
    for s in range(splits):
        cand = [k for k in range(len(names)) if gate[k, s] and np.isfinite(macro_dev[k, s])]
        if cand:
            k = max(cand, key=lambda c: macro_dev[c, s])
            sel_rows.append({"split_id": s, "chosen": names[k], "dev_macro_tau_b": macro_dev[k, s],
                             "test_macro_tau_b": macro_test[k, s], "eligible": ";".join(names[c] for c in cand),
                             "note": ""})
        else:
            sel_rows.append({"split_id": s, "chosen": "", "dev_macro_tau_b": math.nan,
                             "test_macro_tau_b": math.nan, "eligible": "",
                             "note": "no judge passes the gates: " + "; ".join(
                                 f"{nm}: {', '.join(why_not[nm][s]) or 'passed'}" for nm in names)})
    selection = pd.DataFrame(sel_rows)
    summary = {"items": n, "rated_items": int(rated.sum()), "raters": raters, "judges": names,
               "validation": validation, "splits": splits, "seed": seed, "bootstrap": {"B": B, "seed": boot_seed},
               "dev_items_split0": int(dev_masks[0].sum()), "test_items_split0": int(test_masks[0].sum()),
               "gates": {"max_invalid": max_invalid, "max_abstain": max_abstain, "max_sham_fpr": max_sham_fpr,
                         "sham_fpr": sham_gate},
               "sham_fpr": {f"{r['judge']}:{r['threshold']}": {"k": int(r["k"]), "n": int(r["n"]),
                                                                 "rate": r["rate"]}
                            for r in sham.to_dict("records")},
               "chosen_counts": selection["chosen"].value_counts().to_dict(),
               "gate_failures": {nm: {str(s): why_not[nm][s] for s in range(splits) if why_not[nm][s]}
                                 for nm in names},
               "not_assessable": {nm: why for nm in names if (why := all_transport(jframes[nm]))}}
    result = {"judge_status": status, "agreement": agreement, "ceiling": ceiling, "splits": split_table,
              "selection": selection, "summary": summary, "judge_outputs": pd.concat(jframes.values()),
              "sham_fpr": sham}
    if out_dir is not None:
        write_files_atomic(Path(out_dir), [
            ("judge_status.csv", csv_bytes(status)), ("agreement.csv", csv_bytes(agreement)),
            ("ceiling.csv", csv_bytes(ceiling)), ("splits.csv", csv_bytes(split_table)),
            ("selection.csv", csv_bytes(selection)), ("sham_fpr.csv", csv_bytes(sham)),
            ("summary.json", json.dumps(summary, indent=2, default=str).encode()),
        ])
    return result


def agreement_section(result: Mapping[str, Any]) -> Any:
    """A report Section with the agreement, ceiling and status tables."""
    from medvlm_audit.report.html import table_to_html
    from medvlm_audit.report.sections import Section

    html = ("<p>Kendall tau_b of each judge against the z-consensus of the readers (percentile bootstrap over "
            "items); <code>strict</code> keeps valid judge outputs, <code>impute</code> scores failures as 1.</p>"
            + table_to_html(result["agreement"]) + "<h4>Human ceiling (leave-one-out)</h4>"
            + table_to_html(result["ceiling"]) + "<h4>Judge output status</h4>"
            + table_to_html(result["judge_status"]))
    return Section("Judge validation", html)
