"""Clinical-metric formulas (paper 002): CheXbert F1, RadGraph rewards, RaTEScore matching, GREEN."""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from medvlm_audit.stats.resample import bootstrap_estimate, case_bootstrap_ratios
from medvlm_audit.stats.types import _NAN, NOT_ESTIMABLE_N0, Estimate, Mode
from medvlm_audit.stats.validation import _check_B

__all__ = ['RADGRAPH_LEVELS', 'RATESCORE_NEGATED_TYPES', 'RATESCORE_POSITIVE_TYPES', 'RATESCORE_TYPES', 'green_scores', 'multilabel_f1', 'multilabel_f1_bootstrap', 'multilabel_f1_terms', 'radgraph_items', 'radgraph_rewards', 'ratescore', 'ratescore_match', 'ratescore_penalty', 'set_f1']


def multilabel_f1_terms(y_true: Any, y_pred: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-case F1 terms of a multi-label task: ``num = 2·TP`` and ``den = 2·TP + FP + FN``, shape (n, k) each.

    F1 of label j over any set of cases is ``sum(num[:, j]) / sum(den[:, j])`` (= 2PR / (P + R)), so F1 over
    resampled cases is a ratio of resampled sums (:func:`case_bootstrap_ratios`). Inputs are 0/1 matrices,
    cases x labels, positive = 1.

    >>> num, den = multilabel_f1_terms([[1, 0]], [[1, 1]])
    >>> num.tolist(), den.tolist()
    ([[2.0, 0.0]], [[2.0, 1.0]])
    """
    T = np.asarray(y_true)
    P = np.asarray(y_pred)
    if T.ndim != 2 or P.ndim != 2:
        raise ValueError(f"y_true and y_pred must be 2-D (cases x labels), got shapes {T.shape} and {P.shape}")
    if T.shape != P.shape:
        raise ValueError(f"y_true and y_pred must have the same shape: {T.shape} != {P.shape}")
    for name, M in (("y_true", T), ("y_pred", P)):
        bad = ~np.isin(M, (0, 1))
        if bad.any():
            i, j = (int(v) for v in np.argwhere(bad)[0])
            raise ValueError(f"{name} must be 0/1; row {i}, column {j} is {M[i, j]!r}")
    t = T.astype(bool)
    p = P.astype(bool)
    tp = (t & p).astype(np.float64)
    fp = (~t & p).astype(np.float64)
    fn = (t & ~p).astype(np.float64)
    return 2.0 * tp, 2.0 * tp + fp + fn


def _f1_from_sums(num: np.ndarray, den: np.ndarray, zero_division: float) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den == 0.0, zero_division, num / np.where(den == 0.0, 1.0, den))


def multilabel_f1(y_true: Any, y_pred: Any, average: Literal["micro", "macro"] = "micro",
                  zero_division: float = 0.0) -> float:
    """Micro or macro F1 of 0/1 label matrices (cases x labels), as scikit-learn's ``f1_score`` on multilabel
    indicators (``average="micro"`` / ``"macro"``) and so as the ``f1chexbert`` package's classification report.

    micro: 2·ΣTP / (2·ΣTP + ΣFP + ΣFN) over all cells; macro: the unweighted mean of the per-label F1, a label
    with no positive in either matrix counting ``zero_division`` (0, scikit-learn's default).

    Example (hand-computed): labels (a, b, c), y_true = [[1, 0, 0], [1, 1, 0], [0, 0, 0]],
    y_pred = [[1, 1, 0], [0, 1, 0], [0, 1, 0]]. a: TP 1, FN 1 -> F1 = 2 / 3; b: TP 1, FP 2 -> F1 = 2 / 4;
    c: never positive -> 0. micro = 2·2 / (2·2 + 2 + 1) = 4 / 7 = 0.5714; macro = (2/3 + 1/2 + 0) / 3 = 0.3889.

    >>> t = [[1, 0, 0], [1, 1, 0], [0, 0, 0]]; p = [[1, 1, 0], [0, 1, 0], [0, 1, 0]]
    >>> round(multilabel_f1(t, p, "micro"), 4), round(multilabel_f1(t, p, "macro"), 4)
    (0.5714, 0.3889)
    """
    num, den = multilabel_f1_terms(y_true, y_pred)
    if average == "micro":
        return float(_f1_from_sums(np.asarray(num.sum()), np.asarray(den.sum()), zero_division))
    if average == "macro":
        if num.shape[1] == 0:
            return _NAN
        return float(_f1_from_sums(num.sum(axis=0), den.sum(axis=0), zero_division).mean())
    raise ValueError(f"average must be 'micro' or 'macro', got {average!r}")


def multilabel_f1_bootstrap(y_true: Any, y_pred: Any, B: int = 10_000, seed: int = 0, alpha: float = 0.05,
                            zero_division: float = 0.0, mode: Mode = "exact-counts") -> dict[str, Estimate]:
    """Micro and macro F1 (:func:`multilabel_f1`) with percentile bootstrap intervals over cases (rows).

    Each resample draws n cases with replacement (the same cases for both averages) and recomputes both F1s from
    the resampled sums of :func:`multilabel_f1_terms` (:func:`case_bootstrap_ratios`, ``mode`` as there); a
    label without a positive in a resample counts ``zero_division`` in the macro mean, as in the point
    estimate. Returns ``{"micro": Estimate, "macro": Estimate}`` (se = bootstrap SD).

    Example: the cases of :func:`multilabel_f1` give the points 4 / 7 and 7 / 18.

    >>> t = [[1, 0, 0], [1, 1, 0], [0, 0, 0]]; p = [[1, 1, 0], [0, 1, 0], [0, 1, 0]]
    >>> est = multilabel_f1_bootstrap(t, p, B=200)
    >>> round(est["micro"].point, 4), round(est["macro"].point, 4), est["micro"].n
    (0.5714, 0.3889, 3)
    """
    B = _check_B(B)
    num, den = multilabel_f1_terms(y_true, y_pred)
    n, k = num.shape
    how = f"bootstrap over cases ({mode}, B={B}, seed={seed})"
    if n == 0 or k == 0:
        nan_est = Estimate(_NAN, _NAN, _NAN, _NAN, 0, NOT_ESTIMABLE_N0)
        return {"micro": nan_est, "macro": nan_est}
    N = np.column_stack([num.sum(axis=1), num])
    D = np.column_stack([den.sum(axis=1), den])
    draws = case_bootstrap_ratios(N, D, B, seed, mode)  # nan where a resampled denominator is 0
    draws = np.where(np.isnan(draws), zero_division, draws)
    return {"micro": bootstrap_estimate(multilabel_f1(y_true, y_pred, "micro", zero_division), draws[:, 0], n,
                                        alpha, how),
            "macro": bootstrap_estimate(multilabel_f1(y_true, y_pred, "macro", zero_division),
                                        draws[:, 1:].mean(axis=1), n, alpha, how)}


def set_f1(hypothesis: Any, reference: Any) -> float:
    """F1 of two sets of hashable items as the ``radgraph`` package computes it: precision = |H ∩ R| / |H|
    (0 when H is empty), recall = |H ∩ R| / |R| (0 when R is empty), F1 = 2PR / (P + R) (0 when P + R = 0).

    >>> round(set_f1({"a", "b", "c"}, {"a", "b", "d", "e"}), 4)  # P = 2/3, R = 2/4
    0.5714
    """
    H = set(hypothesis)
    R = set(reference)
    common = len(H & R)
    precision = common / len(H) if H else 0.0
    recall = common / len(R) if R else 0.0
    return 2.0 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


RADGRAPH_LEVELS = ("simple", "partial", "complete")


def radgraph_items(entities: dict[str, Any], level: str) -> set[tuple[Any, ...]]:
    """The items a RadGraph reward compares, from one report's ``entities`` (RadGraph JSON:
    ``{id: {"tokens", "label", "relations": [[type, target_id], ...]}}``), as in Delbrouck et al. 2022 and the
    ``radgraph`` package 0.1.18 (``rewards.py``):

    * ``simple`` (RG_E): ``(tokens, label)`` per entity;
    * ``partial`` (RG_ER): ``(tokens, label)`` for an entity without relations, ``(tokens, label, True)`` for one
      with at least one relation;
    * ``complete`` (RG_ER-bar): ``(tokens, label)`` for an entity without relations; for one with relations,
      ``(tokens.lower(), label, relation_type, target_tokens.lower())`` per relation (the package lower-cases
      only these).

    >>> ents = {"1": {"tokens": "effusion", "label": "OBS-DP", "relations": [["located_at", "2"]]},
    ...         "2": {"tokens": "pleural", "label": "ANAT-DP", "relations": []}}
    >>> sorted(radgraph_items(ents, "complete"))
    [('effusion', 'OBS-DP', 'located_at', 'pleural'), ('pleural', 'ANAT-DP')]
    """
    out: set[tuple[Any, ...]] = set()
    for key, ent in entities.items():
        rels = ent.get("relations") or []
        if level == "simple" or not rels:
            out.add((ent["tokens"], ent["label"]))
        elif level == "partial":
            out.add((ent["tokens"], ent["label"], True))
        elif level == "complete":
            for rel in rels:
                target = entities.get(str(rel[1]))
                if target is None:
                    raise ValueError(f"entity {key!r} has a {rel[0]!r} relation to entity {rel[1]!r}, "
                                     "which is not in the report's entities")
                out.add((ent["tokens"].lower(), ent["label"], rel[0], target["tokens"].lower()))
        else:
            raise ValueError(f"level must be one of {RADGRAPH_LEVELS}, got {level!r}")
    return out


def radgraph_rewards(hypothesis: dict[str, Any], reference: dict[str, Any]) -> tuple[float, float, float]:
    """RadGraph F1 of one report pair at the three levels (simple = RG_E, partial = RG_ER, complete =
    RG_ER-bar): :func:`set_f1` of the :func:`radgraph_items` of the two ``entities`` dicts. As in the package,
    a pair where either report has no entity scores (0, 0, 0). RadGraph F1 of a corpus is the mean over pairs.

    Example (hand-computed): the hypothesis has effusion (OBS-DP) located_at lung (ANAT-DP) and pleural
    (ANAT-DP); the reference has effusion located_at pleural, pleural, and cardiomegaly (OBS-DP).
    simple: 2 of 3 entities shared each way -> 2/3; partial: effusion-with-a-relation and pleural shared ->
    2/3; complete: only (pleural, ANAT-DP) shared (the relation targets differ) -> P = R = 1/3, F1 = 1/3.

    >>> h = {"1": {"tokens": "effusion", "label": "OBS-DP", "relations": [["located_at", "3"]]},
    ...      "2": {"tokens": "pleural", "label": "ANAT-DP", "relations": []},
    ...      "3": {"tokens": "lung", "label": "ANAT-DP", "relations": []}}
    >>> r = {"1": {"tokens": "effusion", "label": "OBS-DP", "relations": [["located_at", "2"]]},
    ...      "2": {"tokens": "pleural", "label": "ANAT-DP", "relations": []},
    ...      "3": {"tokens": "cardiomegaly", "label": "OBS-DP", "relations": []}}
    >>> [round(v, 4) for v in radgraph_rewards(h, r)]
    [0.6667, 0.6667, 0.3333]
    """
    if not hypothesis or not reference:
        return (0.0, 0.0, 0.0)
    s, p, c = (set_f1(radgraph_items(hypothesis, lv), radgraph_items(reference, lv)) for lv in RADGRAPH_LEVELS)
    return (s, p, c)


#: entity types of RaTE-NER; the negated finding types and the positive finding types they contradict
RATESCORE_TYPES = ("ABNORMALITY", "NON-ABNORMALITY", "DISEASE", "NON-DISEASE", "ANATOMY")


RATESCORE_NEGATED_TYPES = ("NON-ABNORMALITY", "NON-DISEASE")


RATESCORE_POSITIVE_TYPES = ("ABNORMALITY", "DISEASE")


def ratescore_penalty(types: Any, neg_weight: float) -> np.ndarray:
    """(T, T) multipliers of RaTEScore's negation penalty: ``neg_weight`` where one entity type is a negated
    finding (NON-ABNORMALITY, NON-DISEASE) and the other a positive finding (ABNORMALITY, DISEASE), in either
    order; 1 elsewhere (same polarity, or ANATOMY on either side).

    >>> ratescore_penalty(["ABNORMALITY", "NON-DISEASE", "ANATOMY"], 0.5).tolist()
    [[1.0, 0.5, 1.0], [0.5, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    names = [str(t).upper() for t in types]
    neg = np.array([t in RATESCORE_NEGATED_TYPES for t in names])
    pos = np.array([t in RATESCORE_POSITIVE_TYPES for t in names])
    clash = (neg[:, None] & pos[None, :]) | (pos[:, None] & neg[None, :])
    return np.where(clash, float(neg_weight), 1.0)


def _ratescore_inputs(emb: Any, types: Any, name: str, T: int) -> tuple[np.ndarray, np.ndarray]:
    E = np.asarray(emb, dtype=np.float64)
    t = np.asarray(types, dtype=np.int64).reshape(-1)
    if E.size == 0:
        return E.reshape(0, E.shape[-1] if E.ndim == 2 else 0), t[:0]
    if E.ndim != 2:
        raise ValueError(f"{name} embeddings must be 2-D (entities x dims), got shape {E.shape}")
    if t.shape[0] != E.shape[0]:
        raise ValueError(f"{name}: {E.shape[0]} embeddings but {t.shape[0]} types")
    if np.any((t < 0) | (t >= T)):
        bad = int(np.flatnonzero((t < 0) | (t >= T))[0])
        raise ValueError(f"{name} types[{bad}] = {int(t[bad])} is not a row of the {T} x {T} weight matrix")
    if not np.all(np.isfinite(E)):
        raise ValueError(f"{name} embeddings contain nan or inf")
    return E, t


def ratescore_match(emb_from: Any, types_from: Any, emb_to: Any, types_to: Any, weights: Any,
                    penalty: Any) -> float:
    """One direction of RaTEScore: each entity i of ``from`` is matched to its most cosine-similar entity j(i)
    of ``to`` (the first one on ties), and

        sum_i cos(i, j(i)) * W[t_i, t_j(i)] * P[t_i, t_j(i)] / sum_i W[t_i, t_j(i)]

    with W the type-pair weight (affinity) matrix and P the negation penalty (:func:`ratescore_penalty`); the
    penalty is in the numerator only, as released. 0 when the weights sum to 0; nan when either side has no
    entity (the caller applies the empty rule of :func:`ratescore`). A zero vector has cosine 0 with everything.

    >>> W = [[0.5, 0.2], [0.4, 0.1]]; P = [[1.0, 0.8], [0.8, 1.0]]
    >>> round(ratescore_match([[1, 0], [0, 1]], [0, 0], [[3, 4]], [1], W, P), 6)  # (.6*.2*.8 + .8*.2*.8) / .4
    0.56
    """
    Wm = np.asarray(weights, dtype=np.float64)
    Pm = np.asarray(penalty, dtype=np.float64)
    if Wm.ndim != 2 or Wm.shape[0] != Wm.shape[1] or Pm.shape != Wm.shape:
        raise ValueError(f"weights and penalty must be the same square (T, T) matrix, got {Wm.shape} and {Pm.shape}")
    T = Wm.shape[0]
    A, ta = _ratescore_inputs(emb_from, types_from, "from", T)
    Bm, tb = _ratescore_inputs(emb_to, types_to, "to", T)
    if A.shape[0] == 0 or Bm.shape[0] == 0:
        return _NAN
    if A.shape[1] != Bm.shape[1]:
        raise ValueError(f"embedding sizes differ: {A.shape[1]} (from) != {Bm.shape[1]} (to)")
    An = A / np.maximum(np.linalg.norm(A, axis=1, keepdims=True), 1e-12)
    Bn = Bm / np.maximum(np.linalg.norm(Bm, axis=1, keepdims=True), 1e-12)
    sim = An @ Bn.T
    j = np.argmax(sim, axis=1)
    best = sim[np.arange(sim.shape[0]), j]
    w = Wm[ta, tb[j]]
    den = float(w.sum())
    if den == 0.0:
        return 0.0
    return float((best * w * Pm[ta, tb[j]]).sum() / den)


def ratescore(hyp_emb: Any, hyp_types: Any, ref_emb: Any, ref_types: Any, weights: Any, penalty: Any,
              empty: float = 0.5) -> float:
    """RaTEScore of one report pair: the harmonic mean 2 P R / (P + R) of the two matching directions
    (:func:`ratescore_match` reference -> hypothesis and hypothesis -> reference); 0 when both are 0; ``empty``
    (0.5 in the released code) when either report has no entity.

    ``*_emb``: (entities, dims) entity embeddings; ``*_types``: each entity's row in the (T, T) ``weights``.

    Example (hand-computed): types 0 = ABNORMALITY, 1 = NON-ABNORMALITY, W = [[.5, .2], [.4, .1]], negation
    penalty .8 across the two types. Reference entities (1, 0) and (0, 1), both type 0; hypothesis entity
    (3, 4) of type 1 (cosines .6 and .8). Reference -> hypothesis: (.6 * .2 * .8 + .8 * .2 * .8) / (.2 + .2) =
    .56; hypothesis -> reference: the best match is (0, 1): .8 * .4 * .8 / .4 = .64; RaTEScore =
    2 * .56 * .64 / (.56 + .64) = .597333.

    >>> W = [[0.5, 0.2], [0.4, 0.1]]; P = [[1.0, 0.8], [0.8, 1.0]]
    >>> round(ratescore([[3, 4]], [1], [[1, 0], [0, 1]], [0, 0], W, P), 6)
    0.597333
    >>> ratescore([], [], [[1, 0]], [0], W, P)
    0.5
    """
    r = ratescore_match(ref_emb, ref_types, hyp_emb, hyp_types, weights, penalty)
    p = ratescore_match(hyp_emb, hyp_types, ref_emb, ref_types, weights, penalty)
    if math.isnan(r) or math.isnan(p):
        return float(empty)
    if p + r == 0.0:
        return 0.0
    return 2.0 * p * r / (p + r)


def green_scores(matched: Any, significant: Any) -> np.ndarray:
    """GREEN per report pair: matched / (matched + clinically significant errors), and 0 where the judge matched
    no finding (the released rule, whatever the error count). ``significant``: (n,) totals or (n, 6) counts of
    the error categories (a)-(f), summed per pair. Counts must be non-negative integers.

    >>> green_scores([3, 0, 2], [[1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]).tolist()
    [0.75, 0.0, 1.0]
    >>> green_scores([4], [2]).tolist()   # 4 / (4 + 2)
    [0.6666666666666666]
    """
    m = np.asarray(matched, dtype=np.float64).reshape(-1)
    s = np.asarray(significant, dtype=np.float64)
    if s.ndim == 2:
        s = s.sum(axis=1)
    s = s.reshape(-1)
    if s.shape[0] != m.shape[0]:
        raise ValueError(f"matched has {m.shape[0]} pairs but significant has {s.shape[0]}")
    for name, v in (("matched", m), ("significant", s)):
        bad = ~np.isfinite(v) | (v < 0) | (v != np.round(v))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name}[{i}] = {v[i]} is not a non-negative whole count")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(m > 0, m / np.where(m > 0, m + s, 1.0), 0.0)

