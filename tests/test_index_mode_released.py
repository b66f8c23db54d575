"""Index mode reproduces the paper's released code: its row order, its bootstrap interval at every n, its AUROC.

The reference below is the released code's procedure written out naively from its public description
(github.com/mahshadlotfinia/causal, ``Inference/stats_utils.py`` and ``Inference/metrics.py``): outcome vectors in
the order of the results file, ``RandomState(0).randint(0, n, (B, n))`` drawn in one shot, ``np.percentile``;
AUROC by ``np.argsort(scores)[::-1]`` and the trapezoid rule, resamples lacking a class dropped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from medvlm_audit import stats
from medvlm_audit.api import tidy_store as tidy
from medvlm_audit.store import RunStore
from medvlm_audit.suites.grounding.analysis import analyse_grounding
from medvlm_audit.suites.grounding.import_results import MANIFEST_COLUMNS, import_results

B = 2000
# file order is not case-id order: sorting the ids first resamples other cases than the released code does
IDS = ["z07", "b11", "m03", "a20", "q05", "c09", "y02", "d14", "k01", "e18", "w06", "f13", "p08", "g17", "h04"]
ORIG = [1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0]
TMASK = [0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1]
CONF = [0.9, 0.8, 0.8, 0.3, 0.7, 0.8, 0.6, 0.95, 0.2, 0.8, 0.55, 0.7, 0.9, 0.8, 0.4]  # ties at 0.8 and 0.7, 0.9


def _write(tmp: Path) -> Path:
    rows = []
    for i, cid in enumerate(IDS):
        r = {c: None for c in MANIFEST_COLUMNS}
        r.update(case_id=cid, source="ms_cxr", image_path=f"files/{cid}.jpg", subject_id=100 + i, study_id=200 + i,
                 view="PA", age=60, gender="M", finding="Pleural Effusion", label=1, box_x=10, box_y=20, box_w=30,
                 box_h=40, swap_image_path=f"files/s{cid}.jpg", irrelevant_box_x=194, irrelevant_box_y=184,
                 irrelevant_box_w=30, irrelevant_box_h=40)
        if i % 4 == 0:  # a MIMIC negative: no box (MS-CXR boxes mark present findings)
            r.update(source="mimic_cxr", label=0, box_x=None, box_y=None, box_w=None, box_h=None,
                     irrelevant_box_x=None, irrelevant_box_y=None, irrelevant_box_w=None, irrelevant_box_h=None)
        rows.append(r)
    man = tmp / "manifest.csv"
    pd.DataFrame(rows, columns=MANIFEST_COLUMNS).to_csv(man, index=False)
    d = tmp / "results" / "m"
    d.mkdir(parents=True)
    gt = [1 if i % 4 else 0 for i in range(len(IDS))]
    for cond, vals in (("original", ORIG), ("target_mask", TMASK)):
        pd.DataFrame({"case_id": IDS, "source": "ms_cxr", "model_name": "m", "condition": cond,
                      "prompt_variant": "default", "raw_answer": ["Yes" if v else "No" for v in vals],
                      "parsed_answer": vals, "confidence": CONF, "ground_truth": gt}).to_csv(d / f"{cond}.csv",
                                                                                            index=False)
    return import_results(man, tmp / "results", tmp / "run")


def _released_interval(values: np.ndarray) -> tuple[float, float]:
    idx = np.random.RandomState(0).randint(0, len(values), size=(B, len(values)))
    means = values[idx].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def _released_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    n_pos = (labels == 1).sum()
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ordered = labels[np.argsort(scores)[::-1]]
    tpr = np.concatenate([[0], np.cumsum(ordered == 1) / n_pos])
    fpr = np.concatenate([[0], np.cumsum(ordered == 0) / n_neg])
    return float(np.trapezoid(tpr, fpr))


def test_auroc_released_counts_ties_in_sort_order() -> None:
    assert stats.auroc_released([0.9, 0.8, 0.8, 0.3], [1, 0, 1, 0]) == 1.0
    assert stats.auroc([0.9, 0.8, 0.8, 0.3], [1, 0, 1, 0]) == pytest.approx(0.875)
    s = np.array(CONF)
    y = np.array([1 if i % 4 else 0 for i in range(len(IDS))])
    est = stats.auroc_interval_released(s, y, B=B)
    idx = np.random.RandomState(0).randint(0, len(s), size=(B, len(s)))
    boot = np.array([_released_auc(s[r], y[r]) for r in idx])
    boot = boot[~np.isnan(boot)]
    assert est.point == _released_auc(s, y)
    assert (est.ci_low, est.ci_high) == (float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5)))


def test_index_mode_reproduces_the_released_intervals(tmp_path: Path) -> None:
    with RunStore.open_dir(_write(tmp_path)) as st:
        df = tidy(st)
    res = analyse_grounding(df, B=B, mode="index")
    met = res.metrics.set_index(["model", "metric", "subset"])
    gt = np.array([1 if i % 4 else 0 for i in range(len(IDS))])
    orig, tm = np.array(ORIG), np.array(TMASK)
    # accuracy: parsed original answers, in the results file's row order (n = 15 < 30: still the bootstrap)
    acc = (orig == gt).astype(float)
    r = met.loc[("m", "accuracy", "all")]
    assert r.n == 15 and r.ci_method == "bootstrap-percentile"
    assert (r.ci_low, r.ci_high) == pytest.approx(tuple(100 * v for v in _released_interval(acc)), abs=1e-9)
    # CGR: correct-on-original boxed cases (the released code: positive and answered Yes), flips under the mask
    elig = (orig == gt) & (gt == 1) & (orig == 1)
    cgr = (tm[elig] != orig[elig]).astype(float)
    r = met.loc[("m", "cgr", "all")]
    assert r.n == elig.sum() and r.point == pytest.approx(100 * cgr.mean())
    assert (r.ci_low, r.ci_high) == pytest.approx(tuple(100 * v for v in _released_interval(cgr)), abs=1e-9)
    # sorting the cases by id first would give another interval: the row order matters
    idx = np.random.RandomState(0).randint(0, 15, size=(B, 15))
    sorted_acc = acc[np.argsort(np.array(IDS), kind="stable")]
    assert not np.array_equal(sorted_acc[idx].mean(1), acc[idx].mean(1))
    # AUROC of P(yes) as the released code computes it, with its draws
    s = np.array(CONF)
    a = met.loc[("m", "auroc", "all")]
    assert a.point == _released_auc(s, gt)
    idx = np.random.RandomState(0).randint(0, len(s), size=(B, len(s)))
    boot = np.array([_released_auc(s[i], gt[i]) for i in idx])
    boot = boot[~np.isnan(boot)]
    assert (a.ci_low, a.ci_high) == (float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5)))
