"""Diversity of generated reports (paper 002): template diversity, type-token ratio, 1 - Self-BLEU, semantic diversity."""

from __future__ import annotations

from typing import Any

import numpy as np

from medvlm_audit.stats.types import _NAN
from medvlm_audit.suites.reports.terms import report_tokens

__all__ = ['self_bleu', 'semantic_diversity', 'template_diversity', 'type_token_ratio']


def template_diversity(texts: Any) -> float:
    """Share of unique reports (after lowercasing and collapsing whitespace); nan for an empty corpus.

    >>> template_diversity(["No acute disease.", "no  acute disease.", "Small effusion."])
    0.6666666666666666
    """
    norm = [" ".join(str(t).lower().split()) for t in texts]
    return len(set(norm)) / len(norm) if norm else _NAN


def type_token_ratio(texts: Any) -> float:
    """Corpus type-token ratio: distinct word tokens / all word tokens (lowercase, stop words kept).

    >>> type_token_ratio(["the heart is normal", "the lungs are clear"])   # 7 types / 8 tokens
    0.875
    """
    toks = [w for t in texts for w in report_tokens(str(t), None)]
    return len(set(toks)) / len(toks) if toks else _NAN


def _sample_indices(n: int, max_n: int | None, seed: int) -> np.ndarray:
    if max_n is None or n <= max_n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=max_n, replace=False))


def self_bleu(texts: Any, max_n: int | None = 1000, seed: int = 0) -> float:
    """Self-BLEU (Zhu et al. 2018): mean sentence BLEU of each report against all the others as references, as a
    fraction; identical to sacrebleu's ``BLEU(effective_order=True).sentence_score(h, others)`` per report (13a
    tokens, exponential smoothing, closest reference length), but each report's n-grams are extracted once and
    the clip count "max over the others" comes from each n-gram's two largest counts. Above ``max_n`` reports a
    seeded sample of ``max_n`` is used. nan below two reports. ``1 - self_bleu`` is the diversity reported.

    >>> round(self_bleu(["no acute disease", "no acute disease"]), 6)
    1.0
    """
    from sacrebleu.metrics import BLEU
    from sacrebleu.metrics.helpers import extract_all_word_ngrams

    t = [str(x) for x in texts]
    idx = _sample_indices(len(t), max_n, seed)
    n = int(idx.shape[0])
    if n < 2:
        return _NAN
    bleu = BLEU(effective_order=True)
    grams = []
    lens = np.empty(n, dtype=np.int64)
    top: dict[Any, list[int]] = {}  # ngram -> [max count, its owner, second max count]
    for j, i in enumerate(idx):
        g, L = extract_all_word_ngrams(bleu._preprocess_segment(t[i]), 1, bleu.max_ngram_order)
        grams.append(g)
        lens[j] = L
        for k, c in g.items():
            e = top.get(k)
            if e is None:
                top[k] = [c, j, 0]
            elif c > e[0]:
                e[2], e[0], e[1] = e[0], c, j
            elif c > e[2]:
                e[2] = c
    order_ = bleu.max_ngram_order
    scores = np.empty(n)
    for j in range(n):
        others = np.delete(lens, j)
        diff = np.abs(others - lens[j])
        best = diff.min()
        ref_len = int(others[diff == best].min())
        correct = [0] * order_
        total = [0] * order_
        for k, c in grams[j].items():
            o = len(k) - 1
            total[o] += c
            e = top[k]
            m = e[2] if e[1] == j else e[0]
            if m:
                correct[o] += min(c, m)
        scores[j] = bleu._compute_score_from_stats([int(lens[j]), ref_len] + correct + total).score
    return float(scores.mean()) / 100.0


def semantic_diversity(embeddings: Any, weights: Any = None) -> float:
    """1 - mean cosine similarity over all pairs of distinct reports, from one embedding row per distinct text
    and its multiplicity ``weights`` (None: 1 each). With unit rows e_u and S = sum_u m_u e_u, the sum over the
    n(n-1) ordered pairs is |S|^2 - n, so the cost is linear. nan below two reports.

    >>> round(semantic_diversity([[1.0, 0.0], [0.0, 1.0]], weights=[2, 1]), 6)   # pairs: 1 same, 2 orthogonal
    0.666667
    """
    E = np.asarray(embeddings, dtype=np.float64)
    if E.ndim != 2:
        raise ValueError(f"embeddings must be 2-D, got shape {E.shape}")
    m = np.ones(E.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    norms = np.linalg.norm(E, axis=1, keepdims=True)
    E = E / np.where(norms > 0, norms, 1.0)
    n = float(m.sum())
    if n < 2:
        return _NAN
    S = (m[:, None] * E).sum(axis=0)
    self_sim = float((m * (E * E).sum(axis=1)).sum())
    return 1.0 - (float(S @ S) - self_sim) / (n * (n - 1))

