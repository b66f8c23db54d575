"""Surface similarity to reference reports (paper 002): corpus BLEU, ROUGE-1 / ROUGE-L."""

from __future__ import annotations

from typing import Any

import numpy as np

from medvlm_audit.stats.types import _NAN

__all__ = ['corpus_bleu', 'rouge_pair_scores', 'rouge_scores']


def corpus_bleu(hypotheses: Any, references: Any) -> float:
    """Corpus BLEU (sacrebleu defaults: 13a tokens, exponential smoothing) as a fraction; one reference each.

    >>> round(corpus_bleu(["the heart is normal in size"], ["the heart is normal in size"]), 6)
    1.0
    """
    import sacrebleu

    h = [str(x) for x in hypotheses]
    r = [str(x) for x in references]
    if len(h) != len(r):
        raise ValueError(f"{len(h)} hypotheses but {len(r)} references")
    if not h:
        return _NAN
    return float(sacrebleu.corpus_bleu(h, [r], force=True).score) / 100.0


def rouge_pair_scores(hypotheses: Any, references: Any) -> dict[str, np.ndarray]:
    """Per-pair ROUGE-1 and ROUGE-L F-measures (rouge-score, Porter stemming), ``hypotheses[i]`` against
    ``references[i]``.

    >>> rouge_pair_scores(["heart normal", "no effusion"], ["heart size normal", "no effusion"])["rouge1"]
    array([0.8, 1. ])
    """
    from rouge_score import rouge_scorer

    h = [str(x) for x in hypotheses]
    r = [str(x) for x in references]
    if len(h) != len(r):
        raise ValueError(f"{len(h)} hypotheses but {len(r)} references")
    sc = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    r1 = np.empty(len(h))
    rl = np.empty(len(h))
    for i, (a, b) in enumerate(zip(h, r)):
        s = sc.score(b, a)
        r1[i] = s["rouge1"].fmeasure
        rl[i] = s["rougeL"].fmeasure
    return {"rouge1": r1, "rougeL": rl}


def rouge_scores(hypotheses: Any, references: Any) -> dict[str, float]:
    """Mean ROUGE-1 and ROUGE-L F-measures (rouge-score, Porter stemming) over paired reports.

    >>> rouge_scores(["heart normal"], ["heart size normal"])["rouge1"]   # P 1, R 2/3
    0.8
    """
    per = rouge_pair_scores(hypotheses, references)
    if not per["rouge1"].shape[0]:
        return {"rouge1": _NAN, "rougeL": _NAN}
    return {k: float(v.mean()) for k, v in per.items()}

